"""Bad inputs of robustness round three (issue 21): degenerate noise sets, hostile files,
addresses that are not a Dask scheduler, and inputs that contradict each other. Every case
runs the real command (real processes, sockets and files) and passes ``assert_bad_input``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import assert_bad_input, files_state
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

runner = CliRunner()
KEYS = [f"k{i}" for i in range(40)]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


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
