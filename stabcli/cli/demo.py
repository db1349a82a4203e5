"""``stabcli demo``: the whole pipeline on the bundled synthetic sample data."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Annotated

import typer

from stabcli.cli.audit import audit_and_render
from stabcli.cli.options import jobs_option
from stabcli.cli.output import err, out
from stabcli.cli.pretrain import report_pretrain, run_pretrain
from stabcli.errors import UsageError
from stabcli.inputs.corpus import CorpusOptions
from stabcli.runset import check_removable_runset
from stabcli.training.pretrain import TrainConfig


def sample_path(name: str) -> Path:
    """Path of a bundled sample file (installed as package data ``stabcli.sample_data``)."""
    return Path(str(files("stabcli.sample_data").joinpath(name)))


def demo_cmd(
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Where the demo writes its run sets and reports.")
    ] = Path("stabcli-demo"),
    jobs: Annotated[int | None, jobs_option("Runs and downstream fits in parallel [default: available cores].")] = None,
) -> None:
    """Run the pipeline on the bundled synthetic sample data (under a minute on 2 cores).

    Trains 5 item2vec runs (dim 32) on sample sessions into OUT/runs, audits them with the
    sample's item genres as downstream labels (report also in OUT/audit.json, OUT/audit.md
    and OUT/plots), featurizes every run with the same
    random Fourier directions (M = 64) into OUT/runs-phi64, audits that too and shows both
    side by side. Then a drift step: one run on a refreshed copy of the sessions in which 12
    Horror items appear in Comedy sessions instead (OUT/runs-refreshed), compared with run 0 against
    the noise band of the 5 runs (OUT/drift.json, OUT/drift.md). Rerunning reuses the
    trained runs.

    Example:

        stabcli demo --out /tmp/stabcli-demo
    """
    from stabcli.commands.audit import AuditOptions, build_report, load_runs
    from stabcli.commands.featurize import FeaturizeOptions, featurize
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.reports.audit_render import comparison_table
    from stabcli.reports.layout import print_table

    sessions = sample_path("sessions.txt")
    _check_demo_out(out_dir)  # before a minute of work, not after
    check_removable_runset(out_dir / "runs-phi64")
    err.print(
        f"stabcli demo: 5 item2vec runs on the synthetic sample {sessions.name} → {out_dir / 'runs'}", highlight=False
    )
    config = TrainConfig(model="word2vec", dim=32, window=3, negative=3, epochs=10, checkpoints=True)
    result = run_pretrain(
        out_dir / "runs",
        sessions,
        config,
        runs=5,
        seed=0,
        jobs=jobs,
        force=False,
        corpus_options=CorpusOptions(format="lines"),
        timeout=None,
    )
    report_pretrain(result, "table")
    out.print()
    labels = DownstreamOptions(sample_path("item_genres.tsv"), jobs=jobs)
    raw = audit_and_render(
        [out_dir / "runs"],
        AuditOptions(top=10),
        [],
        "table",
        out_dir / "audit.json",
        out_dir / "audit.md",
        out_dir / "plots",
        labels,
        force=True,
    )
    featurized = out_dir / "runs-phi64"
    # rebuilt from the current runs; --force replaces it only if it holds nothing but stabcli's run set
    featurize(out_dir / "runs", featurized, FeaturizeOptions(dim=64), force=True)
    phi = build_report(load_runs([featurized]), AuditOptions(top=0))
    out.print()
    print_table(out, comparison_table({"raw h (32 dims)": raw, "phi(h) (64 dims)": phi}))
    out.print(
        "Measured, not assumed: featurization helps where its column is more stable; see README "
        "'When featurization helps'.",
        highlight=False,
    )
    out.print()
    _demo_drift(out_dir, config, jobs)


# everything the demo writes in its --out, and replaces when it runs again
DEMO_OUTPUTS = frozenset(
    {
        "runs",
        "runs-phi64",
        "runs-phi64.featurize.json",
        "runs-refreshed",
        "audit.json",
        "audit.md",
        "plots",
        "sessions-refreshed.txt",
        "drift.json",
        "drift.md",
    }
)


def _check_demo_out(out_dir: Path) -> None:
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


DEMO_MOVED_GENRE, DEMO_INTO_GENRE, DEMO_MOVED_RANKS = "Horror", "Comedy", range(10, 22)


def _demo_drift(out_dir: Path, config: TrainConfig, jobs: int | None) -> None:
    """The demo's drift step: a refresh in which 12 Horror items of middling popularity (ranks
    11-22 by frequency in their genre) appear in Comedy sessions instead of their own; one run
    trained on it, compared with run 0 against the noise band of the demo's 5 runs."""
    from collections import Counter

    from stabcli.commands.drift import DriftOptions, compute_drift, load_inputs, move_items
    from stabcli.fs.outputs import OutputPlan
    from stabcli.reports.drift_render import render_markdown, render_terminal
    from stabcli.reports.schema import dumps

    sessions = [line.split() for line in sample_path("sessions.txt").read_text(encoding="utf-8").splitlines() if line]
    rows = [line.split("\t") for line in sample_path("item_genres.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    genre = {item: g for item, g in rows}
    counts = Counter(t for session in sessions for t in session if genre.get(t) == DEMO_MOVED_GENRE)
    ranked = [item for item, _ in counts.most_common()]
    moved = {ranked[i] for i in DEMO_MOVED_RANKS}
    refreshed = out_dir / "sessions-refreshed.txt"
    # the demo's own files: replaced atomically on a rerun; a directory or an input of that name is refused
    plan = OutputPlan([sample_path("sessions.txt"), sample_path("item_genres.tsv"), out_dir / "runs"], force=True)
    plan.add(refreshed, "demo")
    with plan:
        plan.write_text(
            refreshed, "".join(" ".join(s) + "\n" for s in move_items(sessions, genre, moved, DEMO_INTO_GENRE, 0))
        )
    err.print(
        f"stabcli drift: a refresh where {len(moved)} {DEMO_MOVED_GENRE} items (frequency ranks "
        f"{DEMO_MOVED_RANKS[0] + 1}-{DEMO_MOVED_RANKS[-1] + 1}) appear in {DEMO_INTO_GENRE} sessions; one run on "
        f"it → {out_dir / 'runs-refreshed'}",
        highlight=False,
    )
    run_pretrain(
        out_dir / "runs-refreshed",
        refreshed,
        config,
        runs=1,
        seed=100,
        jobs=jobs,
        force=False,
        corpus_options=CorpusOptions(format="lines"),
        timeout=None,
    )
    inputs = load_inputs(out_dir / "runs", out_dir / "runs-refreshed", out_dir / "runs")
    report, _ = compute_drift(inputs, DriftOptions(top=15))
    plan = OutputPlan([out_dir / "runs", out_dir / "runs-refreshed"], force=True)
    plan.add(out_dir / "drift.json", "demo")
    plan.add(out_dir / "drift.md", "demo")
    with plan:
        plan.write_text(out_dir / "drift.json", dumps(report))
        plan.write_text(out_dir / "drift.md", render_markdown(report))
    render_terminal(report, out)
    found = sum(t.key in moved for t in report.drift.top)
    out.print(
        f"{found} of the {len(report.drift.top)} listed keys are the {len(moved)} moved {DEMO_MOVED_GENRE} items "
        f"({', '.join(sorted(moved))}); see docs/drift.md for how to read this.",
        highlight=False,
        soft_wrap=True,
    )
