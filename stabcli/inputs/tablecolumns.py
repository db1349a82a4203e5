"""Interaction tables read by columns: the text in chunks of whole lines, each chunk parsed
by pandas' C reader when its lines are plain and line by line otherwise, and the rows
grouped into one sequence of item codes per user with numpy (docs/performance.md).

A chunk is *plain* when it has no quote, no whitespace other than the line ends (``\\n``,
``\\r\\n``) and a tab delimiter, no other control character, and every non-blank line
splits into the table's width (one trailing delimiter allowed): then every field is read
as it stands, exactly as the line-by-line reader reads it. Its keys are pandas' strings,
its ratings and time values Python's ``float`` (or the ISO-date reading) of each distinct
field, or pandas' integers where the whole column is integers. Anything else in a chunk
(and every error) is left to the line-by-line reader, which gives the same rows and the
same messages.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

import numpy as np

from stabcli.errors import InputError

CHUNK_CHARS = 1 << 24  # text per chunk handed to pandas (16 M characters, about 700,000 MovieLens rows)

# str.split() whitespace beyond ASCII (tests/test_corpus.py checks this is every such code point)
UNICODE_SPACE = (
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_NOT_PLAIN = re.compile(f"[{UNICODE_SPACE}\ufeff]")  # and a byte-order mark, which pandas drops at a chunk's start
# the bytes a plain chunk may hold (a tab too when it is the delimiter): no control byte, space, quote or DEL
_PLAIN_BYTES = bytes([ord("\n"), *(b for b in range(33, 256) if b not in (ord('"'), 0x7F))])
_PLAIN_BYTES_TAB = _PLAIN_BYTES + b"\t"
PIECE_CHARS = 1 << 16  # a chunk that is not plain is tried again in pieces of this size
_PLACEHOLDER = "\x01"  # stands for a '::' delimiter in a plain chunk (a control byte: none is left in it)


@dataclass
class ChunkRows:
    """The rows of one chunk: user and item keys factorized in first-appearance order
    (``codes`` into ``keys``) and their time values, of the rows at or above ``--min-rating``."""

    user_codes: np.ndarray
    user_keys: list[str]
    item_codes: np.ndarray
    item_keys: list[str]
    stamps: np.ndarray | None  # float64
    skipped: int  # rows below --min-rating, left out


@dataclass
class EncodedSequences:
    """Sequences as item codes: sequence s is ``items[codes[indptr[s]:indptr[s + 1]]]``."""

    items: list[str]
    codes: np.ndarray  # int64 [tokens]
    indptr: np.ndarray  # int64 [sequences + 1]

    def lists(self) -> list[list[str]]:
        """The sequences as lists of item keys."""
        items = np.asarray(self.items, dtype=object)
        return [items[self.codes[a:b]].tolist() for a, b in pairwise(self.indptr.tolist())]


def time_value(text: str) -> float | None:
    """Seconds of a time field: a finite number, or an ISO date; None for anything else."""
    value = finite_float(text)
    if value is not None:
        return value
    try:  # inf and nan are no dates either
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # not a date, or one a platform cannot convert
        return None


def chunks(blocks: Iterator[tuple[int, str]], size: int = CHUNK_CHARS) -> Iterator[tuple[int, str]]:
    """``text_blocks`` joined into chunks of about ``size`` characters. An error reading a
    block comes after the chunk of the blocks before it, as it comes after their lines."""
    parts: list[str] = []
    first = held = 0
    while True:
        try:
            lineno, text = next(blocks)
        except StopIteration:
            break
        except InputError:
            if parts:
                yield first, "".join(parts)
            raise
        if not parts:
            first = lineno
        parts.append(text)
        held += len(text)
        if held >= size:
            yield first, "".join(parts)
            parts, held = [], 0
    if parts:
        yield first, "".join(parts)


def plain_rows(
    text: str, delimiter: str, width: int, cols: dict[str, int], min_rating: float | None
) -> ChunkRows | None:
    """The rows of a plain chunk ``text`` (whole lines, no header), or None when the chunk
    is not plain or a field would be an error (the line-by-line reader then reads it)."""
    data = text.encode("utf-8")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if not data.endswith(b"\n"):
        data += b"\n"
    if data.startswith(b"\n") or b"\n\n" in data:  # blank lines: skipped, as line by line
        data = re.sub(rb"\n\n+", b"\n", data).lstrip(b"\n")
    allowed = _PLAIN_BYTES_TAB if delimiter == "\t" else _PLAIN_BYTES
    if not data or data.translate(None, allowed) or (not text.isascii() and _NOT_PLAIN.search(text)):
        return None
    if delimiter == "::":
        data, delimiter = data.replace(b"::", _PLACEHOLDER.encode()), _PLACEHOLDER
    raw = np.frombuffer(data, dtype=np.uint8)
    extra = _widths(raw, ord(delimiter), width)
    if extra is None:
        return None
    try:
        frame = _read_frame(data, delimiter, width + extra, cols, ("user", "item", "rating"))
        if "time" in cols and frame[cols["time"]].dtype.kind not in "iu":  # not integers: Python reads them
            frame = _read_frame(data, delimiter, width + extra, cols, ("user", "item", "rating", "time"))
    except ValueError:  # pandas' ParserError is one: the line-by-line reader decides
        return None
    return _chunk_rows(frame, cols, min_rating)


def _widths(raw: np.ndarray, delimiter: int, width: int) -> int | None:
    """0 when every line has ``width`` fields, 1 when some have one more, empty (a trailing
    delimiter), None when a line has another number of fields."""
    ends = np.flatnonzero(raw == ord("\n"))
    cuts = np.flatnonzero(raw == delimiter)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if len(cuts) == len(ends) * (width - 1):
        rows = cuts.reshape(len(ends), width - 1)
        return 0 if bool((rows[:, 0] >= starts).all() and (rows[:, -1] < ends).all()) else None
    counts = np.diff(np.searchsorted(cuts, ends), prepend=0)
    trailing = (counts == width) & (raw[ends - 1] == delimiter)
    return 1 if bool(((counts == width - 1) | trailing).all()) else None


def _read_frame(data: bytes, delimiter: str, names: int, cols: dict[str, int], as_text: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """The chunk's columns of ``cols``, those of the roles ``as_text`` as strings."""
    import pandas as pd

    text_cols = [cols[role] for role in as_text if role in cols]
    return pd.read_csv(
        io.BytesIO(data),
        sep=delimiter,
        header=None,
        names=list(range(names)),
        usecols=sorted(cols.values()),
        dtype={j: object for j in text_cols},
        na_filter=False,
        engine="c",
        quoting=csv.QUOTE_NONE,
        low_memory=False,  # the chunk at once: one type per column (and no DtypeWarning)
        encoding="utf-8",
    )


def _chunk_rows(frame, cols: dict[str, int], min_rating: float | None) -> ChunkRows | None:  # type: ignore[no-untyped-def]
    import pandas as pd

    user_codes, user_keys = pd.factorize(frame[cols["user"]].to_numpy(dtype=object))
    item_codes, item_keys = pd.factorize(frame[cols["item"]].to_numpy(dtype=object))
    if (user_keys == "").any() or (item_keys == "").any():
        return None
    kept = None
    if min_rating is not None:
        codes, texts = pd.factorize(frame[cols["rating"]].to_numpy(dtype=object))
        ratings = [finite_float(text) for text in texts]
        if any(r is None for r in ratings):
            return None
        kept = ~(np.asarray(ratings, dtype=np.float64)[codes] < min_rating)
    stamps = None
    if "time" in cols:
        stamps = _stamps(frame[cols["time"]])
        if stamps is None:
            return None
    if kept is None:
        return ChunkRows(user_codes, list(user_keys), item_codes, list(item_keys), stamps, 0)
    users, items = _kept_codes(user_codes, user_keys, kept), _kept_codes(item_codes, item_keys, kept)
    return ChunkRows(*users, *items, None if stamps is None else stamps[kept], int(len(kept) - kept.sum()))


def _kept_codes(codes: np.ndarray, keys: np.ndarray, kept: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Codes and keys of the kept rows alone, still in order of first appearance."""
    import pandas as pd

    local, used = pd.factorize(codes[kept])
    return local, keys[used].tolist()


def finite_float(text: str) -> float | None:
    """``float(text)`` when it is a finite number, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _stamps(column) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """Time values of a column: pandas' integers, or ``time_value`` of each distinct field."""
    import pandas as pd

    if column.dtype.kind in "iu":
        return column.to_numpy(dtype=np.float64)
    codes, texts = pd.factorize(column.to_numpy(dtype=object))
    values = [time_value(text) for text in texts]
    if any(v is None for v in values):
        return None
    return np.asarray(values, dtype=np.float64)[codes]


class Factorizer:
    """Keys to codes in order of first appearance, chunk after chunk."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def codes(self, local: np.ndarray, keys: list[str]) -> np.ndarray:
        index = self.index
        known = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int32, count=len(keys))
        return known[local]

    @property
    def keys(self) -> list[str]:
        return list(self.index)


def sessions(
    users: np.ndarray, items: np.ndarray, stamps: np.ndarray | None, n_users: int, item_keys: list[str]
) -> EncodedSequences:
    """One sequence per user from rows of user and item codes (users coded in order of first
    appearance): without time, users in that order and items in row order; with time, items
    by time (row order breaks ties) and users by their first interaction in time (the earlier
    row at equal time). ``stamps`` is freed here once it is no longer needed (pass the only
    reference to keep the peak memory low)."""
    counts = np.bincount(users, minlength=n_users)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    if stamps is None:
        return EncodedSequences(item_keys, items[np.argsort(users, kind="stable")], indptr)
    keyed = _session_key(users, stamps)
    if keyed is None:  # too many users × distinct times for one integer key
        order = np.lexsort((stamps, users))
        heads = order[indptr[:-1]]
        head_times = stamps[heads]
    else:
        del stamps
        key, span = keyed
        del keyed
        order = np.argsort(key, kind="stable")  # by (user, time), row order breaking ties
        heads = order[indptr[:-1]]
        head_times = key[heads] - users[heads].astype(np.int64) * span
        del key
    rank = np.lexsort((heads, head_times))  # each user's first interaction: earliest time, then earliest row
    by_user = items[order]
    del order
    lengths = counts[rank]
    new_ptr = np.concatenate([[0], np.cumsum(lengths)])
    take = np.arange(len(by_user))
    take += np.repeat(indptr[:-1][rank] - new_ptr[:-1], lengths)
    return EncodedSequences(item_keys, by_user[take], new_ptr)


def _session_key(users: np.ndarray, stamps: np.ndarray) -> tuple[np.ndarray, int] | None:
    """(user · span + the time as an integer, span): the time minus the earliest when all
    times are integral, else its rank among the distinct times; None when it overflows."""
    if not len(stamps):
        return np.empty(0, dtype=np.int64), 1
    low, high = float(stamps.min()), float(stamps.max())
    if high - low < 2**52 and bool((np.floor(stamps) == stamps).all()):
        time_key, span = (stamps - low).astype(np.int64), int(high - low) + 1
    else:
        distinct, time_key = np.unique(stamps, return_inverse=True)
        span = len(distinct)
    if (int(users.max()) + 1) * span >= 2**62:
        return None
    key = users.astype(np.int64)
    key *= span
    key += time_key.reshape(-1)
    return key, span


class Column:
    """An array grown by appending (capacity doubled as needed): rows of every chunk in one
    allocation, instead of parts kept until they are joined."""

    def __init__(self, dtype: type) -> None:
        self.data: np.ndarray = np.empty(1 << 20, dtype=dtype)
        self.size = 0

    def append(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end

    def take(self) -> np.ndarray:
        """The rows appended (the column lets go of them)."""
        data, self.data = self.data[: self.size], np.empty(0, dtype=self.data.dtype)
        return data
