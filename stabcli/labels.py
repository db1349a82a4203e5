"""Label files for the downstream audit (``stabcli audit --labels``).

Formats, detected from the name and the first line:

* ``key,label`` or ``key<TAB>label`` (CSV quoting allowed). A first row whose key is not
  an embedding key is read as a header, so a header is optional.
* MovieLens 100K ``u.item`` (``|``-separated, 19 genre flags): the first flagged genre.
* MovieLens 1M/10M ``movies.dat`` (``id::title::Genre|Genre``): the first listed genre.
* MovieLens ``movies.csv`` (header ``movieId,title,genres``): the first listed genre.

Movies whose genre is ``unknown`` or ``(no genres listed)`` have no label.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator

from stabcli.corpus import text_lines
from stabcli.errors import InputError

# u.genre of MovieLens 100K: the order of the flags in u.item
ML100K_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                 "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                 "War", "Western")
NO_GENRE = {"unknown", "(no genres listed)"}
MOVIELENS_ENCODING = "latin-1"  # what the GroupLens files are written in


@dataclass
class Labels:
    """Label strings by key, as read from ``source``."""

    source: Path
    format: str
    by_key: dict[str, str]


def read_labels(path: str | Path, known_keys: Collection[str], encoding: str = "utf-8") -> Labels:
    """Read a label file; ``known_keys`` (the embedding keys) decides whether row 1 is a header."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: label file not found" if not path.exists() else f"{path}: not a file")
    fmt = _detect(path)
    if fmt == "delimited":
        rows = _delimited(path, encoding, known_keys)
    else:
        rows = {"u.item": _u_item, "movies.dat": _movies_dat, "movies.csv": _movies_csv}[fmt](path)
    by_key: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, key, label in rows:
        if label is None:
            continue
        if key in by_key and by_key[key] != label:
            raise InputError(f"{path}:{lineno}: key {key!r} has label {label!r} here but {by_key[key]!r} "
                             f"on line {first_line[key]}")
        by_key.setdefault(key, label)
        first_line.setdefault(key, lineno)
    if not by_key:
        raise InputError(f"{path}: no labels found (empty file?)")
    return Labels(path, fmt, by_key)


def _detect(path: Path) -> str:
    if path.name == "u.item":
        return "u.item"
    if path.name == "movies.dat":
        return "movies.dat"
    with open(path, "rb") as fh:
        first = fh.readline().decode(MOVIELENS_ENCODING).strip()
    if first.lower().replace(" ", "").startswith("movieid,title,genres"):
        return "movies.csv"
    if first.count("|") == len(ML100K_GENRES) + 4:
        return "u.item"
    if first.count("::") == 2:
        return "movies.dat"
    return "delimited"


def _first_genre(genres: str) -> str | None:
    genre = genres.split("|")[0].strip()
    return None if not genre or genre in NO_GENRE else genre


def _delimited(path: Path, encoding: str, known_keys: Collection[str]) -> Iterator[tuple[int, str, str | None]]:
    delimiter = None
    for lineno, line in text_lines(path, encoding):
        if not line.strip():
            continue
        first_row = delimiter is None
        if first_row:
            delimiter = "\t" if "\t" in line else ","
        fields = next(csv.reader([line], delimiter=delimiter))
        if len(fields) != 2:
            raise InputError(f"{path}:{lineno}: expected 2 columns (key{delimiter!r}label), found {len(fields)}")
        key, label = fields[0].strip(), fields[1].strip()
        if first_row and key not in known_keys:
            continue  # a header (or a key we have no vector for)
        if not key or not label:
            raise InputError(f"{path}:{lineno}: empty {'key' if not key else 'label'}")
        yield lineno, key, label


def _u_item(path: Path) -> Iterator[tuple[int, str, str | None]]:
    width = len(ML100K_GENRES) + 5
    for lineno, line in text_lines(path, MOVIELENS_ENCODING):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != width or any(f not in ("0", "1") for f in fields[5:]):
            raise InputError(f"{path}:{lineno}: not a MovieLens u.item line (id|title|date|video date|url|19 genre flags)")
        flags = [g for g, f in zip(ML100K_GENRES, fields[5:]) if f == "1"]
        yield lineno, fields[0].strip(), _first_genre(flags[0]) if flags else None


def _movies_dat(path: Path) -> Iterator[tuple[int, str, str | None]]:
    for lineno, line in text_lines(path, MOVIELENS_ENCODING):
        if not line.strip():
            continue
        fields = line.split("::")
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: not a MovieLens movies.dat line (MovieID::Title::Genres)")
        yield lineno, fields[0].strip(), _first_genre(fields[2])


def _movies_csv(path: Path) -> Iterator[tuple[int, str, str | None]]:
    lines = ((n, line) for n, line in text_lines(path, "utf-8") if line.strip())
    next(lines)  # header
    for lineno, line in lines:
        fields = next(csv.reader([line]))
        if len(fields) != 3:
            raise InputError(f"{path}:{lineno}: not a MovieLens movies.csv line (movieId,title,genres)")
        yield lineno, fields[0].strip(), _first_genre(fields[2])
