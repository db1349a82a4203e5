"""``stabcli featurize``: random Fourier features phi(h), optionally aligned to a reference."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from stabcli.cli.options import (
    HtmlPath,
    InputFormat,
    Keys,
    Quiet,
    ReportFormat,
    TrustPickle,
    api_options,
    constrained,
    reference_option,
    seed_option,
)
from stabcli.cli.output import err, info, out, set_quiet, write_json_stdout, wrote
from stabcli.constraints import FEATURIZE_OPTIONS
from stabcli.reports.schema import dumps
from stabcli.reports.text import literal

if TYPE_CHECKING:
    from stabcli.commands.featurize import FeaturizeResult
    from stabcli.fs.outputs import OutputPlan

_Dim = Annotated[
    int | None,
    typer.Option("--dim", min=0, metavar="M", help="Output dimension M (even); 0 = only align [default: 128]."),
]


_Epsilon = Annotated[
    float | None,
    typer.Option(
        "--epsilon",
        metavar="ERROR",
        help="Choose the smallest M whose measured mean kernel error is <= this (instead of --dim).",
    ),
]


_Sigma = Annotated[
    float,
    constrained(FEATURIZE_OPTIONS, "sigma", "SIGMA", "Direction scale: kernel exp(-sigma^2 |h-h'|^2 / 2)."),
]


_AlignTo = Annotated[
    Path | None,
    typer.Option(
        "--align-to",
        metavar="PATH",
        help="Rotate onto this reference first (shared keys): an embedding file, or a run set's run --reference.",
    ),
]


_OutputFormat = Annotated[
    Literal["npy", "word2vec", "word2vec-bin", "kv", "parquet"] | None,
    typer.Option(
        "--output-format",
        metavar="FORMAT",
        help="npy, word2vec, word2vec-bin, kv or parquet [default: from the suffix of --out].",
    ),
]


_SaveTransform = Annotated[
    Path | None,
    typer.Option("--save-transform", metavar="FILE", help="Write U (and the rotation) with a serving recipe (.npz)."),
]


_ChunkRows = Annotated[
    int | None,
    constrained(
        FEATURIZE_OPTIONS,
        "chunk_rows",
        "N",
        "Rows per streamed chunk, rounded up to a multiple of 256 [default: about 1 MB of output, which stays in cache].",
    ),
]


_Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace existing outputs (a directory only if it holds nothing but "
        "a run set stabcli wrote; never an input).",
    ),
]


def featurize_cmd(
    input_path: Path = typer.Argument(..., metavar="INPUT", help="An embedding file or a run set."),
    output: Path = typer.Option(
        ..., "--out", "-o", metavar="PATH", help="Output file, or a new run-set directory for a run set."
    ),
    dim: _Dim = None,
    epsilon: _Epsilon = None,
    sigma: _Sigma = 1.0,
    seed: Annotated[int, seed_option("Seed of the random directions U.")] = 0,
    normalize: bool = typer.Option(True, "--normalize/--no-normalize", help="L2-normalize rows first."),
    align_to: _AlignTo = None,
    reference: Annotated[int, reference_option("With --align-to RUN_SET: position of its reference run.")] = 0,
    output_format: _OutputFormat = None,
    save_transform: _SaveTransform = None,
    chunk_rows: _ChunkRows = None,
    force: _Force = False,
    fmt: ReportFormat = "table",
    input_format: InputFormat = None,
    trust_pickle: TrustPickle = False,
    keys: Keys = None,
    html_path: HtmlPath = None,
    quiet: Quiet = False,
) -> None:
    """Turn embeddings into random Fourier features phi(h), optionally aligned to a reference.

    phi(h) = sqrt(1/k) [cos(hU), sin(hU)], k = M/2, U ~ N(0, sigma^2) from the seed. A run
    set is featurized run by run with the same U into a new run set that audit reads.

    Examples:

        stabcli featurize emb.npy --out phi.npy --dim 64

        stabcli featurize runs/exp1 --out runs/exp1-phi --dim 64 && stabcli audit runs/exp1-phi

        stabcli featurize today.vec --out today-aligned.npy --dim 0 --align-to yesterday.vec

        stabcli featurize runs/exp1 --out runs/exp1-phi --epsilon 0.05 --html featurize.html
    """
    options = api_options(locals(), skip=("input_path", "output", "html_path"))
    from stabcli.commands.featurize import featurize
    from stabcli.reports.featurize_render import summary_lines

    set_quiet(quiet)
    page = _html_plan(html_path, input_path, output, align_to, force)  # before any work
    result = featurize(input_path, output, **options, on_run=lambda name: info(f"featurize: {name} done"))
    for note in result.notes:
        err.print(literal(f"note: {note}"), soft_wrap=True)
    if page is not None and html_path is not None:
        _write_html(page, html_path, result, epsilon)
    if fmt == "json":
        write_json_stdout(dumps(result))
        return
    for line in summary_lines(result, epsilon):
        out.print(literal(line), soft_wrap=True)


def _html_plan(
    html_path: Path | None, input_path: Path, output: Path, align_to: Path | None, force: bool
) -> OutputPlan | None:
    """``--html``'s page checked against every input (with its companion files) and the output."""
    if html_path is None:
        return None
    from stabcli.fs.outputs import OutputPlan, with_companions

    inputs = [*with_companions(input_path), output, *(with_companions(align_to) if align_to else [])]
    page = OutputPlan(inputs, force=force)
    page.add(html_path, "--html")
    page.check()
    return page


def _write_html(page: OutputPlan, html_path: Path, result: FeaturizeResult, epsilon: float | None) -> None:
    import json

    from stabcli.reports.featurize_render import render_html

    sidecar = json.loads(result.sidecar.read_text(encoding="utf-8")) if result.sidecar.is_file() else None
    with page:
        page.write_text(html_path, render_html(result, sidecar, epsilon))
    wrote(html_path)
