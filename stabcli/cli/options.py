"""Options more than one command has, declared once as typer ``Annotated`` aliases.

A command writes ``knn_k: KnnK = 10``; the flag, its metavar, its range and its help are
the same in every command that has it. Options whose help must name what they apply to
in one command are factories taking that help (``jobs_option("Runs in parallel ...")``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from stabcli import constraints as c
from stabcli.constraints import Constraint, ranged
from stabcli.errors import UsageError, quote

# library parameter names whose flag is not simply ``--`` + the name with dashes
FLAG_NAMES: dict[str, str] = {
    "model_params": "--model-param",
    "fmt": "--format",
    "out": "--out",
    "output": "--out",
    "out_dir": "--out",
}


def flag_for(param: str) -> str:
    """The command-line flag of a library parameter name (``knn_k`` → ``--knn-k``)."""
    return FLAG_NAMES.get(param, "--" + param.replace("_", "-"))


def constrained(table: Mapping[str, Constraint], name: str, metavar: str, help: str) -> Any:
    """The option of the library parameter ``name``: its flag (``flag_for``), ``metavar``, and
    ``help`` followed by the range its options type declares in ``table`` (the library checks
    the value, with the same message from the CLI and the API)."""
    return typer.Option(flag_for(name), metavar=metavar, help=ranged(help, table[name]))


# -- a command's parameters as its entry point's keywords -----------------------------------
CLI_ONLY = ("fmt", "quiet")  # how the CLI renders: never the library's
API_NAMES = {"check": "checks", "model_param": "model_params", "param": "params"}  # repeatable flags: plural keywords
# a report command's files, in output.report_files' order, and their defaults
REPORT_FILES: dict[str, Any] = {
    "json_path": None,
    "markdown_path": None,
    "plots": None,
    "per_key": None,
    "force": False,
    "html_path": None,
    "mlflow": False,
    "mlflow_experiment": None,
}


def api_options(
    given: dict[str, Any], skip: tuple[str, ...] = (), lists: dict[str, type] | None = None, files: bool = False
) -> dict[str, Any]:
    """A command's parameters (its ``locals()``, taken first thing in its body) as its entry
    point's keywords: ``--format``, ``--quiet`` and ``skip`` (the positional arguments) left
    out, repeatable flags renamed (``API_NAMES``), ``lists`` (name → item type) parsed from
    comma lists, and with ``files`` the report files through ``output.report_files``."""
    from stabcli.cli.output import report_files

    lists = lists or {}
    options = {}
    for name, value in given.items():
        if name in skip or name in CLI_ONLY or (files and name in REPORT_FILES):
            continue
        options[API_NAMES.get(name, name)] = comma_list(value, lists[name], flag_for(name)) if name in lists else value
    if files:
        options.update(report_files(*(given.get(name, default) for name, default in REPORT_FILES.items())))
    return options


def comma_list(value: str | None, kind: type, option: str) -> list[Any] | None:
    """``'16,32'`` → ``[16, 32]``; a bad item is a usage error naming the option."""
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        if kind is not str and not all(item.isascii() for item in items):  # int() reads fullwidth digits
            raise ValueError(value)
        parsed = [kind(item) for item in items]
    except ValueError:
        raise UsageError(
            f"{option} {quote(value)}: expected a comma-separated list of {kind.__name__} values"
        ) from None
    if not parsed:
        raise UsageError(f"{option}: empty list")
    return parsed


# -- report output (audit, drift; pretrain's summary) ---------------------------------------
ReportFormat = Annotated[
    Literal["table", "json"],
    typer.Option("--format", metavar="table|json", help="table (terminal) or json (stdout, exact)."),
]
JsonPath = Annotated[Path | None, typer.Option("--json", metavar="FILE", help="Also write the JSON report here.")]
MarkdownPath = Annotated[
    Path | None, typer.Option("--markdown", metavar="FILE", help="Also write a Markdown report here.")
]
ReportForce = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace existing --json/--markdown/--html/--per-key files and a --plots directory holding only "
        "stabcli's figures (never an input).",
    ),
]


HtmlPath = Annotated[
    Path | None,
    typer.Option(
        "--html",
        metavar="FILE",
        help="Also write a self-contained HTML page (tables, figures, the per-key table sortable and searchable).",
    ),
]
Mlflow = Annotated[
    bool,
    typer.Option(
        "--mlflow",
        help="Log the options, every number of the report and its renderings to MLflow (MLFLOW_TRACKING_URI, "
        "else MLflow's default: sqlite:///mlflow.db here). Needs stabcli[mlflow].",
    ),
]
MlflowExperiment = Annotated[
    str | None,
    typer.Option(
        "--mlflow-experiment",
        metavar="NAME",
        help="MLflow experiment to log into [default: $MLFLOW_EXPERIMENT_NAME, else stabcli].",
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Nothing on stderr but warnings and errors: no progress, no stage lines, no 'wrote' lines.",
    ),
]


def check_option(example: str) -> Any:
    """``--check``: a CI gate on the JSON report; ``example`` is one of the command's paths."""
    return typer.Option(
        "--check",
        metavar="'PATH OP VALUE'",
        help=f"CI gate on the JSON report (repeatable); e.g. '{example}'. A failure exits 1.",
    )


def plots_option(help: str) -> Any:
    return typer.Option("--plots", metavar="DIR", help=help)


def per_key_option(help: str) -> Any:
    return typer.Option("--per-key", metavar="FILE", help=help)


# -- measures shared by audit and drift -------------------------------------------------------
KnnK = Annotated[
    int, typer.Option("--knn-k", metavar="K", help=ranged("Neighbours per key for the k-NN overlap.", c.KNN_K))
]


def top_option(help: str) -> Any:
    return typer.Option("--top", metavar="N", help=ranged(help, c.TOP))


def knn_queries_option(help: str) -> Any:
    return typer.Option("--knn-queries", metavar="N", help=ranged(help, c.DRIFT_OPTIONS["knn_queries"]))


def seed_option(help: str, constraint: Constraint | None = c.SEED) -> Any:
    """``--seed``; ``constraint`` None: a seed the library does not declare (pretrain's),
    checked by typer."""
    if constraint is None:
        return typer.Option("--seed", min=0, metavar="SEED", help=help)
    return typer.Option("--seed", metavar="SEED", help=ranged(help, constraint))


def reference_option(help: str) -> Any:
    return typer.Option("--reference", metavar="N", help=ranged(help, c.REFERENCE))


# -- labels and the downstream protocol (audit, drift) ---------------------------------------
def labels_option(help: str) -> Any:
    return typer.Option("--labels", metavar="FILE", help=help)


Task = Annotated[
    Literal["auto", "classification", "regression", "multilabel", "next-item"],
    typer.Option(
        "--task",
        metavar="auto|classification|regression|multilabel|next-item",
        help="With --labels; auto: keys with several labels are multilabel, numeric labels with fractions or "
        "more than 20 values regression. audit: next-item with --interactions.",
    ),
]
DownstreamModel = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="logreg|knn|ridge|gbdt|mlp|MODULE:CLASS",
        help="With --labels; gbdt and mlp are scikit-learn's HistGradientBoosting and MLP (seeded), MODULE:CLASS "
        "any scikit-learn estimator [default: logreg for classification, ridge for regression].",
    ),
]
ModelParam = Annotated[
    list[str],
    typer.Option(
        "--model-param",
        metavar="NAME=VALUE",
        help="A parameter of --model (repeatable); VALUE is a Python literal: 200, 0.1, (64, 32), None, a word.",
    ),
]
TestSize = Annotated[
    float,
    constrained(c.DOWNSTREAM_OPTIONS, "test_size", "SHARE", "Share of labeled keys in the test split."),
]
SplitSeed = Annotated[
    int,
    constrained(c.DOWNSTREAM_OPTIONS, "split_seed", "SEED", "Seed of the train/test split shared by all runs."),
]
KeyNames = Annotated[
    Path | None,
    typer.Option(
        "--key-names",
        metavar="FILE",
        help="Key→display name file for the tables: MovieLens u.item (id|title|…) or a 2-column CSV/TSV.",
    ),
]


def encoding_option(help: str) -> Any:
    return typer.Option("--encoding", metavar="ENCODING", help=help)


# -- reading embeddings (audit, featurize, drift: embeddings.ReadOptions) --------------------
InputFormatName = Literal[
    "npy", "word2vec", "glove", "word2vec-bin", "fasttext", "kv", "parquet"
]  # embeddings.READ_FORMATS
InputFormat = Annotated[
    InputFormatName | None,
    typer.Option(
        "--input-format",
        metavar="FORMAT",
        help="Read every input file as npy, word2vec, glove (word2vec text without the header line), "
        "word2vec-bin, fasttext (Facebook .bin), kv (any gensim save(): .kv, .wv, .model) or parquet, whatever "
        "its suffix; gzip, bzip2 and xz files are read as streams [default: from each file's suffix].",
    ),
]
TrustPickle = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Load gensim files (.kv, .wv, .model) with Python's unrestricted unpickler. "
        "RISK: such a file can run any code on this machine; use only for files you made or trust. Without it, "
        "only the classes gensim's own save() writes are loaded.",
    ),
]
Keys = Annotated[
    Path | None,
    typer.Option(
        "--keys",
        metavar="FILE",
        help="Keys (one per line) for the .npy inputs that have no NAME.keys.txt; without it, "
        "keyless and keyed inputs cannot be mixed.",
    ),
]


# -- parallel work (pretrain, audit, demo) -----------------------------------------------------
def jobs_option(help: str, constraint: Constraint | None = None) -> Any:
    """``--jobs``; with the ``constraint`` of the options type that takes it, checked there."""
    if constraint is None:
        return typer.Option("--jobs", "-j", min=1, metavar="N", help=help)
    return typer.Option("--jobs", "-j", metavar="N", help=ranged(help, constraint))


def scheduler_option(help: str) -> Any:
    return typer.Option("--scheduler", metavar="ADDRESS", help=help)


# -- interaction tables (pretrain's corpus, audit --task next-item: corpus.CorpusOptions) ----
CorpusEncoding = Annotated[
    str, typer.Option("--encoding", metavar="ENCODING", help="Text encoding of the corpus (a byte-order mark decides).")
]
CorpusFormat = Annotated[
    Literal["auto", "lines", "tagged", "movielens", "interactions"],
    typer.Option(
        "--corpus-format",
        metavar="FORMAT",
        help="auto, lines, tagged, movielens or interactions (auto: "
        "MovieLens names, doc2vec → tagged, a delimited table → interactions, else lines).",
    ),
]
UserCol = Annotated[
    str | None,
    typer.Option(
        "--user-col",
        metavar="COL",
        help="Tables: user column, header name or 0-based position "
        "[default: a user/userId/uid… header, else column 0].",
    ),
]
ItemCol = Annotated[
    str | None,
    typer.Option(
        "--item-col",
        metavar="COL",
        help="Tables: item column, name or position [default: an item/itemId/movieId… header, else column 1].",
    ),
]
TimeCol = Annotated[
    str | None,
    typer.Option(
        "--time-col",
        metavar="COL",
        help="Tables: column ordering each user's items "
        "[default: a timestamp/ts/time… header; no header: column 3 in the "
        "MovieLens layout, else file order; none: file order].",
    ),
]
RatingCol = Annotated[
    str | None,
    typer.Option(
        "--rating-col",
        metavar="COL",
        help="Tables: rating column for --min-rating [default: a rating/score… header; MovieLens layout: column 2].",
    ),
]
Tokenize = Annotated[
    Literal["none", "simple"],
    typer.Option(
        "--tokenize",
        metavar="HOW",
        help="Text corpora (lines, tagged): none splits on whitespace; simple is gensim's simple_preprocess "
        "(lower case, words of 2-15 letters, punctuation and digits dropped). Recorded in the manifest.",
    ),
]
MinRating = Annotated[
    float | None,
    typer.Option("--min-rating", metavar="RATING", help="Tables: keep ratings >= this [default: keep all]."),
]


# -- the model a run trains (pretrain, sweep) --------------------------------------------------
EmbeddingModel = Annotated[
    Literal["word2vec", "doc2vec"],
    typer.Option(
        "--model",
        metavar="word2vec|doc2vec",
        help="word2vec (sentences or item sessions) or doc2vec (tagged documents).",
    ),
]
Dim = Annotated[int, constrained(c.TRAIN_CONFIG, "dim", "N", "Embedding dimension.")]
Window = Annotated[int, constrained(c.TRAIN_CONFIG, "window", "N", "Context window.")]
Negative = Annotated[
    int,
    constrained(c.TRAIN_CONFIG, "negative", "N", "Negative samples (0 = none)."),
]
Epochs = Annotated[int, constrained(c.TRAIN_CONFIG, "epochs", "N", "Training epochs.")]
SkipGram = Annotated[bool, typer.Option("--sg/--cbow", help="Skip-gram (doc2vec: PV-DBOW) or CBOW (doc2vec: PV-DM).")]
MinCount = Annotated[
    int,
    constrained(c.TRAIN_CONFIG, "min_count", "N", "Ignore tokens seen fewer times."),
]
Params = Annotated[
    list[str], typer.Option("--param", metavar="KEY=VALUE", help="Any other gensim argument (repeatable).")
]
Timeout = Annotated[
    float | None,
    typer.Option("--timeout", metavar="SECONDS", help="Seconds before a script run is killed [default: none]."),
]
