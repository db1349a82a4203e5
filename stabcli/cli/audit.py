"""``stabcli audit``: how much of an embedding is run-to-run noise, and which parts are stable."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from stabcli import constraints as c
from stabcli.cli.options import (
    CorpusFormat,
    DownstreamModel,
    HtmlPath,
    InputFormat,
    ItemCol,
    JsonPath,
    KeyNames,
    Keys,
    KnnK,
    MarkdownPath,
    MinRating,
    Mlflow,
    MlflowExperiment,
    ModelParam,
    Quiet,
    RatingCol,
    ReportForce,
    ReportFormat,
    SplitSeed,
    Task,
    TestSize,
    TimeCol,
    TrustPickle,
    UserCol,
    api_options,
    check_option,
    constrained,
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
from stabcli.cli.output import render_report, set_quiet, spinner, warn, wrote

# the options given as comma lists, and their items' type
LISTS: dict[str, type] = {"variants": str, "featurize_dims": int, "sigmas": float, "k_list": int, "profiles": str}

_Inputs = Annotated[
    list[Path], typer.Argument(metavar="INPUTS...", help="A run set directory, or two or more embedding files.")
]


_Pairs = Annotated[
    int,
    constrained(c.AUDIT_OPTIONS, "pairs", "N", "Key pairs sampled for the inner-product noise share."),
]


_KnnQueries = Annotated[
    int | None,
    knn_queries_option("Sampled query keys for k-NN overlap [default: every key up to 10,000 keys, else 1,000]."),
]


_MinFrequency = Annotated[
    int | None,
    constrained(
        c.AUDIT_OPTIONS,
        "min_frequency",
        "N",
        "List only keys that occur at least N times in the training corpus (needs frequencies).",
    ),
]


_Frequencies = Annotated[
    Path | None,
    typer.Option(
        "--frequencies",
        metavar="FILE",
        help="Key and count per line (tab, comma or space separated) for the stability-by-frequency table "
        "[default: the counts the run set recorded].",
    ),
]


_EisAnchor = Annotated[
    Path | None,
    typer.Option(
        "--eis-anchor",
        metavar="FILE",
        help="Anchor embedding for EIS (any embedding file with keys; read by its suffix) [default: the runs' "
        "consensus after Procrustes].",
    ),
]


_EisAlpha = Annotated[
    float,
    constrained(c.AUDIT_OPTIONS, "eis_alpha", "ALPHA", "Exponent of the anchor's spectrum in EIS."),
]


_Plots = Annotated[
    Path | None,
    plots_option("Write PNG figures (paper Fig. 1a-1d; with --labels also the downstream spread) into this directory."),
]


_Labels = Annotated[
    Path | None,
    labels_option(
        "Key→label file (CSV/TSV key,label; MovieLens u.item, movies.dat or movies.csv): adds the downstream audit."
    ),
]


_Variants = Annotated[
    str | None,
    typer.Option(
        "--variants",
        metavar="LIST",
        help="Comma list of h, avg, aligned, phi:M, phi:M@SIGMA, aligned+phi:M [default: h,avg,aligned,phi:d,phi:2d].",
    ),
]


_FeaturizeDims = Annotated[
    str | None,
    typer.Option(
        "--featurize-dims",
        metavar="M,M,...",
        help="Sweep M of every phi variant, e.g. 16,32,64,128 (paper Fig. A.3).",
    ),
]


_Sigmas = Annotated[
    str | None,
    typer.Option(
        "--sigmas",
        metavar="SIGMA,SIGMA,...",
        help="Sweep sigma of every phi variant, e.g. 0.5,1,2 (paper Fig. A.4).",
    ),
]


_Jobs = Annotated[
    int | None, jobs_option("Downstream fits in parallel [default: available cores].", c.DOWNSTREAM_OPTIONS["jobs"])
]


_Scheduler = Annotated[
    str | None,
    scheduler_option(
        "Send the downstream fits to this Dask scheduler (tcp://host:8786), or local:N; "
        "default $STABCLI_SCHEDULER. Needs stabcli[dask]."
    ),
]


_Encoding = Annotated[
    str | None,
    encoding_option(
        "Text encoding of the label and --key-names files [default: utf-8; MovieLens u.item and "
        "movies.dat that are not valid UTF-8: latin-1; a byte-order mark decides]."
    ),
]


_Prefer = Annotated[
    Literal["stability", "balanced", "accuracy"],
    typer.Option(
        "--prefer",
        metavar="stability|balanced|accuracy",
        help="With --labels: a variant with more churn or std than the input is recommended never (stability), "
        "for a gain beyond 2× the noise (balanced) or beyond 1× (accuracy).",
    ),
]


_MinClassSize = Annotated[
    int,
    constrained(
        c.DOWNSTREAM_OPTIONS,
        "min_class_size",
        "N",
        "Drop label classes with fewer labeled keys, with a warning (5 = one expected test key at the "
        "default --test-size 0.2).",
    ),
]


_PerKey = Annotated[
    Path | None,
    per_key_option(
        "Write every key's frequency, norm, aligned variance, relative instability, displacement and "
        "k-NN overlap (.csv, .tsv or .parquet)."
    ),
]


_Interactions = Annotated[
    Path | None,
    typer.Option(
        "--interactions",
        metavar="FILE",
        help="User-item interactions (pretrain's corpus formats and column options): adds the next-item "
        "recommendation task, each user's last item held out.",
    ),
]


_KList = Annotated[
    str, typer.Option("--k-list", metavar="K,K,...", help="With --interactions: list lengths for Recall/NDCG@K.")
]


_Profiles = Annotated[
    str,
    typer.Option(
        "--profiles",
        metavar="mean,last",
        help="With --interactions: a user is the mean of her history's unit vectors, or her last item.",
    ),
]


_Users = Annotated[
    int,
    constrained(
        c.NEXT_ITEM_OPTIONS, "users", "N", "With --interactions: score a seeded sample of N users (0: every user)."
    ),
]


# the command's --help (a docstring's text; app.py registers it)
HELP = """Measure how much of an embedding is run-to-run noise, and which parts are stable.

With --labels, also how much a downstream model fluctuates across runs (mean and std of
its test metric, churn, the test keys that flip, stale-model compatibility) for raw,
averaged, aligned and featurized variants, and which variant to use. With --interactions,
how much next-item recommendations fluctuate (Recall/NDCG@K, list churn, stale profiles).

Examples:

    stabcli audit runs/exp1

    stabcli audit a.vec b.vec c.vec --normalize --format json

    stabcli audit runs/exp1 --check 'representation.knn_overlap>=0.6' --markdown report.md

    stabcli audit runs/exp1 --labels item_genres.tsv --check 'downstream.variants.h.churn<=0.05'

    stabcli audit runs/ml --labels ml-100k/u.item --variants h,aligned,phi:64 --sigmas 0.5,1,2

    stabcli audit a.vec b.vec c.vec --frequencies counts.tsv --min-frequency 5

    stabcli audit runs/ml --labels ratings_mean.csv --task regression --prefer stability

    stabcli audit runs/exp1 --html audit.html --mlflow --mlflow-experiment embeddings

    stabcli audit runs/ml --labels ml-1m/movies.dat --task multilabel --model gbdt

    stabcli audit runs/ml --labels genres.csv --model sklearn.svm:LinearSVC --model-param C=0.5

    stabcli audit runs/ml --task next-item --interactions ml-1m/ratings.dat --k-list 5,10
"""


def audit_cmd(
    inputs: _Inputs,
    normalize: Annotated[bool, typer.Option("--normalize", help="L2-normalize every row first.")] = False,
    pairs: _Pairs = 10_000,
    knn_k: KnnK = 10,
    knn_queries: _KnnQueries = None,
    seed: Annotated[int, seed_option("Seed for the sampled pairs and queries.")] = 0,
    top: Annotated[int, top_option("Least stable keys to list (lowest k-NN overlap first).")] = 20,
    min_frequency: _MinFrequency = None,
    frequencies: _Frequencies = None,
    eis_anchor: _EisAnchor = None,
    eis_alpha: _EisAlpha = 3.0,
    check: Annotated[list[str], check_option("representation.knn_overlap>=0.6")] = [],  # noqa: B006
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    plots: _Plots = None,
    labels: _Labels = None,
    task: Task = "auto",
    model: DownstreamModel = None,
    model_param: ModelParam = [],  # noqa: B006
    test_size: TestSize = 0.2,
    split_seed: SplitSeed = 0,
    variants: _Variants = None,
    featurize_dims: _FeaturizeDims = None,
    sigmas: _Sigmas = None,
    reference: Annotated[int, reference_option("Position of the run whose model is reused stale on the others.")] = 0,
    jobs: _Jobs = None,
    scheduler: _Scheduler = None,
    encoding: _Encoding = None,
    prefer: _Prefer = "balanced",
    min_class_size: _MinClassSize = 5,
    key_names: KeyNames = None,
    per_key: _PerKey = None,
    interactions: _Interactions = None,
    k_list: _KList = "5,10,20",
    profiles: _Profiles = "mean,last",
    users: _Users = 10_000,
    corpus_format: CorpusFormat = "auto",
    user_col: UserCol = None,
    item_col: ItemCol = None,
    time_col: TimeCol = None,
    rating_col: RatingCol = None,
    min_rating: MinRating = None,
    force: ReportForce = False,
    input_format: InputFormat = None,
    trust_pickle: TrustPickle = False,
    keys: Keys = None,
    mlflow: Mlflow = False,
    mlflow_experiment: MlflowExperiment = None,
    quiet: Quiet = False,
) -> None:
    """``stabcli audit``: the options as ``stabcli.audit``'s keywords, the report rendered (help: ``HELP``)."""
    options = api_options(locals(), skip=("inputs",), lists=LISTS, files=True)
    from stabcli.commands.audit import audit
    from stabcli.reports.audit_render import render_terminal

    set_quiet(quiet)
    with spinner("audit") as on_step:
        report = audit(inputs, **options, on_step=on_step, on_warning=warn, on_figure=wrote)
    render_report(report, fmt, render_terminal)
