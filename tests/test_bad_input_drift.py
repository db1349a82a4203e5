"""Bad inputs of ``stabcli drift``: each exits 2 with one ``error:`` line naming the file or
option, before any output is written, and leaves every file where it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_bad_input, files_state, make_runset, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

N, D = 30, 4
KEYS = [f"k{i}" for i in range(N)]


def vectors(seed=0, n=N, d=D):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def emb(tmp: Path, name: str, seed=0, keys=None, d=D, rows=None) -> Path:
    keys = KEYS if keys is None else keys
    array = vectors(seed, len(keys), d) if rows is None else rows
    if name.endswith(".npy") and not np.isfinite(array).all():  # writers refuse what readers reject: save it raw
        np.save(tmp / name, array)
        (tmp / name).with_name(Path(name).stem + ".keys.txt").write_text("".join(k + "\n" for k in keys))
    else:
        write_embedding(tmp / name, keys, array)
    return tmp / name


def noise_set(tmp: Path, runs=5, keys=None, d=D, name="noise", bad_run=None) -> Path:
    keys = KEYS if keys is None else keys
    root = make_runset(tmp / name, vectors=[vectors(100 + r, len(keys), d) for r in range(runs)], keys=keys, epochs=0)
    if bad_run is not None:  # the writer refuses NaN: damage the run afterwards
        array = vectors(100 + bad_run, len(keys), d)
        array[2, 1] = np.nan
        np.save(root / f"run-{bad_run:03d}" / "vectors.npy", array)
    return root


def manifest_set(tmp: Path, name: str, sha256: str, epochs: int = 10) -> Path:
    """``noise_set`` with a pretrain-like manifest: corpus hash and training configuration."""
    root = noise_set(tmp, name=name)
    config = {"model": "word2vec", "dim": D, "epochs": epochs, "window": 3}
    manifest = {"schema_version": 1, "runs": {}, "corpus": {"sha256": sha256}, "config": config}
    (root / "stabcli.json").write_text(json.dumps(manifest))
    return root


def labels_file(tmp: Path, text: str) -> Path:
    path = tmp / "labels.tsv"
    path.write_text(text)
    return path


def base(t):
    return ["drift", str(emb(t, "b.npy")), str(emb(t, "a.npy", seed=1))]


def with_noise(t, *extra):
    return [*base(t), "--noise", str(noise_set(t)), *extra]


def nan_rows(seed, where, value=np.nan):
    array = vectors(seed)
    array[where] = value
    return array


CASES = {
    "before missing": (lambda t: ["drift", str(t / "missing.npy"), str(emb(t, "a.npy"))], "missing.npy: no such file"),
    "after missing": (lambda t: ["drift", str(emb(t, "b.npy")), str(t / "gone.vec")], "gone.vec: no such file"),
    "unknown suffix": (
        lambda t: ["drift", str(emb(t, "b.npy")), str((t / "a.xyz").touch() or t / "a.xyz")],
        "unknown embedding format",
    ),
    "before dir not a run set": (
        lambda t: ["drift", str((t / "d").mkdir() or t / "d"), str(emb(t, "a.npy"))],
        "not a run set",
    ),
    "mismatched dims": (lambda t: ["drift", str(emb(t, "b.npy")), str(emb(t, "a.npy", d=5))], "dimension 5"),
    "no common keys": (
        lambda t: ["drift", str(emb(t, "b.npy")), str(emb(t, "a.npy", keys=[f"x{i}" for i in range(N)]))],
        "no keys in common",
    ),
    "one common key": (
        lambda t: ["drift", str(emb(t, "b.npy")), str(emb(t, "a.npy", keys=["k0"] + [f"x{i}" for i in range(5)]))],
        "only 1 key in common",
    ),
    "nan in before": (
        lambda t: ["drift", str(emb(t, "b.npy", rows=nan_rows(0, (3, 1)))), str(emb(t, "a.npy"))],
        "'k3' has NaN or infinite values",
    ),
    "inf in after": (
        lambda t: ["drift", str(emb(t, "b.npy")), str(emb(t, "a.npy", rows=nan_rows(1, (7, 0), np.inf)))],
        "'k7' has NaN or infinite values",
    ),
    "keyless mixed with keyed": (
        lambda t: ["drift", str(np.save(t / "raw.npy", vectors()) or t / "raw.npy"), str(emb(t, "a.vec"))],
        "has no keys file",
    ),
    "keyless rows differ": (
        lambda t: [
            "drift",
            str(np.save(t / "r1.npy", vectors()) or t / "r1.npy"),
            str(np.save(t / "r2.npy", vectors(n=20)) or t / "r2.npy"),
        ],
        "matched by position",
    ),
    "keyless with noise": (
        lambda t: [
            "drift",
            str(np.save(t / "r1.npy", vectors()) or t / "r1.npy"),
            str(np.save(t / "r2.npy", vectors(1)) or t / "r2.npy"),
            "--noise",
            str(noise_set(t)),
        ],
        "keyless arrays cannot be matched",
    ),
    "noise missing": (lambda t: [*base(t), "--noise", str(t / "nothere")], "nothere: no such run set"),
    "noise is a file": (lambda t: [*base(t), "--noise", str(emb(t, "n.npy"))], "--noise needs a run set directory"),
    "noise with 1 run": (lambda t: [*base(t), "--noise", str(noise_set(t, runs=1))], "1 finished run(s)"),
    "noise with 3 runs, before not in it": (
        lambda t: [*base(t), "--noise", str(noise_set(t, runs=3))],
        "needs at least 4",
    ),
    "noise keys do not cover before": (
        lambda t: [*base(t), "--noise", str(noise_set(t, keys=KEYS[:25]))],
        "5 of the 30 compared keys are not in its run",
    ),
    "noise dims differ": (lambda t: [*base(t), "--noise", str(noise_set(t, d=6))], "dimension 6"),
    "nan in a noise run": (lambda t: [*base(t), "--noise", str(noise_set(t, bad_run=2))], "'k2' has NaN"),
    "alpha zero": (lambda t: with_noise(t, "--alpha", "0"), "--alpha: must be strictly between 0 and 1, got 0"),
    "alpha one": (lambda t: with_noise(t, "--alpha", "1"), "--alpha: must be strictly between 0 and 1, got 1"),
    "alpha negative": (
        lambda t: with_noise(t, "--alpha", "-0.5"),
        "--alpha: must be strictly between 0 and 1, got -0.5",
    ),
    "alpha above one": (lambda t: with_noise(t, "--alpha", "3"), "--alpha: must be strictly between 0 and 1, got 3"),
    "alpha nan": (lambda t: with_noise(t, "--alpha", "nan"), "--alpha: must be strictly between 0 and 1, got nan"),
    "alpha inf": (lambda t: with_noise(t, "--alpha", "inf"), "--alpha: must be strictly between 0 and 1, got inf"),
    "knn-k zero": (lambda t: [*base(t), "--knn-k", "0"], "--knn-k: must be at least 1, got 0"),
    "knn-k too large": (
        lambda t: [*base(t), "--knn-k", "30"],
        "--knn-k: 30 must be less than the number of compared keys",
    ),
    "knn-queries zero": (lambda t: [*base(t), "--knn-queries", "0"], "--knn-queries: must be at least 1, got 0"),
    "top negative": (lambda t: [*base(t), "--top", "-1"], "--top: must be at least 0, got -1"),
    "seed negative": (lambda t: [*base(t), "--seed", "-3"], "--seed: must be at least 0, got -3"),
    "reference negative": (
        lambda t: [*base(t), "--reference", "-1"],
        "--reference: must be at least 0, got -1",
    ),
    "reference beyond runs": (
        lambda t: ["drift", str(noise_set(t)), str(emb(t, "a.npy")), "--reference", "7"],
        "--reference: 7",
    ),
    "format unknown": (lambda t: [*base(t), "--format", "xml"], "Invalid value for '--format': 'xml' is not one of"),
    "check malformed": (lambda t: [*base(t), "--check", "drift.moved_share"], "expected PATH OP VALUE"),
    "check not a number": (lambda t: [*base(t), "--check", "drift.moved_share<abc"], "'abc' is not a number"),
    "check unknown section": (lambda t: [*base(t), "--check", "representation.cka>0.5"], "no 'representation'"),
    "check unknown field": (lambda t: with_noise(t, "--check", "drift.moved<0.1"), "no 'moved' in drift"),
    "check needs noise": (lambda t: [*base(t), "--check", "drift.moved_share<0.05"], "needs --noise"),
    "check noise section needs noise": (lambda t: [*base(t), "--check", "noise.global_ratio<2"], "needs --noise"),
    "check downstream needs labels": (lambda t: [*base(t), "--check", "downstream.drop_raw<0.1"], "needs --labels"),
    "check before any input is read": (
        lambda t: ["drift", str(t / "missing.npy"), str(t / "gone.npy"), "--check", "drift.nope<1"],
        "no 'nope' in drift",
    ),
    "check on a list": (lambda t: [*base(t), "--check", "drift.top>1"], "not a number"),
    "labels missing": (lambda t: [*base(t), "--labels", str(t / "nolabels.tsv")], "nolabels.tsv: label file not found"),
    "labels match no key": (lambda t: [*base(t), "--labels", str(labels_file(t, "x1\ta\nx2\tb\n"))], "none of its"),
    "labels one class": (
        lambda t: [*base(t), "--labels", str(labels_file(t, "".join(f"{k}\tsame\n" for k in KEYS)))],
        "only one class",
    ),
    "labels three columns": (lambda t: [*base(t), "--labels", str(labels_file(t, "k1\ta\tb\n"))], "expected 2 columns"),
    "labels bad test size": (
        lambda t: [*base(t), "--labels", str(labels_file(t, "k1\ta\nk2\tb\n")), "--test-size", "1.5"],
        "--test-size",
    ),
    "labels bad model": (
        lambda t: [
            *base(t),
            "--labels",
            str(labels_file(t, "".join(f"{k}\t{'ab'[i % 2]}\n" for i, k in enumerate(KEYS)))),
            "--model",
            "forest",
        ],
        "--model: 'forest' is not one of logreg, knn, ridge, gbdt, mlp or module:Class",
    ),
    "model without labels": (lambda t: [*base(t), "--model", "ridge"], "--model only apply with --labels"),
    "measure unknown": (lambda t: with_noise(t, "--measure", "angle"), "'--measure': 'angle' is not one of"),
    "allow mismatch without noise": (
        lambda t: [*base(t), "--allow-noise-mismatch"],
        "--allow-noise-mismatch only apply with --noise RUNSET",
    ),
    "noise from another corpus": (
        lambda t: [
            "drift",
            str(manifest_set(t, "b", "a" * 64)),
            str(emb(t, "a.npy")),
            "--noise",
            str(manifest_set(t, "n", "c" * 64)),
        ],
        "its corpus sha256 is cccccccccccc…, BEFORE's",
    ),
    "noise with another dim setting": (
        lambda t: [
            "drift",
            str(manifest_set(t, "b", "a" * 64)),
            str(emb(t, "a.npy")),
            "--noise",
            str(manifest_set(t, "n", "a" * 64, epochs=20)),
        ],
        "its epochs is 20, BEFORE's",
    ),
    "task without labels": (lambda t: [*base(t), "--task", "regression"], "--task only apply with --labels"),
    "key names missing": (
        lambda t: [*base(t), "--key-names", str(t / "names.tsv")],
        "names.tsv: key names file not found",
    ),
    "key names match no key": (
        lambda t: [*base(t), "--key-names", str(labels_file(t, "x1\tOne\nx2\tTwo\n"))],
        "keys is a compared key",
    ),
    "json is the before input": (lambda t: [*base(t), "--json", str(t / "b.npy")], "b.npy; write the output elsewhere"),
    "markdown is the after keys file": (lambda t: [*base(t), "--markdown", str(t / "a.keys.txt")], "is the input"),
    "per-key inside the noise run set": (
        lambda t: with_noise(t, "--per-key", str(t / "noise" / "keys.csv")),
        "lies inside the input",
    ),
    "plots inside the noise run set": (
        lambda t: with_noise(t, "--plots", str(t / "noise" / "figs")),
        "lies inside the input",
    ),
    "json through a symlink to the input": (
        lambda t: [*base(t), "--json", str((t / "link.json").symlink_to(t / "b.npy") or t / "link.json")],
        "is the input",
    ),
    "labels as output": (
        lambda t: [*base(t), "--labels", str(labels_file(t, "k1\ta\nk2\tb\n")), "--json", str(t / "labels.tsv")],
        "is the input",
    ),
    "json exists without force": (
        lambda t: [*base(t), "--json", str((t / "old.json").write_text("{}") and t / "old.json")],
        "already exists; pass --force",
    ),
    "json in a missing directory": (lambda t: [*base(t), "--json", str(t / "nodir" / "d.json")], "does not exist"),
    "per-key unknown suffix": (lambda t: [*base(t), "--per-key", str(t / "keys.xlsx")], "use .csv, .tsv or .parquet"),
    "json and markdown the same file": (
        lambda t: [*base(t), "--json", str(t / "r.out"), "--markdown", str(t / "r.out")],
        "is also --json",
    ),
    "plots dir with a user file, even with force": (
        lambda t: [
            *base(t),
            "--force",
            "--plots",
            str((t / "figs").mkdir() or ((t / "figs" / "thesis.tex").write_text("x") and t / "figs")),
        ],
        "thesis.tex, which stabcli did not write",
    ),
    "plots is a file": (
        lambda t: [*base(t), "--force", "--plots", str((t / "f.png").write_text("x") and t / "f.png")],
        "exists and is not a directory",
    ),
    "json is an existing directory with force": (
        lambda t: [*base(t), "--force", "--json", str((t / "dj").mkdir() or t / "dj")],
        "is a directory",
    ),
    # the shared foundations: embeddings.ReadOptions / match_inputs, outputs.OutputPlan
    "keys with keyed inputs": (
        lambda t: [*base(t), "--keys", str(labels_file(t, "".join(k + "\n" for k in KEYS)))],
        "--keys:",
    ),
    "keys file missing": (lambda t: keyless_pair(t, "--keys", str(t / "nokeys.txt")), "nokeys.txt: no such keys file"),
    "keys file too short": (lambda t: keyless_pair(t, "--keys", str(labels_file(t, "k0\nk1\n"))), "2 keys for 30 rows"),
    "keyless before, keyed after, no --keys": (
        lambda t: ["drift", str(raw_npy(t, "r1.npy")), str(emb(t, "a.npy"))],
        "Give --keys FILE",
    ),
    "input format unknown": (
        lambda t: [*base(t), "--input-format", "xlsx"],
        "Invalid value for '--input-format': 'xlsx' is not one of",
    ),
    "input format npy on a text file": (
        lambda t: ["drift", str(emb(t, "b.vec")), str(emb(t, "a.vec", seed=1)), "--input-format", "npy"],
        "b.vec",
    ),
    "json is the --keys file": (
        lambda t: keyless_pair(
            t, "--keys", str(labels_file(t, "".join(k + "\n" for k in KEYS))), "--json", str(t / "labels.tsv")
        ),
        "is the input",
    ),
    "json is the noise run set": (lambda t: with_noise(t, "--force", "--json", str(t / "noise")), "is the input"),
    "plots dir holds the before input": (lambda t: [*base(t), "--plots", str(t)], "contains the input"),
    "markdown is the key names file": (
        lambda t: [*base(t), "--key-names", str(labels_file(t, "k1\tOne\n")), "--markdown", str(t / "labels.tsv")],
        "is the input",
    ),
    "per-key is the labels file with force": (
        lambda t: [
            *base(t),
            "--force",
            "--labels",
            str(labels_file(t, "k1\ta\nk2\tb\n")),
            "--per-key",
            str(t / "labels.tsv"),
        ],
        "is the input",
    ),
    "per-key exists without force": (
        lambda t: [*base(t), "--per-key", str((t / "k.csv").write_text("x") and t / "k.csv")],
        "already exists; pass --force",
    ),
    "plots exist without force": (
        lambda t: [*base(t), "--plots", str((t / "figs").mkdir() or t / "figs")],
        "already exists; pass --force",
    ),
    "plots dir with a symlink, even with force": (
        lambda t: [
            *base(t),
            "--force",
            "--plots",
            str((t / "figs").mkdir() or (t / "figs" / "x.png").symlink_to(t / "b.npy") or t / "figs"),
        ],
        "which stabcli did not write",
    ),
    "per-key and json the same file": (
        lambda t: [*base(t), "--json", str(t / "r.csv"), "--per-key", str(t / "r.csv")],
        "is also --per-key",
    ),
    "markdown in a file, not a directory": (
        lambda t: [*base(t), "--markdown", str(t / "b.npy" / "r.md")],
        "is not a directory",
    ),
}


def raw_npy(t: Path, name: str, n: int = N) -> Path:
    """An .npy without a keys file (keyless: its keys are row numbers)."""
    np.save(t / name, vectors(7, n))
    return t / name


def keyless_pair(t: Path, *extra: str) -> list[str]:
    return ["drift", str(raw_npy(t, "r1.npy")), str(raw_npy(t, "r2.npy")), *extra]


@pytest.mark.bad_input
@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, tmp_path):
    build, fragment = CASES[name]
    args = build(tmp_path)
    before = files_state(tmp_path)
    result = runner.invoke(app, [str(a) for a in args])
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_step_summary_that_is_an_input_is_refused(tmp_path, monkeypatch):
    args = base(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "b.npy"))
    before = files_state(tmp_path)
    assert_bad_input(runner.invoke(app, args), "GITHUB_STEP_SUMMARY", tmp_path, before)


@pytest.mark.bad_input
def test_noise_member_needs_three_runs(tmp_path):
    """BEFORE = run 0 of a 2-run noise set: the leave-out null needs 3 runs when BEFORE is one of them."""
    root = noise_set(tmp_path, runs=2)
    args = ["drift", str(root), str(emb(tmp_path, "a.npy")), "--noise", str(root)]
    before = files_state(tmp_path)
    assert_bad_input(runner.invoke(app, args), "needs at least 3", tmp_path, before)


NUMBERS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "1e999", "-0", "0x10", "½", "١", "  3 "]),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(alpha=NUMBERS, knn_k=NUMBERS, top=NUMBERS, seed=NUMBERS, check=st.text(max_size=30))
def test_option_values_never_crash(tmp_path_factory, alpha, knn_k, top, seed, check):
    """Any option values: exit 0, 1 or 2, never a traceback; a usage error is one line."""
    t = tmp_path_factory.mktemp("fuzz")
    args = [
        *with_noise(t),
        "--alpha",
        str(alpha),
        "--knn-k",
        str(knn_k),
        "--top",
        str(top),
        "--seed",
        str(seed),
        "--check",
        check,
        "--format",
        "json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output and "Warning" not in result.output
    if result.exit_code == 2 and result.stderr.startswith("error:"):
        assert len(result.stderr.strip().splitlines()) == 1
