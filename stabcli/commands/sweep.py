"""``stabcli sweep``: retrain over a grid of settings and data sizes, audit every cell, and
read off what makes the embedding stable (docs/commands.md, stabcli sweep).

::

    OUT/
      sweep.json                 what the sweep is (corpus sha256, seed, corpus options)
      stabcli.lock               held while a sweep writes here
      corpora/size-0.4.txt       the nested sample of 40% of the sequences (token lines)
      cells/size-0.4_window-3/   one run set per cell, written and resumed by pretrain
      swap/size-0.4/base/        --swap-one: one run on the sample
      swap/size-0.4/pair-000.txt, pair-000/   the sample with one sequence swapped, one run

Every cell is an ordinary run set written through :func:`stabcli.training.pretrain.pretrain`
(same lock, manifest, resume and backends; the directory and the training are
:mod:`stabcli.training.sweep_dir`), so a killed sweep resumes where it stopped and
``stabcli audit OUT/cells/NAME`` reads any cell. Cells share nothing but the sample files.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stabcli import __version__
from stabcli.commands.audit import AuditOptions, build_report, load_runs
from stabcli.errors import InputError, UsageError, quote
from stabcli.inputs.corpus import Corpus, CorpusOptions, read_corpus
from stabcli.inputs.labels import read_label_sets
from stabcli.measure import curves
from stabcli.measure import metrics as m
from stabcli.measure.align import match_keys, matched_vectors
from stabcli.reports import schema
from stabcli.reports.audit_report import AuditReport
from stabcli.reports.sweep_report import Pareto, PowerLaw, SizePoint, SwapOne, SweepCell, SweepReport, Target
from stabcli.runset.manifest import corpus_reading
from stabcli.runset.reader import RunSet
from stabcli.training import sweep_plan as plan
from stabcli.training.pretrain import (
    Backend,
    TrainConfig,
    corpus_entry,
    local_backend,
    parse_params,
    require_trainable,
)
from stabcli.training.sweep_dir import (
    CELLS,
    SweepDir,
    Trained,
    check_outputs,
    prepared_lines,
    train_cells,
    train_one,
    train_swap_one,
)

if TYPE_CHECKING:
    from stabcli.commands.common import ReportFiles
    from stabcli.fs.outputs import OutputPlan
    from stabcli.measure.downstream import DownstreamOptions

SCHEMA_VERSION = 1

# instability measures of the data-size curves: name → (cell field, flip: 1 − value)
INSTABILITY: dict[str, tuple[str, bool]] = {
    "noise_share": ("noise_share", False),
    "aligned_noise_share": ("aligned_noise_share", False),
    "knn_instability": ("knn_overlap", True),
    "cka_instability": ("cka_debiased", True),
    "eis": ("eis", False),
    "churn": ("churn", False),
}
# --target names: a stability measure and its instability curve
TARGETS = {
    "knn_overlap": "knn_instability",
    "cka_debiased": "cka_instability",
    "noise_share": "noise_share",
    "aligned_noise_share": "aligned_noise_share",
    "eis": "eis",
    "churn": "churn",
}
# stability measures for the Pareto front (higher is more stable once flipped)
STABILITY = {"knn_overlap": False, "cka_debiased": False, "cka": False, "eis": True, "aligned_noise_share": True}


@dataclass(frozen=True)
class SweepOptions:
    """What to sweep; checked on construction (``UsageError`` naming the option)."""

    grid: dict[str, list[Any]] = field(default_factory=dict)
    sizes: Sequence[float] = (1.0,)
    runs: int = 5
    seed: int = 0
    swap_one: int = 0
    target: str | None = None
    stability: str = "knn_overlap"

    def __post_init__(self) -> None:
        if type(self.runs) is not int or self.runs < 2:
            raise UsageError("--runs: a sweep compares runs: at least 2")
        if type(self.swap_one) is not int or not 0 <= self.swap_one <= 1000:
            raise UsageError("--swap-one: a number of pairs from 0 to 1000")
        if type(self.seed) is not int or not 0 <= self.seed < 2**31:
            raise UsageError("--seed: must be between 0 and 2**31 - 1")
        if not self.sizes or any(not (0 < s <= 1) for s in self.sizes):
            raise UsageError("--sizes: shares of the corpus in (0, 1]")
        if self.stability not in STABILITY:
            raise UsageError(f"--stability {quote(self.stability)}: choose one of {', '.join(STABILITY)}")
        if self.target is not None:
            parse_target(self.target)


def parse_target(text: str) -> tuple[str, float]:
    """``'knn_overlap=0.8'`` → ("knn_overlap", 0.8)."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or name not in TARGETS:
        raise UsageError(f"--target {quote(text)}: expected MEASURE=VALUE with MEASURE one of {', '.join(TARGETS)}")
    try:
        if not raw.isascii():  # float() also reads fullwidth digits
            raise ValueError(raw)
        value = float(raw)
    except ValueError:
        raise UsageError(f"--target {quote(text)}: {quote(raw.strip())} is not a number") from None
    if not math.isfinite(value) or value < 0 or (TARGETS[name] != name and value >= 1):
        raise UsageError(f"--target {quote(text)}: the value must be finite, at least 0 and (overlaps, CKA) below 1")
    return name, value


SWEEP_KEYWORDS = ("runs", "seed", "swap_one", "target", "stability")
DOWNSTREAM_KEYWORDS = {
    "labels": "labels",
    "task": "task",
    "downstream_model": "model",
    "test_size": "test_size",
    "split_seed": "split_seed",
}


def sweep(corpus: str | Path, out: str | Path, **options: Any) -> SweepReport:
    """Retrain over a grid of settings and nested data sizes, audit every cell (``stabcli sweep``).

    Parameters
    ----------
    corpus : path
        The training corpus; the sizes are nested samples of its sequences.
    out : path
        The sweep directory (created or resumed; one run set per cell under ``cells/``).
    **options
        ``grid`` (``"window=3,5 negative=3,10"`` or a dict of lists), ``sizes`` (``"0.1,0.5,1"``
        or shares), ``runs``, ``seed``, ``swap_one``, ``target`` (``"knn_overlap=0.8"``),
        ``stability``; the model as in ``stabcli.pretrain`` (``model``, ``dim``, ``window``,
        ``negative``, ``epochs``, ``sg``, ``min_count``, ``params``, ``script``, ``timeout``,
        ``corpus_format``, ``encoding``); ``knn_k``, ``knn_queries``; ``labels``, ``task``,
        ``downstream_model``, ``test_size``, ``split_seed``; ``jobs``, ``scheduler``,
        ``force``, ``checks``; files ``json``, ``markdown``, ``plots``; callbacks ``on_step``,
        ``on_warning``, ``on_figure``.

    Returns
    -------
    SweepReport
        ``report.to_dict()`` is what ``stabcli sweep --format json`` prints; ``report.passed``
        is false when a check failed.

    Examples
    --------
    >>> report = stabcli.sweep("sessions.txt", "sweeps/s1", grid="window=2,5", sizes="0.5,1", runs=3)  # doctest: +SKIP
    >>> report.data_size["knn_instability"].b  # doctest: +SKIP
    """
    from stabcli.commands.common import ReportFiles, warn

    options = dict(options)
    on_warning = options.pop("on_warning", None) or warn
    on_step, on_figure = options.pop("on_step", None), options.pop("on_figure", None)
    checks, scheduler = list(options.pop("checks", ())), options.pop("scheduler", None)
    jobs, force, timeout = options.pop("jobs", None), options.get("force", False), options.pop("timeout", None)
    files = ReportFiles.take(options)
    config, corpus_options, settings, audit, downstream = _options(options, jobs)
    validate_checks(checks, settings, labels=downstream is not None)
    files.check_formats()
    inputs = [Path(corpus), *([downstream.labels] if downstream else [])]
    report_plan = files.plan([Path(corpus)], inputs[1:])
    check_outputs(out, inputs, report_plan.outputs)
    from stabcli.training.cluster import scheduler_address

    address = scheduler_address(scheduler)
    extra: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if address is not None:
            from stabcli.training.cluster import training_backend

            extra["backend"] = stack.enter_context(training_backend(address))
        report = run_sweep(
            corpus,
            out,
            config,
            settings,
            audit=audit,
            downstream=downstream,
            corpus_options=corpus_options,
            jobs=jobs,
            force=force,
            checks=checks,
            timeout=timeout,
            on_step=on_step,
            on_warning=on_warning,
            **extra,
        )
    for figure in _write_reports(report, files, report_plan, on_warning):
        if on_figure is not None:
            on_figure(figure)
    return report


def _options(
    options: dict[str, Any], jobs: int | None
) -> tuple[TrainConfig, CorpusOptions, SweepOptions, AuditOptions, DownstreamOptions | None]:
    """The keyword options split into the options types (each checked on construction); an
    unknown keyword is a ``TypeError``."""
    from stabcli.commands.common import refuse_unknown, take

    params = options.pop("params", None) or {}
    model = options.get("model", "word2vec")
    if not isinstance(params, dict):
        params = parse_params(model, params)
    config = TrainConfig(**take(TrainConfig, options), params=params)
    corpus_options = CorpusOptions(**take(CorpusOptions, options, {"corpus_format": "format"}))
    grid = options.pop("grid", None) or {}
    sizes = options.pop("sizes", None)
    sizes = [1.0] if sizes is None else sizes
    settings = SweepOptions(
        grid=plan.parse_grid(grid, model, config.script) if isinstance(grid, str) else dict(grid),
        sizes=plan.parse_sizes(sizes) if isinstance(sizes, str) else sorted(float(v) for v in sizes),
        **{name: options.pop(name) for name in SWEEP_KEYWORDS if name in options},
    )
    audit = AuditOptions(**{name: options.pop(name) for name in ("knn_k", "knn_queries") if name in options})
    labelled = {field: options.pop(name) for name, field in DOWNSTREAM_KEYWORDS.items() if name in options}
    refuse_unknown("sweep", options)
    downstream = None
    if labelled.get("labels") is not None:
        from stabcli.measure.downstream import DownstreamOptions

        downstream = DownstreamOptions(**{k: v for k, v in labelled.items() if v is not None}, jobs=jobs)
    return config, corpus_options, settings, audit, downstream


def _write_reports(
    report: SweepReport, files: ReportFiles, report_plan: OutputPlan, on_warning: Callable[[str], None]
) -> list[Path]:
    """The JSON, Markdown, plot and HTML files asked for, all or none; the figures' and the page's paths."""
    from stabcli.commands.common import Renderings
    from stabcli.reports import sweep_render

    text = schema.dumps(report)
    renderings = Renderings(
        text,
        lambda _: sweep_render.render_markdown(report),
        lambda: sweep_render.plot_figures(report),
        page=lambda figures, _: sweep_render.render_html(report, figures, text),
    )
    return files.write(report_plan, text, renderings=renderings, on_warning=on_warning)


def run_sweep(
    corpus_path: str | Path,
    out: str | Path,
    config: TrainConfig,
    options: SweepOptions,
    *,
    audit: AuditOptions | None = None,
    downstream: DownstreamOptions | None = None,
    corpus_options: CorpusOptions = CorpusOptions(),
    jobs: int | None = None,
    force: bool = False,
    checks: Sequence[str] = (),
    backend: Backend = local_backend,
    timeout: float | None = None,
    on_step: Callable[[str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> SweepReport:
    """Train every cell (grid × sizes) and swap-one pair into ``out``, audit each cell, and
    return the typed sweep report.

    Rerunning resumes: finished runs are kept (each cell is a run set). ``force`` replaces
    a sweep made from another corpus or seed, and cells made with another configuration.
    """
    step = on_step or (lambda _: None)
    root = Path(out)
    cells = plan.cells(options.grid, list(options.sizes), config)  # every configuration checked before work
    validate_checks(checks, options, labels=downstream is not None)
    if config.script is not None and "{corpus}" not in config.script:
        raise UsageError("--script: a sweep trains on samples of CORPUS; the template needs {corpus}")
    if config.vary != "seed":
        raise UsageError("--vary: a sweep varies the seed only (the data sizes vary the data)")
    corpus = read_corpus(corpus_path, config.model, corpus_options)
    require_trainable(corpus_path, corpus, config)
    if downstream is not None:  # a bad label file fails now, not after every cell is trained
        keys = set(corpus.tags) if corpus.tags is not None else {t for s in corpus.sequences for t in s}
        read_label_sets(downstream.labels, keys, downstream.encoding)
    n = len(corpus.sequences)
    entry = corpus_entry(corpus_path, corpus, corpus_options)  # what pretrain's manifest records
    identity = {
        "schema_version": SCHEMA_VERSION,
        "corpus_sha256": entry["sha256"],
        "corpus_reading": corpus_reading(entry),  # what pretrain's resume compares: --tokenize, columns, encoding
        "model": config.model if config.script is None else "script",
        "seed": options.seed,
    }
    order = plan.nested_order(n, options.seed)
    plan.check_samples(corpus.sequences, order, cells, script=config.script is not None)
    train = partial(train_one, jobs=jobs, force=force, tagged=corpus.tags is not None, backend=backend, timeout=timeout)
    swap_sets: dict[float, tuple[Path, list[Path]]] = {}
    with SweepDir(root, identity, force) as directory:
        prepared = prepared_lines(corpus)
        trained = train_cells(directory, prepared, order, cells, options.sizes, options.runs, options.seed, train, step)
        if options.swap_one:
            swap_sets = train_swap_one(
                directory, prepared, order, options.sizes, options.swap_one, options.seed, config, train, step
            )
    audits: dict[str, AuditReport] = {}
    cell_downstream = replace(downstream, variants=["h"]) if downstream is not None else None
    for i, cell in enumerate(cells, 1):
        step(f"auditing cell {i}/{len(cells)}: {cell.name}")
        runs = load_runs([root / CELLS / cell.name], on_warning=None)
        audits[cell.name] = build_report(
            runs, audit or AuditOptions(), downstream=cell_downstream, on_warning=on_warning
        )
    sizes_m = {size: int(plan.sample_indices(order, size).size) for size in options.sizes}
    report = _report(corpus_path, root, config, options, cells, audits, trained, sizes_m, corpus, swap_sets, step)
    results = schema.evaluate_checks(report, checks, SweepReport)
    return replace(report, checks=results, passed=all(c.passed for c in results))


def validate_checks(expressions: Sequence[str], options: SweepOptions, labels: bool) -> None:
    """Every ``--check`` path resolved against the sweep report's types, and ``--target``
    against what the sweep measures, before any work: a section or curve this sweep cannot
    produce is a UsageError, not a check that fails after training."""
    if options.target is not None and parse_target(options.target)[0] == "churn" and not labels:
        raise UsageError(f"--target {quote(options.target)}: churn is measured with --labels FILE")

    def needs(path: str) -> str | None:
        parts = path.split(".")
        if parts[0] == "pareto" and not labels:
            return "the Pareto front needs --labels FILE"
        if parts[0] == "target" and options.target is None:
            return "needs --target"
        if parts[0] == "data_size" and len(options.sizes) < 2:
            return "the data-size curves need at least two --sizes"
        if parts[0] == "data_size" and parts[1:2] == ["churn"] and not labels:
            return "the churn curve needs --labels FILE"
        if parts[0] == "swap_one" and not options.swap_one:
            return "needs --swap-one N"
        return None

    schema.validate_checks(SweepReport, expressions, needs)


# ---------------------------------------------------------------- the report


def _value(cell: SweepCell, name: str) -> float | None:
    attr, flip = INSTABILITY[name]
    value = getattr(cell, attr)
    if value is None or not math.isfinite(value):
        return None
    return 1.0 - value if flip else float(value)


def _cell(cell: plan.Cell, report: AuditReport, trained: Trained, sequences: int, root: Path) -> SweepCell:
    rep = report.representation
    ds = report.downstream
    metric = mean = std = churn = None
    if ds is not None and "h" in ds.variants:
        variant = ds.variants["h"]
        metric = "accuracy" if ds.task == "classification" else "r2"
        mean, std = variant.metric(f"{metric}_mean"), variant.metric(f"{metric}_std")
        churn = variant.churn
    return SweepCell(
        size=cell.size,
        sequences=sequences,
        values=cell.values,
        run_set=str(root / CELLS / cell.name),
        runs=report.input.runs,
        keys=report.input.keys,
        training_seconds=trained.seconds,
        noise_share=rep.noise_share,
        aligned_noise_share=rep.aligned_noise_share,
        inner_product_noise_share=rep.inner_product_noise_share,
        knn_overlap=rep.knn_overlap,
        cka=rep.cka,
        cka_debiased=rep.cka_debiased.mean if rep.cka_debiased else None,
        eis=rep.eis.mean if rep.eis else None,
        eis_std=rep.eis.std if rep.eis else None,
        downstream_metric=metric,
        downstream_mean=mean,
        downstream_std=std,
        churn=churn,
        by_frequency=schema.to_json(getattr(rep, "by_frequency", None)),
    )


def size_curve(points: list[tuple[float, int, list[float | None]]]) -> tuple[PowerLaw, list[str]]:
    """Per size (share, m, values): median and max, the power-law fits to both, and the
    warnings (a curve that rises with size; a fit that could not be made)."""
    rows = []
    for size, m_count, values in points:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        rows.append(
            SizePoint(
                size=size,
                sequences=m_count,
                median=float(np.median(finite)) if finite else None,
                max=float(np.max(finite)) if finite else None,
                values=values,
            )
        )
    ms = [float(r.sequences) for r in rows if r.median is not None]
    medians = [r.median for r in rows if r.median is not None]
    maxima = [r.max for r in rows if r.max is not None]
    fit = curves.fit_power_law(ms, medians)
    fit_max = curves.fit_power_law(ms, maxima)
    rising = curves.rises(ms, medians)
    warnings = [
        f"rises from {int(lo):,} to {int(hi):,} sequences (median {_at(rows, lo):.4g} → {_at(rows, hi):.4g}): "
        "not monotone; more data did not make it more stable there"
        for lo, hi in rising
    ]
    if fit is None and len(rows) > 1:
        warnings.append("no power-law fit: fewer than two sizes with a positive median")
    law = PowerLaw(
        a=fit.a if fit else None,
        b=fit.b if fit else None,
        r2=fit.r2 if fit else None,
        max_a=fit_max.a if fit_max else None,
        max_b=fit_max.b if fit_max else None,
        max_r2=fit_max.r2 if fit_max else None,
        monotone=not rising,
        points=rows,
    )
    return law, warnings


def _at(rows: list[SizePoint], m_count: float) -> float:
    return next(r.median for r in rows if r.sequences == m_count and r.median is not None)


def target_size(name: str, value: float, law: PowerLaw | None, corpus_sequences: int, largest: int) -> Target:
    """The m the median fit reaches the target at, stated as an extrapolation beyond ``largest``."""
    curve = TARGETS[name]
    instability = 1.0 - value if curve != name else value
    sequences = None
    if law is not None and law.a is not None and law.b is not None and law.b < 0:
        sequences = curves.PowerLawFit(law.a, law.b, law.r2, 0).size_for(instability)
    if sequences is None:
        note = f"{name} = {value:g} cannot be read off the fit" + (
            f" (b = {law.b:.3g}: the instability does not fall with data)" if law and law.b is not None else ""
        )
        return Target(name, value, instability, None, None, False, note)
    beyond = sequences > largest
    share = sequences / corpus_sequences
    note = (
        f"{name} = {value:g} at about {sequences:,.0f} sequences ({share:.3g}× this corpus) by the fit "
        f"{curve} = {law.a:.4g}·m^{law.b:.3g}"  # type: ignore[union-attr]
        + (
            f"; an extrapolation beyond the largest size trained ({largest:,} sequences), not a measurement"
            if beyond
            else f"; within the sizes trained (up to {largest:,} sequences)"
        )
    )
    return Target(name, value, instability, sequences, share, beyond, note)


def _report(
    corpus_path: str | Path,
    root: Path,
    config: TrainConfig,
    options: SweepOptions,
    cells: list[plan.Cell],
    audits: dict[str, AuditReport],
    trained: dict[str, Trained],
    sizes_m: dict[float, int],
    corpus: Corpus,
    swap_sets: dict[float, tuple[Path, list[Path]]],
    step: Callable[[str], None],
) -> SweepReport:
    n = corpus.n_sequences
    rows = {c.name: _cell(c, audits[c.name], trained[c.name], sizes_m[c.size], root) for c in cells}
    warnings: list[str] = []
    pareto = None
    names = list(rows)
    if any(r.downstream_mean is not None for r in rows.values()):
        flip = STABILITY[options.stability]
        stab = [_flipped(getattr(rows[k], options.stability), flip) for k in names]
        quality = [rows[k].downstream_mean for k in names]
        front = [names[i] for i in curves.pareto_front(stab, quality)]
        front.sort(key=lambda k: -(_flipped(getattr(rows[k], options.stability), flip) or 0.0))
        rows = {k: replace(r, pareto=k in front) for k, r in rows.items()}
        metric = next(r.downstream_metric for r in rows.values() if r.downstream_metric)
        pareto = Pareto(
            stability=options.stability + (" (lower is more stable)" if flip else ""),
            quality=f"{metric}_mean",
            front=front,
        )
    data_size: dict[str, PowerLaw] = {}
    if len(options.sizes) > 1:
        for measure in INSTABILITY:
            points = [
                (size, sizes_m[size], [_value(rows[c.name], measure) for c in cells if c.size == size])
                for size in options.sizes
            ]
            if all(v is None for _, _, values in points for v in values):
                continue  # churn without --labels, EIS on older reports
            law, notes = size_curve(points)
            data_size[measure] = law
            warnings += [f"{measure}: {note}" for note in notes]
    swap_one = None
    if options.swap_one:
        step("swap-one distances")
        points = [
            (size, sizes_m[size], [swap_distance(base, pair) for pair in pairs])
            for size, (base, pairs) in swap_sets.items()
        ]
        law, notes = size_curve(points)
        swap_one = SwapOne(pairs=options.swap_one, seed=options.seed, curve=law)
        warnings += [f"swap-one: {note}" for note in notes]
    target = None
    if options.target is not None:
        name, value = parse_target(options.target)
        target = target_size(name, value, data_size.get(TARGETS[name]), n, max(sizes_m.values()))
        if len(options.sizes) < 2:
            warnings.append("--target needs at least two --sizes to fit a curve")
    return SweepReport(
        stabcli_version=__version__,
        corpus=str(corpus_path),
        corpus_sequences=n,
        corpus_read=corpus.describe(),
        corpus_columns=dict(corpus.columns) or None,
        out=str(root),
        model=config.model if config.script is None else "script",
        grid=options.grid,
        sizes=list(options.sizes),
        runs=options.runs,
        seed=options.seed,
        cells=rows,
        pareto=pareto,
        data_size=data_size,
        swap_one=swap_one,
        target=target,
        warnings=warnings,
    )


def _flipped(value: float | None, flip: bool) -> float | None:
    if value is None:
        return None
    return -value if flip else value


def swap_distance(base: Path, pair: Path) -> float:
    """Mean over shared keys of ``1 − cos(h_S(k), h_S'(k) Q)`` after orthogonal Procrustes of
    the swapped run onto the base run (one run each): the per-key change one swapped
    sequence causes."""
    a, b = RunSet.open(base).load(0), RunSet.open(pair).load(0)
    match = match_keys([a.keys, b.keys])
    if len(match.keys) < 2:
        raise InputError(f"{pair}: shares fewer than 2 keys with {base}")
    runs = [matched_vectors(emb, rows, match.keys, np.float64) for emb, rows in zip((a, b), match.rows, strict=True)]
    return float(m.per_key_displacement(runs, m.gram_blocks(runs)).mean())
