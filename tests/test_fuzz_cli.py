"""Generated option values for pretrain and demo (issue 13 §3): numbers of every magnitude
and sign, odd strings and unicode end in exit 0, 1 or 2, never in a traceback or a Python
warning. audit, featurize, drift and the corpus options have their own in tests/test_bad_input_*.py."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stabcli.commands.demo
from conftest import make_sessions, runner
from stabcli.cli.app import app
from stabcli.errors import UsageError

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# counts a valid value of which stays cheap (a run of 1 epoch on a tiny corpus), or so large that it is refused
CHEAP_OR_REFUSED = st.one_of(st.integers(-10, 4), st.sampled_from([2**31, 2**40, -(2**31), 2**70, -(2**70), 10**30]))
ANY_INT = st.one_of(CHEAP_OR_REFUSED, st.integers(-(2**70), 2**70))
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e-300, 1e-8, 0.5, 3.0, 1e30, 1e300])
)
ODD_TEXT = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["", " ", "1e3", "0x10", "½", "𝟘", "٣", "-", "--runs", "nan", "-1", "1_000", "３"]),
)


def numbers(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(values.map(str), FLOATS.map(repr), ODD_TEXT)


def choices(*valid: str) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(valid), st.sampled_from([v.upper() for v in valid]), ODD_TEXT)


PRETRAIN_OPTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("--runs"), numbers(st.integers(-10, 2) | st.sampled_from([10**7, 2**40, -(2**70)]))),
        st.tuples(st.just("--dim"), numbers(CHEAP_OR_REFUSED)),
        st.tuples(st.just("--window"), numbers(CHEAP_OR_REFUSED)),
        st.tuples(st.just("--negative"), numbers(CHEAP_OR_REFUSED)),
        st.tuples(st.just("--epochs"), numbers(CHEAP_OR_REFUSED)),
        st.tuples(st.just("--min-count"), numbers(ANY_INT)),
        st.tuples(st.just("--seed"), numbers(ANY_INT)),
        st.tuples(st.just("--jobs"), numbers(ANY_INT)),
        st.tuples(st.just("--timeout"), numbers(ANY_INT)),
        st.tuples(st.just("--min-rating"), numbers(ANY_INT)),
        st.tuples(st.just("--model"), choices("word2vec", "doc2vec")),
        st.tuples(st.just("--vary"), choices("seed", "shuffle", "bootstrap")),
        st.tuples(st.just("--corpus-format"), choices("auto", "lines", "tagged", "movielens", "interactions")),
        st.tuples(st.just("--format"), choices("table", "json")),
        st.tuples(
            st.just("--encoding"),
            st.one_of(st.sampled_from(["utf-8", "latin-1", "utf-16", "rot13", "base64"]), ODD_TEXT),
        ),
        st.tuples(st.just("--user-col"), st.one_of(st.sampled_from(["0", "1", "-1", "user", "99999999"]), ODD_TEXT)),
        st.tuples(
            st.just("--param"),
            st.one_of(
                st.sampled_from(
                    [
                        "alpha=0.5",
                        "alpha=1e999",
                        "sample=-1",
                        "ns_exponent=nan",
                        "hs=1",
                        "hs=2",
                        "x",
                        "=",
                        "alpha=",
                        "alpha=½",
                        "seed=3",
                        "workers=4",
                        "sorted_vocab=0",
                        "max_vocab_size=1e30",
                    ]
                ),
                st.tuples(ODD_TEXT, ODD_TEXT).map("=".join),
            ),
        ),
        st.tuples(
            st.just("--scheduler"),
            st.one_of(st.sampled_from(["local:0", "local:-1", "local:x", "local:", "tcp://"]), ODD_TEXT),
        ),
    ),
    max_size=3,
)

_outs = itertools.count()


@FUZZ
@given(options=PRETRAIN_OPTIONS)
def test_pretrain_any_option_values_exit_0_1_or_2_without_a_traceback(tmp_path, options):
    corpus = tmp_path / "sessions.txt"
    if not corpus.exists():
        corpus.write_text(make_sessions(n_sequences=20, n_items=12), encoding="utf-8")
    argv = [
        "pretrain",
        str(corpus),
        "--out",
        str(tmp_path / f"r{next(_outs)}"),
        "--runs",
        "1",
        "--epochs",
        "1",
        "--dim",
        "4",
        *[x for pair in options for x in pair],
    ]
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output and "Warning" not in result.output, (argv, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines and all(line.startswith(("error:", "failed:")) for line in lines), (argv, result.stderr)


class _Stop(UsageError):
    """Raised in place of the demo's first training run: the options were accepted."""


@pytest.fixture
def demo_stops_before_training(monkeypatch):
    def stop(*args, **kwargs):
        raise _Stop("stopped before training")

    monkeypatch.setattr(stabcli.commands.demo, "pretrain", stop)


@FUZZ
@given(
    out=st.one_of(st.none(), st.sampled_from(["demo", ".", "a b", "ünïcödé", "x/y/z", "-", "--jobs"]), ODD_TEXT),
    jobs=st.one_of(st.none(), numbers(ANY_INT)),
)
def test_demo_any_option_values_exit_0_1_or_2_without_a_traceback(
    tmp_path, monkeypatch, demo_stops_before_training, out, jobs
):
    monkeypatch.chdir(tmp_path)
    argv = ["demo", *(["--out", out] if out is not None else []), *(["--jobs", jobs] if jobs is not None else [])]
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output and "Warning" not in result.output, (argv, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error:"), (argv, result.stderr)
