"""What every embedding format shares: the ``Embedding`` it reads into, the checks on keys
and values, and the input a reader is given (``Source``: a path, its compression, the
decompressed stream)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from stabcli.errors import InputError, quote, quoted
from stabcli.inputs.compressed import inner_name, open_stream, read_all

DTYPE_KINDS = {
    "b": "boolean",
    "c": "complex",
    "O": "object",
    "U": "string",
    "S": "bytes",
    "M": "datetime",
    "m": "timedelta",
    "V": "structured",
}
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


@dataclass
class Embedding:
    """Row-aligned keys and vectors ``[n, d]`` (possibly a read-only memory map).

    ``read_as`` says how the file was read when that is not what its suffix says
    (``"GloVe text (no header line)"``, ``"fastText .bin (format before 2017)"``,
    ``"gzip-compressed word2vec text"``); commands show it once. Empty otherwise."""

    keys: list[str]
    vectors: np.ndarray
    source: Path
    keyless: bool = False  # keys are row numbers (a .npy without a keys file): match by position only
    read_as: str = ""

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


@dataclass(frozen=True)
class Source:
    """One input file as a reader sees it: ``path``, its ``compression`` (None, gzip, bzip2,
    xz), the first bytes of its decompressed content (``head``) and ``size`` (bytes on disk;
    for a compressed file only a bound the decompressed size does not obey)."""

    path: Path
    compression: str | None
    head: bytes
    size: int
    trust_pickle: bool = False

    @contextmanager
    def open(self) -> Iterator[BinaryIO]:
        """The decompressed content as a binary stream (errors name the file)."""
        with open_stream(self.path, self.compression) as stream:
            yield stream

    def described(self, what: str) -> str:
        """``what``, prefixed with the compression when there is one."""
        return f"{self.compression}-compressed {what}" if self.compression else what


def require_finite(source: Path, keys: list[str], block: np.ndarray, start: int = 0) -> None:
    """InputError naming the first key whose row of ``block`` (rows ``start``, ``start+1``, …
    of ``keys``) holds NaN or inf."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(block)):  # one fast pass; a sum that overflows only costs the row check
            return
    ok = np.isfinite(block).all(axis=1)
    if not ok.all():
        raise InputError(f"{source}: key {quote(keys[start + int(np.argmin(ok))])} has NaN or infinite values")


def require_float32_range(source: Path, keys: list[str], vectors: np.ndarray, why: str) -> None:
    """InputError naming the first key whose row holds NaN, inf, or a finite value beyond
    float32's range (1e300 in a float64 file), for the inputs whose computations need
    float32 magnitudes (``why`` says which). Chunked; no RuntimeWarning."""
    step = 1 << 16
    for start in range(0, vectors.shape[0], step):
        block = vectors[start : start + step]
        require_finite(source, keys, block, start)
        if block.dtype.itemsize > 4 or block.dtype.kind in "iu":
            with np.errstate(over="ignore", invalid="ignore"):
                big = (np.abs(block) > FLOAT32_MAX).any(axis=1)
            if big.any():
                row = int(np.argmax(big))
                peak = float(np.max(np.abs(np.asarray(block[row], dtype=np.float64))))
                raise InputError(
                    f"{source}: key {quote(keys[start + row])} has values beyond float32's range (up to {peak:.3g}); {why}"
                )


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
        what = DTYPE_KINDS.get(kind, "not numeric")
        raise InputError(
            f"{source}: vectors have dtype {vectors.dtype} ({what}); expected a numeric matrix of real numbers"
        )


def keys_text(keys: Sequence[str]) -> str:
    """The contents of a keys file: one key per line, each ending in a newline."""
    return "\n".join(keys) + "\n" if keys else ""


def keys_path_for(npy: Path) -> Path:
    """``NAME.keys.txt`` beside ``NAME.npy`` (and beside a compressed ``NAME.npy.gz``)."""
    return npy.with_name(inner_name(npy).stem + ".keys.txt")


def read_keys(path: Path) -> list[str]:
    """One key per line (UTF-8; gzip, bzip2 or xz compressed too); trailing newline optional;
    no empty or duplicate keys."""
    try:
        text = read_all(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: keys are not valid UTF-8 (byte offset {exc.start})") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark is not part of the first key
    keys = text.split("\n")
    if keys and keys[-1] == "":
        keys.pop()
    keys = [k.rstrip("\r") for k in keys]
    check_keys(path, keys)
    return keys


def check_keys(path: Path, keys: list[str], unit: str = "") -> None:
    """No empty or repeated key; ``unit`` "" names lines (``path:3:``), else e.g. ``key #3``."""
    distinct = set(keys)
    if len(distinct) == len(keys) and "" not in distinct:  # the common case, without a Python loop
        return
    seen: dict[str, int] = {}
    where = (lambda i: f"{path}:{i}:") if not unit else (lambda i: f"{path}: {unit}{i}:")
    for i, key in enumerate(keys, start=1):
        if key == "":
            raise InputError(f"{where(i)} empty key")
        if key in seen:
            raise InputError(
                f"{where(i)} duplicate key {quote(key)} (first {'on line' if not unit else 'at'} "
                f"{unit if unit else ''}{seen[key]})"
            )
        seen[key] = i


def starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(magic)) == magic
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def shown(line: bytes) -> str:
    """A header line for a message: its text if it is short printable text, never raw bytes."""
    try:
        text = line.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "binary data"
    if not text.isprintable() or len(text) > 60:
        return "binary data" if not text.isprintable() else quote(text, 60)
    return quote(text)


class ByteReader:
    """A binary stream read in blocks of ``block`` bytes: exact counts and delimited fields,
    never holding more than a block beyond what the caller asked for (a lying length in a
    header reads up to the end of the stream, not an allocation of that length)."""

    def __init__(self, stream: BinaryIO, block: int = 1 << 20):
        self._stream = stream
        self._block = block
        self._buf = bytearray()
        self._pos = 0
        self.consumed = 0  # bytes handed out so far (the offset in the decompressed content)

    def _fill(self, need: int) -> bool:
        """At least ``need`` unread bytes buffered, or False at the end of the stream."""
        while len(self._buf) - self._pos < need:
            if self._pos and self._pos * 2 >= len(self._buf):
                del self._buf[: self._pos]
                self._pos = 0
            chunk = self._stream.read(self._block)
            if not chunk:
                return False
            self._buf += chunk
        return True

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, fewer only at the end of the stream."""
        self._fill(n)
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += len(out)
        self.consumed += len(out)
        return out

    def read_into(self, out: np.ndarray) -> int:
        """Fill the bytes of the contiguous array ``out``; returns the bytes filled (fewer at EOF)."""
        view = memoryview(out).cast("B")  # type: ignore[arg-type]
        done = min(len(view), len(self._buf) - self._pos)
        view[:done] = self._buf[self._pos : self._pos + done]
        self._pos += done
        while done < len(view):
            chunk = self._stream.read(min(len(view) - done, 1 << 24))
            if not chunk:
                break
            view[done : done + len(chunk)] = chunk
            done += len(chunk)
        self.consumed += done
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return done

    def read_until(self, delimiter: bytes, limit: int) -> bytes | None:
        """The bytes before the next ``delimiter`` (consumed with it), or None when there is
        none within ``limit`` bytes or before the end of the stream."""
        start = self._pos
        while True:
            found = self._buf.find(delimiter, start)
            if found >= 0 and found - self._pos <= limit:
                out = bytes(self._buf[self._pos : found])
                self.consumed += found + len(delimiter) - self._pos
                self._pos = found + len(delimiter)
                return out
            if found >= 0 or len(self._buf) - self._pos > limit:
                return None
            start = max(self._pos, len(self._buf) - len(delimiter) + 1)
            offset = self._pos
            if not self._fill(len(self._buf) - self._pos + 1):
                return None
            start -= offset - self._pos  # the buffer may have been compacted

    def skip_while(self, chars: bytes) -> None:
        """Consume bytes while they are in ``chars``."""
        while self._fill(1) and self._buf[self._pos] in chars:
            self._pos += 1
            self.consumed += 1

    def at_end(self) -> bool:
        return not self._fill(1)


class RowBuffer:
    """Rows of width ``dim`` appended one at a time into a float32 matrix that grows
    geometrically up to ``limit`` rows (a header's count, or None): memory follows the rows
    read, never a number a file announces. Switches to float64 when a row would not fit
    float32 (``fits_float32``)."""

    def __init__(self, dim: int, limit: int | None = None, initial: int = 4096):
        self.dim = dim
        self.limit = limit
        first = initial if limit is None else max(1, min(limit, initial))
        self.rows = np.empty((first, dim), dtype=np.float32)
        self.n = 0

    def append(self, row: np.ndarray) -> None:
        if self.n == self.rows.shape[0]:
            grown = self.rows.shape[0] * 2 if self.limit is None else min(self.limit, self.rows.shape[0] * 2)
            if grown == self.n:
                raise IndexError("more rows than the limit")
            bigger = np.empty((grown, self.dim), dtype=self.rows.dtype)
            bigger[: self.n] = self.rows[: self.n]
            self.rows = bigger
        if self.rows.dtype == np.float32 and not fits_float32(row):
            self.rows = self.rows.astype(np.float64)  # finite values float32 would turn into inf or 0
        self.rows[self.n] = row
        self.n += 1

    def result(self) -> np.ndarray:
        """The ``n`` rows read (the spare capacity released)."""
        if self.n < self.rows.shape[0]:
            self.rows = self.rows[: self.n].copy()
        return self.rows


def key_problem(key: object) -> str | None:
    """Why ``key`` is not a word or a Doc2Vec tag (a string or a 64-bit int), or None. An
    int too long for ``str()`` would raise while the keys are converted."""
    if isinstance(key, str):
        return None
    if isinstance(key, int) and not isinstance(key, bool):
        return None if -(2**63) <= key < 2**63 else f"an integer of {key.bit_length()} bits, not a Doc2Vec tag"
    if key is None or isinstance(key, (bool, float, bytes)):
        return f"{quote(key, 40)}, not a string"
    return f"a {quoted(type(key).__name__)}, not a string"  # not its repr: a list may nest 100,000 deep
