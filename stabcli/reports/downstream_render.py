"""Terminal and Markdown renderings of the downstream sections of the audit report
(``downstream``: the label task; ``next_item``: the recommendation task), and their figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from stabcli.reports.audit_report import DownstreamSection, NextItemSection
from stabcli.reports.layout import print_table
from stabcli.reports.text import literal


def render_downstream(ds: DownstreamSection, console: Console) -> None:
    headers, rows = downstream_table(ds)
    table = Table(box=box.SIMPLE_HEAD)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
    chosen = ds.recommendation.variant
    for row in rows:
        table.add_row(*[literal(cell) for cell in row], style="bold green" if row[0] == chosen else None)
    print_table(console, table, literal("Downstream fluctuation across runs", "italic"))  # whole or stacked
    for note in downstream_notes(ds):
        console.print(literal(note, "yellow" if note.startswith("warning") else "dim"), soft_wrap=True)
    console.print(literal(f"recommendation: {ds.recommendation.reason}", "bold"), soft_wrap=True)


def _mean_std(entry: Any, metric: str) -> str:
    mean, std = entry.metric(f"{metric}_mean"), entry.metric(f"{metric}_std")
    return f"{mean:.3f}" + ("" if std is None else f" ({std:.3f})")


def _fixed(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


_TASK_METRICS = {
    "classification": ((("accuracy", "accuracy"), ("f1_macro", "macro-F1")), "acc."),
    "multilabel": ((("f1_micro", "micro-F1"), ("f1_macro", "macro-F1"), ("subset_accuracy", "subset acc.")), "µF1"),
    "regression": ((("r2", "R²"), ("rmse", "RMSE")), "R²"),
}


def downstream_table(ds: DownstreamSection) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the paper's Table 1 layout plus churn, per-key and stale columns."""
    metrics, stale_label = _TASK_METRICS[ds.task]
    primary = metrics[0][0]
    regression = ds.task == "regression"
    headers = [
        "variant",
        "dims",
        *(label for _, label in metrics),
        "churn",
        "range" if regression else "keys flip",
        "stale " + stale_label,
        "drop",
    ]
    rows = []
    for name, entry in ds.variants.items():
        churn, flips = entry.churn, entry.flips
        if flips is None:
            unstable = "—"
        elif regression:
            unstable = _fixed(flips.prediction_range_median)
        else:
            unstable = f"{flips.unstable_keys / flips.keys:.1%}" if flips.keys else "—"
        rows.append(
            [
                name,
                str(entry.dim),
                *(_mean_std(entry, metric) for metric, _ in metrics),
                "—" if churn is None else (f"{churn:.3f}" if regression else f"{churn:.1%}"),
                unstable,
                _fixed(entry.metric(f"stale_{primary}_mean")),
                _fixed(entry.stale_drop),
            ]
        )
    return headers, rows


def downstream_notes(ds: DownstreamSection) -> list[str]:
    """Lines under the table: the protocol in one line, baselines, the keys that flip most, warnings."""
    params = ", ".join(f"{k}={v}" for k, v in ds.model_params.items())
    notes = [
        f"{ds.model}{f'({params})' if params else ''} on {Path(ds.labels).name} ({ds.task}): {ds.train:,} train / "
        f"{ds.test:,} test keys, one split (seed {ds.split_seed}) for every run; mean (std over runs); stale = the "
        f"model of {ds.reference} applied unchanged to the other runs"
    ]
    if ds.task == "regression":
        notes.append(
            "churn = root-mean-square difference between two runs' predictions, range = median over test keys "
            "of max − min prediction over runs, both in label units"
        )
    else:
        decisions = "(key, label) decisions" if ds.task == "multilabel" else "test predictions"
        notes.append(
            f"churn = share of {decisions} that differ between two runs; keys flip = share of test keys "
            "whose decision differs in at least one pair of runs"
        )
    if ds.task == "multilabel":
        notes.append(f"{ds.classes} labels, {ds.labels_per_key:.2f} per key on average; one-vs-rest fits")
    if ds.majority_accuracy is not None:
        notes.append(
            f"{ds.classes} classes; always predicting the majority class scores accuracy {ds.majority_accuracy:.3f}"
        )
    notes.extend(_flip_notes(ds))
    if ds.skipped_keys:
        notes.append(f"{ds.skipped_keys:,} keys have no label and were skipped")
    if ds.not_converged:
        notes.append(
            f"warning: {ds.not_converged} fits stopped before the solver converged; their spread includes solver noise"
        )
    return notes


def _flip_notes(ds: DownstreamSection) -> list[str]:
    """Raw h's directional flip rates and the keys that flip most."""
    h = ds.variants.get("h")
    if h is None or h.flips is None:
        return []
    flips, notes = h.flips, []
    if flips.negative_to_positive is not None and flips.positive_to_negative is not None:
        positive = f" ({flips.positive_class!r} positive)" if flips.positive_class else ""
        notes.append(
            f"raw h, reference model → refit models{positive}: {flips.negative_to_positive:.1%} of negative "
            f"decisions become positive, {flips.positive_to_negative:.1%} of positive ones negative"
        )
    if flips.most_unstable:
        shown = flips.most_unstable[:5]
        fmt = "{:.3g}" if ds.task == "regression" else "{:.0%}"
        listed = ", ".join(f"{k.name or k.key} {fmt.format(k.value)}" for k in shown)
        what = "widest prediction ranges" if ds.task == "regression" else "flip most (share of run pairs)"
        notes.append(f"raw h, test keys that {what}: {listed}")
    return notes


def next_item_table(section: NextItemSection) -> tuple[list[str], list[list[str]]]:
    """One row per variant, profile and K: Recall and NDCG mean (std), list overlap against
    chance, and (h) the stale profiles' recall, raw and aligned."""
    headers = [
        "variant",
        "profile",
        "K",
        "Recall",
        "NDCG",
        "Jaccard (chance)",
        "RBO (chance)",
        "stale raw",
        "stale aligned",
    ]
    rows = []
    for name, by_kind in section.variants.items():
        for kind, per_k in by_kind.items():
            for k, m in per_k.items():
                rows.append(
                    [
                        name,
                        kind,
                        k,
                        f"{m.recall_mean:.3f}" + ("" if m.recall_std is None else f" ({m.recall_std:.3f})"),
                        f"{m.ndcg_mean:.3f}" + ("" if m.ndcg_std is None else f" ({m.ndcg_std:.3f})"),
                        "—" if m.jaccard is None else f"{m.jaccard:.3f} ({m.jaccard_chance:.3f})",
                        "—" if m.rbo is None else f"{m.rbo:.3f} ({m.rbo_chance:.3f})",
                        _fixed(m.stale_recall_raw),
                        _fixed(m.stale_recall_aligned),
                    ]
                )
    return headers, rows


def next_item_notes(section: NextItemSection) -> list[str]:
    """The protocol in three lines: who was scored, how the file was read, and how."""
    from stabcli.inputs.corpus import describe_reading

    skipped = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in section.skipped_users.items() if v)
    sample = (
        f"a seeded sample (seed {section.user_seed}) of {section.evaluated_users:,} of {section.evaluable_users:,}"
        if section.sampled
        else f"all {section.evaluated_users:,}"
    )
    return [
        f"{Path(section.interactions).name}: {section.users:,} users, {sample} evaluable users scored"
        + (f" (left out: {skipped})" if skipped else "")
        + f"; each user's last item held out, mean history {section.history_mean:.1f} items; "
        f"{section.items:,} items ranked by cosine, history excluded",
        f"{Path(section.interactions).name} read as {describe_reading(section.corpus)}",
        "Recall/NDCG: mean (std over runs); Jaccard and RBO: overlap of a user's top-K lists between two runs "
        f"(1 = identical; chance in parentheses); stale: {section.reference}'s user profiles against the other "
        "runs' items, raw and rotated into its frame",
    ]


def render_next_item(section: NextItemSection, console: Console) -> None:
    headers, rows = next_item_table(section)
    table = Table(box=box.SIMPLE_HEAD)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < 2 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*[literal(cell) for cell in row])
    print_table(console, table, literal("Next-item recommendation across runs", "italic"), keys=3)
    for note in next_item_notes(section):
        console.print(literal(note, "dim"), soft_wrap=True)


def downstream_figure(plt: Any, ds: DownstreamSection) -> Any:
    primary, name = _TASK_METRICS[ds.task][0][0]
    label = f"test {name}"
    names = list(ds.variants)
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 3.8))
    for x, name in enumerate(names):
        values = ds.variants[name].metric(f"{primary}_by_run")
        offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
        ax.scatter(
            x + np.asarray(offsets), values, s=18, color="#4c72b0", alpha=0.8, marker="o" if len(values) > 1 else "D"
        )
        ax.hlines(np.mean(values), x - 0.3, x + 0.3, color="#c44e52")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set(ylabel=label, title="Downstream metric per run (one dot per run, line = mean)")
    return fig
