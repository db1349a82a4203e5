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
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.embeddings import write_embedding
from stabcli.inputs.keytable import read_key_names
from stabcli.inputs.labels import read_labels


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
    result = runner.invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "e.csv"),
            "--out",
            str(out),
            "--runs",
            "1",
            "--dim",
            "4",
            "--epochs",
            "1",
            "--time-col",
            "when",
            "--min-count",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "user 'uid', item 'movie', time 'when'" in result.stdout
    manifest = json.loads((out / "stabcli.json").read_text())
    assert manifest["corpus"]["columns"] == {"user": "'uid'", "item": "'movie'", "time": "'when'"}
    result = runner.invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "e.csv"),
            "--out",
            str(tmp_path / "j"),
            "--runs",
            "1",
            "--dim",
            "4",
            "--epochs",
            "1",
            "--time-col",
            "when",
            "--min-count",
            "1",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["corpus"]["columns"] == {"user": "'uid'", "item": "'movie'", "time": "'when'"}


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
