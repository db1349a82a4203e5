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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import numpy as np

from stabcli import __version__
from stabcli.constraints import FEATURIZE_OPTIONS, Constraint, validate_params
from stabcli.environment import capture
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.fs.atomic import file_sha256
from stabcli.fs.outputs import OutputPlan, with_companions
from stabcli.fs.resources import require_memory
from stabcli.inputs.embeddings import (
    WRITE_FORMATS,
    Embedding,
    ReadOptions,
    check_keys_writable,
    fits_float32,
    format_for,
    keys_path_for,
    keys_text,
    match_inputs,
    require_finite,
    write_embedding,
)
from stabcli.inputs.embeddings.core import require_float32_range
from stabcli.measure.align import alignment_residuals, match_keys, procrustes_rotation
from stabcli.measure.fourier import (
    blocked_matmul,
    check_output_dim,
    choose_dimension,
    draw_directions,
    fourier_features,
    rahimi_recht_dimension,
)
from stabcli.measure.metrics import SMALLEST_RELIABLE_NORM32, inverse_norms, row_norms, unit_rows
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
                raise OptionError("epsilon", f"{self.epsilon!r} must be a positive number")
        elif self.dim == 0 and not isinstance(self.dim, bool):
            if self.align_to is None:
                raise OptionError("dim", "0 only aligns: it needs --align-to")
        else:
            check_output_dim(self.dim, "dim")
        validate_params(self)
        if not isinstance(self.normalize, bool):
            raise OptionError("normalize", f"{self.normalize!r} must be True or False")
        if self.reference and self.align_to is None:
            raise OptionError("reference", "only applies with --align-to RUN_SET")
        if self.output_format is not None and self.output_format not in WRITE_FORMATS:
            raise OptionError("output_format", f"{self.output_format!r}: choose one of {', '.join(WRITE_FORMATS)}")


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


# Output bytes per chunk by default: the chunk's buffers stay in a core's L2 cache. On the
# benchmark machine about 1 MB was fastest or within noise of it at M = 128, 512 and 2,048
# (benchmarks/bench_featurize.py --chunk-sweep).
CHUNK_BYTES = 1 << 20


def _chunk_rows(chunk_rows: int | None, width: int) -> int:
    return chunk_rows or max(256, CHUNK_BYTES // (4 * width))


def _float32_carries(block: np.ndarray, norms: np.ndarray) -> bool:
    """Whether normalizing and projecting ``block`` in float32 is exact to float32 precision:
    no NaN, inf or overflowing squares, and no nonzero row so small its squares underflow."""
    low, high = norms.min(), norms.max()  # NaN propagates
    if not (math.isfinite(low) and math.isfinite(high)):
        return False
    return low >= SMALLEST_RELIABLE_NORM32 or not block[norms < SMALLEST_RELIABLE_NORM32].any()


def _feature_chunks(
    emb: Embedding,
    rotation: np.ndarray | None,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
    buffers: int = 1,
) -> Iterator[tuple[int, np.ndarray]]:
    """The output, chunk by chunk: (first row, float32 rows) after alignment and features.

    Computed in float32 (in float64 for a block float32 cannot normalize or hold) into
    ``buffers`` reused arrays that stay in cache: a yielded block is overwritten ``buffers``
    chunks later. A block that is not finite is refused, never yielded.
    """
    n = emb.vectors.shape[0]
    chunk_rows = _chunk_rows(options.chunk_rows, _width(emb, directions))
    rotation32 = None if rotation is None else rotation.astype(np.float32)
    if directions is not None:
        # |x·u| <= ‖x‖‖u‖ (Cauchy–Schwarz): below this bound a float32 projection cannot overflow
        # and the features are finite without a pass over them
        with np.errstate(over="ignore"):
            longest_direction = float(np.linalg.norm(directions, axis=0).max())
        rows, k = min(chunk_rows, n), directions.shape[1]
        work = np.empty((rows, k), np.float32)
        outs = [np.empty((rows, 2 * k), np.float32) for _ in range(buffers)]
    for chunk, start in enumerate(range(0, n, chunk_rows)):
        raw = emb.vectors[start : start + chunk_rows]
        with np.errstate(over="ignore"):  # float64 beyond float32's range: redone in float64 below
            block = np.asarray(raw, dtype=np.float32)
        inverse, finite = None, False
        if directions is not None and options.normalize:
            norms = row_norms(block)  # NaN/inf rows show up here: no separate pass over the block
            carries = _float32_carries(block, norms)
            if carries:
                inverse = inverse_norms(block, norms)
                finite = rotation is None and max(float(norms.max()), 1.0) * longest_direction < _SAFE_FLOAT32
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                carries = bool(np.isfinite(block.sum()))  # a sum that overflows only costs the float64 path
        if carries and raw.dtype != np.float32 and not fits_float32(raw):
            carries = False  # float32 would flush 1e-300 rows to zero (or 1e300 to inf): float64 path
        if not carries:
            require_finite(emb.source, emb.keys, raw, start)  # raises, unless float32 is the problem
            block, inverse, finite = np.asarray(raw, dtype=np.float64), None, False
            if directions is not None and options.normalize:
                block = unit_rows(block)  # any magnitude (1e300 rows): ‖x‖² would overflow float64
        if rotation is not None and rotation32 is not None:
            block = blocked_matmul(block, rotation32 if block.dtype == np.float32 else rotation)
        if directions is not None:
            block = fourier_features(
                block,
                directions,
                options.normalize,
                out=outs[chunk % buffers][: block.shape[0]],
                inverse=inverse,
                work=work if block.dtype == np.float32 else None,
            )
        yield start, block if finite else _finite_float32(block, emb, start, options, directions is not None)


_SAFE_FLOAT32 = 1e37  # an order of magnitude below float32's largest value


def _finite_float32(
    block: np.ndarray, emb: Embedding, start: int, options: FeaturizeOptions, featurized: bool
) -> np.ndarray:
    """``block`` as float32, or an error naming the first key whose output is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        block = np.asarray(block, dtype=np.float32)
        if np.isfinite(block.sum()):  # one fast pass; a sum that overflows only costs the row check
            return block
    finite = np.isfinite(block).all(axis=1)
    if finite.all():
        return block
    key = emb.keys[start + int(np.argmin(finite))]
    if featurized:
        raise OptionError(
            "sigma",
            f"{options.sigma:g} makes the features of key {key!r} in {emb.source} NaN "
            f"(the projection h·U overflows); choose a smaller --sigma",
        )
    raise InputError(f"{emb.source}: key {key!r}: aligned values exceed the float32 range of the output")


def _width(emb: Embedding, directions: np.ndarray | None) -> int:
    return emb.dim if directions is None else 2 * directions.shape[1]


def _write_npy(
    emb: Embedding,
    file: BinaryIO,
    rotation: np.ndarray | None,
    directions: np.ndarray | None,
    options: FeaturizeOptions,
) -> None:
    """Stream ``emb`` as a float32 ``.npy`` into ``file``, a chunk in memory at a time; a
    writer thread saves one chunk while the next is computed."""
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
        "fortran_order": False,
        "shape": (emb.vectors.shape[0], _width(emb, directions)),
    }

    def save(data: Any) -> None:
        file.write(data)

    with ThreadPoolExecutor(1) as writer:
        np.lib.format.write_array_header_1_0(file, header)
        pending = None
        for _, block in _feature_chunks(emb, rotation, directions, options, buffers=2):
            if pending is not None:
                pending.result()  # its buffer is the one the next chunk overwrites
            pending = writer.submit(save, np.ascontiguousarray(block))
        if pending is not None:
            pending.result()


def _features_in_memory(
    emb: Embedding, rotation: np.ndarray | None, directions: np.ndarray | None, options: FeaturizeOptions
) -> np.ndarray:
    out = np.empty((emb.vectors.shape[0], _width(emb, directions)), dtype=np.float32)
    for start, block in _feature_chunks(emb, rotation, directions, options):
        out[start : start + block.shape[0]] = block
    return out


def memory_needed(rows: int, input_dim: int, dim: int, chunk_rows: int | None, fmt: str) -> int:
    """Bytes featurize allocates: the directions (float64 and a float32 copy), one chunk's
    buffers (input block, projection, two output buffers) and, for formats written from
    memory (all but npy), the whole output."""
    width = dim or input_dim
    rows_per_chunk = min(_chunk_rows(chunk_rows, width), rows)
    directions = input_dim * (dim // 2) * 12
    chunk = rows_per_chunk * (input_dim * 8 + (dim // 2) * 4 + 2 * width * 4)
    whole = 0 if fmt == "npy" else rows * width * 4
    return directions + chunk + whole


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
        if suffix_format is not None:  # the rule: a run set's output is a directory, named without a file suffix
            raise UsageError(
                f"--out {output}: a run set is featurized into a run set (a directory), and "
                f"{output.suffix!r} names a file format; give a directory name such as {output.with_suffix('')}"
            )
        return "npy"
    if fmt is None:
        if suffix_format is None:
            raise UsageError(
                f"--out {output}: cannot tell the format from the suffix {output.suffix or '(none)'!r}; "
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
    if keywords:
        from stabcli.commands.common import refuse_unknown, take

        if options is not None or read is not None:
            raise TypeError("featurize(): give options as an object or as keywords, not both")
        options = FeaturizeOptions(**take(FeaturizeOptions, keywords))
        read = ReadOptions(**take(ReadOptions, keywords, {"keys": "keys_file"}))
        refuse_unknown("featurize", keywords)
    options = options or FeaturizeOptions()
    read = read or ReadOptions()
    source, output = Path(input_path), Path(output)
    runset = _open_runset(source)
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
    if save_transform is not None:
        save_transform = plan.add(save_transform, "--save-transform")
    plan.check()  # an output that is an input is named as such first, whatever else is wrong with it
    fmt = _output_format(output, options.output_format, runset is not None)

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
        first = embeddings[0]
    check_keys_writable(output, fmt, first.keys)  # what the output's reader would reject is never written
    alignments = [_alignment(e, reference) for e in embeddings] if reference else [(None, None, None)] * len(embeddings)
    dim, measured, rr_dim = options.dim, None, None
    if dim is None:
        assert options.epsilon is not None
        dim, measured = choose_dimension(first.vectors, options.sigma, options.epsilon, options.seed, options.normalize)
        diameter = (
            2.0 if options.normalize else 2.0 * float(np.linalg.norm(np.asarray(first.vectors[:10_000]), axis=1).max())
        )
        rr_dim = rahimi_recht_dimension(options.epsilon, options.sigma, first.dim, diameter)
    _guard_memory(len(first.keys), first.dim, dim, options, fmt)
    directions = draw_directions(first.dim, dim, options.sigma, options.seed) if dim else None

    sidecar = {
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
    with plan:
        if runset is not None:
            _featurize_runset(
                runset, embeddings, plan.staging(output), alignments, directions, options, sidecar, on_run
            )
        elif fmt == "npy":
            with open(plan.staging(output), "wb") as file:
                _write_npy(first, file, alignments[0][0], directions, options)
            plan.write_text(keys_path_for(output), keys_text(first.keys))
        else:
            features = _features_in_memory(first, alignments[0][0], directions, options)
            write_embedding(plan.staging(output, nested=True), first.keys, features, fmt)
        plan.write_json(sidecar_path, sidecar)
        if save_transform is not None:
            _save_transform(plan, save_transform, directions, [a[0] for a in alignments], sidecar)
    residuals = [a for a in alignments if a[1] is not None]
    return FeaturizeResult(
        output,
        sidecar_path,
        len(first.keys),
        first.dim,
        dim or first.dim,
        len(embeddings),
        measured,
        rr_dim,
        float(np.mean([a[1] for a in residuals])) if residuals else None,
        float(np.mean([a[2] for a in residuals])) if residuals else None,
        notes,
    )


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
                _write_npy(emb, file, rotation, directions, options)

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
