"""Tables and text files as they come: extra and mostly empty columns (pandas-written),
the columns a table was read with (summary, JSON, manifest), compressed label and
key-name files, and one encoding rule for MovieLens item files in every command."""

from __future__ import annotations

import gzip
import json
import lzma

import numpy as np
import pandas as pd
import pytest

from conftest import runner
from stabcli.cli.app import app
from stabcli.errors import InputError
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.embeddings import read_embedding, write_embedding
from stabcli.inputs.keytable import read_key_names
from stabcli.inputs.labels import read_labels


def _pretrain(corpus, out, *options: str):
    """One quick run (dim 4, one epoch) of ``stabcli pretrain`` in-process."""
    args = ["pretrain", str(corpus), "--out", str(out), "--runs", "1", "--dim", "4", "--epochs", "1", *options]
    return runner.invoke(app, args)


def _ratings(n_users: int = 12, n_items: int = 9, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [
        (u, int(i), float(rng.integers(1, 6)), 1_260_000_000 + 1000 * u + int(t))
        for u in range(1, n_users + 1)
        for t, i in enumerate(rng.permutation(n_items)[:5] + 1)
    ]
    return pd.DataFrame(rows, columns=["userId", "movieId", "rating", "timestamp"])


@pytest.mark.parametrize("filled", [0, 3])
def test_ratings_csv_with_extra_mostly_empty_columns(tmp_path, filled):
    table = _ratings()
    for j in range(4):
        table[f"Unnamed: {4 + j}"] = ""
    table.iloc[:filled, 7] = "note"  # a few rows use the last column
    text = table.to_csv(index=False).replace("Unnamed: 4,Unnamed: 5,Unnamed: 6,Unnamed: 7", ",,,")
    assert text.splitlines()[0] == "userId,movieId,rating,timestamp,,,,"
    (tmp_path / "ratings.csv").write_text(text)
    plain = _ratings()
    plain.to_csv(tmp_path / "plain.csv", index=False)
    expected = read_corpus(tmp_path / "plain.csv")
    for options in (CorpusOptions(), CorpusOptions(format="interactions")):
        corpus = read_corpus(tmp_path / "ratings.csv", options=options)
        assert corpus.sequences == expected.sequences
        assert corpus.columns == {"user": "'userId'", "item": "'movieId'", "time": "'timestamp'"}


def test_headerless_movielens_layout_with_empty_trailing_columns_keeps_its_time_column(tmp_path):
    plain = _ratings().sample(frac=1.0, random_state=0)  # rows out of time order
    plain.to_csv(tmp_path / "plain.csv", index=False, header=False)
    (tmp_path / "extra.csv").write_text((tmp_path / "plain.csv").read_text().replace("\n", ",,,\n"))
    expected = read_corpus(tmp_path / "plain.csv")
    assert expected.columns["time"] == "column 3"
    corpus = read_corpus(tmp_path / "extra.csv")
    assert corpus.columns == expected.columns
    assert corpus.sequences == expected.sequences


def test_a_header_of_known_columns_is_a_table_even_with_spaces_in_its_fields(tmp_path):
    """``"Customer 7"`` users (and ISO dates) have spaces, as prose does: a first line naming two
    known columns says the file is a table."""
    rows = [(f"Customer {u}", f"P{(u * 3 + k) % 7}", f"2024-03-0{1 + k} 09:00:00") for u in range(9) for k in range(4)]
    pd.DataFrame(rows, columns=["customer_id", "product_id", "event_time"]).to_csv(tmp_path / "e.csv", index=False)
    corpus = read_corpus(tmp_path / "e.csv")
    assert corpus.format == "interactions"
    assert corpus.columns == {"user": "'customer_id'", "item": "'product_id'", "time": "'event_time'"}
    assert corpus.n_sequences == 9
    (tmp_path / "prose.txt").write_text("Well, the cat sat on the mat, and then it ran.\n" * 5)
    assert read_corpus(tmp_path / "prose.txt", options=CorpusOptions(format="auto")).format == "lines"


def test_rows_that_end_early_under_a_header_are_read_as_pandas_reads_them(tmp_path):
    """A note column only some rows fill, or trailing empty columns only some rows carry:
    under a header, a short row's missing last fields are empty (pandas reads both files)."""
    table = _ratings().rename(columns={"userId": "uid", "movieId": "movie", "timestamp": "when"})
    table.to_csv(tmp_path / "plain.csv", index=False)
    lines = (tmp_path / "plain.csv").read_text().splitlines()
    noted = [lines[0] + ",note"] + [line + (",liked it" if i % 5 == 0 else "") for i, line in enumerate(lines[1:])]
    (tmp_path / "noted.csv").write_text("\n".join(noted) + "\n")
    empty = [lines[0] + ",,,"] + [line + (",,," if i % 2 else "") for i, line in enumerate(lines[1:])]
    (tmp_path / "empty.csv").write_text("\n".join(empty) + "\n")
    options = CorpusOptions(time_col="when")
    expected = read_corpus(tmp_path / "plain.csv", options=options)
    for name in ("noted.csv", "empty.csv"):
        assert pd.read_csv(tmp_path / name).shape[0] == len(table)
        corpus = read_corpus(tmp_path / name, options=options)
        assert corpus.sequences == expected.sequences
        assert corpus.columns == {"user": "'uid'", "item": "'movie'", "time": "'when'"}


def test_a_ratings_csv_that_is_not_movielens_is_read_as_the_table_it_is(tmp_path):
    """goodbooks-10k ships ``ratings.csv`` with ``user_id,book_id,rating``: ``auto`` reads it as
    an interactions table; only ``--corpus-format movielens`` asks for MovieLens's header."""
    (tmp_path / "gb").mkdir()
    rows = "".join(f"{u},{(u * 7 + k) % 23},{1 + k % 5}\n" for u in range(1, 15) for k in range(5))
    (tmp_path / "gb" / "ratings.csv").write_text("user_id,book_id,rating\n" + rows)
    (tmp_path / "gb" / "ratings.csv.gz").write_bytes(gzip.compress(b"user_id,book_id,rating\n" + rows.encode()))
    for name in ("ratings.csv", "ratings.csv.gz"):
        corpus = read_corpus(tmp_path / "gb" / name)
        assert corpus.format == "interactions"
        assert corpus.columns == {"user": "'user_id'", "item": "'book_id'"}
    with pytest.raises(InputError, match=r"ratings\.csv:1: expected header userId,movieId,rating,timestamp"):
        read_corpus(tmp_path / "gb" / "ratings.csv", options=CorpusOptions(format="movielens"))


def test_any_time_header_by_time_col_and_the_columns_are_recorded(tmp_path):
    rows = [("u1", "m3", 5, 30), ("u1", "m1", 4, 10), ("u1", "m2", 4, 20), ("u2", "m2", 1, 2), ("u2", "m3", 2, 1)] * 3
    pd.DataFrame(rows, columns=["uid", "movie", "score", "when"]).to_csv(tmp_path / "e.csv", index=False)
    default = read_corpus(tmp_path / "e.csv")
    assert "time" not in default.columns
    assert "no time column (file order)" in default.describe()
    timed = read_corpus(tmp_path / "e.csv", options=CorpusOptions(time_col="when"))
    assert timed.columns == {"user": "'uid'", "item": "'movie'", "time": "'when'"}
    assert timed.sequences[1] == ["m1"] * 3 + ["m2"] * 3 + ["m3"] * 3  # u1 by time; u2 starts earlier
    out = tmp_path / "r"
    result = _pretrain(str(tmp_path / "e.csv"), str(out), "--time-col", "when", "--min-count", "1")
    assert result.exit_code == 0, result.output
    assert "user 'uid', item 'movie', time 'when'" in result.stdout
    manifest = json.loads((out / "stabcli.json").read_text())
    assert manifest["corpus"]["columns"] == {"user": "'uid'", "item": "'movie'", "time": "'when'"}
    result = _pretrain(
        str(tmp_path / "e.csv"), str(tmp_path / "j"), "--time-col", "when", "--min-count", "1", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["corpus"]["columns"] == {"user": "'uid'", "item": "'movie'", "time": "'when'"}


def test_sweep_takes_the_table_options_and_says_how_it_read_the_corpus(tmp_path):
    """sweep reads a table as pretrain does: --time-col (and the other column options,
    --min-rating, --tokenize) on its command line, the columns in its summary and JSON."""
    rows = [(f"u{u}", f"m{(u * 7 + t) % 11}", 4, 1000 * u + t) for u in range(12) for t in range(6)]
    pd.DataFrame(rows, columns=["uid", "movie", "score", "when"]).to_csv(tmp_path / "e.csv", index=False)
    args = ["sweep", str(tmp_path / "e.csv"), "--out", str(tmp_path / "s"), "--runs", "2", "--dim", "4"]
    args += ["--epochs", "1", "--time-col", "when", "--min-rating", "3", "--json", str(tmp_path / "s.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    columns = {"user": "'uid'", "item": "'movie'", "time": "'when'", "rating": "'score'"}
    said = (
        "corpus read as interactions (comma-separated, header; user 'uid', item 'movie', time 'when', rating 'score')"
    )
    assert said in " ".join(result.stdout.split())
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["corpus_columns"] == columns
    assert report["corpus_read"].startswith(said.removeprefix("corpus read as "))
    assert (
        json.loads((tmp_path / "s" / "sweep.json").read_text())["corpus_reading"]["columns"] == report["corpus_columns"]
    )


@pytest.mark.parametrize("tokenize", ["none", "simple"])
def test_a_text_corpus_keeps_each_distinct_token_once_in_memory(tmp_path, tokenize):
    """A compressed corpus is decompressed as a stream; in memory each distinct token is one
    string shared by every sequence that holds it (8 bytes per token, not a string object)."""
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(b"the cat sat\nthe dog sat\n" * 50))
    (tmp_path / "t.tsv").write_text("".join(f"d{i}\tthe cat sat\n" for i in range(50)))
    for name, fmt in (("c.txt.gz", "lines"), ("t.tsv", "tagged")):
        corpus = read_corpus(tmp_path / name, options=CorpusOptions(format=fmt, tokenize=tokenize))
        tokens = [t for seq in corpus.sequences for t in seq]
        assert len(tokens) == (300 if fmt == "lines" else 150)
        assert len({id(t) for t in tokens}) == (corpus.n_keys if fmt == "lines" else 3)


def test_audit_next_item_says_how_it_read_the_interactions(tmp_path):
    rows = [(f"u{u}", f"m{(u * 5 + t) % 31}", 4, 1000 * u + (7 - t)) for u in range(20) for t in range(8)]
    pd.DataFrame(rows, columns=["uid", "movie", "score", "when"]).to_csv(tmp_path / "e.csv", index=False)
    result = _pretrain(tmp_path / "e.csv", tmp_path / "r", "--runs", "2", "--time-col", "when")
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["audit", str(tmp_path / "r"), "--interactions", str(tmp_path / "e.csv"), "--time-col", "when"]
    )
    assert result.exit_code == 0, result.output
    said = "e.csv read as interactions (comma-separated, header; user 'uid', item 'movie', time 'when'): 20 sequences"
    assert said in " ".join(result.stdout.split())


U_ITEM = "1|Caf\u00e9 Society (1995)|01-Jan-1995||http://x|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n"


def test_movielens_item_files_are_latin1_in_labels_and_key_names_also_compressed(tmp_path):
    data = (
        U_ITEM
        + U_ITEM.replace("1|Caf", "2|Caf").replace("|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n", "|0|0|0|0|0|0|0|0|1|0|0|0|0|0\n")
    ).encode("latin-1")
    (tmp_path / "u.item").write_bytes(data)
    (tmp_path / "u.item.gz").write_bytes(gzip.compress(data))
    (tmp_path / "items.xz").write_bytes(lzma.compress(data))  # recognised by its first line
    for name in ("u.item", "u.item.gz", "items.xz"):
        assert read_labels(tmp_path / name, {"1", "2"}).by_key == {"1": "Comedy", "2": "Mystery"}
        assert read_key_names(tmp_path / name) == {"1": "Caf\u00e9 Society (1995)", "2": "Caf\u00e9 Society (1995)"}


def test_movielens_item_files_re_encoded_as_utf8_are_not_read_as_latin1(tmp_path):
    """A u.item or movies.dat converted to UTF-8 (a common first step) was read as latin-1:
    'Caf\u00c3\u00a9' silently. Valid UTF-8 throughout is read as UTF-8; GroupLens's latin-1 as latin-1."""
    utf8 = (U_ITEM + U_ITEM.replace("1|Caf", "2|Caf")).encode("utf-8")
    (tmp_path / "u.item").write_bytes(utf8)
    (tmp_path / "u.item.gz").write_bytes(gzip.compress(utf8))
    (tmp_path / "movies.dat").write_bytes("7::Caf\u00e9 (1995)::Comedy\n".encode())
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "movies.dat").write_bytes("7::Caf\u00e9 (1995)::Comedy\n".encode("latin-1"))
    for name in ("u.item", "u.item.gz"):
        assert read_key_names(tmp_path / name)["1"] == "Caf\u00e9 Society (1995)"
        assert read_labels(tmp_path / name, {"1", "2"}).by_key["1"] == "Comedy"
    assert read_key_names(tmp_path / "movies.dat") == {"7": "Caf\u00e9 (1995)"}
    assert read_key_names(tmp_path / "latin" / "movies.dat") == {"7": "Caf\u00e9 (1995)"}


def test_movielens_movies_files_as_key_names_split_as_their_labels_are(tmp_path):
    """Every movie of a movies.dat with two or more genres has a ``|`` on every line: the
    key-names reader takes the layout the label reader detects (``::``), not the ``|``."""
    lines = [f"{i}::Caf\u00e9 {i} (1995)::Action|Drama\n" for i in range(1, 6)]
    (tmp_path / "movies.dat").write_bytes("".join(lines).encode("latin-1"))
    (tmp_path / "titles.txt").write_bytes((tmp_path / "movies.dat").read_bytes())  # by its first line
    csv_lines = ["movieId,title,genres\n"] + [f'{i},"Caf\u00e9, The|{i} (1995)",Action|Drama\n' for i in range(1, 6)]
    (tmp_path / "movies.csv").write_text("".join(csv_lines), encoding="utf-8")
    for name in ("movies.dat", "titles.txt"):
        names = read_key_names(tmp_path / name)
        assert names["3"] == "Caf\u00e9 3 (1995)", names
        assert read_labels(tmp_path / name, {"1", "3"}).by_key["3"] == "Action"
    assert read_key_names(tmp_path / "movies.csv")["3"] == "Caf\u00e9, The|3 (1995)"


@pytest.mark.parametrize("writer", ["pandas", "R"])
def test_label_and_key_name_tables_with_a_row_index_column(tmp_path, writer):
    """``df.to_csv("f.csv")`` (pandas' default index) and R's ``write.csv`` put a row-index
    column first, under an empty header: it is dropped, not read as the keys."""
    frame = pd.DataFrame({"key": ["a", "b", "c"], "label": ["x", "y", "x"], "name": ["A a", "B b", "C c"]})
    for what in ("label", "name"):
        path = tmp_path / f"{what}.csv"
        if writer == "pandas":
            frame[["key", what]].to_csv(path)
        else:
            rows = [f'"{i + 1}","{k}","{v}"' for i, (k, v) in enumerate(zip(frame.key, frame[what], strict=True))]
            path.write_text(f'"","key","{what}"\n' + "\n".join(rows) + "\n")
    assert read_labels(tmp_path / "label.csv", {"a", "b", "c"}).by_key == {"a": "x", "b": "y", "c": "x"}
    assert read_key_names(tmp_path / "name.csv") == {"key": "name", "a": "A a", "b": "B b", "c": "C c"}


def test_a_short_row_under_a_row_index_header_is_counted_with_the_index(tmp_path):
    """The message counts the row-index column the reader skips: the row has 2 fields of 3,
    not '1 of 2'."""
    (tmp_path / "label.csv").write_text(",key,label\n0,a,x\n1,b,y\n2,c\n")
    with pytest.raises(InputError, match=r"label\.csv:4: expected 3 columns \(row index,key,label\), found 2$"):
        read_labels(tmp_path / "label.csv", {"a", "b", "c"})
    (tmp_path / "plain.csv").write_text("key,label\na,x\nb\n")
    with pytest.raises(InputError, match=r"plain\.csv:3: expected 2 columns \(key,label\), found 1$"):
        read_labels(tmp_path / "plain.csv", {"a", "b"})


def test_audit_refuses_key_names_for_none_of_its_keys_as_drift_does(tmp_path):
    from conftest import assert_bad_input, files_state, make_runset

    root = make_runset(tmp_path / "r", runs=2, n=9)
    (tmp_path / "names.tsv").write_text("".join(f"other{i}\tName {i}\n" for i in range(9)))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(root), "--key-names", str(tmp_path / "names.tsv")])
    assert_bad_input(result, "names.tsv: none of its 9 keys is a compared key (e.g. 'other0')", tmp_path, before)


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress], ids=["gz", "xz"])
def test_keys_and_frequencies_files_may_be_compressed_too(tmp_path, compress):
    from stabcli.inputs.embeddings import read_keys
    from stabcli.inputs.keytable import read_frequencies

    (tmp_path / "keys.txt.gz").write_bytes(compress("\ufeffa\nb\r\nc\n".encode()))
    assert read_keys(tmp_path / "keys.txt.gz") == ["a", "b", "c"]
    (tmp_path / "counts.tsv.gz").write_bytes(compress(b"key\tcount\nthe\t1061\nnew york\t3\n"))
    assert read_frequencies(tmp_path / "counts.tsv.gz") == {"the": 1061, "new york": 3}
    (tmp_path / "cut.txt.gz").write_bytes(compress(b"a\nb\n" * 1000)[:30])
    with pytest.raises(InputError, match=r"cut\.txt\.gz: (gzip|xz) data is truncated or corrupt"):
        read_keys(tmp_path / "cut.txt.gz")


def test_drift_reads_movielens_labels_and_names_without_encoding(tmp_path):
    keys = [str(i) for i in range(1, 41)]
    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 6)).astype(np.float32)
    write_embedding(tmp_path / "before.vec", keys, base)
    (tmp_path / "before.vec.gz").write_bytes(gzip.compress((tmp_path / "before.vec").read_bytes()))
    write_embedding(tmp_path / "after.vec", keys, base + 0.01 * rng.standard_normal((40, 6)).astype(np.float32))
    genres = ["|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0|0|0|0", "|0|0|0|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0"]
    lines = [f"{k}|Caf\u00e9 {k} (1995)|01-Jan-1995||http://x{genres[int(k) % 2]}\n" for k in keys]
    (tmp_path / "u.item").write_bytes("".join(lines).encode("latin-1"))
    result = runner.invoke(
        app,
        [
            "drift",
            str(tmp_path / "before.vec.gz"),
            str(tmp_path / "after.vec"),
            "--labels",
            str(tmp_path / "u.item"),
            "--key-names",
            str(tmp_path / "u.item"),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["downstream"] is not None


# ---- rules: run files keep their run set's keys, run-set outputs are directories, doc2vec needs tags, --tokenize


def test_a_run_file_inside_a_run_set_has_the_run_sets_keys(tmp_path):
    from conftest import make_runset

    root = make_runset(tmp_path / "r", runs=2, n=7)
    emb = read_embedding(root / "run-000" / "vectors.npy")
    assert (emb.keys, emb.keyless) == ([f"k{i}" for i in range(7)], False)
    assert read_embedding(root / "run-001" / "epochs" / "001.npy").keys == emb.keys
    (root / "run-001" / "keys.txt").write_text("".join(f"x{i}\n" for i in range(7)))  # a run's own keys win
    assert read_embedding(root / "run-001" / "vectors.npy").keys[0] == "x0"
    np.save(tmp_path / "vectors.npy", np.ones((7, 2), np.float32))  # not inside a run set: keyless
    assert read_embedding(tmp_path / "vectors.npy").keyless


@pytest.mark.parametrize("name", ["x.npy", "x.wv", "x.model", "x.npy.gz", "x.VEC.bz2"])
def test_featurize_a_run_set_into_a_file_name_is_refused(tmp_path, name):
    """Every name a reader would take for an embedding file (any reading suffix, any case,
    also under a compression suffix) is refused as a run set's output directory."""
    from conftest import assert_bad_input, files_state, make_runset

    root = make_runset(tmp_path / "r", runs=2, n=9)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["featurize", str(root), "--out", str(tmp_path / name), "--dim", "8"])
    assert_bad_input(result, f"{name}: a run set is featurized into a run set (a directory)", tmp_path, before)
    assert f"give a directory name such as {tmp_path / 'x'}" in result.stderr
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("command", ["pretrain", "sweep"])
def test_doc2vec_on_a_lines_corpus_is_refused_before_anything_is_written(tmp_path, command):
    """pretrain and sweep (which wrote its sample and cell directories first, then named the
    sample) refuse it naming the user's corpus, before any work."""
    from conftest import assert_bad_input, files_state

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat\nthe dog ran\n" * 20)
    before = files_state(tmp_path)
    result = runner.invoke(
        app, [command, str(corpus), "--model", "doc2vec", "--corpus-format", "lines", "--out", str(tmp_path / "r")]
    )
    assert_bad_input(
        result, "c.txt: read as lines, which has no document tags; doc2vec learns one vector", tmp_path, before
    )
    assert not (tmp_path / "r").exists()


def test_tokenize_simple_is_gensims_simple_preprocess_and_recorded(tmp_path):
    from gensim.utils import simple_preprocess

    text = "The Cat sat, on THE mat!\nA dog's 2 bones: caf\u00e9 na\u00efve.\n" * 10
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(text.encode()))
    corpus = read_corpus(tmp_path / "c.txt.gz", options=CorpusOptions(format="lines", tokenize="simple"))
    assert corpus.sequences[:2] == [simple_preprocess(line) for line in text.splitlines()[:2]]
    assert corpus.sequences[0] == ["the", "cat", "sat", "on", "the", "mat"]
    assert read_corpus(tmp_path / "c.txt.gz", options=CorpusOptions(format="lines")).sequences[0][0] == "The"
    out = tmp_path / "r"
    result = _pretrain(str(tmp_path / "c.txt.gz"), str(out), "--min-count", "1", "--tokenize", "simple")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "stabcli.json").read_text())["corpus"]["options"]["tokenize"] == "simple"
    assert "The" not in (out / "keys.txt").read_text().split()
    with pytest.raises(InputError, match=r"e\.csv: read as interactions, a table of ids, so --tokenize simple"):
        read_corpus(_write_table(tmp_path / "e.csv"), options=CorpusOptions(tokenize="simple"))


def _write_table(path):
    _ratings().to_csv(path, index=False)
    return path
