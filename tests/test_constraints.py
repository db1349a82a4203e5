"""The constraint tables (stabcli/constraints.py): every declared constraint, walked with the
values just outside it, gives one message through the options type, through the Python API
and through every command that has the flag."""

import math
from typing import ClassVar

import pytest
from typer.testing import CliRunner

import stabcli
from stabcli import constraints as c
from stabcli.cli.app import app
from stabcli.cli.options import flag_for
from stabcli.commands.audit import AuditOptions
from stabcli.commands.drift import DriftOptions
from stabcli.commands.featurize import FeaturizeOptions
from stabcli.constraints import Constraint, shown, validate_params
from stabcli.errors import OptionError
from stabcli.measure.downstream import DownstreamOptions
from stabcli.measure.downstream.nextitem import NextItemOptions
from stabcli.training.pretrain import TrainConfig

runner = CliRunner()

# each options type: its table, how to build it with one option, the API call, the command lines
# (the bad option is appended; the paths need not exist: options are checked before any input is read)
TYPES = {
    "AuditOptions": (
        AuditOptions,
        lambda **kw: AuditOptions(**kw),
        lambda t, **kw: stabcli.audit([t / "a.npy", t / "b.npy"], **kw),
        [["audit", "{t}/a.npy", "{t}/b.npy"]],
    ),
    "DriftOptions": (
        DriftOptions,
        lambda **kw: DriftOptions(**kw),
        lambda t, **kw: stabcli.drift(t / "a.npy", t / "b.npy", **kw),
        [["drift", "{t}/a.npy", "{t}/b.npy"]],
    ),
    "DownstreamOptions": (
        DownstreamOptions,
        lambda **kw: DownstreamOptions("labels.tsv", **kw),
        lambda t, **kw: stabcli.audit([t / "a.npy", t / "b.npy"], labels=t / "l.tsv", **kw),
        [
            ["audit", "{t}/a.npy", "{t}/b.npy", "--labels", "{t}/l.tsv"],
            ["drift", "{t}/a.npy", "{t}/b.npy", "--labels", "{t}/l.tsv"],
        ],
    ),
    "FeaturizeOptions": (
        FeaturizeOptions,
        lambda **kw: FeaturizeOptions(**kw),
        lambda t, **kw: stabcli.featurize(t / "a.npy", t / "out.npy", **kw),
        [["featurize", "{t}/a.npy", "--out", "{t}/out.npy"]],
    ),
    "NextItemOptions": (
        NextItemOptions,
        lambda **kw: NextItemOptions("interactions.tsv", **kw),
        lambda t, **kw: stabcli.audit([t / "a.npy", t / "b.npy"], interactions=t / "i.tsv", **kw),
        [["audit", "{t}/a.npy", "{t}/b.npy", "--interactions", "{t}/i.tsv"]],
    ),
    "TrainConfig": (
        TrainConfig,
        lambda **kw: TrainConfig(**kw),
        lambda t, **kw: stabcli.pretrain(t / "corpus.txt", t / "runs", **kw),
        [["pretrain", "{t}/corpus.txt", "--out", "{t}/runs"]],
    ),
}
# options of a type that a command sets from another option, or does not have
NOT_A_FLAG = {("DownstreamOptions", "seed", "drift"), ("DownstreamOptions", "reference", "drift")}
NOT_A_FLAG |= {("DownstreamOptions", "jobs", "drift"), ("DownstreamOptions", "min_class_size", "drift")}
# the audit's --seed is AuditOptions' first (0 or more), then DownstreamOptions' (up to SEED_MAX)
API_ONLY = {("DownstreamOptions", "seed", "below")}
# NextItemOptions set from other options (audit's --seed, --reference) or not exposed (the
# rank-biased overlap's p, the block size): checked on the type only
API_ONLY |= {("NextItemOptions", "seed", "below")}
API_ONLY |= {
    ("NextItemOptions", name, label)
    for name in ("phi_seed", "rbo_p", "block_bytes")
    for label in ("below", "above", "nan")
}


def bad_values(constraint: Constraint) -> list[tuple[str, object]]:
    """Values just outside the declared range (named), and a non-finite one for floats."""
    values: list[tuple[str, object]] = []
    step = 1 if constraint.kind is int else 0.5
    if constraint.low is not None:
        low = constraint.kind(constraint.low)
        values.append(("below", low if constraint.open_low else low - step))
    if constraint.high is not None:
        high = constraint.kind(constraint.high)
        values.append(("above", high if constraint.open_high else high + step))
    if constraint.kind is float:
        values.append(("nan", math.nan))
    return values


CASES = [
    pytest.param(type_name, name, label, value, id=f"{type_name}.{name}={label}")
    for type_name, (cls, *_) in TYPES.items()
    for name, constraint in cls.parameter_constraints.items()
    for label, value in bad_values(constraint)
]


def test_every_options_type_declares_a_table_read_by_its_validator():
    for cls, *_ in TYPES.values():
        assert cls.parameter_constraints, cls
        assert all(name in cls.__dataclass_fields__ for name in cls.parameter_constraints), cls


@pytest.mark.parametrize("type_name, name, label, value", CASES)
def test_same_message_from_the_type_the_api_and_every_command(tmp_path, type_name, name, label, value):
    cls, build, api, commands = TYPES[type_name]
    with pytest.raises(OptionError) as direct:
        build(**{name: value})
    assert direct.value.param == name
    assert direct.value.problem == cls.parameter_constraints[name].problem(value)
    assert shown(value) in direct.value.problem
    if (type_name, name, label) in API_ONLY:
        return
    with pytest.raises(OptionError) as through_api:
        api(tmp_path, **{name: value})
    assert (through_api.value.param, through_api.value.problem) == (name, direct.value.problem)
    for argv in commands:
        if (type_name, name, argv[0]) in NOT_A_FLAG:
            continue
        args = [a.format(t=tmp_path) for a in argv] + [flag_for(name), repr(value) if label == "nan" else str(value)]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr == f"error: {flag_for(name)}: {direct.value.problem}\n", args


def test_a_shared_option_has_one_declaration():
    assert c.AUDIT_OPTIONS["knn_k"] is c.DRIFT_OPTIONS["knn_k"] is c.KNN_K
    assert c.AUDIT_OPTIONS["top"] is c.DRIFT_OPTIONS["top"]
    assert c.DRIFT_OPTIONS["reference"] is c.DOWNSTREAM_OPTIONS["reference"] is c.FEATURIZE_OPTIONS["reference"]


def test_help_shows_the_declared_range():
    for command, flag, text in [
        ("audit", "--knn-k", "[x>=1]"),
        ("drift", "--knn-k", "[x>=1]"),
        ("drift", "--alpha", "[0<x<1]"),
        ("audit", "--test-size", "[0<x<1]"),
        ("audit", "--eis-alpha", "[0<=x<=100]"),
        ("pretrain", "--dim", "[x>=1]"),
        ("featurize", "--sigma", "[x>0]"),
        ("audit", "--users", "[x>=0]"),
    ]:
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "300"})
        line = next(line for line in result.stdout.splitlines() if line.lstrip("│ ").startswith(f"{flag} "))
        assert text in line, (command, flag, line)


def test_messages_name_the_value_and_the_range():
    assert Constraint(int, low=1).problem(0) == "must be at least 1, got 0"
    assert Constraint(float, low=0, high=1, open_low=True, open_high=True).problem(2) == (
        "must be strictly between 0 and 1, got 2"
    )
    assert Constraint(float, low=0, high=1, open_low=True, open_high=True).problem(2.0) == (
        "must be strictly between 0 and 1, got 2"
    )
    assert Constraint(int, low=0).problem(1.5) == "expected an integer, got 1.5"
    assert Constraint(int, low=0).problem(True) == "expected an integer, got True"
    assert Constraint(int, low=1, optional=True).problem(None) is None
    assert Constraint(str, choices=("a", "b")).problem("c") == "'c' is not one of a, b"
    assert Constraint(float, low=0, high=100).describe() == "0<=x<=100"


def test_the_validator_reads_nothing_but_the_table():
    class Options:
        parameter_constraints: ClassVar[dict[str, Constraint]] = {"k": Constraint(int, low=2)}
        k = 1

    with pytest.raises(OptionError, match="k: must be at least 2, got 1"):
        validate_params(Options())
