"""Label files for the downstream audit (``stabcli audit --labels``).

Formats, detected from the name and the first line:

* ``key,label`` or ``key<TAB>label`` (CSV quoting allowed). A first row whose key is not
  an embedding key is read as a header, so a header is optional. A key may repeat with
  other labels (several labels per key).
* MovieLens 100K ``u.item`` (``|``-separated, 19 genre flags): the flagged genres.
* MovieLens 1M/10M ``movies.dat`` (``id::title::Genre|Genre``): the listed genres.
* MovieLens ``movies.csv`` (header ``movieId,title,genres``): the listed genres.

``read_label_sets`` keeps every label of a key (multi-label); ``read_labels`` keeps one:
the first flagged or listed genre, and for a ``key,label`` file a repeated key must repeat
its label. Movies whose genre is ``unknown`` or ``(no genres listed)`` have no label.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from stabcli.errors import InputError, quote
from stabcli.inputs.compressed import compression_of, inner_name, open_stream
from stabcli.inputs.textfile import check_encoding, csv_field_limit_lifted, sniff_encoding, text_lines

# u.genre of MovieLens 100K: the order of the flags in u.item
ML100K_GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)
NO_GENRE = {"unknown", "(no genres listed)"}
MOVIELENS_ENCODING = "latin-1"  # what the GroupLens u.item and movies.dat files are written in


@dataclass
class Labels:
    """Label strings by key, as read from ``source``."""

    source: Path
    format: str
    by_key: dict[str, str]


@dataclass
class LabelSets:
    """Every label of every key (in the file's order), as read from ``source``."""

    source: Path
    format: str
    by_key: dict[str, tuple[str, ...]]

    @property
    def multiple(self) -> int:
        """Keys with more than one label."""
        return sum(len(v) > 1 for v in self.by_key.values())


def read_labels(path: str | Path, known_keys: Collection[str], encoding: str | None = None) -> Labels:
    """Read a label file, one label per key; ``known_keys`` (the embedding keys) decides
    whether row 1 is a header.

    ``encoding`` None means UTF-8, except latin-1 for MovieLens ``u.item`` and ``movies.dat``
    (how GroupLens writes them); a byte-order mark always decides. An unknown encoding is an
    ``OptionError("encoding", ...)`` raised before the file is opened.
    """
    path, fmt, records = _records(path, known_keys, encoding)
    by_key: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, key, labels in records:
        if not labels:
            continue
        label = labels[0]
        if key in by_key and by_key[key] != label:
            raise InputError(
                f"{path}:{lineno}: key {quote(key)} has label {quote(label)} here but {quote(by_key[key])} "
                f"on line {first_line[key]} (--task multilabel keeps every label of a key)"
            )
        by_key.setdefault(key, label)
        first_line.setdefault(key, lineno)
    if not by_key:
        raise InputError(f"{path}: no labels found (empty file?)")
    return Labels(path, fmt, by_key)


def read_label_sets(path: str | Path, known_keys: Collection[str], encoding: str | None = None) -> LabelSets:
    """Read a label file keeping every label of a key (``read_labels``' formats and encodings);
    a label repeated for the same key counts once."""
    path, fmt, records = _records(path, known_keys, encoding)
    by_key: dict[str, dict[str, None]] = {}
    for _, key, labels in records:
        if labels:
            by_key.setdefault(key, {}).update(dict.fromkeys(labels))
    if not by_key:
        raise InputError(f"{path}: no labels found (empty file?)")
    return LabelSets(path, fmt, {key: tuple(labels) for key, labels in by_key.items()})


def _records(
    path: str | Path, known_keys: Collection[str], encoding: str | None
) -> tuple[Path, str, Iterator[tuple[int, str, tuple[str, ...]]]]:
    """(path, format, records): every (line, key, labels) of a label file, read lazily."""
    if encoding is not None:
        check_encoding("encoding", encoding)
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: label file not found")
    sniff_encoding(path, encoding or "utf-8", "label file")  # refuses a directory, FIFO, device or archive
    fmt = detect_layout(path, encoding or "utf-8")
    encoding = encoding_for(path, encoding, fmt)
    readers = {
        "delimited": lambda: _delimited(path, encoding, known_keys),
        "u.item": lambda: _u_item(path, encoding),
        "movies.dat": lambda: _movies_dat(path, encoding),
        "movies.csv": lambda: _movies_csv(path, encoding),
    }

    def records() -> Iterator[tuple[int, str, tuple[str, ...]]]:
        with csv_field_limit_lifted():
            yield from readers[fmt]()

    return path, fmt, records()


def encoding_for(path: Path, encoding: str | None, fmt: str | None = None) -> str:
    """The one encoding rule for label and key-name files in every command: ``encoding``
    when given, else UTF-8, except latin-1 for a MovieLens ``u.item`` or ``movies.dat``
    (recognised by name, also compressed, or by their first line; how GroupLens writes them)
    that is not valid UTF-8 throughout (one re-encoded as UTF-8 is read as UTF-8). A
    byte-order mark still decides over either (``textfile.sniff_encoding``)."""
    if encoding is not None:
        return encoding
    fmt = fmt or detect_layout(path, "utf-8")
    if fmt not in ("u.item", "movies.dat") or _valid_utf8(path):
        return "utf-8"  # a MovieLens file re-encoded as UTF-8 (valid UTF-8 is not latin-1 text by chance)
    return MOVIELENS_ENCODING


def _valid_utf8(path: Path) -> bool:
    """Whether the whole (decompressed) file decodes as UTF-8, read block by block."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with open_stream(path, compression_of(path)) as fh:
            while block := fh.read(1 << 20):
                decoder.decode(block)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _first_line(path: Path, encoding: str) -> str:
    for _, line in text_lines(path, encoding):
        if line.strip():
            return line.strip()
    return ""


def detect_layout(path: Path, encoding: str) -> str:
    """The layout of a label or key-name file: ``u.item``, ``movies.dat``, ``movies.csv``
    (MovieLens, by name, also compressed, or by the first line) or ``delimited``."""
    if inner_name(path).name == "u.item":
        return "u.item"
    if inner_name(path).name == "movies.dat":
        return "movies.dat"
    try:
        first = _first_line(path, encoding)
    except InputError:  # not decodable as utf-8: maybe a latin-1 MovieLens file, else the reader says where
        first = _first_line(path, MOVIELENS_ENCODING)
    if first.lower().replace(" ", "").startswith("movieid,title,genres"):
        return "movies.csv"
    if first.count("|") == len(ML100K_GENRES) + 4:
        return "u.item"
    if first.count("::") == 2:
        return "movies.dat"
    return "delimited"


def _genres(genres: Sequence[str]) -> tuple[str, ...]:
    """The genres in their order, without the ones that mean "no genre"."""
    return tuple(g for g in (g.strip() for g in genres) if g and g not in NO_GENRE)


def _csv_records(path: Path, encoding: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each CSV record; quoted fields may hold delimiters and newlines."""
    where = {"line": 0}

    def source() -> Iterator[str]:
        for lineno, line in text_lines(path, encoding):
            where["line"] = lineno
            yield line + "\n"

    reader = csv.reader(source(), delimiter=delimiter, strict=True)
    while True:
        start = where["line"] + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(
                f"{path}:{start}: malformed {'CSV' if delimiter == ',' else 'delimited'} record ({exc})"
            ) from None
        if not any(f.strip() for f in fields):
            continue
        if len(fields) > 2 and fields[-1] == "" and all(fields[:-1]):
            fields = fields[:-1]  # a trailing delimiter
        yield start, fields


def row_index_header(fields: Sequence[str]) -> bool:
    """Whether a header row starts with a row-index column (pandas' ``to_csv()`` writes
    ``,key,label``, R's ``write.csv`` ``"","key","label"``): its first field is empty."""
    return len(fields) >= 3 and fields[0].strip().strip('"') in ("", "Unnamed: 0")


def _delimited(path: Path, encoding: str, known_keys: Collection[str]) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    first = _first_line(path, encoding)
    delimiter = next((d for d in ("\t", ",", ";", "|") if d in first), ",")
    first_row = True
    skip = 0  # 1: a row-index column before key and label
    for lineno, fields in _csv_records(path, encoding, delimiter):
        if first_row and row_index_header(fields):
            skip = 1
        if len(fields) != 2 + skip:
            shown = "<TAB>" if delimiter == "\t" else delimiter
            columns = f"row index{shown}" * skip + f"key{shown}label"
            raise InputError(f"{path}:{lineno}: expected {2 + skip} columns ({columns}), found {len(fields)}")
        key, label = fields[skip].strip(), fields[skip + 1].strip()
        if first_row:
            first_row = False
            if key not in known_keys:
                continue  # a header (or a key we have no vector for)
        if not key or not label:
            raise InputError(f"{path}:{lineno}: empty {'key' if not key else 'label'}")
        yield lineno, key, (label,)


def _u_item(path: Path, encoding: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    width = len(ML100K_GENRES) + 5
    for lineno, line in text_lines(path, encoding):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != width or any(f.strip() not in ("0", "1") for f in fields[5:]):
            raise InputError(
                f"{path}:{lineno}: not a MovieLens u.item line (id|title|date|video date|url|19 genre flags)"
            )
        flags = [g for g, f in zip(ML100K_GENRES, fields[5:], strict=True) if f.strip() == "1"]
        yield lineno, fields[0].strip(), _genres(flags)


def _movies_dat(path: Path, encoding: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    for lineno, line in text_lines(path, encoding):
        if not line.strip():
            continue
        fields = line.split("::")
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: not a MovieLens movies.dat line (MovieID::Title::Genres)")
        yield lineno, fields[0].strip(), _genres(fields[2].split("|"))


def _movies_csv(path: Path, encoding: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    records = _csv_records(path, encoding, ",")
    next(records)  # header
    for lineno, fields in records:
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: not a MovieLens movies.csv line (movieId,title,genres)")
        yield lineno, fields[0].strip(), _genres(fields[2].split("|"))
