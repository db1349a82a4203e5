"""Hostile inputs found by attacking pretrain, run sets, processes and the pickle reader
(issue 12): each case failed before its fix."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_bad_input, files_state
from typer.testing import CliRunner

from stabcli.cli import app
from stabcli.embeddings import write_embedding

runner = CliRunner()


# --- crafted gensim pickles, written opcode by opcode ---------------------------------

def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _text(s: str) -> bytes:
    data = s.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _set_class_attribute(attribute: str, value: bytes) -> bytes:
    """BUILD on the KeyedVectors class itself: state (None, {attribute: value}) sets a class attribute."""
    return (_global("gensim.models.keyedvectors", "KeyedVectors") + b"N}" + _text(attribute) + value
            + b"s\x86b0")


def _keyed_vectors(keys: bytes) -> bytes:
    """A KeyedVectors made by NEWOBJ and BUILD, its vectors in the companion .npy."""
    return (_global("gensim.models.keyedvectors", "KeyedVectors") + b")\x81}(" + _text("index_to_key") + keys
            + _text("__numpys") + b"]" + _text("vectors") + b"aub")


def _crafted_kv(path: Path, body: bytes, rows: int = 1) -> Path:
    path.write_bytes(b"\x80\x04" + body + b".")
    np.save(f"{path}.vectors.npy", np.ones((rows, 4), np.float32))
    return path


def _one_key() -> bytes:
    return b"]" + _text("a") + b"a"


def _huge_int_key() -> bytes:
    return b"](\x8b" + struct.pack("<i", 3000) + b"\x01" * 3000 + b"e"  # LONG4: an int of 7000+ digits


PICKLE_CASES = {
    "class-del": (lambda t: _crafted_kv(t / "e.kv", _set_class_attribute("__del__", _global("gensim.utils", "call_on_class_only"))
                                        + _keyed_vectors(_one_key())),
                  "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified"),
    "class-getattribute": (lambda t: _crafted_kv(t / "e.kv", _set_class_attribute("__getattribute__", _global("builtins", "int"))
                                                 + _keyed_vectors(_one_key())),
                           "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified"),
    "class-method": (lambda t: _crafted_kv(t / "e.kv", _set_class_attribute("adjust_vectors", _global("builtins", "hash"))
                                           + _keyed_vectors(_one_key())),
                     "e.kv: refusing to load gensim.models.keyedvectors.KeyedVectors: has its class modified"),
    "function-dict": (lambda t: _crafted_kv(t / "e.kv", _global("gensim.utils", "call_on_class_only") + b"}" + _text("x")
                                            + b"Ns" + b"b0" + _keyed_vectors(_one_key())),
                      "e.kv: not a readable gensim save() file"),
    "huge-int-key": (lambda t: _crafted_kv(t / "e.kv", _keyed_vectors(_huge_int_key())),
                     "e.kv: vectors: key #1 is an integer of"),
}


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.npy"
    write_embedding(path, ["a", "b", "c"], np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    return path


@pytest.mark.parametrize("case", sorted(PICKLE_CASES))
def test_crafted_pickle_is_refused_with_one_line(tmp_path, good, case):
    build, fragment = PICKLE_CASES[case]
    bad = build(tmp_path)
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(good), str(bad)])
    assert_bad_input(result, fragment, tmp_path, before)


def test_pickle_that_sets_del_on_a_class_prints_nothing_at_exit(tmp_path, good):
    """A class ``__del__`` from the file ran at garbage collection: "Exception ignored" and a
    traceback on stderr after the error line."""
    bad = PICKLE_CASES["class-del"][0](tmp_path)
    proc = subprocess.run([sys.executable, "-m", "stabcli", "audit", str(good), str(bad)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
