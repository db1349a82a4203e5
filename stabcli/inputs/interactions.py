"""Interaction tables (``--corpus-format interactions`` and ``movielens``): the delimiter
and header sniffed from the first lines, the user/item/time/rating columns chosen, and the
rows read into one sequence of items per user (docs/formats.md)."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stabcli.errors import InputError, quote
from stabcli.inputs.compressed import inner_name
from stabcli.inputs.tablecolumns import (
    PIECE_CHARS,
    ChunkRows,
    Column,
    EncodedSequences,
    Factorizer,
    chunks,
    finite_float,
    plain_rows,
    sessions,
    time_value,
)
from stabcli.inputs.textfile import block_lines, sniff_encoding, text_blocks, text_lines

if TYPE_CHECKING:
    from stabcli.inputs.corpus import CorpusOptions

MOVIELENS_NAMES = {"u.data", "ratings.dat", "ratings.csv"}
MOVIELENS_HEADER = ["userId", "movieId", "rating", "timestamp"]
DELIMITERS = ("::", "\t", ",", ";", "|")  # ties in column count go to the earlier one
DELIMITER_NAMES = {
    "::": "'::'-separated",
    "\t": "tab-separated",
    ",": "comma-separated",
    ";": "semicolon-separated",
    "|": "'|'-separated",
}
SNIFF_LINES = 100

# header names recognised per role, compared lower-case without '_', '-', ' ' and '.'
COLUMN_NAMES = {
    "user": (
        "user",
        "userid",
        "uid",
        "users",
        "customer",
        "customerid",
        "client",
        "clientid",
        "visitor",
        "visitorid",
        "session",
        "sessionid",
        "member",
        "memberid",
        "reviewer",
        "reviewerid",
        "account",
        "accountid",
    ),
    "item": (
        "item",
        "itemid",
        "iid",
        "items",
        "movie",
        "movieid",
        "mid",
        "product",
        "productid",
        "pid",
        "sku",
        "asin",
        "article",
        "articleid",
        "track",
        "trackid",
        "song",
        "songid",
        "book",
        "bookid",
        "isbn",
        "business",
        "businessid",
        "artist",
        "artistid",
        "video",
        "videoid",
        "content",
        "contentid",
    ),
    "time": (
        "timestamp",
        "ts",
        "time",
        "datetime",
        "date",
        "unixtime",
        "unixtimestamp",
        "eventtime",
        "createdat",
        "time_stamp",
        "timestampms",
        "epoch",
    ),
    "rating": ("rating", "ratings", "score", "stars", "preference", "value"),
}
NO_COLUMN = "none"  # --time-col none / --rating-col none: do not use such a column even if the header has one
ROLE_FLAGS = {"user": "--user-col", "item": "--item-col", "time": "--time-col", "rating": "--rating-col"}


@dataclass(frozen=True)
class TableLayout:
    """How a delimited table was read: delimiter, header names (None: no header), width."""

    delimiter: str
    header: list[str] | None
    n_columns: int


@dataclass
class Interactions:
    """A table read as sequences: one per user (as lists, and ``encoded`` as item codes), the
    rows below ``--min-rating`` skipped, the codec used, how the table was read and each
    role's column as read."""

    sequences: list[list[str]]
    skipped: int
    encoding: str
    table: TableLayout
    columns: dict[str, str]
    encoded: EncodedSequences


class _BadQuoting(ValueError):
    """A line whose quotes do not parse as CSV (the caller knows the file and line)."""


def _split(line: str, delimiter: str) -> list[str]:
    if " " not in line and '"' not in line:
        return line.split(delimiter)  # the common case, nothing to strip or unquote
    if len(delimiter) == 1 and '"' in line:
        try:
            fields = next(csv.reader([line], delimiter=delimiter, strict=True))
        except csv.Error as exc:
            raise _BadQuoting(str(exc)) from None
    else:
        fields = line.split(delimiter)
    return [f.strip() for f in fields]


def _is_number(text: str) -> bool:
    return finite_float(text) is not None


def sniff_table(path: Path, encoding: str) -> TableLayout | None:
    """The layout of a delimited table from its first 100 non-empty lines, or None.

    A delimiter qualifies when every sampled line splits on it into the same number (at
    least two) of fields and most lines have no field with inner whitespace (prose with
    commas is not a table; a first line naming two known columns is a header, so spaces in
    the fields below it do not matter); the qualifying delimiter giving most columns wins. The first
    line is a header when it names a known user/item/time/rating column, or when a column
    is numeric in every other sampled line but not in the first.
    """
    sample: list[str] = []
    for _, line in text_lines(path, encoding):
        if line.strip():
            sample.append(line)
            if len(sample) >= SNIFF_LINES:
                break
    if not sample:
        return None
    best: tuple[int, str, list[list[str]]] | None = None
    for delimiter in DELIMITERS:
        try:
            rows = [_split(line, delimiter) for line in sample]
        except _BadQuoting:
            continue
        if len({len(r) for r in rows}) != 1:  # a trailing delimiter on some lines, or on all
            rows = [r[:-1] if len(r) > 2 and r[-1] == "" else r for r in rows]
        elif len(rows[0]) > 2 and all(r[-1] == "" for r in rows):
            rows = [r[:-1] for r in rows]
        widths = {len(r) for r in rows}
        if len(widths) != 1 and _ragged_under_header(rows):
            rows = [r[: len(rows[0])] + [""] * (len(rows[0]) - len(r)) for r in rows]
            widths = {len(rows[0])}
        if len(widths) != 1 or widths == {1}:
            continue
        spaced = sum(1 for r in rows if any(len(f.split()) > 1 for f in r))
        if spaced * 2 > len(rows) and sum(_normal(f) in _KNOWN for f in rows[0]) < 2:
            continue  # prose with commas, unless a header names two known columns ("John Smith" users)
        if best is None or len(rows[0]) > best[0]:
            best = (len(rows[0]), delimiter, rows)
    if best is None:
        return None
    width, delimiter, rows = best
    return TableLayout(delimiter, rows[0] if _has_header(rows) else None, width)


def _ragged_under_header(rows: list[list[str]]) -> bool:
    """A header naming two known columns, over rows that end early (their missing last fields
    are empty, as pandas reads them) or carry only empty fields beyond it."""
    width = len(rows[0])
    return sum(_normal(f) in _KNOWN for f in rows[0]) >= 2 and all(
        len(r) >= 2 and not any(f.strip() for f in r[width:]) for r in rows[1:]
    )


def _normal(name: str) -> str:
    return re.sub(r"[\s_.\-]", "", name.lower())


_KNOWN = {_normal(n) for names in COLUMN_NAMES.values() for n in names}


def _has_header(rows: list[list[str]]) -> bool:
    first, rest = rows[0], rows[1:]
    if any(_normal(name) in _KNOWN for name in first):
        return True
    return bool(rest) and any(
        not _is_number(first[j]) and all(_is_number(r[j]) for r in rest) for j in range(len(first))
    )


def _movielens_layout(rows: list[list[str]]) -> bool:
    """Four numeric columns: integer user and item ids, a rating, a large integer timestamp
    (and any number of columns after them that are empty in every row: ``1,2,3.5,881250949,,,``)."""
    if not rows or len(rows[0]) < 4 or any(f.strip() for r in rows for f in r[4:]):
        return False
    try:
        for user, item, rating, stamp in (r[:4] for r in rows):
            int(user), int(item), float(rating)
            if int(stamp) < 1_000_000 and len(rows) > 1:
                return False
    except ValueError:
        return False
    return True


def _layout_for(path: Path, options: CorpusOptions, fmt: str) -> TableLayout:
    name = inner_name(path).name
    if fmt == "movielens" and name in MOVIELENS_NAMES:
        if name == "ratings.csv":
            layout = sniff_table(path, options.encoding)
            if layout is None or layout.header is None or layout.header[:4] != MOVIELENS_HEADER:
                first = next((line for _, line in text_lines(path, options.encoding) if line.strip()), "")
                raise InputError(f"{path}:1: expected header {','.join(MOVIELENS_HEADER)}, found {first}")
            return layout
        delimiter = "::" if name == "ratings.dat" else "\t"
        return TableLayout(delimiter, None, 4)
    layout = sniff_table(path, options.encoding)
    if layout is None:
        first_line = next((line for _, line in text_lines(path, options.encoding) if line.strip()), None)
        if first_line is None:
            raise InputError(f"{path}: empty corpus (no rows)")
        raise InputError(
            f"{path}: not a delimited table: its first lines do not all split into the same number "
            f"(two or more) of fields on ',', tab, ';', '::' or '|' (first line {quote(first_line[:80])})"
        )
    if (
        any(
            getattr(options, f"{r}_col") not in (None, NO_COLUMN) and isinstance(getattr(options, f"{r}_col"), str)
            for r in ROLE_FLAGS
        )
        and layout.header is None
    ):
        header = _split(next(line for _, line in text_lines(path, options.encoding) if line.strip()), layout.delimiter)
        return TableLayout(layout.delimiter, header, layout.n_columns)  # a column named by the user implies a header
    return layout


def _choose_columns(
    path: Path, options: CorpusOptions, layout: TableLayout, fmt: str, first_rows: list[list[str]]
) -> dict[str, int]:
    """Role → column index: the user's choice, a recognised header name, or the defaults."""
    header = layout.header
    chosen: dict[str, int] = {}
    for role in ("user", "item", "time", "rating"):
        spec = getattr(options, f"{role}_col")
        if (role == "rating" and spec is None and options.min_rating is None) or spec == NO_COLUMN:
            continue  # ratings are read only to filter them; 'none' turns a column off
        if isinstance(spec, int):
            if spec >= layout.n_columns:
                raise InputError(
                    f"{path}: {ROLE_FLAGS[role]} {spec} is out of range; the table has "
                    f"{layout.n_columns} columns (0 to {layout.n_columns - 1})"
                )
            chosen[role] = spec
        elif isinstance(spec, str):
            assert header is not None
            exact = [j for j, name in enumerate(header) if name == spec]
            loose = [j for j, name in enumerate(header) if name.lower() == spec.lower()]
            if not (exact or loose):
                raise InputError(
                    f"{path}: no column {quote(spec)} for {ROLE_FLAGS[role]}; columns are {', '.join(header)}"
                )
            chosen[role] = (exact or loose)[0]
        elif header is not None:
            names = [_normal(name) for name in header]
            match = next(
                (
                    j
                    for known in COLUMN_NAMES[role]
                    for j, n in enumerate(names)
                    if n == _normal(known) and j not in chosen.values()
                ),
                None,
            )
            if match is not None:
                chosen[role] = match
            elif role in ("user", "item"):
                raise InputError(
                    f"{path}: no column of the header ({', '.join(header)}) is a known {role} column "
                    f"name; pass {ROLE_FLAGS[role]} NAME or a 0-based position"
                )
        elif role in ("user", "item"):
            chosen[role] = 0 if role == "user" else 1
            if chosen[role] in [c for r, c in chosen.items() if r != role]:
                chosen[role] = next(j for j in range(layout.n_columns) if j not in chosen.values())
        elif fmt == "movielens" or _movielens_layout(first_rows):
            chosen[role] = 3 if role == "time" else 2
            if chosen[role] in [c for r, c in chosen.items() if r != role]:
                del chosen[role]
    _refuse_shared_columns(path, layout, chosen)
    if options.min_rating is not None and "rating" not in chosen:
        raise InputError(
            f"{path}: --min-rating needs a rating column and none was recognised"
            + (f" (columns are {', '.join(header)})" if header else "")
            + "; pass --rating-col"
        )
    return chosen


def _refuse_shared_columns(path: Path, layout: TableLayout, chosen: dict[str, int]) -> None:
    """InputError when two roles resolved to one column (``--user-col item --item-col 1``
    names the same column by name and by position): every session would be one item."""
    seen: dict[int, str] = {}
    for role, index in chosen.items():
        if index in seen:
            raise InputError(
                f"{path}: {ROLE_FLAGS[role]} and {ROLE_FLAGS[seen[index]]} are both {_column_label(layout, index)}; "
                "give each role its own column"
            )
        seen[index] = role


def _column_label(layout: TableLayout, index: int) -> str:
    return quote(layout.header[index]) if layout.header is not None else f"column {index}"


def _table_rows(
    path: Path, lines: Iterable[tuple[int, str]], layout: TableLayout, header: bool, used: dict[str, int] | None = None
) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every data row of ``lines`` (the first non-blank one is the
    header when ``header``); a row of another width is an error, and so is a row that ends
    before a column of ``used`` (role: index)."""
    seen_header = not header
    width = layout.n_columns
    for lineno, line in lines:
        if not line.strip():
            continue
        if not seen_header:
            seen_header = True
            continue
        try:
            fields = _split(line, layout.delimiter)
        except _BadQuoting as exc:
            raise InputError(f"{path}:{lineno}: malformed quoting ({exc})") from None
        if len(fields) == width + 1 and fields[-1] == "":
            fields.pop()  # a trailing delimiter
        if layout.header is not None and len(fields) >= 2 and not any(f.strip() for f in fields[width:]):
            _require_used(path, lineno, layout, len(fields), used or {})
            fields = fields[:width] + [""] * (width - len(fields))  # under a header, a row may end early
        if len(fields) != width:
            raise InputError(
                f"{path}:{lineno}: expected {width} {DELIMITER_NAMES[layout.delimiter]} fields "
                f"(as in the first lines), found {len(fields)}"
            )
        yield lineno, fields


def _require_used(path: Path, lineno: int, layout: TableLayout, found: int, used: dict[str, int]) -> None:
    """A row that ends early (``found`` fields) must still hold every used column."""
    missing = sorted((index, role) for role, index in used.items() if index >= found)
    if missing:
        index, role = missing[0]
        raise InputError(
            f"{path}:{lineno}: the row ends after {found} of the header's {layout.n_columns} "
            f"{DELIMITER_NAMES[layout.delimiter]} fields, before its {ROLE_WORDS[role]} ({_column_label(layout, index)})"
        )


ROLE_WORDS = {"user": "user", "item": "item", "time": "timestamp", "rating": "rating"}


def read_interactions(path: Path, options: CorpusOptions, fmt: str) -> Interactions:
    """One sequence of item ids per user, ordered by time (file order breaks ties); users
    in the order of their first interaction. Read in chunks: pandas' C reader for plain
    chunks, line by line for the others (``tablecolumns``)."""
    codec, _ = sniff_encoding(path, options.encoding)
    layout = _layout_for(path, options, fmt)
    if fmt == "movielens" and layout.n_columns != 4 and layout.header is None and not options.columns_given:
        raise InputError(f"{path}:1: expected 4 fields (user item rating timestamp), found {layout.n_columns}")
    first_rows = []
    for _, fields in _table_rows(path, text_lines(path, options.encoding), layout, layout.header is not None):
        first_rows.append(fields)
        if len(first_rows) >= SNIFF_LINES:
            break
    cols = _choose_columns(path, options, layout, fmt, first_rows)
    min_rating = options.min_rating if "rating" in cols else None
    plain = not codec.startswith(("utf-16", "utf-32"))
    users, items = Factorizer(), Factorizer()
    user_column, item_column, time_column = Column(np.int32), Column(np.int32), Column(np.float64)
    skipped = 0
    for first, text in _data_chunks(path, options.encoding, layout):
        for rows in _chunk_rows(path, first, text, layout, cols, min_rating, plain):
            user_column.append(users.codes(rows.user_codes, rows.user_keys))
            item_column.append(items.codes(rows.item_codes, rows.item_keys))
            if rows.stamps is not None:
                time_column.append(rows.stamps)
            skipped += rows.skipped
    encoded = sessions(
        user_column.take(),
        item_column.take(),
        time_column.take() if "time" in cols else None,  # the only reference: sessions frees it once sorted
        len(users.index),
        items.keys,
    )
    columns = {role: _column_label(layout, index) for role, index in cols.items()}
    return Interactions(encoded.lists(), skipped, codec, layout, columns, encoded)


def _data_chunks(path: Path, encoding: str, layout: TableLayout) -> Iterator[tuple[int, str]]:
    """(first line number, text) of chunks of whole lines after the header line."""
    header = layout.header is not None
    for first, text in chunks(text_blocks(path, encoding)):
        while header and text:
            line, _, text = text.partition("\n")
            list(block_lines(path, first, line))  # a NUL character in it is an error, as in any line
            first += 1
            header = not line.strip()
        if text:
            yield first, text


def _chunk_rows(
    path: Path,
    first: int,
    text: str,
    layout: TableLayout,
    cols: dict[str, int],
    min_rating: float | None,
    plain: bool,
) -> Iterator[ChunkRows]:
    """The rows of a chunk: by pandas when it is plain; otherwise in pieces of whole lines
    (``PIECE_CHARS``), each by pandas when plain and line by line when not, in order."""
    rows = plain_rows(text, layout.delimiter, layout.n_columns, cols, min_rating) if plain else None
    if rows is not None:
        yield rows
        return
    start = 0
    while start < len(text):
        stop = text.find("\n", start + PIECE_CHARS) + 1 or len(text)
        if stop - start < len(text):
            rows = plain_rows(text[start:stop], layout.delimiter, layout.n_columns, cols, min_rating) if plain else None
        yield rows or _line_rows(path, first, text[start:stop], layout, cols, min_rating)
        first += text.count("\n", start, stop)
        start = stop


def _line_rows(
    path: Path, first: int, text: str, layout: TableLayout, cols: dict[str, int], min_rating: float | None
) -> ChunkRows:
    """The rows of a chunk read line by line: every check of a row, and its message."""
    import pandas as pd

    u, i = cols["user"], cols["item"]
    t, r = cols.get("time"), cols.get("rating")
    users: list[str] = []
    items: list[str] = []
    stamps: list[float] = []
    skipped = 0
    used = {role: index for role, index in cols.items() if role != "rating" or min_rating is not None}
    for lineno, fields in _table_rows(path, block_lines(path, first, text), layout, False, used):
        user, item = fields[u], fields[i]
        if not user or not item:
            role = "user" if not user else "item"
            raise InputError(f"{path}:{lineno}: empty {role} field ({_column_label(layout, cols[role])})")
        if r is not None and min_rating is not None:
            rating = finite_float(fields[r])
            if rating is None:
                raise InputError(
                    f"{path}:{lineno}: rating {quote(fields[r])} ({_column_label(layout, r)}) is not a number"
                )
            if rating < min_rating:
                skipped += 1
                continue
        if t is not None:
            value = time_value(fields[t])
            if value is None:
                raise InputError(
                    f"{path}:{lineno}: timestamp {quote(fields[t])} ({_column_label(layout, t)}) is not a "
                    f"number or an ISO date (--time-col none keeps file order)"
                )
            stamps.append(value)
        if len(item.split()) != 1:
            raise InputError(
                f"{path}:{lineno}: item {quote(item)} contains whitespace, which a key cannot; check --item-col"
            )
        users.append(user)
        items.append(item)
    user_codes, user_keys = pd.factorize(np.asarray(users, dtype=object))
    item_codes, item_keys = pd.factorize(np.asarray(items, dtype=object))
    times = np.asarray(stamps, dtype=np.float64) if t is not None else None
    return ChunkRows(user_codes, list(user_keys), item_codes, list(item_keys), times, skipped)
