"""The audit on a busy machine, against its floor, and at 1M keys.

    python benchmarks/bench_load.py                 # quiet vs loaded, 10 runs × 200,000 × 64
    python benchmarks/bench_load.py --floor         # also the audit against its numpy floor
    python benchmarks/bench_load.py --million       # also 10 × 1,000,000 × 64: time, anonymous memory
    python benchmarks/bench_load.py --small --skip-load   # only the small real audits, quiet vs loaded

* **quiet vs loaded**: ``stabcli audit RUNSET --format json`` in a child process, alone and
  while one CPU-bound process spins (``while True: pass``), then while as many spin as
  there are cores (``--hogs 1,2``), the runs alternating; medians of ``--reps``. Also each
  loaded audit with ``OPENBLAS_NUM_THREADS=1`` (one worker, every product on one thread)
  for reference.
* **floor**: in a fresh child process, numpy alone on the same float32 arrays: one SYRK of
  the R stacked runs (``S.T @ S``, S = n × R·d) plus, per run, its 1,000 query rows times
  the run (``H[q] @ H.T``); the audit's time divided by it.
* **small audits** (``--small``): the cases #26 was reported with, where an audit spent most
  of its time in OpenBLAS's threads on a loaded machine: 10 word2vec runs of gensim's
  ``lee_background.cor`` (100 dims), and 10 runs of the bundled sessions (64 dims)
  featurized to 128 Fourier features; each audited quiet, beside one CPU-bound process, and
  beside it with ``OPENBLAS_NUM_THREADS=1``.
* **1M keys**: the audit of 10 × 1,000,000 × 64 (2.6 GB of float32 runs, memory-mapped);
  the child's anonymous resident memory (``RssAnon`` in /proc/PID/status, sampled every
  50 ms: the page cache of the mapped inputs is not in it) at its peak, and its time.

``BENCH_STABCLI=DIR`` times the ``stabcli`` package of another checkout (before/after).
The machine's load average (``os.getloadavg``) is recorded before each measurement:
numbers from a shared machine carry it. Writes benchmarks/results/load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_audit import make_runset  # noqa: E402  (the same synthetic run sets)

CODE = Path(os.environ.get("BENCH_STABCLI", ROOT))  # the checkout whose stabcli the children run

FLOOR = r"""
import sys, time, numpy as np
from pathlib import Path
root = Path(sys.argv[1])
runs = [np.load(p, mmap_mode="r") for p in sorted(root.glob("run-*/vectors.npy"))]
n = runs[0].shape[0]
stacked = np.concatenate([np.asarray(h) for h in runs], axis=1)  # n x R*d float32, read once
arrays = [np.ascontiguousarray(h) for h in runs]
queries = np.sort(np.random.default_rng(0).choice(n, size=1000, replace=False))
start = time.perf_counter()
gram = stacked.T @ stacked  # SYRK
for h in arrays:
    sims = h[queries] @ h.T
print(time.perf_counter() - start)
"""


def audit_argv(root: Path) -> list[str]:
    return [sys.executable, "-m", "stabcli", "audit", str(root), "--format", "json"]


def timed(argv: list[str], env: dict[str, str] | None = None, sample_anon: bool = False) -> tuple[float, int]:
    """Wall seconds of a child process and (with ``sample_anon``) its peak RssAnon in bytes."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=CODE, env=env)
    peak = 0
    if sample_anon:
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("RssAnon:"))
                peak = max(peak, kb * 1024)
            except (OSError, StopIteration, ValueError):
                pass
            time.sleep(0.05)
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(err.decode())
    return seconds, peak


class Hogs:
    """``count`` CPU-bound child processes for the duration of a ``with`` block."""

    def __init__(self, count: int):
        self.count = count
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Hogs:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def quiet_vs_loaded(root: Path, reps: int, hogs: int) -> dict:
    """Quiet, loaded by ``hogs`` spinning processes, and loaded with one thread."""
    one_thread = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    times: dict[str, list[float]] = {"quiet": [], "loaded": [], "loaded_openblas_1_thread": []}
    loads: list[float] = []
    for rep in range(reps):
        loads.append(os.getloadavg()[0])
        order = ["quiet", "loaded", "loaded_openblas_1_thread"]
        for name in order if rep % 2 == 0 else order[::-1]:
            if name == "quiet":
                times[name].append(timed(audit_argv(root))[0])
            else:
                with Hogs(hogs):
                    env = one_thread if name.endswith("1_thread") else None
                    times[name].append(timed(audit_argv(root), env)[0])
    medians = {f"{k}_s": round(statistics.median(v), 2) for k, v in times.items()}
    return {
        **medians,
        "all_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "loaded_over_quiet": round(medians["loaded_s"] / medians["quiet_s"], 2),
        "competing_processes": hogs,
        "load_average_before": loads,
    }


def floor_ratio(root: Path, reps: int) -> dict:
    audits, floors, loads = [], [], []
    for _ in range(reps):
        loads.append(os.getloadavg()[0])
        floors.append(
            float(
                subprocess.run(
                    [sys.executable, "-c", FLOOR, str(root)], capture_output=True, text=True, check=True
                ).stdout
            )
        )
        audits.append(timed(audit_argv(root))[0])
    audit, floor = statistics.median(audits), statistics.median(floors)
    return {
        "audit_s": round(audit, 2),
        "floor_s": round(floor, 2),
        "audit_over_floor": round(audit / floor, 2),
        "all_audit_s": [round(t, 2) for t in audits],
        "all_floor_s": [round(t, 2) for t in floors],
        "load_average_before": loads,
    }


def stabcli_run(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "stabcli", *args], cwd=CODE, check=True, capture_output=True)


def small_runsets(tmp: Path) -> dict[str, Path]:
    """The lee corpus's runs and the bundled sessions' featurized runs (trained here)."""
    import gensim

    lee = Path(gensim.__file__).parent / "test" / "test_data" / "lee_background.cor"
    stabcli_run("pretrain", str(lee), "--out", str(tmp / "lee"), "--runs", "10", "--dim", "100", "--epochs", "5")
    sessions = ROOT / "sample_data" / "sessions.txt"
    stabcli_run(
        "pretrain", str(sessions), "--out", str(tmp / "sessions"), "--runs", "10", "--dim", "64", "--epochs", "5"
    )
    stabcli_run("featurize", str(tmp / "sessions"), "--out", str(tmp / "sessions-phi"))
    os.sync()
    return {"lee_word2vec_100d": tmp / "lee", "sessions_phi_128d": tmp / "sessions-phi"}


def small(tmp: Path, reps: int) -> dict:
    """Each small run set audited quiet, beside one CPU-bound process, and beside it on one thread."""
    one_thread = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out: dict = {}
    for name, root in small_runsets(tmp).items():
        times: dict[str, list[float]] = {"quiet": [], "loaded": [], "loaded_openblas_1_thread": []}
        loads = []
        for _ in range(reps):
            loads.append(os.getloadavg()[0])
            times["quiet"].append(timed(audit_argv(root))[0])
            with Hogs(1):
                times["loaded"].append(timed(audit_argv(root))[0])
                times["loaded_openblas_1_thread"].append(timed(audit_argv(root), one_thread)[0])
        medians = {f"{k}_s": round(statistics.median(v), 2) for k, v in times.items()}
        out[name] = {
            **medians,
            "loaded_over_quiet": round(medians["loaded_s"] / medians["quiet_s"], 2),
            "all_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
            "load_average_before": loads,
        }
        print(json.dumps({name: out[name]}), flush=True)
    return out


def million(tmp: Path, runs: int, dim: int) -> dict:
    root = tmp / "million"
    make_runset(root, runs, 1_000_000, dim)
    load = os.getloadavg()[0]
    seconds, peak = timed(audit_argv(root), sample_anon=True)
    subprocess.run(["rm", "-rf", str(root)], check=True)
    return {
        "runs": runs,
        "keys": 1_000_000,
        "dim": dim,
        "input_gb": round(runs * 1_000_000 * dim * 4 / 1e9, 2),
        "seconds": round(seconds, 1),
        "peak_rss_anon_mb": round(peak / 2**20),
        "load_average_before": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--hogs",
        default=f"1,{os.cpu_count() or 2}",
        help="competing CPU-bound processes, one measurement per count (default 1 and the cores)",
    )
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--million", action="store_true")
    parser.add_argument(
        "--small", action="store_true", help="also the small real audits (lee corpus, featurized sessions)"
    )
    parser.add_argument("--skip-load", action="store_true", help="only --floor / --million / --small")
    args = parser.parse_args()
    results: dict = {"machine": {"cores": os.cpu_count()}, "date": time.strftime("%Y-%m-%d %H:%M")}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        if not args.skip_load or args.floor:
            make_runset(root, args.runs, args.n, args.dim)
        shape = {"runs": args.runs, "keys": args.n, "dim": args.dim}
        if not args.skip_load:
            results["load"] = []
            for hogs in sorted({int(h) for h in args.hogs.split(",")}):
                results["load"].append({**shape, **quiet_vs_loaded(root, args.reps, hogs)})
                print(json.dumps(results["load"][-1]), flush=True)
        if args.floor:
            results["floor"] = {**shape, **floor_ratio(root, args.reps)}
            print(json.dumps(results["floor"]), flush=True)
        subprocess.run(["rm", "-rf", str(root)], check=True)
        if args.small:
            results["small"] = small(Path(tmp), args.reps)
        if args.million:
            results["million"] = million(Path(tmp), args.runs, args.dim)
            print(json.dumps(results["million"]), flush=True)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "load.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
