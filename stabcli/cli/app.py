"""The ``stabcli`` command line: parse options, call the library, render, choose the exit code."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import nullcontext
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup

from stabcli import __version__
from stabcli.errors import MESSAGE_LIMIT, Interrupted, OptionError, StabcliError, UsageError, one_line, shorten
from stabcli.inputs.corpus import CorpusOptions
from stabcli.inputs.embeddings import ReadOptions
from stabcli.inputs.textfile import check_encoding
from stabcli.reports.text import literal, plain_console
from stabcli.runset.store import check_removable_runset
from stabcli.training.pretrain import PretrainResult, TrainConfig, parse_params, pretrain

# audit, featurize and downstream import scipy and scikit-learn (seconds): each command
# imports what it needs, so `stabcli pretrain` and `--help` start fast
if TYPE_CHECKING:
    from stabcli.commands.audit import AuditOptions
    from stabcli.fs.outputs import OutputPlan
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.reports.audit_report import AuditReport

EXIT_FAILED_CHECK = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`


def _debug_enabled(ctx: Any) -> bool:
    return bool(ctx.params.get("debug")) or os.environ.get("STABCLI_DEBUG", "") not in ("", "0")


# library parameter names whose flag is not simply ``--`` + the name with dashes
FLAG_NAMES: dict[str, str] = {"fmt": "--format", "out": "--out", "output": "--out", "out_dir": "--out"}


def flag_for(param: str) -> str:
    """The command-line flag of a library parameter name (``knn_k`` → ``--knn-k``)."""
    return FLAG_NAMES.get(param, "--" + param.replace("_", "-"))


def error_line(exc: StabcliError) -> str:
    """The one line the CLI prints for a library error; option errors name the flag. Never
    longer than ``MESSAGE_LIMIT`` characters, whatever data the message quotes."""
    if isinstance(exc, OptionError):
        return shorten(one_line(f"{flag_for(exc.param)}: {exc.problem}"), MESSAGE_LIMIT)
    return shorten(one_line(str(exc)), MESSAGE_LIMIT)


def print_line(console: Console, prefix: str, style: str, text: str) -> None:
    """``prefix`` in ``style`` then ``text`` as data (no markup, emoji or highlighting), one line."""
    console.print(literal(prefix, style) + literal(" " + text), soft_wrap=True)


try:  # typer before 0.2x parses with the click package; later ones vendor click (no click package needed)
    from click import UsageError as _ClickUsageError

    _CLICK_USAGE_ERRORS: tuple[Any, ...] = (_ClickUsageError,)
except ImportError:
    _CLICK_USAGE_ERRORS = ()
# click's UsageError, and the one of the click that typer vendors (BadParameter's base)
_PARSE_ERRORS: tuple[Any, ...] = tuple(
    {*_CLICK_USAGE_ERRORS, *[c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"]}
)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _handle_stop_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP take the Ctrl-C path (cleanup in ``finally:``, one line, 128 + signal)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, _raise_interrupted)
    return previous


class _Argument(TyperArgument):
    """An argument shown by its metavar alone: ``CORPUS`` or ``INPUTS...`` in the usage line and
    the help, not typer's ``{corpus}`` and ``<list[Path]>``."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.metavar or (self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name if self.nargs == 1 or name.endswith("...") else name + "..."


def _readable_params(params: list[Any]) -> None:
    """Help without typer's internal type names: arguments by their name, flags (and --help)
    with no ``<bool>``. Value options declare their own metavar (N, FILE, table|json...)."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = _Argument  # same object, readable rendering
        elif getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class _ReadableHelp:
    """Mixed into stabcli's command and group classes: their parameters, and --help, read as above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _readable_params(self.params)  # type: ignore[attr-defined]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            _readable_params([option])
        return option


class _Command(_ReadableHelp, TyperCommand):
    """Every stabcli command: typer's, with readable arguments and flags in ``--help``."""


class _Group(_ReadableHelp, TyperGroup):
    """Turns StabcliError into one line on stderr and exit 2; Ctrl-C, SIGTERM and SIGHUP into
    one line and exit 128 + signal (130, 143, 129)."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context
        previous = _handle_stop_signals()
        try:
            return super().invoke(ctx)
        except StabcliError as exc:
            if _debug_enabled(ctx):
                raise
            print_line(err, "error:", "bold red", error_line(exc))
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            trains = ctx.invoked_subcommand in ("pretrain", "demo")  # the commands that keep what they finished
            err.print(
                "interrupted; finished runs are kept" if trains else "interrupted; nothing was written", highlight=False
            )
            raise typer.Exit(128 + int(signum)) from None
        except BrokenPipeError:
            _quiet_broken_pipe()
        except _PARSE_ERRORS as exc:  # typer's own parsing (an int that is not one, a missing argument)
            if _debug_enabled(ctx):
                raise
            where = exc.ctx.command_path if exc.ctx else "stabcli"
            message = one_line(exc.format_message().replace("Value error, ", ""))  # pydantic's prefix, inside typer
            print_line(err, "error:", "bold red", f"{shorten(message, MESSAGE_LIMIT)} (see '{where} --help')")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _quiet_broken_pipe() -> None:
    """The reader of stdout went away (``stabcli audit runs | head -1``): stop quietly as
    standard tools do, with no traceback and no Python complaint when stdout is flushed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (tests)
        pass
    raise SystemExit(EXIT_BROKEN_PIPE)


class _Console(Console):
    """rich's console, but a closed pipe ends stabcli with ``EXIT_BROKEN_PIPE``, not 1 (the
    code of a failed check)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _quiet_broken_pipe()


def _console(stream: Any, stderr: bool = False) -> Console:
    """A console that honours a valid ``COLUMNS`` (never narrower than ``MIN_WIDTH``: rich
    prints nothing at all at width 0, and tables lose their numbers below that), and that,
    when ``stream`` is not a terminal and ``COLUMNS`` is unset or not a number, never wraps:
    logs and pipes get every table and line at its full width."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():  # rich's own test; "0" would otherwise mean width 0
        width: int | None = max(int(columns), MIN_WIDTH)
    elif hasattr(stream, "isatty") and stream.isatty():
        width = None  # rich asks the terminal
    else:
        width = PIPE_WIDTH
    return plain_console(_Console, stderr=stderr, width=width)


PIPE_WIDTH = 10_000
MIN_WIDTH = 40


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Audit the run-to-run stability of pretrained embeddings.\n\n"
    "Exit codes: 0 ok, 1 a requested check failed, 2 bad usage or bad input, 130 interrupted (Ctrl-C), "
    "143 terminated (SIGTERM), 129 hung up (SIGHUP).",
)
err = _console(sys.stderr, stderr=True)
out = _console(sys.stdout)


def _version(value: bool) -> None:
    if value:
        print(f"stabcli {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks (also STABCLI_DEBUG=1)."),
) -> None:
    """Audit the run-to-run stability of pretrained embeddings."""


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _run_pretrain(
    out_dir: Path, corpus: Path | None, config: TrainConfig, scheduler: str | None = None, **kwargs: Any
) -> PretrainResult:
    """Call the library with a progress bar over runs (and epochs for gensim models); with a
    Dask scheduler every run is a task on the cluster."""
    from stabcli.training.cluster import scheduler_address

    address = scheduler_address(scheduler)
    if address is None:
        return _pretrain_with_progress(out_dir, corpus, config, **kwargs)
    from stabcli.training.cluster import Cluster, pretrain_backend

    with Cluster(address) as cluster:
        dashboard = cluster.dashboard_link
        err.print(
            f"Dask scheduler {address}: {len(cluster.workers())} worker(s)"
            + (f"; dashboard {dashboard}" if dashboard else ""),
            highlight=False,
            soft_wrap=True,
        )
        return _pretrain_with_progress(out_dir, corpus, config, backend=pretrain_backend(cluster), **kwargs)


def _pretrain_with_progress(out_dir: Path, corpus: Path | None, config: TrainConfig, **kwargs: Any) -> PretrainResult:
    with _progress() as bar:
        runs_task = bar.add_task("runs", total=kwargs["runs"])
        epochs_task = bar.add_task("epochs", total=None, visible=config.script is None)

        def on_progress(p: Any) -> None:
            bar.update(runs_task, completed=p.runs_done, total=p.runs_total)
            bar.update(epochs_task, completed=p.epochs_done, total=p.epochs_total)

        return pretrain(out_dir, corpus, config, on_progress=on_progress, **kwargs)


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


def _report_pretrain(result: PretrainResult, fmt: str) -> None:
    if fmt == "json":
        payload = {
            "stabcli_version": __version__,
            "run_set": str(result.root),
            "keys": result.keys,
            "corpus": result.corpus,
            "runs": [r.__dict__ for r in result.runs],
            "failed": len(result.failed),
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        out.print(_summary_table(result))
        if result.corpus:
            c = result.corpus
            out.print(
                f"corpus read as {c['format']}: {c['sequences']:,} sequences, {c['tokens']:,} tokens, "
                f"{c['distinct_keys']:,} distinct keys",
                highlight=False,
            )
    for r in result.failed:
        print_line(err, "failed:", "bold red", shorten(one_line(r.error or ""), MESSAGE_LIMIT))
    if result.failed:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command("pretrain", cls=_Command)
def pretrain_cmd(
    corpus: Path | None = typer.Argument(None, metavar="CORPUS", help="Training corpus (optional with --script)."),
    out_dir: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Run set directory to create or resume."),
    runs: int = typer.Option(10, "--runs", "-n", min=1, metavar="N", help="Number of independent runs."),
    model: Literal["word2vec", "doc2vec"] = typer.Option(
        "word2vec",
        "--model",
        metavar="word2vec|doc2vec",
        help="word2vec (sentences or item sessions) or doc2vec (tagged documents).",
    ),
    dim: int = typer.Option(32, "--dim", min=1, metavar="N", help="Embedding dimension."),
    window: int = typer.Option(3, "--window", min=1, metavar="N", help="Context window."),
    negative: int = typer.Option(3, "--negative", min=0, metavar="N", help="Negative samples (0 = none)."),
    epochs: int = typer.Option(10, "--epochs", min=1, metavar="N", help="Training epochs."),
    sg: bool = typer.Option(True, "--sg/--cbow", help="Skip-gram (doc2vec: PV-DBOW) or CBOW (doc2vec: PV-DM)."),
    min_count: int = typer.Option(1, "--min-count", min=1, metavar="N", help="Ignore tokens seen fewer times."),
    seed: int = typer.Option(0, "--seed", min=0, metavar="SEED", help="Run i uses seed SEED + i."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", help="Runs in parallel [default: available cores]."
    ),
    scheduler: str | None = typer.Option(
        None,
        "--scheduler",
        metavar="ADDRESS",
        help="Run every run as a task on this Dask scheduler "
        "(tcp://host:8786), or local:N for N local worker processes; default "
        "$STABCLI_SCHEDULER. Needs stabcli[dask] and a filesystem every worker sees.",
    ),
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
    param: list[str] = typer.Option([], "--param", metavar="KEY=VALUE", help="Any other gensim argument (repeatable)."),
    force: bool = typer.Option(
        False, "--force", show_default=True, help="Replace a run set made with another configuration."
    ),
    script: str | None = typer.Option(
        None,
        "--script",
        metavar="COMMAND",
        help="Train with your own command; placeholders {seed} {out} {run} {corpus}. Run without a shell.",
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", metavar="SECONDS", help="Seconds before a script run is killed [default: none]."
    ),
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
    fmt: Literal["table", "json"] = typer.Option(
        "table", "--format", metavar="table|json", help="Summary as a rich table or json on stdout."
    ),
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
    config = TrainConfig(
        model=model,
        dim=dim,
        window=window,
        negative=negative,
        epochs=epochs,
        sg=sg,
        min_count=min_count,
        vary=vary,
        params=parse_params(model, param),
        script=script,
        checkpoints=checkpoints,
    )
    options = CorpusOptions(corpus_format, encoding, user_col, item_col, time_col, rating_col, min_rating)
    result = _run_pretrain(
        out_dir,
        corpus,
        config,
        scheduler,
        runs=runs,
        seed=seed,
        jobs=jobs,
        force=force,
        corpus_options=options,
        timeout=timeout,
    )
    _report_pretrain(result, fmt)


def _comma_list(value: str | None, kind: type, option: str) -> list[Any] | None:
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


# input options shared by audit and featurize (embeddings.ReadOptions)
INPUT_FORMAT_OPTION = typer.Option(
    None,
    "--input-format",
    metavar="FORMAT",
    help="Read every input file as npy, word2vec, glove (word2vec text without the header line), word2vec-bin, "
    "fasttext (Facebook .bin), kv (any gensim save(): .kv, .wv, .model) or parquet, whatever its suffix; gzip, "
    "bzip2 and xz files are read as streams [default: from each file's suffix].",
)
InputFormat = Literal[
    "npy", "word2vec", "glove", "word2vec-bin", "fasttext", "kv", "parquet"
]  # embeddings.READ_FORMATS
TRUST_PICKLE_OPTION = typer.Option(
    False,
    "--trust-pickle",
    help="Load gensim files (.kv, .wv, .model) with Python's unrestricted unpickler. "
    "RISK: such a file can run any code on this machine; use only for files you made or trust. Without it, "
    "only the classes gensim's own save() writes are loaded.",
)
# --force of the report commands (audit, drift): the rule is stabcli.fs.outputs.OutputPlan's
# options the report commands (audit, drift) share, declared once
FORMAT_OPTION = typer.Option(
    "table", "--format", metavar="table|json", help="table (terminal) or json (stdout, exact)."
)
JSON_OPTION = typer.Option(None, "--json", metavar="FILE", help="Also write the JSON report here.")
MARKDOWN_OPTION = typer.Option(None, "--markdown", metavar="FILE", help="Also write a Markdown report here.")
TASK_OPTION = typer.Option(
    "auto",
    "--task",
    metavar="auto|classification|regression",
    help="With --labels; auto: numeric labels with fractions or more than 20 values are regression.",
)
MODEL_OPTION = typer.Option(
    None,
    "--model",
    metavar="logreg|knn|ridge",
    help="With --labels [default: logreg for classification, ridge for regression].",
)
TEST_SIZE_OPTION = typer.Option(
    0.2, "--test-size", metavar="SHARE", help="Share of labeled keys in the test split (between 0 and 1)."
)
SPLIT_SEED_OPTION = typer.Option(
    0, "--split-seed", min=0, metavar="SEED", help="Seed of the train/test split shared by all runs."
)
KEY_NAMES_OPTION = typer.Option(
    None,
    "--key-names",
    metavar="FILE",
    help="Key→display name file for the tables: MovieLens u.item (id|title|…) or a 2-column CSV/TSV.",
)
REPORT_FORCE_OPTION = typer.Option(
    False,
    "--force",
    help="Replace existing --json/--markdown/--per-key files and a --plots directory holding only "
    "stabcli's figures (never an input).",
)
KEYS_OPTION = typer.Option(
    None,
    "--keys",
    metavar="FILE",
    help="Keys (one per line) for the .npy inputs that have no NAME.keys.txt; without it, "
    "keyless and keyed inputs cannot be mixed.",
)


EIS_ANCHOR_OPTION = typer.Option(
    None,
    "--eis-anchor",
    metavar="FILE",
    help="Anchor embedding for EIS (any embedding file with keys; read by its suffix) [default: the runs' "
    "consensus after Procrustes].",
)
EIS_ALPHA_OPTION = typer.Option(
    3.0, "--eis-alpha", min=0.0, max=100.0, metavar="ALPHA", help="Exponent of the anchor's spectrum in EIS."
)


def _audit_and_render(
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
) -> AuditReport:
    """Validate, load, compute, write every requested rendering; returns the report."""
    from stabcli.commands.audit import build_report, load_runs, validate_checks
    from stabcli.inputs.keytable import per_key_format, per_key_frame, read_key_names
    from stabcli.reports.audit_render import render_markdown, render_terminal, require_plots, write_plots
    from stabcli.reports.schema import dumps

    validate_checks(checks, labels=downstream is not None)  # a typo fails before any input is read
    if plots:
        require_plots()
    if per_key:
        per_key_format(per_key)
    plan = _report_outputs(inputs, downstream, json_path, markdown_path, plots, per_key, key_names, force)
    if read is not None and read.keys_file is not None:
        plan.add_input(read.keys_file)
    if options.eis_anchor is not None:
        plan.add_input(options.eis_anchor)
    plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
    names = read_key_names(key_names, encoding or "utf-8") if key_names else None

    def warn(msg: str) -> None:
        print_line(err, "warning:", "yellow", shorten(one_line(msg), MESSAGE_LIMIT))

    runs = load_runs(inputs, on_warning=warn, read=read)
    with err.status("auditing", spinner="dots") if err.is_terminal else nullcontext() as status:
        report = build_report(
            runs,
            options,
            on_step=(lambda s: status.update(f"auditing: {s}")) if status else None,
            downstream=downstream,
            checks=checks,
            key_names=names,
            per_key=per_key is not None,
            on_warning=warn,
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

    _write_report_outputs(
        plan,
        text,
        lambda: render_markdown(report),
        json_path,
        markdown_path,
        plots,
        lambda directory: write_plots(report, directory),
        per_key,
        frame,
    )
    if fmt == "json":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        render_terminal(report, out)
    return report


def _write_report_outputs(
    plan: OutputPlan,
    text: str,
    markdown: Callable[[], str],
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    write_plots: Callable[[Path], list[Path]],
    per_key: Path | None,
    frame: Callable[[], Any],
) -> None:
    """Write a report command's outputs (``_report_outputs``) all or nothing: the JSON
    ``text``, the Markdown (also appended to GITHUB_STEP_SUMMARY), the figures
    ``write_plots(directory)`` draws and the per-key table ``frame()``; names the figures."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    written: list[Path] = []
    with plan:  # all or nothing: every output appears together, or none on any failure
        if json_path:
            plan.write_text(json_path, text)
        rendered = markdown() if markdown_path or summary else ""
        if markdown_path:
            plan.write_text(markdown_path, rendered)
        if summary:
            plan.write_text(summary, rendered)
        if plots:
            written = [plots / path.name for path in write_plots(plan.staging(plots))]
        if per_key:
            from stabcli.inputs.keytable import write_per_key  # pandas (60 MB, a second): only when asked

            write_per_key(frame(), per_key, plan.staging(per_key))
    for path in written:
        err.print(literal(f"wrote {path}"), soft_wrap=True)


def _report_outputs(
    inputs: list[Path],
    downstream: DownstreamOptions | None,
    json_path: Path | None,
    markdown_path: Path | None,
    plots: Path | None,
    per_key: Path | None,
    key_names: Path | None,
    force: bool,
) -> OutputPlan:
    """Every output of an audit or a drift (--json, --markdown, --plots, --per-key,
    GITHUB_STEP_SUMMARY) against every input (``inputs`` with their companion keys files,
    --labels, --key-names)."""
    from stabcli.fs.outputs import OutputPlan, plots_owned, with_companions

    plan = OutputPlan([companion for path in inputs for companion in with_companions(path)], force=force)
    if downstream is not None:
        plan.add_input(downstream.labels)
    if key_names is not None:
        plan.add_input(key_names)
    if per_key:
        plan.add(per_key, "--per-key")
    if json_path:
        plan.add(json_path, "--json")
    if markdown_path:
        plan.add(markdown_path, "--markdown")
    if plots:
        plan.add(plots, "--plots", kind="dir", owned=plots_owned)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        plan.add(os.environ["GITHUB_STEP_SUMMARY"], "GITHUB_STEP_SUMMARY", kind="append")
    return plan


@app.command(cls=_Command)
def audit(
    inputs: list[Path] = typer.Argument(
        ..., metavar="INPUTS...", help="A run set directory, or two or more embedding files."
    ),
    normalize: bool = typer.Option(False, "--normalize", help="L2-normalize every row first."),
    pairs: int = typer.Option(
        10_000, "--pairs", min=1, metavar="N", help="Key pairs sampled for the inner-product noise share."
    ),
    knn_k: int = typer.Option(10, "--knn-k", min=1, metavar="K", help="Neighbours per query for k-NN overlap."),
    knn_queries: int = typer.Option(
        1_000, "--knn-queries", min=1, metavar="N", help="Sampled query keys for k-NN overlap."
    ),
    seed: int = typer.Option(0, "--seed", min=0, metavar="SEED", help="Seed for the sampled pairs and queries."),
    top: int = typer.Option(20, "--top", min=0, metavar="N", help="Least stable keys to list."),
    eis_anchor: Path | None = EIS_ANCHOR_OPTION,
    eis_alpha: float = EIS_ALPHA_OPTION,
    check: list[str] = typer.Option(
        [],
        "--check",
        metavar="'PATH OP VALUE'",
        help="CI gate on the JSON report (repeatable); e.g. 'representation.knn_overlap>=0.6'. A failure exits 1.",
    ),
    fmt: Literal["table", "json"] = FORMAT_OPTION,
    json_path: Path | None = JSON_OPTION,
    markdown_path: Path | None = MARKDOWN_OPTION,
    plots: Path | None = typer.Option(
        None,
        "--plots",
        metavar="DIR",
        help="Write PNG figures (paper Fig. 1a-1d; with --labels also the downstream spread) into this directory.",
    ),
    labels: Path | None = typer.Option(
        None,
        "--labels",
        metavar="FILE",
        help="Key→label file (CSV/TSV key,label; "
        "MovieLens u.item, movies.dat or movies.csv): adds the downstream audit.",
    ),
    task: Literal["auto", "classification", "regression"] = TASK_OPTION,
    model: Literal["logreg", "knn", "ridge"] | None = MODEL_OPTION,
    test_size: float = TEST_SIZE_OPTION,
    split_seed: int = SPLIT_SEED_OPTION,
    variants: str | None = typer.Option(
        None,
        "--variants",
        metavar="LIST",
        help="Comma list of h, avg, aligned, phi:M, phi:M@SIGMA, aligned+phi:M [default: h,avg,aligned,phi:d,phi:2d].",
    ),
    featurize_dims: str | None = typer.Option(
        None,
        "--featurize-dims",
        metavar="M,M,...",
        help="Sweep M of every phi variant, e.g. 16,32,64,128 (paper Fig. A.3).",
    ),
    sigmas: str | None = typer.Option(
        None,
        "--sigmas",
        metavar="SIGMA,SIGMA,...",
        help="Sweep sigma of every phi variant, e.g. 0.5,1,2 (paper Fig. A.4).",
    ),
    reference: int = typer.Option(
        0, "--reference", min=0, metavar="N", help="Position of the run whose model is reused stale on the others."
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", help="Downstream fits in parallel [default: available cores]."
    ),
    scheduler: str | None = typer.Option(
        None,
        "--scheduler",
        metavar="ADDRESS",
        help="Send the downstream fits to this "
        "Dask scheduler (tcp://host:8786), or local:N; default $STABCLI_SCHEDULER. "
        "Needs stabcli[dask].",
    ),
    encoding: str | None = typer.Option(
        None,
        "--encoding",
        metavar="ENCODING",
        help="Text encoding of the label and "
        "--key-names files [default: utf-8; MovieLens u.item and movies.dat: latin-1; "
        "a byte-order mark decides].",
    ),
    min_class_size: int = typer.Option(
        5,
        "--min-class-size",
        min=1,
        metavar="N",
        help="Drop label classes with fewer "
        "labeled keys, with a warning (5 = one expected test key at the default "
        "--test-size 0.2).",
    ),
    key_names: Path | None = KEY_NAMES_OPTION,
    per_key: Path | None = typer.Option(
        None,
        "--per-key",
        metavar="FILE",
        help="Write every key's frequency, norm, "
        "aligned variance, relative instability, displacement and k-NN overlap "
        "(.csv, .tsv or .parquet).",
    ),
    force: bool = REPORT_FORCE_OPTION,
    input_format: InputFormat | None = INPUT_FORMAT_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    keys: Path | None = KEYS_OPTION,
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
    """
    from stabcli.commands.audit import AuditOptions

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
            variants=_comma_list(variants, str, "--variants"),
            featurize_dims=_comma_list(featurize_dims, int, "--featurize-dims") or [],
            sigmas=_comma_list(sigmas, float, "--sigmas") or [],
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
        report = _audit_and_render(
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
        )
    if not report.passed:
        raise typer.Exit(EXIT_FAILED_CHECK)


@app.command("featurize", cls=_Command)
def featurize_cmd(
    input_path: Path = typer.Argument(..., metavar="INPUT", help="An embedding file or a run set."),
    output: Path = typer.Option(
        ..., "--out", "-o", metavar="PATH", help="Output file, or a new run-set directory for a run set."
    ),
    dim: int | None = typer.Option(
        None, "--dim", min=0, metavar="M", help="Output dimension M (even); 0 = only align [default: 128]."
    ),
    epsilon: float | None = typer.Option(
        None,
        "--epsilon",
        metavar="ERROR",
        help="Choose the smallest M whose measured mean kernel error is <= this (instead of --dim).",
    ),
    sigma: float = typer.Option(
        1.0, "--sigma", metavar="SIGMA", help="Direction scale: kernel exp(-sigma^2 |h-h'|^2 / 2)."
    ),
    seed: int = typer.Option(0, "--seed", min=0, metavar="SEED", help="Seed of the random directions U."),
    normalize: bool = typer.Option(True, "--normalize/--no-normalize", help="L2-normalize rows first."),
    align_to: Path | None = typer.Option(
        None,
        "--align-to",
        metavar="PATH",
        help="Rotate onto this reference first (shared keys): an embedding file, or a run set's run --reference.",
    ),
    reference: int = typer.Option(
        0, "--reference", min=0, metavar="N", help="With --align-to RUN_SET: position of its reference run."
    ),
    fmt: Literal["npy", "word2vec", "word2vec-bin", "kv", "parquet"] | None = typer.Option(
        None,
        "--format",
        metavar="FORMAT",
        help="npy, word2vec, word2vec-bin, kv or parquet [default: from the suffix of --out].",
    ),
    save_transform: Path | None = typer.Option(
        None, "--save-transform", metavar="FILE", help="Write U (and the rotation) with a serving recipe (.npz)."
    ),
    chunk_rows: int | None = typer.Option(
        None,
        "--chunk-rows",
        min=1,
        metavar="N",
        help="Rows per streamed chunk [default: about 1 MB of output, which stays in cache].",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace existing outputs (a directory only if it holds nothing but "
        "a run set stabcli wrote; never an input).",
    ),
    input_format: InputFormat | None = INPUT_FORMAT_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    keys: Path | None = KEYS_OPTION,
) -> None:
    """Turn embeddings into random Fourier features phi(h), optionally aligned to a reference.

    phi(h) = sqrt(1/k) [cos(hU), sin(hU)], k = M/2, U ~ N(0, sigma^2) from the seed. A run
    set is featurized run by run with the same U into a new run set that audit reads.

    Examples:

        stabcli featurize emb.npy --out phi.npy --dim 64

        stabcli featurize runs/exp1 --out runs/exp1-phi --dim 64 && stabcli audit runs/exp1-phi

        stabcli featurize today.vec --out today-aligned.npy --dim 0 --align-to yesterday.vec
    """
    from stabcli.commands.featurize import FeaturizeOptions, featurize

    options = FeaturizeOptions(
        dim=dim,
        epsilon=epsilon,
        sigma=sigma,
        seed=seed,
        normalize=normalize,
        align_to=align_to,
        reference=reference,
        fmt=fmt,
        chunk_rows=chunk_rows,
    )
    result = featurize(
        input_path,
        output,
        options,
        save_transform=save_transform,
        force=force,
        on_run=lambda name: err.print(literal(f"featurized {name}")) if err.is_terminal else None,
        read=ReadOptions(input_format, trust_pickle, keys),
    )
    for note in result.notes:
        err.print(literal(f"note: {note}"), soft_wrap=True)
    out.print(
        literal(
            f"wrote {result.output}: {result.runs} run(s) × {result.rows:,} keys, {result.input_dim} → "
            f"{result.output_dim} dims (sidecar {result.sidecar})"
        ),
        soft_wrap=True,
    )
    if result.measured_error is not None:
        out.print(
            f"--epsilon {epsilon:g}: M = {result.output_dim}, measured mean kernel error {result.measured_error:.4g}; "
            f"Rahimi–Recht's uniform bound (95%) would need M = {result.rahimi_recht_dim:,}",
            highlight=False,
            soft_wrap=True,
        )
    if result.residual_before is not None:
        out.print(
            f"alignment residual ‖XQ − REF‖/‖REF‖ on shared keys: {result.residual_before:.4g} → {result.residual_after:.4g}",
            highlight=False,
            soft_wrap=True,
        )


def sample_path(name: str) -> Path:
    """Path of a bundled sample file (installed as package data ``stabcli.sample_data``)."""
    return Path(str(files("stabcli.sample_data").joinpath(name)))


@app.command(cls=_Command)
def demo(
    out_dir: Path = typer.Option(
        Path("stabcli-demo"), "--out", "-o", metavar="DIR", help="Where the demo writes its run sets and reports."
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        help="Runs and downstream fits in parallel [default: available cores].",
    ),
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
    from stabcli.commands.audit import AuditOptions, build_report, load_runs
    from stabcli.commands.featurize import FeaturizeOptions, featurize
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.reports.audit_render import comparison_table

    sessions = sample_path("sessions.txt")
    _check_demo_out(out_dir)  # before a minute of work, not after
    check_removable_runset(out_dir / "runs-phi64")
    err.print(
        f"stabcli demo: 5 item2vec runs on the synthetic sample {sessions.name} → {out_dir / 'runs'}", highlight=False
    )
    config = TrainConfig(model="word2vec", dim=32, window=3, negative=3, epochs=10, checkpoints=True)
    result = _run_pretrain(
        out_dir / "runs",
        sessions,
        config,
        runs=5,
        seed=0,
        jobs=jobs,
        force=False,
        corpus_options=CorpusOptions(format="lines"),
        timeout=None,
    )
    _report_pretrain(result, "table")
    out.print()
    labels = DownstreamOptions(sample_path("item_genres.tsv"), jobs=jobs)
    raw = _audit_and_render(
        [out_dir / "runs"],
        AuditOptions(top=10),
        [],
        "table",
        out_dir / "audit.json",
        out_dir / "audit.md",
        out_dir / "plots",
        labels,
        force=True,
    )
    featurized = out_dir / "runs-phi64"
    # rebuilt from the current runs; --force replaces it only if it holds nothing but stabcli's run set
    featurize(out_dir / "runs", featurized, FeaturizeOptions(dim=64), force=True)
    phi = build_report(load_runs([featurized]), AuditOptions(top=0))
    out.print()
    out.print(comparison_table({"raw h (32 dims)": raw, "phi(h) (64 dims)": phi}))
    out.print(
        "Measured, not assumed: featurization helps where its column is more stable; see README "
        "'When featurization helps'.",
        highlight=False,
    )
    out.print()
    _demo_drift(out_dir, config, jobs)


# everything the demo writes in its --out, and replaces when it runs again
DEMO_OUTPUTS = frozenset(
    {
        "runs",
        "runs-phi64",
        "runs-phi64.featurize.json",
        "runs-refreshed",
        "audit.json",
        "audit.md",
        "plots",
        "sessions-refreshed.txt",
        "drift.json",
        "drift.md",
    }
)


def _check_demo_out(out_dir: Path) -> None:
    """The demo replaces its reports in ``out_dir``: refuse a directory that holds anything
    else (it is not an earlier demo's, and its audit.md or drift.json may be the user's)."""
    if (out_dir.is_symlink() and not out_dir.is_dir()) or (out_dir.exists() and not out_dir.is_dir()):
        raise UsageError(f"--out {out_dir}: exists and is not a directory")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in DEMO_OUTPUTS)
        if foreign:
            raise UsageError(
                f"--out {out_dir}: holds {foreign[0]}, which the demo did not write; choose an empty or new directory"
            )


DEMO_MOVED_GENRE, DEMO_INTO_GENRE, DEMO_MOVED_RANKS = "Horror", "Comedy", range(10, 22)


def _demo_drift(out_dir: Path, config: TrainConfig, jobs: int | None) -> None:
    """The demo's drift step: a refresh in which 12 Horror items of middling popularity (ranks
    11-22 by frequency in their genre) appear in Comedy sessions instead of their own; one run
    trained on it, compared with run 0 against the noise band of the demo's 5 runs."""
    from collections import Counter

    from stabcli.commands.drift import DriftOptions, compute_drift, load_inputs, move_items
    from stabcli.fs.outputs import OutputPlan
    from stabcli.reports.drift_render import render_markdown, render_terminal
    from stabcli.reports.schema import dumps

    sessions = [line.split() for line in sample_path("sessions.txt").read_text(encoding="utf-8").splitlines() if line]
    rows = [line.split("\t") for line in sample_path("item_genres.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    genre = {item: g for item, g in rows}
    counts = Counter(t for session in sessions for t in session if genre.get(t) == DEMO_MOVED_GENRE)
    ranked = [item for item, _ in counts.most_common()]
    moved = {ranked[i] for i in DEMO_MOVED_RANKS}
    refreshed = out_dir / "sessions-refreshed.txt"
    # the demo's own files: replaced atomically on a rerun; a directory or an input of that name is refused
    plan = OutputPlan([sample_path("sessions.txt"), sample_path("item_genres.tsv"), out_dir / "runs"], force=True)
    plan.add(refreshed, "demo")
    with plan:
        plan.write_text(
            refreshed, "".join(" ".join(s) + "\n" for s in move_items(sessions, genre, moved, DEMO_INTO_GENRE, 0))
        )
    err.print(
        f"stabcli drift: a refresh where {len(moved)} {DEMO_MOVED_GENRE} items (frequency ranks "
        f"{DEMO_MOVED_RANKS[0] + 1}-{DEMO_MOVED_RANKS[-1] + 1}) appear in {DEMO_INTO_GENRE} sessions; one run on "
        f"it → {out_dir / 'runs-refreshed'}",
        highlight=False,
    )
    _run_pretrain(
        out_dir / "runs-refreshed",
        refreshed,
        config,
        runs=1,
        seed=100,
        jobs=jobs,
        force=False,
        corpus_options=CorpusOptions(format="lines"),
        timeout=None,
    )
    inputs = load_inputs(out_dir / "runs", out_dir / "runs-refreshed", out_dir / "runs")
    report, _ = compute_drift(inputs, DriftOptions(top=15))
    plan = OutputPlan([out_dir / "runs", out_dir / "runs-refreshed"], force=True)
    plan.add(out_dir / "drift.json", "demo")
    plan.add(out_dir / "drift.md", "demo")
    with plan:
        plan.write_text(out_dir / "drift.json", dumps(report))
        plan.write_text(out_dir / "drift.md", render_markdown(report))
    render_terminal(report, out)
    found = sum(t.key in moved for t in report.drift.top)
    out.print(
        f"{found} of the {len(report.drift.top)} listed keys are the {len(moved)} moved {DEMO_MOVED_GENRE} items "
        f"({', '.join(sorted(moved))}); see docs/drift.md for how to read this.",
        highlight=False,
        soft_wrap=True,
    )


@app.command("drift", cls=_Command)
def drift_cmd(
    before: Path = typer.Argument(..., metavar="BEFORE", help="An embedding file, or a run set (its --reference run)."),
    after: Path = typer.Argument(..., metavar="AFTER", help="An embedding file, or a run set (its --reference run)."),
    noise: Path | None = typer.Option(
        None,
        "--noise",
        metavar="RUN_SET",
        help="Run set of seeded runs on BEFORE's data and configuration (stabcli pretrain): each key's noise band.",
    ),
    reference: int = typer.Option(
        0, "--reference", metavar="N", help="Run position used when BEFORE or AFTER is a run set."
    ),
    align: bool = typer.Option(
        True,
        "--align/--no-align",
        help="Rotate AFTER onto BEFORE (orthogonal Procrustes on "
        "the common keys); --no-align compares raw coordinates.",
    ),
    knn_k: int = typer.Option(10, "--knn-k", metavar="K", help="Neighbours per key for the k-NN overlap."),
    knn_queries: int = typer.Option(
        1_000,
        "--knn-queries",
        metavar="N",
        help="Sampled keys for the k-NN overlap above 10,000 keys (below: every key).",
    ),
    alpha: float = typer.Option(
        0.01, "--alpha", metavar="LEVEL", help="Level of the per-key test and of the FDR of the listed keys."
    ),
    top: int = typer.Option(20, "--top", metavar="N", help="Moved keys to list (largest changes without --noise)."),
    seed: int = typer.Option(0, "--seed", metavar="SEED", help="Seed of the k-NN sample."),
    key_names: Path | None = KEY_NAMES_OPTION,
    labels: Path | None = typer.Option(
        None,
        "--labels",
        metavar="FILE",
        help="Key→label file: BEFORE's model applied to AFTER (raw and aligned) against a model refit on AFTER.",
    ),
    task: str = TASK_OPTION,
    model: str | None = MODEL_OPTION,
    test_size: float = TEST_SIZE_OPTION,
    split_seed: int = SPLIT_SEED_OPTION,
    encoding: str = typer.Option(
        "utf-8", "--encoding", metavar="ENCODING", help="Text encoding of --labels and --key-names."
    ),
    per_key: Path | None = typer.Option(
        None, "--per-key", metavar="FILE", help="Every key's measures, noise band and verdict (.csv, .tsv or .parquet)."
    ),
    check: list[str] = typer.Option(
        [],
        "--check",
        metavar="'PATH OP VALUE'",
        help="CI gate (repeatable), e.g. 'drift.moved_share<0.05'. A failure exits 1.",
    ),
    fmt: str = FORMAT_OPTION,
    json_path: Path | None = JSON_OPTION,
    markdown_path: Path | None = MARKDOWN_OPTION,
    plots: Path | None = typer.Option(
        None, "--plots", metavar="DIR", help="Write PNG figures into this new directory."
    ),
    force: bool = REPORT_FORCE_OPTION,
    input_format: InputFormat | None = INPUT_FORMAT_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
    keys: Path | None = KEYS_OPTION,
) -> None:
    """Which keys did a refresh really move, and which only changed by training noise?

    Compares BEFORE and AFTER on their common keys (AFTER rotated onto BEFORE). With --noise,
    every key has its own noise band from the run pairs of the noise run set, and a key has
    moved when its change exceeds that band at level --alpha; moved keys are listed with
    false discovery rate control.

    Examples:

        stabcli drift runs/yesterday today.npy --noise runs/yesterday

        stabcli drift before.vec after.vec --noise runs/before --check 'drift.moved_share<0.05' --json drift.json

        stabcli drift runs/ml ml-new.npy --noise runs/ml --key-names ml-100k/u.item --per-key drift.csv --plots figs
    """
    from stabcli.commands.drift import (
        DriftOptions,
        compute_drift,
        evaluate_checks,
        load_inputs,
        read_key_names,
        validate_checks,
    )
    from stabcli.reports.audit_render import require_plots
    from stabcli.reports.drift_render import render_markdown, render_terminal, write_plots
    from stabcli.reports.schema import dumps

    if fmt not in ("table", "json"):
        raise OptionError("fmt", f"{fmt!r}: choose table or json")
    options = DriftOptions(
        alpha=alpha, align=align, knn_k=knn_k, knn_queries=knn_queries, top=top, seed=seed, reference=reference
    )
    read = ReadOptions(input_format, trust_pickle, keys)
    downstream = None
    if labels is None:
        given = {"--task": task if task != "auto" else None, "--model": model}
        extra = [name for name, value in given.items() if value is not None]
        if extra:
            raise UsageError(f"{', '.join(extra)} only apply with --labels FILE")
    else:
        from stabcli.measure.downstream import DownstreamOptions

        downstream = DownstreamOptions(
            labels, task=task, model=model, test_size=test_size, split_seed=split_seed, encoding=encoding
        )
        if not 0 < test_size < 1:
            raise OptionError("test_size", f"{test_size:g} must be between 0 and 1")
    parsed = validate_checks(check, has_noise=noise is not None, has_labels=labels is not None)
    if plots:
        require_plots()
    per_key_csv = False
    if per_key:
        from stabcli.inputs.keytable import per_key_format

        per_key_csv = per_key_format(per_key) == "csv"
    plan = _report_outputs(
        [before, after, *([noise] if noise else [])],
        downstream,
        json_path,
        markdown_path,
        plots,
        per_key,
        key_names,
        force,
    )
    if keys is not None:
        plan.add_input(keys)
    plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
    inputs = load_inputs(before, after, noise, reference, read)
    names = read_key_names(key_names, set(inputs.keys), encoding) if key_names else None
    with err.status("drift", spinner="dots") if err.is_terminal else nullcontext() as status:
        report, table = compute_drift(
            inputs,
            options,
            downstream,
            names,
            str(key_names) if key_names else None,
            on_step=(lambda s: status.update(f"drift: {s}")) if status else None,
        )
    report = evaluate_checks(report, parsed)
    text = dumps(report)
    _write_report_outputs(
        plan,
        text,
        lambda: render_markdown(report),
        json_path,
        markdown_path,
        plots,
        lambda directory: write_plots(report, table, directory),
        per_key,
        lambda: table.frame(compact=per_key_csv),
    )
    if fmt == "json":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        render_terminal(report, out)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED_CHECK)


def main() -> None:
    app(prog_name="stabcli")
