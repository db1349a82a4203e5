"""``stabcli compare``: two audits side by side, each difference against its run-to-run spread."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
from stabcli.cli.output import (
    EXIT_FAILED_CHECK,
    Renderings,
    open_tracker,
    out,
    publish,
    report_outputs,
    set_quiet,
    warn,
)


def compare_cmd(
    ctx: typer.Context,
    a: Annotated[Path, typer.Argument(metavar="A", help="A run set, or a saved audit report (audit --json).")],
    b: Annotated[Path, typer.Argument(metavar="B", help="A run set, or a saved audit report (audit --json).")],
    normalize: Annotated[bool, typer.Option("--normalize", help="Run sets: L2-normalize every row first.")] = False,
    pairs: Annotated[
        int,
        typer.Option("--pairs", min=1, metavar="N", help="Run sets: key pairs for the inner-product noise share."),
    ] = 10_000,
    knn_k: KnnK = 10,
    knn_queries: Annotated[int, knn_queries_option("Run sets: sampled query keys for k-NN overlap.")] = 1_000,
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
    from stabcli.commands.audit import AuditOptions, build_report, load_runs
    from stabcli.commands.compare import compare_audits, evaluate_checks, load_sides, validate_checks
    from stabcli.reports.compare_render import render_html, render_markdown, render_terminal
    from stabcli.reports.schema import dumps, to_json

    set_quiet(quiet)
    params = dict(ctx.params)  # the options as given, for --mlflow
    validate_checks(check)  # a typo fails before any input is read
    options = AuditOptions(normalize=normalize, pairs=pairs, knn_k=knn_k, knn_queries=knn_queries, seed=seed)
    plan = report_outputs([a, b], None, json_path, markdown_path, None, None, None, force, html_path)
    plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
    tracker = open_tracker(mlflow, mlflow_experiment)

    def audit(path: Path) -> dict[str, Any]:
        return to_json(build_report(load_runs([path], on_warning=warn), options))

    report = evaluate_checks(compare_audits(*load_sides([a, b], audit)), check)
    text = dumps(report)
    renderings = Renderings(
        text, lambda _: render_markdown(report), list, lambda: None, lambda *_: render_html(report, text), 0
    )
    publish(
        plan,
        renderings,
        command="compare",
        fmt=fmt,
        terminal=lambda: render_terminal(report, out),
        json_path=json_path,
        markdown_path=markdown_path,
        html_path=html_path,
        tracker=tracker,
        params=params,
    )
    if not report.passed:
        raise typer.Exit(EXIT_FAILED_CHECK)
