"""Bad inputs of ``featurize`` and of audit's outputs: each exits 2 with one line naming the
file or option, and changes nothing under the working directory (inputs and outputs alike)."""

from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, make_runset, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

KEYS = [f"k{i}" for i in range(30)]


def vectors(seed=0, n=30, d=4):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def workspace(t: Path) -> Path:
    """a.npy (+ a.keys.txt), b.npy, a.txt (word2vec), keyless.npy, short.npy (keyless, 10 rows),
    d8.npy (dimension 8), runs/ (a run set of 3 runs), a directory and a plain file."""
    write_embedding(t / "a.npy", KEYS, vectors(0))
    write_embedding(t / "b.npy", KEYS, vectors(1))
    write_embedding(t / "a.txt", KEYS, vectors(2))
    write_embedding(t / "d8.npy", KEYS, vectors(3, d=8))
    np.save(t / "keyless.npy", vectors(4))
    np.save(t / "short.npy", vectors(5, n=10))
    make_runset(t / "runs", vectors=[vectors(10 + r) for r in range(3)], keys=KEYS, epochs=0)
    (t / "adir").mkdir()
    (t / "plain").write_text("a user's file\n")
    (t / "sub").mkdir()
    (t / "labels.csv").write_text("".join(f"{k},{'xy'[i % 2]}\n" for i, k in enumerate(KEYS)))
    return t


def exists(*names):
    """Create these outputs before the command (content that must survive)."""

    def make(t):
        for name in names:
            (t / name).parent.mkdir(parents=True, exist_ok=True)
            (t / name).write_text("mine\n")

    return make


def link(name, target):
    return lambda t: (t / name).symlink_to(t / target)


def stabcli_dir(name, extra=None):
    """A directory holding a featurized run set stabcli wrote, plus ``extra`` (a user's file)."""

    def make(t):
        root = t / name
        (root / "run-000").mkdir(parents=True)
        (root / "stabcli.json").write_text("{}")
        np.save(root / "run-000" / "vectors.npy", vectors())
        if extra:
            (root / extra).parent.mkdir(parents=True, exist_ok=True)
            (root / extra).write_text("mine\n")

    return make


def plots_dir(extra=None):
    def make(t):
        (t / "plots").mkdir()
        (t / "plots" / "fig1a_variance_per_dim.png").write_bytes(b"png")
        if extra:
            (t / "plots" / extra).write_text("mine\n")

    return make


F = ["featurize"]
AUDIT = ["audit", "runs", "--knn-k", "3", "--pairs", "50", "--knn-queries", "10"]

# (id, argv relative to the workspace, fragment of the one error line, setup, environment)
CASES = [
    # ---- an output that is an input (issue 12 §1)
    ("out is the npy input", F + ["a.npy", "--out", "a.npy"], "--out {t}/a.npy: is the input {t}/a.npy", None, None),
    ("out is the npy input, forced", F + ["a.npy", "--out", "a.npy", "--force"], "is the input {t}/a.npy", None, None),
    ("out is the text input", F + ["a.txt", "--out", "a.txt"], "--out {t}/a.txt: is the input", None, None),
    (
        "out is the input by another spelling",
        F + ["a.npy", "--out", "sub/../a.npy", "--force"],
        "--out {t}/sub/../a.npy: is the input {t}/a.npy",
        None,
        None,
    ),
    (
        "out is the input's keys file",
        F + ["a.npy", "--out", "a.keys.txt", "--output-format", "npy", "--force"],
        "--out {t}/a.keys.txt: is the input {t}/a.keys.txt",
        None,
        None,
    ),
    (
        "out's keys file is the reference",
        F + ["a.npy", "--out", "x.npy", "--align-to", "x.keys.txt", "--force"],
        "keys file {t}/x.keys.txt: is the input {t}/x.keys.txt",
        lambda t: (t / "x.keys.txt").write_bytes((t / "a.txt").read_bytes()),
        None,
    ),
    (
        "out's keys file is an input",
        F + ["b.npy", "--out", "a.npy", "--align-to", "a.npy", "--force"],
        "is the input {t}/a.npy",
        None,
        None,
    ),
    (
        "out is a symlink to the input",
        F + ["a.npy", "--out", "link.npy", "--force"],
        "--out {t}/link.npy: is the input {t}/a.npy",
        link("link.npy", "a.npy"),
        None,
    ),
    (
        "out is the --align-to reference",
        F + ["a.npy", "--out", "b.npy", "--align-to", "b.npy", "--force"],
        "--out {t}/b.npy: is the input {t}/b.npy",
        None,
        None,
    ),
    (
        "out is the --align-to reference's keys",
        F + ["a.npy", "--out", "b.keys.txt", "--output-format", "npy", "--align-to", "b.npy"],
        "is the input {t}/b.keys.txt",
        None,
        None,
    ),
    (
        "save-transform is the text input",
        F + ["a.txt", "--out", "o.npy", "--save-transform", "a.txt"],
        "--save-transform {t}/a.txt: is the input {t}/a.txt",
        None,
        None,
    ),
    (
        "save-transform is the input's keys",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "a.keys.txt"],
        "--save-transform {t}/a.keys.txt: is the input",
        None,
        None,
    ),
    (
        "save-transform is the reference",
        F + ["a.npy", "--out", "o.npy", "--align-to", "b.npy", "--save-transform", "b.npy"],
        "--save-transform {t}/b.npy: is the input",
        None,
        None,
    ),
    (
        "out run set inside the input run set",
        F + ["runs", "--out", "runs/run-003"],
        "--out {t}/runs/run-003: lies inside the input {t}/runs",
        None,
        None,
    ),
    (
        "out run set is the input run set",
        F + ["runs", "--out", "runs", "--force"],
        "--out {t}/runs: is the input {t}/runs",
        None,
        None,
    ),
    (
        "out run set holds the input run set",
        F + ["sub/runs", "--out", "sub", "--force"],
        "--out {t}/sub: contains the input",
        lambda t: (t / "runs").rename(t / "sub" / "runs"),
        None,
    ),
    (
        "out inside the input run set through a symlink",
        F + ["runs", "--out", "alias/run-009"],
        "--out {t}/alias/run-009: lies inside the input {t}/runs",
        link("alias", "runs"),
        None,
    ),
    (
        "out file inside the --align-to run set",
        F + ["a.npy", "--out", "runs/x.npy", "--align-to", "runs"],
        "--out {t}/runs/x.npy: lies inside the input {t}/runs",
        None,
        None,
    ),
    (
        "sidecar inside the --align-to run set",
        F + ["a.npy", "--out", "runs/run-000/vectors.npy", "--align-to", "runs"],
        "lies inside the input {t}/runs",
        None,
        None,
    ),
    # ---- outputs that collide with each other
    (
        "save-transform is the output",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "o.npy"],
        "--save-transform {t}/o.npy: is also --out {t}/o.npy",
        None,
        None,
    ),
    (
        "save-transform is the output's keys",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "o.keys.txt"],
        "--save-transform {t}/o.keys.txt: is also keys file",
        None,
        None,
    ),
    (
        "save-transform is the sidecar",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "o.npy.featurize.json"],
        "is also sidecar {t}/o.npy.featurize.json",
        None,
        None,
    ),
    # ---- existing outputs: refused without --force, and some even with it
    (
        "out exists",
        F + ["a.npy", "--out", "o.npy"],
        "--out {t}/o.npy: already exists; pass --force to replace it",
        exists("o.npy"),
        None,
    ),
    (
        "out's keys file exists",
        F + ["a.npy", "--out", "o.npy"],
        "keys file {t}/o.keys.txt: already exists",
        exists("o.keys.txt"),
        None,
    ),
    (
        "sidecar exists",
        F + ["a.npy", "--out", "o.npy"],
        "sidecar {t}/o.npy.featurize.json: already exists",
        exists("o.npy.featurize.json"),
        None,
    ),
    (
        "save-transform exists",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "t.npz"],
        "--save-transform {t}/t.npz: already exists",
        exists("t.npz"),
        None,
    ),
    ("out text file exists", F + ["a.npy", "--out", "o.vec"], "--out {t}/o.vec: already exists", exists("o.vec"), None),
    (
        "out is a directory",
        F + ["a.npy", "--out", "adir", "--output-format", "npy", "--force"],
        "--out {t}/adir: is a directory; give a file name",
        None,
        None,
    ),
    (
        "save-transform is a directory",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "adir", "--force"],
        "--save-transform {t}/adir: is a directory",
        None,
        None,
    ),
    (
        "out run set exists",
        F + ["runs", "--out", "phi"],
        "--out {t}/phi: already exists; pass --force",
        stabcli_dir("phi"),
        None,
    ),
    (
        "out run set holds a user's file",
        F + ["runs", "--out", "phi", "--force"],
        "--out {t}/phi: holds {t}/phi/notes.txt, which stabcli did not write",
        stabcli_dir("phi", "notes.txt"),
        None,
    ),
    (
        "out run set holds a user's file in a run",
        F + ["runs", "--out", "phi", "--force"],
        "holds {t}/phi/run-000/mywork.txt, which stabcli did not write",
        stabcli_dir("phi", "run-000/mywork.txt"),
        None,
    ),
    (
        "out run set holds a user's folder",
        F + ["runs", "--out", "phi", "--force"],
        "holds {t}/phi/analysis",
        stabcli_dir("phi", "analysis/x.tex"),
        None,
    ),
    (
        "out run set holds a symlink",
        F + ["runs", "--out", "phi", "--force"],
        "holds {t}/phi/keys.txt",
        lambda t: (stabcli_dir("phi")(t), (t / "phi" / "keys.txt").symlink_to(t / "plain")),
        None,
    ),
    (
        "out run set is a file",
        F + ["runs", "--out", "plain", "--force"],
        "--out {t}/plain: exists and is not a directory",
        None,
        None,
    ),
    (
        "out run set is a symlink to a directory",
        F + ["runs", "--out", "linked", "--force"],
        "--out {t}/linked: is a symlink",
        lambda t: (stabcli_dir("phi")(t), (t / "linked").symlink_to(t / "phi")),
        None,
    ),
    # ---- output locations (issue 13: validated before the first write)
    (
        "save-transform in a missing directory",
        F + ["a.npy", "--out", "o.npy", "--save-transform", "nodir/t.npz"],
        "--save-transform {t}/nodir/t.npz: directory {t}/nodir does not exist",
        None,
        None,
    ),
    (
        "out in a missing directory",
        F + ["a.npy", "--out", "nodir/o.npy"],
        "--out {t}/nodir/o.npy: directory {t}/nodir does not exist",
        None,
        None,
    ),
    (
        "out under a file",
        F + ["a.npy", "--out", "plain/o.npy"],
        "--out {t}/plain/o.npy: {t}/plain is not a directory",
        None,
        None,
    ),
    (
        "run set out in a missing directory",
        F + ["runs", "--out", "nodir/phi"],
        "directory {t}/nodir does not exist",
        None,
        None,
    ),
    # ---- formats (issue 14 §3)
    (
        "suffix contradicts --output-format",
        F + ["a.npy", "--out", "x.kv", "--output-format", "npy"],
        "--output-format: npy contradicts the suffix of --out {t}/x.kv (kv)",
        None,
        None,
    ),
    (
        "txt suffix with --output-format parquet",
        F + ["a.npy", "--out", "x.txt", "--output-format", "parquet"],
        "--output-format: parquet contradicts the suffix",
        None,
        None,
    ),
    (
        "unknown suffix",
        F + ["a.npy", "--out", "x.foo"],
        "--out {t}/x.foo: cannot tell the format from the suffix '.foo'",
        None,
        None,
    ),
    ("no suffix", F + ["a.npy", "--out", "x"], "cannot tell the format from the suffix '(none)'", None, None),
    (
        "unknown --output-format",
        F + ["a.npy", "--out", "x.npy", "--output-format", "csv"],
        "'--output-format': 'csv' is not one of 'npy', 'word2vec'",
        None,
        None,
    ),
    (
        "run set with --output-format kv",
        F + ["runs", "--out", "phi", "--output-format", "kv"],
        "--output-format: kv: a run set is featurized into a run set of .npy runs",
        None,
        None,
    ),
    # ---- option values (issue 13 §1: FeaturizeOptions)
    (
        "negative seed",
        F + ["a.npy", "--out", "o.npy", "--seed", "-1"],
        "--seed: must be at least 0, got",
        None,
        None,
    ),
    ("odd dim", F + ["a.npy", "--out", "o.npy", "--dim", "7"], "--dim: 7 must be an even integer >= 2", None, None),
    (
        "negative dim",
        F + ["a.npy", "--out", "o.npy", "--dim", "-2"],
        "'--dim': Input should be greater than or equal to 0",
        None,
        None,
    ),
    (
        "dim 0 without --align-to",
        F + ["a.npy", "--out", "o.npy", "--dim", "0"],
        "--dim: 0 only aligns: it needs --align-to",
        None,
        None,
    ),
    (
        "dim and epsilon",
        F + ["a.npy", "--out", "o.npy", "--dim", "8", "--epsilon", "0.1"],
        "--epsilon: give --dim or --epsilon, not both",
        None,
        None,
    ),
    (
        "zero epsilon",
        F + ["a.npy", "--out", "o.npy", "--epsilon", "0"],
        "--epsilon: 0.0 must be a positive number",
        None,
        None,
    ),
    (
        "negative epsilon",
        F + ["a.npy", "--out", "o.npy", "--epsilon", "-0.5"],
        "--epsilon: -0.5 must be a positive",
        None,
        None,
    ),
    (
        "nan epsilon",
        F + ["a.npy", "--out", "o.npy", "--epsilon", "nan"],
        "--epsilon: nan must be a positive",
        None,
        None,
    ),
    (
        "zero sigma",
        F + ["a.npy", "--out", "o.npy", "--sigma", "0"],
        "--sigma: must be greater than 0, got 0",
        None,
        None,
    ),
    (
        "negative sigma",
        F + ["a.npy", "--out", "o.npy", "--sigma", "-1"],
        "--sigma: must be greater than 0, got -1",
        None,
        None,
    ),
    (
        "nan sigma",
        F + ["a.npy", "--out", "o.npy", "--sigma", "nan"],
        "--sigma: must be greater than 0, got nan",
        None,
        None,
    ),
    (
        "infinite sigma",
        F + ["a.npy", "--out", "o.npy", "--sigma", "inf"],
        "--sigma: must be greater than 0, got inf",
        None,
        None,
    ),
    (
        "sigma so large the features are NaN",
        F + ["a.npy", "--out", "o.npy", "--sigma", "1e300"],
        "--sigma: 1e+300 makes the features of key 'k0'",
        None,
        None,
    ),
    (
        "sigma so large the features are NaN, unnormalized",
        F + ["a.npy", "--out", "o.vec", "--sigma", "1e300", "--no-normalize"],
        "--sigma: 1e+300 makes the features",
        None,
        None,
    ),
    (
        "sigma so large, run set",
        F + ["runs", "--out", "phi", "--sigma", "1e300"],
        "--sigma: 1e+300 makes the features",
        None,
        None,
    ),
    (
        "sigma so large, with --epsilon",
        F + ["a.npy", "--out", "o.npy", "--epsilon", "0.1", "--sigma", "1e300"],
        "--sigma: 1e+300 makes the features",
        None,
        None,
    ),
    (
        "sigma so large, with --epsilon, unnormalized",
        F + ["a.npy", "--out", "o.npy", "--epsilon", "0.1", "--sigma", "1e300", "--no-normalize"],
        "--sigma: 1e+300 makes the features",
        None,
        None,
    ),
    (
        "sigma overflowing float32 only",
        F + ["a.npy", "--out", "o.npy", "--sigma", "1e39"],
        "--sigma: 1e+39 makes the features",
        None,
        None,
    ),
    (
        "zero chunk rows",
        F + ["a.npy", "--out", "o.npy", "--chunk-rows", "0"],
        "--chunk-rows: must be at least 1, got",
        None,
        None,
    ),
    (
        "negative chunk rows",
        F + ["a.npy", "--out", "o.npy", "--chunk-rows", "-5"],
        "--chunk-rows: must be at least 1, got",
        None,
        None,
    ),
    (
        "huge dim",
        F + ["a.npy", "--out", "o.npy", "--dim", "1000000000"],
        "--dim: M = 1,000,000,000 for 30 rows of dimension 4 (npy output) needs about",
        None,
        None,
    ),
    ("huge dim, run set", F + ["runs", "--out", "phi", "--dim", "100000000000"], "of memory is available", None, None),
    (
        "reference without --align-to",
        F + ["a.npy", "--out", "o.npy", "--reference", "1"],
        "--reference: only applies with --align-to RUN_SET",
        None,
        None,
    ),
    (
        "negative reference",
        F + ["a.npy", "--out", "o.npy", "--align-to", "runs", "--reference", "-1"],
        "--reference: must be at least 0, got",
        None,
        None,
    ),
    (
        "reference past the run set",
        F + ["a.npy", "--out", "o.npy", "--align-to", "runs", "--reference", "3"],
        "--reference: 3: {t}/runs has 3 complete runs (positions 0 to 2)",
        None,
        None,
    ),
    # ---- references and keys (issue 14 §1)
    (
        "keyless input, keyed reference",
        F + ["keyless.npy", "--out", "o.npy", "--dim", "0", "--align-to", "a.npy"],
        "{t}/keyless.npy: has no keys file (keyless.keys.txt), but {t}/a.npy has keys",
        None,
        None,
    ),
    (
        "keyed input, keyless reference",
        F + ["a.npy", "--out", "o.npy", "--align-to", "keyless.npy"],
        "{t}/keyless.npy: has no keys file",
        None,
        None,
    ),
    (
        "keyed run set, keyless reference",
        F + ["runs", "--out", "phi", "--align-to", "keyless.npy"],
        "{t}/keyless.npy: has no keys file",
        None,
        None,
    ),
    (
        "keyless arrays of different lengths",
        F + ["keyless.npy", "--out", "o.npy", "--align-to", "short.npy"],
        "{t}/short.npy: 10 rows, but {t}/keyless.npy has 30",
        None,
        None,
    ),
    (
        "reference of another dimension",
        F + ["a.npy", "--out", "o.npy", "--align-to", "d8.npy"],
        "{t}/d8.npy: dimension 8, but {t}/a.npy has 4",
        None,
        None,
    ),
    (
        "missing reference",
        F + ["a.npy", "--out", "o.npy", "--align-to", "nope.npy"],
        "{t}/nope.npy: no such file",
        None,
        None,
    ),
    (
        "reference directory that is not a run set",
        F + ["a.npy", "--out", "o.npy", "--align-to", "adir"],
        "{t}/adir: a directory but not a run set",
        None,
        None,
    ),
    (
        "input directory that is not a run set",
        F + ["adir", "--out", "o.npy"],
        "{t}/adir: a directory but not a run set",
        None,
        None,
    ),
    ("missing input", F + ["nope.npy", "--out", "o.npy"], "{t}/nope.npy: no such file", None, None),
    # ---- audit outputs (issue 12 §1)
    (
        "audit --json inside the run set",
        AUDIT + ["--json", "runs/run-000/vectors.npy"],
        "--json {t}/runs/run-000/vectors.npy: lies inside the input {t}/runs",
        None,
        None,
    ),
    (
        "audit --markdown on the manifest",
        AUDIT + ["--markdown", "runs/stabcli.json", "--force"],
        "--markdown {t}/runs/stabcli.json: lies inside the input {t}/runs",
        None,
        None,
    ),
    (
        "GITHUB_STEP_SUMMARY inside the run set",
        AUDIT,
        "GITHUB_STEP_SUMMARY {t}/runs/keys.txt: lies inside the input {t}/runs",
        None,
        {"GITHUB_STEP_SUMMARY": "runs/keys.txt"},
    ),
    (
        "GITHUB_STEP_SUMMARY is an input file",
        ["audit", "a.npy", "b.npy"],
        "GITHUB_STEP_SUMMARY {t}/b.npy: is the input",
        None,
        {"GITHUB_STEP_SUMMARY": "b.npy"},
    ),
    (
        "GITHUB_STEP_SUMMARY is a directory",
        AUDIT,
        "GITHUB_STEP_SUMMARY {t}/adir: is a directory",
        None,
        {"GITHUB_STEP_SUMMARY": "adir"},
    ),
    (
        "GITHUB_STEP_SUMMARY is the --json file",
        AUDIT + ["--json", "r.json"],
        "GITHUB_STEP_SUMMARY {t}/r.json: is also --json {t}/r.json",
        None,
        {"GITHUB_STEP_SUMMARY": "r.json"},
    ),
    (
        "audit --json on an input file",
        ["audit", "a.npy", "b.npy", "--json", "a.npy", "--force"],
        "--json {t}/a.npy: is the input {t}/a.npy",
        None,
        None,
    ),
    (
        "audit --json on an input's keys file",
        ["audit", "a.npy", "b.npy", "--json", "b.keys.txt", "--force"],
        "--json {t}/b.keys.txt: is the input {t}/b.keys.txt",
        None,
        None,
    ),
    (
        "audit --markdown through a symlink to an input",
        ["audit", "a.npy", "b.npy", "--markdown", "r.md", "--force"],
        "--markdown {t}/r.md: is the input {t}/a.npy",
        link("r.md", "a.npy"),
        None,
    ),
    (
        "audit --json on the labels file",
        AUDIT + ["--labels", "labels.csv", "--json", "labels.csv", "--force"],
        "--json {t}/labels.csv: is the input {t}/labels.csv",
        None,
        None,
    ),
    (
        "audit --plots is the run set",
        AUDIT + ["--plots", "runs", "--force"],
        "--plots {t}/runs: is the input {t}/runs",
        None,
        None,
    ),
    (
        "audit --plots inside the run set",
        AUDIT + ["--plots", "runs/plots"],
        "--plots {t}/runs/plots: lies inside the input",
        None,
        None,
    ),
    ("audit --plots holds the run set", AUDIT + ["--plots", ".", "--force"], "contains the input {t}/runs", None, None),
    (
        "audit --json and --markdown on one file",
        AUDIT + ["--json", "r.out", "--markdown", "r.out"],
        "--markdown {t}/r.out: is also --json {t}/r.out",
        None,
        None,
    ),
    (
        "audit --json inside --plots",
        AUDIT + ["--plots", "p", "--json", "p/r.json"],
        "--plots {t}/p: overlaps --json {t}/p/r.json",
        None,
        None,
    ),
    (
        "audit --json exists",
        AUDIT + ["--json", "r.json"],
        "--json {t}/r.json: already exists; pass --force",
        exists("r.json"),
        None,
    ),
    (
        "audit --markdown exists",
        AUDIT + ["--markdown", "r.md"],
        "--markdown {t}/r.md: already exists",
        exists("r.md"),
        None,
    ),
    ("audit --plots exists", AUDIT + ["--plots", "plots"], "--plots {t}/plots: already exists", plots_dir(), None),
    (
        "audit --plots holds a user's file",
        AUDIT + ["--plots", "plots", "--force"],
        "--plots {t}/plots: holds {t}/plots/thesis.tex, which stabcli did not write",
        plots_dir("thesis.tex"),
        None,
    ),
    (
        "audit --plots is a file",
        AUDIT + ["--plots", "plain", "--force"],
        "--plots {t}/plain: exists and is not a directory",
        None,
        None,
    ),
    (
        "audit --json is a directory",
        AUDIT + ["--json", "adir", "--force"],
        "--json {t}/adir: is a directory",
        None,
        None,
    ),
    (
        "audit --json in a missing directory",
        AUDIT + ["--json", "nodir/r.json"],
        "--json {t}/nodir/r.json: directory {t}/nodir does not exist",
        None,
        None,
    ),
    ("audit --markdown under a file", AUDIT + ["--markdown", "plain/r.md"], "{t}/plain is not a directory", None, None),
    (
        "audit --plots in a missing directory",
        AUDIT + ["--plots", "nodir/plots"],
        "directory {t}/nodir does not exist",
        None,
        None,
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("argv, fragment, setup, env", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(tmp_path, monkeypatch, argv, fragment, setup, env):
    t = workspace(tmp_path)
    if setup:
        setup(t)
    monkeypatch.chdir(t)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, str(t / value))
    argv = [
        str(t / a) if not a.startswith("-") and a not in ("featurize", "audit") and not _is_value(argv, i) else a
        for i, a in enumerate(argv)
    ]
    before = files_state(t)
    result = runner.invoke(app, argv)
    assert_bad_input(result, fragment.format(t=t), t, before)


VALUE_OPTIONS = {
    "--format",
    "--output-format",
    "--seed",
    "--dim",
    "--epsilon",
    "--sigma",
    "--chunk-rows",
    "--reference",
    "--knn-k",
    "--pairs",
    "--knn-queries",
}


def _is_value(argv, i):
    """Whether argv[i] is the value of an option that is not a path."""
    return i > 0 and argv[i - 1] in VALUE_OPTIONS


# ---- any option values: exit 0 with finite output, or 2 with one line (issue 13 §3)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MAGNITUDES = st.one_of(
    st.integers(-10, 10), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 2, 3, 4, 8, 64, 10**9])
)
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-300, 1e-8, 0.3, 1.0, 5.0, 1e30, 1e300])
)
TEXT = st.one_of(st.text(max_size=6), st.sampled_from(["", " ", "1e3", "0x10", "½", "𝟘", "-", "--dim", "nan"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    options=st.lists(
        st.one_of(
            st.tuples(st.just("--dim"), st.one_of(MAGNITUDES.map(str), TEXT)),
            st.tuples(st.just("--sigma"), st.one_of(FLOATS.map(repr), TEXT)),
            st.tuples(st.just("--seed"), st.one_of(MAGNITUDES.map(str), TEXT)),
            st.tuples(st.just("--chunk-rows"), st.one_of(MAGNITUDES.map(str), TEXT)),
            st.tuples(st.just("--reference"), MAGNITUDES.map(str)),
            st.tuples(
                st.just("--output-format"),
                st.one_of(st.sampled_from(["npy", "kv", "word2vec", "parquet", "csv"]), TEXT),
            ),
            st.tuples(
                st.just("--epsilon"), st.one_of(st.sampled_from(["0.2", "0.5", "-1", "nan", "inf", "0", "1e300"]), TEXT)
            ),
        ),
        max_size=3,
    )
)
def test_any_option_values_exit_0_or_2_without_a_traceback(tmp_path, options):
    t = tmp_path
    if not (t / "a.npy").exists():
        write_embedding(t / "a.npy", KEYS, vectors(0))
    argv = ["featurize", str(t / "a.npy"), "--out", str(t / "o.npy"), "--force"] + [x for pair in options for x in pair]
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 2), (argv, result.output)
    assert "Traceback" not in result.output and "Warning" not in result.output, (argv, result.output)
    if result.exit_code == 0:
        assert np.isfinite(np.load(t / "o.npy")).all()
    else:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 or "Usage:" in result.stderr, (argv, result.stderr)  # typer's own usage errors
