"""Embedding files: read and write every format in docs/formats.md.

* ``.npy``: float matrix; keys in ``NAME.keys.txt`` beside ``NAME.npy`` (one per line),
  row numbers when there is none. Read memory-mapped.
* ``.txt`` / ``.vec``: word2vec text (header ``count dim``, then ``key v1 ... vd``).
* ``.bin``: word2vec binary (header line, then ``key<space>`` + ``dim`` float32 per row).
  A ``.bin`` that starts with fastText's magic number is read as fastText instead.
* ``.kv`` / ``.wv`` / ``.model``: gensim ``save()`` of KeyedVectors, Word2Vec, Doc2Vec
  (its document vectors ``dv``) or FastText, with the arrays gensim stored beside it;
  read through ``stabcli.inputs.safe_pickle`` (no code from the file runs).
* fastText ``.bin`` (Facebook's format): the word vectors, through gensim's reader.
* ``.parquet``: a ``key`` column plus one column per dimension (needs pyarrow).

``--input-format`` (``fmt`` here) overrides the suffix: one of ``READ_FORMATS``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from stabcli.errors import InputError, OptionError, UsageError
from stabcli.inputs.safe_pickle import load_gensim, printable

WRITE_FORMATS = ("npy", "word2vec", "word2vec-bin", "kv", "parquet")
READ_FORMATS = ("npy", "word2vec", "word2vec-bin", "fasttext", "kv", "parquet")
_SUFFIX_FORMAT = {
    ".npy": "npy",
    ".txt": "word2vec",
    ".vec": "word2vec",
    ".bin": "word2vec-bin",
    ".kv": "kv",
    ".parquet": "parquet",
}
_READ_SUFFIX_FORMAT = {**_SUFFIX_FORMAT, ".wv": "kv", ".model": "kv"}
FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")
NPY_MAGIC = b"\x93NUMPY"  # first int32 of a Facebook fastText .bin
_DTYPE_KINDS = {
    "b": "boolean",
    "c": "complex",
    "O": "object",
    "U": "string",
    "S": "bytes",
    "M": "datetime",
    "m": "timedelta",
    "V": "structured",
}


@dataclass
class Embedding:
    """Row-aligned keys and vectors ``[n, d]`` (possibly a read-only memory map)."""

    keys: list[str]
    vectors: np.ndarray
    source: Path
    keyless: bool = False  # keys are row numbers (a .npy without a keys file): match by position only

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


@dataclass(frozen=True)
class ReadOptions:
    """How commands read embedding files (the CLI's ``--input-format``, ``--trust-pickle``,
    ``--keys``); checks ``input_format`` on construction."""

    input_format: str | None = None  # one of READ_FORMATS; None: from each file's suffix
    trust_pickle: bool = False  # gensim files may run code: only for files you trust
    keys_file: Path | None = None  # keys for inputs without them (match_inputs)

    def __post_init__(self) -> None:
        if self.input_format is not None and self.input_format not in READ_FORMATS:
            raise OptionError(
                "input_format", f"unknown format {self.input_format!r} (choose one of {', '.join(READ_FORMATS)})"
            )

    def read(self, path: str | Path) -> Embedding:
        """``read_embedding`` with these options."""
        return read_embedding(path, self.input_format, self.trust_pickle)


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


def require_real_dtype(source: Path, vectors: np.ndarray) -> None:
    """InputError naming ``source`` and the dtype unless ``vectors`` holds real numbers
    (float or integer): complex, bool, string, object, datetime... are refused."""
    kind = vectors.dtype.kind
    if kind not in "fiu":
        what = _DTYPE_KINDS.get(kind, "not numeric")
        raise InputError(
            f"{source}: vectors have dtype {vectors.dtype} ({what}); expected a numeric matrix of real numbers"
        )


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
    text = text.removeprefix("\ufeff")  # a byte-order mark is not part of the first key
    keys = text.split("\n")
    if keys and keys[-1] == "":
        keys.pop()
    keys = [k.rstrip("\r") for k in keys]
    _check_keys(path, keys)
    return keys


def _check_keys(path: Path, keys: list[str], unit: str = "") -> None:
    """No empty or repeated key; ``unit`` "" names lines (``path:3:``), else e.g. ``key #3``."""
    seen: dict[str, int] = {}
    where = (lambda i: f"{path}:{i}:") if not unit else (lambda i: f"{path}: {unit}{i}:")
    for i, key in enumerate(keys, start=1):
        if key == "":
            raise InputError(f"{where(i)} empty key")
        if key in seen:
            raise InputError(
                f"{where(i)} duplicate key {key!r} (first {'on line' if not unit else 'at'} "
                f"{unit if unit else ''}{seen[key]})"
            )
        seen[key] = i


def read_embedding(path: str | Path, fmt: str | None = None, trust_pickle: bool = False) -> Embedding:
    """Read one embedding file; the format comes from ``fmt`` (one of ``READ_FORMATS``) or,
    when None, from the suffix (a ``.bin`` by its first bytes: fastText or word2vec).

    ``trust_pickle`` loads gensim files with the ordinary unpickler, which runs any code the
    file holds; by default only gensim's own classes are admitted (``stabcli.inputs.safe_pickle``).

    Raises
    ------
    InputError
        Missing file, unknown suffix, malformed content, vectors that are not real numbers,
        or keys that do not match rows.
    """
    path = Path(path)
    if fmt is not None and fmt not in READ_FORMATS:
        raise OptionError("input_format", f"unknown format {fmt!r} (choose one of {', '.join(READ_FORMATS)})")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    fmt = fmt or detect_format(path)
    if fmt == "kv":
        return _read_gensim(path, trust_pickle)
    reader = {
        "npy": _read_npy,
        "word2vec": _read_word2vec_text,
        "word2vec-bin": _read_word2vec_binary,
        "fasttext": _read_fasttext_bin,
        "parquet": _read_parquet,
    }[fmt]
    return reader(path)


def detect_format(path: Path) -> str:
    """The reading format of ``path`` from its suffix; ``.bin`` by fastText's magic number."""
    fmt = _READ_SUFFIX_FORMAT.get(path.suffix.lower())
    if fmt is None:
        raise InputError(
            f"{path}: unknown embedding format (expected one of "
            f"{', '.join(sorted(_READ_SUFFIX_FORMAT))}, or give --input-format)"
        )
    if fmt == "word2vec-bin" and _starts_with(path, FASTTEXT_MAGIC):
        return "fasttext"
    return fmt


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(magic)) == magic
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def load_npy(path: Path) -> np.ndarray:
    """A ``.npy`` file memory-mapped read-only, never unpickled. InputError naming the file
    for anything else (a file without NumPy's magic string, an object array, a malformed
    header: numpy's header parser raises many kinds of exception)."""
    if not _starts_with(path, NPY_MAGIC):
        raise InputError(f"{path}: not a .npy file (it does not start with NumPy's magic string)")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Python objects" in str(exc):
            raise InputError(
                f"{path}: vectors have dtype object; expected a numeric matrix of real numbers "
                "(stabcli never loads pickled arrays)"
            ) from None
        if "header" in str(exc).lower():  # numpy quotes the header: never echo a file's bytes
            raise InputError(f"{path}: not a readable .npy file (malformed header)") from None
        raise InputError(f"{path}: not a readable .npy file ({printable(str(exc))})") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy file ({printable(str(exc))})") from None
    except Exception:  # numpy's header parser: SyntaxError, tokenize.TokenError, MemoryError...
        raise InputError(f"{path}: not a readable .npy file (malformed header)") from None


def _read_npy(path: Path) -> Embedding:
    vectors = load_npy(path)
    if vectors.ndim != 2:
        raise InputError(f"{path}: expected a 2-d matrix [keys, dims], found shape {vectors.shape}")
    require_real_dtype(path, vectors)
    if vectors.dtype.kind == "f" and vectors.dtype.itemsize > 8:  # long double: stabcli computes in float64
        vectors = _as_float64(path, vectors)
    keys_file = keys_path_for(path)
    if keys_file.is_file():
        keys = read_keys(keys_file)
        if len(keys) != vectors.shape[0]:
            raise InputError(f"{keys_file}: {len(keys)} keys for {vectors.shape[0]} rows in {path.name}")
        return Embedding(keys, vectors, path)
    return Embedding([str(i) for i in range(vectors.shape[0])], vectors, path, keyless=True)


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


def _parse_header(path: Path, line: bytes) -> tuple[int, int]:
    parts = line.split()
    try:
        count, dim = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"{path}:1: expected a word2vec header 'count dim', found {_shown(line)}") from None
    if count < 1 or dim < 1:
        raise InputError(f"{path}:1: word2vec header says {count} vectors of dimension {dim}")
    return count, dim


def _rows_for(path: Path, count: int, dim: int, remaining: int, min_row_bytes: int) -> np.ndarray:
    """The float32 matrix for a header's ``count`` rows, but never more rows than the
    ``remaining`` bytes can hold at ``min_row_bytes`` each: a header alone never decides an
    allocation (``999999999999 4`` in a small file reads as "found N vectors")."""
    fit = (remaining + 1) // min_row_bytes  # the last row's newline is optional
    if fit == 0:
        raise InputError(
            f"{path}:1: word2vec header says {count} vectors of dimension {dim}, but the "
            f"{remaining:,} bytes after it cannot hold even one"
        )
    return np.empty((min(count, fit), dim), dtype=np.float32)


def _shown(line: bytes) -> str:
    """A header line for a message: its text if it is short printable text, never raw bytes."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "binary data"
    if not text.isprintable() or len(text) > 60:
        return "binary data" if not text.isprintable() else repr(text[:60] + "…")
    return repr(text)


def _read_word2vec_text(path: Path) -> Embedding:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        header = fh.readline()
        count, dim = _parse_header(path, header.removeprefix(b"\xef\xbb\xbf"))  # a UTF-8 byte-order mark
        # a row is at least a 1-character key and dim 1-digit values, space-separated, plus a newline
        vectors = _rows_for(path, count, dim, size - len(header), 2 * dim + 2)
        keys: list[str] = []
        for lineno, raw in enumerate(fh, start=2):
            if not raw.strip():
                continue
            if len(keys) == count:
                raise InputError(f"{path}:{lineno}: more vectors than the header's {count}")
            if len(keys) == vectors.shape[0]:  # cannot happen: the matrix holds every row the file can
                raise InputError(f"{path}: header says {count} vectors, more than the file can hold")
            try:
                fields = raw.decode("utf-8").rstrip("\r\n").rstrip(" ").split(" ")
            except UnicodeDecodeError:
                raise InputError(f"{path}:{lineno}: not valid UTF-8") from None
            if len(fields) != dim + 1:
                raise InputError(
                    f"{path}:{lineno}: expected {dim + 1} fields (key + {dim} values), found {len(fields)}"
                )
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
    # a row is at least a 1-byte key, a space and dim float32 values (gensim writes no newline)
    vectors = _rows_for(path, count, dim, len(data) - newline - 1, row_bytes + 2)
    pos = newline + 1
    for row in range(count):
        while pos < len(data) and data[pos : pos + 1] in (b"\n", b" "):
            pos += 1
        if row >= vectors.shape[0]:  # the rest of the file cannot hold another row
            raise InputError(f"{path}: vector {row + 1} of {count}: file ends early (truncated?)")
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


def _read_gensim(path: Path, trust_pickle: bool) -> Embedding:
    from gensim.models import Doc2Vec, KeyedVectors, Word2Vec
    from gensim.models.fasttext import FastTextKeyedVectors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = load_gensim(path, trusted=trust_pickle)
    if isinstance(obj, Doc2Vec):
        kv, what = obj.__dict__.get("dv"), "document vectors (dv) of the Doc2Vec model"
    elif isinstance(obj, Word2Vec):  # FastText too
        kv, what = obj.__dict__.get("wv"), f"word vectors (wv) of the {type(obj).__name__} model"
    else:
        kv, what = obj, "vectors"
    if not isinstance(kv, KeyedVectors):
        raise InputError(f"{path}: not a gensim KeyedVectors or model file (found {printable(type(kv).__name__)})")
    state = kv.__dict__
    if isinstance(kv, FastTextKeyedVectors) and state.get("vectors") is None:
        _fasttext_word_vectors(path, kv)
    keys, vectors = state.get("index_to_key"), state.get("vectors")
    if not isinstance(keys, list):
        raise InputError(f"{path}: {what}: no key list (index_to_key)")
    bad = next((i for i, k in enumerate(keys) if _key_problem(k)), None)
    if bad is not None:
        raise InputError(f"{path}: {what}: key #{bad + 1} is {_key_problem(keys[bad])}")
    if not isinstance(vectors, np.ndarray):
        raise InputError(f"{path}: {what}: no vector matrix (found {printable(type(vectors).__name__)})")
    if vectors.ndim != 2:
        raise InputError(f"{path}: {what}: expected a 2-d matrix [keys, dims], found shape {vectors.shape}")
    require_real_dtype(path, vectors)
    if len(keys) != vectors.shape[0]:
        raise InputError(f"{path}: {what}: {len(keys)} keys for {vectors.shape[0]} rows")
    if not keys:
        raise InputError(f"{path}: {what}: empty (no keys)")
    keys = [str(k) for k in keys]  # Doc2Vec tags may be ints
    _check_keys(path, keys, unit="key #")
    return Embedding(keys, vectors, path)


def _key_problem(key: object) -> str | None:
    """Why ``key`` is not a word or a Doc2Vec tag (a string or a 64-bit int), or None. An
    int too long for ``str()`` would raise while the keys are converted."""
    if isinstance(key, str):
        return None
    if isinstance(key, int) and not isinstance(key, bool):
        return None if -(2**63) <= key < 2**63 else f"an integer of {key.bit_length()} bits, not a Doc2Vec tag"
    if key is None or isinstance(key, (bool, float, bytes)):
        return f"{printable(repr(key), 40)}, not a string"
    return f"a {printable(type(key).__name__)}, not a string"  # not its repr: a list may nest 100,000 deep


def _fasttext_word_vectors(path: Path, kv: object) -> None:
    """gensim does not save FastText's word vectors; rebuild them from the vocabulary and
    n-gram arrays as its own ``load`` does (``adjust_vectors``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kv.recalc_char_ngram_buckets()  # type: ignore[attr-defined]
            kv.adjust_vectors()  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(f"{path}: inconsistent FastText vectors ({type(exc).__name__} rebuilding them)") from None


def _read_fasttext_bin(path: Path) -> Embedding:
    if not _starts_with(path, FASTTEXT_MAGIC):
        raise InputError(f"{path}: not a fastText .bin file (it does not start with fastText's magic number)")
    from gensim.models.fasttext import load_facebook_vectors

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kv = load_facebook_vectors(str(path))
    except MemoryError:
        raise InputError(
            f"{path}: not a readable fastText .bin file (its header asks for more memory than there is)"
        ) from None
    except Exception:  # gensim's reader raises anything on a malformed file
        raise InputError(f"{path}: not a readable fastText .bin file (truncated or malformed)") from None
    keys = [str(k) for k in kv.index_to_key]
    vectors = np.asarray(kv.vectors)
    if vectors.ndim != 2 or vectors.shape[0] != len(keys) or not keys:
        raise InputError(f"{path}: fastText file holds {len(keys)} words for a matrix of shape {vectors.shape}")
    _check_keys(path, keys, unit="word #")
    return Embedding(keys, vectors, path)


def _read_parquet(path: Path) -> Embedding:
    import pandas as pd

    try:
        table = pd.read_parquet(path)
    except ImportError:
        raise UsageError("reading parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable parquet file ({printable(str(exc))})") from None
    if "key" not in table.columns:
        raise InputError(f"{path}: no 'key' column (columns: {', '.join(map(str, table.columns[:8]))})")
    if table["key"].isna().any():
        raise InputError(f"{path}: row {int(np.argmax(table['key'].isna().to_numpy())) + 1}: missing key")
    keys = table["key"].astype(str).tolist()
    values = table.drop(columns="key")
    if values.shape[1] == 0 or len(keys) == 0:
        raise InputError(f"{path}: no vectors ({len(keys)} rows, {values.shape[1]} vector columns)")
    for column, dtype in values.dtypes.items():
        kind = getattr(dtype, "kind", "O")
        if kind not in "fiu":
            raise InputError(
                f"{path}: column {printable(str(column))!r} has dtype {dtype} "
                f"({_DTYPE_KINDS.get(kind, 'not numeric')}); expected real numbers"
            )
    try:
        vectors = values.to_numpy(dtype=np.float64)
    except (ValueError, TypeError):
        raise InputError(f"{path}: vector columns are not all numeric (missing values?)") from None
    if np.isnan(vectors).any():
        row = int(np.argmax(np.isnan(vectors).any(axis=1)))
        raise InputError(f"{path}: key {keys[row]!r} has missing or NaN values")
    if fits_float32(vectors):  # float32 like every other format, unless that loses finite values
        vectors = vectors.astype(np.float32)
    _check_keys(path, keys, unit="row ")
    return Embedding(keys, vectors, path)


def check_keys_writable(path: Path, fmt: str, keys: Sequence[str]) -> None:
    """InputError naming ``path`` unless the reader of ``fmt`` reads back exactly ``keys``:
    at least one, non-empty, unique, UTF-8, without whitespace (word2vec text and binary)
    or line breaks (the ``.npy`` keys file). Call it before computing what to write."""
    if not keys:
        raise InputError(f"{path}: nothing to write (0 rows)")
    seen: set[str] = set()
    for key in keys:
        if not isinstance(key, str) or key == "":
            raise InputError(f"{path}: cannot write an empty or non-string key ({key!r})")
        if key in seen:
            raise InputError(f"{path}: cannot write key {key!r} twice")
        seen.add(key)
        if fmt in ("word2vec", "word2vec-bin") and any(c.isspace() for c in key):
            raise InputError(
                f"{path}: key {key!r} contains whitespace, which {fmt} cannot store (choose npy, kv or parquet)"
            )
        if fmt == "npy" and ("\n" in key or "\r" in key):
            raise InputError(
                f"{path}: key {key!r} contains a line break, which a keys file cannot store (choose kv or parquet)"
            )
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{path}: key {key!r} is not valid Unicode (cannot be written as UTF-8)") from None


def check_writable(path: Path, fmt: str, keys: Sequence[str], vectors: np.ndarray) -> None:
    """``check_keys_writable``, and float32 ``vectors`` with at least one column and only
    finite values (a float64 beyond float32's range becomes inf, which no reader accepts)."""
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise InputError(f"{path}: nothing to write ({vectors.shape[0]} rows, {vectors.shape[1]} columns)")
    check_keys_writable(path, fmt, keys)
    ok = np.isfinite(vectors).all(axis=1)
    if not ok.all():
        raise InputError(
            f"{path}: cannot write key {keys[int(np.argmin(ok))]!r}: its values are NaN, infinite "
            "or beyond float32's range"
        )


def write_embedding(path: str | Path, keys: list[str], vectors: np.ndarray, fmt: str | None = None) -> None:
    """Write keys and float32 vectors to ``path`` atomically (temporary name, then rename).

    ``fmt`` is one of ``WRITE_FORMATS``; ``None`` chooses it from the suffix.
    """
    path = Path(path)
    fmt = fmt or _SUFFIX_FORMAT.get(path.suffix.lower())
    if fmt not in WRITE_FORMATS:
        raise UsageError(f"{path}: unknown output format (choose one of {', '.join(WRITE_FORMATS)})")
    with np.errstate(over="ignore", invalid="ignore"):
        vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(keys) != vectors.shape[0]:
        raise ValueError(f"{len(keys)} keys for a matrix of shape {vectors.shape}")
    check_writable(path, fmt, keys, vectors)
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
            for key, row in zip(keys, vectors, strict=False):
                fh.write(key + " " + " ".join(repr(float(v)) for v in row) + "\n")
        written.append((tmp, path))
    elif fmt == "word2vec-bin":
        with open(tmp, "wb") as fh:
            fh.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode())
            little = vectors.astype("<f4")
            for key, row in zip(keys, little, strict=False):
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


def match_inputs(
    embeddings: Sequence[Embedding], keys_file: str | Path | None = None, on_note: Callable[[str], None] | None = None
) -> list[Embedding]:
    """Make a list of inputs comparable key by key, or refuse.

    A keyless input (a ``.npy`` without a keys file: its keys are row numbers) cannot be
    matched with a keyed one: that would compare rows that hold different keys. So:

    * ``keys_file`` (``--keys``) gives every keyless input its keys (one per line, as many
      as the input has rows);
    * otherwise a mix of keyless and keyed inputs is an ``InputError`` naming one of each;
    * inputs that are all keyless are matched by position: they must have the same number
      of rows, and ``on_note`` receives one line saying so.

    Returns the embeddings in order, keyless ones replaced by keyed copies when
    ``keys_file`` is given. Commands that compare embeddings (audit, featurize
    ``--align-to``, drift) call this before matching keys.

    Raises
    ------
    OptionError
        ``keys_file`` given but no input is keyless (``param="keys"``).
    InputError
        Mixed inputs without ``keys_file``; a keys file whose length differs from a keyless
        input's rows; keyless inputs of different lengths.
    """
    embeddings = list(embeddings)
    keyless = [e for e in embeddings if e.keyless]
    if keys_file is not None:
        keys_file = Path(keys_file)
        if not keyless:
            raise OptionError(
                "keys", f"{keys_file}: every input already has keys (--keys is for .npy files without a keys file)"
            )
        if not keys_file.is_file():
            raise InputError(f"{keys_file}: no such keys file")
        keys = read_keys(keys_file)
        for e in keyless:
            if len(keys) != e.vectors.shape[0]:
                raise InputError(f"{keys_file}: {len(keys)} keys for {e.vectors.shape[0]} rows in {e.source}")
        return [replace(e, keys=keys, keyless=False) if e.keyless else e for e in embeddings]
    if not keyless:
        return embeddings
    keyed = [e for e in embeddings if not e.keyless]
    if keyed:
        raise InputError(
            f"{keyless[0].source}: has no keys file ({keys_path_for(Path(keyless[0].source)).name}), "
            f"but {keyed[0].source} has keys; rows cannot be matched to keys. Give --keys FILE "
            "(one key per row) or put the keys file beside it"
        )
    rows = keyless[0].vectors.shape[0]
    for e in keyless[1:]:
        if e.vectors.shape[0] != rows:
            raise InputError(
                f"{e.source}: {e.vectors.shape[0]} rows, but {keyless[0].source} has {rows}; inputs "
                "without keys files are matched by position and need the same rows (or give --keys)"
            )
    if on_note and len(embeddings) > 1:
        on_note("no input has a keys file: rows are matched by position")
    return embeddings
