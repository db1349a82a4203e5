"""Bad corpora and label files: exit 2, one `error:` line naming the file, line or option,
no traceback or warning, and nothing created or changed (pretrain CORPUS, audit --labels)."""

import bz2
import gzip
import lzma
import os
import zipfile
from pathlib import Path

import pytest

from conftest import assert_bad_input, files_state, make_runset, runner
from stabcli.cli.app import app

KEYS = [f"k{i}" for i in range(30)]


def put(t: Path, name: str, data: str | bytes) -> Path:
    path = t / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def fifo(t: Path) -> Path:
    """A FIFO outside the checked root (hashing the root must not open it)."""
    directory = t.parent / "special"
    directory.mkdir(exist_ok=True)
    path = directory / "pipe"
    if not path.exists():
        os.mkfifo(path)
    return path


def zipped(data: bytes) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("c.txt", data)
    return buf.getvalue()


def table(rows: int = 6) -> str:
    return "user,item,rating,ts\n" + "".join(f"u{r % 3},i{r},{1 + r % 5},{1000 + r}\n" for r in range(rows))


def pretrain(corpus, *options):
    return lambda t: ["pretrain", corpus(t), "--out", t / "out", "--runs", "1", "--epochs", "1", "--dim", "4", *options]


def runset(t: Path) -> Path:
    return make_runset(t / "runs", keys=KEYS, epochs=0)


def labels(path_of, *options):
    return lambda t: ["audit", runset(t), "--labels", path_of(t), *options]


def good_labels(t: Path) -> str:
    return "".join(f"{k},{'ab'[i % 2]}\n" for i, k in enumerate(KEYS))


CASES = [
    # ---- pretrain CORPUS: what is not a regular text file
    ("corpus is a directory", pretrain(lambda t: t), "is a directory, not a corpus file"),
    ("corpus is a FIFO", pretrain(fifo), "pipe: is a FIFO, not a regular file"),
    ("corpus is /dev/zero", pretrain(lambda t: Path("/dev/zero")), "/dev/zero: is a device"),
    (
        "corpus gzip truncated",
        pretrain(lambda t: put(t, "c.txt.gz", gzip.compress(b"a b\nb c\n" * 50)[:-12])),
        "c.txt.gz: gzip data is truncated or corrupt",
    ),
    (
        "corpus bzip2 corrupt",
        pretrain(lambda t: put(t, "c.bz2", bz2.compress(b"a b\nb c\n" * 50)[:12] + bytes(40))),
        "c.bz2: bzip2 data is truncated or corrupt",
    ),
    (
        "corpus xz truncated",
        pretrain(lambda t: put(t, "c.xz", lzma.compress(b"a b\nb c\n" * 50)[:-30])),
        "c.xz: xz data is truncated or corrupt",
    ),
    (
        "corpus is zstd",
        pretrain(lambda t: put(t, "c.txt.zst", b"\x28\xb5\x2f\xfd" + bytes(30))),
        "c.txt.zst: is zstd-compressed, which stabcli does not read",
    ),
    ("corpus is a zip", pretrain(lambda t: put(t, "c.zip", zipped(b"a b\nb c\n"))), "is a zip archive"),
    (
        "utf-16 corpus without BOM",
        pretrain(lambda t: put(t, "c.txt", "a b\nb c\n".encode("utf-16-le"))),
        "c.txt:1: contains NUL bytes",
    ),
    (
        "bad byte deep in corpus",
        pretrain(lambda t: put(t, "c.txt", b"a b\n" * 5000 + b"x \xfe y\n")),
        "c.txt:5001: not valid utf-8 (byte 0xfe at column 3)",
    ),
    (
        "latin-1 corpus read as utf-16",
        pretrain(lambda t: put(t, "c.txt", b"ab cd\nef gh\n"), "--encoding", "utf-32"),
        "c.txt:1: not valid utf-32-le",
    ),
    # ---- pretrain options, checked before any IO (the corpus need not exist)
    (
        "unknown encoding",
        pretrain(lambda t: t / "nope.txt", "--encoding", "klingon"),
        "--encoding: unknown encoding 'klingon'",
    ),
    (
        "encoding with a NUL",
        pretrain(lambda t: t / "nope.txt", "--encoding", "utf-8\x00"),
        "--encoding: unknown encoding",
    ),
    ("empty encoding", pretrain(lambda t: t / "nope.txt", "--encoding", ""), "--encoding: expected an encoding name"),
    (
        "non-text encoding",
        pretrain(lambda t: t / "nope.txt", "--encoding", "base64"),
        "--encoding: 'base64' is not a text",
    ),
    ("rot13 encoding", pretrain(lambda t: t / "nope.txt", "--encoding", "rot13"), "--encoding: 'rot13' is not a text"),
    (
        "unknown corpus format",
        pretrain(lambda t: t / "nope.txt", "--corpus-format", "xml"),
        "'--corpus-format': 'xml' is not one of",
    ),
    (
        "negative column",
        pretrain(lambda t: t / "nope.txt", "--user-col", "-1"),
        "--user-col: column position -1 is negative",
    ),
    ("huge column", pretrain(lambda t: t / "nope.txt", "--item-col", "99999"), "--item-col: column position 99999"),
    ("empty column name", pretrain(lambda t: t / "nope.txt", "--time-col", " "), "--time-col: empty column name"),
    (
        "same user and item column",
        pretrain(lambda t: t / "nope.txt", "--user-col", "a", "--item-col", "a"),
        "--item-col: 'a' is already the user column (--user-col)",
    ),
    (
        "time column is the item column",
        pretrain(lambda t: t / "nope.txt", "--item-col", "2", "--time-col", "2"),
        "--time-col: 2 is already the item column",
    ),
    ("user column none", pretrain(lambda t: t / "nope.txt", "--user-col", "none"), "--user-col: is required"),
    ("item column none", pretrain(lambda t: t / "nope.txt", "--item-col", "NONE"), "--item-col: is required"),
    (
        "min rating with rating column none",
        pretrain(lambda t: put(t, "e.csv", table()), "--rating-col", "none", "--min-rating", "2"),
        "--min-rating needs a rating column",
    ),
    (
        "min rating nan",
        pretrain(lambda t: t / "nope.txt", "--min-rating", "nan"),
        "--min-rating: expected a finite number",
    ),
    (
        "min rating inf",
        pretrain(lambda t: t / "nope.txt", "--min-rating", "inf"),
        "--min-rating: expected a finite number",
    ),
    (
        "column option on lines",
        pretrain(lambda t: t / "nope.txt", "--corpus-format", "lines", "--user-col", "0"),
        "--user-col: applies to interaction tables only, not to --corpus-format lines",
    ),
    (
        "min rating on tagged",
        pretrain(lambda t: t / "nope.txt", "--corpus-format", "tagged", "--min-rating", "3"),
        "--min-rating: applies to interaction tables only",
    ),
    # ---- readings that would train nothing or train on table rows
    (
        "table forced to lines",
        pretrain(lambda t: put(t, "e.csv", table()), "--corpus-format", "lines"),
        "e.csv: read as lines, 7 of 7 lines hold a single token",
    ),
    (
        "table rows as keys",
        pretrain(lambda t: put(t, "m.csv", "".join(f"{u},Film {i} (199{i}),4\n" for u in range(3) for i in range(4)))),
        "m.csv: read as lines, 7 of 11 distinct keys contain ','",
    ),
    (
        "user column never repeats",
        pretrain(lambda t: put(t, "e.csv", "row,user,item\n1,a,x\n2,a,y\n3,b,x\n"), "--user-col", "row"),
        "3 of 3 users ('row') have a single item",
    ),
    (
        "constant-width tab lines",
        pretrain(lambda t: put(t, "s.txt", "a\tb\tc\nd\te\tf\n")),
        "pass --corpus-format lines if each line is one sequence",
    ),
    (
        "prose as interactions",
        pretrain(
            lambda t: put(t, "s.txt", "the cat, sat\nthe dog ran, far, away\n"), "--corpus-format", "interactions"
        ),
        "s.txt: not a delimited table",
    ),
    (
        "column option on prose",
        pretrain(lambda t: put(t, "s.txt", "the cat sat\nthe dog\n"), "--user-col", "0"),
        "s.txt: not a delimited table (lines do not split",
    ),
    (
        "doc2vec tag with a space",
        pretrain(lambda t: put(t, "d.tsv", "doc 1\tsome words\ndoc2\tmore words\n"), "--model", "doc2vec"),
        "d.tsv:1: tag 'doc 1' contains whitespace",
    ),
    (
        "doc2vec tag with a form feed",
        pretrain(lambda t: put(t, "d.tsv", "d1\ta b\nd\x0c2\tc d\n"), "--model", "doc2vec"),
        "d.tsv:2: tag 'd\\x0c2' contains whitespace",
    ),
    # ---- malformed tables
    (
        "column out of range",
        pretrain(lambda t: put(t, "e.csv", table()), "--user-col", "7"),
        "e.csv: --user-col 7 is out of range; the table has 4 columns (0 to 3)",
    ),
    (
        "named column missing",
        pretrain(lambda t: put(t, "e.csv", table()), "--item-col", "movie"),
        "e.csv: no column 'movie' for --item-col; columns are user, item, rating, ts",
    ),
    (
        "unknown header names",
        pretrain(lambda t: put(t, "e.csv", "who,what\n1,2\n1,3\n")),
        "no column of the header (who, what) is a known user column name; pass --user-col",
    ),
    (
        "item with a space",
        pretrain(lambda t: put(t, "e.csv", "user,item\na,x\na,my item\nb,x\nb,y\n")),
        "e.csv:3: item 'my item' contains whitespace",
    ),
    (
        "width changes after the sample",
        pretrain(lambda t: put(t, "e.csv", table(120) + "u1,i1,3,1000,x\n")),
        "e.csv:122: expected 4 comma-separated fields (as in the first lines), found 5",
    ),
    (
        "a row ending before the time column (under a header short rows are padded, as pandas reads them)",
        pretrain(lambda t: put(t, "e.csv", table(120) + "u1,i1,3\n")),
        "e.csv:122: the row ends after 3 of the header's 4 comma-separated fields, before its timestamp ('ts')",
    ),
    (
        "a row ending before the rating column --min-rating reads",
        pretrain(lambda t: put(t, "e.csv", table(120) + "u1,i1\n"), "--time-col", "none", "--min-rating", "2"),
        "e.csv:122: the row ends after 2 of the header's 4 comma-separated fields, before its rating ('rating')",
    ),
    (
        "a table with classic Mac OS line ends (a carriage return alone): one line, not a header-only table",
        pretrain(lambda t: put(t, "e.csv", table().replace("\n", "\r"))),
        "e.csv:1: lines end in a carriage return alone",
    ),
    (
        "a text corpus with classic Mac OS line ends",
        pretrain(lambda t: put(t, "s.txt", "a b c\rb c d\rc d e\r"), "--corpus-format", "lines"),
        "s.txt:1: lines end in a carriage return alone",
    ),
    (
        "unbalanced quote after the sample",
        pretrain(lambda t: put(t, "e.csv", table(120) + 'u1,"i1,3,4\n')),
        "e.csv:122: malformed quoting",
    ),
    (
        "bad timestamp",
        pretrain(lambda t: put(t, "e.csv", table() + "u1,i9,3,later\n")),
        "e.csv:8: timestamp 'later' ('ts')",
    ),
    ("nan timestamp", pretrain(lambda t: put(t, "e.csv", table() + "u1,i9,3,nan\n")), "e.csv:8: timestamp 'nan'"),
    (
        "bad rating",
        pretrain(lambda t: put(t, "e.csv", table() + "u1,i9,good,7\n"), "--min-rating", "2"),
        "e.csv:8: rating 'good' ('rating') is not a number",
    ),
    ("empty item", pretrain(lambda t: put(t, "e.csv", table() + "u1,,3,7\n")), "e.csv:8: empty item field ('item')"),
    (
        "min rating without rating column",
        pretrain(lambda t: put(t, "e.csv", "user,item\na,x\na,y\n"), "--min-rating", "3"),
        "--min-rating needs a rating column",
    ),
    (
        "min rating on lines",
        pretrain(lambda t: put(t, "s.txt", "a b\nb c\n"), "--min-rating", "3"),
        "s.txt: read as lines, which has no ratings",
    ),
    ("header only", pretrain(lambda t: put(t, "e.csv", "user,item,rating,ts\n")), "e.csv: empty corpus"),
    (
        "ratings.csv wrong header, read as movielens (auto reads it as the table it is)",
        pretrain(lambda t: put(t, "ratings.csv", "user,movie,rating,time\n1,2,3,4\n"), "--corpus-format", "movielens"),
        "ratings.csv:1: expected header userId,movieId,rating,timestamp",
    ),
    (
        "u.data with 3 fields",
        pretrain(lambda t: put(t, "u.data", "1\t2\t3\n1\t3\t4\n")),
        "u.data:1: expected 4 tab-separated fields",
    ),
    (
        "ratings.dat with a short row",
        pretrain(lambda t: put(t, "ratings.dat", "1::2::3::4\n1::3::4\n")),
        "ratings.dat:2: expected 4 '::'-separated fields",
    ),
    # ---- audit --labels
    ("labels is a directory", labels(lambda t: t), "is a directory, not a label file"),
    ("labels is a FIFO", labels(fifo), "pipe: is a FIFO, not a regular file"),
    ("labels is /dev/zero", labels(lambda t: Path("/dev/zero")), "/dev/zero: is a device"),
    (
        "labels gzip truncated",
        labels(lambda t: put(t, "l.csv.gz", gzip.compress(good_labels(t).encode())[:-10])),
        "l.csv.gz: gzip data is truncated or corrupt",
    ),
    (
        "labels unknown encoding",
        labels(lambda t: t / "nope.csv", "--encoding", "klingon"),
        "--encoding: unknown encoding 'klingon'",
    ),
    (
        "labels non-text encoding",
        labels(lambda t: t / "nope.csv", "--encoding", "zlib"),
        "--encoding: 'zlib' is not a text",
    ),
    (
        "labels width changes",
        labels(lambda t: put(t, "l.csv", good_labels(t) + "k1,a,extra\n")),
        "l.csv:31: expected 2 columns",
    ),
    ("labels unterminated quote", labels(lambda t: put(t, "l.csv", good_labels(t) + 'k1,"a\n')), "l.csv:31:"),
    (
        "labels utf-16 without BOM",
        labels(lambda t: put(t, "l.csv", good_labels(t).encode("utf-16-le"))),
        "l.csv:1: contains NUL bytes",
    ),
    (
        "labels NUL on line 3",
        labels(lambda t: put(t, "l.csv", b"k0,a\nk1,b\nk2,\x00\n")),
        "l.csv:3: contains NUL bytes",
    ),
    (
        "labels bad utf-8",
        labels(lambda t: put(t, "l.csv", good_labels(t).encode() + b"k1,\xe9t\xe9\n")),
        "l.csv:31: not valid utf-8",
    ),
    (
        "labels bad utf-16 surrogate",
        labels(lambda t: put(t, "l.csv", b"\xff\xfe" + "k0,a\n".encode("utf-16-le") + b"\x00\xd8k\x00")),
        "not valid utf-16-le",
    ),
    (
        "labels conflicting",
        labels(lambda t: put(t, "l.csv", good_labels(t) + "k0,b\n"), "--task", "classification"),
        "l.csv: key 'k0' has the labels 'a', 'b'; --task classification needs one label per key",
    ),
    ("labels empty label", labels(lambda t: put(t, "l.csv", good_labels(t) + "k1,\n")), "l.csv:31: empty label"),
    ("labels empty file", labels(lambda t: put(t, "l.csv", "\n\n")), "l.csv: no labels found"),
    (
        "labels u.item malformed",
        labels(lambda t: put(t, "u.item", "1|Film|01-Jan-1995||http://x|0|1\n")),
        "u.item:1: not a MovieLens u.item line",
    ),
    (
        "labels movies.dat malformed",
        labels(lambda t: put(t, "movies.dat", "1::Film::Comedy\n2::Film\n")),
        "movies.dat:2: not a MovieLens movies.dat line",
    ),
    (
        "labels movies.csv malformed",
        labels(lambda t: put(t, "movies.csv", "movieId,title,genres\n1,Film\n")),
        "movies.csv:2: not a MovieLens movies.csv line",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("build, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_corpus_or_label_input(tmp_path, build, fragment):
    root = tmp_path / "case"
    root.mkdir()
    argv = [str(a) for a in build(root)]
    before = files_state(root)
    result = runner.invoke(app, argv)
    assert_bad_input(result, fragment, root, before)


# ---- generated option values: construction succeeds or raises OptionError, nothing else

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from stabcli.errors import OptionError, StabcliError  # noqa: E402
from stabcli.inputs.corpus import CorpusOptions, read_corpus  # noqa: E402

ODD_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "utf-8",
            "UTF_16",
            "latin1",
            "none",
            "-0",
            "007",
            "1e3",
            "\x00",
            "utf-8\x00",
            "rot_13",
            "mbcs",
            "idna",
            "punycode",
        ]
    ),
)
COLUMN = st.one_of(st.none(), ODD_TEXT, st.integers(-5, 20_000), st.booleans(), st.floats(allow_nan=True))


@settings(max_examples=60, deadline=None)
@given(
    fmt=st.one_of(st.sampled_from(["auto", "lines", "tagged", "movielens", "interactions"]), st.text(max_size=8)),
    encoding=ODD_TEXT,
    user=COLUMN,
    item=COLUMN,
    time=COLUMN,
    rating=COLUMN,
    min_rating=st.one_of(st.none(), st.floats(), st.integers(), st.booleans(), st.text(max_size=3)),
)
def test_corpus_options_accept_or_name_the_parameter(fmt, encoding, user, item, time, rating, min_rating):
    try:
        options = CorpusOptions(fmt, encoding, user, item, time, rating, min_rating)
    except OptionError as exc:
        assert exc.param in (
            "corpus_format",
            "encoding",
            "user_col",
            "item_col",
            "time_col",
            "rating_col",
            "min_rating",
        )
        return
    assert all(
        getattr(options, f"{r}_col") is None or isinstance(getattr(options, f"{r}_col"), (str, int))
        for r in ("user", "item", "time", "rating")
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    user=COLUMN,
    item=COLUMN,
    time=COLUMN,
    data=st.sampled_from(
        [
            "user,item,ts\na,x,1\na,y,2\nb,x,3\nb,z,4\n",
            "1\t10\t5\t881250949\n1\t11\t3\t881250950\n2\t10\t4\t881250951\n",
            "a;b\n1;2\n1;3\n",
            "x::y::z\n",
            "u|i\n1|2\n1|3\n2|2\n2|4\n",
            "\ufeffuid,iid\nu1,i1\nu1,i2\n",
        ]
    ),
)
def test_tables_with_generated_columns_read_or_raise_stabcli_error(tmp_path, user, item, time, data):
    path = tmp_path / "t.csv"
    path.write_text(data, encoding="utf-8")
    try:
        corpus = read_corpus(path, options=CorpusOptions(user_col=user, item_col=item, time_col=time))
    except StabcliError:
        return
    assert corpus.n_tokens > 0 and all(len(tok.split()) == 1 for seq in corpus.sequences for tok in seq)
