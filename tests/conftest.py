"""Tiny corpora and embeddings built in tmp_path; every test runs in seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SCRIPT = REPO / "examples" / "train_numpy.py"

runner = CliRunner()
"""The one CliRunner of the tests (stdout and stderr apart: ``result.stderr``)."""


def invoke(*args: object, env: dict[str, str] | None = None) -> Any:
    """``stabcli ARGS`` run in-process by :data:`runner` (Paths and numbers are converted to str)."""
    from stabcli.cli.app import app

    return runner.invoke(app, [str(a) for a in args], env=env)


def make_sessions(n_sequences: int = 120, n_items: int = 40, seed: int = 0) -> str:
    """Genre-sticky sequences over a small vocabulary: structure word2vec can learn fast."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_sequences):
        group = rng.integers(0, 4)
        items = rng.integers(0, n_items // 4, size=int(rng.integers(4, 12))) + group * (n_items // 4)
        lines.append(" ".join(f"t{i}" for i in items))
    return "\n".join(lines) + "\n"


@pytest.fixture
def sessions_file(tmp_path: Path) -> Path:
    path = tmp_path / "sessions.txt"
    path.write_text(make_sessions(), encoding="utf-8")
    return path


@pytest.fixture
def tagged_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    lines = []
    for doc in range(30):
        words = rng.integers(0, 20, size=8) + (doc % 3) * 20
        lines.append(f"doc{doc}\t" + " ".join(f"w{w}" for w in words))
    path = tmp_path / "docs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def files_state(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` with a hash of its bytes (directories: "dir"),
    to assert that a failed command created, changed and removed nothing."""
    import hashlib

    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            state[rel] = "link:" + str(path.readlink())
        elif path.is_dir():
            state[rel] = "dir"
        else:
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


# the bad-input catalogue: every test marked bad_input (tests/test_bad_input*.py) must call
# assert_bad_input at least once; tests/test_bad_input.py counts the marked cases
BAD_INPUT_CHECKS: list[str] = []


# the numeric tests: CI runs them again under other OpenBLAS kernels (.ci/kernels), so a test
# that asserts bits only one CPU gives cannot land (docs/reproducibility.md)
NUMERIC_MODULES = {
    "test_audit.py",
    "test_cli.py",
    "test_cli_audit.py",
    "test_downstream.py",
    "test_drift.py",
    "test_featurize.py",
    "test_metrics.py",
    "test_reproducibility.py",
    "test_rowpass.py",
    "test_sample_data.py",
    "test_threads.py",
    "test_training.py",
}


@pytest.fixture(autouse=True)
def _no_stage_lines_under_load(monkeypatch):
    """A stage that takes 5 s on a loaded machine prints "audit: … done in 5.1 s" to a log;
    tests that compare stderr line by line must not depend on the machine's load (the tests of
    those lines set the threshold themselves, in tests/test_ci_output.py)."""
    from stabcli.cli import output

    monkeypatch.setattr(output, "STAGE_LINE_SECONDS", float("inf"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bad_input: a case of the bad-input catalogue; it must pass assert_bad_input")
    config.addinivalue_line("markers", "numeric: a numeric test, run again under other BLAS kernels by CI")
    config.addinivalue_line(
        "markers", "cross_kernel: runs children under every kernel itself, so CI does not rerun it per kernel"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in NUMERIC_MODULES:
            item.add_marker(pytest.mark.numeric)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    checked = len(BAD_INPUT_CHECKS)
    result = yield  # re-raises the test's own failure
    if item.get_closest_marker("bad_input") is not None and len(BAD_INPUT_CHECKS) == checked:
        raise AssertionError(f"{item.nodeid} is a bad_input case but never called assert_bad_input")
    return result


def assert_bad_input(result, fragment: str, root: Path | None = None, before: dict[str, str] | None = None) -> None:
    """A CliRunner result of a bad input: exit 2, exactly one line on stderr, starting with
    ``error:`` and containing ``fragment``, no traceback or warning anywhere, and (given
    ``root`` and its ``files_state`` from before the command) nothing under ``root`` changed."""
    stderr_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(stderr_lines) == 1, result.stderr
    assert stderr_lines[0].startswith("error:"), result.stderr
    assert fragment in stderr_lines[0], (fragment, result.stderr)
    assert "Traceback" not in result.output and "Warning" not in result.output, result.output
    if root is not None:
        assert files_state(root) == before, "the failed command changed files"
    BAD_INPUT_CHECKS.append(fragment)


def make_runset(
    root: Path,
    runs: int = 2,
    epochs: int = 2,
    n: int = 30,
    dim: int = 4,
    seed: int = 0,
    losses: bool = True,
    manifest: dict | None = None,
    *,
    vectors: Sequence[np.ndarray] | None = None,
    keys: Sequence[str] | None = None,
    counts: Sequence[int] | None = None,
) -> Path:
    """The one run-set builder of the tests: a run set written through ``RunSetWriter`` (no
    training, milliseconds), as ``pretrain`` lays it out. Keys ``k0…`` (or ``keys``) shared in
    ``keys.txt`` (with ``counts`` in ``key_counts.txt``), per run its final vectors (random
    with ``seed + run``, or ``vectors[run]``), losses and ``epochs`` per-epoch checkpoints:
    epoch e holds the final vectors scaled by e/epochs. ``manifest``: the fields to write."""
    from stabcli.runset import RunSetWriter, checkpoint_path, write_run

    if vectors is None:
        vectors = [np.random.default_rng(seed + r).standard_normal((n, dim)).astype(np.float32) for r in range(runs)]
    keys = [f"k{i}" for i in range(len(vectors[0]))] if keys is None else list(keys)
    with RunSetWriter(root) as writer:
        writer.create(manifest or {"runs": {}})
        writer.write_keys(keys, counts)
        for r, final in enumerate(vectors):
            partial = writer.new_partial(r)
            values = [2.0 - 0.5 * e + 0.01 * r for e in range(epochs)] if losses else [None] * epochs
            write_run(partial, final, keys, shared_keys=keys, losses=values)
            if epochs:
                (partial / "epochs").mkdir()
            for e in range(1, epochs + 1):
                np.save(checkpoint_path(partial, e), np.asarray(final, dtype=np.float32) * np.float32(e / epochs))
            writer.publish(r, partial)
    return root


SUBPROCESS_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def default_signals() -> None:
    """Give a child process the default SIGINT, SIGTERM and SIGHUP dispositions. An ignored
    signal stays ignored across exec, and pytest started as a background job (``cmd &`` in a
    script) ignores SIGINT: a child that inherited that would never see the Ctrl-C a test sends."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def start_process(args: Sequence[str | os.PathLike], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` of a child a test will signal, started as a terminal would start it
    (default signal handlers, ``SUBPROCESS_ENV`` unless ``env`` is given)."""
    kwargs.setdefault("env", SUBPROCESS_ENV)
    return subprocess.Popen(args, preexec_fn=default_signals, **kwargs)


def wait_for(predicate, seconds: float = 120.0) -> bool:
    """Poll ``predicate`` every 50 ms until it holds or ``seconds`` pass; its last value."""
    import time

    deadline = time.time() + seconds
    while time.time() < deadline and not predicate():
        time.sleep(0.05)
    return bool(predicate())


SLOW_FEATURIZE = (
    "import sys, time\n"
    "from stabcli.commands import featurize_stream\n"
    "from stabcli.cli.app import main\n"
    "chunks = featurize_stream.feature_chunks\n"
    "def slowly(*args, **kwargs):\n"
    "    for item in chunks(*args, **kwargs):\n"
    "        time.sleep(0.02)\n"
    "        yield item\n"
    "featurize_stream.feature_chunks = slowly\n"
    "sys.argv[0] = 'stabcli'\n"
    "main()\n"
)


def start_slow_featurize(tmp_path: Path, new_session: bool = False):
    """A real ``stabcli featurize`` into ``out.npy`` of 200 chunks (of 256 rows, the smallest
    chunk featurize streams), each delayed by 20 ms, so a signal or a second command lands
    while it writes. Returns the process and the names in ``tmp_path`` before it."""
    from stabcli.inputs.embeddings import write_embedding
    from stabcli.measure.fourier import MATMUL_BLOCK_ROWS

    rows = 200 * MATMUL_BLOCK_ROWS
    write_embedding(
        tmp_path / "in.npy",
        [f"k{i}" for i in range(rows)],
        np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32),
    )
    slow = tmp_path / "slow.py"
    slow.write_text(SLOW_FEATURIZE)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [sys.executable, str(slow), "featurize", str(tmp_path / "in.npy"), "--out", str(tmp_path / "out.npy")]
    proc = start_process(
        [*argv, "--dim", "8", "--chunk-rows", str(MATMUL_BLOCK_ROWS)],
        start_new_session=new_session,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, before


def make_zipf_text(n_sentences: int = 3000, topics: int = 8, words_per_topic: int = 60, seed: int = 0) -> str:
    """A word corpus with text's shape: sentences of one topic's words (Zipf within the topic)
    mixed with 12 function words (Zipf, 45% of the tokens, in every topic)."""
    rng = np.random.default_rng(seed)
    function_p = 1 / np.arange(1, 13)
    function_p /= function_p.sum()
    topic_p = 1 / np.arange(1, words_per_topic + 1) ** 1.1
    topic_p /= topic_p.sum()
    lines = []
    for _ in range(n_sentences):
        topic = rng.integers(topics)
        tokens = [
            f"f{rng.choice(12, p=function_p)}"
            if rng.random() < 0.45
            else f"t{topic}w{rng.choice(words_per_topic, p=topic_p)}"
            for _ in range(int(rng.integers(6, 14)))
        ]
        lines.append(" ".join(tokens))
    return "\n".join(lines) + "\n"


def make_interactions(users: int = 800, items: int = 1500, genres: int = 6, seed: int = 0) -> str:
    """MovieLens-shaped sessions: each user rates 5–39 items, nearly all of one favourite
    genre; item popularity Zipf (exponent 1.3), so a long tail of items rated once or twice."""
    rng = np.random.default_rng(seed)
    genre = rng.integers(genres, size=items)
    popularity = 1 / np.arange(1, items + 1) ** 1.3
    rng.shuffle(popularity)
    lines = []
    for _ in range(users):
        favourite = rng.integers(genres)
        weights = popularity * np.where(genre == favourite, 1.0, 0.01)
        chosen = rng.choice(items, size=int(rng.integers(5, 40)), replace=False, p=weights / weights.sum())
        lines.append(" ".join(f"i{c:04d}" for c in chosen))
    return "\n".join(lines) + "\n"


# ---- HTML reports: a parser that checks a page is well formed and self-contained (test_html, test_compare)

VOID = {"meta", "link", "img", "input", "br", "hr", "col", "source", "wbr", "area", "base", "embed", "track"}


class PageParser(HTMLParser):
    """Checks nesting (every element closed in order), collects URLs, cells and tables."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.urls: list[str] = []
        self.cells: list[dict] = []  # attributes of every td
        self.scripts: dict[str, str] = {}  # id or "inline-N" -> text
        self.tables: dict[str, list[list[tuple[str, dict]]]] = {}
        self._table: str | None = None
        self._row: list[tuple[str, dict]] | None = None
        self._cell: tuple[list[str], dict] | None = None
        self._script: tuple[str, list[str]] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            if name in attrs:
                self.urls.append(attrs[name])
        if tag == "table":
            self._table = attrs.get("id") or f"table-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ([], attrs)
        elif tag == "script":
            self._script = (attrs.get("id") or f"inline-{len(self.scripts)}", [])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            text, attrs = self._cell
            self._row.append(("".join(text), attrs))
            if tag == "td":
                self.cells.append({**attrs, "text": "".join(text)})
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "script" and self._script is not None:
            self.scripts[self._script[0]] = "".join(self._script[1])
            self._script = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0].append(data)
        if self._script is not None:
            self._script[1].append(data)
        else:
            self.text.append(data)


def parse(page: str) -> PageParser:
    parser = PageParser()
    parser.feed(page)
    parser.close()
    assert page.startswith("<!DOCTYPE html>")
    assert not parser.problems, parser.problems
    assert parser.stack == [], f"unclosed: {parser.stack}"
    for url in parser.urls:  # self-contained: nothing fetched from anywhere
        assert url.startswith("data:"), url
    assert "http://" not in page and "https://" not in page
    return parser


def json_value(data, path):
    node = data
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def assert_numbers_match(parser: PageParser, data: dict, least: int) -> None:
    """Every cell that names its JSON path holds exactly the JSON's number."""
    cells = [c for c in parser.cells if "data-path" in c]
    assert len(cells) >= least
    for cell in cells:
        expected = json_value(data, cell["data-path"])
        if expected is None:
            assert cell["data-value"] == ""
        else:
            assert float(cell["data-value"]) == expected, cell


def drift_argv(noise: Path) -> list:
    """``stabcli drift`` between runs 0 and 1 of the run set ``noise`` (made by ``make_runset``)
    against the noise band of its runs."""
    return [
        "drift",
        noise / "run-000" / "vectors.npy",
        noise / "run-001" / "vectors.npy",
        "--noise",
        noise,
        "--knn-k",
        "3",
    ]
