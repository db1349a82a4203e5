"""EIS, weighted eigenspace overlap and debiased CKA at scale: time against n (O(n·d²)).

    python benchmarks/bench_spectral.py                   # R=5 runs × d=64, n = 50k, 100k, 200k
    python benchmarks/bench_spectral.py --sizes 200000 --runs 10

Synthetic float32 runs (rotations of one matrix plus noise). For each n: the cross-Gram
pass every audit makes anyway (``gram_blocks``, for reference), then the three measures on
top of it (consensus anchor; ``--anchor-dim`` adds a file anchor of that dimension, one
more pass). Time grows linearly in n when no n×n matrix is formed; prints a table and the
time per key. Best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="50000,100000,200000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--anchor-dim", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from scipy.stats import ortho_group

    from stabcli.measure import anchor as a
    from stabcli.measure import metrics as m
    from stabcli.measure.align import generalized_procrustes

    print(f"R={args.runs} runs × d={args.dim}; anchor file d={args.anchor_dim}; best of {args.repeat}")
    print(
        f"{'n':>8} {'gram pass s':>12} {'EIS consensus s':>16} {'EIS file s':>11} {'w-overlap s':>12} {'debiased CKA s':>15} {'measures µs/key':>16}"
    )
    for n in (int(v) for v in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        base = rng.standard_normal((n, args.dim)).astype(np.float32)
        runs = [
            (base + 0.3 * rng.standard_normal((n, args.dim), dtype=np.float32))
            @ ortho_group.rvs(args.dim, random_state=r).astype(np.float32)
            for r in range(args.runs)
        ]
        anchor = rng.standard_normal((n, args.anchor_dim), dtype=np.float32)
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            start = time.perf_counter()
            grams = m.gram_blocks(runs)
            lap = {"gram": time.perf_counter() - start}
            rotations, _ = generalized_procrustes(grams)
            steps = {
                "eis": lambda g=grams, q=rotations: a.eis_pairs(g, a.consensus_anchor(g, q)),
                "eis_file": lambda g=grams, h=runs, e=anchor: a.eis_pairs(g, a.file_anchor(h, e, g.scale, "f")),
                "overlap": lambda g=grams: a.weighted_overlap_pairs(g),
                "cka": lambda g=grams, h=runs: a.debiased_cka_pairs(h, g),
            }
            for name, step in steps.items():
                start = time.perf_counter()
                step()
                lap[name] = time.perf_counter() - start
            best = {name: min(best.get(name, np.inf), value) for name, value in lap.items()}
        measures = best["eis"] + best["eis_file"] + best["overlap"] + best["cka"]
        print(
            f"{n:>8,} {best['gram']:>12.2f} {best['eis']:>16.3f} {best['eis_file']:>11.2f} {best['overlap']:>12.3f} "
            f"{best['cka']:>15.2f} {measures / n * 1e6:>16.2f}"
        )


if __name__ == "__main__":
    main()
