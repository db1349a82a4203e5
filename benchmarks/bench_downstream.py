"""What `audit --labels` adds to an audit: wall time and peak RSS, in fresh processes.

    python benchmarks/bench_downstream.py                  # 10 runs × 50,000 keys × 64 dims, 12 classes
    python benchmarks/bench_downstream.py --n 200000

Synthetic runs: 12 Gaussian clusters (the cluster is the label) plus per-run noise, each
run rotated. The same run set is audited without and with `--labels` (default variants
h, avg, aligned, phi:64, phi:128; logistic regression). Prints the times and the
downstream table's numbers; writes benchmarks/results/downstream.json.
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
from bench_audit import run_stabcli, write_runset  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]


def make_runset(root: Path, runs: int, n: int, d: int, classes: int) -> Path:
    from scipy.stats import ortho_group

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((classes, d))
    y = rng.integers(0, classes, n)
    base = (centers[y] + 1.5 * rng.standard_normal((n, d))).astype(np.float32)

    def rotated() -> Iterator[np.ndarray]:
        for r in range(runs):
            noisy = base + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
            yield (noisy @ ortho_group.rvs(d, random_state=r)).astype(np.float32)

    write_runset(root, n, rotated())
    labels = root.parent / "labels.csv"
    labels.write_text("".join(f"k{i},c{y[i]}\n" for i in range(n)))
    return labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args()
    results: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "cores": len(os.sched_getaffinity(0)),
        "runs": args.runs,
        "keys": args.n,
        "dim": args.dim,
    }
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        root = Path(tmp) / "runs"
        labels = make_runset(root, args.runs, args.n, args.dim, classes=12)
        base = ["audit", str(root), "--format", "json"]
        for name, argv in (("audit", base), ("audit --labels", base + ["--labels", str(labels)])):
            seconds, peak, stdout = run_stabcli(argv)  # peak: the largest process so far (the audit or a worker)
            results[name] = {"seconds": round(seconds, 1), "peak_rss_mb_so_far": round(peak)}
            print(f"{name:>15}: {seconds:6.1f} s, peak RSS so far {peak:,.0f} MB", flush=True)
            if name == "audit --labels":
                ds = json.loads(stdout)["downstream"]
                results["downstream"] = {
                    k: {m: v[m] for m in ("accuracy_mean", "accuracy_std", "churn", "stale_accuracy_mean")}
                    for k, v in ds["variants"].items()
                }
                for k, v in results["downstream"].items():
                    print(f"  {k:>8}: " + ", ".join(f"{m} {'—' if x is None else f'{x:.4f}'}" for m, x in v.items()))
    out = ROOT / "benchmarks" / "results" / "downstream.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
