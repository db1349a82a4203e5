"""A tiny embedding trainer in plain numpy, to show `stabcli pretrain --script`.

It factorizes the PPMI matrix of windowed co-occurrences with a seeded randomized
subspace iteration, so different seeds give different (rotated, slightly noisy) vectors.

    stabcli pretrain sample_data/sessions.txt --out runs/numpy --runs 5 \
        --script 'python examples/train_numpy.py --corpus {corpus} --seed {seed} --out {out}'

Writes {out}/vectors.txt (word2vec text) and {out}/losses.json (reconstruction error
per iteration), the two files stabcli picks up from a script run.
"""

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()

    sequences = [line.split() for line in args.corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    vocab = [tok for tok, _ in Counter(t for s in sequences for t in s).most_common()]
    index = {tok: i for i, tok in enumerate(vocab)}
    counts = np.zeros((len(vocab), len(vocab)))
    for seq in sequences:
        ids = [index[t] for t in seq]
        for pos, a in enumerate(ids):
            for b in ids[max(0, pos - args.window) : pos]:
                counts[a, b] += 1
                counts[b, a] += 1
    total = counts.sum()
    row = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ppmi = np.maximum(np.log(counts * total / (row * row.T)), 0)
    ppmi[~np.isfinite(ppmi)] = 0

    rng = np.random.default_rng(args.seed)
    basis = rng.standard_normal((len(vocab), args.dim))
    losses = []
    for _ in range(args.iterations):  # a few subspace iterations: stopped early, so seeds differ
        basis, _ = np.linalg.qr(ppmi @ basis)
        approx = basis @ (basis.T @ ppmi)
        losses.append(float(np.linalg.norm(ppmi - approx)))
    vectors = ppmi @ basis

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "vectors.txt", "w", encoding="utf-8") as fh:
        fh.write(f"{len(vocab)} {args.dim}\n")
        for tok, vec in zip(vocab, vectors, strict=True):
            fh.write(tok + " " + " ".join(f"{v:.6f}" for v in vec) + "\n")
    (args.out / "losses.json").write_text(json.dumps(losses))


if __name__ == "__main__":
    main()
