"""stabcli pretrain against the loops a user would write instead, same corpus, same settings.

    python benchmarks/bench_pretrain.py                 # 8 runs, dim 64, 5 epochs, ~1M tokens, 3 repetitions
    python benchmarks/bench_pretrain.py --reps 5 --runs 8
    python benchmarks/bench_pretrain.py --dask-scaling      # runs 2, 4, 8 on local:1 and local:2

Corpus: the bundled sample sessions repeated to about 1M tokens (``lines`` format).
Contenders, each a fresh child process, alternating within every repetition so machine
noise hits all of them alike:

* ``loop-w1``: a sequential Python loop over seeds calling gensim ``Word2Vec(sentences,
  workers=1)`` on the corpus read into a list, saving each run's vectors with ``np.save``
  (deterministic: what a careful user writes);
* ``loop-wall``: the same loop with ``workers=`` all cores (faster, not reproducible);
* ``loop-cf-w1``: the loop with gensim's ``corpus_file`` mode, ``workers=1`` (what stabcli
  uses per run; shows what the mode alone is worth);
* ``stabcli-j1`` and ``stabcli-jN``: ``stabcli pretrain --jobs 1`` and ``--jobs N``
  end to end (process start, corpus check, run set, manifest, losses);
* ``stabcli-dask2``: ``stabcli pretrain --scheduler local:2``: the same runs as Dask tasks on
  a LocalCluster of 2 single-threaded worker processes (started and stopped by the command,
  so its start-up is included); its vectors must equal ``--jobs``'s bit for bit.

Every contender writes its vectors; the repetitions' sha256 per contender show which are
bitwise reproducible (stabcli -j1 and -jN must also equal each other). Prints a table
(medians, ratios, targets) and writes benchmarks/results/pretrain.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

LOOP = r"""
import sys, numpy as np
from gensim.models import Word2Vec
corpus, out, runs, workers, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
settings = dict(vector_size=64, window=3, negative=3, sg=1, min_count=1, epochs=5, workers=workers)
if mode == "sentences":
    with open(corpus, encoding="utf-8") as fh:
        sentences = [line.split() for line in fh]
for seed in range(runs):
    if mode == "sentences":
        model = Word2Vec(sentences, seed=seed, **settings)
    else:
        model = Word2Vec(corpus_file=corpus, seed=seed, **settings)
    keys = sorted(model.wv.key_to_index)
    np.save(f"{out}/run-{seed:03d}.npy", np.stack([model.wv[k] for k in keys]))
"""


def build_corpus(path: Path, tokens: int) -> int:
    sessions = (ROOT / "sample_data" / "sessions.txt").read_text(encoding="utf-8").splitlines()
    lines, count = [], 0
    while count < tokens:
        for line in sessions:
            lines.append(line)
            count += len(line.split())
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return count


def vectors_digest(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.read_bytes()[128:])  # skip the .npy header
    return digest.hexdigest()[:16]


def run_one(name: str, corpus: Path, work: Path, runs: int) -> tuple[float, str]:
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if name.startswith("loop"):
        workers = CORES if name == "loop-wall" else 1
        mode = "corpus_file" if name.startswith("loop-cf") else "sentences"
        argv = [sys.executable, "-c", LOOP, str(corpus), str(out), str(runs), str(workers), mode]
    else:
        argv = [
            sys.executable,
            "-m",
            "stabcli",
            "pretrain",
            str(corpus),
            "--out",
            str(out / "runs"),
            "--runs",
            str(runs),
            "--dim",
            "64",
            "--epochs",
            "5",
            "--window",
            "3",
            "--negative",
            "3",
            "--format",
            "json",
        ]
        if "dask" in name:
            argv += ["--scheduler", f"local:{name.rsplit('dask', 1)[1]}"]
        else:
            argv += ["--jobs", name.rsplit("j", 1)[1]]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr}")
    files = list(out.glob("run-*.npy")) or list(out.glob("runs/run-*/vectors.npy"))
    return seconds, vectors_digest(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pretrain.json")
    parser.add_argument("--dask-scaling", action="store_true", help="time runs 2, 4, 8 on local:1 and local:2 only")
    parser.add_argument(
        "--contenders",
        help="comma list of contenders to time (default: all), e.g. "
        "stabcli-j2,stabcli-dask2 for the scheduler's overhead alone",
    )
    args = parser.parse_args()
    if args.dask_scaling:
        dask_scaling(args)
        return

    contenders = ["loop-w1", "loop-wall", "loop-cf-w1", "stabcli-j1", f"stabcli-j{CORES}", "stabcli-dask2"]
    if args.contenders:
        contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    times: dict[str, list[float]] = {c: [] for c in contenders}
    digests: dict[str, list[str]] = {c: [] for c in contenders}
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        tokens = build_corpus(corpus, args.tokens)
        print(
            f"corpus: {tokens:,} tokens; {args.runs} runs × dim 64 × 5 epochs; {CORES} cores; {args.reps} repetitions",
            flush=True,
        )
        for rep in range(args.reps):
            order = contenders if rep % 2 == 0 else contenders[::-1]
            for name in order:
                seconds, digest = run_one(name, corpus, Path(tmp), args.runs)
                times[name].append(seconds)
                digests[name].append(digest)
                print(f"  rep {rep + 1} {name:>12}: {seconds:7.1f} s  vectors {digest}", flush=True)

    median = {c: statistics.median(v) for c, v in times.items()}
    parallel = f"stabcli-j{CORES}"
    reproducible = {c: len(set(d)) == 1 for c, d in digests.items()}

    def have(*names: str) -> bool:
        return all(name in median for name in names)

    targets = {}
    if have(parallel, "loop-w1"):
        targets[f"{parallel} <= 0.6 x loop-w1"] = median[parallel] <= 0.6 * median["loop-w1"]
    if have(parallel, "loop-wall"):
        targets[f"{parallel} <= loop-wall"] = median[parallel] <= median["loop-wall"]
    if have("stabcli-j1", "loop-w1"):
        targets["stabcli-j1 <= 1.10 x loop-w1"] = median["stabcli-j1"] <= 1.10 * median["loop-w1"]
    if have("stabcli-j1", parallel):
        targets["stabcli bitwise reproducible across reps and --jobs"] = (
            reproducible["stabcli-j1"] and reproducible[parallel] and digests["stabcli-j1"][0] == digests[parallel][0]
        )
    if have("stabcli-dask2", "stabcli-j2"):
        targets["stabcli-dask2 <= 1.10 x stabcli-j2"] = median["stabcli-dask2"] <= 1.10 * median["stabcli-j2"]
        targets["stabcli-dask2 vectors equal --jobs's"] = (
            reproducible["stabcli-dask2"] and digests["stabcli-dask2"][0] == digests["stabcli-j2"][0]
        )
    base_name = "loop-w1" if "loop-w1" in median else contenders[0]
    base = median[base_name]
    print(f"\n{'contender':>14} {'median s':>9} {'vs ' + base_name:>14} {'reproducible':>13}")
    for c in contenders:
        print(f"{c:>14} {median[c]:9.1f} {median[c] / base:13.2f}x {'yes' if reproducible[c] else 'NO':>13}")
    if have("stabcli-j1", parallel):
        print(f"parallel efficiency of {parallel}: {median['stabcli-j1'] / (CORES * median[parallel]):.0%}")
    for name, ok in targets.items():
        print(f"{'PASS' if ok else 'MISS'} {name}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "machine": {"cores": CORES, "python": platform.python_version()},
                "tokens": tokens,
                "runs": args.runs,
                "reps": args.reps,
                "seconds": times,
                "median_seconds": median,
                "digests": digests,
                "reproducible": reproducible,
                "targets": targets,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


def dask_scaling(args: argparse.Namespace) -> None:
    """Wall time of N runs on W single-threaded Dask workers (LocalCluster), N = 2, 4, 8."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="stabcli-bench-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        tokens = build_corpus(corpus, args.tokens)
        print(f"corpus: {tokens:,} tokens; dim 64 × 5 epochs; {args.reps} repetitions (median)", flush=True)
        for runs in (2, 4, 8):
            for workers in (1, 2):
                seconds = [run_one(f"stabcli-dask{workers}", corpus, Path(tmp), runs)[0] for _ in range(args.reps)]
                rows.append(
                    {"runs": runs, "workers": workers, "median_s": statistics.median(seconds), "seconds": seconds}
                )
                print(f"  {runs} runs on local:{workers}: {statistics.median(seconds):6.1f} s", flush=True)
    out = args.out.with_name("pretrain_dask_scaling.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "tokens": tokens, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
