"""The next-item task at scale: `audit --interactions` on R runs × n items × d dims, in fresh processes.

    python benchmarks/bench_nextitem.py                    # 10 runs × 100,000 items × 64 dims, 100,000 users
    python benchmarks/bench_nextitem.py --users-scored 0   # every user (the default scores a 10,000 sample)
    python benchmarks/bench_nextitem.py --runs 3 --n 5000 --users 2000   # a check that it works (a minute)

Synthetic data: items in 200 clusters (a cluster centre plus per-item and per-run noise,
every run rotated); each user stays in one cluster for 10-30 interactions with increasing
timestamps, so the held-out item is predictable. The same run set is audited without and
with `--interactions` (default profiles mean and last, K = 5, 10, 20, variants h and avg, the
stale case), each in its own wrapper process: wall time and peak RSS (ru_maxrss of the
wrapper's children). Prints one JSON line per measurement (with the load average before and
after it) and writes them to benchmarks/results/nextitem.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from bench_audit import write_runset  # benchmarks/ is on sys.path when run as a script
from bench_downstream import measurement

ROOT = Path(__file__).resolve().parents[1]


def make_data(root: Path, runs: int, n: int, d: int, users: int) -> Path:
    from scipy.stats import ortho_group

    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 200, n)
    base = (2.0 * rng.standard_normal((200, d))[clusters] + rng.standard_normal((n, d))).astype(np.float32)

    def rotated() -> Iterator[np.ndarray]:
        for r in range(runs):
            noisy = base + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
            yield (noisy @ ortho_group.rvs(d, random_state=r)).astype(np.float32)

    write_runset(root, n, rotated())
    members = [np.flatnonzero(clusters == c) for c in range(200)]
    path = root.parent / "interactions.csv"
    with open(path, "w") as fh:
        fh.write("user,item,timestamp\n")
        for u in range(users):
            pool = members[rng.integers(200)]
            items = rng.choice(pool, size=rng.integers(10, 31))
            fh.write("".join(f"u{u},k{i},{t}\n" for t, i in enumerate(items)))
    return path


METRICS = ("recall_mean", "ndcg_mean", "jaccard", "rbo", "stale_recall_raw", "stale_recall_aligned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=100_000, help="items")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--users", type=int, default=100_000, help="users in the interaction file")
    parser.add_argument("--users-scored", type=int, default=10_000, help="audit --users (0: every user)")
    args = parser.parse_args()
    common = {
        "bench": "nextitem",
        "date": time.strftime("%Y-%m-%d"),
        "cores": len(os.sched_getaffinity(0)),
        "runs": args.runs,
        "items": args.n,
        "dim": args.dim,
        "users": args.users,
        "users_scored": args.users_scored,
    }
    lines = []
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        root = Path(tmp) / "runs"
        start = time.perf_counter()
        interactions = make_data(root, args.runs, args.n, args.dim, args.users)
        common["data_seconds"] = round(time.perf_counter() - start, 1)
        base = ["audit", str(root), "--format", "json"]
        next_item = base + ["--interactions", str(interactions), "--users", str(args.users_scored)]
        for name, argv in (("audit", base), ("audit --interactions", next_item)):
            entry, stdout = measurement(name, argv, common)
            if name == "audit --interactions":
                section = json.loads(stdout)["next_item"]
                entry["evaluated_users"] = section["evaluated_users"]
                entry["results"] = {
                    f"{v}/{kind}/{k}": {m: e[m] for m in METRICS}
                    for v, by_kind in section["variants"].items()
                    for kind, per_k in by_kind.items()
                    for k, e in per_k.items()
                }
            lines.append(entry)
            print(json.dumps(entry), flush=True)
    out = ROOT / "benchmarks" / "results" / "nextitem.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))


if __name__ == "__main__":
    main()
