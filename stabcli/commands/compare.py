"""``stabcli compare A B``: two audits side by side.

A and B are run sets (audited here, with the same options) or saved audit JSON reports
(``stabcli audit --json``). Every measure gets both values, the difference B − A and, where
the audit has one, each side's spread: min / median / max over run pairs
(``representation.by_pair``) for the pairwise measures, over runs (``*_by_run``) for the
downstream metrics. A difference exceeds a side's spread when ``|B − A|`` is larger than that
side's max − min. The comparison is a typed report like every other: JSON through
``schema.to_json``, ``--check`` paths such as ``compare.knn_overlap.delta`` validated against
the types before any work.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stabcli import __version__
from stabcli.errors import InputError, quote
from stabcli.reports import schema
from stabcli.reports.schema import Check, JsonReport, doc

# representation measures compared, in the order shown: (JSON name, label)
REPRESENTATION_MEASURES = (
    ("noise_share", "coordinate noise share"),
    ("aligned_noise_share", "aligned noise share"),
    ("inner_product_noise_share", "inner-product noise share"),
    ("knn_overlap", "k-NN overlap"),
    ("pip_loss", "PIP loss"),
    ("pip_loss_relative", "relative PIP loss"),
    ("cka", "linear CKA"),
    ("eigenspace_overlap", "eigenspace overlap"),
    ("semantic_displacement", "semantic displacement"),
    ("eis", "EIS"),
    ("weighted_eigenspace_overlap", "weighted eigenspace overlap"),
    ("cka_debiased", "debiased CKA"),
)
# downstream metrics compared for every variant both sides have: (JSON name, label)
DOWNSTREAM_METRICS = (
    ("accuracy_mean", "accuracy"),
    ("f1_macro_mean", "macro-F1"),
    ("r2_mean", "R²"),
    ("rmse_mean", "RMSE"),
    ("churn", "churn"),
    ("stale_drop", "stale drop"),
)


@dataclass(frozen=True)
class Spread:
    min: float | None = doc("smallest value")
    median: float | None = doc("median (null where the audit gives none)")
    max: float | None = doc("largest value")


@dataclass(frozen=True)
class Delta:
    label: str = doc("what the measure is, in words")
    a: float | None = doc("A's value (null: A has none)")
    b: float | None = doc("B's value (null: B has none)")
    delta: float | None = doc("b − a (null when either is)")
    spread_over: str | None = doc(
        "what the spreads range over: `run pairs` (representation.by_pair), `runs` (downstream *_by_run), "
        "or null when the audits have no spread for this measure"
    )
    spread_a: Spread | None = doc("A's min / median / max (null: not in A's report)")
    spread_b: Spread | None = doc("B's min / median / max (null: not in B's report)")
    exceeds_a: bool | None = doc("|delta| > A's max − min (null without A's spread or a delta)")
    exceeds_b: bool | None = doc("|delta| > B's max − min (null without B's spread or a delta)")


@dataclass(frozen=True)
class Side:
    source: str = doc("the run set or JSON report as given")
    kind: str = doc("`run set` (audited by compare) or `json` (a saved audit report)")
    stabcli_version: str | None = doc("version that wrote the audit")
    runs: int = doc("R, runs compared")
    keys: int = doc("n, keys common to every run")
    dim: int = doc("d, dimensions")
    featurized: dict[str, Any] | None = doc("the featurize transform of a featurized run set, or null")


@dataclass(frozen=True)
class CompareReport(JsonReport):
    stabcli_version: str = doc("version that wrote the comparison")
    a: Side = doc("the first audit")
    b: Side = doc("the second audit")
    compare: dict[str, Delta] = doc(
        "one entry per measure: representation measures by their name (`knn_overlap`, …), downstream metrics as "
        "`downstream.VARIANT.METRIC` for the variants both audits have"
    )
    spreads: bool = doc("whether both audits carry run-pair spreads (audits before stabcli 0.3 do not)")
    checks: list[Check] = doc("the `--check` results, in the order given", default_factory=list)
    passed: bool = doc("true when every check passed (true without checks)", default=True)


def load_sides(
    paths: Sequence[str | Path], audit: Callable[[Path], dict[str, Any]]
) -> list[tuple[Side, dict[str, Any]]]:
    """Every side (``load_side``), the saved reports read and the run sets opened before any
    run set is audited: a bad side fails before minutes of work on the other."""
    from stabcli.runset.layout import is_runset

    for path in map(Path, paths):
        if path.is_dir() and not is_runset(path):
            raise InputError(f"{path}: a directory but not a run set (no stabcli.json)")
    saved = {i: load_side(path, audit) for i, path in enumerate(paths) if not Path(path).is_dir()}
    return [saved[i] if i in saved else load_side(path, audit) for i, path in enumerate(paths)]


def load_side(path: str | Path, audit: Callable[[Path], dict[str, Any]]) -> tuple[Side, dict[str, Any]]:
    """One side: a run-set directory (``audit(path)`` returns its audit JSON) or a saved audit
    JSON report. InputError naming the file for anything else."""
    path = Path(path)
    if path.is_dir():
        data, kind = audit(path), "run set"
    else:
        if not path.exists():
            raise InputError(f"{path}: no such run set or JSON report")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a JSON audit report ({exc})") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        kind = "json"
    return side_of(path, data, kind), data


def side_of(source: str | Path, data: Any, kind: str) -> Side:
    """The side of an audit report's JSON ``data`` read from ``source``; InputError naming
    ``source`` when ``data`` is not an audit report."""
    problem = _audit_problem(data)
    if problem:
        raise InputError(f"{source}: not a stabcli audit report ({problem})")
    inp = data["input"]
    return Side(
        source=str(source),
        kind=kind,
        stabcli_version=data.get("stabcli_version"),
        runs=int(inp["runs"]),
        keys=int(inp["keys"]),
        dim=int(inp["dim"]),
        featurized=inp.get("featurized"),
    )


def _audit_problem(data: Any) -> str | None:
    """What makes ``data`` not an audit report's JSON, as far as compare reads it (a measure
    an older audit lacks is allowed; one of the wrong type is not)."""
    if not isinstance(data, dict):
        return "the JSON is not an object"
    for section, keys in (("input", ("runs", "keys", "dim")), ("representation", ("noise_share",))):
        block = data.get(section)
        if not isinstance(block, dict):
            return f"no {section!r} section"
        for key in keys:
            value = block.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{section}.{key} is not a number"
            if section == "input" and not (isinstance(value, int) and value >= 1):
                return f"input.{key} is {value}, not a positive count"
    return _measures_problem(data["representation"]) or _downstream_problem(data.get("downstream"))


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _block_problem(block: Any, path: str, keys: Sequence[str]) -> str | None:
    """A spread block (min/median/max, or mean/std/min/max) or null."""
    if block is None:
        return None
    if not isinstance(block, dict):
        return f"{path} is not an object"
    bad = next((k for k in keys if not _is_number(block.get(k))), None)
    return f"{path}.{bad} is not a number" if bad else None


def _measures_problem(rep: dict[str, Any]) -> str | None:
    pairs = rep.get("by_pair")
    if pairs is not None and not isinstance(pairs, dict):
        return "representation.by_pair is not an object"
    for name, _ in REPRESENTATION_MEASURES:
        value = rep.get(name)
        path = f"representation.{name}"
        problem = (
            _block_problem(value, path, ("mean", "min", "median", "max"))
            if isinstance(value, dict)
            else (None if _is_number(value) else f"{path} is not a number")
        )
        problem = problem or _block_problem((pairs or {}).get(name), f"representation.by_pair.{name}", _SPREAD)
        if problem:
            return problem
    return None


_SPREAD = ("min", "median", "max")


def _downstream_problem(ds: Any) -> str | None:
    if ds is None:
        return None
    variants = ds.get("variants") if isinstance(ds, dict) else None
    if not isinstance(variants, dict):
        return "downstream.variants is not an object"
    for variant, block in variants.items():
        path = f"downstream.variants.{quote(str(variant))}"
        if not isinstance(block, dict):
            return f"{path} is not an object"
        for metric, _ in DOWNSTREAM_METRICS:
            by_run = block.get(metric.removesuffix("_mean") + "_by_run")
            if not _is_number(block.get(metric)):
                return f"{path}.{metric} is not a number"
            if by_run is not None and not (isinstance(by_run, list) and all(map(_is_number, by_run))):
                return f"{path}.{metric.removesuffix('_mean')}_by_run is not a list of numbers"
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _spread(block: Any) -> Spread | None:
    if not isinstance(block, dict):
        return None
    values = [_number(block.get(k)) for k in ("min", "median", "max")]
    if values[0] is None or values[2] is None:
        return None
    return Spread(*values)


def _measure(rep: dict[str, Any], pairs: Any, name: str) -> tuple[Any, Spread | None]:
    """A representation measure's value and its run-pair spread: a block with its own
    mean, min and max over run pairs (EIS, debiased CKA), or a number with its spread in
    ``representation.by_pair``."""
    value = rep.get(name)
    if isinstance(value, dict):
        return value.get("mean"), _spread(value)
    return value, _spread(pairs.get(name)) if isinstance(pairs, dict) else None


def _run_spread(values: Any) -> Spread | None:
    numbers = [v for v in (values or []) if _number(v) is not None]
    if len(numbers) < 2:
        return None
    ordered = sorted(numbers)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return Spread(ordered[0], median, ordered[-1])


def _exceeds(delta: float | None, spread: Spread | None) -> bool | None:
    if delta is None or spread is None or spread.min is None or spread.max is None:
        return None
    return abs(delta) > spread.max - spread.min


def _delta(label: str, a: Any, b: Any, over: str, spread_a: Spread | None, spread_b: Spread | None) -> Delta:
    va, vb = _number(a), _number(b)
    delta = None if va is None or vb is None else vb - va
    return Delta(
        label=label,
        a=va,
        b=vb,
        delta=delta,
        spread_over=over if spread_a is not None or spread_b is not None else None,
        spread_a=spread_a,
        spread_b=spread_b,
        exceeds_a=_exceeds(delta, spread_a),
        exceeds_b=_exceeds(delta, spread_b),
    )


def compare_audits(a: tuple[Side, dict[str, Any]], b: tuple[Side, dict[str, Any]]) -> CompareReport:
    """Every measure of two audit reports (their JSON) side by side."""
    (side_a, data_a), (side_b, data_b) = a, b
    rep_a, rep_b = data_a["representation"], data_b["representation"]
    pairs_a, pairs_b = rep_a.get("by_pair"), rep_b.get("by_pair")
    entries: dict[str, Delta] = {}
    for name, label in REPRESENTATION_MEASURES:
        if rep_a.get(name) is None and rep_b.get(name) is None:
            continue
        (value_a, spread_a), (value_b, spread_b) = _measure(rep_a, pairs_a, name), _measure(rep_b, pairs_b, name)
        entries[name] = _delta(label, value_a, value_b, "run pairs", spread_a, spread_b)
    ds_a, ds_b = data_a.get("downstream"), data_b.get("downstream")
    if isinstance(ds_a, dict) and isinstance(ds_b, dict):
        variants_a, variants_b = ds_a.get("variants") or {}, ds_b.get("variants") or {}
        for variant in [v for v in variants_a if v in variants_b]:
            va, vb = variants_a[variant], variants_b[variant]
            for metric, label in DOWNSTREAM_METRICS:
                if metric not in va or metric not in vb:
                    continue
                by_run = metric.removesuffix("_mean") + "_by_run"
                spread_a, spread_b = _run_spread(va.get(by_run)), _run_spread(vb.get(by_run))
                entries[f"downstream.{variant}.{metric}"] = _delta(
                    f"{variant}: {label}", va[metric], vb[metric], "runs", spread_a, spread_b
                )
    return CompareReport(
        stabcli_version=__version__,
        a=side_a,
        b=side_b,
        compare=entries,
        spreads=isinstance(pairs_a, dict) and isinstance(pairs_b, dict),
    )


def validate_checks(expressions: Sequence[str]) -> list[tuple[str, str, float]]:
    """Parse every ``--check`` and resolve its path against ``CompareReport`` before any work."""
    return schema.validate_checks(CompareReport, expressions)


def evaluate_checks(report: CompareReport, expressions: Sequence[str]) -> CompareReport:
    """The report with its ``checks`` and ``passed`` filled in; a null value fails its check."""
    results = schema.evaluate_checks(report, expressions, CompareReport)
    return replace(report, checks=results, passed=all(c.passed for c in results))


def compare(a: str | Path, b: str | Path, **options: Any) -> CompareReport:
    """Two audits side by side (``stabcli compare``).

    Parameters
    ----------
    a, b : path
        Run sets (audited here with the same options) or saved audit JSON reports.
    **options
        The audit options for run sets (``pairs``, ``knn_k``, ``knn_queries``, ``seed``,
        ``normalize``), ``checks`` (``["compare.knn_overlap.delta>=0"]``), files to write
        (``json``, ``markdown``, ``html``, with ``force``), ``mlflow``/``mlflow_experiment``
        and the callbacks ``on_warning``, ``on_figure`` (files written), ``on_logged``.

    Returns
    -------
    CompareReport
        ``report.passed`` is false when a check failed.
    """
    from stabcli.commands.audit import AuditOptions, build_report, load_runs
    from stabcli.commands.common import Callbacks, Renderings, ReportFiles, params_given, publish, refuse_unknown, take
    from stabcli.reports import compare_render

    a, b = Path(a), Path(b)
    options = dict(options)
    params = {"a": str(a), "b": str(b), **params_given(options)}
    if "on_step" in options:  # compare reports no progress: refused as any unknown keyword
        refuse_unknown("compare", {"on_step": options["on_step"]})
    callbacks = Callbacks.take(options)
    checks = list(options.pop("checks", ()))
    files = ReportFiles.take(options)
    settings = AuditOptions(**take(AuditOptions, options))
    refuse_unknown("compare", options)
    validate_checks(checks)  # a typo fails before any input is read
    plan = files.plan([a, b])
    tracker = files.open_tracker(plan)

    def audit(path: Path) -> dict[str, Any]:
        return schema.to_json(build_report(load_runs([path], on_warning=callbacks.on_warning), settings))

    report = evaluate_checks(compare_audits(*load_sides([a, b], audit)), checks)
    text = schema.dumps(report)
    renderings = Renderings(
        text, lambda _: compare_render.render_markdown(report), page=lambda *_: compare_render.render_html(report, text)
    )
    publish(files, plan, renderings, callbacks, (tracker, "compare", params))
    return report
