"""Random Fourier features: the math, free of IO (alignment is ``stabcli.measure.align``).

``phi(h) = sqrt(1/k) [cos(hU), sin(hU)]`` with k = M/2 directions ``U ~ N(0, σ²)`` drawn
from ``numpy.random.default_rng(seed)``; ``⟨phi(h), phi(h')⟩`` approximates the Gaussian
kernel ``exp(−σ²‖h − h'‖²/2)`` (Rahimi & Recht 2007). Rows are L2-normalized first unless
``normalize=False``. Like scikit-learn's ``kernel_approximation.py``, this module takes
arrays and returns arrays; ``stabcli.commands.featurize`` streams files and run sets through it.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from stabcli.errors import OptionError, quote
from stabcli.measure.metrics import inverse_norms, unit_rows
from stabcli.measure.threads import one_blas_thread


def check_output_dim(n_components: object, param: str = "n_components") -> None:
    """OptionError unless ``n_components`` is an even integer >= 2 (cos/sin pairs)."""
    if isinstance(n_components, bool) or not isinstance(n_components, Integral) or n_components < 2 or n_components % 2:
        raise OptionError(param, f"{quote(n_components)} must be an even integer >= 2 (cos/sin pairs)")


def check_sigma(sigma: object, param: str = "sigma") -> None:
    """OptionError unless ``sigma`` is a finite positive number."""
    if isinstance(sigma, bool) or not isinstance(sigma, Real) or not (math.isfinite(float(sigma)) and float(sigma) > 0):
        raise OptionError(param, f"{quote(sigma)} must be a positive number")


def check_seed(seed: object, param: str = "seed") -> None:
    """OptionError unless ``seed`` is None or a non-negative integer (``default_rng``'s domain)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0):
        raise OptionError(param, f"{quote(seed)} must be a non-negative integer")


def draw_directions(input_dim: int, n_components: int, sigma: float, seed: int | None) -> np.ndarray:
    """U ∈ R^{d × M/2}, entries ~ N(0, σ²) from ``numpy.random.default_rng(seed)``."""
    check_output_dim(n_components)
    check_sigma(sigma)
    check_seed(seed, "random_state")
    return np.random.default_rng(seed).normal(0.0, sigma, size=(input_dim, n_components // 2))


MATMUL_BLOCK_ROWS = 256
"""Rows per GEMM in :func:`blocked_matmul`; callers that stream a matrix in chunks start
every chunk at a multiple of it (:func:`aligned_chunk_rows`)."""


def aligned_chunk_rows(rows: int) -> int:
    """``rows`` rounded up to a whole number of :data:`MATMUL_BLOCK_ROWS` blocks."""
    return -(-max(rows, 1) // MATMUL_BLOCK_ROWS) * MATMUL_BLOCK_ROWS


def blocked_matmul(X: np.ndarray, W: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``X @ W`` in fixed blocks, so a row's bits depend only on X's rows, never on how a
    caller splits X into chunks, nor on the BLAS thread count.

    A BLAS GEMM's summation order depends on its shape, the kernel, the thread count and, on
    some kernels (OpenBLAS Haswell), on the other rows of the block. So the product is one
    GEMM per block of :data:`MATMUL_BLOCK_ROWS` rows counted from X's first row, every block
    the same shape (the last one zero-padded), copied into the same buffer, on one BLAS
    thread. A chunk that starts at a multiple of the block size therefore sees exactly the
    blocks the whole matrix does: streaming a file in any such chunks, or all at once, gives
    the same bits on one machine (docs/reproducibility.md). Another kernel gives other bits,
    within float32's dot-product error bound.
    """
    dtype = np.result_type(X.dtype, W.dtype)
    n, d = X.shape
    weights = np.ascontiguousarray(W, dtype=dtype)
    if out is None:
        out = np.empty((n, weights.shape[1]), dtype=dtype)
    block = np.zeros((MATMUL_BLOCK_ROWS, d), dtype=dtype)
    product = np.empty((MATMUL_BLOCK_ROWS, weights.shape[1]), dtype=dtype)
    with one_blas_thread():
        for start in range(0, n, MATMUL_BLOCK_ROWS):
            rows = X[start : start + MATMUL_BLOCK_ROWS]
            count = rows.shape[0]
            block[:count] = rows
            block[count:] = 0
            np.matmul(block, weights, out=product)
            out[start : start + count] = product[:count]
    return out


def fourier_features(
    X: np.ndarray,
    directions: np.ndarray,
    normalize: bool,
    out: np.ndarray | None = None,
    inverse: np.ndarray | None = None,
    work: np.ndarray | None = None,
) -> np.ndarray:
    """``sqrt(1/k) [cos(XU), sin(XU)]`` for one block of rows, written into ``out`` if given.

    Computed in float32 when X is float32 (the streamed files: SIMD cos/sin, half the
    memory traffic; within a few float32 ulps of the float64 result), else in float64.
    Normalizing scales the projection, ``(x/‖x‖)U = (xU)/‖x‖``, one pass over k columns
    instead of a normalized copy of X; ``inverse`` passes the 1/‖x‖ already computed and
    ``work`` a reusable buffer (at least len(X) × k, X's dtype) for the projection.
    A projection that overflows gives NaN features, silently: callers check finiteness.
    """
    dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
    X = np.asarray(X, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        weights = directions.astype(dtype, copy=False)
        projected = blocked_matmul(X, weights, None if work is None else work[: X.shape[0]])
        if normalize:
            projected *= (inverse_norms(X) if inverse is None else inverse)[:, None]
        k = directions.shape[1]
        if out is None:
            out = np.empty((X.shape[0], 2 * k), dtype=dtype)
        np.cos(projected, out=out[:, :k])
        np.sin(projected, out=out[:, k:])
    out *= dtype(math.sqrt(1.0 / k))
    return out


def gaussian_kernel_error(
    X: np.ndarray, sigma: float, n_components: int, seed: int, normalize: bool, pairs: int = 2000
) -> float:
    """Mean absolute error of ``⟨phi(x), phi(y)⟩`` against ``exp(−σ²‖x − y‖²/2)`` on seeded row pairs."""
    rng = np.random.default_rng([seed, 1])
    n = X.shape[0]
    first = rng.integers(0, n, size=pairs)
    second = rng.integers(0, n, size=pairs)
    a, b = np.asarray(X[np.sort(first)], dtype=np.float64), np.asarray(X[np.sort(second)], dtype=np.float64)
    if normalize:
        a, b = unit_rows(a), unit_rows(b)
    with np.errstate(over="ignore", invalid="ignore"):  # a huge σ: exact → 0, features NaN (the caller refuses)
        exact = np.exp(-np.square(sigma * (a - b)).sum(axis=1) / 2)
        directions = draw_directions(a.shape[1], n_components, sigma, seed)
        k = directions.shape[1]
        approx = np.zeros(pairs)
        for start in range(0, k, _KERNEL_BLOCK):  # memory O(pairs × block), not O(pairs × M)
            block = directions[:, start : start + _KERNEL_BLOCK]
            # each block's features are scaled by sqrt(1/its width): rescale to 1/k (exactly 1.0 for one block)
            approx += (fourier_features(a, block, False) * fourier_features(b, block, False)).sum(axis=1) * (
                block.shape[1] / k
            )
        return float(np.abs(approx - exact).mean())


_KERNEL_BLOCK = 1024  # directions per block of the kernel error: 2,000 pairs × 2,048 features × 8 bytes


def rahimi_recht_dimension(epsilon: float, sigma: float, dim: int, diameter: float, delta: float = 0.05) -> int:
    """Output dimension M at which Rahimi & Recht (2007, Claim 1) guarantee a *uniform* error
    ≤ ε with probability ≥ 1 − δ: D ≥ 4(d+2)/ε² · ln(2⁸ (σ_p·diam/ε)² / δ), σ_p = σ√d, M = 2D."""
    # in logarithms: σ_p·diam/ε overflows a float for a large σ
    log_ratio = math.log(sigma) + 0.5 * math.log(dim) + math.log(diameter) - math.log(epsilon) if diameter > 0 else 0.0
    d_needed = 4 * (dim + 2) / epsilon / epsilon * (math.log(2**8 / delta) + 2 * log_ratio)
    return 2 * math.ceil(max(d_needed, 1))


def choose_dimension(
    X: np.ndarray, sigma: float, epsilon: float, seed: int, normalize: bool, max_dim: int = 1 << 16
) -> tuple[int, float]:
    """Smallest even M (doubling, then bisection) whose measured mean kernel error is ≤ ε."""
    if not (isinstance(epsilon, Real) and math.isfinite(epsilon) and epsilon > 0):
        raise OptionError("epsilon", f"{quote(epsilon)} must be a positive number")
    high = 2
    while (error := _finite_kernel_error(X, sigma, high, seed, normalize)) > epsilon:
        if high >= max_dim:
            raise OptionError("epsilon", f"{epsilon:g} is not reached with M up to {max_dim} (error {error:.3g})")
        high *= 2
    best, best_error = high, error
    low = high // 2  # known (or assumed, for M=2) to miss ε
    while high - low > 2:
        mid = (low + high) // 4 * 2
        mid_error = _finite_kernel_error(X, sigma, mid, seed, normalize)
        if mid_error <= epsilon:
            high, best, best_error = mid, mid, mid_error
        else:
            low = mid
    return best, best_error


def _finite_kernel_error(X: np.ndarray, sigma: float, n_components: int, seed: int, normalize: bool) -> float:
    error = gaussian_kernel_error(X, sigma, n_components, seed, normalize)
    if not math.isfinite(error):
        raise OptionError(
            "sigma", f"{sigma:g} makes the features NaN (the projection h·U overflows); choose a smaller --sigma"
        )
    return error
