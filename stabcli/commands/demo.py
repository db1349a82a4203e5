"""``stabcli demo`` as a library call: the whole pipeline on the bundled synthetic sample data.

Trains 5 item2vec runs on the sample sessions, audits them with the sample's item genres as
downstream labels, featurizes every run (M = 64) and audits that too; then a refresh in
which 12 Horror items of middling popularity appear in Comedy sessions, one run trained on
it, compared with run 0 against the noise band of the 5 runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stabcli.commands.pretrain import pretrain
from stabcli.errors import UsageError
from stabcli.runset import check_removable_runset

if TYPE_CHECKING:
    from stabcli.commands.compare import CompareReport
    from stabcli.reports.audit_report import AuditReport
    from stabcli.reports.drift_report import DriftReport
    from stabcli.training.pretrain import PretrainResult

# everything the demo writes in its --out, and replaces when it runs again
DEMO_OUTPUTS = frozenset(
    {
        "runs",
        "runs-phi64",
        "runs-phi64.featurize.json",
        "runs-refreshed",
        "audit.json",
        "audit.md",
        "audit.html",
        "compare.html",
        "drift.html",
        "plots",
        "sessions-refreshed.txt",
        "drift.json",
        "drift.md",
    }
)
DEMO_MOVED_GENRE, DEMO_INTO_GENRE, DEMO_MOVED_RANKS = "Horror", "Comedy", range(10, 22)
# the demo's model: small enough for under a minute on 2 cores
DEMO_MODEL: dict[str, Any] = {"model": "word2vec", "dim": 32, "window": 3, "negative": 3, "epochs": 10}


def sample_path(name: str) -> Path:
    """Path of a bundled sample file (installed as package data ``stabcli.sample_data``)."""
    return Path(str(files("stabcli.sample_data").joinpath(name)))


@dataclass
class DemoResult:
    """Every step's result; the later ones are None when training failed (see ``runs.failed``)."""

    out: Path
    runs: PretrainResult
    audit: AuditReport | None = None
    featurized: AuditReport | None = None
    refreshed: PretrainResult | None = None
    drift: DriftReport | None = None
    moved: list[str] = field(default_factory=list)
    comparison: CompareReport | None = None  # the audit of the runs against that of their features


def demo(out: str | Path = "stabcli-demo", jobs: int | None = None, **callbacks: Any) -> DemoResult:
    """Run the pipeline on the bundled synthetic sample data (``stabcli demo``).

    Parameters
    ----------
    out : path
        Where the demo writes its run sets and reports (empty, new, or an earlier demo's).
    jobs : int, optional
        Runs and downstream fits in parallel (default: available cores).
    **callbacks
        ``on_step(text)`` (what the demo does next), ``on_progress(Progress)`` (training),
        ``on_warning(text)``, ``on_figure(path)``; ``step_summary`` (a file the audit's
        Markdown is appended to).

    Returns
    -------
    DemoResult
        The run set, both audits, the refreshed run and the drift report.
    """
    out = Path(out)
    on_step: Callable[[str], None] = callbacks.pop("on_step", None) or (lambda _: None)
    on_progress = callbacks.pop("on_progress", None)
    check_demo_out(out)  # before a minute of work, not after
    check_removable_runset(out / "runs-phi64")
    sessions = sample_path("sessions.txt")
    on_step(f"stabcli demo: 5 item2vec runs on the synthetic sample {sessions.name} → {out / 'runs'}")
    train = {**DEMO_MODEL, "jobs": jobs, "corpus_format": "lines", "on_progress": on_progress}
    result = DemoResult(out, pretrain(sessions, out / "runs", runs=5, seed=0, checkpoints=True, **train))
    if result.runs.failed:
        return result
    _audits(result, jobs, callbacks)
    moved, refreshed = _refresh(out)
    on_step(
        f"stabcli drift: a refresh where {len(moved)} {DEMO_MOVED_GENRE} items (frequency ranks "
        f"{DEMO_MOVED_RANKS[0] + 1}-{DEMO_MOVED_RANKS[-1] + 1}) appear in {DEMO_INTO_GENRE} sessions; one run on "
        f"it → {out / 'runs-refreshed'}"
    )
    result.refreshed = pretrain(refreshed, out / "runs-refreshed", runs=1, seed=100, checkpoints=True, **train)
    if result.refreshed.failed:
        return result
    from stabcli.commands.drift import drift

    runs = out / "runs"
    files = {"json": out / "drift.json", "markdown": out / "drift.md", "html": out / "drift.html", "force": True}
    result.drift = drift(runs, out / "runs-refreshed", runs, top=15, **files)
    result.moved = sorted(moved)
    return result


def _audits(result: DemoResult, jobs: int | None, callbacks: dict[str, Any]) -> None:
    """The audit of the runs with the sample genres as labels, and of their features phi(h)."""
    from stabcli.commands.audit import AuditOptions, audit, build_report, load_runs
    from stabcli.commands.featurize import FeaturizeOptions, featurize

    out = result.out
    files = {
        "json": out / "audit.json",
        "markdown": out / "audit.md",
        "html": out / "audit.html",
        "plots": out / "plots",
        "force": True,
    }
    labels = sample_path("item_genres.tsv")
    result.audit = audit([out / "runs"], top=10, labels=labels, jobs=jobs, **files, **callbacks)
    featurized = out / "runs-phi64"
    # rebuilt from the current runs; force replaces it only if it holds nothing but stabcli's run set
    featurize(out / "runs", featurized, FeaturizeOptions(dim=64), force=True)
    result.featurized = build_report(load_runs([featurized]), AuditOptions(top=0))
    result.comparison = _compare(out, result.audit, result.featurized)


def _compare(out: Path, raw: AuditReport, phi: AuditReport) -> CompareReport:
    """The two audits side by side (``stabcli compare``), with its page ``compare.html``."""
    from stabcli.commands.compare import compare_audits, side_of
    from stabcli.fs.outputs import OutputPlan
    from stabcli.reports.compare_render import render_html
    from stabcli.reports.schema import dumps, to_json

    a, b = to_json(raw), to_json(phi)
    comparison = compare_audits(
        (side_of(out / "runs", a, "run set"), a), (side_of(out / "runs-phi64", b, "run set"), b)
    )
    plan = OutputPlan([out / "runs", out / "runs-phi64"], force=True)
    plan.add(out / "compare.html", "demo")
    with plan:
        plan.write_text(out / "compare.html", render_html(comparison, dumps(comparison)))
    return comparison


def check_demo_out(out_dir: Path) -> None:
    """The demo replaces its reports in ``out_dir``: refuse a directory that holds anything
    else (it is not an earlier demo's, and its audit.md or drift.json may be the user's)."""
    if (out_dir.is_symlink() and not out_dir.is_dir()) or (out_dir.exists() and not out_dir.is_dir()):
        raise UsageError(f"--out {out_dir}: exists and is not a directory")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in DEMO_OUTPUTS)
        if foreign:
            raise UsageError(
                f"--out {out_dir}: holds {foreign[0]}, which the demo did not write; choose an empty or new directory"
            )


def _refresh(out: Path) -> tuple[set[str], Path]:
    """The refreshed sessions (``move_items``) written to ``out/sessions-refreshed.txt``: the
    moved items and the file."""
    from stabcli.commands.drift import move_items
    from stabcli.fs.outputs import OutputPlan

    sessions = [line.split() for line in sample_path("sessions.txt").read_text(encoding="utf-8").splitlines() if line]
    rows = [line.split("\t") for line in sample_path("item_genres.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    genre = {item: g for item, g in rows}
    counts = Counter(t for session in sessions for t in session if genre.get(t) == DEMO_MOVED_GENRE)
    ranked = [item for item, _ in counts.most_common()]
    moved = {ranked[i] for i in DEMO_MOVED_RANKS}
    refreshed = out / "sessions-refreshed.txt"
    # the demo's own files: replaced atomically on a rerun; a directory or an input of that name is refused
    plan = OutputPlan([sample_path("sessions.txt"), sample_path("item_genres.tsv"), out / "runs"], force=True)
    plan.add(refreshed, "demo")
    with plan:
        plan.write_text(
            refreshed, "".join(" ".join(s) + "\n" for s in move_items(sessions, genre, moved, DEMO_INTO_GENRE, 0))
        )
    return moved, refreshed
