"""Stabilizing featurization (SPEC section 6): random Fourier features and Procrustes alignment.

``phi(h) = sqrt(1/k) [cos(hU), sin(hU)]`` with k = M/2 directions ``U ~ N(0, σ²)`` drawn
from ``numpy.random.default_rng(seed)``; ``⟨phi(h), phi(h')⟩`` approximates the Gaussian
kernel ``exp(−σ²‖h − h'‖²/2)`` (Rahimi & Recht 2007). Rows are L2-normalized first unless
``normalize=False``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from scipy.linalg import orthogonal_procrustes

from stabcli import __version__
from stabcli.corpus import file_sha256
from stabcli.embeddings import (
    Embedding, ReadOptions, check_keys_writable, format_for, keys_path_for, keys_text, match_inputs, require_finite, write_embedding,
)
from stabcli.errors import InputError, UsageError
from stabcli.metrics import SMALLEST_RELIABLE_NORM32, inverse_norms, row_norms, unit_rows
from stabcli.runset import KEYS, MANIFEST, RunSet, is_runset, write_json_atomic


def draw_directions(input_dim: int, n_components: int, sigma: float, seed: int | None) -> np.ndarray:
    """U ∈ R^{d × M/2}, entries ~ N(0, σ²) from ``numpy.random.default_rng(seed)``."""
    _check_output_dim(n_components)
    _check_sigma(sigma)
    return np.random.default_rng(seed).normal(0.0, sigma, size=(input_dim, n_components // 2))


def _check_output_dim(n_components: int) -> None:
    if not isinstance(n_components, (int, np.integer)) or n_components < 2 or n_components % 2:
        raise UsageError(f"output dimension {n_components!r} must be an even integer >= 2")


def _check_sigma(sigma: float) -> None:
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise UsageError(f"sigma {sigma!r} must be a positive number")


def fourier_features(X: np.ndarray, directions: np.ndarray, normalize: bool, out: np.ndarray | None = None,
                     inverse: np.ndarray | None = None, work: np.ndarray | None = None) -> np.ndarray:
    """``sqrt(1/k) [cos(XU), sin(XU)]`` for one block of rows, written into ``out`` if given.

    Computed in float32 when X is float32 (the streamed files: SIMD cos/sin, half the
    memory traffic; within a few float32 ulps of the float64 result), else in float64.
    Normalizing scales the projection, ``(x/‖x‖)U = (xU)/‖x‖``, one pass over k columns
    instead of a normalized copy of X; ``inverse`` passes the 1/‖x‖ already computed and
    ``work`` a reusable buffer (at least len(X) × k, X's dtype) for the projection.
    """
    dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
    X = np.asarray(X, dtype=dtype)
    weights = directions.astype(dtype, copy=False)
    projected = X @ weights if work is None else np.matmul(X, weights, out=work[: X.shape[0]])
    if normalize:
        projected *= (inverse_norms(X) if inverse is None else inverse)[:, None]
    k = directions.shape[1]
    if out is None:
        out = np.empty((X.shape[0], 2 * k), dtype=dtype)
    np.cos(projected, out=out[:, :k])
    np.sin(projected, out=out[:, k:])
    out *= dtype(math.sqrt(1.0 / k))
    return out


def gaussian_kernel_error(X: np.ndarray, sigma: float, n_components: int, seed: int, normalize: bool,
                          pairs: int = 2000) -> float:
    """Mean absolute error of ``⟨phi(x), phi(y)⟩`` against ``exp(−σ²‖x − y‖²/2)`` on seeded row pairs."""
    rng = np.random.default_rng([seed, 1])
    n = X.shape[0]
    first = rng.integers(0, n, size=pairs)
    second = rng.integers(0, n, size=pairs)
    a, b = np.asarray(X[np.sort(first)], dtype=np.float64), np.asarray(X[np.sort(second)], dtype=np.float64)
    if normalize:
        a, b = unit_rows(a), unit_rows(b)
    exact = np.exp(-(sigma ** 2) * np.square(a - b).sum(axis=1) / 2)
    directions = draw_directions(a.shape[1], n_components, sigma, seed)
    approx = (fourier_features(a, directions, False) * fourier_features(b, directions, False)).sum(axis=1)
    return float(np.abs(approx - exact).mean())


def rahimi_recht_dimension(epsilon: float, sigma: float, dim: int, diameter: float, delta: float = 0.05) -> int:
    """Output dimension M at which Rahimi & Recht (2007, Claim 1) guarantee a *uniform* error
    ≤ ε with probability ≥ 1 − δ: D ≥ 4(d+2)/ε² · ln(2⁸ (σ_p·diam/ε)² / δ), σ_p = σ√d, M = 2D."""
    sigma_p = sigma * math.sqrt(dim)
    d_needed = 4 * (dim + 2) / epsilon ** 2 * math.log(2 ** 8 * (sigma_p * diameter / epsilon) ** 2 / delta)
    return 2 * math.ceil(max(d_needed, 1))


def choose_dimension(X: np.ndarray, sigma: float, epsilon: float, seed: int, normalize: bool,
                     max_dim: int = 1 << 16) -> tuple[int, float]:
    """Smallest even M (doubling, then bisection) whose measured mean kernel error is ≤ ε."""
    if not (epsilon > 0):
        raise UsageError(f"--epsilon {epsilon!r} must be positive")
    high = 2
    while (error := gaussian_kernel_error(X, sigma, high, seed, normalize)) > epsilon:
        if high >= max_dim:
            raise UsageError(f"--epsilon {epsilon:g}: not reached with M up to {max_dim} (error {error:.3g})")
        high *= 2
    best, best_error = high, error
    low = high // 2  # known (or assumed, for M=2) to miss ε
    while high - low > 2:
        mid = (low + high) // 4 * 2
        mid_error = gaussian_kernel_error(X, sigma, mid, seed, normalize)
        if mid_error <= epsilon:
            high, best, best_error = mid, mid, mid_error
        else:
            low = mid
    return best, best_error


@dataclass
class FeaturizeSpec:
    dim: int | None = 128         # 0 = align only; None = choose from epsilon
    sigma: float = 1.0
    seed: int = 0
    normalize: bool = True
    epsilon: float | None = None
    align_to: Path | None = None
    chunk_rows: int | None = None     # rows per chunk; None: about CHUNK_BYTES of output (stays in cache)


@dataclass
class FeaturizeResult:
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


def _sha256_array(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f8").tobytes()).hexdigest()


def _alignment(emb: Embedding, reference: Embedding) -> tuple[np.ndarray, float, float]:
    """Rotation of ``emb`` onto ``reference`` over shared keys, with relative residuals before/after."""
    position = {k: i for i, k in enumerate(reference.keys)}
    mine = [i for i, k in enumerate(emb.keys) if k in position]
    if not mine:
        raise InputError(f"{reference.source}: no keys in common with {emb.source}")
    if reference.dim != emb.dim:
        raise InputError(f"{reference.source}: dimension {reference.dim}, but {emb.source} has {emb.dim}")
    x = np.asarray(emb.vectors[mine], dtype=np.float64)
    r = np.asarray(reference.vectors[[position[emb.keys[i]] for i in mine]], dtype=np.float64)
    rotation, _ = orthogonal_procrustes(x, r)
    scale = np.linalg.norm(r) or 1.0
    return rotation, float(np.linalg.norm(x - r) / scale), float(np.linalg.norm(x @ rotation - r) / scale)


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


def _feature_chunks(emb: Embedding, rotation: np.ndarray | None, directions: np.ndarray | None, normalize: bool,
                    chunk_rows: int | None, buffers: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    """The output, chunk by chunk: (first row, float32 rows) after alignment and features.

    Computed in float32 (in float64 for a block float32 cannot normalize) into ``buffers``
    reused arrays that stay in cache: a yielded block is overwritten ``buffers`` chunks later.
    """
    n = emb.vectors.shape[0]
    chunk_rows = _chunk_rows(chunk_rows, _width(emb, directions))
    rotation32 = None if rotation is None else rotation.astype(np.float32)
    if directions is not None:
        rows, k = min(chunk_rows, n), directions.shape[1]
        work = np.empty((rows, k), np.float32)
        outs = [np.empty((rows, 2 * k), np.float32) for _ in range(buffers)]
    for chunk, start in enumerate(range(0, n, chunk_rows)):
        block = np.asarray(emb.vectors[start:start + chunk_rows], dtype=np.float32)
        inverse = None
        if directions is not None and normalize:
            norms = row_norms(block)  # NaN/inf rows show up here: no separate pass over the block
            if _float32_carries(block, norms):
                inverse = inverse_norms(block, norms)
            else:
                require_finite(emb.source, emb.keys, block, start)  # raises, unless float32 is the problem
                block = block.astype(np.float64)
        else:
            require_finite(emb.source, emb.keys, block, start)
        if rotation32 is not None:
            block = block @ (rotation32 if block.dtype == np.float32 else rotation)
        if directions is None:
            yield start, block
        else:
            yield start, fourier_features(block, directions, normalize, out=outs[chunk % buffers][: block.shape[0]],
                                          inverse=inverse, work=work if block.dtype == np.float32 else None)


def _width(emb: Embedding, directions: np.ndarray | None) -> int:
    return emb.dim if directions is None else 2 * directions.shape[1]


def _stream_to_npy(emb: Embedding, path: Path, rotation: np.ndarray | None, directions: np.ndarray | None,
                   spec: FeaturizeSpec) -> None:
    """Stream ``emb`` into a float32 ``.npy`` at ``path``, a chunk in memory at a time; a writer
    thread saves one chunk while the next is computed."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
              "shape": (emb.vectors.shape[0], _width(emb, directions))}
    with open(path, "wb") as file, ThreadPoolExecutor(1) as writer:
        np.lib.format.write_array_header_1_0(file, header)
        pending = None
        for _, block in _feature_chunks(emb, rotation, directions, spec.normalize, spec.chunk_rows, buffers=2):
            if pending is not None:
                pending.result()  # its buffer is the one the next chunk overwrites
            pending = writer.submit(file.write, np.ascontiguousarray(block))
        if pending is not None:
            pending.result()


def _featurize_one(emb: Embedding, target: Path, fmt: str, rotation: np.ndarray | None, directions: np.ndarray | None,
                   spec: FeaturizeSpec) -> None:
    check_keys_writable(target, fmt, emb.keys)  # what the output's reader would reject is never written
    if fmt == "npy":
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        try:
            _stream_to_npy(emb, tmp, rotation, directions, spec)
            keys_path_for(tmp).write_text(keys_text(emb.keys), encoding="utf-8")
            os.replace(keys_path_for(tmp), keys_path_for(target))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
            keys_path_for(tmp).unlink(missing_ok=True)
        return
    out = np.empty((emb.vectors.shape[0], _width(emb, directions)), dtype=np.float32)
    for start, block in _feature_chunks(emb, rotation, directions, spec.normalize, spec.chunk_rows):
        out[start:start + block.shape[0]] = block
    write_embedding(target, emb.keys, out, fmt)


def featurize(input_path: str | Path, output: str | Path, spec: FeaturizeSpec, fmt: str | None = None,
              save_transform: Path | None = None, on_run: Callable[[str], None] | None = None,
              read: ReadOptions | None = None, on_note: Callable[[str], None] | None = None) -> FeaturizeResult:
    """Featurize one embedding file, or every run of a run set with the same directions U.

    A run set is written as a new run set (built under a temporary name, then renamed) that
    ``stabcli audit`` reads. The sidecar ``OUTPUT.featurize.json`` records everything needed
    to reproduce the output bit for bit. ``read``: how input files are read
    (``--input-format``, ``--trust-pickle``, ``--keys``; ``embeddings.match_inputs``).
    """
    read = read or ReadOptions()
    source, output = Path(input_path), Path(output)
    runset = RunSet.open(source) if source.is_dir() and is_runset(source) else None
    if source.is_dir() and runset is None:
        raise InputError(f"{source}: a directory but not a run set (no {MANIFEST})")
    if runset is not None and not runset.runs:
        raise InputError(f"{source}: run set has no complete runs")
    if spec.dim:
        _check_output_dim(spec.dim)
    _check_sigma(spec.sigma)
    if spec.dim == 0 and spec.align_to is None:
        raise UsageError("--dim 0 only aligns: it needs --align-to")
    if spec.chunk_rows is not None and spec.chunk_rows < 1:
        raise UsageError("--chunk-rows must be at least 1")
    if not output.parent.is_dir():
        raise UsageError(f"{output}: directory {output.parent} does not exist")
    if runset is not None and output.exists():
        raise UsageError(f"{output}: already exists; choose a new run-set directory")
    if runset is None:
        fmt = fmt or format_for(output)
        if fmt is None:
            raise UsageError(f"{output}: cannot tell the format from the suffix; pass --format")
    else:
        fmt = "npy"

    embeddings = [runset.load(i) for i in runset.runs] if runset else [read.read(source)]
    first = embeddings[0]
    for emb in embeddings[1:]:
        if emb.dim != first.dim:
            raise InputError(f"{emb.source}: dimension {emb.dim}, but {first.source} has {first.dim}")
    reference = read.read(spec.align_to) if spec.align_to else None
    matched = match_inputs(embeddings + ([reference] if reference else []), read.keys_file, on_note)
    embeddings, reference = matched[:len(embeddings)], (matched[-1] if reference else None)
    alignments = [_alignment(e, reference) for e in embeddings] if reference else [(None, None, None)] * len(embeddings)
    dim, measured, rr_dim = spec.dim, None, None
    if dim is None:
        if spec.epsilon is None:
            raise UsageError("give --dim M or --epsilon E")
        dim, measured = choose_dimension(first.vectors, spec.sigma, spec.epsilon, spec.seed, spec.normalize)
        diameter = 2.0 if spec.normalize else 2.0 * float(np.linalg.norm(np.asarray(first.vectors[:10_000]), axis=1).max())
        rr_dim = rahimi_recht_dimension(spec.epsilon, spec.sigma, first.dim, diameter)
    directions = draw_directions(first.dim, dim, spec.sigma, spec.seed) if dim else None

    sidecar = {
        "stabcli_version": __version__,
        "input": str(source.resolve()),
        "seed": spec.seed,
        "sigma": spec.sigma,
        "dim": dim,
        "input_dim": first.dim,
        "normalize": spec.normalize,
        "epsilon": spec.epsilon,
        "measured_kernel_error": measured,
        "align_to": str(spec.align_to.resolve()) if spec.align_to else None,
        "align_to_sha256": file_sha256(spec.align_to) if spec.align_to else None,
        "directions_sha256": _sha256_array(directions) if directions is not None else None,
        "format": fmt,
    }
    sidecar_path = output.with_name(output.name + ".featurize.json")
    try:
        if runset is None:
            _featurize_one(first, output, fmt, alignments[0][0], directions, spec)
        else:
            _featurize_runset(runset, embeddings, output, alignments, directions, spec, sidecar, on_run)
        write_json_atomic(sidecar_path, sidecar)
        if save_transform is not None:
            _save_transform(save_transform, directions, [a[0] for a in alignments], sidecar)
    except OSError as exc:  # permission denied, disk full, ...: the temporary files are already gone
        raise UsageError(f"{exc.filename or output}: cannot write ({exc.strerror})") from None
    residuals = [a for a in alignments if a[1] is not None]
    return FeaturizeResult(
        output, sidecar_path, len(first.keys), first.dim, dim or first.dim, len(embeddings), measured, rr_dim,
        float(np.mean([a[1] for a in residuals])) if residuals else None,
        float(np.mean([a[2] for a in residuals])) if residuals else None,
    )


def _featurize_runset(runset: RunSet, embeddings: list[Embedding], output: Path, alignments: list, directions: np.ndarray | None,
                      spec: FeaturizeSpec, sidecar: dict, on_run: Callable[[str], None] | None) -> None:
    building = output.with_name(f".{output.name}.partial-{os.getpid()}")
    if building.exists():
        shutil.rmtree(building)
    building.mkdir()
    try:
        if (runset.root / KEYS).is_file():
            shutil.copyfile(runset.root / KEYS, building / KEYS)
        for index, emb, (rotation, _, _) in zip(runset.runs, embeddings, alignments):
            src, dst = runset.run_dir(index), building / runset.run_dir(index).name
            dst.mkdir()
            for name in (KEYS, "losses.json", "log.txt"):
                if (src / name).is_file():
                    shutil.copyfile(src / name, dst / name)
            _stream_to_npy(emb, dst / "vectors.npy", rotation, directions, spec)
            if on_run:
                on_run(dst.name)
        manifest = dict(runset.manifest)
        manifest["featurize"] = sidecar
        manifest["source_run_set"] = str(runset.root.resolve())
        write_json_atomic(building / MANIFEST, manifest)
        os.replace(building, output)
    finally:
        if building.exists():
            shutil.rmtree(building)


def _save_transform(path: Path, directions: np.ndarray | None, rotations: list, sidecar: dict) -> None:
    recipe = ("serve: h -> (h @ rotation if aligned) -> h / ||h|| if normalize -> z = h @ directions "
              "(a dense layer without bias) -> sqrt(1/k) * concat(cos(z), sin(z)), k = directions.shape[1]")
    arrays: dict[str, Any] = {"recipe": np.array(recipe), "sidecar": np.array(json.dumps(sidecar))}
    if directions is not None:
        arrays["directions"] = directions
    if rotations and rotations[0] is not None:
        arrays["rotation"] = np.stack(rotations) if len(rotations) > 1 else rotations[0]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
