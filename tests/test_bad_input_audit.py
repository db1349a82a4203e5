"""Bad inputs to ``stabcli audit`` (options, --check paths, key-name files, checkpoints,
outputs): exit 2, one line naming the option or file, nothing written, inputs unchanged."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, invoke, make_runset, runner
from stabcli.cli.app import app
from stabcli.measure import metrics

N_KEYS, DIM = 30, 4
KEYS = [f"k{i}" for i in range(N_KEYS)]


def vectors(seed: int, n: int = N_KEYS, d: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


@pytest.fixture
def work(tmp_path):
    """(tmp_path, run set); the whole tmp_path is compared before and after."""
    return tmp_path, make_runset(tmp_path / "runs")


def bad(work, fragment, *args):
    root, runs = work
    before = files_state(root)
    result = invoke("audit", runs, "--knn-queries", "5", "--pairs", "50", "--knn-k", "3", *args)
    assert_bad_input(result, fragment, root, before)
    return result


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--seed", "-1"], "--seed: must be at least 0, got"),
        (["--seed", "-100000000000000000000000000000"], "--seed: must be at least 0, got"),
        (["--pairs", "0"], "--pairs: must be at least 1, got"),
        (["--pairs", "-5"], "--pairs: must be at least 1, got"),
        (["--knn-queries", "0"], "--knn-queries: must be at least 1, got"),
        (["--knn-queries", "-1"], "--knn-queries: must be at least 1, got"),
        (["--top", "-1"], "--top: must be at least 0, got"),
        (["--knn-k", "0"], "--knn-k: must be at least 1, got"),
        (["--knn-k", "-3"], "--knn-k: must be at least 1, got"),
        (["--knn-k", str(N_KEYS)], f"--knn-k: {N_KEYS} must be below the number of common keys ({N_KEYS})"),
        (["--knn-k", "1000000"], "--knn-k: 1000000 must be below the number of common keys"),
        (["--pairs", "100000000000"], "--pairs: 100,000,000,000 pairs needs about"),
        (["--pairs", "1000000000000000000000"], "is available"),
        (["--format", "yaml"], "'--format': 'yaml' is not one of 'table', 'json'"),
        (["--variants", "h"], "--variants only apply with --labels FILE"),
        (["--sigmas", "1"], "--sigmas only apply with --labels FILE"),
        (["--pairs", "x"], "Invalid value for '--pairs'"),
        (["--top", "1.5"], "Invalid value for '--top'"),
        (["--seed", ""], "Invalid value for '--seed'"),
        (["--knn-k", "١٢x"], "Invalid value for '--knn-k'"),
        (["--no-such-option"], "No such option: --no-such-option"),
        (["--normalize=3"], "--normalize"),
        (["--json"], "Option '--json' requires an argument"),
        (["--prefer", "stability"], "--prefer only apply with --labels FILE"),
        (["--prefer", "speed"], "'--prefer': 'speed' is not one of"),
        (["--min-frequency", "0"], "--min-frequency: must be at least 1, got"),
        (["--min-frequency", "3"], "--min-frequency: needs key frequencies"),
    ],
)
def test_bad_option_values(work, args, fragment):
    bad(work, fragment, *args)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "check, fragment",
    [
        ("representation.knn>0.5", "--check: no 'knn' in representation (has: "),
        ("nothing>1", "--check: no 'nothing' in the report"),
        ("representation>1", "representation is not a number (it is object)"),
        ("representation.least_stable.x.knn_overlap<1", "representation.least_stable is a list: expected an index"),
        ("representation.least_stable<1", "representation.least_stable is not a number (it is list of object)"),
        ("representation.noise_share_per_dim<1", "is not a number (it is list of number)"),
        ("input.source==1", "input.source is not a number (it is string)"),
        ("input.run_names.0==1", "input.run_names.0 is not a number (it is string)"),
        ("passed==1", "passed is not a number (it is boolean)"),
        ("stabcli_version>0", "stabcli_version is not a number (it is string)"),
        ("representation.cka.value>0", "representation.cka is number, it has no 'value'"),
        ("training.by_epoch.0.variance_quantiles.p99>1", "no 'p99' in training.by_epoch.0.variance_quantiles"),
        ("checks.0.name>1", "checks.0.name is not a number"),
        (".cka>1", "no '' in the report"),
        ("downstream.variants.h.churn<0.1", "the downstream section needs --labels FILE"),
        ("downstream.task>1", "the downstream section needs --labels FILE"),
        ("downstream>1", "the downstream section needs --labels FILE"),
        ("representation.cka>nan", "the threshold must be a finite number"),
        ("representation.cka<inf", "the threshold must be a finite number"),
        ("representation.cka<-infinity", "the threshold must be a finite number"),
        ("representation.cka", "expected PATH OP VALUE"),
        ("representation.cka => 1", "expected PATH OP VALUE"),
        ("representation.cka >= one", "'one' is not a number"),
        ("", "expected PATH OP VALUE"),
    ],
)
def test_bad_check_paths(work, check, fragment):
    bad(work, fragment, "--check", check)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "check, fragment",
    [
        ("representation.least_stable.999.knn_overlap<1", "representation.least_stable has 5 entries, no '999'"),
        ("representation.noise_share_per_dim.99<1", f"representation.noise_share_per_dim has {DIM} entries, no '99'"),
        ("training.by_epoch.7.noise_share<1", "training.by_epoch has 2 entries, no '7'"),
    ],
)
def test_check_index_past_the_end(work, check, fragment):
    bad(work, fragment, "--check", check)


@pytest.mark.bad_input
def test_missing_inputs_and_unknown_commands_are_one_line(tmp_path):
    before = files_state(tmp_path)
    assert_bad_input(invoke("audit"), "Missing argument", tmp_path, before)
    assert_bad_input(invoke("audti", tmp_path), "No such command 'audti'", tmp_path, before)


@pytest.mark.bad_input
def test_unknown_check_path_fails_before_any_work(tmp_path, monkeypatch):
    """A typo in --check is exit 2 in well under a second whatever the input size: no
    metric runs, no input is read."""
    root = tmp_path / "big"
    make_runset(root, runs=3, epochs=1, n=200_000, dim=16)

    def forbidden(*args, **kwargs):
        raise AssertionError("a metric ran before the --check paths were validated")

    for name in ("gram_blocks", "noise_share", "inner_product_noise_share"):
        monkeypatch.setattr(metrics, name, forbidden)
    monkeypatch.setattr("stabcli.commands.audit_compute.knn_overlap_by_pair", forbidden)
    monkeypatch.setattr("stabcli.commands.audit.load_runs", forbidden)
    before = files_state(tmp_path)
    start = time.perf_counter()
    result = invoke("audit", root, "--check", "representation.knn_overlapp>=0.5")
    elapsed = time.perf_counter() - start
    assert_bad_input(result, "no 'knn_overlapp' in representation", tmp_path, before)
    assert elapsed < 1.0
    result = invoke("audit", root, "--check", "downstream.variants.h.churn<0.1")
    assert_bad_input(
        result, "--check downstream.variants.h.churn: the downstream section needs --labels FILE", tmp_path, before
    )


@pytest.mark.bad_input
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_checkpoint_names_the_file(work, value):
    _, runs = work
    snapshot = np.load(runs / "run-001" / "epochs" / "002.npy")
    snapshot[3, 1] = float(value)
    np.save(runs / "run-001" / "epochs" / "002.npy", snapshot)
    bad(work, "run-001/epochs/002.npy: key 'k3' has NaN or infinite values")


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "array, fragment",
    [
        (np.zeros((N_KEYS, DIM + 1), dtype=np.float32), "does not match the run's float vectors of dimension 4"),
        (np.zeros(N_KEYS, dtype=np.float32), "does not match the run's float vectors"),
        (np.zeros((N_KEYS, DIM), dtype=np.int64), "type int64 does not match"),
        (np.zeros((N_KEYS, DIM), dtype=np.complex64), "type complex64 does not match"),
        (np.zeros((N_KEYS - 1, DIM), dtype=np.float32), f"{N_KEYS - 1} rows, but the run has {N_KEYS} keys"),
    ],
)
def test_mismatched_checkpoint_names_the_file(work, array, fragment):
    _, runs = work
    np.save(runs / "run-000" / "epochs" / "001.npy", array)
    result = bad(work, fragment)
    assert "run-000/epochs/001.npy" in result.stderr


@pytest.mark.bad_input
def test_unreadable_checkpoint_names_the_file(work):
    _, runs = work
    (runs / "run-000" / "epochs" / "002.npy").write_bytes(b"not an npy file at all")
    bad(work, "run-000/epochs/002.npy: unreadable checkpoint")


@pytest.mark.bad_input
def test_plots_without_matplotlib_names_the_extra(work, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    root, _ = work
    result = bad(work, "--plots needs matplotlib: pip install 'stabcli[plots]'", "--plots", root / "plots")
    assert result.stdout == ""


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "content, fragment",
    [
        ("", "empty; expected key and name columns"),
        ("\n\n", "empty; expected key and name columns"),
        ("k1\nk2\n", "expected at least two comma-separated columns"),
    ],
)
def test_bad_key_names_file(work, content, fragment):
    root, _ = work
    names = root / "names.csv"
    names.write_text(content)
    bad(work, f"names.csv: {fragment}", "--key-names", names)


def test_key_names_with_an_empty_name_are_accepted(work):
    root, _ = work
    names = root / "names.csv"
    names.write_text("k1|\n")  # two columns, one empty: fine (not a bad input)
    assert invoke("audit", work[1], "--knn-k", "3", "--key-names", names).exit_code == 0


@pytest.mark.bad_input
def test_key_names_follow_the_movielens_encoding_rule(work):
    root, _ = work
    names = root / "u.item"  # MovieLens item files are latin-1 without --encoding, as for --labels
    names.write_bytes("k1|Café (1995)|01-Jan-1995\n".encode("latin-1"))
    assert invoke("audit", work[1], "--knn-k", "3", "--key-names", names).exit_code == 0
    other = root / "names.csv"  # any other file is UTF-8 unless --encoding says otherwise
    other.write_bytes("k1,Café\n".encode("latin-1"))
    bad(work, "names.csv:1: not valid utf-8 (byte 0xe9 at column 7)", "--key-names", other)
    assert invoke("audit", work[1], "--knn-k", "3", "--key-names", other, "--encoding", "latin-1").exit_code == 0
    bad(work, "--encoding: unknown encoding 'no-such-codec'", "--key-names", names, "--encoding", "no-such-codec")


@pytest.mark.bad_input
def test_key_names_missing_or_a_directory(work):
    root, _ = work
    bad(work, "missing.tsv: no such file", "--key-names", root / "missing.tsv")
    bad(work, "is a directory, not a key-name file", "--key-names", root)


@pytest.mark.bad_input
@pytest.mark.parametrize("name", ["keys.xlsx", "keys.json", "keys.npy"])
def test_per_key_unknown_suffix(work, name):
    root, _ = work
    bad(work, f"--per-key {root / name}: unknown suffix", "--per-key", root / name)


@pytest.mark.bad_input
def test_per_key_into_a_missing_directory(work):
    root, _ = work
    bad(work, "nodir/keys.csv: directory", "--per-key", root / "nodir" / "keys.csv")


# ---------------------------------------------------------------- generated option values

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from stabcli.reports.audit_report import AuditReport  # noqa: E402
from stabcli.reports.schema import check_path  # noqa: E402

NUMBERS = st.one_of(st.integers(-(10**30), 10**30), st.integers(-3, 40), st.sampled_from(["1e3", "x", "", "٣", "0x10"]))
PATH_PARTS = [
    "representation",
    "downstream",
    "variants",
    "phi:64@0",
    "5",
    "churn",
    "knn_overlap",
    "least_stable",
    "0",
    "training",
    "by_epoch",
    "variance_quantiles",
    "median",
    "input",
    "featurized",
    "checks",
    "passed",
    "x",
    ".",
]


@pytest.fixture(scope="module")
def fuzz_runs(tmp_path_factory):
    return make_runset(tmp_path_factory.mktemp("fuzz") / "runs", runs=2, epochs=1, n=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    option=st.sampled_from(["--pairs", "--knn-k", "--knn-queries", "--seed", "--top"]),
    value=NUMBERS,
    check=st.lists(st.sampled_from(PATH_PARTS), max_size=6).map("".join).map(lambda p: p + ">=0"),
)
def test_generated_audit_options_exit_0_1_or_2_without_traceback(fuzz_runs, option, value, check):
    result = invoke(
        "audit",
        fuzz_runs,
        "--pairs",
        "20",
        "--knn-queries",
        "4",
        "--knn-k",
        "2",
        option,
        value,
        "--check",
        check,
        "--format",
        "json",
    )
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output and "Warning" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    else:
        assert lines == [] and json.loads(result.stdout)["passed"] is (result.exit_code == 0)


@settings(max_examples=200, deadline=None)
@given(
    path=st.lists(
        st.sampled_from(PATH_PARTS + ["NAME", "N", "q25", "cka", "noise_share_per_dim", "12"]), max_size=8
    ).map(".".join)
)
def test_check_path_accepts_or_raises_usage_error(path):
    from stabcli.errors import UsageError

    try:
        check_path(AuditReport, path)
    except UsageError as exc:
        assert str(exc).startswith("--check: ") and "\n" not in str(exc)


@pytest.mark.bad_input
def test_a_nan_row_in_a_file_that_also_lacks_keys_is_one_error_line(tmp_path):
    """The 'keys left out' warning used to come before the NaN error: two lines for one bad input."""
    (tmp_path / "a.vec").write_text("3 2\nk0 1 2\nk1 3 4\nk2 5 6\n")
    (tmp_path / "b.vec").write_text("2 2\nk0 nan 2\nk1 3 4\n")
    before = files_state(tmp_path)
    result = runner.invoke(app, ["audit", str(tmp_path / "a.vec"), str(tmp_path / "b.vec"), "--knn-k", "1"])
    assert_bad_input(result, "key 'k0' has NaN or infinite values", tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda t: ["--eis-alpha", "-1"], "--eis-alpha: must be between 0 and 100, got"),
        (lambda t: ["--eis-alpha", "nan"], "--eis-alpha"),
        (lambda t: ["--eis-anchor", t / "missing.vec"], "missing.vec: no such file"),
        (lambda t: ["--eis-anchor", _anchor(t, ["zz1", "zz2", "zz3"])], "shares 0 key(s) with the runs"),
        (lambda t: ["--eis-anchor", _anchor(t, KEYS[:5], nan_row=2)], "key 'k2' has NaN or infinite values"),
        (lambda t: ["--eis-anchor", t / "runs" / "keys.txt", "--json", t / "runs" / "x.json"], "lies inside"),
    ],
)
def test_bad_eis_anchor(work, make, fragment):
    bad(work, fragment, *make(work[0]))


def _anchor(root, keys, nan_row=None):
    values = vectors(7, len(keys), 3)
    if nan_row is not None:
        values[nan_row, 1] = np.nan
    path = root / "anchor.vec"
    path.write_text(
        f"{len(keys)} 3\n"
        + "".join(k + " " + " ".join(str(float(v)) for v in row) + "\n" for k, row in zip(keys, values, strict=True))
    )
    return path


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "content, fragment",
    [
        ("key\tcount\nk1\t3\nk2\tmany\n", "counts.tsv line 3: count 'many' is not a non-negative integer"),
        ("k1,3\nk2,-4\n", "counts.tsv line 2: count '-4' is not a non-negative integer"),
        ("k1\t3\nk1\t4\n", "counts.tsv line 2: key 'k1' appears twice"),
        ("only-a-key\n", "counts.tsv line 1: expected a key and a count, found 'only-a-key'"),
        ("", "counts.tsv: no key and count found"),
        ("x1\t3\nx2\t5\n", "--frequencies: none of the 30 compared keys has a count in the file"),
        (b"k1\t3\n\xff\xfe\t2\n", "counts.tsv: not valid utf-8 text"),
    ],
)
def test_bad_frequencies_file(work, content, fragment):
    path = work[0] / "counts.tsv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    bad(work, fragment, "--frequencies", path)


@pytest.mark.bad_input
def test_frequencies_file_missing(work):
    bad(work, "counts.tsv: cannot read", "--frequencies", work[0] / "counts.tsv")
