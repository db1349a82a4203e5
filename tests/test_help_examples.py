"""Every example of every command's ``--help`` is executed, not only parsed: a small workspace
holds a file (or run set) for every path the examples name, each example runs in its own
copy of it through the CLI runner, and must exit 0 (1 only where its ``--check`` is the point
and the tiny data fails it). ``stabcli demo --out DIR`` runs in test_cli.py's demo test."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli import COMMANDS, help_examples

import stabcli
from conftest import invoke, make_sessions
from stabcli.inputs.embeddings import write_embedding
from stabcli.runset import RunSet

TRAIN = {"dim": 8, "epochs": 2, "jobs": 1}
FLAGS = [f"{flag:02d}" for flag in range(19)]  # u.item's 19 genre columns
# a script run that ignores any corpus: seeded random vectors for 30 keys (the --script example)
TRAIN_SCRIPT = """\
import argparse, pathlib
import numpy as np
p = argparse.ArgumentParser(); p.add_argument("--seed", type=int); p.add_argument("--out", type=pathlib.Path)
a = p.parse_args()
v = np.random.default_rng(a.seed).standard_normal((30, 8))
a.out.mkdir(parents=True, exist_ok=True)
lines = [f"30 8"] + [f"w{i} " + " ".join(f"{x:.6f}" for x in row) for i, row in enumerate(v)]
(a.out / "vectors.txt").write_text("\\n".join(lines) + "\\n")
"""


def _movielens(root: Path) -> None:
    """ml-1m's ratings.dat and movies.dat, ml-100k's u.item (latin-1, an é in a title), and the
    key,label / key,value tables the examples read: 60 movies in 4 genres, users who keep to one."""
    rng = np.random.default_rng(7)
    movies = np.arange(1, 61)
    genre = movies % 4
    (root / "ml-1m").mkdir()
    (root / "ml-100k").mkdir()
    lines = []
    for user in range(1, 151):
        liked = movies[genre == user % 4]
        chosen = rng.choice(liked, size=12, replace=False)
        for t, movie in enumerate(chosen):
            rating = int(rng.integers(3, 6))
            lines.append(f"{user}::{movie}::{rating}::{978300000 + 60 * t + user}")
    (root / "ml-1m" / "ratings.dat").write_text("\n".join(lines) + "\n", encoding="latin-1")
    names = ["Action", "Comedy", "Drama", "Horror"]
    second = {m: names[(m + 1) % 4] for m in movies if m % 3 == 0}  # a third of the movies have two genres
    (root / "ml-1m" / "movies.dat").write_text(
        "".join(f"{m}::Café {m} (1995)::{names[m % 4]}{'|' + second[m] if m in second else ''}\n" for m in movies),
        encoding="latin-1",
    )
    rows = []
    for m in movies:
        flags = ["0"] * 19
        flags[1 + m % 4] = "1"
        rows.append(f"{m}|Café {m} (1995)|01-Jan-1995||http://x|" + "|".join(flags))
    (root / "ml-100k" / "u.item").write_text("\n".join(rows) + "\n", encoding="latin-1")
    (root / "genres.csv").write_text("".join(f"{m},{names[m % 4]}\n" for m in movies))
    mean = {m: 3.0 + (m % 4) * 0.4 + float(rng.normal(0, 0.1)) for m in movies}
    (root / "ratings_mean.csv").write_text("".join(f"{m},{mean[m]:.3f}\n" for m in movies))


def _copy_runs(source: Path, *targets: Path) -> None:
    for target in targets:
        shutil.copytree(source, target)


def _save_npy(path: Path, keys: list[str], vectors: np.ndarray) -> None:
    np.save(path, vectors.astype(np.float32))
    path.with_suffix(".keys.txt").write_text("\n".join(keys) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A file or run set for every path the examples name (their commands write the rest)."""
    root = tmp_path_factory.mktemp("examples")
    sessions = make_sessions(n_sequences=150, n_items=40)
    (root / "sessions.txt").write_text(sessions, encoding="utf-8")
    genres = "".join(f"t{i}\tg{i // 10}\n" for i in range(40))
    (root / "item_genres.tsv").write_text(genres, encoding="utf-8")
    (root / "genres.tsv").write_text(genres, encoding="utf-8")
    (root / "docs.tsv").write_text(
        "".join(
            f"doc{d}\t" + " ".join(f"w{(d % 3) * 20 + (d * 7 + j) % 20}" for j in range(8)) + "\n" for d in range(30)
        )
    )
    with gzip.open(root / "articles.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("".join(f"The cat, the dog and the bird {i % 9}. A Mat!\n" for i in range(200)))
    (root / "train.py").write_text(TRAIN_SCRIPT, encoding="utf-8")
    _movielens(root)

    runs = root / "runs"
    stabcli.pretrain(root / "sessions.txt", runs / "exp1", runs=4, **TRAIN)
    _copy_runs(runs / "exp1", runs / "yesterday", runs / "v1", runs / "before", runs / "dim32")
    stabcli.pretrain(root / "sessions.txt", runs / "v2", runs=1, seed=50, **TRAIN)
    stabcli.pretrain(root / "sessions.txt", runs / "dim64", runs=2, **{**TRAIN, "dim": 16})
    stabcli.featurize(runs / "exp1", runs / "exp1-phi", dim=16)
    stabcli.pretrain(root / "ml-1m" / "ratings.dat", runs / "ml", runs=4, **TRAIN)

    exp1, v2, ml = RunSet.open(runs / "exp1"), RunSet.open(runs / "v2"), RunSet.open(runs / "ml")
    keys = list(exp1.load(exp1.runs[0]).keys)
    for name, r in (("a", 0), ("b", 1), ("c", 2), ("yesterday", 0), ("before", 0)):
        write_embedding(root / f"{name}.vec", keys, exp1.load(exp1.runs[r]).vectors)
    later = v2.load(v2.runs[0])
    write_embedding(root / "today.vec", list(later.keys), later.vectors)
    write_embedding(root / "after.vec", list(later.keys), later.vectors)
    _save_npy(root / "today.npy", list(later.keys), later.vectors)
    np.save(root / "emb.npy", exp1.load(exp1.runs[0]).vectors)
    counts = (runs / "exp1" / "key_counts.txt").read_text(encoding="utf-8").split()
    (root / "counts.tsv").write_text("".join(f"{k}\t{c}\n" for k, c in zip(keys, counts, strict=True)))
    new = ml.load(ml.runs[0])
    _save_npy(root / "ml-new.npy", list(new.keys), new.vectors + np.float32(0.01))
    for name, source in (("last-week", runs / "exp1"), ("this-week", runs / "dim32")):
        assert invoke("audit", source, "--json", root / f"{name}.json").exit_code == 0
    return root


EXAMPLES = [
    pytest.param(argv, id=" ".join(argv)[:80]) for name in COMMANDS if name != "demo" for argv in help_examples(name)
]


def _prepared(argv: list[str], work: Path) -> list[str]:
    """The example as run in ``work``: ``python`` in a ``--script`` is this interpreter, and the
    output ``--out`` names is new (the workspace's copy may hold one of that name, and its
    ``NAME.*`` sidecars)."""
    args = [a.replace("python ", f"{sys.executable} ", 1) if a.startswith("python ") else a for a in argv]
    for flag, value in itertools.pairwise(args):
        if flag == "--out":
            target = work / value
            for path in [target, *target.parent.glob(f"{target.name}.*")]:
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
    return args


@pytest.mark.parametrize("argv", EXAMPLES)
def test_every_help_example_runs(workspace, tmp_path, monkeypatch, argv):
    if "--mlflow" in argv:
        pytest.importorskip("mlflow", reason="MLflow is not installed: pip install 'stabcli[mlflow]'")
    work = tmp_path / "work"
    shutil.copytree(workspace, work)
    monkeypatch.chdir(work)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")  # as test_tracking's store
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    result = invoke(*_prepared(argv, work))
    expected = {0, 1} if "--check" in argv else {0}  # 1: a check the tiny data fails, reported as such
    assert result.exit_code in expected, (argv, result.output[-3000:])
    if result.exit_code == 1:
        assert "FAIL" in result.output or "failed" in result.output, result.output[-2000:]
    for flag, value in itertools.pairwise(argv):  # every file the example writes is there
        if flag in ("--json", "--markdown", "--html", "--per-key", "--out", "--plots"):
            assert (work / value).exists(), (flag, value)
        if flag == "--json":
            json.loads((work / value).read_text(encoding="utf-8"))


def test_every_command_but_demo_has_its_examples_executed_here():
    assert {argv[0] for argv in (p.values[0] for p in EXAMPLES)} == set(COMMANDS) - {"demo"}
    assert help_examples("demo") == [["demo", "--out", "/tmp/stabcli-demo"]]  # run by test_cli's demo test
