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

import codecs
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.compressed import compression_of, inner_name, open_stream
from stabcli.inputs.interactions import (
    DELIMITER_NAMES,
    DELIMITERS,
    MOVIELENS_HEADER,
    MOVIELENS_NAMES,
    NO_COLUMN,
    ROLE_FLAGS,
    TableLayout,
    read_interactions,
    sniff_table,
)
from stabcli.inputs.tablecolumns import EncodedSequences
from stabcli.inputs.textfile import check_encoding, csv_field_limit_lifted, sniff_encoding, text_lines

FORMATS = ("auto", "lines", "tagged", "movielens", "interactions")
TOKENIZERS = ("none", "simple")
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
    encoded: EncodedSequences | None = None  # tables: the sequences as item codes (the same sequences)
    n_tokens: int = field(init=False)
    n_keys: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_tokens = sum(len(s) for s in self.sequences)
        if self.tags is not None:
            self.n_keys = len(set(self.tags))
        elif self.encoded is not None:
            self.n_keys = len(self.encoded.items)  # every item of the codes occurs
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
        counts = self.token_counts()
        kept = [(-c, tok) for tok, c in counts.items() if c >= min_count]
        return [tok for _, tok in sorted(kept)]

    def token_counts(self) -> Counter[str]:
        """Occurrences of every token, in order of first appearance in the sequences (a
        ``bincount`` of the item codes for a table)."""
        if self.encoded is None:
            return Counter(tok for seq in self.sequences for tok in seq)
        import pandas as pd  # already imported: the table was read by it

        codes = self.encoded.codes
        counts = np.bincount(codes, minlength=len(self.encoded.items))
        order = pd.unique(codes).tolist()  # by first appearance, one hash pass (no sort of every token)
        return Counter({self.encoded.items[j]: int(counts[j]) for j in order})

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

    def token_lines(self) -> bytes:
        """The corpus as plain UTF-8 token lines (``tag<TAB>tokens`` when tagged): what every
        training run reads, and what a sweep samples."""
        lines = []
        for i, seq in enumerate(self.sequences):
            prefix = self.tags[i] + "\t" if self.tags is not None else ""
            lines.append(prefix + " ".join(seq) + "\n")
        return "".join(lines).encode("utf-8")

    def describe(self) -> str:
        """One line for people: format, how a table was read, and the counts."""
        return describe_reading(self.summary())


def describe_reading(summary: dict[str, Any]) -> str:
    """``Corpus.summary()`` as one line: the format; for a table its delimiter, header and
    columns (``interactions (comma-separated, header; user 'uid', item 'movie', time 'when')``);
    the counts. The pretrain, sweep and ``audit --interactions`` summaries all say it so."""
    how = summary["format"]
    columns = summary.get("columns") or {}
    if summary.get("delimiter") is not None:
        cols = ", ".join(f"{role} {col}" for role, col in columns.items())
        cols += "" if "time" in columns else ", no time column (file order)"
        header = "header" if summary.get("header") else "no header"
        how += f" ({DELIMITER_NAMES[summary['delimiter']]}, {header}; {cols})"
    skipped = summary.get("skipped_rows") or 0
    return (
        f"{how}: {summary['sequences']:,} sequences, {summary['tokens']:,} tokens, "
        f"{summary['distinct_keys']:,} distinct keys"
        + (f", {skipped:,} rows below --min-rating skipped" if skipped else "")
    )


def detect_format(path: Path, model: str, options: CorpusOptions) -> str:
    """Resolve ``auto``: MovieLens file names → movielens (a ``ratings.csv`` only with
    MovieLens's header: goodbooks-10k's ``user_id,book_id,rating`` is another table); doc2vec
    → tagged; a delimited table (see :func:`sniff_table`) → interactions; otherwise lines."""
    name = inner_name(path).name
    with csv_field_limit_lifted():
        table = sniff_table(path, options.encoding) if name == "ratings.csv" or model != "doc2vec" else None
    if name in MOVIELENS_NAMES and (
        name != "ratings.csv" or (table is not None and (table.header or [])[:4] == MOVIELENS_HEADER)
    ):
        return "movielens"
    if model == "doc2vec":
        return "tagged"
    return "interactions" if table is not None else "lines"


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
    _refuse_carriage_return_lines(path, options.encoding)
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
            table = read_interactions(path, options, fmt)
        corpus = Corpus(
            path,
            fmt,
            table.sequences,
            skipped_lines=table.skipped,
            encoding=table.encoding,
            table=table.table,
            columns=table.columns,
            encoded=table.encoded,
        )
    if corpus.n_tokens == 0:
        raise InputError(f"{path}: empty corpus (no tokens in {fmt} format)")
    _check_reading(corpus, auto=options.format == "auto")
    return corpus


def _refuse_carriage_return_lines(path: Path, encoding: str) -> None:
    """A file whose first 64 KB hold carriage returns between text but no newline ends its
    lines in ``\\r`` alone (classic Mac OS): read as it is, it would be one line, so one
    sequence, or a table's header alone."""
    codec, skip = sniff_encoding(path, encoding)
    with open_stream(path, compression_of(path)) as fh:
        head = fh.read(skip + (1 << 16))[skip:]
    text = codecs.getincrementaldecoder(codec)(errors="ignore").decode(head)  # errors: the reader's to report
    if "\n" not in text and re.search("\r[^\r]", text):
        raise InputError(
            f"{path}:1: lines end in a carriage return alone ('\\r', classic Mac OS), so the file is one "
            "line; convert its line ends to '\\n' (e.g. tr '\\r' '\\n' < old > new)"
        )


def tokenizer(name: str) -> Callable[[str], list[str]]:
    """``none``: split on whitespace. ``simple``: gensim's ``simple_preprocess`` (lower case,
    alphabetic tokens of 2 to 15 characters, punctuation and digits dropped). Each distinct
    token is kept once (the sequences share its string): a corpus in memory is then about
    8 bytes per token plus its vocabulary, not a string object per token (a 29 MB text:
    80 MB instead of 380 MB)."""
    split: Callable[[str], list[str]] = str.split
    if name == "simple":
        from gensim.utils import simple_preprocess

        split = simple_preprocess
    seen: dict[str, str] = {}
    same = seen.setdefault

    def tokens(text: str) -> list[str]:
        return [same(t, t) for t in split(text)]

    return tokens


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
        keys = set(corpus.encoded.items) if corpus.encoded else {tok for seq in corpus.sequences for tok in seq}
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
