"""Renderers for the audit report dict: rich terminal view, Markdown, PNG plots.

JSON is the dict itself (``json.dumps``); every renderer reads the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    render_checks(report, console)


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
    ax.hist(rep["variance_per_dim"], bins=20, color="#4c72b0")
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
    return written

