"""Corpus readers: turn a training corpus on disk into token sequences.

Formats (SPEC section 2):

* ``lines``: one sequence per line, tokens separated by whitespace.
* ``tagged``: ``tag<TAB>text`` per line; Doc2Vec learns one vector per tag.
* ``movielens``: ``u.data`` (tab), ``ratings.dat`` (``::``) or ``ratings.csv`` (header);
  each user becomes one sequence of item ids ordered by timestamp (item2vec).
* ``interactions``: CSV/TSV with a header naming user, item and optional timestamp and
  rating columns; same conversion as movielens.

Text is decoded strictly with the given encoding: an undecodable byte is an error naming
the file and line, never silently replaced.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from stabcli.errors import InputError, UsageError

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("auto", "lines", "tagged", "movielens", "interactions")
MOVIELENS_NAMES = {"u.data", "ratings.dat", "ratings.csv"}


@dataclass(frozen=True)
class CorpusOptions:
    """How to read a corpus file. Column options apply to ``interactions`` only."""

    format: str = "auto"
    encoding: str = "utf-8"
    user_col: str = "user"
    item_col: str = "item"
    time_col: str | None = "timestamp"
    rating_col: str | None = "rating"
    min_rating: float | None = None


@dataclass
class Corpus:
    """Token sequences read from one file; ``tags`` is set for tagged corpora."""

    path: Path
    format: str
    sequences: list[list[str]]
    tags: list[str] | None = None
    skipped_lines: int = 0
    n_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_tokens = sum(len(s) for s in self.sequences)

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


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def detect_format(path: Path, model: str, options: CorpusOptions) -> str:
    """Resolve ``auto``: MovieLens file names, CSV/TSV with the user and item columns in
    the header → interactions; otherwise ``tagged`` for doc2vec and ``lines`` for the rest."""
    if path.name in MOVIELENS_NAMES:
        return "movielens"
    if path.suffix.lower() in (".csv", ".tsv"):
        sep = "\t" if path.suffix.lower() == ".tsv" else ","
        with open(path, "rb") as fh:
            header = fh.readline().decode(options.encoding, errors="replace").rstrip("\r\n")
        columns = [c.strip() for c in header.split(sep)]
        if options.user_col in columns and options.item_col in columns:
            return "interactions"
    return "tagged" if model == "doc2vec" else "lines"


def read_corpus(path: str | Path, model: str = "word2vec", options: CorpusOptions = CorpusOptions()) -> Corpus:
    """Read ``path`` in ``options.format`` (``auto`` detects it) into token sequences.

    Raises
    ------
    InputError
        Missing or unreadable file, a malformed line (``file:line: problem``), or a corpus
        with no tokens.
    """
    path = Path(path)
    if options.format not in FORMATS:
        raise UsageError(f"unknown corpus format {options.format!r}; choose one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    fmt = detect_format(path, model, options) if options.format == "auto" else options.format
    if fmt == "lines":
        corpus = Corpus(path, fmt, [line.split() for _, line in text_lines(path, options.encoding) if line.strip()])
    elif fmt == "tagged":
        corpus = _read_tagged(path, options.encoding)
    elif fmt == "movielens":
        corpus = _read_movielens(path, options)
    else:
        corpus = _read_interactions(path, options)
    if corpus.n_tokens == 0:
        raise InputError(f"{path}: empty corpus (no tokens in {fmt} format)")
    return corpus


def text_lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without newline); a bad byte names its line."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if b"\x00" in raw:
                raise InputError(f"{path}:{lineno}: contains NUL bytes; this looks like a binary file, not text")
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}:{lineno}: not valid {encoding} (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    f"re-encode the file or pass --encoding"
                ) from None
            yield lineno, text.rstrip("\r\n")


def _read_tagged(path: Path, encoding: str) -> Corpus:
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
        tags.append(tag.strip())
        sequences.append(text.split())
    return Corpus(path, "tagged", sequences, tags=tags)


def _read_movielens(path: Path, options: CorpusOptions) -> Corpus:
    names = ["user", "item", "rating", "timestamp"]
    if path.name == "ratings.csv":
        table = _read_table(path, options.encoding, sep=",", header=0)
        if list(table.columns[:4]) != ["userId", "movieId", "rating", "timestamp"]:
            raise InputError(f"{path}:1: expected header userId,movieId,rating,timestamp, found {','.join(table.columns)}")
        table.columns = names + list(table.columns[4:])
        first_data_line = 2
    else:
        sep = "::" if path.name == "ratings.dat" else "\t"
        table = _read_table(path, options.encoding, sep=sep, header=None)
        if table.shape[1] != 4:
            raise InputError(f"{path}:1: expected 4 fields (user item rating timestamp), found {table.shape[1]}")
        table.columns = names
        first_data_line = 1
    return _sequences_by_user(path, table, options.min_rating, first_data_line, "movielens")


def _read_interactions(path: Path, options: CorpusOptions) -> Corpus:
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    table = _read_table(path, options.encoding, sep=sep, header=0)
    wanted = {"user": options.user_col, "item": options.item_col}
    if options.time_col and options.time_col in table.columns:
        wanted["timestamp"] = options.time_col
    if options.min_rating is not None:
        if not options.rating_col or options.rating_col not in table.columns:
            raise InputError(f"{path}: --min-rating needs a rating column {options.rating_col!r}; columns are {', '.join(table.columns)}")
        wanted["rating"] = options.rating_col
    missing = [col for col in (options.user_col, options.item_col) if col not in table.columns]
    if missing:
        raise InputError(f"{path}: no column {missing[0]!r}; columns are {', '.join(table.columns)} (set --user-col/--item-col)")
    table = table[list(wanted.values())]
    table.columns = list(wanted)
    return _sequences_by_user(path, table, options.min_rating, 2, "interactions")


def _read_table(path: Path, encoding: str, sep: str, header: int | None) -> "pd.DataFrame":
    import pandas as pd  # only the tabular formats need pandas; workers training `lines` never import it

    try:
        return pd.read_csv(
            path, sep=sep, header=header, dtype=str, keep_default_na=False, encoding=encoding,
            engine="python" if len(sep) > 1 else "c", skip_blank_lines=True,
        )
    except UnicodeDecodeError:
        for _ in text_lines(path, encoding):  # re-scan to name the offending line
            pass
        raise InputError(f"{path}: not valid {encoding}; re-encode the file or pass --encoding") from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty corpus (no rows)") from None
    except pd.errors.ParserError as exc:
        raise InputError(f"{path}: malformed table: {_short(exc)}") from None


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[-1]


def _sequences_by_user(path: Path, table: "pd.DataFrame", min_rating: float | None, first_line: int, fmt: str) -> Corpus:
    """One sequence of item ids per user, ordered by timestamp (file order breaks ties)."""
    import pandas as pd

    for col in ("user", "item"):
        empty = np.flatnonzero(table[col].str.strip().to_numpy() == "")
        if empty.size:
            raise InputError(f"{path}:{first_line + empty[0]}: empty {col} field")
    for col in ("rating", "timestamp"):
        if col in table.columns:
            values = pd.to_numeric(table[col], errors="coerce")
            bad = np.flatnonzero(values.isna().to_numpy())
            if bad.size:
                raise InputError(f"{path}:{first_line + bad[0]}: {col} {table[col].iloc[bad[0]]!r} is not a number")
            table[col] = values
    skipped = 0
    if min_rating is not None:
        keep = table["rating"] >= min_rating
        skipped = int((~keep).sum())
        table = table[keep]
    order = ["timestamp"] if "timestamp" in table.columns else []
    table = table.assign(_row=np.arange(len(table))).sort_values(order + ["_row"], kind="stable")
    users_in_order = pd.unique(table["user"].to_numpy())
    grouped = table.groupby("user", sort=False)["item"].agg(list)
    sequences = [grouped[u] for u in users_in_order]
    return Corpus(path, fmt, sequences, skipped_lines=skipped)
