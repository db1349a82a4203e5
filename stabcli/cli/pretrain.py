"""``stabcli pretrain``: train N independent runs of an embedding into a run set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from stabcli.cli.options import (
    Dim,
    EmbeddingModel,
    Epochs,
    MinCount,
    Negative,
    Params,
    ReportFormat,
    SkipGram,
    Timeout,
    Window,
    jobs_option,
    scheduler_option,
    seed_option,
)
from stabcli.cli.output import EXIT_BAD_INPUT, err, out, print_line, progress, write_json_stdout
from stabcli.errors import MESSAGE_LIMIT, one_line, shorten
from stabcli.reports.text import literal
from stabcli.training.pretrain import PretrainResult


def run_pretrain(corpus: Path | None, out_dir: Path, **options: Any) -> PretrainResult:
    """``stabcli.pretrain`` with a progress bar over runs (and epochs for gensim models) and
    the Dask scheduler's line on stderr."""
    from stabcli.commands.pretrain import pretrain

    with progress() as bar:
        runs_task = bar.add_task("runs", total=options.get("runs", 10))
        epochs_task = bar.add_task("epochs", total=None, visible=options.get("script") is None)

        def on_progress(p: Any) -> None:
            bar.update(runs_task, completed=p.runs_done, total=p.runs_total)
            bar.update(epochs_task, completed=p.epochs_done, total=p.epochs_total)

        def on_step(text: str) -> None:
            err.print(literal(text), soft_wrap=True)

        return pretrain(corpus, out_dir, on_progress=on_progress, on_step=on_step, **options)


def _summary_table(result: PretrainResult) -> Table:
    table = Table(title=literal(f"run set {result.root}"), title_justify="left")
    for column in ("run", "seed", "seconds", "final loss", "status"):
        table.add_column(column, justify="right" if column in ("seed", "seconds", "final loss") else "left")
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
        out.print(_summary_table(result))
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


def pretrain_cmd(
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
    scheduler: Annotated[
        str | None,
        scheduler_option(
            "Run every run as a task on this Dask scheduler "
            "(tcp://host:8786), or local:N for N local worker processes; default "
            "$STABCLI_SCHEDULER. Needs stabcli[dask] and a filesystem every worker sees."
        ),
    ] = None,
    checkpoints: bool = typer.Option(
        False, "--checkpoints", show_default=True, help="Save vectors after every epoch (epochs/NNN.npy)."
    ),
    vary: Literal["seed", "shuffle", "bootstrap"] = typer.Option(
        "seed",
        "--vary",
        metavar="seed|shuffle|bootstrap",
        help="seed: only the seed changes; shuffle: also the "
        "sequence order; bootstrap: sequences resampled with replacement.",
    ),
    param: Params = [],  # noqa: B006 (typer reads the default)
    force: bool = typer.Option(
        False, "--force", show_default=True, help="Replace a run set made with another configuration."
    ),
    script: str | None = typer.Option(
        None,
        "--script",
        metavar="COMMAND",
        help="Train with your own command; placeholders {seed} {out} {run} {corpus}. Run without a shell.",
    ),
    timeout: Timeout = None,
    corpus_format: Literal["auto", "lines", "tagged", "movielens", "interactions"] = typer.Option(
        "auto",
        "--corpus-format",
        metavar="FORMAT",
        help="auto, lines, tagged, movielens or interactions (auto: "
        "MovieLens names, doc2vec → tagged, a delimited table → interactions, else lines).",
    ),
    encoding: str = typer.Option(
        "utf-8", "--encoding", metavar="ENCODING", help="Text encoding of the corpus (a byte-order mark decides)."
    ),
    user_col: str | None = typer.Option(
        None,
        "--user-col",
        metavar="COL",
        help="Tables: user column, header name or 0-based position "
        "[default: a user/userId/uid… header, else column 0].",
    ),
    item_col: str | None = typer.Option(
        None,
        "--item-col",
        metavar="COL",
        help="Tables: item column, name or position [default: an item/itemId/movieId… header, else column 1].",
    ),
    time_col: str | None = typer.Option(
        None,
        "--time-col",
        metavar="COL",
        help="Tables: column ordering each user's items "
        "[default: a timestamp/ts/time… header; no header: column 3 in the "
        "MovieLens layout, else file order; none: file order].",
    ),
    rating_col: str | None = typer.Option(
        None,
        "--rating-col",
        metavar="COL",
        help="Tables: rating column for --min-rating [default: a rating/score… header; MovieLens layout: column 2].",
    ),
    min_rating: float | None = typer.Option(
        None, "--min-rating", metavar="RATING", help="Tables: keep ratings >= this [default: keep all]."
    ),
    fmt: ReportFormat = "table",
) -> None:
    """Train N independent runs of an embedding into a run set.

    Run i uses seed SEED+i with one gensim worker, so the same command gives bitwise
    identical vectors whatever --jobs is. Rerunning resumes: finished runs are kept.

    Examples:

        stabcli pretrain sessions.txt --out runs/exp1 --runs 10 --dim 32 --epochs 10

        stabcli pretrain ml-1m/ratings.dat --out runs/ml --min-rating 4 --vary bootstrap

        stabcli pretrain docs.tsv --model doc2vec --out runs/docs --param dm_mean=1

        stabcli pretrain --script 'python train.py --seed {seed} --out {out}' --runs 5 --out runs/mine
    """
    result = run_pretrain(
        corpus,
        out_dir,
        runs=runs,
        model=model,
        dim=dim,
        window=window,
        negative=negative,
        epochs=epochs,
        sg=sg,
        min_count=min_count,
        seed=seed,
        jobs=jobs,
        scheduler=scheduler,
        checkpoints=checkpoints,
        vary=vary,
        params=param,
        force=force,
        script=script,
        timeout=timeout,
        corpus_format=corpus_format,
        encoding=encoding,
        user_col=user_col,
        item_col=item_col,
        time_col=time_col,
        rating_col=rating_col,
        min_rating=min_rating,
    )
    report_pretrain(result, fmt)
