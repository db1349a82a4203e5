import re
from pathlib import Path

import numpy as np
import pytest

from stabcli.errors import InputError
from stabcli.inputs.embeddings import keys_path_for, read_embedding, require_finite, write_embedding


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


@pytest.mark.parametrize(
    "array, message",
    [
        (np.ones(3), r"expected a 2-d matrix"),
        (np.array([["a", "b"]]), r"expected a numeric matrix"),
    ],
)
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


# --- gensim save() files through the safe unpickler -------------------------------------

SENTENCES = [["a", "b", "c", "d"], ["b", "c", "e"], ["a", "e", "f"]] * 5


def _gensim_objects():
    from gensim.models import Doc2Vec, FastText, KeyedVectors, Word2Vec
    from gensim.models.doc2vec import TaggedDocument

    kv = KeyedVectors(4)
    kv.add_vectors(["x", "y z", "ü"], np.arange(12, dtype=np.float32).reshape(3, 4))
    small = {"vector_size": 4, "min_count": 1, "epochs": 1, "workers": 1, "seed": 1}
    w2v = Word2Vec(SENTENCES, **small)
    d2v = Doc2Vec([TaggedDocument(s, [f"doc{i}"]) for i, s in enumerate(SENTENCES)], **small)
    d2v_int = Doc2Vec([TaggedDocument(s, [i]) for i, s in enumerate(SENTENCES)], dm=1, **small)
    ft = FastText(SENTENCES, bucket=50, **small)
    # (object, the KeyedVectors stabcli must read from it)
    return {
        "kv": (kv, kv),
        "word2vec": (w2v, w2v.wv),
        "doc2vec": (d2v, d2v.dv),
        "doc2vec-int-tags": (d2v_int, d2v_int.dv),
        "fasttext": (ft, ft.wv),
        "word2vec.wv": (w2v.wv, w2v.wv),
        "fasttext.wv": (ft.wv, ft.wv),
    }


@pytest.mark.parametrize("separately", [None, []], ids=["arrays-beside", "one-file"])
@pytest.mark.parametrize(
    "kind", ["kv", "word2vec", "doc2vec", "doc2vec-int-tags", "fasttext", "word2vec.wv", "fasttext.wv"]
)
def test_gensim_save_files_read_safely(tmp_path, kind, separately):
    obj, kv = _gensim_objects()[kind]
    suffix = {"kv": ".kv", "word2vec.wv": ".wv", "fasttext.wv": ".wv"}.get(kind, ".model")
    path = tmp_path / f"m{suffix}"
    obj.save(str(path), sep_limit=0, separately=separately)  # sep_limit=0: every array beside the file
    if separately is None and kind != "kv":
        assert len(list(tmp_path.glob("m*.npy"))) >= 1
    got = read_embedding(path)
    assert got.keys == [str(k) for k in kv.index_to_key]
    np.testing.assert_allclose(np.asarray(got.vectors), kv.vectors, rtol=1e-6)
    assert not got.keyless


@pytest.mark.parametrize("compression", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("kind", ["kv", "word2vec", "fasttext"])
def test_compressed_gensim_save_files_with_their_arrays(tmp_path, kind, compression):
    """gensim's save("m.kv.gz") compresses the pickle and stores its large arrays as
    NAME.ATTR.npz (.gz, .bz2) or .npy (other names); its own load reads them back: so does stabcli."""
    obj, kv = _gensim_objects()[kind]
    path = tmp_path / f"m{'.kv' if kind == 'kv' else '.model'}{compression}"
    obj.save(str(path), sep_limit=0)
    beside = "npy" if compression == ".xz" else "npz"
    assert list(tmp_path.glob(f"m*.{beside}")), list(tmp_path.iterdir())
    got = read_embedding(path)
    assert got.keys == [str(k) for k in kv.index_to_key]
    np.testing.assert_allclose(np.asarray(got.vectors), kv.vectors, rtol=1e-6)
    for array in tmp_path.glob(f"m*.{beside}"):
        array.unlink()
    with pytest.raises(InputError, match=rf"\.{beside}: missing \(gensim saved"):
        read_embedding(path)
    if beside == "npz":  # an .npz that is not gensim's (no 'val' array)
        obj.save(str(path), sep_limit=0)
        for array in tmp_path.glob("m*.npz"):
            np.savez_compressed(array, other=np.ones(3))
        with pytest.raises(InputError, match=r"\.npz: not a readable \.npz file .*'val'"):
            read_embedding(path)


def test_truncated_gensim_files_name_the_file(tmp_path):
    obj, _ = _gensim_objects()["kv"]
    obj.save(str(tmp_path / "m.kv.gz"), separately=[])
    data = (tmp_path / "m.kv.gz").read_bytes()
    (tmp_path / "cut.kv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.kv\.gz: gzip data is truncated or corrupt"):
        read_embedding(tmp_path / "cut.kv.gz")
    (tmp_path / "empty.kv").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.kv: not a readable gensim save\(\) file \(EOFError"):
        read_embedding(tmp_path / "empty.kv")


def test_safe_loader_admits_exactly_what_gensim_saves(tmp_path):
    """Every global a real save() references is on the list (found by recording find_class)."""
    import pickle

    from stabcli.inputs.safe_pickle import ALLOWED

    seen = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    for name, (obj, _) in _gensim_objects().items():
        obj.save(str(tmp_path / name), separately=[])
        with open(tmp_path / name, "rb") as fh:
            Recorder(fh, encoding="latin1").load()
    assert seen <= ALLOWED, seen - ALLOWED
    assert ("gensim.models.doc2vec", "Doc2Vec") in seen and ("numpy", "ndarray") in seen


def test_fasttext_bin_is_detected_by_magic_number(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    model = FastText(SENTENCES, vector_size=4, min_count=1, epochs=1, workers=1, bucket=50)
    save_facebook_model(model, str(tmp_path / "ft.bin"))
    got = read_embedding(tmp_path / "ft.bin")
    assert got.keys == model.wv.index_to_key
    np.testing.assert_allclose(np.asarray(got.vectors), model.wv.vectors, rtol=1e-6)
    # the same file named .dat, read by --input-format
    (tmp_path / "ft.dat").write_bytes((tmp_path / "ft.bin").read_bytes())
    assert read_embedding(tmp_path / "ft.dat", "fasttext").keys == model.wv.index_to_key


def test_input_format_overrides_the_suffix(tmp_path, emb):
    keys, vectors = emb
    write_embedding(tmp_path / "e.txt", keys, vectors)
    (tmp_path / "e.emb").write_bytes((tmp_path / "e.txt").read_bytes())
    assert read_embedding(tmp_path / "e.emb", "word2vec").keys == keys
    write_embedding(tmp_path / "w.bin", keys, vectors)
    (tmp_path / "w.data").write_bytes((tmp_path / "w.bin").read_bytes())
    np.testing.assert_array_equal(read_embedding(tmp_path / "w.data", "word2vec-bin").vectors, vectors)
    with pytest.raises(InputError, match=r"not a fastText \.bin file"):
        read_embedding(tmp_path / "w.bin", "fasttext")


def _evil(tmp_path, call, protocol):
    import pickle

    class Evil:
        def __reduce__(self):
            return call

    path = tmp_path / "evil.kv"
    path.write_bytes(pickle.dumps(Evil(), protocol=protocol))
    return path


def _crafted(marker):
    import builtins
    import os
    import subprocess
    import sys

    return {
        "os.system": ((os.system, (f"touch {marker}",)), "posix.system"),
        "sys.exit": ((sys.exit, (0,)), "sys.exit"),
        "builtins.eval": ((builtins.eval, (f"open({str(marker)!r}, 'w')",)), "builtins.eval"),
        "builtins.exec": ((builtins.exec, (f"open({str(marker)!r}, 'w')",)), "builtins.exec"),
        "subprocess.Popen": ((subprocess.Popen, (["touch", str(marker)],)), "subprocess.Popen"),  # "commands" in 0-2
        "builtins.open": ((builtins.open, (str(marker), "w")), "io.open"),
    }


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
@pytest.mark.parametrize(
    "name", ["os.system", "sys.exit", "builtins.eval", "builtins.exec", "subprocess.Popen", "builtins.open"]
)
def test_crafted_pickles_are_refused_without_running(tmp_path, name, protocol):
    marker = tmp_path / "MARKER"
    call, qualname = _crafted(marker)[name]
    path = _evil(tmp_path, call, protocol)
    with pytest.raises(InputError, match=rf"evil\.kv: refusing to load {qualname}: .*--trust-pickle"):
        read_embedding(path)
    assert not marker.exists()


def test_gensim_class_called_with_arguments_is_refused(tmp_path):
    from gensim.models import Word2Vec

    path = _evil(tmp_path, (Word2Vec, ([["a", "b"]],)), 4)  # a constructor call would train (or read corpus_file)
    with pytest.raises(
        InputError, match=r"refusing to load gensim\.models\.word2vec\.Word2Vec: called as a constructor"
    ):
        read_embedding(path)


def test_pickle_that_modifies_a_class_is_refused(tmp_path):
    import pickle

    from gensim.models import KeyedVectors

    # GLOBAL KeyedVectors, then BUILD (None, {'load': hash}): would patch the class process-wide
    state = pickle.dumps((None, {"load": hash}), protocol=0).rstrip(b".")
    (tmp_path / "patch.kv").write_bytes(
        b"cgensim.models.keyedvectors\nKeyedVectors\n" + state + pickle.BUILD + pickle.STOP
    )
    with pytest.raises(
        InputError,
        match=r"patch\.kv: refusing to load gensim\.models\.keyedvectors\.KeyedVectors: "
        r"has its class modified",
    ):
        read_embedding(tmp_path / "patch.kv")
    assert KeyedVectors.load is not hash  # only the unpickler's throwaway stand-in was changed


def test_trusted_pickle_that_exits_is_an_input_error(tmp_path):
    import sys

    path = _evil(tmp_path, (sys.exit, (0,)), 4)
    with pytest.raises(
        InputError, match=r"evil\.kv: not a readable gensim save\(\) file \(SystemExit while unpickling\)"
    ):
        read_embedding(path, trust_pickle=True)


def test_trusted_pickle_loads_gensim_files_too(tmp_path):
    obj, kv = _gensim_objects()["word2vec"]
    obj.save(str(tmp_path / "m.model"))
    assert read_embedding(tmp_path / "m.model", trust_pickle=True).keys == kv.index_to_key


def test_separately_saved_array_names_cannot_escape(tmp_path):
    obj, _ = _gensim_objects()["kv"]
    obj.save(str(tmp_path / "m.kv"), separately=[])
    from stabcli.inputs.safe_pickle import attach_arrays

    obj.__dict__["__numpys"] = ["../../etc/passwd"]
    with pytest.raises(InputError, match="malformed list of separately saved attributes"):
        attach_arrays(obj, tmp_path / "m.kv", str(tmp_path / "m.kv"), 0)


def test_missing_companion_array_is_named(tmp_path):
    obj, _ = _gensim_objects()["word2vec"]
    obj.save(str(tmp_path / "m.model"), sep_limit=0)
    (tmp_path / "m.model.wv.vectors.npy").unlink()
    with pytest.raises(InputError, match=r"m\.model\.wv\.vectors\.npy: missing \(gensim saved 'vectors' of m\.model"):
        read_embedding(tmp_path / "m.model")


# --- dtypes, headers, writers --------------------------------------------------------------


@pytest.mark.parametrize(
    "array, dtype",
    [
        (np.ones((2, 3), dtype=np.complex64), "complex64 (complex)"),
        (np.ones((2, 3), dtype=bool), "bool (boolean)"),
        (np.array([["a", "b"]]), "<U1 (string)"),
        (np.array([[b"a", b"b"]]), "|S1 (bytes)"),
        (np.zeros((2, 3), dtype="datetime64[s]"), "datetime64[s] (datetime)"),
        (np.zeros((2, 3), dtype="timedelta64[s]"), "timedelta64[s] (timedelta)"),
    ],
)
def test_npy_vectors_that_are_not_real_numbers(tmp_path, array, dtype):
    np.save(tmp_path / "m.npy", array)
    with pytest.raises(InputError, match=rf"m\.npy: vectors have dtype {re.escape(dtype)}"):
        read_embedding(tmp_path / "m.npy")


def test_object_npy_is_refused_without_unpickling(tmp_path):
    np.save(tmp_path / "m.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match=r"m\.npy: vectors have dtype object"):
        read_embedding(tmp_path / "m.npy")


@pytest.mark.parametrize(
    "header, found", [(b"999999999999 4", "found 1"), (b"2 99999999999999", "cannot hold even one")]
)
def test_word2vec_header_never_sizes_an_allocation(tmp_path, header, found):
    (tmp_path / "e.txt").write_bytes(header + b"\na 1 2 3 4\n")
    with pytest.raises(InputError, match=found):
        read_embedding(tmp_path / "e.txt")
    (tmp_path / "e.bin").write_bytes(header + b"\na " + np.ones(4, "<f4").tobytes())
    with pytest.raises(
        InputError, match=r"e\.bin(: vector 2 of 999999999999: file ends early|:1: .*cannot hold even one)"
    ):
        read_embedding(tmp_path / "e.bin")


def test_binary_header_garbage_is_not_echoed(tmp_path):
    (tmp_path / "e.bin").write_bytes(b"\x00\xff\x13\x07binary\n" + bytes(range(256)))
    with pytest.raises(InputError, match=r"e\.bin:1: expected a word2vec header 'count dim', found binary data$"):
        read_embedding(tmp_path / "e.bin")


@pytest.mark.parametrize(
    "name, keys, message",
    [
        ("o.txt", ["a b", "c"], "contains whitespace, which word2vec cannot store"),
        ("o.vec", ["a\tb", "c"], "contains whitespace"),
        ("o.bin", ["a\nb", "c"], "contains whitespace, which word2vec-bin cannot store"),
        ("o.npy", ["a\nb", "c"], "contains a line break"),
        ("o.npy", ["a\rb", "c"], "contains a line break"),
        ("o.npy", ["", "c"], "empty or non-string key"),
        ("o.kv", ["a", "a"], "cannot write key 'a' twice"),
        ("o.parquet", ["a", "\udc80"], "not valid Unicode"),
    ],
)
def test_writers_refuse_keys_their_reader_rejects(tmp_path, name, keys, message):
    with pytest.raises(InputError, match=re.escape(message)):
        write_embedding(tmp_path / name, keys, np.ones((2, 3)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "vectors, message",
    [
        (np.zeros((0, 3)), "nothing to write (0 rows"),
        (np.zeros((2, 0)), "nothing to write (2 rows, 0 columns)"),
        (np.array([[1.0, np.nan]] * 2), "cannot write key 'a': its values are NaN"),
        (np.array([[1.0, 1e300], [1.0, 1.0]]), "beyond float32's range"),
    ],
)
def test_writers_refuse_empty_or_non_finite(tmp_path, vectors, message):
    keys = ["a", "b"][: vectors.shape[0]]
    for name in ("o.npy", "o.txt", "o.kv"):
        with pytest.raises(InputError, match=re.escape(message)):
            write_embedding(tmp_path / name, keys, vectors)
    assert list(tmp_path.iterdir()) == []


# --- keyless arrays --------------------------------------------------------------------------


def _emb(keys, rows=3, keyless=False, name="x"):
    from stabcli.inputs.embeddings import Embedding

    return Embedding(list(keys), np.ones((rows, 2), np.float32), Path(f"{name}.npy"), keyless=keyless)


def test_npy_without_keys_is_keyless(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, 2), dtype=np.float32))
    assert read_embedding(tmp_path / "m.npy").keyless
    keys_path_for(tmp_path / "m.npy").write_text("a\nb\nc\n")
    assert not read_embedding(tmp_path / "m.npy").keyless


def test_match_inputs_refuses_keyless_mixed_with_keyed():
    from stabcli.inputs.embeddings import match_inputs

    with pytest.raises(InputError, match=r"a\.npy: has no keys file \(a\.keys\.txt\), but b\.npy has keys.*--keys"):
        match_inputs([_emb("012", keyless=True, name="a"), _emb("xyz", name="b")])


def test_match_inputs_all_keyless_notes_position_matching():
    from stabcli.inputs.embeddings import match_inputs

    notes = []
    inputs = [_emb("012", keyless=True, name="a"), _emb("012", keyless=True, name="b")]
    assert match_inputs(inputs, on_note=notes.append) == inputs
    assert notes == ["no input has a keys file: rows are matched by position"]
    with pytest.raises(InputError, match=r"b\.npy: 4 rows, but a\.npy has 3"):
        match_inputs([inputs[0], _emb("0123", rows=4, keyless=True, name="b")])


def test_match_inputs_keys_file_names_the_keyless_rows(tmp_path):
    from stabcli.errors import OptionError
    from stabcli.inputs.embeddings import match_inputs

    (tmp_path / "k.txt").write_text("x\ny\nz\n")
    got = match_inputs([_emb("012", keyless=True, name="a"), _emb("xyz", name="b")], tmp_path / "k.txt")
    assert [e.keys for e in got] == [["x", "y", "z"], ["x", "y", "z"]] and not got[0].keyless
    with pytest.raises(InputError, match=r"k\.txt: 3 keys for 4 rows in a\.npy"):
        match_inputs([_emb("0123", rows=4, keyless=True, name="a")], tmp_path / "k.txt")
    with pytest.raises(OptionError, match="every input already has keys"):
        match_inputs([_emb("xyz", name="b")], tmp_path / "k.txt")


def test_same_vectors_as_npy_and_vec_are_matched_by_key(tmp_path):
    """Issue 14: the same vectors once as .npy (no keys) and once as .vec with the rows in
    another order were compared by row number (1.1% neighbours stable)."""
    from stabcli.commands.audit import load_runs
    from stabcli.inputs.embeddings import ReadOptions

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 4)).astype(np.float32)
    keys = [f"w{i}" for i in range(30)]
    np.save(tmp_path / "a.npy", vectors)
    order = rng.permutation(30)
    write_embedding(tmp_path / "b.vec", [keys[i] for i in order], vectors[order])
    (tmp_path / "keys.txt").write_text("\n".join(keys) + "\n")
    runs = load_runs([tmp_path / "a.npy", tmp_path / "b.vec"], read=ReadOptions(keys_file=tmp_path / "keys.txt"))
    np.testing.assert_array_equal(np.asarray(runs.arrays[0]), np.asarray(runs.arrays[1]))


@pytest.mark.parametrize("call", ["randomstate-with-model", "generator-with-model", "bit-generator-class"])
def test_numpy_random_helpers_cannot_call_other_classes(tmp_path, call):
    """numpy's pickling helpers call a callable given in the file: only numpy's own is accepted."""
    from gensim.models import Word2Vec
    from numpy.random import _pickle as numpy_pickle

    calls = {
        "randomstate-with-model": (getattr(numpy_pickle, "__randomstate_ctor"), ([["a", "b"]], Word2Vec)),
        "generator-with-model": (getattr(numpy_pickle, "__generator_ctor"), ([["a", "b"]], Word2Vec)),
        "bit-generator-class": (getattr(numpy_pickle, "__bit_generator_ctor"), (Word2Vec,)),
    }
    path = _evil(tmp_path, calls[call], 4)
    with pytest.raises(InputError, match=r"refusing to load numpy\.random\._pickle\.__\w+_ctor"):
        read_embedding(path)


def test_pickle_that_rewires_a_stand_in_constructor_still_trains_nothing(tmp_path):
    """GLOBAL Word2Vec, BUILD it with __init__ = hash, then call it with a corpus: the
    class is the unpickler's stand-in, and no gensim constructor ever runs."""
    import pickle

    from gensim.models import Word2Vec

    state = pickle.dumps((None, {"__init__": hash}), protocol=0).rstrip(b".")
    call = pickle.dumps(([["a", "b"]],), protocol=0).rstrip(b".")
    data = b"cgensim.models.word2vec\nWord2Vec\n" + state + pickle.BUILD + call + pickle.REDUCE + pickle.STOP
    (tmp_path / "rewire.model").write_bytes(data)
    with pytest.raises(
        InputError,
        match=r"rewire\.model: refusing to load gensim\.models\.word2vec\.Word2Vec: "
        r"has its class modified",
    ):
        read_embedding(tmp_path / "rewire.model")
    assert Word2Vec.__init__ is not hash


def test_a_utf8_byte_order_mark_is_not_part_of_a_header_or_a_key(tmp_path):
    """Editors on Windows write a BOM: it once made a .vec 'binary data' and the first key
    of a keys file '\\ufeffk0' (silently dropped from the comparison)."""
    (tmp_path / "b.vec").write_bytes(b"\xef\xbb\xbf2 2\nk0 1 2\nk1 3 4\n")
    assert read_embedding(tmp_path / "b.vec").keys == ["k0", "k1"]
    np.save(tmp_path / "c.npy", np.ones((2, 2), np.float32))
    (tmp_path / "c.keys.txt").write_bytes(b"\xef\xbb\xbfk0\nk1\n")
    assert read_embedding(tmp_path / "c.npy").keys == ["k0", "k1"]
