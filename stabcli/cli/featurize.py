"""``stabcli featurize``: random Fourier features phi(h), optionally aligned to a reference."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from stabcli.cli.options import InputFormat, Keys, ReportFormat, TrustPickle, reference_option, seed_option
from stabcli.cli.output import err, out, write_json_stdout
from stabcli.constraints import FEATURIZE_OPTIONS, ranged
from stabcli.reports.schema import dumps
from stabcli.reports.text import literal


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
        1.0,
        "--sigma",
        metavar="SIGMA",
        help=ranged("Direction scale: kernel exp(-sigma^2 |h-h'|^2 / 2).", FEATURIZE_OPTIONS["sigma"]),
    ),
    seed: Annotated[int, seed_option("Seed of the random directions U.")] = 0,
    normalize: bool = typer.Option(True, "--normalize/--no-normalize", help="L2-normalize rows first."),
    align_to: Path | None = typer.Option(
        None,
        "--align-to",
        metavar="PATH",
        help="Rotate onto this reference first (shared keys): an embedding file, or a run set's run --reference.",
    ),
    reference: Annotated[int, reference_option("With --align-to RUN_SET: position of its reference run.")] = 0,
    output_format: Annotated[
        Literal["npy", "word2vec", "word2vec-bin", "kv", "parquet"] | None,
        typer.Option(
            "--output-format",
            metavar="FORMAT",
            help="npy, word2vec, word2vec-bin, kv or parquet [default: from the suffix of --out].",
        ),
    ] = None,
    save_transform: Path | None = typer.Option(
        None, "--save-transform", metavar="FILE", help="Write U (and the rotation) with a serving recipe (.npz)."
    ),
    chunk_rows: int | None = typer.Option(
        None,
        "--chunk-rows",
        metavar="N",
        help=ranged(
            "Rows per streamed chunk [default: about 1 MB of output, which stays in cache].",
            FEATURIZE_OPTIONS["chunk_rows"],
        ),
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace existing outputs (a directory only if it holds nothing but "
        "a run set stabcli wrote; never an input).",
    ),
    fmt: ReportFormat = "table",
    input_format: InputFormat = None,
    trust_pickle: TrustPickle = False,
    keys: Keys = None,
) -> None:
    """Turn embeddings into random Fourier features phi(h), optionally aligned to a reference.

    phi(h) = sqrt(1/k) [cos(hU), sin(hU)], k = M/2, U ~ N(0, sigma^2) from the seed. A run
    set is featurized run by run with the same U into a new run set that audit reads.

    Examples:

        stabcli featurize emb.npy --out phi.npy --dim 64

        stabcli featurize runs/exp1 --out runs/exp1-phi --dim 64 && stabcli audit runs/exp1-phi

        stabcli featurize today.vec --out today-aligned.npy --dim 0 --align-to yesterday.vec
    """
    from stabcli.commands.featurize import featurize

    result = featurize(
        input_path,
        output,
        dim=dim,
        epsilon=epsilon,
        sigma=sigma,
        seed=seed,
        normalize=normalize,
        align_to=align_to,
        reference=reference,
        output_format=output_format,
        chunk_rows=chunk_rows,
        input_format=input_format,
        trust_pickle=trust_pickle,
        keys=keys,
        save_transform=save_transform,
        force=force,
        on_run=lambda name: err.print(literal(f"featurized {name}")) if err.is_terminal else None,
    )
    for note in result.notes:
        err.print(literal(f"note: {note}"), soft_wrap=True)
    if fmt == "json":
        write_json_stdout(dumps(result))
        return
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
