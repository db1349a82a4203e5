"""Property-based tests: any bytes give a parsed result or a StabcliError, never another
exception; every writable format round-trips keys and vectors exactly."""

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stabcli.commands.audit import parse_check, resolve
from stabcli.errors import StabcliError
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.embeddings import read_embedding, write_embedding
from stabcli.inputs.labels import read_labels

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# text that looks like our formats, so the fuzzer gets past the first line as well as failing on it
TOKENS = st.sampled_from(
    [
        "a",
        "b",
        "k0",
        "1",
        "-2.5",
        "nan",
        "inf",
        "1e40",
        "\t",
        " ",
        "::",
        "|",
        ",",
        "\n",
        "\r\n",
        "\x00",
        "\xe9",
        "\ud7ff",
        "3 2",
        "user",
        "item",
        "timestamp",
        "rating",
        '"',
    ]
)
TEXTISH = st.lists(TOKENS, max_size=40).map(lambda parts: "".join(parts).encode("utf-8", "surrogatepass"))
BYTES = st.one_of(st.binary(max_size=300), TEXTISH)


@contextmanager
def written(data: bytes, name: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="stabcli-fuzz-") as directory:
        path = Path(directory) / name
        path.write_bytes(data)
        yield path


@FUZZ
@given(data=BYTES, fmt=st.sampled_from(["lines", "tagged", "movielens", "interactions", "auto"]))
def test_corpus_readers_parse_or_raise_stabcli_error(data, fmt):
    try:
        with written(data, "ratings.csv" if fmt == "movielens" else "corpus.txt") as path:
            corpus = read_corpus(path, "doc2vec" if fmt == "tagged" else "word2vec", CorpusOptions(format=fmt))
    except StabcliError:
        return
    assert corpus.n_tokens > 0 and all(isinstance(t, str) for seq in corpus.sequences for t in seq)


@FUZZ
@given(data=BYTES, suffix=st.sampled_from([".txt", ".vec", ".bin", ".npy"]))
def test_embedding_readers_parse_or_raise_stabcli_error(data, suffix):
    try:
        with written(data, "e" + suffix) as path:
            emb = read_embedding(path)
            vectors = np.array(emb.vectors)  # a copy: the file (and a memory map of it) goes away
    except StabcliError:
        return
    assert vectors.ndim == 2 and vectors.shape[0] == len(emb.keys) and len(set(emb.keys)) == len(emb.keys)


@FUZZ
@given(data=BYTES, name=st.sampled_from(["labels.csv", "u.item", "movies.dat", "movies.csv"]))
def test_label_reader_parses_or_raises_stabcli_error(data, name):
    try:
        with written(data, name) as path:
            labels = read_labels(path, {"a", "b", "1"})
    except StabcliError:
        return
    assert labels.by_key and all(isinstance(v, str) and v for v in labels.by_key.values())


REPORT = {
    "representation": {"knn_overlap": 0.5, "least_stable": [{"key": "x", "aligned_variance": 0.1}]},
    "downstream": {"variants": {"phi:64@0.5": {"churn": 0.01}}},
    "passed": True,
}


@FUZZ
@given(
    expression=st.one_of(
        st.text(max_size=60),
        st.lists(
            st.sampled_from(
                [
                    "representation",
                    "downstream",
                    "variants",
                    "phi:64@0",
                    "5",
                    "churn",
                    "knn_overlap",
                    "least_stable",
                    "0",
                    "aligned_variance",
                    ".",
                    "<=",
                    ">",
                    "==",
                    "<",
                    "0.5",
                    "1e3",
                    "nan",
                    " ",
                    "x",
                ]
            ),
            max_size=12,
        ).map("".join),
    )
)
def test_check_expressions_parse_or_raise_usage_error(expression):
    try:
        path, op, threshold = parse_check(expression)
        value = resolve(REPORT, path)
    except StabcliError:
        return
    assert op in ("<", "<=", ">", ">=", "==") and isinstance(threshold, float) and isinstance(value, float)


KEYS = st.lists(
    st.text(
        st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="\x85"),
        min_size=1,
        max_size=8,
    ),
    min_size=1,
    max_size=12,
    unique=True,
)


@FUZZ
@given(
    keys=KEYS,
    dim=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    name=st.sampled_from(["e.npy", "e.txt", "e.vec", "e.bin", "e.kv", "e.parquet"]),
)
def test_every_format_round_trips(keys, dim, seed, name):
    if name == "e.parquet":
        pytest.importorskip("pyarrow")
    vectors = np.random.default_rng(seed).standard_normal((len(keys), dim)).astype(np.float32) * 10.0 ** (seed % 7 - 3)
    with written(b"", name) as path:
        write_embedding(path, keys, vectors)
        got = read_embedding(path)
        assert got.keys == keys
        np.testing.assert_array_equal(np.asarray(got.vectors), vectors)
