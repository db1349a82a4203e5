"""``stabcli audit``: how much of an embedding is run-to-run noise, and which parts are stable."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stabcli.cli.options import (
    DownstreamModel,
    HtmlPath,
    InputFormat,
    JsonPath,
    KeyNames,
    Keys,
    KnnK,
    MarkdownPath,
    Mlflow,
    MlflowExperiment,
    Quiet,
    ReportForce,
    ReportFormat,
    SplitSeed,
    Task,
    TestSize,
    TrustPickle,
    check_option,
    encoding_option,
    jobs_option,
    knn_queries_option,
    labels_option,
    per_key_option,
    plots_option,
    reference_option,
    scheduler_option,
    seed_option,
    top_option,
)
from stabcli.cli.output import (
    EXIT_FAILED_CHECK,
    Renderings,
    Stages,
    open_tracker,
    out,
    publish,
    report_outputs,
    set_quiet,
    warn,
)
from stabcli.errors import UsageError
from stabcli.inputs.embeddings import ReadOptions
from stabcli.inputs.textfile import check_encoding

if TYPE_CHECKING:
    from stabcli.commands.audit import AuditOptions
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.reports.audit_report import AuditReport


def comma_list(value: str | None, kind: type, option: str) -> list[Any] | None:
    """``'16,32'`` → ``[16, 32]``; a bad item is a usage error naming the option."""
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        parsed = [kind(item) for item in items]
    except ValueError:
        raise UsageError(f"{option} {value!r}: expected a comma-separated list of {kind.__name__} values") from None
    if not parsed:
        raise UsageError(f"{option}: empty list")
    return parsed


def audit_and_render(
    inputs: list[Path],
    options: AuditOptions,
    checks: list[str],
    fmt: str,
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    downstream: DownstreamOptions | None = None,
    key_names: Path | None = None,
    per_key: Path | None = None,
    encoding: str | None = None,
    force: bool = False,
    read: ReadOptions | None = None,
    frequencies: Path | None = None,
    html_path: Path | None = None,
    mlflow: bool = False,
    mlflow_experiment: str | None = None,
    options_given: dict[str, Any] | None = None,
) -> AuditReport:
    """Validate, load, compute, write every requested rendering (and log them to MLflow with
    ``mlflow``: ``options_given`` are the params); returns the report."""
    from stabcli.commands.audit import build_report, load_runs, validate_checks
    from stabcli.inputs.keytable import per_key_format, per_key_frame, read_frequencies, read_key_names
    from stabcli.reports.audit_render import plot_figures, render_html, render_markdown, render_terminal, require_plots
    from stabcli.reports.schema import dumps

    validate_checks(checks, labels=downstream is not None)  # a typo fails before any input is read
    if plots:
        require_plots()
    if per_key:
        per_key_format(per_key)
    plan = report_outputs(inputs, downstream, json_path, markdown_path, plots, per_key, key_names, force, html_path)
    if read is not None and read.keys_file is not None:
        plan.add_input(read.keys_file)
    if options.eis_anchor is not None:
        plan.add_input(options.eis_anchor)
    if frequencies is not None:
        plan.add_input(frequencies)
    plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
    tracker = open_tracker(mlflow, mlflow_experiment)
    names = read_key_names(key_names, encoding) if key_names else None
    counts = read_frequencies(frequencies, encoding or "utf-8") if frequencies else None

    runs = load_runs(inputs, on_warning=warn, read=read)
    with Stages("audit") as stages:
        report = build_report(
            runs,
            options,
            on_step=stages.step,
            downstream=downstream,
            checks=checks,
            key_names=names,
            per_key=per_key is not None or html_path is not None or tracker is not None,
            on_warning=warn,
            frequencies=counts,
        )
    text = dumps(report)

    def frame() -> Any:
        stats = report.key_stats
        return per_key_frame(
            stats.keys,
            names,
            stats.frequency,
            stats.norm,
            stats.aligned_variance,
            stats.relative_instability,
            stats.displacement,
            stats.knn_overlap,
        )

    renderings = Renderings(
        text,
        lambda key_rows: render_markdown(report, key_rows),
        lambda: plot_figures(report),
        frame,
        lambda figures, table: render_html(report, table, figures, text),
        len(report.representation.least_stable),
    )
    publish(
        plan,
        renderings,
        command="audit",
        fmt=fmt,
        terminal=lambda: render_terminal(report, out),
        json_path=json_path,
        markdown_path=markdown_path,
        html_path=html_path,
        plots=plots,
        per_key=per_key,
        tracker=tracker,
        params=options_given,
    )
    return report


def audit_cmd(
    ctx: typer.Context,
    inputs: Annotated[
        list[Path], typer.Argument(metavar="INPUTS...", help="A run set directory, or two or more embedding files.")
    ],
    normalize: Annotated[bool, typer.Option("--normalize", help="L2-normalize every row first.")] = False,
    pairs: Annotated[
        int, typer.Option("--pairs", min=1, metavar="N", help="Key pairs sampled for the inner-product noise share.")
    ] = 10_000,
    knn_k: KnnK = 10,
    knn_queries: Annotated[
        int | None,
        knn_queries_option("Sampled query keys for k-NN overlap [default: every key up to 10,000 keys, else 1,000]."),
    ] = None,
    seed: Annotated[int, seed_option("Seed for the sampled pairs and queries.")] = 0,
    top: Annotated[int, top_option("Least stable keys to list (lowest k-NN overlap first).")] = 20,
    min_frequency: Annotated[
        int | None,
        typer.Option(
            "--min-frequency",
            min=1,
            metavar="N",
            help="List only keys that occur at least N times in the training corpus (needs frequencies).",
        ),
    ] = None,
    frequencies: Annotated[
        Path | None,
        typer.Option(
            "--frequencies",
            metavar="FILE",
            help="Key and count per line (tab, comma or space separated) for the stability-by-frequency table "
            "[default: the counts the run set recorded].",
        ),
    ] = None,
    eis_anchor: Annotated[
        Path | None,
        typer.Option(
            "--eis-anchor",
            metavar="FILE",
            help="Anchor embedding for EIS (any embedding file with keys; read by its suffix) [default: the runs' "
            "consensus after Procrustes].",
        ),
    ] = None,
    eis_alpha: Annotated[
        float,
        typer.Option(
            "--eis-alpha", min=0.0, max=100.0, metavar="ALPHA", help="Exponent of the anchor's spectrum in EIS."
        ),
    ] = 3.0,
    check: Annotated[list[str], check_option("representation.knn_overlap>=0.6")] = [],  # noqa: B006
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    plots: Annotated[
        Path | None,
        plots_option(
            "Write PNG figures (paper Fig. 1a-1d; with --labels also the downstream spread) into this directory."
        ),
    ] = None,
    labels: Annotated[
        Path | None,
        labels_option(
            "Key→label file (CSV/TSV key,label; MovieLens u.item, movies.dat or movies.csv): adds the downstream audit."
        ),
    ] = None,
    task: Task = "auto",
    model: DownstreamModel = None,
    test_size: TestSize = 0.2,
    split_seed: SplitSeed = 0,
    variants: Annotated[
        str | None,
        typer.Option(
            "--variants",
            metavar="LIST",
            help="Comma list of h, avg, aligned, phi:M, phi:M@SIGMA, aligned+phi:M "
            "[default: h,avg,aligned,phi:d,phi:2d].",
        ),
    ] = None,
    featurize_dims: Annotated[
        str | None,
        typer.Option(
            "--featurize-dims",
            metavar="M,M,...",
            help="Sweep M of every phi variant, e.g. 16,32,64,128 (paper Fig. A.3).",
        ),
    ] = None,
    sigmas: Annotated[
        str | None,
        typer.Option(
            "--sigmas",
            metavar="SIGMA,SIGMA,...",
            help="Sweep sigma of every phi variant, e.g. 0.5,1,2 (paper Fig. A.4).",
        ),
    ] = None,
    reference: Annotated[int, reference_option("Position of the run whose model is reused stale on the others.")] = 0,
    jobs: Annotated[int | None, jobs_option("Downstream fits in parallel [default: available cores].")] = None,
    scheduler: Annotated[
        str | None,
        scheduler_option(
            "Send the downstream fits to this Dask scheduler (tcp://host:8786), or local:N; "
            "default $STABCLI_SCHEDULER. Needs stabcli[dask]."
        ),
    ] = None,
    encoding: Annotated[
        str | None,
        encoding_option(
            "Text encoding of the label and --key-names files [default: utf-8; MovieLens u.item and "
            "movies.dat: latin-1; a byte-order mark decides]."
        ),
    ] = None,
    min_class_size: Annotated[
        int,
        typer.Option(
            "--min-class-size",
            min=1,
            metavar="N",
            help="Drop label classes with fewer labeled keys, with a warning (5 = one expected test key at the "
            "default --test-size 0.2).",
        ),
    ] = 5,
    key_names: KeyNames = None,
    per_key: Annotated[
        Path | None,
        per_key_option(
            "Write every key's frequency, norm, aligned variance, relative instability, displacement and "
            "k-NN overlap (.csv, .tsv or .parquet)."
        ),
    ] = None,
    force: ReportForce = False,
    input_format: InputFormat = None,
    trust_pickle: TrustPickle = False,
    keys: Keys = None,
    mlflow: Mlflow = False,
    mlflow_experiment: MlflowExperiment = None,
    quiet: Quiet = False,
) -> None:
    """Measure how much of an embedding is run-to-run noise, and which parts are stable.

    With --labels, also how much a downstream model fluctuates across runs (mean and std of
    its test metric, churn, stale-model compatibility) for raw, averaged, aligned and
    featurized variants, and which variant to use.

    Examples:

        stabcli audit runs/exp1

        stabcli audit a.vec b.vec c.vec --normalize --format json

        stabcli audit runs/exp1 --check 'representation.knn_overlap>=0.6' --markdown report.md

        stabcli audit runs/exp1 --labels item_genres.tsv --check 'downstream.variants.h.churn<=0.05'

        stabcli audit runs/ml --labels ml-100k/u.item --variants h,aligned,phi:64 --sigmas 0.5,1,2

        stabcli audit a.vec b.vec c.vec --frequencies counts.tsv --min-frequency 5

        stabcli audit runs/exp1 --html audit.html --mlflow --mlflow-experiment embeddings
    """
    from stabcli.commands.audit import AuditOptions

    set_quiet(quiet)
    params = dict(ctx.params)  # the options as given, for --mlflow

    if encoding is not None:
        check_encoding("encoding", encoding)
    read = ReadOptions(input_format, trust_pickle, keys)
    options = AuditOptions(
        normalize=normalize,
        pairs=pairs,
        knn_k=knn_k,
        knn_queries=knn_queries,
        seed=seed,
        top=top,
        min_frequency=min_frequency,
        eis_alpha=eis_alpha,
        eis_anchor=eis_anchor,
    )
    downstream = None
    if labels is None:
        given = {
            "--variants": variants,
            "--featurize-dims": featurize_dims,
            "--sigmas": sigmas,
            "--model": model,
            "--min-class-size": None if min_class_size == 5 else min_class_size,
            "--scheduler": scheduler,
        }
        extra = [name for name, value in given.items() if value is not None]
        if extra:
            raise UsageError(f"{', '.join(extra)} only apply with --labels FILE")
    else:
        from stabcli.measure.downstream import DownstreamOptions

        downstream = DownstreamOptions(
            labels,
            task=task,
            model=model,
            test_size=test_size,
            split_seed=split_seed,
            variants=comma_list(variants, str, "--variants"),
            featurize_dims=comma_list(featurize_dims, int, "--featurize-dims") or [],
            sigmas=comma_list(sigmas, float, "--sigmas") or [],
            reference=reference,
            seed=seed,
            jobs=jobs,
            encoding=encoding,
            min_class_size=min_class_size,
        )
    from stabcli.training.cluster import joblib_on, scheduler_address

    with joblib_on(scheduler_address(scheduler) if labels is not None else None) as cluster:
        if cluster is not None and downstream is not None and downstream.jobs is None:
            from dataclasses import replace

            downstream = replace(downstream, jobs=cluster.threads())  # as many fits at once as the cluster runs
        report = audit_and_render(
            inputs,
            options,
            check,
            fmt,
            json_path,
            markdown_path,
            plots,
            downstream,
            key_names,
            per_key,
            encoding,
            force,
            read,
            frequencies,
            html_path,
            mlflow,
            mlflow_experiment,
            params,
        )
    if not report.passed:
        raise typer.Exit(EXIT_FAILED_CHECK)
