"""``stabcli drift`` at the issue's size: 200,000 keys × 64 dims with a 10-run noise set.

    python benchmarks/bench_drift.py [--n 200000] [--dim 64] [--runs 10]

Synthetic data: a base matrix; every run is base + per-key noise (its scale varies 10× over
keys, like word2vec's by frequency) under its own random rotation. BEFORE = run 0 of the
noise run set, AFTER = one more such run in which 1% of the keys moved by 4× their noise.
Times one ``stabcli drift BEFORE AFTER --noise RUNS --json … --per-key …`` child process
(wall time, CPU time of all its threads, peak RSS, and the load average before it: on a
shared machine the wall time depends on the load, the CPU time much less) and reports how many of the moved keys were found and the moved
share among the others. JSON in benchmarks/results/drift.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import ortho_group

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_audit import run_stabcli, write_runset

RESULTS = Path(__file__).resolve().parent / "results"


def make_data(root: Path, n: int, d: int, runs: int, seed: int = 0) -> np.ndarray:
    """Write ROOT/noise (a run set) and ROOT/after.npy (+ keys); returns the moved rows."""
    from stabcli.inputs.embeddings import write_embedding

    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d)).astype(np.float32)
    scale = np.exp(rng.uniform(np.log(0.03), np.log(0.3), size=n)).astype(np.float32)[:, None]

    def run(r: int) -> np.ndarray:
        noise = scale * rng.standard_normal((n, d), dtype=np.float32)
        return (base + noise) @ ortho_group.rvs(d, random_state=seed + r).astype(np.float32)

    write_runset(root / "noise", n, (run(r) for r in range(runs)))
    moved = np.sort(rng.choice(n, size=n // 100, replace=False))
    after = base + scale * rng.standard_normal((n, d), dtype=np.float32)
    direction = rng.standard_normal((len(moved), d)).astype(np.float32)
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    after[moved] += 4 * np.sqrt(2 * d) * scale[moved] * direction  # 4× the key's RMS pair distance
    after = after @ ortho_group.rvs(d, random_state=seed + runs).astype(np.float32)
    write_embedding(root / "after.npy", [f"k{i}" for i in range(n)], after)
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        moved = make_data(root, args.n, args.dim, args.runs)
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before = os.getloadavg()[0]
        seconds, peak, _ = run_stabcli(
            [
                "drift",
                str(root / "noise"),
                str(root / "after.npy"),
                "--noise",
                str(root / "noise"),
                "--json",
                str(root / "drift.json"),
                "--per-key",
                str(root / "keys.csv"),
                "--format",
                "json",
            ]
        )
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
        report = json.loads((root / "drift.json").read_text())
        import pandas as pd

        table = pd.read_csv(root / "keys.csv", usecols=["moved"])
        flagged = table["moved"].to_numpy()
    is_moved = np.zeros(args.n, dtype=bool)
    is_moved[moved] = True
    result = {
        "keys": args.n,
        "dim": args.dim,
        "noise_runs": args.runs,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "load_average_before": round(load_before, 1),
        "peak_rss_mb": round(peak),
        "moved_share": report["drift"]["moved_share"],
        "recall_of_moved": float(flagged[is_moved].mean()),
        "moved_share_among_others": float(flagged[~is_moved].mean()),
        "discoveries": report["drift"]["discoveries"],
        "knn_keys": report["drift"]["knn_keys"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "drift.json").write_text(json.dumps(result, indent=2) + "\n")
    for name, value in result.items():
        print(f"{name:28s} {value}")


if __name__ == "__main__":
    main()
