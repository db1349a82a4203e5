"""Per-key tables: display names read in (``--key-names``), every key's numbers written out
(``--per-key``, CSV or parquet). Both go through pandas."""

from __future__ import annotations

import io
import itertools
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stabcli.errors import InputError, UsageError, quote
from stabcli.inputs.compressed import read_all
from stabcli.inputs.labels import detect_layout, encoding_for, row_index_header
from stabcli.inputs.textfile import check_encoding, sniff_encoding, text_lines

if TYPE_CHECKING:  # pandas is imported where a table is read or built: a suffix check needs none of its 60 MB
    import pandas as pd

PER_KEY_COLUMNS = [
    "key",
    "name",
    "frequency",
    "norm",
    "aligned_variance",
    "relative_instability",
    "displacement",
    "knn_overlap",
]


SEPARATORS = ("|", "\t", "::", ",")  # MovieLens u.item, TSV, movies.dat, CSV
MOVIELENS_SEPARATORS = {"u.item": "|", "movies.dat": "::", "movies.csv": ","}  # by labels.detect_layout
SNIFF_LINES = 1000


def key_names_separator(text: str) -> str:
    """The separator of a key-names table: of ``|``, tab, ``::`` and ``,`` (in that order of
    preference) the first found on every one of the first 1,000 non-empty lines, so a ``|``
    or a tab inside one name does not decide it; the first line's otherwise."""
    lines = [line for line in itertools.islice((x for x in text.splitlines() if x.strip()), SNIFF_LINES)]
    everywhere = [sep for sep in SEPARATORS if all(sep in line for line in lines)]
    if everywhere:
        return everywhere[0] if everywhere[0] != "|" or "\t" not in everywhere else "\t"
    first = lines[0] if lines else ""
    return next((sep for sep in SEPARATORS if sep in first), ",")


def read_key_names(path: Path, encoding: str | None = None) -> dict[str, str]:
    """Key → display name from a MovieLens item file (``id|title|…``, as ``u.item``) or a
    table whose first two columns are key and name (CSV, TSV; a header row is harmless).
    gzip, bzip2 and xz files are read as streams. ``encoding`` None follows the rule of
    label files (``labels.encoding_for``: latin-1 for MovieLens ``u.item`` and ``movies.dat``,
    else UTF-8); a byte-order mark decides.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "u.item"
    >>> _ = p.write_text("1|Toy Story (1995)|01-Jan-1995\\n2|GoldenEye (1995)|01-Jan-1995\\n")
    >>> read_key_names(p)
    {'1': 'Toy Story (1995)', '2': 'GoldenEye (1995)'}
    """
    if encoding is not None:
        check_encoding("encoding", encoding)
    sniff_encoding(path, encoding or "utf-8", "key-name file")  # a directory, FIFO, device or archive
    layout = detect_layout(path, encoding or "utf-8")
    encoding = encoding_for(path, encoding, layout)
    text = "\n".join(line for _, line in text_lines(path, encoding))
    import pandas as pd

    text = text.lstrip("\ufeff")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise InputError(f"{path}: empty; expected key and name columns")
    separator = MOVIELENS_SEPARATORS.get(layout) or key_names_separator(text)
    columns = [1, 2] if layout == "delimited" and row_index_header(_fields(first, separator)) else [0, 1]
    try:
        table = pd.read_csv(
            io.StringIO(text),
            sep=separator,
            header=None,
            dtype=str,
            keep_default_na=False,
            usecols=columns,
            engine="c" if len(separator) == 1 else "python",  # the C parser has no field-size limit
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise InputError(
            f"{path}: expected at least two {_name(separator)}-separated columns, key and name "
            f"({str(exc).splitlines()[0]})"
        ) from None
    keys, values = (table[c].str.strip() for c in columns)
    return dict(zip(keys, values, strict=True))


def _fields(line: str, separator: str) -> list[str]:
    return line.split(separator)  # the header's fields, only to see whether the first is empty


def require_named_keys(path: Path, names: dict[str, str], known: Collection[str]) -> None:
    """A key-names file must name at least one compared key (``audit``, ``drift``): a file
    for other keys, or read in the wrong columns, is an error, not a table without names."""
    if not any(key in known for key in names):
        raise InputError(f"{path}: none of its {len(names):,} keys is a compared key (e.g. {quote(next(iter(names)))})")


def read_frequencies(path: Path, encoding: str = "utf-8") -> dict[str, int]:
    """Key → frequency (``--frequencies``): one key and a non-negative integer count per line,
    separated by a tab, a comma or spaces (the count last); a first line whose count is not a
    number is a header. Raises ``InputError`` naming the file and line otherwise.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "counts.tsv"
    >>> _ = p.write_text("key\tcount\nthe\t1061\nnew york\t3\n")
    >>> read_frequencies(p)
    {'the': 1061, 'new york': 3}
    """
    try:
        text = read_all(path).decode(encoding).lstrip("\ufeff")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not valid {encoding} text") from None
    except LookupError:
        raise UsageError(f"--encoding {encoding}: unknown text encoding") from None
    counts: dict[str, int] = {}
    first = True
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        separator = "\t" if "\t" in line else "," if "," in line else None
        parts = line.rsplit(separator, 1)
        if len(parts) != 2 or not parts[0].strip():
            raise InputError(f"{path} line {number}: expected a key and a count, found {quote(line.strip()[:40])}")
        key, value = parts[0].strip(), parts[1].strip()
        if not value.isdigit():
            if first:
                first = False
                continue  # a header row
            raise InputError(f"{path} line {number}: count {quote(value[:20])} is not a non-negative integer")
        first = False
        if key in counts:
            raise InputError(f"{path} line {number}: key {quote(key[:40])} appears twice")
        counts[key] = int(value)
    if not counts:
        raise InputError(f"{path}: no key and count found")
    return counts


def _name(separator: str) -> str:
    return {"|": "'|'", "\t": "tab", "::": "'::'", ",": "comma"}[separator]


def per_key_frame(
    keys: list[str],
    names: dict[str, str] | None,
    frequency: np.ndarray | None,
    norm: np.ndarray,
    aligned_variance: np.ndarray,
    relative_instability: np.ndarray,
    displacement: np.ndarray | None,
    knn_overlap: np.ndarray,
    extra: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per key with the ``PER_KEY_COLUMNS``, then the ``extra`` columns (the
    downstream flip rates); missing values are empty (NA)."""
    import pandas as pd

    n = len(keys)
    counts = [None] * n if frequency is None else [int(c) if c >= 0 else None for c in frequency]
    return pd.DataFrame(
        {
            "key": keys,
            "name": [names.get(k) for k in keys] if names else [None] * n,
            "frequency": pd.array(counts, dtype="Int64"),
            "norm": norm,
            "aligned_variance": aligned_variance,
            "relative_instability": relative_instability,
            "displacement": displacement if displacement is not None else np.full(n, np.nan),
            "knn_overlap": knn_overlap,
            **(extra or {}),
        },
        columns=PER_KEY_COLUMNS + list(extra or {}),
    )


def per_key_format(path: Path) -> str:
    """``parquet`` for ``.parquet``/``.pq``, ``csv`` for ``.csv``/``.tsv``/``.txt`` or no suffix;
    any other suffix is a UsageError (a file no reader would open)."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv", ".txt", ""):
        return "csv"
    raise UsageError(f"--per-key {path}: unknown suffix {quote(suffix)}; use .csv, .tsv or .parquet")


def write_per_key(frame: pd.DataFrame, path: Path, staged: Path) -> None:
    """Write the per-key table for output ``path`` (its suffix decides the format) into the
    temporary file ``staged`` that the command's output plan renames into place."""
    fmt = per_key_format(path)
    try:
        if fmt == "parquet":
            try:
                frame.to_parquet(staged, index=False)
            except ImportError:
                raise UsageError(f"--per-key {path}: parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
        else:
            frame.to_csv(staged, index=False, sep="\t" if path.suffix.lower() == ".tsv" else ",")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
