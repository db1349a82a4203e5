"""``stabcli sweep``: retrain over a grid of settings and data sizes and audit every cell."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from stabcli.cli.options import (
    Dim,
    EmbeddingModel,
    Epochs,
    HtmlPath,
    JsonPath,
    KnnK,
    MarkdownPath,
    MinCount,
    Negative,
    Params,
    ReportFormat,
    SkipGram,
    SplitSeed,
    Task,
    TestSize,
    Timeout,
    Window,
    check_option,
    jobs_option,
    knn_queries_option,
    labels_option,
    plots_option,
    scheduler_option,
    seed_option,
)
from stabcli.cli.output import err, render_report, report_files, spinner, warn
from stabcli.reports.text import literal


def sweep_cmd(
    corpus: Path = typer.Argument(..., metavar="CORPUS", help="Training corpus (sampled for --sizes)."),
    out_dir: Path = typer.Option(
        ..., "--out", "-o", metavar="DIR", help="Sweep directory to create or resume (one run set per cell)."
    ),
    grid: str = typer.Option(
        "",
        "--grid",
        metavar="'NAME=V,V NAME=V,V'",
        help="Settings to cross: pretrain options (dim, window, negative, epochs, sg, min_count) and the "
        "gensim arguments --param accepts; with --script, the template's {NAME} fields.",
    ),
    sizes: str = typer.Option(
        "1", "--sizes", metavar="S,S,...", help="Data sizes: shares of the corpus's sequences in (0, 1], nested."
    ),
    runs: int = typer.Option(5, "--runs", "-n", min=2, metavar="N", help="Runs per cell."),
    swap_one: int = typer.Option(
        0, "--swap-one", min=0, max=1000, metavar="N", help="Per size, N pairs of samples differing in one sequence."
    ),
    target: str | None = typer.Option(
        None,
        "--target",
        metavar="MEASURE=VALUE",
        help="Data size the fit predicts for this value, e.g. knn_overlap=0.8 (an extrapolation beyond the sizes).",
    ),
    stability: Literal["knn_overlap", "cka_debiased", "cka", "eis", "aligned_noise_share"] = typer.Option(
        "knn_overlap", "--stability", metavar="MEASURE", help="Stability axis of the Pareto front (with --labels)."
    ),
    model: EmbeddingModel = "word2vec",
    dim: Dim = 32,
    window: Window = 3,
    negative: Negative = 3,
    epochs: Epochs = 10,
    sg: SkipGram = True,
    min_count: MinCount = 1,
    param: Params = [],  # noqa: B006 (typer reads the default)
    script: str | None = typer.Option(
        None,
        "--script",
        metavar="COMMAND",
        help="Train with your own command: {seed} {out} {run} {corpus} (a token-lines sample) and the --grid fields.",
    ),
    timeout: Timeout = None,
    corpus_format: Literal["auto", "lines", "tagged", "movielens", "interactions"] = typer.Option(
        "auto", "--corpus-format", metavar="FORMAT", help="How to read CORPUS (as pretrain)."
    ),
    encoding: str = typer.Option("utf-8", "--encoding", metavar="ENCODING", help="Text encoding of the corpus."),
    seed: Annotated[int, seed_option("Run i of every cell uses SEED + i; the samples are drawn from it.", None)] = 0,
    jobs: Annotated[int | None, jobs_option("Runs in parallel [default: available cores].")] = None,
    scheduler: Annotated[
        str | None, scheduler_option("Train every run on this Dask scheduler (tcp://host:8786) or local:N.")
    ] = None,
    knn_k: KnnK = 10,
    knn_queries: Annotated[int, knn_queries_option("Sampled query keys for k-NN overlap, per cell.")] = 1_000,
    labels: Annotated[
        Path | None, labels_option("Key→label file: adds each cell's downstream audit (raw vectors).")
    ] = None,
    task: Task = "auto",
    downstream_model: Literal["logreg", "knn", "ridge"] | None = typer.Option(
        None, "--downstream-model", metavar="logreg|knn|ridge", help="With --labels [default: logreg or ridge]."
    ),
    test_size: TestSize = 0.2,
    split_seed: SplitSeed = 0,
    check: Annotated[list[str], check_option("data_size.knn_instability.b<0")] = [],  # noqa: B006 (typer default)
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    plots: Annotated[Path | None, plots_option("Write data_size.png and pareto.png into this directory.")] = None,
    force: bool = typer.Option(
        False, "--force", help="Replace a sweep of another corpus or seed, cells of another configuration, outputs."
    ),
) -> None:
    """Retrain over a grid of settings and data sizes, audit every cell, and fit how
    stability grows with data.

    Each cell (grid values × size) is a run set under DIR/cells, written and resumed as
    pretrain does; the sizes are nested samples of the corpus's sequences.

    Examples:

        stabcli sweep sessions.txt --out sweeps/s1 --grid 'window=3,5 negative=3,10' --runs 5

        stabcli sweep sessions.txt --out sweeps/s2 --sizes 0.1,0.2,0.4,0.8,1 --target knn_overlap=0.8 --plots figs

        stabcli sweep sessions.txt --out sweeps/s3 --grid 'window=2,5' --labels genres.tsv --markdown sweep.md

        stabcli sweep sessions.txt --out sweeps/s4 --sizes 0.25,0.5,1 --swap-one 5 --json sweep.json
    """
    from stabcli.commands.sweep import sweep
    from stabcli.reports.sweep_render import render_terminal

    with spinner("sweep") as on_step:
        report = sweep(
            corpus,
            out_dir,
            grid=grid,
            sizes=sizes,
            runs=runs,
            swap_one=swap_one,
            target=target,
            stability=stability,
            model=model,
            dim=dim,
            window=window,
            negative=negative,
            epochs=epochs,
            sg=sg,
            min_count=min_count,
            params=param,
            script=script,
            timeout=timeout,
            corpus_format=corpus_format,
            encoding=encoding,
            seed=seed,
            jobs=jobs,
            scheduler=scheduler,
            knn_k=knn_k,
            knn_queries=knn_queries,
            labels=labels,
            task=task,
            downstream_model=downstream_model,
            test_size=test_size,
            split_seed=split_seed,
            checks=check,
            **report_files(json_path, markdown_path, plots, None, force, html_path),
            on_step=on_step,
            on_warning=warn,
            on_figure=lambda path: err.print(literal(f"wrote {path}"), soft_wrap=True),
        )
    render_report(report, fmt, render_terminal)
