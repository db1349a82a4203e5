"""``stabcli drift``: did a refresh really move these keys, or is it training noise?

BEFORE and AFTER (embedding files, or run sets' ``--reference`` run) are compared on their
common keys after orthogonal Procrustes of AFTER onto BEFORE. With a noise run set (seeded
runs on BEFORE's data and configuration) every key gets its own noise band, and a key has
moved when its change exceeds that band at level ``alpha`` (the statistic is in
``stabcli.measure.drift_stats.noise_band``). The inputs are read in ``drift_inputs``, the
report computed in ``drift_compute``; its types are in ``stabcli.reports.drift_report``.
``--check`` paths are validated against the types before anything is loaded
(``schema.validate_checks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stabcli.commands.drift_compute import compute_drift
from stabcli.commands.drift_inputs import DriftOptions, load_inputs, read_key_names
from stabcli.errors import OptionError
from stabcli.inputs.embeddings import ReadOptions
from stabcli.reports import schema
from stabcli.reports.drift_report import NEEDS_NOISE, DriftReport

if TYPE_CHECKING:
    from stabcli.commands.common import Callbacks, ReportFiles
    from stabcli.measure.downstream import DownstreamOptions

# DownstreamOptions' fields drift has (measure/downstream.py imports scikit-learn: seconds)
DOWNSTREAM_KEYWORDS = ("labels", "task", "model", "model_params", "test_size", "split_seed", "encoding")


# ------------------------------------------------------------------ checks (schema's, one implementation)


def _needs(path: str, has_noise: bool, has_labels: bool) -> str | None:
    if not has_noise and any(path == p or path.startswith(p + ".") for p in NEEDS_NOISE):
        return f"{path} needs --noise RUNSET"
    if not has_labels and (path == "downstream" or path.startswith("downstream.")):
        return f"{path} needs --labels FILE"
    return None


def validate_checks(expressions: Sequence[str], has_noise: bool, has_labels: bool) -> list[tuple[str, str, str, float]]:
    """Parse every ``--check`` and resolve its path against ``DriftReport`` before any input
    is read (``schema.validate_checks``): unknown paths, non-numeric fields and fields that
    need ``--noise`` or ``--labels`` are ``UsageError``. Returns (expression, path, op, threshold)."""
    parsed = schema.validate_checks(DriftReport, expressions, lambda path: _needs(path, has_noise, has_labels))
    return [(expression.strip(), *triple) for expression, triple in zip(expressions, parsed, strict=False)]


def evaluate_checks(report: DriftReport, parsed: Sequence[tuple[str, str, str, float]]) -> DriftReport:
    """The report with its ``checks`` and ``passed`` filled in (``schema.evaluate_checks``);
    a null value fails its check."""
    results = schema.evaluate_checks(report, [expression for expression, *_ in parsed], DriftReport)
    return replace(report, checks=results, passed=all(c.passed for c in results))


def move_items(
    sessions: Sequence[Sequence[str]], group_of: dict[str, str], items: set[str], into: str, seed: int = 0
) -> list[list[str]]:
    """A simulated refresh: ``items`` leave every session and reappear (1 or 2 of them, drawn
    uniformly) in the sessions whose most frequent group is ``into``; all else is unchanged.

    Used by the demo and the power test: exactly ``items`` change their context, and the
    items of ``into`` and of the items' own group see their co-occurrences change too.
    """
    rng = np.random.default_rng(seed)
    pool = sorted(items)
    refreshed = []
    for session in sessions:
        groups = [group_of.get(t) for t in session]
        counts: dict[str, int] = {}
        for g in groups:
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        dominant = max(counts, key=lambda g: counts[g]) if counts else None
        kept = [t for t in session if t not in items]
        if dominant == into and pool:
            for item in rng.choice(pool, size=int(rng.integers(1, 3))):
                kept.insert(int(rng.integers(0, len(kept) + 1)), str(item))
        if kept:
            refreshed.append(kept)
    return refreshed


# ------------------------------------------------------------------ the entry point


def drift(before: str | Path, after: str | Path, noise: str | Path | None = None, **options: Any) -> DriftReport:
    """Which keys did a refresh really move, and which only changed by training noise (``stabcli drift``)?

    Parameters
    ----------
    before, after : path
        Embedding files, or run sets (their ``reference`` run).
    noise : path, optional
        Run set of seeded runs on BEFORE's data and configuration: each key's noise band.
    **options
        The command's options by their library names (``alpha``, ``measure``, ``align``,
        ``knn_k``, ``knn_queries``, ``top``, ``seed``, ``reference``, ``allow_noise_mismatch``, ``labels``, ``task``, ``model``,
        ``test_size``, ``split_seed``, ``encoding``, ``key_names``, ``checks``,
        ``input_format``, ``trust_pickle``, ``keys``); files to write: ``json``,
        ``markdown``, ``plots``, ``per_key`` (with ``force``); callbacks ``on_step(text)``
        and ``on_figure(path)``. Each is validated as its flag is, with the same message.

    Returns
    -------
    DriftReport
        ``report.to_dict()`` is what ``stabcli drift --format json`` prints;
        ``report.passed`` is false when a check failed.

    Raises
    ------
    StabcliError
        Bad input or options (``OptionError`` names the parameter), before any file is written.

    Examples
    --------
    >>> report = stabcli.drift("runs/v1", "v2.npy", noise="runs/v1")  # doctest: +SKIP
    >>> report.drift.moved_share  # doctest: +SKIP
    """
    from stabcli.commands.common import Renderings, only_with, publish
    from stabcli.reports import drift_render

    call = _DriftCall.parse(before, after, noise, options)
    plan = call.files.plan(call.sides(), call.more_inputs())
    tracker = call.files.open_tracker(plan)
    if call.allow_mismatch and call.noise is None:
        only_with("--noise RUNSET", [("--allow-noise-mismatch", True)])
    inputs = load_inputs(call.before, call.after, call.noise, call.settings.reference, call.read, call.allow_mismatch)
    key_names = call.key_names
    names = read_key_names(key_names, set(inputs.keys), call.encoding) if key_names else None
    report, table = compute_drift(
        inputs,
        call.settings,
        call.downstream,
        names,
        str(key_names) if key_names else None,
        call.callbacks.on_step,
        call.callbacks.on_warning,
    )
    report = evaluate_checks(report, call.checks)
    text = schema.dumps(report)
    compact = call.per_key_csv or call.files.per_key is None
    renderings = Renderings(
        text,
        lambda rows: drift_render.render_markdown(report, rows),
        lambda: drift_render.plot_figures(report, table),
        lambda: table.frame(compact=compact),
        lambda figures, _: drift_render.render_html(report, table, figures, text),
        len(report.drift.top),
    )
    publish(call.files, plan, renderings, call.callbacks, (tracker, "drift", call.params))
    return report


@dataclass
class _DriftCall:
    """``drift()``'s keyword options split into the options types, each refused or checked
    before any input is read."""

    before: Path
    after: Path
    noise: Path | None
    params: dict[str, Any]
    callbacks: Callbacks
    files: ReportFiles
    read: ReadOptions
    settings: DriftOptions
    checks: list[tuple[str, str, str, float]]
    labelled: dict[str, Any]
    downstream: DownstreamOptions | None
    key_names: str | Path | None
    allow_mismatch: bool
    per_key_csv: bool

    @property
    def encoding(self) -> str | None:
        return self.labelled.get("encoding")

    def sides(self) -> list[Path]:
        return [self.before, self.after, *([self.noise] if self.noise else [])]

    def more_inputs(self) -> list[Path | None]:
        """The inputs besides BEFORE, AFTER and the noise, which no output may overwrite."""
        labels = self.downstream.labels if self.downstream else None
        return [labels, Path(self.key_names) if self.key_names else None, self.read.keys_file]

    @classmethod
    def parse(
        cls, before: str | Path, after: str | Path, noise: str | Path | None, options: dict[str, Any]
    ) -> _DriftCall:
        from stabcli.commands.common import (
            Callbacks,
            ReportFiles,
            only_with,
            params_given,
            refuse_unknown,
            refuse_unused_table_options,
            take,
        )
        from stabcli.inputs.textfile import check_encoding

        before, after = Path(before), Path(after)
        noise = Path(noise) if noise is not None else None
        options = dict(options)
        params = {"before": str(before), "after": str(after), "noise": noise, **params_given(options)}
        callbacks = Callbacks.take(options)
        checks, key_names = list(options.pop("checks", ())), options.pop("key_names", None)
        allow_mismatch = bool(options.pop("allow_noise_mismatch", False))
        labelled = {name: options.pop(name) for name in DOWNSTREAM_KEYWORDS if name in options}
        files = ReportFiles.take(options)
        settings = DriftOptions(**take(DriftOptions, options))
        read = ReadOptions(**take(ReadOptions, options, {"keys": "keys_file"}))
        refuse_unknown("drift", options)
        refuse_unused_table_options(labelled, [("--labels", labelled.get("labels")), ("--key-names", key_names)])
        if labelled.get("labels") is None:
            only_with("--labels FILE", [("--model-param", bool(labelled.get("model_params")))])
        if labelled.get("encoding") is not None:
            check_encoding("encoding", labelled["encoding"])
        downstream = _downstream_options(labelled)
        return cls(
            before=before,
            after=after,
            noise=noise,
            params=params,
            callbacks=callbacks,
            files=files,
            read=read,
            settings=settings,
            checks=validate_checks(checks, has_noise=noise is not None, has_labels=downstream is not None),
            labelled=labelled,
            downstream=downstream,
            key_names=key_names,
            allow_mismatch=allow_mismatch,
            per_key_csv=files.check_formats() == "csv",
        )


def _downstream_options(labelled: dict[str, Any]) -> DownstreamOptions | None:
    """The ``DownstreamOptions`` of ``labels=...`` (None without labels)."""
    if labelled.get("labels") is None:
        return None
    from stabcli.measure.downstream import DownstreamOptions

    if labelled.get("task") == "next-item":
        raise OptionError("task", "next-item is an audit task (audit RUNS --task next-item --interactions FILE)")
    return DownstreamOptions(**{k: v for k, v in labelled.items() if v not in (None, [], ())})
