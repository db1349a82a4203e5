"""The typed report's one conversion to JSON, its --check path resolution and its docs table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stabcli.errors import UsageError
from stabcli.reports.audit_report import AuditReport, DownstreamSection
from stabcli.reports.schema import check_path, doc, dumps, key_rows, markdown_table, to_json

DOCS = Path(__file__).resolve().parents[1] / "docs" / "json.md"


DRIFT_HEADING = "\n## stabcli drift\n"


def _docs_table(section: str) -> str:
    return section[section.index("| key | type | meaning |") :].rstrip("\n") + "\n"


SWEEP_HEADING = "\n## stabcli sweep\n"


@pytest.mark.parametrize("command", ["audit", "drift", "sweep"])
def test_docs_table_lists_exactly_the_report_types_keys(command):
    from stabcli.reports.drift_report import DriftReport
    from stabcli.reports.sweep_report import SweepReport

    rest, sweep_text = DOCS.read_text(encoding="utf-8").split(SWEEP_HEADING)
    audit_text, drift_text = rest.split(DRIFT_HEADING)
    report_type = {"audit": AuditReport, "drift": DriftReport, "sweep": SweepReport}[command]
    table = _docs_table({"audit": audit_text, "drift": drift_text, "sweep": sweep_text}[command])
    assert table == markdown_table(report_type), "docs/json.md is stale: regenerate it (command in the file)"
    documented = {line.split("`")[1] for line in table.splitlines()[2:]}
    assert documented == {name for name, _, _ in key_rows(report_type)}
    assert all(meaning for _, _, meaning in key_rows(report_type))


@dataclass(frozen=True)
class _Inner:
    x: float = doc("a number")
    tag: str = doc("internal", json=False)
    only_a: int | None = doc("present when tag is a", default=None, when=lambda s: s.tag == "a")


@dataclass(frozen=True)
class _Outer:
    inner: _Inner = doc("inner")
    items: list[_Inner] = doc("items")
    by_name: dict[str, _Inner] = doc("by name")
    free: Any = doc("anything", default=None)


def test_to_json_nulls_non_finite_numbers_and_honours_field_rules():
    value = _Outer(
        inner=_Inner(float("nan"), "a", 3),
        items=[_Inner(np.float32(np.inf), "b")],
        by_name={"p.q": _Inner(np.float64(-np.inf), "a")},
        free={"k": [np.int64(4), math.nan, Path("x")]},
    )
    assert to_json(value) == {
        "inner": {"x": None, "only_a": 3},
        "items": [{"x": None}],
        "by_name": {"p.q": {"x": None, "only_a": None}},
        "free": {"k": [4, None, "x"]},
    }
    text = dumps(value)

    def refuse(constant):
        raise AssertionError(constant)

    json.loads(text, parse_constant=refuse)
    assert text.endswith("}\n")


@pytest.mark.parametrize(
    "path",
    ["inner.x", "items.0.x", "items.12.only_a", "by_name.p.q.x", "by_name.a.b.c.x", "free", "free.anything.at.all"],
)
def test_check_path_accepts_numbers_of_the_schema(path):
    check_path(_Outer, path)


@pytest.mark.parametrize(
    "path, message",
    [
        ("inner", "inner is not a number (it is object)"),
        ("inner.y", "no 'y' in inner (has: only_a, x)"),
        ("inner.tag", "no 'tag' in inner"),  # json=False fields are not part of the schema
        ("items.x", "items is a list: expected an index, found 'x'"),
        ("by_name.a", "by_name.a is not a number (it is object)"),
        ("by_name.a.y", "no 'y' in by_name.a"),
        ("inner.x.y", "inner.x is number, it has no 'y'"),
    ],
)
def test_check_path_names_the_first_bad_part(path, message):
    with pytest.raises(UsageError, match="^--check: " + message.replace("(", r"\(").replace(")", r"\)")):
        check_path(_Outer, path)


def test_audit_report_paths():
    for path in [
        "representation.knn_overlap",
        "training.by_epoch.3.variance_quantiles.median",
        "downstream.variants.phi:64@0.5.churn",
        "downstream.variants.aligned+phi:32.accuracy_mean",
        "downstream.dropped_classes.Fantasy",
        "checks.0.value",
        "input.featurized.dim",
        "representation.least_stable.0.relative_instability",
    ]:
        check_path(AuditReport, path)
    with pytest.raises(UsageError, match="no 'key_stats' in the report"):
        check_path(AuditReport, "key_stats")


def test_downstream_section_wraps_the_downstream_dict_and_keeps_its_json():
    raw = {
        "labels": "l.tsv",
        "task": "regression",
        "model": "ridge",
        "classes": None,
        "train": 8,
        "test": 2,
        "skipped_keys": 0,
        "min_class_size": 5,
        "feature_scale": 1.0,
        "label_scale": 1.0,
        "test_size": 0.2,
        "split_seed": 0,
        "reference": "run-000",
        "phi_seed": 0,
        "majority_accuracy": None,
        "not_converged": 0,
        "variants": {
            "h": {
                "dim": 4,
                "source": "h",
                "sigma": None,
                "r2_mean": 0.5,
                "r2_std": None,
                "r2_by_run": [0.5],
                "rmse_mean": 1.0,
                "rmse_std": None,
                "rmse_by_run": [1.0],
                "churn": None,
                "stale_r2_mean": None,
                "stale_drop": None,
            }
        },
        "recommendation": {"variant": None, "reason": "nothing to compare", "prefer": "stability"},
    }
    section = DownstreamSection.from_dict(raw)
    variants = {"h": {**raw["variants"]["h"], "flips": None}}
    defaults = {"dropped_classes": {}, "model_params": {}, "labels_per_key": None}
    assert to_json(section) == {**raw, **defaults, "variants": variants}
    with pytest.raises(AssertionError, match=r"\['surprise'\] are not declared"):
        DownstreamSection.from_dict({**raw, "surprise": 1})


def test_scale_dependent_values_are_typed_and_documented_nullable():
    # audit writes null where a scale-dependent value leaves float64's range (vectors near 1e300);
    # the types (and so docs/json.md and --check) must admit it
    kinds = {name: kind for name, kind, _ in key_rows(AuditReport)}
    assert kinds["representation.variance_per_dim"] == "list of (number or null)"
    for key in (
        "representation.pip_loss",
        "representation.least_stable.N.aligned_variance",
        "representation.least_stable.N.mean_squared_norm",
    ):
        assert kinds[key] == "number or null", key
    # shares and overlaps are scale-free: always numbers
    for key in ("representation.noise_share", "representation.least_stable.N.relative_instability"):
        assert kinds[key] == "number", key
