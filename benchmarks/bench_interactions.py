"""Reading an interaction table: a MovieLens-shaped ``ratings.csv`` read into sequences and split.

    python benchmarks/bench_interactions.py                   # 25,000,000 rows (MovieLens 25M's size)
    python benchmarks/bench_interactions.py --rows 2000000    # a smaller table
    python benchmarks/bench_interactions.py --min-rating 4    # also --min-rating

* **table**: ``ratings.csv`` with MovieLens 25M's header and shape (about 155 ratings per
  user, 59,047 items with long-tailed popularity, ratings 0.5 to 5.0, integer timestamps
  with ties), sorted by user then item as MovieLens ships it; written once, not timed.
* **read**: in a fresh child process, ``read_corpus`` of it (``--corpus-format
  movielens``: what ``pretrain`` and ``audit --interactions`` read): the rows grouped
  into one time-ordered sequence per user. **split**: then the next-item task's
  leave-last-out split of every user against every item (``encoded_holdout``; ``holdout``
  of the sequences in a checkout without it), with the default sample of 10,000 users.
  Each phase's wall and CPU time, and the child's peak RSS after the read and at the end
  (``VmHWM`` in /proc/self/status: ``ru_maxrss`` would count the parent's memory the child
  was forked with).

``BENCH_STABCLI=DIR`` times the ``stabcli`` package of another checkout (before/after).
The machine's load average (``os.getloadavg``) is recorded before each measurement:
numbers from a shared machine carry it. Writes benchmarks/results/interactions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_STABCLI", ROOT))  # the checkout whose stabcli the child runs

CHILD = r"""
import json, sys, time
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.measure.downstream import nextitem

def peak_mb():
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024

def clock():
    return time.perf_counter(), time.process_time()

path, min_rating = sys.argv[1], (float(sys.argv[2]) if sys.argv[2] != "none" else None)
out = {}
start = clock()
corpus = read_corpus(path, "word2vec", CorpusOptions(format="movielens", min_rating=min_rating))
end = clock()
out["read_s"], out["read_cpu_s"] = end[0] - start[0], end[1] - start[1]
out["peak_rss_read_mb"] = peak_mb()
out["users"], out["tokens"], out["items"] = corpus.n_sequences, corpus.n_tokens, corpus.n_keys
keys = corpus.vocabulary()
start = clock()
if getattr(corpus, "encoded", None) is not None:
    split = nextitem.encoded_holdout(corpus.encoded, keys, 10_000, 0)
else:
    split = nextitem.holdout(corpus.sequences, keys, 10_000, 0)
end = clock()
out["split_s"], out["split_cpu_s"] = end[0] - start[0], end[1] - start[1]
out["evaluable_users"] = split.evaluable
out["peak_rss_mb"] = peak_mb()
print(json.dumps(out))
"""


def make_ratings(path: Path, rows: int, seed: int = 0) -> None:
    """A MovieLens-25M-shaped ratings.csv of ``rows`` rows (header userId,movieId,rating,timestamp)."""
    rng = np.random.default_rng(seed)
    users = max(2, rows // 155)
    items = max(10, min(59_047, rows // 40))
    per_user = rng.multinomial(rows, rng.dirichlet(np.full(users, 2.0)))
    popularity = 1.0 / np.arange(1, items + 1) ** 0.9
    popularity /= popularity.sum()
    with open(path, "w", encoding="ascii") as fh:
        fh.write("userId,movieId,rating,timestamp\n")
        user = 1
        for start in range(0, users, 20_000):  # about 3 million rows at a time
            counts = per_user[start : start + 20_000]
            n = int(counts.sum())
            u = np.repeat(np.arange(user, user + len(counts)), counts)
            user += len(counts)
            movie = rng.choice(items, size=n, p=popularity) + 1
            order = np.lexsort((movie, u))
            rating = rng.integers(1, 11, size=n) / 2
            stamp = rng.integers(789_652_009, 1_574_327_703, size=n) // 1000 * 1000  # ties
            lines = [
                f"{a},{b},{c:.1f},{d}\n"
                for a, b, c, d in zip(
                    u[order].tolist(), movie[order].tolist(), rating.tolist(), stamp.tolist(), strict=True
                )
            ]
            fh.write("".join(lines))


def measure(path: Path, min_rating: float | None) -> dict:
    load = os.getloadavg()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), "none" if min_rating is None else str(min_rating)],
        capture_output=True,
        text=True,
        cwd=CODE,
        env={**os.environ, "PYTHONPATH": str(CODE)},
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    result = {k: round(v, 2) if isinstance(v, float) else v for k, v in json.loads(proc.stdout).items()}
    return {**result, "min_rating": min_rating, "load_average_before": [round(x, 2) for x in load]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=25_000_000)
    parser.add_argument("--min-rating", type=float, default=None, help="also measure with --min-rating")
    args = parser.parse_args()
    results: dict = {"machine": {"cores": os.cpu_count()}, "date": time.strftime("%Y-%m-%d %H:%M"), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ratings.csv"
        make_ratings(path, args.rows)
        results["rows"], results["file_mb"] = args.rows, round(path.stat().st_size / 2**20)
        for min_rating in [None] + ([args.min_rating] if args.min_rating is not None else []):
            results["runs"].append({"rows": args.rows, **measure(path, min_rating)})
            print(json.dumps(results["runs"][-1]), flush=True)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "interactions.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
