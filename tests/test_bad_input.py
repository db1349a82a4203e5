"""The bad-input catalogue: every broken input exits 2 with one line naming the file, line or
option, never a traceback, and never leaves a half-written output behind."""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, make_runset, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

KEYS = [f"k{i}" for i in range(30)]


def vectors(seed=0, n=30, d=4):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def good(tmp, name="good.npy", seed=0, d=4):
    path = tmp / name
    write_embedding(path, KEYS, vectors(seed, d=d))
    return path


def fake_runset(tmp, manifest=None):
    """A run set of two runs; ``manifest``: text that replaces its manifest (a damaged one)."""
    root = make_runset(tmp / "runs", vectors=[vectors(r) for r in range(2)], keys=KEYS, epochs=0)
    if manifest is not None:
        (root / "stabcli.json").write_text(manifest)
    return root


def text(tmp, name, content, mode="w"):
    path = tmp / name
    path.write_bytes(content) if mode == "wb" else path.write_text(content)
    return path


def npy_bytes(array):
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def word2vec_text(rows):
    """word2vec text of every key in KEYS (so no key is left out with a warning), ``rows`` overriding some."""
    return f"{len(KEYS)} 4\n" + "".join(f"{k} {rows.get(k, '1 2 3 4')}\n" for k in KEYS)


def audit_pair(bad):
    return lambda t: ["audit", good(t), bad(t)]


def script(body):
    return lambda t: [
        "pretrain",
        "--script",
        f"{sys.executable} {text(t, 'train.py', body)} {{out}}",
        "--runs",
        "1",
        "--out",
        t / "out",
        "--timeout",
        "5",
    ]


# (case id, argv builder, message fragment); every case must exit 2
CASES = [
    # ---- pretrain: corpora and scripts
    ("empty corpus", lambda t: ["pretrain", text(t, "c.txt", ""), "--out", t / "out"], "c.txt: empty corpus"),
    (
        "corpus of blank lines",
        lambda t: ["pretrain", text(t, "c.txt", "\n \n\t\n"), "--out", t / "out"],
        "c.txt: empty corpus",
    ),
    (
        "corpus of one token",
        lambda t: ["pretrain", text(t, "c.txt", "lonely\n"), "--out", t / "out"],
        "c.txt: only 1 distinct token(s) occur at least --min-count 1",
    ),
    (
        "binary garbage corpus",
        lambda t: ["pretrain", text(t, "c.bin", b"\x00\x01\xff" * 50, "wb"), "--out", t / "out"],
        "c.bin:1: contains NUL bytes",
    ),
    (
        "mixed encodings",
        lambda t: [
            "pretrain",
            text(t, "c.txt", "caf\xc3\xa9 ok\nna\xefve x\n".encode("latin-1"), "wb"),
            "--out",
            t / "out",
        ],
        "c.txt:2: not valid utf-8",
    ),
    ("missing corpus", lambda t: ["pretrain", t / "nope.txt", "--out", t / "out"], "nope.txt"),
    (
        "out is a file",
        lambda t: ["pretrain", text(t, "c.txt", "a b c\n"), "--out", text(t, "f", "x")],
        "exists and is not a directory",
    ),
    # ---- audit: embedding files
    ("word2vec header lies about count", audit_pair(lambda t: text(t, "b.txt", "5 2\na 1 2\nb 3 4\n")), "b.txt"),
    ("word2vec header lies about dims", audit_pair(lambda t: text(t, "b.txt", "2 3\na 1 2\nb 3 4\n")), "b.txt:2"),
    ("truncated npy", audit_pair(lambda t: text(t, "b.npy", npy_bytes(vectors())[:200], "wb")), "b.npy"),
    ("npy of strings", audit_pair(lambda t: text(t, "b.npy", npy_bytes(np.array([["a", "b"]])), "wb")), "b.npy"),
    ("npy of rank 1", audit_pair(lambda t: text(t, "b.npy", npy_bytes(np.zeros(30, np.float32)), "wb")), "b.npy"),
    (
        "npy of rank 3",
        audit_pair(lambda t: text(t, "b.npy", npy_bytes(np.zeros((30, 2, 2), np.float32)), "wb")),
        "b.npy",
    ),
    (
        "keys file shorter than matrix",
        audit_pair(lambda t: (good(t, "b.npy", 1), text(t, "b.keys.txt", "k0\nk1\n"))[0]),
        "b.keys.txt",
    ),
    ("duplicate keys", audit_pair(lambda t: text(t, "b.txt", "2 2\nk0 1 2\nk0 3 4\n")), "duplicate key 'k0'"),
    (
        "NaN row",
        audit_pair(lambda t: text(t, "b.txt", word2vec_text({"k0": "nan 2 3 4"}))),
        "key 'k0' has NaN or infinite values",
    ),
    (
        "inf row",
        audit_pair(lambda t: text(t, "b.txt", word2vec_text({"k1": "inf 4 5 6"}))),
        "key 'k1' has NaN or infinite values",
    ),
    ("runs of different dimension", lambda t: ["audit", good(t), good(t, "b.npy", 1, d=5)], "dimension 5, but"),
    ("one run only", lambda t: ["audit", good(t)], "found 1 run(s)"),
    ("no common keys", lambda t: ["audit", good(t), text(t, "b.txt", "1 4\nother 1 2 3 4\n")], "no keys in common"),
    (
        "binary word2vec garbage",
        audit_pair(lambda t: text(t, "b.bin", b"3 2\n" + b"k0 " + struct.pack("<f", 1.0), "wb")),
        "b.bin",
    ),
    # ---- audit: run sets, checks, labels
    ("corrupted manifest", lambda t: ["audit", fake_runset(t, "{broken")], "stabcli.json: corrupted manifest"),
    (
        "future schema version",
        lambda t: ["audit", fake_runset(t, json.dumps({"schema_version": 99, "runs": {}}))],
        "schema version 99 is newer",
    ),
    (
        "--check unknown path",
        lambda t: ["audit", fake_runset(t), "--check", "representation.nope>1"],
        "--check: no 'nope' in representation",
    ),
    ("--check malformed", lambda t: ["audit", fake_runset(t), "--check", "cka"], "expected PATH OP VALUE"),
    (
        "labels with one class",
        lambda t: ["audit", fake_runset(t), "--labels", text(t, "l.csv", "".join(f"{k},x\n" for k in KEYS))],
        "only one class ('x')",
    ),
    (
        "labels matching no key",
        lambda t: ["audit", fake_runset(t), "--labels", text(t, "l.csv", "a,x\nb,y\nc,z\n")],
        "none of its 2 keys is an embedding key",
    ),
    (
        "labels binary garbage",
        lambda t: ["audit", fake_runset(t), "--labels", text(t, "l.csv", b"\x00\x00", "wb")],
        "l.csv:1: contains NUL bytes",
    ),
    # ---- featurize
    ("odd M", lambda t: ["featurize", good(t), "--out", t / "o.npy", "--dim", "7"], "must be an even integer"),
    (
        "negative sigma",
        lambda t: ["featurize", good(t), "--out", t / "o.npy", "--sigma", "-1"],
        "--sigma: must be greater than 0, got -1",
    ),
    ("output in a missing directory", lambda t: ["featurize", good(t), "--out", t / "missing" / "o.npy"], "o.npy"),
    ("output under a file", lambda t: ["featurize", good(t), "--out", text(t, "f", "x") / "o.npy"], "o.npy"),
    (
        "featurize NaN input",
        lambda t: ["featurize", text(t, "b.txt", "2 2\nk0 nan 2\nk1 3 4\n"), "--out", t / "o.npy"],
        "key 'k0' has NaN or infinite values",
    ),
    ("featurize missing input", lambda t: ["featurize", t / "nope.npy", "--out", t / "o.npy"], "nope.npy"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, argv, fragment):
    args = [str(a) for a in argv(tmp_path)]
    before = files_state(tmp_path)
    result = runner.invoke(app, args)
    assert_bad_input(result, fragment, tmp_path, before)


def test_all_zero_rows_do_not_divide_by_zero(tmp_path):
    a, b = vectors(0), vectors(1)
    a[:5] = 0
    b[:5] = 0
    write_embedding(tmp_path / "a.npy", KEYS, a)
    write_embedding(tmp_path / "b.npy", KEYS, b)
    result = runner.invoke(
        app,
        [
            "audit",
            str(tmp_path / "a.npy"),
            str(tmp_path / "b.npy"),
            "--normalize",
            "--format",
            "json",
            "--knn-k",
            "3",
            "--pairs",
            "50",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.stdout
    result = runner.invoke(app, ["featurize", str(tmp_path / "a.npy"), "--out", str(tmp_path / "o.npy"), "--dim", "8"])
    assert result.exit_code == 0 and np.isfinite(np.load(tmp_path / "o.npy")).all()


# a training run that fails is kept as run-NNN.failed with its log: exit 2 and one "failed:" line
SCRIPT_FAILURES = [
    ("script crashes", "import sys; sys.exit('boom')", "boom"),
    ("script hangs", "import time; time.sleep(60)", "timed out after 5"),
    ("script writes nothing", "pass", "script wrote no embedding file"),
    (
        "script writes NaN",
        "import sys, numpy as np\nnp.save(sys.argv[1] + '/vectors.npy', np.full((3, 2), np.nan))",
        "NaN or infinite",
    ),
]


@pytest.mark.parametrize("body, fragment", [c[1:] for c in SCRIPT_FAILURES], ids=[c[0] for c in SCRIPT_FAILURES])
def test_a_failing_script_run_exits_2_with_one_failed_line(tmp_path, body, fragment):
    result = runner.invoke(app, [*map(str, script(body)(tmp_path)), "--quiet"])  # no "run 1 of 1 finished" line
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("failed: run-000: ") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "out" / "run-000").exists()
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def test_catalogue_has_100_cases_each_checked_by_assert_bad_input():
    """Issue 13 §3: at least 100 bad inputs. The cases are the tests marked ``bad_input`` in
    tests/test_bad_input*.py; conftest fails any of them that does not pass through
    ``assert_bad_input`` (exit 2, one ``error:`` line naming the problem, no traceback or
    warning, nothing under its directory changed)."""
    import subprocess

    tests = Path(__file__).resolve().parent
    files = sorted(tests.glob("test_bad_input*.py"))
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "bad_input",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        cwd=tests.parent,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    cases = [line for line in listed.stdout.splitlines() if "::" in line]
    assert len(cases) >= 100, cases
    per_file = {path.name: sum(line.startswith(f"tests/{path.name}::") for line in cases) for path in files}
    assert all(per_file.values()), per_file  # every catalogue file contributes marked cases
