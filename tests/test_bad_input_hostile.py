"""Bad inputs of robustness round three (issue 21): degenerate noise sets, hostile files,
addresses that are not a Dask scheduler, and inputs that contradict each other. Every case
runs the real command (real processes, sockets and files) and passes ``assert_bad_input``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, invoke, make_sessions, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding

KEYS = [f"k{i}" for i in range(40)]


def embedding(path: Path, seed: int, keys=KEYS, dim: int = 6) -> Path:
    write_embedding(path, keys, np.random.default_rng(seed).standard_normal((len(keys), dim)).astype(np.float32))
    return path


class ProcessResult:
    """A finished ``stabcli`` process, read like a CliRunner result by ``assert_bad_input``."""

    def __init__(self, done, seconds: float):
        self.exit_code, self.stderr, self.stdout = done.returncode, done.stderr, done.stdout
        self.output = done.stdout + done.stderr
        self.seconds = seconds


def run_process(argv, cwd: Path, timeout: float = 120, preexec_fn=None) -> ProcessResult:
    """The real command in a child process, killed after ``timeout`` seconds (a hang fails)."""
    import subprocess
    import time

    from conftest import SUBPROCESS_ENV

    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "stabcli", *map(str, argv)],
        cwd=cwd, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec_fn,
    )  # fmt: skip
    return ProcessResult(done, time.monotonic() - start)


# --- degenerate noise: a --script that ignores {seed} ---------------------------------------

SEEDLESS = """
import argparse
from pathlib import Path
import numpy as np
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--out", type=Path)
p.add_argument("--mode")
a = p.parse_args()
base = np.random.default_rng(0).standard_normal((40, 6))
if a.mode == "rotate":  # every seed an exact rotation of the same vectors
    q, _ = np.linalg.qr(np.random.default_rng(a.seed).standard_normal((6, 6)))
    base = base @ q
elif a.mode == "one-copy" and a.seed % 4 == 3:  # one run repeats another's seed
    base = np.random.default_rng(a.seed - 1).standard_normal((40, 6))
elif a.mode == "one-copy":
    base = np.random.default_rng(a.seed).standard_normal((40, 6))
a.out.mkdir(parents=True, exist_ok=True)
rows = [f"k{i} " + " ".join(f"{v:.9g}" for v in row) for i, row in enumerate(base)]
(a.out / "vectors.txt").write_text("40 6\\n" + "\\n".join(rows) + "\\n")
"""


@pytest.fixture(scope="module")
def seedless_noise(tmp_path_factory):
    """Noise run sets made by a real ``stabcli pretrain --script`` whose script ignores the seed."""
    root = tmp_path_factory.mktemp("seedless")
    script = root / "seedless.py"
    script.write_text(SEEDLESS)
    made = {}
    for mode in ("same", "rotate", "one-copy"):
        out = root / mode
        result = invoke(
            "pretrain", "--out", out, "--runs", "4", "--script",
            f"{sys.executable} {script} --seed {{seed}} --out {{out}} --mode {mode}",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        made[mode] = out
    return made


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("mode", "fragment"),
    [
        ("same", "all 4 runs are identical or exact rotations of each other"),
        ("rotate", "all 4 runs are identical or exact rotations of each other"),
        ("one-copy", "run-002 and run-003 are identical or exact rotations of each other"),
    ],
)
def test_drift_refuses_a_noise_set_of_identical_runs(tmp_path, seedless_noise, mode, fragment):
    before_path, after_path = embedding(tmp_path / "b.npy", 5), embedding(tmp_path / "a.npy", 6)
    before = files_state(tmp_path)
    result = invoke("drift", before_path, after_path, "--noise", seedless_noise[mode], "--json", tmp_path / "d.json")
    assert_bad_input(result, fragment, tmp_path, before)
    assert "zero width" in result.stderr and "{seed}" in result.stderr


# --- outputs: a GITHUB_STEP_SUMMARY hard-linked into the run set of an input file -------------


@pytest.mark.bad_input
@pytest.mark.parametrize("linked", ["stabcli.json", "keys.txt", "run-001/losses.json"])
@pytest.mark.parametrize("command", ["audit", "drift"])
def test_a_summary_hard_linked_into_the_run_set_of_an_input_file_is_refused(tmp_path, monkeypatch, linked, command):
    import os

    from conftest import make_runset

    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs", runs=2, n=30, dim=4, epochs=1)
    os.link(tmp_path / "runs" / linked, tmp_path / "summary.md")
    before = files_state(tmp_path)
    argv = [command, "runs/run-000/vectors.npy", "runs/run-001/vectors.npy", "--knn-k", "2"]
    result = runner.invoke(app, argv, env={"GITHUB_STEP_SUMMARY": "summary.md"})
    assert_bad_input(result, f"GITHUB_STEP_SUMMARY summary.md: is runs/{linked} (a hard link to it)", tmp_path, before)


# --- hostile model files: work bounded by the file's size -------------------------------------


@pytest.fixture(scope="module")
def fasttext_files(tmp_path_factory):
    """Real gensim FastText files: a .bin (Facebook format), and hostile variants."""
    import struct

    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    root = tmp_path_factory.mktemp("fasttext")
    rng = np.random.default_rng(0)
    long_word = "x" * 30_000
    sentences = [[f"w{rng.integers(60)}" for _ in range(8)] for _ in range(200)] + [[long_word, "w1", "w2"]]
    model = FastText(vector_size=8, min_count=1, epochs=1, bucket=500, seed=1, workers=1)
    model.build_vocab(sentences)
    model.train(sentences, total_examples=len(sentences), epochs=1)
    save_facebook_model(model, str(root / "m.bin"))
    data = (root / "m.bin").read_bytes()
    cut = data.index(b"w1\x00") + 1  # an interrupted download: cut inside the vocabulary
    (root / "cut-in-vocabulary.bin").write_bytes(data[:cut])
    (root / "cut-in-count.bin").write_bytes(data[: cut + 4])
    (root / "cut-in-matrix.bin").write_bytes(data[: len(data) - 3_000])  # the output matrix is 2 KB
    maxn = bytearray(data)
    struct.pack_into("<i", maxn, 48, 1000)  # maxn, the 11th int after magic and version
    (root / "huge-range.bin").write_bytes(bytes(maxn))
    kv = model.wv
    kv.max_n = 1_000_000  # the long word asks for about 4.5e8 n-grams
    kv.save(str(root / "huge-range.kv"))
    kv.max_n, kv.min_n = "6", 3
    kv.save(str(root / "string-range.kv"))
    return root


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("cut-in-vocabulary.bin", "truncated or malformed at word"),
        ("cut-in-count.bin", "truncated in the dictionary"),
        ("cut-in-matrix.bin", "truncated"),
        ("huge-range.bin", "n-gram range 3..1000 asks for"),
        ("huge-range.kv", "n-gram range 3..1000000 asks for"),
        ("string-range.kv", "n-gram range 3..'6' is not two integers"),
    ],
)
def test_hostile_fasttext_files_are_refused_quickly(tmp_path, fasttext_files, name, fragment):
    """Each in a real process under a 2 GB address-space limit and a 120 s timeout: the
    truncated .bin looped forever in gensim, the huge n-gram range took 19 s and 4.9 GB."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    other = embedding(tmp_path / "other.npy", 0, keys=[f"w{i}" for i in range(60)], dim=8)
    before = files_state(tmp_path)
    done = run_process(["audit", fasttext_files / name, other], cwd=tmp_path, preexec_fn=limit)
    assert_bad_input(done, fragment, tmp_path, before)
    assert name in done.stderr


def test_the_untouched_fasttext_bin_is_read(fasttext_files):
    from stabcli.inputs.embeddings import read_embedding

    emb = read_embedding(fasttext_files / "m.bin")
    assert emb.vectors.shape == (61, 8) and "x" * 30_000 in emb.keys


# --- NaN and 1e300 in references and drift inputs; deep JSON ----------------------------------


def float64_rows(path: Path, value: float, row: int = 3) -> Path:
    """A float64 .npy (with its keys file) holding ``value`` in one row: finite in float64,
    beyond float32 for 1e300."""
    array = np.random.default_rng(9).standard_normal((len(KEYS), 6))
    array[row] = value
    np.save(path, array)
    path.with_name(path.stem + ".keys.txt").write_text("".join(k + "\n" for k in KEYS))
    return path


def text_rows(path: Path, value: str, row: int = 2) -> Path:
    rows = [f"{k} {value} 1 2 3 4 5" if i == row else f"{k} 1 2 3 4 5 {i}" for i, k in enumerate(KEYS)]
    path.write_text(f"{len(KEYS)} 6\n" + "\n".join(rows) + "\n")
    return path


def align_to(t: Path, reference: Path) -> list:
    return ["featurize", embedding(t / "a.npy", 1), "--out", t / "o.npy", "--align-to", reference]


HUGE_CASES = {
    "align-to float64 1e300": (
        lambda t: align_to(t, float64_rows(t / "r.npy", 1e300)),
        "r.npy: key 'k3' has values beyond float32's range (up to 1e+300)",
    ),
    "align-to NaN": (
        lambda t: align_to(t, float64_rows(t / "r.npy", np.nan)),
        "r.npy: key 'k3' has NaN or infinite values",
    ),
    "align-to text 1e300": (
        lambda t: align_to(t, text_rows(t / "r.vec", "1e300")),
        "r.vec: key 'k2' has values beyond float32's range",
    ),
    "align-to text -inf": (
        lambda t: align_to(t, text_rows(t / "r.vec", "-inf")),
        "r.vec: key 'k2' has NaN or infinite values",
    ),
    "drift after 1e300": (
        lambda t: ["drift", embedding(t / "b.npy", 1), float64_rows(t / "a.npy", 1e300)],
        "a.npy: key 'k3' has values beyond float32's range",
    ),
    "drift before 1e300 text": (
        lambda t: ["drift", text_rows(t / "b.vec", "-1e300"), embedding(t / "a.npy", 1)],
        "b.vec: key 'k2' has values beyond float32's range",
    ),
    "drift after 1e300, keys reordered (the float32 cast warned)": (
        lambda t: ["drift", embedding(t / "b.npy", 1, keys=KEYS[::-1]), float64_rows(t / "a.npy", 1e300)],
        "a.npy: key 'k3' has values beyond float32's range",
    ),
}


def check_case(cases: dict, name: str, tmp_path: Path) -> None:
    """Build the case's files, run it, and check it is one error line that changed nothing."""
    make, fragment = cases[name]
    argv = make(tmp_path)
    before = files_state(tmp_path)
    assert_bad_input(invoke(*argv), fragment, tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize("name", HUGE_CASES)
def test_non_finite_and_huge_rows_in_references_and_drift_inputs(tmp_path, name):
    check_case(HUGE_CASES, name, tmp_path)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("command", "where"),
    [(c, "stabcli.json") for c in ("audit", "drift", "featurize")]
    + [(c, "run-000/losses.json") for c in ("audit", "featurize")],  # drift reads no losses
)
def test_json_nested_100000_levels_is_one_line(tmp_path, where, command):
    from conftest import make_runset

    runs = make_runset(tmp_path / "runs", runs=3, n=40, dim=6, epochs=1)
    text = deep(100_000) if where.endswith("losses.json") else '{"schema_version": 1, "runs": ' + deep(100_000) + "}"
    (runs / where).write_text(text)
    argv = {
        "audit": ["audit", runs],
        "drift": ["drift", runs, embedding(tmp_path / "a.npy", 1)],
        "featurize": ["featurize", runs, "--out", tmp_path / "phi"],
    }[command]
    before = files_state(tmp_path)
    assert_bad_input(invoke(*argv), "nested too deeply", tmp_path, before)


def test_a_float64_row_beyond_float32_never_leaks_an_overflow_warning(tmp_path):
    """audit matches keys (one left out), so rows are gathered: the float64 → float32 cast
    of a 1e300 row warned 'overflow encountered in cast' and then called the row NaN."""
    import subprocess

    from conftest import SUBPROCESS_ENV

    embedding(tmp_path / "a.npy", 1)
    array = np.random.default_rng(9).standard_normal((len(KEYS) - 1, 6))
    array[3] = 1e300
    np.save(tmp_path / "b.npy", array)
    (tmp_path / "b.keys.txt").write_text("".join(k + "\n" for k in KEYS[:-1]))
    done = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", "a.npy", "b.npy", "--format", "json"],
        cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "NaN" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "warning: 1 keys are not in every run and were left out; comparing 39 common keys"
    ]


# --- --scheduler at something that is not a Dask scheduler -------------------------------------


@pytest.fixture
def servers():
    """Real listeners on 127.0.0.1: a silent TCP port (accepts, never answers), an HTTP server,
    a server answering garbage, and one that starts a Dask-like frame and goes silent."""
    import http.server
    import socket
    import threading

    made, stop = {}, threading.Event()
    silent = socket.create_server(("127.0.0.1", 0))
    made["silent"] = silent.getsockname()[1]
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    made["http"] = http_server.server_address[1]
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    talkers = []
    for name, payload in (("garbage", b"\xff" * 64), ("half", (200).to_bytes(8, "little") + b"\x82")):
        server = socket.create_server(("127.0.0.1", 0))
        server.settimeout(0.2)
        made[name] = server.getsockname()[1]

        def talk(server=server, payload=payload):
            held = []
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                conn.sendall(payload)
                held.append(conn)  # never closed while the test runs: the client must give up itself
            for conn in held:
                conn.close()

        threading.Thread(target=talk, daemon=True).start()
        talkers.append(server)
    yield made
    stop.set()
    http_server.shutdown()
    for server in [silent, *talkers]:
        server.close()


def labelled_runs(tmp_path: Path) -> list:
    from conftest import make_runset

    runs = make_runset(tmp_path / "runs", runs=2, n=40, dim=4, epochs=1)
    (tmp_path / "labels.tsv").write_text("".join(f"k{i}\t{'ab'[i % 2]}\n" for i in range(40)))
    return ["audit", runs, "--labels", tmp_path / "labels.tsv"]


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("server", "fragment"),
    [
        ("silent", "connected, but nothing answered within 10 s; not a Dask scheduler"),
        ("http", "connected, but nothing answered within 10 s; not a Dask scheduler"),
        ("garbage", "which is not Dask's protocol; not a Dask scheduler"),
        ("half", "no Dask handshake within 10 s"),
    ],
)
@pytest.mark.parametrize("command", ["pretrain", "audit"])
def test_a_scheduler_address_that_is_not_dask_is_one_line_within_the_timeout(
    tmp_path, servers, sessions_file, server, fragment, command
):
    """Measured under the shared machine's load; the bound is the documented 10 s plus the
    start of Python and stabcli (a few seconds), with room for the load (hangs were killed at 90 s)."""
    address = f"tcp://127.0.0.1:{servers[server]}"
    argv = (
        ["pretrain", sessions_file, "--out", tmp_path / "r", "--runs", "2"]
        if command == "pretrain"
        else labelled_runs(tmp_path)
    )
    before = files_state(tmp_path)
    done = run_process([*argv, "--scheduler", address], cwd=tmp_path, timeout=90)
    assert_bad_input(done, f"--scheduler: cannot reach the Dask scheduler at {address}", tmp_path, before)
    assert fragment in done.stderr and done.stderr.count("cannot reach") == 1, done.stderr
    assert done.seconds < 40, done.seconds


@pytest.mark.bad_input
@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("tls://127.0.0.1:8786", "tls:// is not supported"),
        ("ucx://127.0.0.1:8786", "ucx:// is not supported"),
        ("inproc://x", "inproc:// is not supported"),
        ("tcp://127.0.0.1:99999", "the port must be a number from 1 to 65535"),
        ("tcp://:8786", "expected tcp://HOST:PORT"),
        ("local:256", "use local:N with N at most"),
    ],
)
def test_unsupported_scheduler_addresses_are_one_line(tmp_path, sessions_file, address, fragment):
    before = files_state(tmp_path)
    result = invoke("pretrain", sessions_file, "--out", tmp_path / "r", "--scheduler", address)
    assert_bad_input(result, fragment, tmp_path, before)


def _sweep_argv(tmp_path: Path, case: str) -> tuple[list, str]:
    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(), encoding="utf-8")
    labels = tmp_path / "labels.tsv"
    labels.write_text("t1\tA\tB\n", encoding="utf-8")
    argv = ["sweep", corpus, "--out", tmp_path / "s", "--runs", "2", "--epochs", "1", "--dim", "4"]
    return {
        "sweep corpus": (["sweep", tmp_path / "missing.txt", "--out", tmp_path / "s"], "missing"),
        "sweep labels": ([*argv, "--labels", labels], "expected 2 columns"),
        "sweep grid": ([*argv, "--grid", "nosuch=1,2"], "nosuch"),
        "sweep sizes": ([*argv, "--sizes", "0.001,1"], "--sizes"),
    }[case]


@pytest.mark.bad_input
@pytest.mark.parametrize("command", ["pretrain", "audit", "sweep corpus", "sweep labels", "sweep grid", "sweep sizes"])
def test_local_workers_start_only_after_the_inputs_are_checked(tmp_path, monkeypatch, command):
    distributed = pytest.importorskip("distributed")
    started = []
    monkeypatch.setattr(distributed, "LocalCluster", lambda *a, **k: started.append(k) or 1 / 0)
    fragment = "missing"
    if command == "pretrain":
        argv = ["pretrain", tmp_path / "missing.txt", "--out", tmp_path / "r"]
    elif command == "audit":
        argv = [*labelled_runs(tmp_path)[:2], "--labels", tmp_path / "missing.tsv"]
    else:
        argv, fragment = _sweep_argv(tmp_path, command)
    before = files_state(tmp_path)
    assert_bad_input(invoke(*argv, "--scheduler", "local:1"), fragment, tmp_path, before)
    assert started == []


# --- every input of every command is a regular file (FIFOs and devices never read) ------------


def _fifo(tmp_path: Path) -> Path:
    """A FIFO outside the test's work directory (hashing the work directory must not read it)."""
    import os

    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "pipe")
    return tmp_path / "fifo" / "pipe"


SPECIAL_INPUTS = {
    "audit --key-names FIFO": lambda t, s: [*labelled_runs(t)[:2], "--key-names", s],
    "audit --labels": lambda t, s: [*labelled_runs(t)[:2], "--labels", s],
    "audit --frequencies": lambda t, s: [*labelled_runs(t)[:2], "--frequencies", s],
    "audit files": lambda t, s: ["audit", embedding(t / "a.npy", 1), s],
    "drift after": lambda t, s: ["drift", embedding(t / "b.npy", 1), s],
    "drift --key-names": lambda t, s: ["drift", embedding(t / "b.npy", 1), embedding(t / "a.npy", 2), "--key-names", s],
    "drift --labels": lambda t, s: ["drift", embedding(t / "b.npy", 1), embedding(t / "a.npy", 2), "--labels", s],
    "featurize input": lambda t, s: ["featurize", s, "--out", t / "o.npy"],
    "featurize --align-to": lambda t, s: [
        "featurize",
        embedding(t / "a.npy", 1),
        "--out",
        t / "o.npy",
        "--align-to",
        s,
    ],
    "pretrain corpus": lambda t, s: ["pretrain", s, "--out", t / "r"],
}


@pytest.mark.bad_input
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("case", SPECIAL_INPUTS)
def test_a_fifo_or_device_input_is_refused_without_reading_it(tmp_path, case, special):
    """In a real process killed after 60 s: reading a FIFO blocks forever, /dev/zero never ends."""
    source = _fifo(tmp_path) if special == "fifo" else Path("/dev/zero")
    work = tmp_path / "work"
    work.mkdir()
    argv = SPECIAL_INPUTS[case](work, source)
    before = files_state(work)
    done = run_process(argv, cwd=work, timeout=60)
    kind = "a FIFO" if special == "fifo" else "a device"
    assert_bad_input(done, f"{source}: is {kind}, not a regular file", work, before)


# --- inputs that contradict each other or options without their file --------------------------

INTERACTIONS = "user\titem\trating\n" + "".join(
    f"u{u}\ti{(u * 7 + j) % 30}\t{1 + j % 5}\n" for u in range(40) for j in range(6)
)


def columns(t: Path, user: str, item: str) -> list:
    (t / "i.tsv").write_text(INTERACTIONS)
    return ["pretrain", t / "i.tsv", "--out", t / "r", "--user-col", user, "--item-col", item]


def two_runs(t: Path) -> list:
    return [embedding(t / "b.npy", 1), embedding(t / "a.npy", 2)]


CONTRADICTIONS = {
    "user and item columns by name and position": (
        lambda t: columns(t, "item", "1"),
        "--item-col and --user-col are both 'item'",
    ),
    "item and user columns by position and name": (
        lambda t: columns(t, "0", "user"),
        "--item-col and --user-col are both 'user'",
    ),
    "audit --test-size without --labels": (
        lambda t: [*labelled_runs(t)[:2], "--test-size", "5"],
        "--test-size only apply with --labels FILE",
    ),
    "audit --split-seed without --labels": (
        lambda t: [*labelled_runs(t)[:2], "--split-seed", "3"],
        "--split-seed only apply with --labels FILE",
    ),
    "audit --encoding without a text file": (
        lambda t: [*labelled_runs(t)[:2], "--encoding", "latin-1"],
        "--encoding only apply with --labels FILE or --key-names FILE or --frequencies FILE",
    ),
    "drift --test-size without --labels": (
        lambda t: ["drift", *two_runs(t), "--test-size", "5"],
        "--test-size only apply with --labels FILE",
    ),
    "drift --split-seed without --labels": (
        lambda t: ["drift", *two_runs(t), "--split-seed", "4"],
        "--split-seed only apply with --labels FILE",
    ),
    "drift --encoding bogus without a text file": (
        lambda t: ["drift", *two_runs(t), "--encoding", "bogus"],
        "--encoding only apply with --labels FILE or --key-names FILE",
    ),
    "drift --encoding bogus with key names": (
        lambda t: [
            "drift",
            *two_runs(t),
            "--key-names",
            (t / "n.tsv").write_text("k1\tone\n") and t / "n.tsv",
            "--encoding",
            "bogus",
        ],
        "--encoding: unknown encoding 'bogus'",
    ),
    "featurize of 0 columns": (
        lambda t: [
            "featurize",
            np.save(t / "z.npy", np.zeros((5, 0), dtype=np.float32)) or t / "z.npy",
            "--out",
            t / "o.npy",
        ],
        "z.npy: vectors have 0 dimensions; there is nothing to featurize",
    ),
}


@pytest.mark.bad_input
@pytest.mark.parametrize("name", CONTRADICTIONS)
def test_contradicting_inputs_and_options_without_their_file(tmp_path, name):
    check_case(CONTRADICTIONS, name, tmp_path)


# --- key-names tables as they come ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "write"),
    [
        (
            "pipe-in-first-name.tsv",
            lambda p: p.write_text("".join(f"{k}\t{'a|b' if i == 0 else 'name'} {i}\n" for i, k in enumerate(KEYS))),
        ),
        (
            "tab-in-first-name.csv",
            lambda p: p.write_text(
                "".join(f'{k},"{"a" + chr(9) + "b" if i == 0 else "name"} {i}"\n' for i, k in enumerate(KEYS))
            ),
        ),
        (
            "excel-unicode-text.txt",
            lambda p: p.write_text("".join(f"{k}\tnom {i}\n" for i, k in enumerate(KEYS)), encoding="utf-16"),
        ),
        (
            "long-name.tsv",
            lambda p: p.write_text(
                "".join(f"{k}\t{'N' * 300_000 if i == 0 else 'name'} {i}\n" for i, k in enumerate(KEYS))
            ),
        ),
    ],
)
def test_key_names_tables_as_they_come_are_read(tmp_path, name, write):
    """A ``|`` or tab inside the first name no longer decides the separator; a UTF-16 file with
    a byte-order mark (Excel's "Unicode text") is read; a 300,000-character name is read."""
    from stabcli.inputs.keytable import read_key_names

    path = tmp_path / name
    write(path)
    names = read_key_names(path)
    assert len(names) == len(KEYS) and names["k5"].endswith(" 5") and "|" not in names["k5"]
    first = names["k0"]
    expected = {"pipe": "a|b 0", "tab-": "a\tb 0", "exce": "nom 0", "long": "N" * 300_000 + " 0"}[name[:4]]
    assert first == expected
    result = invoke(
        "drift", embedding(tmp_path / "b.npy", 1), embedding(tmp_path / "a.npy", 2), "--key-names", path,
        "--per-key", tmp_path / "k.csv",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert expected.replace("\t", " ")[:20] in (tmp_path / "k.csv").read_text().replace("\t", " ")
