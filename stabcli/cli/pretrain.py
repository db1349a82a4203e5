"""``stabcli pretrain``: train N independent runs of an embedding into a run set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table

from stabcli.cli.options import (
    CorpusEncoding,
    CorpusFormat,
    Dim,
    EmbeddingModel,
    Epochs,
    ItemCol,
    MinCount,
    MinRating,
    Mlflow,
    MlflowExperiment,
    Negative,
    Params,
    Quiet,
    RatingCol,
    ReportFormat,
    SkipGram,
    TimeCol,
    Timeout,
    Tokenize,
    UserCol,
    Window,
    api_options,
    jobs_option,
    scheduler_option,
    seed_option,
)
from stabcli.cli.output import (
    EXIT_BAD_INPUT,
    RunLines,
    err,
    info,
    out,
    print_line,
    progress,
    quiet_mlflow_logs,
    set_quiet,
    write_json_stdout,
)
from stabcli.errors import MESSAGE_LIMIT, one_line, shorten
from stabcli.reports.layout import print_table
from stabcli.reports.text import literal
from stabcli.training.pretrain import PretrainResult

if TYPE_CHECKING:
    from stabcli.reports.tracking import Tracker


def run_pretrain(corpus: Path | None, out_dir: Path, **options: Any) -> PretrainResult:
    """``stabcli.pretrain`` with a progress bar over runs (and epochs for gensim models) and
    the Dask scheduler's line on stderr."""
    from stabcli.commands.pretrain import pretrain

    with progress() as bar:
        runs_task = bar.add_task("runs", total=options.get("runs", 10))
        epochs_task = bar.add_task("epochs", total=None, visible=options.get("script") is None)

        lines = RunLines("pretrain")

        def on_progress(p: Any) -> None:
            bar.update(runs_task, completed=p.runs_done, total=p.runs_total)
            bar.update(epochs_task, completed=p.epochs_done, total=p.epochs_total)
            lines(p.runs_done, p.runs_total)

        def on_step(text: str) -> None:
            info(text)

        return pretrain(corpus, out_dir, on_progress=on_progress, on_step=on_step, **options)


def _summary_table(result: PretrainResult) -> Table:
    table = Table(title=literal(f"run set {result.root}"), title_justify="left")
    for column in ("run", "seed", "seconds", "final loss", "status"):
        table.add_column(
            column, justify="right" if column in ("seed", "seconds", "final loss") else "left", no_wrap=True
        )
    styles = {"complete": "green", "kept": "cyan", "failed": "bold red"}
    for r in result.runs:
        table.add_row(
            f"run-{r.index:03d}",
            str(r.seed),
            "" if r.seconds is None else f"{r.seconds:.1f}",
            "" if r.final_loss is None else f"{r.final_loss:.4g}",
            literal(r.status, styles[r.status]),
        )
    return table


def report_pretrain(result: PretrainResult, fmt: str) -> None:
    if fmt == "json":
        write_json_stdout(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        print_table(out, _summary_table(result))
        if result.corpus:
            c = result.corpus
            out.print(f"corpus read as {c['description']}", highlight=False)
    exit_on_failures(result)


def exit_on_failures(result: PretrainResult) -> None:
    """One ``failed:`` line per failed run on stderr, then exit 2."""
    for r in result.failed:
        print_line(err, "failed:", "bold red", shorten(one_line(r.error or ""), MESSAGE_LIMIT))
    if result.failed:
        raise typer.Exit(EXIT_BAD_INPUT)


_Scheduler = Annotated[
    str | None,
    scheduler_option(
        "Run every run as a task on this Dask scheduler "
        "(tcp://host:8786), or local:N for N local worker processes; default "
        "$STABCLI_SCHEDULER. Needs stabcli[dask] and a filesystem every worker sees."
    ),
]


_Checkpoints = Annotated[
    bool, typer.Option("--checkpoints", show_default=True, help="Save vectors after every epoch (epochs/NNN.npy).")
]


_Vary = Annotated[
    Literal["seed", "shuffle", "bootstrap"],
    typer.Option(
        "--vary",
        metavar="seed|shuffle|bootstrap",
        help="seed: only the seed changes; shuffle: also the "
        "sequence order; bootstrap: sequences resampled with replacement.",
    ),
]


_Force = Annotated[
    bool, typer.Option("--force", show_default=True, help="Replace a run set made with another configuration.")
]


_Script = Annotated[
    str | None,
    typer.Option(
        "--script",
        metavar="COMMAND",
        help="Train with your own command; placeholders {seed} {out} {run} {corpus}. Run without a shell.",
    ),
]


def pretrain_cmd(
    ctx: typer.Context,
    corpus: Path | None = typer.Argument(None, metavar="CORPUS", help="Training corpus (optional with --script)."),
    out_dir: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Run set directory to create or resume."),
    runs: int = typer.Option(10, "--runs", "-n", min=1, metavar="N", help="Number of independent runs."),
    model: EmbeddingModel = "word2vec",
    dim: Dim = 32,
    window: Window = 3,
    negative: Negative = 3,
    epochs: Epochs = 10,
    sg: SkipGram = True,
    min_count: MinCount = 1,
    seed: Annotated[int, seed_option("Run i uses seed SEED + i.", None)] = 0,
    jobs: Annotated[int | None, jobs_option("Runs in parallel [default: available cores].")] = None,
    scheduler: _Scheduler = None,
    checkpoints: _Checkpoints = False,
    vary: _Vary = "seed",
    param: Params = [],  # noqa: B006 (typer reads the default)
    force: _Force = False,
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
    fmt: ReportFormat = "table",
    mlflow: Mlflow = False,
    mlflow_experiment: MlflowExperiment = None,
    quiet: Quiet = False,
) -> None:
    """Train N independent runs of an embedding into a run set.

    Run i uses seed SEED+i with one gensim worker, so the same command gives bitwise
    identical vectors whatever --jobs is. Rerunning resumes: finished runs are kept.

    Examples:

        stabcli pretrain sessions.txt --out runs/exp1 --runs 10 --dim 32 --epochs 10

        stabcli pretrain ml-1m/ratings.dat --out runs/ml --min-rating 4 --vary bootstrap

        stabcli pretrain docs.tsv --model doc2vec --out runs/docs --param dm_mean=1

        stabcli pretrain articles.txt.gz --out runs/text --tokenize simple

        stabcli pretrain --script 'python train.py --seed {seed} --out {out}' --runs 5 --out runs/mine

        stabcli pretrain sessions.txt --out runs/exp1 --runs 5 --mlflow --mlflow-experiment item2vec
    """
    options = api_options(locals(), skip=("ctx", "corpus", "out_dir", "mlflow", "mlflow_experiment"))
    set_quiet(quiet)
    tracker = _open_tracker(mlflow, mlflow_experiment, [p for p in (corpus, out_dir) if p is not None])
    result = run_pretrain(corpus, out_dir, **options)
    if tracker is not None:
        _log_runs(
            tracker, result, {k: v for k, v in ctx.params.items() if k not in ("mlflow", "mlflow_experiment", "quiet")}
        )
    report_pretrain(result, fmt)


def _open_tracker(mlflow: bool, experiment: str | None, paths: list[Path]) -> Tracker | None:
    """Before any training; a tracking store inside the corpus or the run set written is refused."""
    from stabcli.commands.common import ReportFiles
    from stabcli.fs.outputs import OutputPlan

    if mlflow:
        quiet_mlflow_logs()
    return ReportFiles(mlflow=mlflow, mlflow_experiment=experiment).open_tracker(OutputPlan(paths))


def _log_runs(tracker: Tracker, result: PretrainResult, params: dict[str, Any]) -> None:
    """The run set as one MLflow run with a nested run per training run."""
    from stabcli.reports.tracking import log_nested, pretrain_records

    top, children = log_nested(tracker, *pretrain_records(result, params))
    info(
        f"logged to MLflow: run {top.run_id} with {len(children)} nested runs in experiment "
        f"{tracker.experiment!r} at {tracker.tracking_uri}"
    )
