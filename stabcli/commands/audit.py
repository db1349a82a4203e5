"""``stabcli audit``: the library entry point and the report's assembly.

The runs and options are read in ``audit_inputs``, the measures computed in
``audit_compute``; the report is an ``AuditReport`` (typed sections in
``stabcli.reports.audit_report``, JSON through ``stabcli.reports.schema.to_json``), and
renderers in ``stabcli.reports.audit_render`` turn it into a terminal view, Markdown and plots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stabcli import __version__
from stabcli.commands.audit_compute import (
    Frame,
    band_label,
    frame_of,
    frequency_bands,
    representation_report,
    spectral_fields,
    training_report,
)
from stabcli.commands.audit_inputs import (
    AuditOptions,
    Runs,
    check_frequencies,
    check_sizes,
    environment_differences,
    featurized,
    key_frequencies,
    load_runs,
    read_anchor,
)
from stabcli.constraints import DOWNSTREAM_OPTIONS
from stabcli.errors import InputError, OptionError, UsageError
from stabcli.inputs.embeddings import ReadOptions
from stabcli.reports import schema
from stabcli.reports.audit_report import AuditReport, DownstreamSection, InputSection, NextItemSection
from stabcli.reports.schema import Check, parse_check

if TYPE_CHECKING:  # downstream imports scikit-learn (seconds); only an audit with labels needs it
    from stabcli.commands.common import Callbacks, ReportFiles
    from stabcli.measure.downstream import DownstreamOptions
    from stabcli.measure.downstream.nextitem import NextItemOptions


@dataclass
class _Planned:
    """The labelled sections' options, checked against the runs before the Gram pass."""

    downstream: DownstreamOptions | None = None
    downstream_plan: Any = None
    next_item: NextItemOptions | None = None
    next_item_plan: Any = None


def _plan_sections(
    runs: Runs,
    downstream: DownstreamOptions | None,
    next_item: NextItemOptions | None,
    on_warning: Callable[[str], None] | None,
) -> _Planned:
    """Labels and interactions read and split against the runs (options, memory): all before the Gram pass."""
    planned = _Planned(downstream=downstream, next_item=next_item)
    if downstream:
        from stabcli.measure.downstream import plan_downstream

        block = featurized(runs)
        if block and block.get("dim"):  # phi(h) already: named so, not featurized again
            planned.downstream = downstream = replace(downstream, featurized=True)
        planned.downstream_plan = plan_downstream(downstream, runs.keys, len(runs.arrays), runs.dim, on_warning)
    if next_item:
        from stabcli.measure.downstream.nextitem import plan_next_item

        planned.next_item_plan = plan_next_item(next_item, runs.keys, len(runs.arrays), runs.dim)
    return planned


def _labelled_sections(
    runs: Runs,
    frame: Frame,
    planned: _Planned,
    step: Callable[[str], None],
    key_names: Mapping[str, str] | None,
    frequencies: Mapping[str, int] | None,
) -> tuple[DownstreamSection | None, Any, NextItemSection | None]:
    """The downstream section and its per-key flips (``--labels``), the next-item section (``--interactions``)."""
    labelled = flips = recommended = None
    if planned.downstream:
        from stabcli.measure.downstream import downstream_audit

        raw, flips = downstream_audit(
            frame.arrays,
            runs.keys,
            frame.rotations,
            planned.downstream,
            runs.names,
            step,
            planned.downstream_plan,
            key_names=key_names,
            frequency=key_frequencies(runs, frequencies)[0],
            bands=lambda f: [(band_label(lo, hi), lo, hi, m) for lo, hi, m in frequency_bands(f)],
        )
        labelled = DownstreamSection.from_dict(raw)
    if planned.next_item:
        from stabcli.measure.downstream.nextitem import next_item_report

        arrays, rotations = frame.arrays, frame.rotations
        section = next_item_report(
            arrays, runs.keys, rotations, planned.next_item, runs.names, step, planned.next_item_plan
        )
        recommended = NextItemSection.from_dict(section)
    return labelled, flips, recommended


def _input_section(runs: Runs, options: AuditOptions) -> InputSection:
    return InputSection(
        source=str(runs.runset.root) if runs.runset else None,
        run_names=runs.names,
        runs=len(runs.arrays),
        keys=len(runs.keys),
        dim=runs.dim,
        dropped_keys=runs.dropped,
        normalized=options.normalize,
        seed=options.seed,
        featurized=featurized(runs),
        environment=environment_differences(runs),
        degenerate=runs.degenerate,
    )


def build_report(
    runs: Runs,
    options: AuditOptions,
    on_step: Callable[[str], None] | None = None,
    downstream: DownstreamOptions | None = None,
    checks: Sequence[str] = (),
    key_names: Mapping[str, str] | None = None,
    per_key: bool = False,
    on_warning: Callable[[str], None] | None = None,
    next_item: NextItemOptions | None = None,
    frequencies: Mapping[str, int] | None = None,
) -> AuditReport:
    """The whole audit report; ``downstream`` (label options) adds the downstream section,
    ``next_item`` (interaction options) the next-item section, ``checks`` (expressions) its
    check results, ``per_key`` the per-key displacement."""
    step = on_step or (lambda _: None)
    for expression in checks:
        parse_check(expression)  # a malformed expression fails before any work
    check_sizes(options, runs)
    check_frequencies(runs, options, frequencies, on_warning)
    planned = _plan_sections(runs, downstream, next_item, on_warning)
    given_anchor = read_anchor(options.eis_anchor, runs, options.normalize) if options.eis_anchor else None
    frame = frame_of(runs, options, step)
    # first: a bad label file fails before the long representation metrics
    labelled, flips, recommended = _labelled_sections(runs, frame, planned, step, key_names, frequencies)
    representation, stats = representation_report(runs, frame, options, step, key_names, per_key, frequencies)
    step("EIS, weighted eigenspace overlap, debiased CKA")
    representation = replace(representation, **spectral_fields(runs, frame, options, given_anchor))
    report = AuditReport(
        stabcli_version=__version__,
        input=_input_section(runs, options),
        representation=representation,
        training=training_report(runs, options),
        downstream=labelled,
        next_item=recommended,
        key_stats=stats,
        downstream_keys=flips,
    )
    results = evaluate_checks(report, checks)
    return replace(report, checks=results, passed=all(c.passed for c in results))


# ---------------------------------------------------------------- CI checks


def validate_checks(
    expressions: Sequence[str], labels: bool, interactions: bool = False
) -> list[tuple[str, str, float]]:
    """Parse every expression and resolve its path against the report's types, before any
    input is read: a typo, a ``downstream`` path without ``--labels`` or a ``next_item`` path
    without ``--interactions`` fails at once."""

    def needs(path: str) -> str | None:
        section = path.split(".")[0]
        if section == "downstream" and not labels:
            return "the downstream section needs --labels FILE"
        if section == "next_item" and not interactions:
            return "the next_item section needs --interactions FILE"
        return None

    return schema.validate_checks(AuditReport, expressions, needs)


def resolve(report: Any, path: str) -> float | None:
    """``schema.resolve`` on an audit report (or its JSON)."""
    return schema.resolve(report, path, AuditReport)


def evaluate_checks(report: Any, expressions: Sequence[str]) -> list[Check]:
    """``schema.evaluate_checks`` on an audit report (or its JSON)."""
    return schema.evaluate_checks(report, expressions, AuditReport)


# ---------------------------------------------------------------- the entry point

# DownstreamOptions' fields (measure/downstream.py imports scikit-learn: seconds); a test keeps them equal
DOWNSTREAM_KEYWORDS = (
    "labels",
    "task",
    "model",
    "test_size",
    "split_seed",
    "variants",
    "featurize_dims",
    "sigmas",
    "reference",
    "seed",
    "jobs",
    "encoding",
    "min_class_size",
    "prefer",
    "model_params",
    "top",
)


def audit(inputs: str | Path | Sequence[str | Path], **options: Any) -> AuditReport:
    """Measure how much of an embedding is run-to-run noise (``stabcli audit``).

    Parameters
    ----------
    inputs : path or list of paths
        A run set directory, or two or more embedding files.
    **options
        The command's options by their library names (``knn_k=10``, ``top=20``,
        ``labels="genres.tsv"``, ``checks=["representation.knn_overlap>=0.6"]``...); files
        to write: ``json``, ``markdown``, ``plots``, ``per_key`` (with ``force``); callbacks
        ``on_step(text)``, ``on_warning(text)`` (default: a ``StabcliWarning``) and
        ``on_figure(path)``. ``docs/api.md`` lists them; each is validated as its flag is.

    Returns
    -------
    AuditReport
        ``report.to_dict()`` is what ``stabcli audit --format json`` prints;
        ``report.passed`` is false when a check failed.

    Raises
    ------
    StabcliError
        Bad input or options (``OptionError`` names the parameter), before any file is written.

    Examples
    --------
    >>> report = stabcli.audit("runs/exp1", knn_k=5, top=3)  # doctest: +SKIP
    >>> report.representation.knn_overlap  # doctest: +SKIP
    """
    from stabcli.commands.common import Renderings, publish
    from stabcli.inputs.textfile import check_regular_file
    from stabcli.reports import audit_render
    from stabcli.training.cluster import joblib_on

    call = _AuditCall.parse(inputs, options)
    plan = call.files.plan(call.paths, call.more_inputs())
    tracker = call.files.open_tracker(plan)
    names, counts = _key_tables(call.key_names, call.frequencies, call.encoding)
    runs = load_runs(call.paths, on_warning=call.callbacks.on_warning, read=call.read)
    if names is not None and call.key_names is not None:
        from stabcli.inputs.keytable import require_named_keys

        require_named_keys(Path(call.key_names), names, set(runs.keys))
    downstream = call.downstream
    if downstream is not None:  # before any worker starts
        if not Path(downstream.labels).exists():
            raise InputError(f"{downstream.labels}: label file not found")
        check_regular_file(Path(downstream.labels), "label file")
    with joblib_on(call.address) as cluster:  # connects (local:N: starts workers) once the inputs are checked
        if cluster is not None and downstream is not None and downstream.jobs is None:
            downstream = replace(downstream, jobs=cluster.threads())  # as many fits at once as the cluster runs
        files = call.files
        per_key = files.per_key is not None or files.html is not None or tracker is not None  # the displacement column
        report = build_report(
            runs,
            call.settings,
            call.callbacks.on_step,
            downstream,
            call.checks,
            names,
            per_key,
            call.callbacks.on_warning,
            next_item=call.next_item,
            frequencies=counts,
        )
        text = schema.dumps(report)
        renderings = Renderings(
            text,
            lambda rows: audit_render.render_markdown(report, rows),
            lambda: audit_render.plot_figures(report),
            lambda: _frame_of(report, names),
            lambda figures, frame: audit_render.render_html(report, frame, figures, text),
            len(report.representation.least_stable),
        )
        publish(files, plan, renderings, call.callbacks, (tracker, "audit", call.params))
    return report


@dataclass
class _AuditCall:
    """``audit()``'s keyword options split into the options types, each refused or checked
    before any input is read."""

    paths: list[Path]
    params: dict[str, Any]
    callbacks: Callbacks
    files: ReportFiles
    read: ReadOptions
    settings: AuditOptions
    checks: list[str]
    labelled: dict[str, Any]
    downstream: DownstreamOptions | None
    next_item: NextItemOptions | None
    key_names: str | Path | None
    frequencies: str | Path | None
    address: str | None

    @property
    def encoding(self) -> str | None:
        return self.labelled.get("encoding")

    def more_inputs(self) -> list[Path | None]:
        """The inputs besides the runs, which no output may overwrite."""
        more = [self.labelled.get("labels"), self.key_names, self.read.keys_file, self.settings.eis_anchor]
        more += [self.frequencies, self.next_item.interactions if self.next_item is not None else None]
        return [Path(path) if path is not None else None for path in more]

    @classmethod
    def parse(cls, inputs: str | Path | Sequence[str | Path], options: dict[str, Any]) -> _AuditCall:
        from stabcli.commands.common import (
            Callbacks,
            ReportFiles,
            params_given,
            refuse_unknown,
            refuse_unused_table_options,
            take,
        )
        from stabcli.inputs.textfile import check_encoding
        from stabcli.measure.downstream.nextitem import next_item_options
        from stabcli.training.cluster import scheduler_address

        paths = [Path(inputs)] if isinstance(inputs, (str, Path)) else [Path(p) for p in inputs]
        options = dict(options)
        params = {"inputs": [str(p) for p in paths], **params_given(options)}
        callbacks = Callbacks.take(options)
        checks, key_names = list(options.pop("checks", ())), options.pop("key_names", None)
        scheduler, frequencies = options.pop("scheduler", None), options.pop("frequencies", None)
        if options.get("encoding") is not None:
            check_encoding("encoding", options["encoding"])
        files = ReportFiles.take(options)
        read = ReadOptions(**take(ReadOptions, options, {"keys": "keys_file"}))
        settings = AuditOptions(**take(AuditOptions, options, keep=("seed", "top")))
        next_item = next_item_options(options, settings.seed, options.get("reference", 0), options.get("encoding"))
        if next_item is not None and options.get("task") == "next-item":
            options.pop("task")
        labelled = {name: options.pop(name) for name in DOWNSTREAM_KEYWORDS if name in options}
        refuse_unknown("audit", options)
        tables = [("--labels", labelled.get("labels")), ("--key-names", key_names), ("--frequencies", frequencies)]
        refuse_unused_table_options(labelled, tables)
        downstream = _downstream_options(labelled, scheduler)
        address = scheduler_address(scheduler) if downstream is not None else None
        # a typo fails before any input is read
        validate_checks(checks, labels=downstream is not None, interactions=next_item is not None)
        files.check_formats()
        return cls(
            paths=paths,
            params=params,
            callbacks=callbacks,
            files=files,
            read=read,
            settings=settings,
            checks=checks,
            labelled=labelled,
            downstream=downstream,
            next_item=next_item,
            key_names=key_names,
            frequencies=frequencies,
            address=address,
        )


def _key_tables(
    key_names: str | Path | None, frequencies: str | Path | None, encoding: str | None
) -> tuple[dict[str, str] | None, dict[str, int] | None]:
    """The ``key_names`` and ``frequencies`` files, read (None when not given)."""
    from stabcli.inputs.keytable import read_frequencies, read_key_names

    names = read_key_names(Path(key_names), encoding) if key_names is not None else None
    counts = read_frequencies(Path(frequencies), encoding or "utf-8") if frequencies is not None else None
    return names, counts


def _downstream_options(labelled: dict[str, Any], scheduler: str | None) -> DownstreamOptions | None:
    """The ``DownstreamOptions`` of ``labels=...``; without labels, a UsageError naming the
    options that only apply with them."""
    from stabcli.commands.common import only_with

    if labelled.get("task") == "next-item":
        raise UsageError("--task next-item needs --interactions FILE")
    if labelled.get("labels") is None:
        for name, value in labelled.items():  # a bad value is refused even where it would not apply
            constraint = DOWNSTREAM_OPTIONS.get(name)
            if constraint is not None and name != "seed" and (problem := constraint.problem(value)) is not None:
                raise OptionError(name, problem)
        names = ("variants", "featurize_dims", "sigmas", "model")
        given = [(name, labelled.get(name) is not None) for name in names]
        given += [("model_param", bool(labelled.get("model_params")))]
        given += [("min_class_size", labelled.get("min_class_size", 5) != 5), ("scheduler", scheduler is not None)]
        given += [("prefer", labelled.get("prefer", "balanced") != "balanced")]
        only_with("--labels FILE", [("--" + name.replace("_", "-"), present) for name, present in given])
        return None
    from stabcli.measure.downstream import DownstreamOptions

    return DownstreamOptions(**{name: value for name, value in labelled.items() if value not in (None, [], ())})


def _frame_of(report: AuditReport, names: Mapping[str, str] | None) -> Any:
    from stabcli.inputs.keytable import per_key_frame

    stats = report.key_stats
    return per_key_frame(
        stats.keys,
        dict(names) if names else None,
        stats.frequency,
        stats.norm,
        stats.aligned_variance,
        stats.relative_instability,
        stats.displacement,
        stats.knn_overlap,
        report.downstream_keys.columns(stats.keys) if report.downstream_keys is not None else None,
    )
