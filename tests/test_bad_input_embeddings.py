"""Bad embedding inputs through the real commands: crafted pickles, broken gensim and
fastText files, vectors that are not real numbers, lying headers, keyless mixes, bad
``--keys`` files and writer refusals. Each is exit 2 with one ``error:`` line naming the
file or option, and nothing under tmp_path changes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

KEYS = [f"k{i}" for i in range(12)]
SENTENCES = [["a", "b", "c", "d"], ["b", "c", "e"], ["a", "e", "f"]] * 5


def _vectors(seed: int = 0, rows: int = 12, dim: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A valid keyed input to pair each bad file with."""
    path = tmp_path / "good.npy"
    write_embedding(path, KEYS, _vectors())
    return path


def _pickle_of(call: tuple, protocol: int = 4) -> bytes:
    class Crafted:
        def __reduce__(self):
            return call

    return pickle.dumps(Crafted(), protocol=protocol)


def _kv(keys: list, vectors) -> object:
    from gensim.models import KeyedVectors

    kv = KeyedVectors(4)
    kv.add_vectors([f"w{i}" for i in range(3)], np.ones((3, 4), np.float32))
    kv.index_to_key = keys
    kv.vectors = vectors
    return kv


def _save(obj, path: Path, **kwargs) -> Path:
    obj.save(str(path), **kwargs)
    return path


def _word2vec():
    from gensim.models import Word2Vec

    return Word2Vec(SENTENCES, vector_size=4, min_count=1, epochs=1, workers=1, seed=1)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _npy(path: Path, array, **kwargs) -> Path:
    np.save(path, array, **kwargs)
    return path


def _fasttext_bin(path: Path) -> Path:
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    save_facebook_model(FastText(SENTENCES, vector_size=4, min_count=1, epochs=1, workers=1, bucket=50), str(path))
    return path


def _truncated(path: Path, keep: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _parquet(path: Path, **columns) -> Path:
    import pandas as pd

    pd.DataFrame(columns).to_parquet(path, index=False)
    return path


def _kv_missing_array(tmp: Path) -> Path:
    path = _save(_word2vec(), tmp / "m.model", sep_limit=0)
    (tmp / "m.model.wv.vectors.npy").unlink()
    return path


def _kv_corrupt_array(tmp: Path) -> Path:
    path = _save(_word2vec(), tmp / "m.model", sep_limit=0)
    (tmp / "m.model.wv.vectors.npy").write_text("not an array")
    return path


# (bad file builder, stderr fragment); each case audits good.npy together with the bad file
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "pickle-os-system": (
        lambda t: _write(t / "evil.kv", _pickle_of((os.system, ("touch MARKER",)))),
        "refusing to load posix.system",
    ),
    "pickle-sys-exit": (lambda t: _write(t / "evil.kv", _pickle_of((sys.exit, (0,)))), "refusing to load sys.exit"),
    "pickle-eval-wv": (lambda t: _write(t / "evil.wv", _pickle_of((eval, ("1+1",)))), "refusing to load builtins.eval"),
    "pickle-exec-proto0": (
        lambda t: _write(t / "evil.kv", _pickle_of((exec, ("x=1",)), 0)),
        "refusing to load builtins.exec",
    ),
    "pickle-popen-model": (
        lambda t: _write(t / "evil.model", _pickle_of((subprocess.Popen, (["true"],)))),
        "refusing to load subprocess.Popen",
    ),
    "pickle-getattr": (
        lambda t: _write(t / "evil.kv", _pickle_of((getattr, (Path, "home")))),
        "refusing to load builtins.getattr",
    ),
    "pickle-import": (
        lambda t: _write(t / "evil.kv", _pickle_of((__import__, ("os",)))),
        "refusing to load builtins.__import__",
    ),
    "pickle-constructor-call": (
        lambda t: _write(t / "evil.model", _pickle_of((type(_word2vec()), ([["a"]],)))),
        "Word2Vec: called as a constructor",
    ),
    "pickle-plain-dict": (
        lambda t: _write(t / "d.kv", pickle.dumps({"vectors": [1, 2]})),
        "not a gensim save() file (it holds a dict)",
    ),
    "kv-not-a-pickle": (lambda t: _write(t / "e.kv", b"hello world\n"), "not a readable gensim save() file"),
    "kv-empty-file": (lambda t: _write(t / "e.kv", b""), "not a readable gensim save() file"),
    "kv-truncated": (
        lambda t: _truncated(_save(_kv(["a", "b", "c"], np.ones((3, 4), np.float32)), t / "e.kv"), 0.5),
        "not a readable gensim save() file",
    ),
    "model-missing-npy": (_kv_missing_array, "m.model.wv.vectors.npy: missing"),
    "model-corrupt-npy": (_kv_corrupt_array, "m.model.wv.vectors.npy: not a readable .npy file"),
    "kv-1d-vectors": (
        lambda t: _save(_kv(["a", "b", "c"], np.ones(3, np.float32)), t / "e.kv"),
        "expected a 2-d matrix [keys, dims], found shape (3,)",
    ),
    "kv-none-vectors": (lambda t: _save(_kv(["a", "b", "c"], None), t / "e.kv"), "no vector matrix (found NoneType)"),
    "kv-rows-not-keys": (
        lambda t: _save(_kv(["a", "b"], np.ones((3, 4), np.float32)), t / "e.kv"),
        "2 keys for 3 rows",
    ),
    "kv-duplicate-keys": (
        lambda t: _save(_kv(["a", "b", "a"], np.ones((3, 4), np.float32)), t / "e.kv"),
        "key #3: duplicate key 'a'",
    ),
    "kv-none-key": (
        lambda t: _save(_kv(["a", None, "c"], np.ones((3, 4), np.float32)), t / "e.kv"),
        "key #2 is None, not a string",
    ),
    "kv-empty-key": (
        lambda t: _save(_kv(["a", "", "c"], np.ones((3, 4), np.float32)), t / "e.kv"),
        "key #2: empty key",
    ),
    "kv-no-keys": (lambda t: _save(_kv([], np.ones((0, 4), np.float32)), t / "e.kv"), "e.kv: vectors: empty (no keys)"),
    "kv-complex": (
        lambda t: _save(_kv(["a", "b", "c"], np.ones((3, 4), np.complex64)), t / "e.kv"),
        "vectors have dtype complex64 (complex)",
    ),
    "kv-bool": (
        lambda t: _save(_kv(["a", "b", "c"], np.ones((3, 4), bool)), t / "e.kv"),
        "vectors have dtype bool (boolean)",
    ),
    "kv-object": (
        lambda t: _save(_kv(["a", "b", "c"], np.ones((3, 4), object)), t / "e.kv", separately=[]),
        "vectors have dtype object",
    ),
    "npy-complex": (
        lambda t: _npy(t / "c.npy", np.ones((12, 4), np.complex128)),
        "c.npy: vectors have dtype complex128",
    ),
    "npy-bool": (lambda t: _npy(t / "c.npy", np.ones((12, 4), bool)), "c.npy: vectors have dtype bool (boolean)"),
    "npy-string": (lambda t: _npy(t / "c.npy", np.full((12, 4), "x")), "c.npy: vectors have dtype <U1 (string)"),
    "npy-object": (
        lambda t: _npy(t / "c.npy", np.ones((12, 4), object), allow_pickle=True),
        "c.npy: vectors have dtype object",
    ),
    "npy-datetime": (
        lambda t: _npy(t / "c.npy", np.zeros((12, 4), "datetime64[D]")),
        "c.npy: vectors have dtype datetime64[D] (datetime)",
    ),
    "npy-not-npy": (
        lambda t: _write(t / "c.npy", bytes(range(256))),
        "c.npy: not a .npy file (it does not start with NumPy's magic string)",
    ),
    "npy-garbage-header": (
        lambda t: _write(t / "c.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': \x00\xff x}\n" + bytes(40)),
        "c.npy: not a readable .npy file",
    ),
    "npy-truncated": (
        lambda t: _truncated(_npy(t / "c.npy", np.ones((12, 64), np.float32)), 0.5),
        "c.npy: not a readable .npy file",
    ),
    "npy-3d": (lambda t: _npy(t / "c.npy", np.ones((12, 2, 2), np.float32)), "expected a 2-d matrix"),
    "vec-is-a-fasttext-bin": (
        lambda t: _write(t / "ft.vec", _fasttext_bin(t / "ft.bin").read_bytes()),
        "ft.vec:1: expected a word2vec header 'count dim', found binary data",
    ),
    "parquet-garbage": (lambda t: _write(t / "p.parquet", bytes(range(256))), "p.parquet: not a readable parquet file"),
    "parquet-bool-column": (
        lambda t: _parquet(t / "p.parquet", key=["a", "b"], v0=[True, False], v1=[1.0, 2.0]),
        "column 'v0' has dtype bool (boolean)",
    ),
    "parquet-string-column": (
        lambda t: _parquet(t / "p.parquet", key=["a", "b"], v0=["x", "y"]),
        "column 'v0' has dtype str",
    ),
    "parquet-missing-key": (lambda t: _parquet(t / "p.parquet", key=["a", None], v0=[1.0, 2.0]), "row 2: missing key"),
    "parquet-duplicate-key": (
        lambda t: _parquet(t / "p.parquet", key=["a", "a"], v0=[1.0, 2.0]),
        "row 2: duplicate key 'a'",
    ),
    "w2v-header-huge-count": (
        lambda t: _write(t / "h.txt", b"999999999999 4\nk0 1 2 3 4\n"),
        "header says 999999999999 vectors, found 1",
    ),
    "w2v-header-huge-dim": (lambda t: _write(t / "h.txt", b"2 99999999999999\nk0 1 2 3 4\n"), "cannot hold even one"),
    "w2v-bin-header-huge-count": (
        lambda t: _write(t / "h.bin", b"999999999999 4\nk0 " + bytes(16)),
        "vector 2 of 999999999999: file ends early",
    ),
    "w2v-bin-header-huge-dim": (
        lambda t: _write(t / "h.bin", b"2 99999999999999\nk0 " + bytes(16)),
        "cannot hold even one",
    ),
    "w2v-bin-binary-header": (
        lambda t: _write(t / "h.bin", b"\x00\x01\xfe\xffgarbage\n" + bytes(64)),
        "expected a word2vec header 'count dim', found binary data",
    ),
    "fasttext-truncated": (
        lambda t: _truncated(_fasttext_bin(t / "ft.bin"), 0.3),
        "ft.bin: not a readable fastText .bin file (truncated",
    ),
    "fasttext-magic-only": (
        lambda t: _write(t / "ft.bin", (793712314).to_bytes(4, "little") + b"\xff" * 40),
        "ft.bin: not a readable fastText .bin file",
    ),
    "keyless-mixed-with-keyed": (
        lambda t: _npy(t / "nokeys.npy", _vectors(1)),
        "nokeys.npy: has no keys file (nokeys.keys.txt), but",
    ),
}


@pytest.mark.bad_input
@pytest.mark.parametrize("case", sorted(CASES))
def test_audit_refuses_bad_embedding_file(tmp_path, good, case, monkeypatch):
    monkeypatch.chdir(tmp_path)
    build, fragment = CASES[case]
    bad = build(tmp_path)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(bad), "--json", str(tmp_path / "r.json")])
    assert_bad_input(result, fragment, tmp_path, before)
    assert not (tmp_path / "MARKER").exists()
    assert "\\x" not in result.stderr  # no raw bytes in the message


@pytest.mark.bad_input
def test_trusted_pickle_that_exits_still_fails_the_gate(tmp_path, good):
    """Issue 12: a .kv calling sys.exit(0) made a failing --check exit 0 with no output."""
    evil = _write(tmp_path / "exit.kv", _pickle_of((sys.exit, (0,))))
    before = files_state(tmp_path)
    result = runner.invoke(
        app,
        [
            "audit",
            str(good),
            str(evil),
            "--trust-pickle",
            "--check",
            "representation.cka>2",
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert_bad_input(
        result, "exit.kv: not a readable gensim save() file (SystemExit while unpickling)", tmp_path, before
    )


def test_trusted_pickle_that_raises_keyboard_interrupt_is_not_exit_0(tmp_path, good):
    evil = _write(tmp_path / "ki.kv", _pickle_of((exec, ("raise KeyboardInterrupt",))))
    result = runner.invoke(app, ["audit", str(good), str(evil), "--trust-pickle"])
    assert result.exit_code == 2 and "KeyboardInterrupt while unpickling" in result.stderr


def test_crafted_pickle_run_as_a_real_process_creates_nothing(tmp_path, good):
    marker = tmp_path / "MARKER"
    evil = _write(tmp_path / "evil.kv", _pickle_of((os.system, (f"touch {marker}",))))
    proc = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", str(good), str(evil)],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not marker.exists()


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["--input-format", "yaml"],
            "'--input-format': 'yaml' is not one of 'npy', 'word2vec', 'glove', 'word2vec-bin', 'fasttext'",
        ),
        (["--input-format", "fasttext"], "good.npy: not a fastText .bin file"),
        (["--keys", "KEYS"], "--keys: "),  # every input has keys
    ],
)
def test_audit_bad_input_options(tmp_path, good, args, fragment):
    args = [str(tmp_path / "k.txt") if a == "KEYS" else a for a in args]
    (tmp_path / "k.txt").write_text("\n".join(KEYS) + "\n")
    other = tmp_path / "other.npy"
    write_embedding(other, KEYS, _vectors(1))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(other), *args])
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_run_set_vectors_that_are_not_npy(tmp_path, sessions_file):
    from stabcli.training.pretrain import TrainConfig, pretrain

    root = tmp_path / "runs"
    pretrain(root, sessions_file, TrainConfig(dim=4, epochs=1), runs=2, jobs=1)
    (root / "run-001" / "vectors.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': \x00\xff x}\n" + bytes(40))
    before = files_state(tmp_path)
    assert_bad_input(
        runner.invoke(app, ["audit", str(root)]), "run-001/vectors.npy: not a readable .npy file", tmp_path, before
    )


@pytest.mark.bad_input
def test_input_format_on_a_run_set(tmp_path, sessions_file):
    from stabcli.training.pretrain import TrainConfig, pretrain

    root = tmp_path / "runs"
    pretrain(root, sessions_file, TrainConfig(dim=4, epochs=1), runs=2, jobs=1)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(root), "--input-format", "npy"])
    assert_bad_input(result, "--input-format: applies to embedding files, not to the run set", tmp_path, before)
    # a run whose vectors are complex: named with its dtype
    vectors = np.load(root / "run-001" / "vectors.npy")
    np.save(root / "run-001" / "vectors.npy", vectors.astype(np.complex64))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(root)])
    assert_bad_input(result, "run-001/vectors.npy: vectors have dtype complex64 (complex)", tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "keys_text, fragment",
    [
        ("a\nb\n", "k.txt: 2 keys for 12 rows in"),
        ("\n".join(KEYS[:11] + ["k0"]) + "\n", "k.txt:12: duplicate key 'k0' (first on line 1)"),
        ("\n".join(KEYS[:5] + [""] + KEYS[6:]) + "\n", "k.txt:6: empty key"),
        (b"\xff\xfe".decode("latin-1") + "\n", None),  # written as bytes below
    ],
)
def test_bad_keys_files(tmp_path, good, keys_text, fragment):
    keyless = _npy(tmp_path / "nokeys.npy", _vectors(1))
    if fragment is None:
        (tmp_path / "k.txt").write_bytes(b"\xff\xfe\n" * 12)
        fragment = "k.txt: keys are not valid UTF-8"
    else:
        (tmp_path / "k.txt").write_text(keys_text)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(keyless), "--keys", str(tmp_path / "k.txt")])
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_missing_keys_file(tmp_path, good):
    keyless = _npy(tmp_path / "nokeys.npy", _vectors(1))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(keyless), "--keys", str(tmp_path / "none.txt")])
    assert_bad_input(result, "none.txt: no such keys file", tmp_path, before)


@pytest.mark.bad_input
def test_keyless_inputs_of_different_lengths(tmp_path):
    a = _npy(tmp_path / "a.npy", _vectors(0))
    b = _npy(tmp_path / "b.npy", _vectors(1, rows=10))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(a), str(b)])
    assert_bad_input(result, "b.npy: 10 rows, but", tmp_path, before)


def test_keyless_inputs_are_matched_by_position_with_one_note(tmp_path):
    a = _npy(tmp_path / "a.npy", _vectors(0, rows=40))
    b = _npy(tmp_path / "b.npy", _vectors(0, rows=40) + 0.01)
    result = runner.invoke(app, ["audit", str(a), str(b), "--format", "json", "--knn-k", "3", "--knn-queries", "20"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.strip()]
    assert notes == ["warning: no input has a keys file: rows are matched by position"]


def test_keys_option_matches_keyless_rows_to_a_keyed_file(tmp_path):
    import json

    vectors = _vectors(0, rows=40)
    keys = [f"w{i}" for i in range(40)]
    order = np.random.default_rng(3).permutation(40)
    a = _npy(tmp_path / "a.npy", vectors)
    write_embedding(tmp_path / "b.vec", [keys[i] for i in order], vectors[order])
    (tmp_path / "k.txt").write_text("\n".join(keys) + "\n")
    result = runner.invoke(
        app,
        [
            "audit",
            str(a),
            str(tmp_path / "b.vec"),
            "--keys",
            str(tmp_path / "k.txt"),
            "--format",
            "json",
            "--knn-k",
            "3",
            "--knn-queries",
            "20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["representation"]["knn_overlap"] == 1.0  # identical vectors, matched by key


# --- featurize: the same input options, and writers that refuse what readers reject -----


def _kv_with_keys(path: Path, keys: list[str]) -> Path:
    from gensim.models import KeyedVectors

    kv = KeyedVectors(4)
    kv.add_vectors(keys, _vectors(2, rows=len(keys)))
    kv.save(str(path), separately=[])
    return path


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "keys, out, fragment",
    [
        (["a b", "c", "d"], "o.vec", "key 'a b' contains whitespace, which word2vec cannot store"),
        (["a\tb", "c", "d"], "o.bin", "key 'a\\tb' contains whitespace, which word2vec-bin cannot store"),
        (["a\nb", "c", "d"], "o.npy", "key 'a\\nb' contains a line break"),
        (["a\rb", "c", "d"], "o.npy", "key 'a\\rb' contains a line break"),
    ],
)
def test_featurize_refuses_keys_its_output_cannot_hold(tmp_path, keys, out, fragment):
    source = _kv_with_keys(tmp_path / "in.kv", keys)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["featurize", str(source), "--out", str(tmp_path / out), "--dim", "4"])
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_featurize_align_to_keyless_reference(tmp_path, good):
    ref = _npy(tmp_path / "ref.npy", _vectors(1))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["featurize", str(good), "--out", str(tmp_path / "o.npy"), "--align-to", str(ref)])
    assert_bad_input(result, "ref.npy: has no keys file (ref.keys.txt), but", tmp_path, before)


@pytest.mark.bad_input
def test_featurize_crafted_pickle(tmp_path):
    evil = _write(tmp_path / "evil.model", _pickle_of((os.system, (f"touch {tmp_path / 'MARKER'}",))))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["featurize", str(evil), "--out", str(tmp_path / "o.npy")])
    assert_bad_input(result, "refusing to load posix.system", tmp_path, before)
    result = runner.invoke(
        app,
        [
            "featurize",
            str(_write(tmp_path / "exit.kv", _pickle_of((sys.exit, (0,))))),
            "--out",
            str(tmp_path / "o.npy"),
            "--trust-pickle",
        ],
    )
    assert result.exit_code == 2 and "SystemExit while unpickling" in result.stderr


@pytest.mark.bad_input
def test_featurize_input_format_unknown(tmp_path, good):
    before = files_state(tmp_path)
    result = runner.invoke(app, ["featurize", str(good), "--out", str(tmp_path / "o.npy"), "--input-format", "csv"])
    assert_bad_input(result, "'--input-format': 'csv' is not one of", tmp_path, before)
