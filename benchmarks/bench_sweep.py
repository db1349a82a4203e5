"""A sweep's overhead over running the same pretrain + audit commands by hand.

    python benchmarks/bench_sweep.py                     # bundled sample, 2 windows × 2 sizes × 3 runs
    python benchmarks/bench_sweep.py --repeat 3 --labels

By hand: for every cell, `stabcli pretrain SAMPLE --out DIR ...` on the same nested sample
file the sweep trains on (written beforehand with stabcli.training.sweep_plan, not timed),
then `stabcli audit DIR --format json` (with `--labels ... --variants h` when --labels).
Sweep: one `stabcli sweep CORPUS --out DIR ...` with the same settings. Each is a fresh
process tree in a fresh directory; the two alternate, and the best of --repeat counts.
Prints both wall times and the ratio; the target is a ratio of at most 1.10.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "sample_data" / "sessions.txt"
LABELS = ROOT / "sample_data" / "item_genres.tsv"


def stabcli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stabcli", *args], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", default="2,5")
    parser.add_argument("--sizes", default="0.5,1")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--labels", action="store_true")
    args = parser.parse_args()
    from stabcli.inputs.corpus import read_corpus
    from stabcli.training import sweep_plan as plan

    windows = args.windows.split(",")
    sizes = plan.parse_sizes(args.sizes)
    common = ["--runs", str(args.runs), "--dim", str(args.dim), "--epochs", str(args.epochs), "-j", str(args.jobs)]
    labels = ["--labels", str(LABELS)] if args.labels else []
    corpus = read_corpus(SAMPLE)
    lines = corpus.token_lines().splitlines(keepends=True)
    order = plan.nested_order(len(lines), 0)
    best = {"by hand": float("inf"), "sweep": float("inf")}
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            samples = {}
            for size in sizes:
                samples[size] = work / f"sample-{size:g}.txt"
                samples[size].write_bytes(b"".join(lines[i] for i in plan.sample_indices(order, size)))
            start = time.perf_counter()
            for size, window in itertools.product(sizes, windows):
                out = work / f"hand-{size:g}-{window}"
                stabcli(
                    "pretrain",
                    str(samples[size]),
                    "--out",
                    str(out),
                    "--corpus-format",
                    "lines",
                    "--window",
                    window,
                    *common,
                )
                stabcli("audit", str(out), "--format", "json", *(labels + ["--variants", "h"] if labels else []))
            best["by hand"] = min(best["by hand"], time.perf_counter() - start)
            start = time.perf_counter()
            stabcli(
                "sweep", str(SAMPLE), "--out", str(work / "sweep"), "--grid", f"window={args.windows}",
                "--sizes", args.sizes, "--format", "json", *common, *labels,
            )  # fmt: skip
            best["sweep"] = min(best["sweep"], time.perf_counter() - start)
    cells = len(windows) * len(sizes)
    print(
        f"{cells} cells × {args.runs} runs, dim {args.dim}, {args.epochs} epochs, -j {args.jobs}; best of {args.repeat}"
    )
    print(f"by hand (pretrain + audit per cell): {best['by hand']:.1f} s")
    print(f"stabcli sweep:                       {best['sweep']:.1f} s")
    print(f"ratio sweep / by hand: {best['sweep'] / best['by hand']:.3f} (target <= 1.10)")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
