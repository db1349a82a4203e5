"""Renderers for the audit report dict: rich terminal view, Markdown, PNG plots.

JSON is the dict itself (``json.dumps``); every renderer reads the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

_BARS = " ▁▂▃▄▅▆▇█"


def verdict(report: dict[str, Any]) -> str:
    """One line: e.g. ``coordinates: 91% noise · inner products: 0.4% noise · neighbours: 62% stable``."""
    rep = report["representation"]
    return (f"coordinates: {_pct(rep['noise_share'])} noise · "
            f"aligned: {_pct(rep['aligned_noise_share'])} noise · "
            f"inner products: {_pct(rep['inner_product_noise_share'])} noise · "
            f"neighbours: {_pct(rep['knn_overlap'])} stable")


def _pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0%}" if value >= 0.1 or value == 0 else f"{value:.1%}" if value >= 0.001 else f"{value:.2%}"


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}"


def metric_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, value, how to read it) rows shared by the terminal and Markdown views."""
    rep = report["representation"]
    ratio = rep["inner_to_coordinate_ratio"]
    return [
        ("noise share (coordinates)", _pct(rep["noise_share"]), "share of coordinate energy that is run-to-run variance; 0 = identical runs"),
        ("aligned noise share", _pct(rep["aligned_noise_share"]), f"after Procrustes to the consensus ({rep['procrustes_iterations']} iterations): noise no rotation explains"),
        ("inner-product noise share", _pct(rep["inner_product_noise_share"]),
         f"same share on cosine similarities of {rep['inner_product_pairs']:,} key pairs"
         + (f"; {ratio:.3g}× the coordinate share" if ratio is not None else "")),
        (f"k-NN overlap@{rep['knn_k']}", _num(rep["knn_overlap"], 3), f"shared neighbours between runs, {rep['knn_queries']:,} queries (chance {rep['knn_chance']:.2g})"),
        ("PIP loss", _num(rep["pip_loss"]), f"‖H_r H_rᵀ − H_s H_sᵀ‖_F; relative to ‖HHᵀ‖_F: {_num(rep['pip_loss_relative'], 3)}"),
        ("linear CKA", _num(rep["cka"], 4), "1 = same representation up to rotation and scale"),
        ("eigenspace overlap", _num(rep["eigenspace_overlap"], 4), "overlap of left singular spaces; 1 = same span"),
        ("semantic displacement", _num(rep["semantic_displacement"], 3), "mean cosine distance after pairwise Procrustes"),
    ]


def sparkline(counts: list[int]) -> str:
    top = max(counts) or 1
    return "".join(_BARS[round(c / top * (len(_BARS) - 1))] for c in counts)


def render_terminal(report: dict[str, Any], console: Console) -> None:
    inp, rep, tr = report["input"], report["representation"], report["training"]
    console.print(Text(verdict(report), style="bold"), soft_wrap=True)
    console.print(f"{inp['runs']} runs × {inp['keys']:,} keys × {inp['dim']} dims"
                  + (f" ({inp['dropped_keys']:,} keys not in every run left out)" if inp["dropped_keys"] else "")
                  + (" · rows L2-normalized" if inp["normalized"] else ""), highlight=False)

    table = Table(title="Representation stability", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("reading", style="dim")
    for row in metric_rows(report):
        table.add_row(*row)
    console.print(table)
    hist = rep["noise_share_histogram"]
    console.print(f"per-dimension noise share, 0 → 1: [bold]{sparkline(hist['counts'])}[/]  counts {hist['counts']}", highlight=False)

    if rep["least_stable"]:
        least = Table(title=f"Least stable keys (top {len(rep['least_stable'])} by aligned variance)", title_justify="left")
        least.add_column("key")
        least.add_column("aligned variance", justify="right")
        least.add_column(f"k-NN overlap@{rep['knn_k']}", justify="right")
        for item in rep["least_stable"]:
            least.add_row(item["key"], _num(item["aligned_variance"]), _num(item["knn_overlap"], 3))
        console.print(least)

    if tr["final_loss_mean"] is not None or tr["by_epoch"]:
        training = Table(title="Training convergence", title_justify="left")
        training.add_column("epoch", justify="right")
        training.add_column("mean loss", justify="right")
        training.add_column("noise share", justify="right")
        for row in tr["by_epoch"]:
            training.add_row(str(row["epoch"]), _num(row["loss_mean"]), _pct(row["noise_share"]))
        console.print(training)
        if tr["final_loss_mean"] is not None:
            console.print(f"final loss: mean {_num(tr['final_loss_mean'])}, std {_num(tr['final_loss_std'])}, "
                          f"CV {_num(tr['final_loss_cv'], 3)}", highlight=False)
    if report["downstream"]:
        render_downstream(report["downstream"], console)
    render_checks(report, console)


def render_downstream(ds: dict[str, Any], console: Console) -> None:
    headers, rows = downstream_table(ds)
    table = Table(title="Downstream fluctuation across runs", title_justify="left", box=box.SIMPLE_HEAD)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=i > 0,
                         overflow="fold" if i == 0 else "ellipsis")
    chosen = ds["recommendation"]["variant"]
    for row in rows:
        table.add_row(*row, style="bold green" if row[0] == chosen else None)
    console.print(table)
    for note in downstream_notes(ds):
        console.print(note, style="yellow" if note.startswith("warning") else "dim", highlight=False, soft_wrap=True)
    console.print(Text(f"recommendation: {ds['recommendation']['reason']}", style="bold"), soft_wrap=True)


def _mean_std(entry: dict[str, Any], metric: str) -> str:
    mean, std = entry[f"{metric}_mean"], entry[f"{metric}_std"]
    return f"{mean:.3f}" + ("" if std is None else f" ({std:.3f})")


def _fixed(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def downstream_table(ds: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the paper's Table 1 layout plus churn and stale columns."""
    classification = ds["task"] == "classification"
    metrics = ("accuracy", "f1_macro") if classification else ("r2", "rmse")
    primary = metrics[0]
    headers = ["variant", "dims", *(("accuracy", "macro-F1") if classification else ("R²", "RMSE")),
               "churn", "stale " + ("acc." if classification else "R²"), "drop"]
    rows = []
    for name, entry in ds["variants"].items():
        churn = entry["churn"]
        rows.append([
            name, str(entry["dim"]), *(_mean_std(entry, metric) for metric in metrics),
            "—" if churn is None else (f"{churn:.1%}" if classification else f"{churn:.3f}"),
            _fixed(entry[f"stale_{primary}_mean"]), _fixed(entry["stale_drop"]),
        ])
    return headers, rows


def downstream_notes(ds: dict[str, Any]) -> list[str]:
    """Lines under the table: the protocol in one line, baselines, warnings."""
    notes = [f"{ds['model']} on {Path(ds['labels']).name} ({ds['task']}): {ds['train']:,} train / {ds['test']:,} test keys, "
             f"one split (seed {ds['split_seed']}) for every run; mean (std over runs); stale = the model of "
             f"{ds['reference']} applied unchanged to the other runs"]
    if ds["task"] == "regression":
        notes.append("churn = root-mean-square difference between two runs' predictions, in label units")
    if ds["majority_accuracy"] is not None:
        notes.append(f"{ds['classes']} classes; always predicting the majority class scores accuracy {ds['majority_accuracy']:.3f}")
    if ds["skipped_keys"]:
        notes.append(f"{ds['skipped_keys']:,} keys have no label and were skipped")
    if ds["not_converged"]:
        notes.append(f"warning: {ds['not_converged']} fits stopped before the solver converged; their spread includes solver noise")
    return notes


COMPARED = [("noise_share", "coordinate noise", _pct), ("aligned_noise_share", "aligned noise", _pct),
            ("inner_product_noise_share", "inner-product noise", _pct), ("knn_overlap", "k-NN overlap", lambda v: _num(v, 3)),
            ("cka", "linear CKA", lambda v: _num(v, 4)), ("semantic_displacement", "semantic displacement", lambda v: _num(v, 3))]


def comparison_table(reports: dict[str, dict[str, Any]]) -> Table:
    """Representation metrics of several variants side by side (e.g. raw h and phi(h))."""
    table = Table(title="Raw vs featurized, same runs", title_justify="left")
    table.add_column("metric")
    for name in reports:
        table.add_column(name, justify="right")
    for key, label, fmt in COMPARED:
        table.add_row(label, *[fmt(r["representation"][key]) for r in reports.values()])
    return table


def render_checks(report: dict[str, Any], console: Console) -> None:
    """Checks last, failed ones in red, so CI logs end with what failed."""
    checks = report["checks"]
    if not checks:
        return
    for check in sorted(checks, key=lambda c: c["passed"], reverse=True):
        mark = "[green]PASS[/]" if check["passed"] else "[bold red]FAIL[/]"
        console.print(f"{mark} {check['name']} (value {_num(check['value'])})", highlight=False)


def render_markdown(report: dict[str, Any]) -> str:
    inp, rep, tr = report["input"], report["representation"], report["training"]
    lines = [
        "## stabcli audit",
        "",
        f"**{verdict(report)}**",
        "",
        f"{inp['runs']} runs × {inp['keys']:,} keys × {inp['dim']} dims"
        + (f"; {inp['dropped_keys']:,} keys not in every run left out" if inp["dropped_keys"] else ""),
        "",
        "| metric | value | reading |",
        "| --- | ---: | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in metric_rows(report)]
    if rep["least_stable"]:
        lines += ["", "Least stable keys (by aligned variance):", "",
                  f"| key | aligned variance | k-NN overlap@{rep['knn_k']} |", "| --- | ---: | ---: |"]
        lines += [f"| `{i['key']}` | {_num(i['aligned_variance'])} | {_num(i['knn_overlap'], 3)} |" for i in rep["least_stable"]]
    if tr["final_loss_mean"] is not None:
        lines += ["", f"Final training loss: mean {_num(tr['final_loss_mean'])}, std {_num(tr['final_loss_std'])}, "
                      f"CV {_num(tr['final_loss_cv'], 3)}."]
    if report["downstream"]:
        ds = report["downstream"]
        headers, rows = downstream_table(ds)
        lines += ["", "### Downstream fluctuation across runs", "", "| " + " | ".join(headers) + " |",
                  "| --- " + "| ---: " * (len(headers) - 1) + "|"]
        lines += ["| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |" for row in rows]
        lines += [""] + [f"- {note}" for note in downstream_notes(ds)]
        lines += ["", f"**Recommendation:** {ds['recommendation']['reason']}"]
    if report["checks"]:
        lines += ["", "| check | value | result |", "| --- | ---: | --- |"]
        lines += [f"| `{c['name']}` | {_num(c['value'])} | {'pass' if c['passed'] else '**FAIL**'} |" for c in report["checks"]]
    return "\n".join(lines) + "\n"


def write_plots(report: dict[str, Any], directory: Path) -> list[Path]:
    """PNG figures in the paper's layout (Fig. 1a–1d); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    rep, tr = report["representation"], report["training"]
    written = []

    def save(fig: Any, name: str) -> None:
        path = directory / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.hist([v for v in rep["variance_per_dim"] if v is not None], bins=20, color="#4c72b0")  # null: beyond float64
    ax.set(xlabel="mean empirical variance across runs", ylabel="dimensions", title="Per-dimension variance (Fig. 1a)")
    save(fig, "fig1a_variance_per_dim.png")

    if tr["loss_by_run"]:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for i, losses in enumerate(tr["loss_by_run"]):
            points = [(e + 1, v) for e, v in enumerate(losses) if v is not None]
            if points:
                ax.plot(*zip(*points), marker=".", alpha=0.7, label=report["input"]["run_names"][i])
        ax.set(xlabel="epoch", ylabel="training loss", title="Loss per run (Fig. 1b)")
        save(fig, "fig1b_loss_by_epoch.png")

    epochs = [(row["epoch"], row["noise_share"]) for row in tr["by_epoch"] if row["noise_share"] is not None]
    if epochs:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(*zip(*epochs), marker="o")
        ax.set(xlabel="epoch", ylabel="coordinate noise share", ylim=(0, 1), title="Noise share by epoch (Fig. 1c)")
        save(fig, "fig1c_noise_by_epoch.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = ["coordinates", "aligned", "inner products"]
    values = [rep["noise_share"], rep["aligned_noise_share"], rep["inner_product_noise_share"]]
    ax.bar(names, values, color=["#c44e52", "#dd8452", "#55a868"])
    ax.set(ylabel="noise share", ylim=(0, 1), title="Coordinate vs inner-product noise (Fig. 1d)")
    for x, v in enumerate(values):
        ax.text(x, v + 0.02, _pct(v), ha="center")
    save(fig, "fig1d_coordinate_vs_inner_product.png")

    if report["downstream"]:
        ds = report["downstream"]
        primary, label = ("accuracy", "test accuracy") if ds["task"] == "classification" else ("r2", "test R²")
        names = list(ds["variants"])
        fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 3.8))
        for x, name in enumerate(names):
            values = ds["variants"][name][f"{primary}_by_run"]
            offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
            ax.scatter(x + np.asarray(offsets), values, s=18, color="#4c72b0", alpha=0.8,
                       marker="o" if len(values) > 1 else "D")
            ax.hlines(np.mean(values), x - 0.3, x + 0.3, color="#c44e52")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set(ylabel=label, title="Downstream metric per run (one dot per run, line = mean)")
        save(fig, "fig2_downstream_spread.png")
    return written

