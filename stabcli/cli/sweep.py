"""``stabcli sweep``: retrain over a grid of settings and data sizes and audit every cell."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from stabcli.cli.options import (
    CorpusEncoding,
    CorpusFormat,
    Dim,
    EmbeddingModel,
    Epochs,
    HtmlPath,
    ItemCol,
    JsonPath,
    KnnK,
    MarkdownPath,
    MinCount,
    MinRating,
    Negative,
    Params,
    RatingCol,
    ReportFormat,
    SkipGram,
    SplitSeed,
    Task,
    TestSize,
    TimeCol,
    Timeout,
    Tokenize,
    UserCol,
    Window,
    api_options,
    check_option,
    jobs_option,
    knn_queries_option,
    labels_option,
    plots_option,
    scheduler_option,
    seed_option,
)
from stabcli.cli.output import err, render_report, spinner, warn
from stabcli.reports.text import literal

_Corpus = Annotated[Path, typer.Argument(metavar="CORPUS", help="Training corpus (sampled for --sizes).")]
_Out = Annotated[
    Path,
    typer.Option("--out", "-o", metavar="DIR", help="Sweep directory to create or resume (one run set per cell)."),
]
_Grid = Annotated[
    str,
    typer.Option(
        "--grid",
        metavar="'NAME=V,V NAME=V,V'",
        help="Settings to cross: pretrain options (dim, window, negative, epochs, sg, min_count) and the "
        "gensim arguments --param accepts; with --script, the template's {NAME} fields.",
    ),
]
_Sizes = Annotated[
    str,
    typer.Option("--sizes", metavar="S,S,...", help="Data sizes: shares of the corpus's sequences in (0, 1], nested."),
]
_Runs = Annotated[int, typer.Option("--runs", "-n", min=2, metavar="N", help="Runs per cell.")]
_SwapOne = Annotated[
    int,
    typer.Option(
        "--swap-one", min=0, max=1000, metavar="N", help="Per size, N pairs of samples differing in one sequence."
    ),
]
_Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="MEASURE=VALUE",
        help="Data size the fit predicts for this value, e.g. knn_overlap=0.8 (an extrapolation beyond the sizes).",
    ),
]
_Stability = Annotated[
    Literal["knn_overlap", "cka_debiased", "cka", "eis", "aligned_noise_share"],
    typer.Option("--stability", metavar="MEASURE", help="Stability axis of the Pareto front (with --labels)."),
]
_Script = Annotated[
    str | None,
    typer.Option(
        "--script",
        metavar="COMMAND",
        help="Train with your own command: {seed} {out} {run} {corpus} (a token-lines sample) and the --grid fields.",
    ),
]
_Seed = Annotated[int, seed_option("Run i of every cell uses SEED + i; the samples are drawn from it.", None)]
_Jobs = Annotated[int | None, jobs_option("Runs in parallel [default: available cores].")]
_Scheduler = Annotated[
    str | None, scheduler_option("Train every run on this Dask scheduler (tcp://host:8786) or local:N.")
]
_KnnQueries = Annotated[int, knn_queries_option("Sampled query keys for k-NN overlap, per cell.")]
_Labels = Annotated[Path | None, labels_option("Key→label file: adds each cell's downstream audit (raw vectors).")]
_DownstreamModel = Annotated[
    Literal["logreg", "knn", "ridge"] | None,
    typer.Option("--downstream-model", metavar="logreg|knn|ridge", help="With --labels [default: logreg or ridge]."),
]
_Check = Annotated[list[str], check_option("data_size.knn_instability.b<0")]
_Plots = Annotated[Path | None, plots_option("Write data_size.png and pareto.png into this directory.")]
_Force = Annotated[
    bool,
    typer.Option("--force", help="Replace a sweep of another corpus or seed, cells of another configuration, outputs."),
]


def sweep_cmd(
    corpus: _Corpus,
    out_dir: _Out,
    grid: _Grid = "",
    sizes: _Sizes = "1",
    runs: _Runs = 5,
    swap_one: _SwapOne = 0,
    target: _Target = None,
    stability: _Stability = "knn_overlap",
    model: EmbeddingModel = "word2vec",
    dim: Dim = 32,
    window: Window = 3,
    negative: Negative = 3,
    epochs: Epochs = 10,
    sg: SkipGram = True,
    min_count: MinCount = 1,
    param: Params = [],  # noqa: B006 (typer reads the default)
    script: _Script = None,
    timeout: Timeout = None,
    corpus_format: CorpusFormat = "auto",
    tokenize: Tokenize = "none",
    encoding: CorpusEncoding = "utf-8",
    user_col: UserCol = None,
    item_col: ItemCol = None,
    time_col: TimeCol = None,
    rating_col: RatingCol = None,
    min_rating: MinRating = None,
    seed: _Seed = 0,
    jobs: _Jobs = None,
    scheduler: _Scheduler = None,
    knn_k: KnnK = 10,
    knn_queries: _KnnQueries = 1_000,
    labels: _Labels = None,
    task: Task = "auto",
    downstream_model: _DownstreamModel = None,
    test_size: TestSize = 0.2,
    split_seed: SplitSeed = 0,
    check: _Check = [],  # noqa: B006 (typer reads the default)
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    plots: _Plots = None,
    force: _Force = False,
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
    options = api_options(locals(), skip=("corpus", "out_dir"), files=True)
    from stabcli.commands.sweep import sweep
    from stabcli.reports.sweep_render import render_terminal

    with spinner("sweep") as on_step:
        report = sweep(
            corpus,
            out_dir,
            **options,
            on_step=on_step,
            on_warning=warn,
            on_figure=lambda path: err.print(literal(f"wrote {path}"), soft_wrap=True),
        )
    render_report(report, fmt, render_terminal)
