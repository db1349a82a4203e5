"""What `audit --labels` adds to an audit, per model: wall time and peak RSS, in fresh processes.

    python benchmarks/bench_downstream.py                  # 10 runs × 50,000 keys × 64 dims, 12 classes
    python benchmarks/bench_downstream.py --runs 3 --n 2000 --dim 16   # a check that it works (minutes)
    python benchmarks/bench_downstream.py --models logreg,gbdt --variants h   # 10 fits per model

Synthetic runs: 12 Gaussian clusters (the cluster is the label) plus per-run noise, each
run rotated. The same run set is audited without `--labels`, then with `--labels --model M`
for every model: logreg, knn, ridge, gbdt, mlp and one estimator by import path
(`sklearn.svm:LinearSVC`); default variants h, avg, aligned, phi:64, phi:128 (phi:64 only
for the costly gbdt, mlp and imported estimators). Each audit runs in its own wrapper
process, so every peak RSS (ru_maxrss of the wrapper's children: the largest process of that
audit, workers included) is that audit's. Prints one JSON line per measurement (with the
load average before and after it) and writes them all to benchmarks/results/downstream.json.
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


MODELS = "logreg,knn,ridge,gbdt,mlp,sklearn.svm:LinearSVC"


def measurement(name: str, argv: list[str], common: dict) -> tuple[dict, str]:
    """One measured audit as a JSON-ready dict (printed as one line) and its stdout."""
    load_before = os.getloadavg()[0]
    seconds, peak, stdout = measured(argv)
    entry = {
        **common,
        "measurement": name,
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(peak),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    return entry, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=50_000, help="keys")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--models", default=MODELS, help=f"comma-separated --model values [{MODELS}]")
    parser.add_argument("--variants", default=None, help="passed to --variants [default: each model's default set]")
    args = parser.parse_args()
    common = {
        "bench": "downstream",
        "date": time.strftime("%Y-%m-%d"),
        "cores": len(os.sched_getaffinity(0)),
        "runs": args.runs,
        "keys": args.n,
        "dim": args.dim,
        "variants": args.variants or "each model's default",
    }
    metrics = ("accuracy_mean", "accuracy_std", "churn", "stale_accuracy_mean")
    lines = []
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        root = Path(tmp) / "runs"
        labels = make_runset(root, args.runs, args.n, args.dim, classes=12)
        base = ["audit", str(root), "--format", "json"]
        entry, _ = measurement("audit", base, common)
        lines.append(entry)
        print(json.dumps(entry), flush=True)
        for model in args.models.split(","):
            chosen = ["--variants", args.variants] if args.variants else []
            argv = base + ["--labels", str(labels), "--model", model, *chosen]
            entry, stdout = measurement(f"audit --labels --model {model}", argv, common)
            ds = json.loads(stdout)["downstream"]
            entry["fits"] = sum(len(v["accuracy_by_run"]) for v in ds["variants"].values())
            entry["results"] = {k: {m: v[m] for m in metrics} for k, v in ds["variants"].items()}
            lines.append(entry)
            print(json.dumps(entry), flush=True)
    out = ROOT / "benchmarks" / "results" / "downstream.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))


if __name__ == "__main__":
    main()
