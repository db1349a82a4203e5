"""Corpus readers: turn a training corpus on disk into token sequences.

Formats (docs/formats.md):

* ``lines``: one sequence per line, tokens separated by whitespace.
* ``tagged``: ``tag<TAB>text`` per line; Doc2Vec learns one vector per tag.
* ``interactions``: a delimited table (``,`` ``\\t`` ``;`` ``::`` or ``|``, with or without a
  header) of user, item and optional time and rating columns; each user becomes one
  sequence of item ids, ordered by time when there is a time column (item2vec).
* ``movielens``: ``u.data`` (tab), ``ratings.dat`` (``::``) or ``ratings.csv`` (header):
  interactions in the fixed layout ``user item rating timestamp``.

``auto`` picks ``movielens`` by file name, ``tagged`` for doc2vec, ``interactions`` when the
first lines are a table (every line splits into the same number, two or more, of fields
without spaces on one delimiter) and ``lines`` otherwise. A reading in which most sequences
hold a single token, or most keys contain a table delimiter, is refused: it would train
nothing, or train on whole table rows.

Text is decoded strictly with the given encoding (a byte-order mark selects UTF-8/16/32):
an undecodable byte is an error naming the file and line, never silently replaced.
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.compressed import inner_name
from stabcli.inputs.textfile import check_encoding, csv_field_limit_lifted, sniff_encoding, text_lines

FORMATS = ("auto", "lines", "tagged", "movielens", "interactions")
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
TOKENIZERS = ("none", "simple")
NO_COLUMN = "none"  # --time-col none / --rating-col none: do not use such a column even if the header has one
ROLE_FLAGS = {"user": "--user-col", "item": "--item-col", "time": "--time-col", "rating": "--rating-col"}
_POSITION = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class CorpusOptions:
    """How to read a corpus file; validates itself on construction (before any IO).

    Column options (``interactions`` and ``movielens``) take a header name or a 0-based
    position (an int, or a string of digits); ``None`` recognises common header names
    (user/userId/uid…, item/itemId/movieId…, timestamp/ts/time…, rating/score…) or, without
    a header, takes columns 0 and 1 as user and item and, only in the MovieLens layout
    (four numeric columns, the last large integers), column 2 as rating and 3 as time.
    Errors name the library parameter (``corpus_format`` for ``format``).
    """

    format: str = "auto"
    encoding: str = "utf-8"
    user_col: str | int | None = None
    item_col: str | int | None = None
    time_col: str | int | None = None
    rating_col: str | int | None = None
    min_rating: float | None = None
    tokenize: str = "none"  # text corpora: "none" splits on whitespace, "simple" is gensim's simple_preprocess

    def __post_init__(self) -> None:
        if self.tokenize not in TOKENIZERS:
            raise OptionError(
                "tokenize", f"unknown tokenizer {quote(self.tokenize)}; choose one of {', '.join(TOKENIZERS)}"
            )
        if self.format not in FORMATS:
            raise OptionError(
                "corpus_format", f"unknown corpus format {quote(self.format)}; choose one of {', '.join(FORMATS)}"
            )
        check_encoding("encoding", self.encoding)
        for role in ("user", "item", "time", "rating"):
            param = f"{role}_col"
            object.__setattr__(self, param, _column_spec(param, getattr(self, param)))
        given = {
            role: getattr(self, f"{role}_col")
            for role in ("user", "item", "time", "rating")
            if getattr(self, f"{role}_col") != NO_COLUMN
        }
        seen: dict[Any, str] = {}
        for role, spec in given.items():
            if spec is None:
                continue
            if spec in seen:
                raise OptionError(
                    f"{role}_col", f"{quote(spec)} is already the {seen[spec]} column ({ROLE_FLAGS[seen[spec]]})"
                )
            seen[spec] = role
        if self.min_rating is not None and (
            isinstance(self.min_rating, bool)
            or not isinstance(self.min_rating, (int, float))
            or not math.isfinite(self.min_rating)
        ):
            raise OptionError("min_rating", f"expected a finite number, got {quote(self.min_rating)}")
        if self.format in ("lines", "tagged"):
            extra = [ROLE_FLAGS[r] for r, spec in given.items() if spec is not None]
            extra += ["--min-rating"] if self.min_rating is not None else []
            if extra:
                raise OptionError(
                    f"{_role_of(extra[0])}", f"applies to interaction tables only, not to --corpus-format {self.format}"
                )

    @property
    def columns_given(self) -> bool:
        return any(getattr(self, f"{r}_col") not in (None, NO_COLUMN) for r in ("user", "item", "time", "rating"))


def _role_of(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _column_spec(param: str, spec: object) -> str | int | None:
    if spec is None:
        return None
    if isinstance(spec, bool) or not isinstance(spec, (str, int)):
        raise OptionError(param, f"expected a column name or a 0-based position, got {quote(spec)}")
    if isinstance(spec, str):
        if not spec.strip():
            raise OptionError(param, "empty column name; give a header name or a 0-based position")
        if spec.strip().lower() == NO_COLUMN:
            if param in ("user_col", "item_col"):
                raise OptionError(param, "is required; give a header name or a 0-based position")
            return NO_COLUMN
        if not _POSITION.match(spec.strip()):
            return spec.strip()
        spec = int(spec)
    if spec < 0:
        raise OptionError(param, f"column position {spec} is negative; positions count from 0")
    if spec > 10_000:
        raise OptionError(param, f"column position {spec} is beyond any table stabcli reads (at most 10000)")
    return spec


@dataclass(frozen=True)
class TableLayout:
    """How a delimited table was read: delimiter, header names (None: no header), width."""

    delimiter: str
    header: list[str] | None
    n_columns: int


@dataclass
class Corpus:
    """Token sequences read from one file; ``tags`` is set for tagged corpora.

    The statistics a summary shows are attributes: ``format``, ``n_sequences``,
    ``n_tokens``, ``n_keys`` (distinct tokens; distinct tags when tagged),
    ``skipped_lines`` (rows below ``min_rating``), ``encoding`` (the codec used, after a
    byte-order mark), and for tables ``table`` and ``columns`` (role → column as read);
    ``summary()`` gives them as a JSON-ready dict and ``describe()`` as one line.
    """

    path: Path
    format: str
    sequences: list[list[str]]
    tags: list[str] | None = None
    skipped_lines: int = 0
    encoding: str = "utf-8"
    table: TableLayout | None = None
    columns: dict[str, str] = field(default_factory=dict)
    n_tokens: int = field(init=False)
    n_keys: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_tokens = sum(len(s) for s in self.sequences)
        if self.tags is not None:
            self.n_keys = len(set(self.tags))
        else:
            self.n_keys = len({tok for seq in self.sequences for tok in seq})

    @property
    def n_sequences(self) -> int:
        return len(self.sequences)

    def vocabulary(self, min_count: int = 1) -> list[str]:
        """Keys a trainer keeps, in a canonical order independent of sequence order.

        For tagged corpora: distinct tags by first appearance. Otherwise: tokens seen at
        least ``min_count`` times, most frequent first, ties broken by the token itself.
        """
        if self.tags is not None:
            return list(dict.fromkeys(self.tags))
        counts = Counter(tok for seq in self.sequences for tok in seq)
        kept = [(-c, tok) for tok, c in counts.items() if c >= min_count]
        return [tok for _, tok in sorted(kept)]

    def summary(self) -> dict[str, Any]:
        """The corpus statistics as JSON-ready values (keys documented in docs/formats.md)."""
        return {
            "format": self.format,
            "encoding": self.encoding,
            "sequences": self.n_sequences,
            "tokens": self.n_tokens,
            "distinct_keys": self.n_keys,
            "skipped_rows": self.skipped_lines,
            "delimiter": self.table.delimiter if self.table else None,
            "header": (self.table.header is not None) if self.table else None,
            "columns": dict(self.columns) or None,
        }

    def describe(self) -> str:
        """One line for people: format, how a table was read, and the counts."""
        how = self.format
        if self.table is not None:
            cols = ", ".join(f"{role} {col}" for role, col in self.columns.items())
            cols += "" if "time" in self.columns else ", no time column (file order)"
            header = "header" if self.table.header is not None else "no header"
            how += f" ({DELIMITER_NAMES[self.table.delimiter]}, {header}; {cols})"
        skipped = f", {self.skipped_lines:,} rows below --min-rating skipped" if self.skipped_lines else ""
        return (
            f"{how}: {self.n_sequences:,} sequences, {self.n_tokens:,} tokens, {self.n_keys:,} distinct keys{skipped}"
        )


def detect_format(path: Path, model: str, options: CorpusOptions) -> str:
    """Resolve ``auto``: MovieLens file names → movielens; doc2vec → tagged; a delimited
    table (see :func:`sniff_table`) → interactions; otherwise lines."""
    if inner_name(path).name in MOVIELENS_NAMES:
        return "movielens"
    if model == "doc2vec":
        return "tagged"
    with csv_field_limit_lifted():
        return "interactions" if sniff_table(path, options.encoding) is not None else "lines"


def read_corpus(path: str | Path, model: str = "word2vec", options: CorpusOptions = CorpusOptions()) -> Corpus:
    """Read ``path`` in ``options.format`` (``auto`` detects it) into token sequences.

    Raises
    ------
    InputError
        Missing, non-regular, compressed or undecodable file, a malformed line
        (``file:line: problem``), a corpus with no tokens, or a reading that would train
        nothing (most sequences one token) or on table rows (most keys hold a delimiter).
    """
    path = Path(path)
    codec, _ = sniff_encoding(path, options.encoding, "corpus file")  # refuses directories, FIFOs, devices, archives
    fmt = detect_format(path, model, options) if options.format == "auto" else options.format
    if fmt == "lines" and options.columns_given:
        given = next(r for r in ROLE_FLAGS if getattr(options, f"{r}_col") not in (None, NO_COLUMN))
        raise InputError(
            f"{path}: not a delimited table (lines do not split into the same number of fields), so "
            f"{ROLE_FLAGS[given]} does not apply; pass --corpus-format interactions to read it as one"
        )
    if fmt in ("lines", "tagged") and options.min_rating is not None:
        raise InputError(
            f"{path}: read as {fmt}, which has no ratings, so --min-rating does not apply; "
            f"pass --corpus-format interactions to read it as a table"
        )
    if options.tokenize != "none" and fmt not in ("lines", "tagged"):
        raise InputError(
            f"{path}: read as {fmt}, a table of ids, so --tokenize {options.tokenize} does not apply "
            "(it is for text corpora: --corpus-format lines or tagged)"
        )
    split = tokenizer(options.tokenize)
    if fmt == "lines":
        corpus = Corpus(
            path, fmt, [split(line) for _, line in text_lines(path, options.encoding) if line.strip()], encoding=codec
        )
    elif fmt == "tagged":
        corpus = _read_tagged(path, options.encoding, split)
        corpus.encoding = codec
    else:
        with csv_field_limit_lifted():
            corpus = _read_interactions(path, options, fmt)
    if corpus.n_tokens == 0:
        raise InputError(f"{path}: empty corpus (no tokens in {fmt} format)")
    _check_reading(corpus, auto=options.format == "auto")
    return corpus


def tokenizer(name: str) -> Callable[[str], list[str]]:
    """``none``: split on whitespace. ``simple``: gensim's ``simple_preprocess`` (lower case,
    alphabetic tokens of 2 to 15 characters, punctuation and digits dropped)."""
    if name == "simple":
        from gensim.utils import simple_preprocess

        return simple_preprocess
    return str.split


def _read_tagged(path: Path, encoding: str, split: Callable[[str], list[str]] = str.split) -> Corpus:
    tags: list[str] = []
    sequences: list[list[str]] = []
    for lineno, line in text_lines(path, encoding):
        if not line.strip():
            continue
        tag, sep, text = line.partition("\t")
        if not sep:
            raise InputError(f"{path}:{lineno}: expected 'tag<TAB>text', found no tab")
        if not tag.strip():
            raise InputError(f"{path}:{lineno}: empty tag before the tab")
        if len(tag.split()) != 1:
            raise InputError(f"{path}:{lineno}: tag {quote(tag.strip())} contains whitespace, which a key cannot")
        tags.append(tag.strip())
        sequences.append(split(text))
    return Corpus(path, "tagged", sequences, tags=tags)


def _check_reading(corpus: Corpus, auto: bool) -> None:
    """Refuse readings that would train nothing or train on whole table rows."""
    if corpus.format == "tagged" or corpus.n_keys < 2:
        return  # doc2vec learns tags from words; a single key is refused by the trainer
    path, n = corpus.path, corpus.n_sequences
    if (corpus.format == "lines" and auto) or corpus.table is not None:
        keys = {tok for seq in corpus.sequences for tok in seq}
        for delim in DELIMITERS:
            holding = sorted(k for k in keys if delim in k)  # sorted: the example named is reproducible
            if len(holding) * 2 > len(keys):
                if corpus.table is None:
                    raise InputError(
                        f"{path}: read as lines, {len(holding):,} of {len(keys):,} distinct keys contain "
                        f"{quote(delim)} (e.g. {quote(holding[0])}), so each key would be a whole table row; pass "
                        f"--corpus-format interactions (with --user-col and --item-col) if it is a table, or "
                        f"separate the tokens with spaces if each line is one sequence"
                    )
                raise InputError(
                    f"{path}: {len(holding):,} of {len(keys):,} distinct items contain {quote(delim)} (e.g. "
                    f"{quote(holding[0])}); the table's delimiter or the item column looks wrong: check --item-col"
                )
    single = sum(1 for seq in corpus.sequences if len(seq) == 1)
    if single * 2 > n:
        if corpus.table is None:
            raise InputError(
                f"{path}: read as {corpus.format}, {single:,} of {n:,} lines hold a single token, so there is no "
                f"context to learn from; if this is a table of interactions pass --corpus-format interactions "
                f"(with --user-col and --item-col), otherwise put one whole sequence per line"
            )
        raise InputError(
            f"{path}: {single:,} of {n:,} users ({corpus.columns.get('user')}) have a single item, so there is no "
            f"context to learn from; choose the column that groups items into sequences with --user-col, or pass "
            f"--corpus-format lines if each line is one sequence"
        )


# ---- delimited tables


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
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def sniff_table(path: Path, encoding: str) -> TableLayout | None:
    """The layout of a delimited table from its first 100 non-empty lines, or None.

    A delimiter qualifies when every sampled line splits on it into the same number (at
    least two) of fields and most lines have no field with inner whitespace (prose with
    commas is not a table); the qualifying delimiter giving most columns wins. The first
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
        if len(widths) != 1 or widths == {1}:
            continue
        spaced = sum(1 for r in rows if any(len(f.split()) > 1 for f in r))
        if spaced * 2 > len(rows):
            continue
        if best is None or len(rows[0]) > best[0]:
            best = (len(rows[0]), delimiter, rows)
    if best is None:
        return None
    width, delimiter, rows = best
    return TableLayout(delimiter, rows[0] if _has_header(rows) else None, width)


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
    """Four numeric columns: integer user and item ids, a rating, a large integer timestamp."""
    if not rows or len(rows[0]) != 4:
        return False
    try:
        for user, item, rating, stamp in rows:
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


def _time_value(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError):  # not a date, or one a platform cannot convert
            return None
    return value if math.isfinite(value) else None


def _table_rows(path: Path, encoding: str, layout: TableLayout) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every data row; a row of another width is an error."""
    seen_header = layout.header is None
    width = layout.n_columns
    for lineno, line in text_lines(path, encoding):
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
        if len(fields) != width:
            raise InputError(
                f"{path}:{lineno}: expected {width} {DELIMITER_NAMES[layout.delimiter]} fields "
                f"(as in the first lines), found {len(fields)}"
            )
        yield lineno, fields


def _read_interactions(path: Path, options: CorpusOptions, fmt: str) -> Corpus:
    """One sequence of item ids per user, ordered by time (file order breaks ties); users
    in the order of their first interaction."""
    codec, _ = sniff_encoding(path, options.encoding)
    layout = _layout_for(path, options, fmt)
    if fmt == "movielens" and layout.n_columns != 4 and layout.header is None and not options.columns_given:
        raise InputError(f"{path}:1: expected 4 fields (user item rating timestamp), found {layout.n_columns}")
    first_rows = []
    for _, fields in _table_rows(path, options.encoding, layout):
        first_rows.append(fields)
        if len(first_rows) >= SNIFF_LINES:
            break
    cols = _choose_columns(path, options, layout, fmt, first_rows)
    u, i = cols["user"], cols["item"]
    t, r = cols.get("time"), cols.get("rating")
    items_by_user: dict[str, list[str]] = {}
    times_by_user: dict[str, array] = {}
    first_seen: dict[str, tuple[float, int]] = {}
    interned: dict[str, str] = {}
    skipped = 0
    row = 0
    min_rating = options.min_rating if r is not None else None
    for lineno, fields in _table_rows(path, options.encoding, layout):
        user, item = fields[u], fields[i]
        if not user or not item:
            role = "user" if not user else "item"
            raise InputError(f"{path}:{lineno}: empty {role} field ({_column_label(layout, cols[role])})")
        if r is not None and min_rating is not None:
            try:
                rating = float(fields[r])
            except ValueError:
                rating = math.nan
            if not math.isfinite(rating):
                raise InputError(
                    f"{path}:{lineno}: rating {quote(fields[r])} ({_column_label(layout, r)}) is not a number"
                )
            if rating < min_rating:
                skipped += 1
                continue
        stamp = 0.0
        if t is not None:
            value = _time_value(fields[t])
            if value is None:
                raise InputError(
                    f"{path}:{lineno}: timestamp {quote(fields[t])} ({_column_label(layout, t)}) is not a "
                    f"number or an ISO date (--time-col none keeps file order)"
                )
            stamp = value
        known = interned.get(item)
        if known is None:
            if len(item.split()) != 1:
                raise InputError(
                    f"{path}:{lineno}: item {quote(item)} contains whitespace, which a key cannot; check --item-col"
                )
            known = interned[item] = item
        items = items_by_user.get(user)
        if items is None:
            items = items_by_user[user] = []
            times_by_user[user] = array("d")
            first_seen[user] = (stamp, row)
        elif stamp < first_seen[user][0]:
            first_seen[user] = (stamp, row)
        items.append(known)
        times_by_user[user].append(stamp)
        row += 1
    if t is not None:
        users = sorted(items_by_user, key=first_seen.__getitem__)
        sequences = []
        for user in users:
            times, items = times_by_user[user], items_by_user[user]
            order = sorted(range(len(items)), key=times.__getitem__)  # stable: file order breaks ties
            sequences.append([items[j] for j in order])
    else:
        sequences = list(items_by_user.values())
    columns = {role: _column_label(layout, index) for role, index in cols.items()}
    return Corpus(path, fmt, sequences, skipped_lines=skipped, encoding=codec, table=layout, columns=columns)
