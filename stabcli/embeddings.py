"""Embedding files: read and write every format of SPEC section 2.

* ``.npy``: float matrix; keys in ``NAME.keys.txt`` beside ``NAME.npy`` (one per line),
  row numbers when there is none. Read memory-mapped.
* ``.txt`` / ``.vec``: word2vec text (header ``count dim``, then ``key v1 ... vd``).
* ``.bin``: word2vec binary (header line, then ``key<space>`` + ``dim`` float32 per row).
* ``.kv``: gensim ``KeyedVectors.save``.
* ``.parquet``: a ``key`` column plus one column per dimension (needs pyarrow).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from stabcli.errors import InputError, UsageError

WRITE_FORMATS = ("npy", "word2vec", "word2vec-bin", "kv", "parquet")
_SUFFIX_FORMAT = {".npy": "npy", ".txt": "word2vec", ".vec": "word2vec", ".bin": "word2vec-bin", ".kv": "kv", ".parquet": "parquet"}


@dataclass
class Embedding:
    """Row-aligned keys and vectors ``[n, d]`` (possibly a read-only memory map)."""

    keys: list[str]
    vectors: np.ndarray
    source: Path

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


def keys_path_for(npy: Path) -> Path:
    """``NAME.keys.txt`` beside ``NAME.npy``."""
    return npy.with_name(npy.stem + ".keys.txt")


def require_finite(source: Path, keys: list[str], block: np.ndarray, start: int = 0) -> None:
    """InputError naming the first key whose row of ``block`` (rows ``start``, ``start+1``, …
    of ``keys``) holds NaN or inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(block)):  # one fast pass; a sum that overflows only costs the row check
            return
    ok = np.isfinite(block).all(axis=1)
    if not ok.all():
        raise InputError(f"{source}: key {keys[start + int(np.argmin(ok))]!r} has NaN or infinite values")


FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def fits_float32(values: np.ndarray) -> bool:
    """True when casting ``values`` to float32 turns no finite value into inf and no non-zero
    value into 0 or a subnormal (NaN and inf stay what they are: ``require_finite`` names them)."""
    magnitude = np.abs(values)
    finite = np.isfinite(magnitude)
    if not finite.all():
        magnitude = magnitude[finite]
    if magnitude.max(initial=0.0) > FLOAT32_MAX:
        return False
    return not (magnitude.min(initial=np.inf) < FLOAT32_TINY and np.any((magnitude > 0) & (magnitude < FLOAT32_TINY)))


def keys_text(keys: Sequence[str]) -> str:
    """The contents of a keys file: one key per line, each ending in a newline."""
    return "\n".join(keys) + "\n" if keys else ""


def format_for(path: Path) -> str | None:
    """The format a suffix names (``.vec`` → ``word2vec``), or None."""
    return _SUFFIX_FORMAT.get(path.suffix.lower())


def is_embedding_file(path: Path) -> bool:
    return path.suffix.lower() in _SUFFIX_FORMAT and not path.name.endswith(".keys.txt")


def read_keys(path: Path) -> list[str]:
    """One key per line (UTF-8); trailing newline optional; no empty or duplicate keys."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: keys are not valid UTF-8 (byte offset {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read keys ({exc.strerror})") from None
    keys = text.split("\n")
    if keys and keys[-1] == "":
        keys.pop()
    keys = [k.rstrip("\r") for k in keys]
    _check_keys(path, keys)
    return keys


def _check_keys(path: Path, keys: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, key in enumerate(keys, start=1):
        if key == "":
            raise InputError(f"{path}:{i}: empty key")
        if key in seen:
            raise InputError(f"{path}:{i}: duplicate key {key!r} (first on line {seen[key]})")
        seen[key] = i


def read_embedding(path: str | Path) -> Embedding:
    """Read one embedding file, choosing the format from its suffix.

    Raises
    ------
    InputError
        Missing file, unknown suffix, malformed content, or keys that do not match rows.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    fmt = _SUFFIX_FORMAT.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{path}: unknown embedding format (expected one of {', '.join(sorted(_SUFFIX_FORMAT))})")
    reader = {"npy": _read_npy, "word2vec": _read_word2vec_text, "word2vec-bin": _read_word2vec_binary,
              "kv": _read_kv, "parquet": _read_parquet}[fmt]
    return reader(path)


def _read_npy(path: Path) -> Embedding:
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({exc})") from None
    if vectors.ndim != 2:
        raise InputError(f"{path}: expected a 2-d matrix [keys, dims], found shape {vectors.shape}")
    if vectors.dtype.kind not in "fiu":
        raise InputError(f"{path}: expected a numeric matrix, found dtype {vectors.dtype}")
    if vectors.dtype.kind == "f" and vectors.dtype.itemsize > 8:  # long double: stabcli computes in float64
        vectors = _as_float64(path, vectors)
    keys_file = keys_path_for(path)
    if keys_file.is_file():
        keys = read_keys(keys_file)
        if len(keys) != vectors.shape[0]:
            raise InputError(f"{keys_file}: {len(keys)} keys for {vectors.shape[0]} rows in {path.name}")
    else:
        keys = [str(i) for i in range(vectors.shape[0])]
    return Embedding(keys, vectors, path)


def _as_float64(path: Path, vectors: np.ndarray) -> np.ndarray:
    """A long-double matrix as float64, or InputError when a finite value is beyond float64."""
    magnitude = np.abs(vectors)
    finite = magnitude[np.isfinite(magnitude)]
    if finite.size and finite.max() > np.finfo(np.float64).max:
        raise InputError(f"{path}: {vectors.dtype} values up to 1e{float(np.log10(finite.max())):.0f} "
                         f"exceed float64's range (1.8e308), which stabcli computes in")
    with np.errstate(under="ignore"):
        return np.asarray(vectors, dtype=np.float64)


def _parse_header(path: Path, line: bytes) -> tuple[int, int]:
    parts = line.split()
    try:
        count, dim = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"{path}:1: expected a word2vec header 'count dim', found {line[:60]!r}") from None
    if count < 1 or dim < 1:
        raise InputError(f"{path}:1: word2vec header says {count} vectors of dimension {dim}")
    return count, dim


def _read_word2vec_text(path: Path) -> Embedding:
    with open(path, "rb") as fh:
        count, dim = _parse_header(path, fh.readline())
        keys: list[str] = []
        vectors = np.empty((count, dim), dtype=np.float32)
        for lineno, raw in enumerate(fh, start=2):
            if not raw.strip():
                continue
            if len(keys) == count:
                raise InputError(f"{path}:{lineno}: more vectors than the header's {count}")
            try:
                fields = raw.decode("utf-8").rstrip("\r\n").rstrip(" ").split(" ")
            except UnicodeDecodeError:
                raise InputError(f"{path}:{lineno}: not valid UTF-8") from None
            if len(fields) != dim + 1:
                raise InputError(f"{path}:{lineno}: expected {dim + 1} fields (key + {dim} values), found {len(fields)}")
            try:
                row = np.asarray(fields[1:], dtype=np.float64)
            except ValueError:
                raise InputError(f"{path}:{lineno}: vector values are not all numbers") from None
            if vectors.dtype == np.float32 and not fits_float32(row):
                vectors = vectors.astype(np.float64)  # finite values float32 would turn into inf or 0
            vectors[len(keys)] = row
            keys.append(fields[0])
    if len(keys) != count:
        raise InputError(f"{path}: header says {count} vectors, found {len(keys)}")
    _check_keys(path, keys)
    return Embedding(keys, vectors, path)


def _read_word2vec_binary(path: Path) -> Embedding:
    data = path.read_bytes()
    newline = data.find(b"\n")
    if newline < 0:
        raise InputError(f"{path}: no word2vec header line")
    count, dim = _parse_header(path, data[:newline])
    row_bytes = 4 * dim
    keys: list[str] = []
    vectors = np.empty((count, dim), dtype=np.float32)
    pos = newline + 1
    for row in range(count):
        while pos < len(data) and data[pos:pos + 1] in (b"\n", b" "):
            pos += 1
        space = data.find(b" ", pos)
        if space < 0 or space - pos > 10_000:
            raise InputError(f"{path}: vector {row + 1} of {count}: truncated or missing key")
        try:
            keys.append(data[pos:space].decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"{path}: vector {row + 1}: key is not valid UTF-8") from None
        start = space + 1
        if start + row_bytes > len(data):
            raise InputError(f"{path}: vector {row + 1} of {count}: file ends early (truncated?)")
        vectors[row] = np.frombuffer(data, dtype="<f4", count=dim, offset=start)
        pos = start + row_bytes
    if data[pos:].strip():
        raise InputError(f"{path}: {len(data) - pos} bytes after the {count} vectors the header announces")
    _check_keys(path, keys)
    return Embedding(keys, vectors, path)


def _read_kv(path: Path) -> Embedding:
    from gensim.models import KeyedVectors

    try:
        kv = KeyedVectors.load(str(path), mmap="r")
    except Exception as exc:  # gensim unpickles arbitrary objects: any failure means "not a .kv file"
        raise InputError(f"{path}: not a gensim KeyedVectors file ({type(exc).__name__})") from None
    if not isinstance(kv, KeyedVectors):
        raise InputError(f"{path}: not a gensim KeyedVectors file (found {type(kv).__name__})")
    return Embedding([str(k) for k in kv.index_to_key], kv.vectors, path)


def _read_parquet(path: Path) -> Embedding:
    import pandas as pd

    try:
        table = pd.read_parquet(path)
    except ImportError:
        raise UsageError("reading parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable parquet file ({exc})") from None
    if "key" not in table.columns:
        raise InputError(f"{path}: no 'key' column (columns: {', '.join(map(str, table.columns[:8]))})")
    keys = table["key"].astype(str).tolist()
    values = table.drop(columns="key")
    try:
        vectors = values.to_numpy(dtype=np.float64)
    except ValueError:
        raise InputError(f"{path}: vector columns are not all numeric") from None
    if fits_float32(vectors):  # float32 like every other format, unless that loses finite values
        vectors = vectors.astype(np.float32)
    _check_keys(path, keys)
    return Embedding(keys, vectors, path)


def write_embedding(path: str | Path, keys: list[str], vectors: np.ndarray, fmt: str | None = None) -> None:
    """Write keys and float32 vectors to ``path`` atomically (temporary name, then rename).

    ``fmt`` is one of ``WRITE_FORMATS``; ``None`` chooses it from the suffix.
    """
    path = Path(path)
    fmt = fmt or _SUFFIX_FORMAT.get(path.suffix.lower())
    if fmt not in WRITE_FORMATS:
        raise UsageError(f"{path}: unknown output format (choose one of {', '.join(WRITE_FORMATS)})")
    vectors = np.asarray(vectors, dtype=np.float32)
    if len(keys) != vectors.shape[0]:
        raise ValueError(f"{len(keys)} keys for {vectors.shape[0]} rows")
    written: list[tuple[Path, Path]] = []
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if fmt == "npy":
        with open(tmp, "wb") as fh:
            np.save(fh, vectors)
        written.append((tmp, path))
        keys_tmp = tmp.with_name(tmp.name + ".keys")
        keys_tmp.write_text(keys_text(keys), encoding="utf-8")
        written.append((keys_tmp, keys_path_for(path)))
    elif fmt == "word2vec":
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{vectors.shape[0]} {vectors.shape[1]}\n")
            for key, row in zip(keys, vectors):
                fh.write(key + " " + " ".join(repr(float(v)) for v in row) + "\n")
        written.append((tmp, path))
    elif fmt == "word2vec-bin":
        with open(tmp, "wb") as fh:
            fh.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode())
            little = vectors.astype("<f4")
            for key, row in zip(keys, little):
                fh.write(key.encode("utf-8") + b" " + row.tobytes() + b"\n")
        written.append((tmp, path))
    elif fmt == "kv":
        from gensim.models import KeyedVectors

        kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
        kv.add_vectors(keys, vectors)
        kv.save(str(tmp), separately=[])  # one file, so the rename below is atomic
        written.append((tmp, path))
    else:
        import pandas as pd

        table = pd.DataFrame(vectors, columns=[f"v{j}" for j in range(vectors.shape[1])])
        table.insert(0, "key", keys)
        try:
            table.to_parquet(tmp, index=False)
        except ImportError:
            raise UsageError("writing parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
        written.append((tmp, path))
    for src, dst in written:
        os.replace(src, dst)
