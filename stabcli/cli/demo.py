"""``stabcli demo``: the whole pipeline on the bundled synthetic sample data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from stabcli.cli.options import jobs_option
from stabcli.cli.output import err, info, out, progress, warn, wrote
from stabcli.cli.pretrain import exit_on_failures, report_pretrain
from stabcli.reports.text import literal


def demo_cmd(
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Where the demo writes its run sets and reports.")
    ] = Path("stabcli-demo"),
    jobs: Annotated[int | None, jobs_option("Runs and downstream fits in parallel [default: available cores].")] = None,
) -> None:
    """Run the pipeline on the bundled synthetic sample data (under a minute on 2 cores).

    Trains 5 item2vec runs (dim 32) on sample sessions into OUT/runs, audits them with the
    sample's item genres as downstream labels (report also in OUT/audit.json, OUT/audit.md
    and OUT/plots), featurizes every run with the same
    random Fourier directions (M = 64) into OUT/runs-phi64, audits that too and shows both
    side by side. Then a drift step: one run on a refreshed copy of the sessions in which 12
    Horror items appear in Comedy sessions instead (OUT/runs-refreshed), compared with run 0 against
    the noise band of the 5 runs (OUT/drift.json, OUT/drift.md). Rerunning reuses the
    trained runs.

    Example:

        stabcli demo --out /tmp/stabcli-demo
    """
    from stabcli.commands.demo import demo

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    with progress() as bar:
        runs_task = bar.add_task("runs", total=None)
        epochs_task = bar.add_task("epochs", total=None)

        def on_progress(p: Any) -> None:
            bar.update(runs_task, completed=p.runs_done, total=p.runs_total)
            bar.update(epochs_task, completed=p.epochs_done, total=p.epochs_total)

        result = demo(
            out_dir,
            jobs,
            on_step=lambda text: err.print(literal(text), soft_wrap=True),
            on_progress=on_progress,
            on_warning=warn,
            on_figure=wrote,
            step_summary=Path(summary) if summary else None,
        )
    _render(result)


def _render(result: Any) -> None:
    """The demo's tables and reports on stdout, in the order it made them."""
    from stabcli.commands.demo import DEMO_MOVED_GENRE
    from stabcli.reports import audit_render, compare_render, drift_render

    report_pretrain(result.runs, "table")  # exits 2 when a run failed
    out.print()
    audit_render.render_terminal(result.audit, out)
    out.print()
    if result.comparison is not None:
        compare_render.render_terminal(result.comparison, out)
    out.print(
        "Measured, not assumed: featurization helps where its column is more stable; see README "
        "'When featurization helps'.",
        highlight=False,
    )
    out.print()
    exit_on_failures(result.refreshed)
    drift_render.render_terminal(result.drift, out)
    moved = set(result.moved)
    found = sum(t.key in moved for t in result.drift.drift.top)
    out.print(
        literal(
            f"{found} of the {len(result.drift.drift.top)} listed keys are the {len(moved)} moved "
            f"{DEMO_MOVED_GENRE} items ({', '.join(result.moved)}); see docs/drift.md for how to read this."
        ),
        soft_wrap=True,
    )
    pages = [result.out / name for name in ("audit.html", "compare.html", "drift.html")]
    info(f"HTML reports to open in a browser: {', '.join(map(str, pages))}")
