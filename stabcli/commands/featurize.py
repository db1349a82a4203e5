"""Featurize embedding files and run sets: stream them through ``stabcli.measure.fourier`` and write
every output of the command all or nothing (``stabcli.fs.outputs``).

The math (directions, features, kernel error, Procrustes) lives in ``stabcli.measure.fourier``;
this module reads files and run sets, matches keys, guards memory, streams chunks and
writes the outputs with their sidecar ``OUTPUT.featurize.json``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np

from stabcli import __version__
from stabcli.commands.featurize_stream import features_in_memory, memory_needed, write_npy
from stabcli.constraints import FEATURIZE_OPTIONS, Constraint, validate_params
from stabcli.environment import capture
from stabcli.errors import InputError, OptionError, UsageError, quote
from stabcli.fs.atomic import file_sha256
from stabcli.fs.outputs import OutputPlan, with_companions
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import (
    WRITE_FORMATS,
    Embedding,
    ReadOptions,
    check_keys_writable,
    embedding_suffix,
    format_for,
    keys_path_for,
    keys_text,
    match_inputs,
    write_embedding,
)
from stabcli.inputs.embeddings.core import require_float32_range
from stabcli.measure.align import alignment_residuals, match_keys, procrustes_rotation
from stabcli.measure.fourier import (
    check_output_dim,
    choose_dimension,
    draw_directions,
    rahimi_recht_dimension,
)
from stabcli.reports.schema import JsonReport
from stabcli.runset import VECTORS, RunSet, RunSetWriter, owned, run_name, write_run

DEFAULT_DIM = 128
SIDECAR_SUFFIX = ".featurize.json"


@dataclass(frozen=True)
class FeaturizeOptions:
    """Every option of ``featurize``, validated on construction (OptionError naming the parameter).

    Parameters
    ----------
    dim : int or None
        Output dimension M (even, >= 2); 0 only aligns (needs ``align_to``). None: chosen
        from ``epsilon`` when given, else 128.
    epsilon : float or None
        Choose the smallest M whose measured mean kernel error is <= epsilon (not with ``dim``).
    sigma : float
        Direction scale: kernel ``exp(−σ²‖h − h'‖²/2)``.
    seed : int
        Non-negative seed of the directions U.
    normalize : bool
        L2-normalize rows first.
    align_to : path or None
        Reference embedding file or run set to rotate onto (shared keys) first.
    reference : int
        With a run set as ``align_to``: the position of its run used as the reference.
    output_format : str or None
        Output format, one of ``embeddings.WRITE_FORMATS``; None: from the suffix.
    chunk_rows : int or None
        Rows per streamed chunk; None: about ``CHUNK_BYTES`` of output.
    """

    dim: int | None = None
    epsilon: float | None = None
    sigma: float = 1.0
    seed: int = 0
    normalize: bool = True
    align_to: Path | None = None
    reference: int = 0
    output_format: str | None = None
    chunk_rows: int | None = None

    parameter_constraints: ClassVar[dict[str, Constraint]] = FEATURIZE_OPTIONS

    def __post_init__(self) -> None:
        if self.dim is not None and self.epsilon is not None:
            raise OptionError("epsilon", "give --dim or --epsilon, not both")
        if self.dim is None and self.epsilon is None:
            object.__setattr__(self, "dim", DEFAULT_DIM)
        if self.align_to is not None:
            object.__setattr__(self, "align_to", Path(self.align_to))
        if self.dim is None:
            if (
                isinstance(self.epsilon, bool)
                or not isinstance(self.epsilon, Real)
                or not (math.isfinite(self.epsilon) and self.epsilon > 0)
            ):
                raise OptionError("epsilon", f"{quote(self.epsilon)} must be a positive number")
        elif self.dim == 0 and not isinstance(self.dim, bool):
            if self.align_to is None:
                raise OptionError("dim", "0 only aligns: it needs --align-to")
        else:
            check_output_dim(self.dim, "dim")
        validate_params(self)
        if not isinstance(self.normalize, bool):
            raise OptionError("normalize", f"{quote(self.normalize)} must be True or False")
        if self.reference and self.align_to is None:
            raise OptionError("reference", "only applies with --align-to RUN_SET")
        if self.output_format is not None and self.output_format not in WRITE_FORMATS:
            raise OptionError("output_format", f"{quote(self.output_format)}: choose one of {', '.join(WRITE_FORMATS)}")


@dataclass
class FeaturizeResult(JsonReport):
    """What a featurize wrote; ``to_dict()`` is what ``stabcli featurize --format json`` prints."""

    output: Path
    sidecar: Path
    rows: int
    input_dim: int
    output_dim: int
    runs: int
    measured_error: float | None = None
    rahimi_recht_dim: int | None = None
    residual_before: float | None = None
    residual_after: float | None = None
    notes: list[str] = field(default_factory=list)  # one line each, for the user (e.g. rows matched by position)


def _sha256_array(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f8").tobytes()).hexdigest()


def _alignment(emb: Embedding, reference: Embedding) -> tuple[np.ndarray, float, float]:
    """Rotation of ``emb`` onto ``reference`` over shared keys, with relative residuals
    before/after. Keyless inputs were matched by position already (``match_inputs``: their
    keys are the same row numbers)."""
    if reference.dim != emb.dim:
        raise InputError(f"{reference.source}: dimension {reference.dim}, but {emb.source} has {emb.dim}")
    match = match_keys([emb.keys, reference.keys])
    if not match.keys:
        raise InputError(f"{reference.source}: no keys in common with {emb.source}")
    mine, theirs = match.rows
    X = emb.vectors if mine is None else emb.vectors[mine]
    R = reference.vectors if theirs is None else reference.vectors[theirs]
    rotation = procrustes_rotation(X, R)
    return (rotation, *alignment_residuals(X, R, rotation))


def _guard_memory(rows: int, input_dim: int, dim: int, options: FeaturizeOptions, fmt: str) -> None:
    needed = memory_needed(rows, input_dim, dim, options.chunk_rows, fmt)
    param = (
        "chunk_rows"
        if options.chunk_rows and memory_needed(rows, input_dim, dim, None, fmt) < needed
        else ("dim" if options.dim is not None else "epsilon")
    )
    request = f"{options.chunk_rows:,} rows per chunk" if param == "chunk_rows" else f"M = {dim:,}"
    require_memory(param, needed, f"{request} for {rows:,} rows of dimension {input_dim} ({fmt} output)")


def _output_format(output: Path, fmt: str | None, runset: bool) -> str:
    """The output format: ``fmt`` or the suffix's, which must agree; a run set is written as npy."""
    suffix_format = format_for(output)
    if runset:
        if fmt not in (None, "npy"):
            raise OptionError("output_format", f"{fmt}: a run set is featurized into a run set of .npy runs")
        suffix = embedding_suffix(output)
        if suffix is not None:  # the rule: a run set's output is a directory, named without an embedding suffix
            raise UsageError(
                f"--out {output}: a run set is featurized into a run set (a directory), and "
                f"{quote(suffix)} names an embedding file; give a directory name such as "
                f"{output.parent / output.name[: -len(suffix)]}"
            )
        return "npy"
    if fmt is None:
        if suffix_format is None:
            raise UsageError(
                f"--out {output}: cannot tell the format from the suffix {quote(output.suffix or '(none)')}; "
                f"use .npy, .txt, .vec, .bin, .kv or .parquet, or pass --format"
            )
        return suffix_format
    if suffix_format is not None and suffix_format != fmt:
        raise OptionError(
            "output_format", f"{fmt} contradicts the suffix of --out {output} ({suffix_format}); change one of them"
        )
    return fmt


def _open_runset(path: Path) -> RunSet | None:
    return RunSet.open_finished(path) if path.is_dir() else None


def _load_reference(options: FeaturizeOptions, read: ReadOptions) -> tuple[Embedding | None, Path | None]:
    """The reference embedding of ``--align-to`` (a file, or run ``--reference`` of a run set)
    and the file its checksum is taken of."""
    if options.align_to is None:
        return None, None
    runset = _open_runset(options.align_to)
    if runset is None:
        return _usable_reference(read.read(options.align_to)), options.align_to
    if options.reference >= len(runset.runs):
        raise OptionError(
            "reference",
            f"{options.reference}: {options.align_to} has {len(runset.runs)} complete runs "
            f"(positions 0 to {len(runset.runs) - 1})",
        )
    index = runset.runs[options.reference]
    return _usable_reference(runset.load(index)), runset.run_dir(index) / VECTORS


def _usable_reference(reference: Embedding) -> Embedding:
    """The --align-to reference, once no row holds NaN, inf or values beyond float32's range."""
    require_float32_range(
        reference.source, reference.keys, reference.vectors, "an --align-to reference must be finite in float32"
    )
    return reference


def featurize(
    input_path: str | Path,
    output: str | Path,
    options: FeaturizeOptions | None = None,
    *,
    save_transform: str | Path | None = None,
    force: bool = False,
    on_run: Callable[[str], None] | None = None,
    read: ReadOptions | None = None,
    **keywords: Any,
) -> FeaturizeResult:
    """Featurize one embedding file, or every run of a run set with the same directions U
    (``stabcli featurize``).

    A run set is written as a new run set that ``stabcli audit`` reads. The sidecar
    ``OUTPUT.featurize.json`` records everything needed to reproduce the output bit for
    bit. Every output is checked before any work (never an input, existing ones only with
    ``force``) and written all or nothing.

    Parameters
    ----------
    input_path : path
        An embedding file or a run set.
    output : path
        The output file, or a new run-set directory for a run set.
    options : FeaturizeOptions, optional
        The options as one object; or give them as keywords instead (``dim``, ``epsilon``,
        ``sigma``, ``seed``, ``normalize``, ``align_to``, ``reference``, ``output_format``,
        ``chunk_rows``, and the reading options ``input_format``, ``trust_pickle``, ``keys``).
    save_transform : path, optional
        Write U (and the rotation) with a serving recipe (.npz).
    force : bool
        Replace existing outputs (a directory only if it holds nothing but a run set stabcli wrote).
    on_run : callable, optional
        Called with each run's name once it is featurized.
    read : ReadOptions, optional
        How input files are read (``--input-format``, ``--trust-pickle``, ``--keys``).

    Returns
    -------
    FeaturizeResult
        ``result.to_dict()`` is what ``stabcli featurize --format json`` prints.

    Examples
    --------
    >>> result = stabcli.featurize("emb.npy", "phi.npy", dim=64)  # doctest: +SKIP
    >>> result.output_dim  # doctest: +SKIP
    64
    """
    options, read = _options(options, read, keywords)
    source, output = Path(input_path), Path(output)
    runset = _open_runset(source)
    plan, sidecar_path, transform_path = _plan_outputs(source, output, options, read, runset, save_transform, force)
    fmt = _output_format(output, options.output_format, runset is not None)
    embeddings, reference, reference_file, notes = _read_inputs(source, runset, options, read)
    first = embeddings[0]
    check_keys_writable(output, fmt, first.keys)  # what the output's reader would reject is never written
    alignments = [_alignment(e, reference) for e in embeddings] if reference else [(None, None, None)] * len(embeddings)
    dim, measured, rr_dim = _dimension(first, options)
    _guard_memory(len(first.keys), first.dim, dim, options, fmt)
    directions = draw_directions(first.dim, dim, options.sigma, options.seed) if dim else None
    sidecar = _sidecar(source, first, options, fmt, dim, measured, reference_file, directions)
    with plan:
        if runset is not None:
            _featurize_runset(
                runset, embeddings, plan.staging(output), alignments, directions, options, sidecar, on_run
            )
        else:
            _featurize_file(plan, output, fmt, first, alignments[0][0], directions, options)
        plan.write_json(sidecar_path, sidecar)
        if transform_path is not None:
            _save_transform(plan, transform_path, directions, [a[0] for a in alignments], sidecar)
    before, after = _mean_residuals(alignments)
    rows, width = len(first.keys), first.dim
    return FeaturizeResult(
        output, sidecar_path, rows, width, dim or width, len(embeddings), measured, rr_dim, before, after, notes
    )


def _mean_residuals(alignments: list[tuple[Any, Any, Any]]) -> tuple[float | None, float | None]:
    """The relative Procrustes residuals before and after the rotation, averaged over the
    aligned inputs; None without ``--align-to``."""
    residuals = [a for a in alignments if a[1] is not None]
    if not residuals:
        return None, None
    return float(np.mean([a[1] for a in residuals])), float(np.mean([a[2] for a in residuals]))


def _options(
    options: FeaturizeOptions | None, read: ReadOptions | None, keywords: dict[str, Any]
) -> tuple[FeaturizeOptions, ReadOptions]:
    """The options as given (objects), or built from keywords (not both); defaults otherwise."""
    if keywords:
        from stabcli.commands.common import refuse_unknown, take

        if options is not None or read is not None:
            raise TypeError("featurize(): give options as an object or as keywords, not both")
        options = FeaturizeOptions(**take(FeaturizeOptions, keywords))
        read = ReadOptions(**take(ReadOptions, keywords, {"keys": "keys_file"}))
        refuse_unknown("featurize", keywords)
    return options or FeaturizeOptions(), read or ReadOptions()


def _featurize_file(
    plan: OutputPlan,
    output: Path,
    fmt: str,
    embedding: Embedding,
    rotation: np.ndarray | None,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
) -> None:
    """One embedding file's features into the plan's staging: .npy streamed chunk by chunk
    (with its keys file), other formats computed in memory."""
    if fmt == "npy":
        with open(plan.staging(output), "wb") as file:
            write_npy(embedding, file, rotation, directions, options)
        plan.write_text(keys_path_for(output), keys_text(embedding.keys))
    else:
        features = features_in_memory(embedding, rotation, directions, options)
        write_embedding(plan.staging(output, nested=True), embedding.keys, features, fmt)


def _plan_outputs(
    source: Path,
    output: Path,
    options: FeaturizeOptions,
    read: ReadOptions,
    runset: RunSet | None,
    save_transform: str | Path | None,
    force: bool,
) -> tuple[OutputPlan, Path, Path | None]:
    """The checked output plan: the output (a run-set directory, or a file and an .npy's keys
    file), its sidecar and ``--save-transform``; returns (plan, sidecar, transform path)."""
    plan = OutputPlan(
        with_companions(source)
        + (with_companions(options.align_to) if options.align_to else [])
        + ([read.keys_file] if read.keys_file is not None else []),
        force=force,
    )
    if runset is not None:
        plan.add(output, "--out", kind="dir", owned=owned)
    else:
        plan.add(output, "--out")
        if (options.output_format or format_for(output)) == "npy":
            plan.add(keys_path_for(output), "keys file")
    sidecar_path = output.with_name(output.name + SIDECAR_SUFFIX)  # once add() knows the output has a name
    plan.add(sidecar_path, "sidecar")
    transform_path = plan.add(save_transform, "--save-transform") if save_transform is not None else None
    plan.check()  # an output that is an input is named as such first, whatever else is wrong with it
    return plan, sidecar_path, transform_path


def _read_inputs(
    source: Path, runset: RunSet | None, options: FeaturizeOptions, read: ReadOptions
) -> tuple[list[Embedding], Embedding | None, Path | None, list[str]]:
    """The embeddings to featurize (every run of a run set), of one dimension, the reference
    of ``--align-to`` and the file its checksum is taken of, matched on keys
    (``match_inputs``: keyless inputs, ``--keys``), and the notes that matching made."""
    embeddings = [runset.load(i) for i in runset.runs] if runset else [read.read(source)]
    first = embeddings[0]
    for emb in embeddings[1:]:
        if emb.dim != first.dim:
            raise InputError(f"{emb.source}: dimension {emb.dim}, but {first.source} has {first.dim}")
    if first.dim == 0:  # random features of nothing are constants: refused as audit refuses them
        raise InputError(f"{first.source}: vectors have 0 dimensions; there is nothing to featurize")
    reference, reference_file = _load_reference(options, read)
    notes: list[str] = []
    if reference is not None or read.keys_file is not None:  # keyless inputs: --keys, or all keyless, or refused
        matched = match_inputs(
            embeddings + ([reference] if reference is not None else []), read.keys_file, notes.append
        )
        embeddings, reference = matched[: len(embeddings)], (matched[-1] if reference is not None else None)
    return embeddings, reference, reference_file, notes


def _dimension(first: Embedding, options: FeaturizeOptions) -> tuple[int, float | None, int | None]:
    """(M, its measured kernel error, Rahimi & Recht's bound on M): ``--dim``, or the smallest
    M meeting ``--epsilon``."""
    if options.dim is not None:
        return options.dim, None, None
    assert options.epsilon is not None
    dim, measured = choose_dimension(first.vectors, options.sigma, options.epsilon, options.seed, options.normalize)
    diameter = (
        2.0 if options.normalize else 2.0 * float(np.linalg.norm(np.asarray(first.vectors[:10_000]), axis=1).max())
    )
    return dim, measured, rahimi_recht_dimension(options.epsilon, options.sigma, first.dim, diameter)


def _sidecar(
    source: Path,
    first: Embedding,
    options: FeaturizeOptions,
    fmt: str,
    dim: int,
    measured: float | None,
    reference_file: Path | None,
    directions: np.ndarray | None,
) -> dict[str, Any]:
    """``OUTPUT.featurize.json``: everything needed to reproduce the output bit for bit."""
    return {
        "stabcli_version": __version__,
        "input": str(source.resolve()),
        "seed": options.seed,
        "sigma": options.sigma,
        "dim": dim,
        "input_dim": first.dim,
        "normalize": options.normalize,
        "epsilon": options.epsilon,
        "measured_kernel_error": measured,
        "align_to": str(options.align_to.resolve()) if options.align_to else None,
        "align_to_run": reference_file.parent.name if reference_file and reference_file != options.align_to else None,
        "align_to_sha256": file_sha256(reference_file) if reference_file else None,
        "directions_sha256": _sha256_array(directions) if directions is not None else None,
        "format": fmt,
        "environment": capture(),
    }


def _featurize_runset(
    runset: RunSet,
    embeddings: list[Embedding],
    building: Path,
    alignments: list,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
    sidecar: dict,
    on_run: Callable[[str], None] | None,
) -> None:
    """Write the featurized run set into ``building`` (the output's temporary directory)
    through the run-set writer: the source's manifest with the sidecar, its shared keys and
    key counts, and per run the features, keys, losses and log."""
    with RunSetWriter(building) as writer:
        writer.create({**runset.manifest, "featurize": sidecar, "source_run_set": str(runset.root.resolve())})
        shared = runset.shared_keys()
        if shared is not None:
            counts = runset.key_counts()
            writer.write_keys(shared, None if counts is None else [counts[k] for k in shared])
        elif (counts := runset.key_counts()) is not None:  # a --script run set: its corpus's counts
            writer.write_corpus_counts(counts)
        for index, emb, (rotation, _, _) in zip(runset.runs, embeddings, alignments, strict=True):
            partial = writer.new_partial(index)

            def stream(file: BinaryIO, emb: Embedding = emb, rotation: np.ndarray | None = rotation) -> None:
                write_npy(emb, file, rotation, directions, options)

            write_run(partial, stream, emb.keys, shared_keys=shared, losses=runset.losses(index), log=runset.log(index))
            writer.publish(index, partial)
            if on_run:
                on_run(run_name(index))


def _save_transform(
    plan: OutputPlan, path: Path, directions: np.ndarray | None, rotations: list, sidecar: dict
) -> None:
    recipe = (
        "serve: h -> (h @ rotation if aligned) -> h / ||h|| if normalize -> z = h @ directions "
        "(a dense layer without bias) -> sqrt(1/k) * concat(cos(z), sin(z)), k = directions.shape[1]"
    )
    arrays: dict[str, Any] = {"recipe": np.array(recipe), "sidecar": np.array(json.dumps(sidecar))}
    if directions is not None:
        arrays["directions"] = directions
    if rotations and rotations[0] is not None:
        arrays["rotation"] = np.stack(rotations) if len(rotations) > 1 else rotations[0]
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    plan.write_bytes(path, buffer.getvalue())
