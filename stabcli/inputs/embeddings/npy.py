"""``.npy``: a float or integer matrix; keys in ``NAME.keys.txt`` beside it, one per line
(keyless without one). Memory-mapped when uncompressed; never unpickled."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from stabcli.errors import InputError, quoted
from stabcli.inputs.embeddings.core import (
    Embedding,
    Source,
    keys_path_for,
    keys_text,
    read_keys,
    require_real_dtype,
    starts_with,
)

NPY_MAGIC = b"\x93NUMPY"


def load_npy(path: Path) -> np.ndarray:
    """A ``.npy`` file memory-mapped read-only, never unpickled. InputError naming the file
    for anything else (a file without NumPy's magic string, an object array, a malformed
    header: numpy's header parser raises many kinds of exception)."""
    if not starts_with(path, NPY_MAGIC):
        raise InputError(f"{path}: not a .npy file (it does not start with NumPy's magic string)")
    return _guarded_load(path, lambda: np.load(path, mmap_mode="r", allow_pickle=False))


def _guarded_load(path: Path, load) -> np.ndarray:  # type: ignore[no-untyped-def]
    try:
        return load()
    except InputError:
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Python objects" in str(exc):
            raise InputError(
                f"{path}: vectors have dtype object; expected a numeric matrix of real numbers "
                "(stabcli never loads pickled arrays)"
            ) from None
        if "header" in str(exc).lower():  # numpy quotes the header: never echo a file's bytes
            raise InputError(f"{path}: not a readable .npy file (malformed header)") from None
        raise InputError(f"{path}: not a readable .npy file ({quoted(str(exc))})") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({quoted(str(exc))})") from None
    except Exception:  # numpy's header parser: SyntaxError, tokenize.TokenError, MemoryError...
        raise InputError(f"{path}: not a readable .npy file (malformed header)") from None


def read(source: Source) -> Embedding:
    path = source.path
    if source.compression is None:
        vectors = load_npy(path)
    else:
        if not source.head.startswith(NPY_MAGIC):
            raise InputError(f"{path}: not a .npy file (it does not start with NumPy's magic string)")

        def load() -> np.ndarray:
            with source.open() as stream:
                return np.lib.format.read_array(stream, allow_pickle=False)

        vectors = _guarded_load(path, load)
    if vectors.ndim != 2:
        raise InputError(f"{path}: expected a 2-d matrix [keys, dims], found shape {vectors.shape}")
    require_real_dtype(path, vectors)
    if vectors.dtype.kind == "f" and vectors.dtype.itemsize > 8:  # long double: stabcli computes in float64
        vectors = _as_float64(path, vectors)
    keys_file = keys_path_for(path)
    read_as = source.described(".npy") if source.compression else ""
    if not keys_file.is_file():
        keys_file = runset_keys_for(path) or keys_file
    if keys_file.is_file():
        keys = read_keys(keys_file)
        if len(keys) != vectors.shape[0]:
            raise InputError(f"{keys_file}: {len(keys)} keys for {vectors.shape[0]} rows in {path.name}")
        return Embedding(keys, vectors, path, read_as=read_as)
    return Embedding([str(i) for i in range(vectors.shape[0])], vectors, path, keyless=True, read_as=read_as)


def runset_keys_for(path: Path) -> Path | None:
    """The keys of a run file taken from inside a run set: ``R/run-000/vectors.npy`` (and its
    ``epochs/NNN.npy``) has the run's own ``keys.txt``, else the run set's ``R/keys.txt``
    (``docs/formats.md``, run set). None for a file outside a run set."""
    from stabcli.runset.layout import EPOCHS, KEYS, MANIFEST, VECTORS

    run = path.parent.parent if path.parent.name == EPOCHS else path.parent
    if not re.fullmatch(r"run-\d{3,}", run.name) or not (run.parent / MANIFEST).is_file():
        return None
    if path.parent.name != EPOCHS and path.name != VECTORS:
        return None
    for keys in (run / KEYS, run.parent / KEYS):
        if keys.is_file():
            return keys
    return None


def _as_float64(path: Path, vectors: np.ndarray) -> np.ndarray:
    """A long-double matrix as float64, or InputError when a finite value is beyond float64."""
    magnitude = np.abs(vectors)
    finite = magnitude[np.isfinite(magnitude)]
    if finite.size and finite.max() > np.finfo(np.float64).max:
        raise InputError(
            f"{path}: {vectors.dtype} values up to 1e{float(np.log10(finite.max())):.0f} "
            f"exceed float64's range (1.8e308), which stabcli computes in"
        )
    with np.errstate(under="ignore"):
        return np.asarray(vectors, dtype=np.float64)


def write(path: Path, tmp: Path, keys: list[str], vectors: np.ndarray) -> list[tuple[Path, Path]]:
    with open(tmp, "wb") as fh:
        np.save(fh, vectors)
    keys_tmp = tmp.with_name(tmp.name + ".keys")
    keys_tmp.write_text(keys_text(keys), encoding="utf-8")
    return [(tmp, path), (keys_tmp, keys_path_for(path))]


def sniff(head: bytes) -> bool:
    return head.startswith(NPY_MAGIC)
