"""Label files as users have them: CSV/TSV with quoting, headers, CRLF, byte-order marks,
UTF-16, and generated files in the MovieLens u.item, movies.dat and movies.csv layouts."""

import os
from pathlib import Path

import pytest

from stabcli.errors import InputError, OptionError
from stabcli.inputs.labels import ML100K_GENRES, read_labels

KEYS = {"1", "2", "3", "4", "a", "b", "c"}
TITLES = [
    "Caf\u00e9 Society (1995)",
    "Am\u00e9lie, Le fabuleux destin (2001)",
    "Se\u00f1or Plain (1998)",
    "M\u00fcnchhausen (1943)",
]


def write(tmp_path: Path, name: str, data: str | bytes, encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode(encoding))
    return path


def u_item(genres_per_movie: list[list[str]]) -> str:
    """MovieLens 100K u.item layout: id|title|date|video date|url|19 genre flags, latin-1."""
    lines = []
    for movie, genres in enumerate(genres_per_movie, start=1):
        flags = "|".join("1" if g in genres else "0" for g in ML100K_GENRES)
        lines.append(f"{movie}|{TITLES[movie - 1]}|01-Jan-1995||http://example.org/{movie}|{flags}")
    return "\n".join(lines) + "\n"


def test_u_item_with_latin1_titles_takes_the_first_genre(tmp_path):
    path = write(tmp_path, "u.item", u_item([["Comedy", "Drama"], ["Romance"], ["unknown"], ["Fantasy"]]), "latin-1")
    labels = read_labels(path, KEYS)
    assert labels.format == "u.item"
    assert labels.by_key == {"1": "Comedy", "2": "Romance", "4": "Fantasy"}  # 'unknown' has no label


def test_u_item_layout_under_another_name_is_recognised(tmp_path):
    path = write(tmp_path, "genres.txt", u_item([["Action"], ["War"]]), "latin-1")
    assert read_labels(path, KEYS).by_key == {"1": "Action", "2": "War"}


def test_movies_dat_with_latin1_titles(tmp_path):
    genres = ["Comedy|Drama", "Romance", "(no genres listed)", "Fantasy"]
    data = "".join(f"{i}::{t}::{g}\n" for i, (t, g) in enumerate(zip(TITLES, genres, strict=True), start=1))
    labels = read_labels(write(tmp_path, "movies.dat", data, "latin-1"), KEYS)
    assert labels.by_key == {"1": "Comedy", "2": "Romance", "4": "Fantasy"}


def test_movies_csv_quoted_titles_utf8_and_latin1(tmp_path):
    data = "movieId,title,genres\r\n" + "".join(
        f'{i},"{t}",{g}\r\n'
        for i, (t, g) in enumerate(zip(TITLES, ["Comedy|Drama", "Romance", "Drama", "Fantasy"], strict=True), start=1)
    )
    expected = {"1": "Comedy", "2": "Romance", "3": "Drama", "4": "Fantasy"}
    assert read_labels(write(tmp_path, "movies.csv", data), KEYS).by_key == expected
    latin = write(tmp_path, "movies.csv", data, "latin-1")
    with pytest.raises(InputError, match=r"movies\.csv:2: not valid utf-8 .*--encoding"):
        read_labels(latin, KEYS)
    assert read_labels(latin, KEYS, encoding="latin-1").by_key == expected


def test_crlf_header_quotes_and_embedded_newlines(tmp_path):
    data = 'key,label\r\n"a","Sci-Fi, space"\r\nb,"two\r\nlines"\r\n"c",x\r\n'
    labels = read_labels(write(tmp_path, "l.csv", data), KEYS)
    assert labels.by_key == {"a": "Sci-Fi, space", "b": "two\nlines", "c": "x"}


def test_a_bad_record_after_a_multiline_field_names_its_first_line(tmp_path):
    data = 'a,"x\ny"\nb,y\nc,y,z\n'
    with pytest.raises(InputError, match=r"l\.csv:4: expected 2 columns"):
        read_labels(write(tmp_path, "l.csv", data), KEYS)


def test_tab_and_semicolon_delimiters(tmp_path):
    assert read_labels(write(tmp_path, "l.tsv", "a\tx, y\nb\tz\n"), KEYS).by_key == {"a": "x, y", "b": "z"}
    assert read_labels(write(tmp_path, "l.csv", "a;x\nb;z\n"), KEYS).by_key == {"a": "x", "b": "z"}


def test_blank_lines_and_trailing_delimiters(tmp_path):
    data = "\na,x,\n\n  \nb,y,\n"
    assert read_labels(write(tmp_path, "l.csv", data), KEYS).by_key == {"a": "x", "b": "y"}


@pytest.mark.parametrize(
    "encoding, bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")]
)
def test_byte_order_mark_keeps_the_first_label(tmp_path, encoding, bom):
    path = write(tmp_path, "l.csv", bom + "a,caf\u00e9\nb,y\n".encode(encoding))
    assert read_labels(path, KEYS).by_key == {"a": "caf\u00e9", "b": "y"}


def test_utf16_without_bom_with_the_option(tmp_path):
    path = write(tmp_path, "l.csv", "a,x\nb,y\n".encode("utf-16-le"))
    with pytest.raises(InputError, match=r"l\.csv:1: contains NUL bytes.*--encoding utf-16"):
        read_labels(path, KEYS)
    assert read_labels(path, KEYS, encoding="utf-16").by_key == {"a": "x", "b": "y"}


def test_label_longer_than_the_csv_field_limit(tmp_path):
    import csv

    long = "x" * 200_000
    before = csv.field_size_limit()
    labels = read_labels(write(tmp_path, "l.csv", f'a,"{long}"\nb,{long}\nc,y\n'), KEYS)
    assert labels.by_key == {"a": long, "b": long, "c": "y"}
    assert csv.field_size_limit() == before  # the process-wide limit is restored


def test_unknown_encoding_is_refused_before_opening_the_file(tmp_path):
    with pytest.raises(OptionError, match="unknown encoding 'klingon'") as info:
        read_labels(tmp_path / "does-not-exist.csv", KEYS, encoding="klingon")
    assert info.value.param == "encoding"


def test_column_count_changing_mid_file(tmp_path):
    with pytest.raises(InputError, match=r"l\.csv:3: expected 2 columns \(key,label\), found 3"):
        read_labels(write(tmp_path, "l.csv", "a,x\nb,y\nc,y,z\n"), KEYS)


def test_unterminated_quote_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"l\.csv:2: (malformed CSV record|expected 2 columns)"):
        read_labels(write(tmp_path, "l.csv", 'a,x\nb,"y\nc,z\n'), KEYS)


def test_non_regular_files_are_refused_compressed_ones_read(tmp_path):
    import gzip

    with pytest.raises(InputError, match="is a directory, not a label file"):
        read_labels(tmp_path, KEYS)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO, not a regular file"):
        read_labels(fifo, KEYS)
    with pytest.raises(InputError, match="is a device, not a regular file"):
        read_labels("/dev/zero", KEYS)
    assert read_labels(write(tmp_path, "l.csv.gz", gzip.compress(b"a,x\n")), KEYS).by_key == {"a": "x"}
    with pytest.raises(InputError, match=r"l\.csv\.zst: is zstd-compressed, which stabcli does not read"):
        read_labels(write(tmp_path, "l.csv.zst", b"\x28\xb5\x2f\xfd" + bytes(20)), KEYS)
    with pytest.raises(InputError, match=r"l\.csv:2: contains NUL bytes"):
        read_labels(write(tmp_path, "l.csv", b"a,x\nb,\x00y\n"), KEYS)
