from pathlib import Path

import numpy as np
import pytest

from stabcli.embeddings import keys_path_for, read_embedding, require_finite, write_embedding
from stabcli.errors import InputError


@pytest.fixture
def emb():
    rng = np.random.default_rng(0)
    return ["a", "b", "ünï", "d"], rng.standard_normal((4, 5)).astype(np.float32)


@pytest.mark.parametrize("name", ["e.npy", "e.txt", "e.vec", "e.bin", "e.kv", "e.parquet"])
def test_round_trip_every_format(tmp_path, emb, name):
    keys, vectors = emb
    write_embedding(tmp_path / name, keys, vectors)
    got = read_embedding(tmp_path / name)
    assert got.keys == keys
    np.testing.assert_array_equal(np.asarray(got.vectors), vectors)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporaries left


def test_word2vec_files_load_in_gensim(tmp_path, emb):
    from gensim.models import KeyedVectors

    keys, vectors = emb
    write_embedding(tmp_path / "e.txt", keys, vectors)
    write_embedding(tmp_path / "e.bin", keys, vectors)
    for path, binary in ((tmp_path / "e.txt", False), (tmp_path / "e.bin", True)):
        kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
        assert kv.index_to_key == keys
        np.testing.assert_array_equal(kv.vectors, vectors)


def test_npy_without_keys_uses_row_numbers(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, 2), dtype=np.float32))
    assert read_embedding(tmp_path / "m.npy").keys == ["0", "1", "2"]


def test_npy_keys_file_shorter_than_matrix(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, 2), dtype=np.float32))
    keys_path_for(tmp_path / "m.npy").write_text("a\nb\n")
    with pytest.raises(InputError, match=r"m\.keys\.txt: 2 keys for 3 rows in m\.npy"):
        read_embedding(tmp_path / "m.npy")


def test_duplicate_keys_are_rejected(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, 2), dtype=np.float32))
    keys_path_for(tmp_path / "m.npy").write_text("a\nb\na\n")
    with pytest.raises(InputError, match=r"m\.keys\.txt:3: duplicate key 'a' \(first on line 1\)"):
        read_embedding(tmp_path / "m.npy")


@pytest.mark.parametrize("array, message", [
    (np.ones(3), r"expected a 2-d matrix"),
    (np.array([["a", "b"]]), r"expected a numeric matrix"),
])
def test_npy_wrong_rank_or_dtype(tmp_path, array, message):
    np.save(tmp_path / "m.npy", array)
    with pytest.raises(InputError, match=message):
        read_embedding(tmp_path / "m.npy")


def test_truncated_npy(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((100, 8), dtype=np.float32))
    data = (tmp_path / "m.npy").read_bytes()
    (tmp_path / "m.npy").write_bytes(data[:200])
    with pytest.raises(InputError, match=r"m\.npy: not a readable \.npy file"):
        read_embedding(tmp_path / "m.npy")


def test_word2vec_header_lies_about_count(tmp_path):
    (tmp_path / "e.txt").write_text("3 2\na 1 2\nb 3 4\n")
    with pytest.raises(InputError, match=r"e\.txt: header says 3 vectors, found 2"):
        read_embedding(tmp_path / "e.txt")


def test_word2vec_header_lies_about_dimension(tmp_path):
    (tmp_path / "e.txt").write_text("2 3\na 1 2\nb 3 4\n")
    with pytest.raises(InputError, match=r"e\.txt:2: expected 4 fields \(key \+ 3 values\), found 3"):
        read_embedding(tmp_path / "e.txt")


def test_word2vec_text_non_numeric_value(tmp_path):
    (tmp_path / "e.txt").write_text("1 2\na 1 x\n")
    with pytest.raises(InputError, match=r"e\.txt:2: vector values are not all numbers"):
        read_embedding(tmp_path / "e.txt")


def test_word2vec_bad_header(tmp_path):
    (tmp_path / "e.txt").write_text("hello world\n")
    with pytest.raises(InputError, match=r"e\.txt:1: expected a word2vec header 'count dim'"):
        read_embedding(tmp_path / "e.txt")


def test_truncated_word2vec_binary(tmp_path, emb):
    keys, vectors = emb
    write_embedding(tmp_path / "e.bin", keys, vectors)
    data = (tmp_path / "e.bin").read_bytes()
    (tmp_path / "e.bin").write_bytes(data[:-15])
    with pytest.raises(InputError, match=r"e\.bin: vector 4 of 4: file ends early"):
        read_embedding(tmp_path / "e.bin")


def test_unknown_suffix_and_missing_file(tmp_path):
    (tmp_path / "e.xyz").write_text("x")
    with pytest.raises(InputError, match=r"e\.xyz: unknown embedding format"):
        read_embedding(tmp_path / "e.xyz")
    with pytest.raises(InputError, match=r"none\.npy: no such file"):
        read_embedding(tmp_path / "none.npy")


def test_kv_file_that_is_not_keyedvectors(tmp_path):
    (tmp_path / "e.kv").write_bytes(b"not a pickle")
    with pytest.raises(InputError, match=r"e\.kv: not a readable gensim save\(\) file"):
        read_embedding(tmp_path / "e.kv")


def test_require_finite_names_the_first_bad_key_and_accepts_sums_that_overflow():
    big = np.full((3, 4), np.finfo(np.float32).max, np.float32)  # finite rows whose sum overflows
    require_finite(Path("e.npy"), ["a", "b", "c"], big)
    for bad in (np.nan, np.inf, -np.inf):
        block = np.ones((3, 4), np.float32)
        block[2, 1] = bad
        with pytest.raises(InputError, match=r"e\.npy: key 'd' has NaN or infinite values"):
            require_finite(Path("e.npy"), ["a", "b", "c", "d"], block, start=1)
