from pathlib import Path

import numpy as np
import pytest

from conftest import runner
from stabcli.errors import InputError, OptionError
from stabcli.inputs.corpus import CorpusOptions, detect_format, read_corpus


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def test_lines_splits_on_whitespace_and_skips_blank_lines(tmp_path):
    path = write(tmp_path, "c.txt", "a b  c\n\n  \nb\ta\r\nc\n")
    corpus = read_corpus(path)
    assert corpus.format == "lines"
    assert corpus.sequences == [["a", "b", "c"], ["b", "a"], ["c"]]
    assert corpus.n_tokens == 6


def test_vocabulary_is_frequency_then_key_order_and_honours_min_count(tmp_path):
    path = write(tmp_path, "c.txt", "b a c\nb a\nd b\n")
    corpus = read_corpus(path)
    assert corpus.vocabulary() == ["b", "a", "c", "d"]  # b:3, a:2, then c,d tie at 1 sorted by key
    assert corpus.vocabulary(min_count=2) == ["b", "a"]


def test_tagged_reads_tags_and_words(tmp_path):
    path = write(tmp_path, "d.tsv", "x1\thello world\nx2\tbye\nx1\tagain\n")
    corpus = read_corpus(path, model="doc2vec")
    assert corpus.format == "tagged"
    assert corpus.tags == ["x1", "x2", "x1"]
    assert corpus.sequences == [["hello", "world"], ["bye"], ["again"]]
    assert corpus.vocabulary() == ["x1", "x2"]


def test_tagged_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path, "d.tsv", "x1\thello\nno tab here\n")
    with pytest.raises(InputError, match=r"d\.tsv:2: expected 'tag<TAB>text', found no tab"):
        read_corpus(path, options=CorpusOptions(format="tagged"))


def test_tagged_empty_tag(tmp_path):
    path = write(tmp_path, "d.tsv", "\thello\n")
    with pytest.raises(InputError, match=r"d\.tsv:1: empty tag"):
        read_corpus(path, options=CorpusOptions(format="tagged"))


def test_movielens_u_data_orders_each_user_by_timestamp(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\t300\n2\t11\t3\t100\n1\t12\t4\t100\n1\t13\t2\t200\n")
    corpus = read_corpus(path)
    assert corpus.format == "movielens"
    # user 2 and user 1 both start at t=100; user 2's row comes first in the file.
    assert corpus.sequences == [["11"], ["12", "13", "10"]]


def test_movielens_ratings_dat_and_min_rating(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::10::5::3\n1::11::2::1\n1::12::4::2\n")
    corpus = read_corpus(path, options=CorpusOptions(min_rating=4))
    assert corpus.sequences == [["12", "10"]]
    assert corpus.skipped_lines == 1


def test_movielens_ratings_csv_header(tmp_path):
    path = write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n7,1,4.0,20\n7,2,3.5,10\n")
    assert read_corpus(path).sequences == [["2", "1"]]


def test_movielens_ratings_csv_wrong_header(tmp_path):
    path = write(tmp_path, "ratings.csv", "user,movie,rating,time\n7,1,4.0,20\n")
    with pytest.raises(InputError, match=r"ratings\.csv:1: expected header userId,movieId,rating,timestamp"):
        read_corpus(path, options=CorpusOptions(format="movielens"))


def test_movielens_bad_timestamp_names_the_line(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\t300\n1\t11\t5\tsoon\n")
    with pytest.raises(InputError, match=r"u\.data:2: timestamp 'soon' \(column 3\) is not a number"):
        read_corpus(path)


def test_movielens_wrong_field_count(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\n1\t11\t5\n")
    with pytest.raises(
        InputError, match=r"u\.data:1: expected 4 tab-separated fields \(as in the first lines\), found 3"
    ):
        read_corpus(path)


def test_interactions_with_custom_columns(tmp_path):
    path = write(tmp_path, "events.csv", "who,sku,when,stars\na,x,3,1\na,y,1,5\nb,x,2,5\na,z,0,4\nb,w,1,3\n")
    options = CorpusOptions(user_col="who", item_col="sku", time_col="when", rating_col="stars", min_rating=2)
    corpus = read_corpus(path, options=options)
    assert corpus.format == "interactions"
    assert corpus.sequences == [["z", "y"], ["w", "x"]]
    assert corpus.skipped_lines == 1
    assert corpus.columns == {"user": "'who'", "item": "'sku'", "time": "'when'", "rating": "'stars'"}


def test_interactions_without_timestamp_keep_file_order(tmp_path):
    path = write(tmp_path, "events.tsv", "user\titem\nu\tb\nu\ta\n")
    assert read_corpus(path).sequences == [["b", "a"]]


def test_interactions_unknown_header_names_ask_for_the_option(tmp_path):
    path = write(tmp_path, "events.csv", "who,what\n1,10\n1,11\n")
    with pytest.raises(
        InputError,
        match=r"events\.csv: no column of the header \(who, what\) is a known user column "
        r"name; pass --user-col NAME or a 0-based position",
    ):
        read_corpus(path, options=CorpusOptions(format="interactions"))


def test_interactions_named_column_missing_lists_columns(tmp_path):
    path = write(tmp_path, "events.csv", "uid,item\na,x\na,y\n")
    with pytest.raises(InputError, match=r"events\.csv: no column 'customer' for --user-col; columns are uid, item"):
        read_corpus(path, options=CorpusOptions(user_col="customer"))


def test_auto_detection(tmp_path):
    assert detect_format(write(tmp_path, "u.data", "1\t2\t3\t4\n"), "word2vec", CorpusOptions()) == "movielens"
    assert detect_format(write(tmp_path, "e.csv", "user,item\n"), "word2vec", CorpusOptions()) == "interactions"
    assert detect_format(write(tmp_path, "d.tsv", "a\tb c\n"), "doc2vec", CorpusOptions()) == "tagged"
    assert detect_format(write(tmp_path, "s.txt", "a b\n"), "word2vec", CorpusOptions()) == "lines"


def test_invalid_utf8_names_line_and_byte(tmp_path):
    path = write(tmp_path, "c.txt", b"ok line\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"c\.txt:2: not valid utf-8 \(byte 0xff at column 5\)"):
        read_corpus(path)


def test_other_encoding_is_accepted_when_named(tmp_path):
    path = write(tmp_path, "c.txt", "caf\xe9 th\xe9\n".encode("latin-1"))
    assert read_corpus(path, options=CorpusOptions(encoding="latin-1")).sequences == [["café", "thé"]]


def test_binary_garbage_is_rejected(tmp_path):
    path = write(tmp_path, "c.txt", b"\x00\x01\x02garbage")
    with pytest.raises(InputError, match=r"c\.txt:1: contains NUL bytes"):
        read_corpus(path)


@pytest.mark.parametrize("name, data", [("c.txt", "\n \n"), ("u.data", ""), ("e.csv", "user,item\n")])
def test_empty_corpus_is_an_error(tmp_path, name, data):
    path = write(tmp_path, name, data)
    with pytest.raises(InputError, match="empty corpus"):
        read_corpus(path)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match=r"nope\.txt: no such file"):
        read_corpus(tmp_path / "nope.txt")
    with pytest.raises(OptionError, match="corpus_format: unknown corpus format 'xml'"):
        read_corpus(write(tmp_path, "c.txt", "a"), options=CorpusOptions(format="xml"))


# ---- fixtures shaped like real interaction files (generated, never copies of MovieLens)


def interactions(n_users: int = 30, n_items: int = 60, seed: int = 0) -> list[tuple[int, int, float, int]]:
    """(user, item, rating, timestamp) rows in a shuffled file order, like the real dumps."""
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(1, n_users + 1):
        count = int(rng.integers(4, 12))
        items = rng.choice(np.arange(1, n_items + 1), size=count, replace=False)
        stamps = rng.integers(874_724_710, 893_286_638, size=count)  # ties (rare) keep file order
        ratings = rng.integers(1, 11, size=count) / 2
        rows += [(user, int(i), float(r), int(t)) for i, r, t in zip(items, ratings, stamps, strict=True)]
    order = rng.permutation(len(rows))
    return [rows[j] for j in order]


def expected_sequences(rows, min_rating=None, by_time=True) -> list[list[str]]:
    """Direct computation: users by first interaction, each user's items by time (ties: file order)."""
    kept = [
        (t if by_time else 0, pos, u, i)
        for pos, (u, i, r, t) in enumerate(rows)
        if min_rating is None or r >= min_rating
    ]
    kept.sort(key=lambda row: (row[0], row[1]))
    sequences: dict[int, list[str]] = {}
    for _, _, u, i in kept:
        sequences.setdefault(u, []).append(str(i))
    return list(sequences.values())


def u_data(rows) -> str:  # MovieLens 100K u.data: tab, no header, integer ratings
    return "".join(f"{u}\t{i}\t{int(r)}\t{t}\n" for u, i, r, t in rows)


def ratings_dat(rows) -> str:  # MovieLens 1M/10M ratings.dat: '::'
    return "".join(f"{u}::{i}::{int(r)}::{t}\n" for u, i, r, t in rows)


def ratings_csv(rows) -> str:  # MovieLens latest ratings.csv: header, half-star ratings
    return "userId,movieId,rating,timestamp\n" + "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in rows)


def generic_csv(rows) -> str:  # the uid,iid,score,ts
    return "uid,iid,score,ts\n" + "".join(f"u{u},i{i},{r},{t}\n" for u, i, r, t in rows)


def semicolon_csv(rows) -> str:  # European spreadsheet export: ';' with decimal commas, CRLF
    return "user_id;item_id;rating;timestamp\r\n" + "".join(
        f"{u};{i};{str(r).replace('.', ',')};{t}\r\n" for u, i, r, t in rows
    )


@pytest.mark.parametrize(
    "name, render, prefix",
    [
        ("u.data", u_data, ""),
        ("mydata.tsv", u_data, ""),
        ("ratings.dat", ratings_dat, ""),
        ("mine.dat", ratings_dat, ""),
        ("ratings.csv", ratings_csv, ""),
        ("export.csv", ratings_csv, ""),
        ("events.csv", generic_csv, "i"),
        ("plays.txt", generic_csv, "i"),
        ("export.csv", semicolon_csv, ""),
    ],
)
def test_real_interaction_layouts_give_one_time_ordered_sequence_per_user(tmp_path, name, render, prefix):
    rows = interactions()
    corpus = read_corpus(write(tmp_path, name, render(rows)))
    assert corpus.format == ("movielens" if name in ("u.data", "ratings.dat", "ratings.csv") else "interactions")
    assert corpus.sequences == [[prefix + i for i in seq] for seq in expected_sequences(rows)]
    assert corpus.n_sequences == 30 and corpus.n_tokens == len(rows)
    assert corpus.n_keys == len({i for _, i, _, _ in rows})
    assert "time" in corpus.columns


def test_u_data_copied_to_another_name_is_read_as_the_movielens_layout(tmp_path):
    rows = interactions()
    corpus = read_corpus(write(tmp_path, "mydata.tsv", u_data(rows)), options=CorpusOptions(min_rating=4))
    assert corpus.table.delimiter == "\t" and corpus.table.header is None
    assert corpus.columns == {"user": "column 0", "item": "column 1", "time": "column 3", "rating": "column 2"}
    assert corpus.sequences == expected_sequences(rows, min_rating=4)
    assert corpus.skipped_lines == sum(1 for r in rows if r[2] < 4)
    assert corpus.describe() == (
        f"interactions (tab-separated, no header; user column 0, item column 1, time column 3, rating column 2): "
        f"{corpus.n_sequences} sequences, {corpus.n_tokens} tokens, {corpus.n_keys} distinct keys, "
        f"{corpus.skipped_lines} rows below --min-rating skipped"
    )


def test_summary_is_json_ready(tmp_path):
    import json

    rows = interactions()
    corpus = read_corpus(write(tmp_path, "events.csv", generic_csv(rows)))
    summary = json.loads(json.dumps(corpus.summary()))
    assert summary == {
        "format": "interactions",
        "encoding": "utf-8",
        "sequences": 30,
        "tokens": len(rows),
        "distinct_keys": corpus.n_keys,
        "skipped_rows": 0,
        "delimiter": ",",
        "header": True,
        "columns": {"user": "'uid'", "item": "'iid'", "time": "'ts'"},
    }
    lines = read_corpus(write(tmp_path, "s.txt", "a b\nb c\n")).summary()
    assert lines["format"] == "lines" and lines["delimiter"] is None and lines["columns"] is None


def test_headerless_two_column_table_keeps_file_order(tmp_path):
    path = write(tmp_path, "pairs.tsv", "s1\tx\ns2\ty\ns1\tz\ns2\tx\ns1\ty\n")
    corpus = read_corpus(path)
    assert corpus.format == "interactions" and corpus.columns == {"user": "column 0", "item": "column 1"}
    assert corpus.sequences == [["x", "z", "y"], ["y", "x"]]


def test_headerless_time_column_only_when_asked(tmp_path):
    # 3 columns: not the MovieLens layout, so file order unless --time-col names the column
    data = "1\t10\t30\n1\t11\t20\n2\t10\t5\n2\t12\t1\n"
    assert read_corpus(write(tmp_path, "t.tsv", data)).sequences == [["10", "11"], ["10", "12"]]
    by_time = read_corpus(write(tmp_path, "t.tsv", data), options=CorpusOptions(time_col="2"))
    assert by_time.sequences == [["12", "10"], ["11", "10"]]  # user 2 starts first (t=1)


def test_columns_by_position_and_by_name_agree(tmp_path):
    rows = interactions()
    path = write(tmp_path, "events.csv", generic_csv(rows))
    by_name = read_corpus(path, options=CorpusOptions(user_col="iid", item_col="uid", time_col="ts"))
    by_position = read_corpus(path, options=CorpusOptions(user_col=1, item_col="0", time_col=3))
    assert by_name.sequences == by_position.sequences
    assert by_name.n_keys == 30  # items are now the users


def test_iso_dates_order_like_numbers(tmp_path):
    path = write(
        tmp_path,
        "e.csv",
        "user,item,created_at\na,x,2024-03-02T10:00:00Z\na,y,2024-03-01 09:00:00\nb,x,2024-01-01\nb,z,2024-01-02\n",
    )
    assert read_corpus(path).sequences == [["x", "z"], ["y", "x"]]


def test_quoted_fields_and_trailing_delimiters(tmp_path):
    path = write(tmp_path, "e.csv", 'user,item,ts,\n"a",x,2,\na,"y",1,\nb,x,1,\nb,y,2,\n')
    assert read_corpus(path).sequences == [["y", "x"], ["x", "y"]]


def test_blank_lines_are_skipped_and_bad_rows_name_the_physical_line(tmp_path):
    path = write(tmp_path, "e.csv", "user,item\n\na,x\n\na,y\n" + "b,x\n" * 100 + "b\n")
    with pytest.raises(
        InputError, match=r"e\.csv:106: expected 2 comma-separated fields \(as in the first lines\), found 1"
    ):
        read_corpus(path)


def test_item_with_whitespace_is_refused(tmp_path):
    path = write(tmp_path, "e.csv", "user,item\na,x\na,big y\nb,x\nb,z\n")
    with pytest.raises(InputError, match=r"e\.csv:3: item 'big y' contains whitespace"):
        read_corpus(path)


def test_one_interaction_per_line_as_lines_is_refused(tmp_path):
    # the case: a table read as lines gives one-token sequences of whole rows
    rows = interactions()
    path = write(tmp_path, "mydata.csv", generic_csv(rows))
    with pytest.raises(
        InputError,
        match=r"mydata\.csv: read as lines, \d+ of \d+ lines hold a single token.*"
        r"--corpus-format interactions",
    ):
        read_corpus(path, options=CorpusOptions(format="lines"))


def test_table_rows_as_keys_are_refused(tmp_path):
    # a table with a free-text column is no table to the sniffer; as lines its keys hold commas
    data = "".join(f"{u},Movie number {i} (199{i % 10}),{i}\n" for u in range(5) for i in range(6))
    with pytest.raises(
        InputError,
        match=r"m\.csv: read as lines, \d+ of \d+ distinct keys contain ',' .*"
        r"--corpus-format interactions",
    ):
        read_corpus(write(tmp_path, "m.csv", data))


def test_user_column_that_never_repeats_is_refused(tmp_path):
    path = write(tmp_path, "e.csv", "row,user,item\n1,a,x\n2,a,y\n3,b,x\n4,b,z\n")
    with pytest.raises(InputError, match=r"4 of 4 users \('row'\) have a single item.*--user-col"):
        read_corpus(path, options=CorpusOptions(user_col="row"))
    assert read_corpus(path).sequences == [["x", "y"], ["x", "z"]]  # 'user' is recognised by name


def test_explicit_lines_keeps_constant_width_tab_corpora(tmp_path):
    path = write(tmp_path, "s.txt", "a\tb\tc\nb\tc\td\n")
    with pytest.raises(InputError, match=r"2 of 2 users \(column 0\) have a single item.*--corpus-format lines"):
        read_corpus(path)  # documented: in auto, a constant-width table is read as interactions
    assert read_corpus(path, options=CorpusOptions(format="lines")).sequences == [["a", "b", "c"], ["b", "c", "d"]]


def test_prose_with_commas_stays_lines(tmp_path):
    path = write(tmp_path, "s.txt", "the cat, the dog\na bird, a fish\n")
    assert read_corpus(path).format == "lines"


# ---- text: byte-order marks, UTF-16, CRLF, non-regular and compressed files


@pytest.mark.parametrize(
    "codec, bom",
    [
        ("utf-8", b"\xef\xbb\xbf"),
        ("utf-16-le", b"\xff\xfe"),
        ("utf-16-be", b"\xfe\xff"),
        ("utf-32-le", b"\xff\xfe\x00\x00"),
    ],
)
def test_byte_order_mark_is_stripped_and_selects_the_encoding(tmp_path, codec, bom):
    path = write(tmp_path, "c.txt", bom + "a b caf\u00e9\r\nb a\r\n".encode(codec))
    corpus = read_corpus(path)
    assert corpus.sequences == [["a", "b", "caf\u00e9"], ["b", "a"]]
    assert corpus.encoding == codec


def test_utf16_without_bom_needs_the_option(tmp_path):
    path = write(tmp_path, "c.txt", "a b\nb c\n".encode("utf-16-le"))
    with pytest.raises(InputError, match=r"c\.txt:1: contains NUL bytes.*--encoding utf-16"):
        read_corpus(path)
    assert read_corpus(path, options=CorpusOptions(encoding="utf-16")).sequences == [["a", "b"], ["b", "c"]]


def test_utf16_table_with_bom(tmp_path):
    rows = interactions()
    path = write(tmp_path, "export.csv", generic_csv(rows).encode("utf-16"))
    assert read_corpus(path).sequences == [["i" + i for i in seq] for seq in expected_sequences(rows)]


def test_bad_byte_deep_in_a_large_file_names_its_line_and_column(tmp_path):
    data = b"a b c\n" * 300_000 + b"ok \xff\n"  # beyond the first 1 MiB block
    with pytest.raises(InputError, match=r"c\.txt:300001: not valid utf-8 \(byte 0xff at column 4\)"):
        read_corpus(write(tmp_path, "c.txt", data))


@pytest.mark.parametrize(
    "encoding, problem",
    [
        ("klingon", "unknown encoding 'klingon'"),
        ("", "expected an encoding name"),
        ("base64", "'base64' is not a text encoding"),
    ],
)
def test_bad_encoding_is_an_option_error_before_any_io(encoding, problem):
    with pytest.raises(OptionError, match=problem) as info:
        CorpusOptions(encoding=encoding)
    assert info.value.param == "encoding"


@pytest.mark.parametrize(
    "kwargs, param, problem",
    [
        ({"user_col": "-1"}, "user_col", "negative"),
        ({"item_col": " "}, "item_col", "empty column name"),
        ({"user_col": "a", "item_col": "a"}, "item_col", "already the user column"),
        ({"user_col": 0, "time_col": "0"}, "time_col", "already the user column"),
        ({"min_rating": float("nan")}, "min_rating", "finite"),
        ({"min_rating": float("inf")}, "min_rating", "finite"),
        ({"format": "lines", "user_col": "u"}, "user_col", "interaction tables only"),
        ({"format": "tagged", "min_rating": 3}, "min_rating", "interaction tables only"),
        ({"user_col": 1.5}, "user_col", "column name or a 0-based position"),
    ],
)
def test_corpus_options_validate_themselves(kwargs, param, problem):
    with pytest.raises(OptionError, match=problem) as info:
        CorpusOptions(**kwargs)
    assert info.value.param == param


def test_a_directory_a_fifo_and_a_device_are_refused_without_reading(tmp_path):
    import os

    with pytest.raises(InputError, match="is a directory"):
        read_corpus(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"pipe: is a FIFO, not a regular file"):
        read_corpus(fifo)  # would block forever if opened
    with pytest.raises(InputError, match=r"/dev/zero: is a device, not a regular file"):
        read_corpus("/dev/zero")  # would never end if read


@pytest.mark.parametrize("module", ["gzip", "bz2", "lzma"])
@pytest.mark.parametrize(
    "name, text, options",
    [
        ("c.txt", "a b c\nb c d\nc d a\n", CorpusOptions(format="lines")),
        ("d.tsv", "d1\ta b c\nd2\tb c d\n", CorpusOptions(format="tagged")),
        ("e.csv", "uid,movie,when\nu1,m1,3\nu1,m2,1\nu2,m1,5\nu2,m3,2\n", CorpusOptions(time_col="when")),
        (
            "ratings.csv",
            "userId,movieId,rating,timestamp\n1,10,4,1000002\n1,11,3,1000001\n2,10,5,1000003\n2,12,1,1000004\n",
            CorpusOptions(),
        ),
        ("u.data", "1\t10\t4\t1000002\n1\t11\t3\t1000001\n2\t10\t5\t1000003\n2\t12\t1\t1000004\n", CorpusOptions()),
    ],
)
def test_compressed_corpora_read_as_their_plain_text(tmp_path, module, name, text, options):
    import importlib

    suffix = {"gzip": ".gz", "bz2": ".bz2", "lzma": ".xz"}[module]
    plain = read_corpus(write(tmp_path, name, text), "doc2vec" if options.format == "tagged" else "word2vec", options)
    packed = write(tmp_path, name + suffix, importlib.import_module(module).compress(("\ufeff" + text).encode()))
    read = read_corpus(packed, "doc2vec" if options.format == "tagged" else "word2vec", options)
    assert (read.format, read.sequences, read.tags, read.columns) == (
        plain.format,
        plain.sequences,
        plain.tags,
        plain.columns,
    )


def test_min_rating_without_ratings_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"--min-rating needs a rating column.*--rating-col"):
        read_corpus(write(tmp_path, "e.csv", "user,item\na,x\na,y\n"), options=CorpusOptions(min_rating=3))
    with pytest.raises(InputError, match=r"read as lines, which has no ratings"):
        read_corpus(write(tmp_path, "s.txt", "a b\nc d\n"), options=CorpusOptions(min_rating=3))


def test_pretrain_on_a_renamed_u_data_trains_items_not_rows(tmp_path):
    import json

    from stabcli.cli.app import app

    rows = interactions(n_users=20, n_items=15)
    path = write(tmp_path, "mydata.tsv", u_data(rows))
    result = runner.invoke(
        app,
        [
            "pretrain",
            str(path),
            "--out",
            str(tmp_path / "runs"),
            "--runs",
            "1",
            "--epochs",
            "1",
            "--dim",
            "4",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "runs" / "stabcli.json").read_text())
    assert manifest["corpus"]["format"] == "interactions"
    assert manifest["corpus"]["sequences"] == 20 and manifest["corpus"]["tokens"] == len(rows)
    keys = (tmp_path / "runs" / "keys.txt").read_text().split()
    assert sorted(keys, key=int) == sorted({str(i) for _, i, _, _ in rows}, key=int)


def test_table_field_longer_than_the_csv_limit(tmp_path):
    import csv

    long = "x" * 200_000
    path = write(tmp_path, "e.csv", f'user,item,note\na,x,"{long}, quoted"\na,y,n\nb,x,n\nb,y,n\n')
    before = csv.field_size_limit()
    assert read_corpus(path).sequences == [["x", "y"], ["x", "y"]]
    assert csv.field_size_limit() == before


def test_unbalanced_quote_in_a_table_names_the_line(tmp_path):
    path = write(tmp_path, "e.csv", "user,item\n" + "a,x\n" * 100 + 'b,"y\n')
    with pytest.raises(InputError, match=r"e\.csv:102: malformed quoting"):
        read_corpus(path)


@pytest.mark.parametrize("stamp", ["0001-01-01", "2024-13-01", "1e999", "nan", "-inf"])
def test_time_values_a_platform_cannot_order_are_one_clear_error(tmp_path, stamp):
    path = write(tmp_path, "e.csv", f"user,item,ts\na,x,1\na,y,{stamp}\nb,x,2\nb,y,3\n")
    with pytest.raises(InputError, match=rf"e\.csv:3: timestamp '{stamp}' \('ts'\) is not a number or an ISO date"):
        read_corpus(path)


def test_comma_separated_sessions_of_varying_length_are_refused_with_both_remedies(tmp_path):
    path = write(tmp_path, "sessions.txt", "i1,i2,i3\ni4,i5\ni1,i5,i6,i7\ni2\n")
    with pytest.raises(
        InputError,
        match=r"read as lines, 3 of 4 distinct keys contain ','.*--corpus-format interactions"
        r".*separate the tokens with spaces",
    ):
        read_corpus(path)


@pytest.mark.parametrize("tag", ["doc 1", "doc\u20281", "d\x0bx"])
def test_tag_with_whitespace_is_refused_naming_the_line(tmp_path, tag):
    path = write(tmp_path, "d.tsv", f"ok\thello world\n{tag}\tbye now\n")
    with pytest.raises(InputError, match=r"d\.tsv:2: tag .* contains whitespace, which a key cannot"):
        read_corpus(path, model="doc2vec")


def test_time_col_none_keeps_file_order_when_dates_are_not_iso(tmp_path):
    path = write(tmp_path, "e.csv", "user,item,date\na,x,02/01/2020\na,y,01/01/2020\nb,x,03/01/2020\nb,z,01/01/2020\n")
    with pytest.raises(
        InputError, match=r"e\.csv:2: timestamp '02/01/2020' \('date'\) .*--time-col none keeps file order"
    ):
        read_corpus(path)
    corpus = read_corpus(path, options=CorpusOptions(time_col="None"))
    assert corpus.sequences == [["x", "y"], ["x", "z"]] and "time" not in corpus.columns
    with pytest.raises(OptionError, match="user_col: is required") as info:
        CorpusOptions(user_col="none")
    assert info.value.param == "user_col"


def test_bom_before_a_tag_or_a_header_is_not_part_of_it(tmp_path):
    tagged = read_corpus(write(tmp_path, "d.tsv", "\ufeffdoc0\ta b\ndoc1\tb c\n"), model="doc2vec")
    assert tagged.tags == ["doc0", "doc1"]
    table = read_corpus(write(tmp_path, "e.csv", "\ufeffuser,item\na,x\na,y\n"))
    assert table.columns == {"user": "'user'", "item": "'item'"} and table.sequences == [["x", "y"]]
