"""``stabcli compare``: two audits side by side, each difference against its run-to-run spread."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stabcli.cli.options import (
    HtmlPath,
    JsonPath,
    KnnK,
    MarkdownPath,
    Mlflow,
    MlflowExperiment,
    Quiet,
    ReportForce,
    ReportFormat,
    check_option,
    knn_queries_option,
    seed_option,
)
from stabcli.cli.output import render_report, report_files, set_quiet, warn, wrote


def compare_cmd(
    a: Annotated[Path, typer.Argument(metavar="A", help="A run set, or a saved audit report (audit --json).")],
    b: Annotated[Path, typer.Argument(metavar="B", help="A run set, or a saved audit report (audit --json).")],
    normalize: Annotated[bool, typer.Option("--normalize", help="Run sets: L2-normalize every row first.")] = False,
    pairs: Annotated[
        int,
        typer.Option("--pairs", min=1, metavar="N", help="Run sets: key pairs for the inner-product noise share."),
    ] = 10_000,
    knn_k: KnnK = 10,
    knn_queries: Annotated[
        int | None,
        knn_queries_option(
            "Run sets: sampled query keys for k-NN overlap [default: every key up to 10,000 keys, else 1,000]."
        ),
    ] = None,
    seed: Annotated[int, seed_option("Run sets: seed for the sampled pairs and queries.")] = 0,
    check: Annotated[list[str], check_option("compare.knn_overlap.delta>=0")] = [],  # noqa: B006
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    force: ReportForce = False,
    mlflow: Mlflow = False,
    mlflow_experiment: MlflowExperiment = None,
    quiet: Quiet = False,
) -> None:
    """Compare two audits: every measure with both values, B − A, and whether the difference
    exceeds each side's run-to-run spread.

    A and B are run sets (audited here, both with the same options) or saved audit JSON
    reports, e.g. raw against featurized, last week's against this week's, two training
    configurations. Spreads are min–max over run pairs (representation measures) or runs
    (downstream metrics); audits written before stabcli 0.3 have none.

    Examples:

        stabcli compare runs/exp1 runs/exp1-phi

        stabcli compare last-week.json this-week.json --check 'compare.knn_overlap.delta>=0'

        stabcli compare runs/dim32 runs/dim64 --html compare.html --json compare.json
    """
    from stabcli.commands.compare import compare
    from stabcli.reports.compare_render import render_terminal

    set_quiet(quiet)
    report = compare(
        a,
        b,
        normalize=normalize,
        pairs=pairs,
        knn_k=knn_k,
        knn_queries=knn_queries,
        seed=seed,
        checks=check,
        **report_files(json_path, markdown_path, None, None, force, html_path, mlflow, mlflow_experiment),
        on_warning=warn,
        on_figure=wrote,
    )
    render_report(report, fmt, render_terminal)
