"""Audit at scale: full representation audit of R runs × n keys × d dims, in a fresh process.

    python benchmarks/bench_audit.py                      # 10 × 200,000 × 64 (issue target)
    python benchmarks/bench_audit.py --scaling            # also n = 50k..400k and R = 5, 10, 20
    python benchmarks/bench_audit.py --direct 10000       # PIP/CKA/k-NN vs the n×n formulas

Synthetic runs: rotations of one matrix plus noise, written as a run set. Each audit runs
as `python -m stabcli audit RUNSET --format json` in a child process; wall time and the
child's peak RSS (ru_maxrss) are measured. Prints a table and writes JSON to
benchmarks/results/audit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_runset(root: Path, n: int, runs: Iterable[np.ndarray]) -> None:
    """A run set `stabcli audit` reads: keys k0..k{n-1} shared by every run, one
    ``run-NNN/vectors.npy`` per array (written as they come), a minimal manifest; flushed
    to disk before it returns."""
    from stabcli.fs.atomic import write_json_atomic

    root.mkdir(parents=True)
    (root / "keys.txt").write_text("".join(f"k{i}\n" for i in range(n)))
    for r, vectors in enumerate(runs):
        (root / f"run-{r:03d}").mkdir()
        np.save(root / f"run-{r:03d}" / "vectors.npy", vectors)
    write_json_atomic(root / "stabcli.json", {"schema_version": 1, "runs": {}})
    os.sync()  # the timed audit must not compete with the writeback of the files it reads


def make_runset(root: Path, runs: int, n: int, d: int, seed: int = 0) -> None:
    from scipy.stats import ortho_group

    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d)).astype(np.float32)

    def rotated() -> Iterator[np.ndarray]:
        for r in range(runs):
            rot = ortho_group.rvs(d, random_state=seed + r).astype(np.float32)
            noise = 0.1 * rng.standard_normal((n, d), dtype=np.float32)
            yield (base + noise) @ rot

    write_runset(root, n, rotated())


def run_stabcli(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MB and stdout of one stabcli child process. The peak is
    ru_maxrss of RUSAGE_CHILDREN: the largest child so far (workers included), so run the
    sizes in increasing order."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stabcli", *argv], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, proc.stdout


def timed_audit(root: Path) -> dict:
    seconds, peak, stdout = run_stabcli(["audit", str(root), "--format", "json"])
    report = json.loads(stdout)["representation"]
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak),
        "noise_share": report["noise_share"],
        "aligned_noise_share": report["aligned_noise_share"],
        "knn_overlap": report["knn_overlap"],
    }


def direct_comparison(n: int, d: int = 64, runs: int = 2, k: int = 10, queries: int = 1000, reps: int = 3) -> dict:
    """stabcli's d×d / streamed forms against the n×n formulas research code uses, alternating
    within each repetition; medians of the times, and the values' agreement."""
    from stabcli.measure import metrics as m
    from stabcli.measure.neighbours import knn_overlap

    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, d))
    hs = [base + 0.3 * rng.standard_normal((n, d)) for _ in range(runs)]
    q = np.sort(rng.choice(n, queries, replace=False))

    def ours_pip_cka():
        grams = m.gram_blocks(hs)
        return m.pip_loss(grams, 0, 1), m.linear_cka(grams, 0, 1)

    def direct_pip():
        return float(np.linalg.norm(hs[0] @ hs[0].T - hs[1] @ hs[1].T))

    def direct_cka():
        xa, xb = hs[0] - hs[0].mean(0), hs[1] - hs[1].mean(0)
        ka, kb = xa @ xa.T, xb @ xb.T
        return float(np.sum(ka * kb) / (np.linalg.norm(ka) * np.linalg.norm(kb)))

    def ours_knn():
        return float(knn_overlap(hs, q, k).mean())

    def direct_knn():
        neigh = []
        for h in hs:
            unit = h / np.linalg.norm(h, axis=1, keepdims=True)
            sims = unit @ unit.T  # the full n×n similarity matrix
            np.fill_diagonal(sims, -np.inf)
            neigh.append(np.argsort(-sims[q], axis=1)[:, :k])
            del sims
        return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(*neigh, strict=False)]))

    contenders = {
        "stabcli_pip_cka": ours_pip_cka,
        "direct_pip": direct_pip,
        "direct_cka": direct_cka,
        "stabcli_knn": ours_knn,
        "direct_knn": direct_knn,
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    values: dict = {}
    for rep in range(reps):
        for name in list(contenders) if rep % 2 == 0 else list(contenders)[::-1]:
            start = time.perf_counter()
            values[name] = contenders[name]()
            times[name].append(time.perf_counter() - start)
    (pip, cka), pip_direct, cka_direct = values["stabcli_pip_cka"], values["direct_pip"], values["direct_cka"]
    out = {f"{name}_s": round(statistics.median(t), 4) for name, t in times.items()}
    out.update(
        n=n,
        reps=reps,
        pip_rel_diff=abs(pip - pip_direct) / pip_direct,
        cka_rel_diff=abs(cka - cka_direct) / cka_direct,
        knn_abs_diff=abs(values["stabcli_knn"] - values["direct_knn"]),
        pip_speedup=round(out["direct_pip_s"] / out["stabcli_pip_cka_s"], 1),
        knn_speedup=round(out["direct_knn_s"] / out["stabcli_knn_s"], 1),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--direct", type=int, default=0, metavar="N")
    args = parser.parse_args()
    results: dict = {"machine": {"cores": os.cpu_count()}, "date": time.strftime("%Y-%m-%d")}
    configs = [(args.runs, args.n, args.dim)]
    if args.scaling:
        configs = sorted(
            {(10, n, 64) for n in (50_000, 100_000, 200_000, 400_000)} | {(r, 200_000, 64) for r in (5, 20)},
            key=lambda c: c[0] * c[1],
        )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for runs, n, d in configs:
            root = Path(tmp) / f"r{runs}_n{n}_d{d}"
            make_runset(root, runs, n, d)
            row = {"runs": runs, "keys": n, "dim": d, **timed_audit(root)}
            rows.append(row)
            print(
                f"R={runs:3d} n={n:8,d} d={d}: {row['seconds']:7.2f} s, peak RSS {row['peak_rss_mb']:6,d} MB",
                flush=True,
            )
            subprocess.run(["rm", "-rf", str(root)], check=True)
    results["audit"] = rows
    if args.direct:
        results["direct"] = direct_comparison(args.direct)
        print(json.dumps(results["direct"], indent=2))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "audit.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
