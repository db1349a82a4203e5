"""What `audit --labels` adds to an audit, per model: wall time and peak RSS, in fresh processes.

    python benchmarks/bench_downstream.py                  # 10 runs × 50,000 keys × 64 dims, 12 classes
    python benchmarks/bench_downstream.py --models logreg,gbdt --n 200000
    python benchmarks/bench_downstream.py --variants h         # 10 fits per model

Synthetic runs: 12 Gaussian clusters (the cluster is the label) plus per-run noise, each
run rotated. The same run set is audited without `--labels`, then with `--labels --model M`
for every model (default variants: h, avg, aligned, phi:64, phi:128; phi:64 only for the
costly gbdt and mlp). Each audit is measured in its own wrapper process, so every peak RSS
is that audit's (workers included). Prints the times and the downstream numbers; writes
benchmarks/results/downstream.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from bench_audit import write_runset  # benchmarks/ is on sys.path when run as a script

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


WRAPPER = """
import resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run([sys.executable, "-m", "stabcli", *sys.argv[1:]], capture_output=True, text=True)
seconds = time.perf_counter() - start
if proc.returncode != 0:
    sys.exit(proc.stderr)
print(seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.stdout.write(proc.stdout)
"""


def measured(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB (this audit and its workers only) and stdout of one audit."""
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    first, _, stdout = proc.stdout.partition("\n")
    seconds, peak = (float(v) for v in first.split())
    return seconds, peak, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--models", default="logreg,ridge,knn,gbdt,mlp")
    parser.add_argument("--variants", default=None, help="passed to --variants [default: each model's default set]")
    args = parser.parse_args()
    results: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "cores": len(os.sched_getaffinity(0)),
        "load_before": os.getloadavg()[0],
        "runs": args.runs,
        "keys": args.n,
        "dim": args.dim,
        "variants": args.variants or "each model's default",
    }
    metrics = ("accuracy_mean", "accuracy_std", "churn", "stale_accuracy_mean")
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        root = Path(tmp) / "runs"
        labels = make_runset(root, args.runs, args.n, args.dim, classes=12)
        base = ["audit", str(root), "--format", "json"]
        seconds, peak, _ = measured(base)
        results["audit"] = {"seconds": round(seconds, 1), "peak_rss_mb": round(peak)}
        print(f"{'audit':>22}: {seconds:6.1f} s, peak RSS {peak:,.0f} MB", flush=True)
        for model in args.models.split(","):
            name = f"audit --labels --model {model}"
            chosen = ["--variants", args.variants] if args.variants else []
            seconds, peak, stdout = measured(base + ["--labels", str(labels), "--model", model, *chosen])
            ds = json.loads(stdout)["downstream"]
            results[name] = {
                "seconds": round(seconds, 1),
                "peak_rss_mb": round(peak),
                "fits": sum(len(v["accuracy_by_run"]) for v in ds["variants"].values()),
                "variants": {k: {m: v[m] for m in metrics} for k, v in ds["variants"].items()},
            }
            print(f"{name:>22}: {seconds:6.1f} s, peak RSS {peak:,.0f} MB", flush=True)
            for k, v in results[name]["variants"].items():
                print(f"  {k:>8}: " + ", ".join(f"{m} {'—' if x is None else f'{x:.4f}'}" for m, x in v.items()))
    results["load_after"] = os.getloadavg()[0]
    out = ROOT / "benchmarks" / "results" / "downstream.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
