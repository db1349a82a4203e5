"""``stabcli drift``: which keys a refresh really moved, and which only changed by training noise."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from stabcli import constraints as c
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
    ModelParam,
    Quiet,
    ReportForce,
    ReportFormat,
    SplitSeed,
    Task,
    TestSize,
    TrustPickle,
    api_options,
    check_option,
    constrained,
    encoding_option,
    knn_queries_option,
    labels_option,
    per_key_option,
    plots_option,
    reference_option,
    seed_option,
    top_option,
)
from stabcli.cli.output import render_report, set_quiet, spinner, warn, wrote

_Before = Annotated[
    Path, typer.Argument(metavar="BEFORE", help="An embedding file, or a run set (its --reference run).")
]


_After = Annotated[Path, typer.Argument(metavar="AFTER", help="An embedding file, or a run set (its --reference run).")]


_Noise = Annotated[
    Path | None,
    typer.Option(
        "--noise",
        metavar="RUN_SET",
        help="Run set of seeded runs on BEFORE's data and configuration (stabcli pretrain): each key's noise band.",
    ),
]


_Align = Annotated[
    bool,
    typer.Option(
        "--align/--no-align",
        help="Rotate AFTER onto BEFORE (orthogonal Procrustes on the common keys); --no-align compares raw "
        "coordinates.",
    ),
]


_KnnQueries = Annotated[
    int, knn_queries_option("Sampled keys for the k-NN overlap above 10,000 keys (below: every key).")
]


_Alpha = Annotated[
    float,
    constrained(c.DRIFT_OPTIONS, "alpha", "LEVEL", "Level of the per-key test and of the FDR of the listed keys."),
]


_Measure = Annotated[
    Literal["direction", "length", "distance"],
    typer.Option(
        "--measure",
        metavar="direction|length|distance",
        help="What decides moved: the cosine distance (direction, what neighbours and similarities see), "
        "the change of norm (length) or the Euclidean distance (both).",
    ),
]


_AllowNoiseMismatch = Annotated[
    bool,
    typer.Option(
        "--allow-noise-mismatch",
        help="Use a --noise run set whose corpus or training configuration differs from BEFORE's (a warning "
        "in the report).",
    ),
]


_Labels = Annotated[
    Path | None,
    labels_option("Key→label file: BEFORE's model applied to AFTER (raw and aligned) against a model refit on AFTER."),
]


_Encoding = Annotated[
    str | None,
    encoding_option(
        "Text encoding of --labels and --key-names [default: utf-8; latin-1 for MovieLens u.item and "
        "movies.dat that are not valid UTF-8; a byte-order mark decides]."
    ),
]


_PerKey = Annotated[
    Path | None, per_key_option("Every key's measures, noise band and verdict (.csv, .tsv or .parquet).")
]


def drift_cmd(
    before: _Before,
    after: _After,
    noise: _Noise = None,
    reference: Annotated[int, reference_option("Run position used when BEFORE or AFTER is a run set.")] = 0,
    align: _Align = True,
    knn_k: KnnK = 10,
    knn_queries: _KnnQueries = 1_000,
    alpha: _Alpha = 0.01,
    measure: _Measure = "direction",
    allow_noise_mismatch: _AllowNoiseMismatch = False,
    top: Annotated[int, top_option("Moved keys to list (largest changes without --noise).")] = 20,
    seed: Annotated[int, seed_option("Seed of the k-NN sample.")] = 0,
    key_names: KeyNames = None,
    labels: _Labels = None,
    task: Task = "auto",
    model: DownstreamModel = None,
    model_param: ModelParam = [],  # noqa: B006
    test_size: TestSize = 0.2,
    split_seed: SplitSeed = 0,
    encoding: _Encoding = None,
    per_key: _PerKey = None,
    check: Annotated[list[str], check_option("drift.discoveries<=20")] = [],  # noqa: B006
    fmt: ReportFormat = "table",
    json_path: JsonPath = None,
    markdown_path: MarkdownPath = None,
    html_path: HtmlPath = None,
    plots: Annotated[Path | None, plots_option("Write PNG figures into this new directory.")] = None,
    force: ReportForce = False,
    input_format: InputFormat = None,
    trust_pickle: TrustPickle = False,
    keys: Keys = None,
    mlflow: Mlflow = False,
    mlflow_experiment: MlflowExperiment = None,
    quiet: Quiet = False,
) -> None:
    """Which keys did a refresh really move, and which only changed by training noise?

    Compares BEFORE and AFTER on their common keys (AFTER rotated onto BEFORE). With --noise,
    every key has its own noise band from the run pairs of the noise run set, and a key has
    moved when its change exceeds that band at level --alpha; moved keys are listed with
    false discovery rate control.

    Examples:

        stabcli drift runs/yesterday today.npy --noise runs/yesterday

        stabcli drift before.vec after.vec --noise runs/before --check 'drift.discoveries<=20' --json drift.json

        stabcli drift runs/v1 runs/v2 --noise runs/v1 --measure length --check 'drift.moved_beyond_global<=50'

        stabcli drift runs/ml ml-new.npy --noise runs/ml --key-names ml-100k/u.item --per-key drift.csv --plots figs

        stabcli drift runs/ml ml-new.npy --noise runs/ml --html drift.html --mlflow
    """
    options = api_options(locals(), skip=("before", "after", "noise"), files=True)
    from stabcli.commands.drift import drift
    from stabcli.reports.drift_render import render_terminal

    set_quiet(quiet)
    with spinner("drift") as on_step:
        report = drift(before, after, noise, **options, on_step=on_step, on_figure=wrote, on_warning=warn)
    render_report(report, fmt, render_terminal)
