"""Bad inputs of robustness round three (issue 21): degenerate noise sets, hostile files,
addresses that are not a Dask scheduler, and inputs that contradict each other. Every case
runs the real command (real processes, sockets and files) and passes ``assert_bad_input``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, invoke, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

KEYS = [f"k{i}" for i in range(40)]


def embedding(path: Path, seed: int, keys=KEYS, dim: int = 6) -> Path:
    write_embedding(path, keys, np.random.default_rng(seed).standard_normal((len(keys), dim)).astype(np.float32))
    return path


# --- degenerate noise: a --script that ignores {seed} ---------------------------------------

SEEDLESS = """
import argparse
from pathlib import Path
import numpy as np
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--out", type=Path)
p.add_argument("--mode")
a = p.parse_args()
base = np.random.default_rng(0).standard_normal((40, 6))
if a.mode == "rotate":  # every seed an exact rotation of the same vectors
    q, _ = np.linalg.qr(np.random.default_rng(a.seed).standard_normal((6, 6)))
    base = base @ q
elif a.mode == "one-copy" and a.seed % 4 == 3:  # one run repeats another's seed
    base = np.random.default_rng(a.seed - 1).standard_normal((40, 6))
elif a.mode == "one-copy":
    base = np.random.default_rng(a.seed).standard_normal((40, 6))
a.out.mkdir(parents=True, exist_ok=True)
rows = [f"k{i} " + " ".join(f"{v:.9g}" for v in row) for i, row in enumerate(base)]
(a.out / "vectors.txt").write_text("40 6\\n" + "\\n".join(rows) + "\\n")
"""


@pytest.fixture(scope="module")
def seedless_noise(tmp_path_factory):
    """Noise run sets made by a real ``stabcli pretrain --script`` whose script ignores the seed."""
    root = tmp_path_factory.mktemp("seedless")
    script = root / "seedless.py"
    script.write_text(SEEDLESS)
    made = {}
    for mode in ("same", "rotate", "one-copy"):
        out = root / mode
        result = invoke(
            "pretrain", "--out", out, "--runs", "4", "--script",
            f"{sys.executable} {script} --seed {{seed}} --out {{out}} --mode {mode}",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        made[mode] = out
    return made


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        ("same", "all 4 runs are identical or exact rotations of each other"),
        ("rotate", "all 4 runs are identical or exact rotations of each other"),
        ("one-copy", "run-002 and run-003 are identical or exact rotations of each other"),
    ],
)
def test_drift_refuses_a_noise_set_of_identical_runs(tmp_path, seedless_noise, mode, fragment):
    before_path, after_path = embedding(tmp_path / "b.npy", 5), embedding(tmp_path / "a.npy", 6)
    before = files_state(tmp_path)
    result = invoke("drift", before_path, after_path, "--noise", seedless_noise[mode], "--json", tmp_path / "d.json")
    assert_bad_input(result, fragment, tmp_path, before)
    assert "zero width" in result.stderr and "{seed}" in result.stderr


# --- outputs: a GITHUB_STEP_SUMMARY hard-linked into the run set of an input file -------------


@pytest.mark.bad_input
@pytest.mark.parametrize("linked", ["stabcli.json", "keys.txt", "run-001/losses.json"])
@pytest.mark.parametrize("command", ["audit", "drift"])
def test_a_summary_hard_linked_into_the_run_set_of_an_input_file_is_refused(tmp_path, monkeypatch, linked, command):
    import os

    from conftest import make_runset

    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs", runs=2, n=30, dim=4, epochs=1)
    os.link(tmp_path / "runs" / linked, tmp_path / "summary.md")
    before = files_state(tmp_path)
    argv = [command, "runs/run-000/vectors.npy", "runs/run-001/vectors.npy", "--knn-k", "2"]
    result = runner.invoke(app, argv, env={"GITHUB_STEP_SUMMARY": "summary.md"})
    assert_bad_input(result, f"GITHUB_STEP_SUMMARY summary.md: is runs/{linked} (a hard link to it)", tmp_path, before)


# --- hostile model files: work bounded by the file's size -------------------------------------


@pytest.fixture(scope="module")
def fasttext_files(tmp_path_factory):
    """Real gensim FastText files: a .bin (Facebook format), and hostile variants."""
    import struct

    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    root = tmp_path_factory.mktemp("fasttext")
    rng = np.random.default_rng(0)
    long_word = "x" * 30_000
    sentences = [[f"w{rng.integers(60)}" for _ in range(8)] for _ in range(200)] + [[long_word, "w1", "w2"]]
    model = FastText(vector_size=8, min_count=1, epochs=1, bucket=500, seed=1, workers=1)
    model.build_vocab(sentences)
    model.train(sentences, total_examples=len(sentences), epochs=1)
    save_facebook_model(model, str(root / "m.bin"))
    data = (root / "m.bin").read_bytes()
    cut = data.index(b"w1\x00") + 1  # an interrupted download: cut inside the vocabulary
    (root / "cut-in-vocabulary.bin").write_bytes(data[:cut])
    (root / "cut-in-count.bin").write_bytes(data[: cut + 4])
    (root / "cut-in-matrix.bin").write_bytes(data[: len(data) - 3_000])  # the output matrix is 2 KB
    maxn = bytearray(data)
    struct.pack_into("<i", maxn, 48, 1000)  # maxn, the 11th int after magic and version
    (root / "huge-range.bin").write_bytes(bytes(maxn))
    kv = model.wv
    kv.max_n = 1_000_000  # the long word asks for about 4.5e8 n-grams
    kv.save(str(root / "huge-range.kv"))
    kv.max_n, kv.min_n = "6", 3
    kv.save(str(root / "string-range.kv"))
    return root


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("cut-in-vocabulary.bin", "truncated or malformed at word"),
        ("cut-in-count.bin", "truncated in the dictionary"),
        ("cut-in-matrix.bin", "truncated"),
        ("huge-range.bin", "n-gram range 3..1000 asks for"),
        ("huge-range.kv", "n-gram range 3..1000000 asks for"),
        ("string-range.kv", "n-gram range 3..'6' is not two integers"),
    ],
)
def test_hostile_fasttext_files_are_refused_quickly(tmp_path, fasttext_files, name, fragment):
    """Each in a real process under a 2 GB address-space limit and a 120 s timeout: the
    truncated .bin looped forever in gensim, the huge n-gram range took 19 s and 4.9 GB."""
    import resource
    import subprocess

    from conftest import SUBPROCESS_ENV

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    other = embedding(tmp_path / "other.npy", 0, keys=[f"w{i}" for i in range(60)], dim=8)
    before = files_state(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", str(fasttext_files / name), str(other)],
        env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120, preexec_fn=limit,
    )  # fmt: skip

    class Result:  # what assert_bad_input reads from a CliRunner result
        exit_code, stderr, output = done.returncode, done.stderr, done.stdout + done.stderr

    assert_bad_input(Result, fragment, tmp_path, before)
    assert name in done.stderr


def test_the_untouched_fasttext_bin_is_read(fasttext_files):
    from stabcli.inputs.embeddings import read_embedding

    emb = read_embedding(fasttext_files / "m.bin")
    assert emb.vectors.shape == (61, 8) and "x" * 30_000 in emb.keys


# --- NaN and 1e300 in references and drift inputs; deep JSON ----------------------------------


def float64_rows(path: Path, value: float, row: int = 3) -> Path:
    """A float64 .npy (with its keys file) holding ``value`` in one row: finite in float64,
    beyond float32 for 1e300."""
    array = np.random.default_rng(9).standard_normal((len(KEYS), 6))
    array[row] = value
    np.save(path, array)
    path.with_name(path.stem + ".keys.txt").write_text("".join(k + "\n" for k in KEYS))
    return path


def text_rows(path: Path, value: str, row: int = 2) -> Path:
    rows = [f"{k} {value} 1 2 3 4 5" if i == row else f"{k} 1 2 3 4 5 {i}" for i, k in enumerate(KEYS)]
    path.write_text(f"{len(KEYS)} 6\n" + "\n".join(rows) + "\n")
    return path


def align_to(t: Path, reference: Path) -> list:
    return ["featurize", embedding(t / "a.npy", 1), "--out", t / "o.npy", "--align-to", reference]


HUGE_CASES = {
    "align-to float64 1e300": (
        lambda t: align_to(t, float64_rows(t / "r.npy", 1e300)),
        "r.npy: key 'k3' has values beyond float32's range (up to 1e+300)",
    ),
    "align-to NaN": (
        lambda t: align_to(t, float64_rows(t / "r.npy", np.nan)),
        "r.npy: key 'k3' has NaN or infinite values",
    ),
    "align-to text 1e300": (
        lambda t: align_to(t, text_rows(t / "r.vec", "1e300")),
        "r.vec: key 'k2' has values beyond float32's range",
    ),
    "align-to text -inf": (
        lambda t: align_to(t, text_rows(t / "r.vec", "-inf")),
        "r.vec: key 'k2' has NaN or infinite values",
    ),
    "drift after 1e300": (
        lambda t: ["drift", embedding(t / "b.npy", 1), float64_rows(t / "a.npy", 1e300)],
        "a.npy: key 'k3' has values beyond float32's range",
    ),
    "drift before 1e300 text": (
        lambda t: ["drift", text_rows(t / "b.vec", "-1e300"), embedding(t / "a.npy", 1)],
        "b.vec: key 'k2' has values beyond float32's range",
    ),
    "drift after 1e300, keys reordered (the float32 cast warned)": (
        lambda t: ["drift", embedding(t / "b.npy", 1, keys=KEYS[::-1]), float64_rows(t / "a.npy", 1e300)],
        "a.npy: key 'k3' has values beyond float32's range",
    ),
}


@pytest.mark.bad_input
@pytest.mark.parametrize("name", HUGE_CASES)
def test_non_finite_and_huge_rows_in_references_and_drift_inputs(tmp_path, name):
    make, fragment = HUGE_CASES[name]
    argv = make(tmp_path)
    before = files_state(tmp_path)
    assert_bad_input(invoke(*argv), fragment, tmp_path, before)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("command", "where"),
    [(c, "stabcli.json") for c in ("audit", "drift", "featurize")]
    + [(c, "run-000/losses.json") for c in ("audit", "featurize")],  # drift reads no losses
)
def test_json_nested_100000_levels_is_one_line(tmp_path, where, command):
    from conftest import make_runset

    runs = make_runset(tmp_path / "runs", runs=3, n=40, dim=6, epochs=1)
    text = deep(100_000) if where.endswith("losses.json") else '{"schema_version": 1, "runs": ' + deep(100_000) + "}"
    (runs / where).write_text(text)
    argv = {
        "audit": ["audit", runs],
        "drift": ["drift", runs, embedding(tmp_path / "a.npy", 1)],
        "featurize": ["featurize", runs, "--out", tmp_path / "phi"],
    }[command]
    before = files_state(tmp_path)
    assert_bad_input(invoke(*argv), "nested too deeply", tmp_path, before)


def test_a_float64_row_beyond_float32_never_leaks_an_overflow_warning(tmp_path):
    """audit matches keys (one left out), so rows are gathered: the float64 → float32 cast
    of a 1e300 row warned 'overflow encountered in cast' and then called the row NaN."""
    import subprocess

    from conftest import SUBPROCESS_ENV

    embedding(tmp_path / "a.npy", 1)
    array = np.random.default_rng(9).standard_normal((len(KEYS) - 1, 6))
    array[3] = 1e300
    np.save(tmp_path / "b.npy", array)
    (tmp_path / "b.keys.txt").write_text("".join(k + "\n" for k in KEYS[:-1]))
    done = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", "a.npy", "b.npy", "--format", "json"],
        cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "NaN" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "warning: 1 keys are not in every run and were left out; comparing 39 common keys"
    ]
