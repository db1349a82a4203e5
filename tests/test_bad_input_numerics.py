"""Bad inputs of the downstream options and of numerically degenerate embeddings: each is
exit 2 with one ``error:`` line naming the option or file, decided before any computation,
no traceback, no warning, and nothing written."""

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, runner
from stabcli.cli.app import app
from stabcli.inputs.embeddings import keys_path_for

N, D = 40, 4
KEYS = [f"k{i}" for i in range(N)]


def save(path, array, keys=KEYS):
    """A ``.npy`` exactly as given (any dtype) with its keys file."""
    np.save(path, array)
    keys_path_for(path).write_text("".join(k + "\n" for k in keys))
    return path


def two_runs(tmp, scale=1.0, dtype=np.float32, d=D):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((N, d))
    return [
        save(tmp / f"run{r}.npy", ((base + 0.3 * rng.standard_normal((N, d))) * scale).astype(dtype)) for r in range(2)
    ]


def labels(tmp, text=None):
    path = tmp / "labels.csv"
    path.write_text(text if text is not None else "".join(f"k{i},g{i % 2}\n" for i in range(N)))
    return path


def run(tmp, *args):
    return runner.invoke(app, [str(a) for a in args])


def with_labels(*options, text=None):
    """An audit of two good runs with a good label file plus ``options``."""
    return lambda t: ["audit", *two_runs(t), "--labels", labels(t, text), "--jobs", "1", *options]


HUGE = "100000000000"

CASES = [
    # ---- --test-size: a share strictly between 0 and 1
    ("test size 0", with_labels("--test-size", "0"), "--test-size: must be strictly between 0 and 1, got 0"),
    ("test size 1", with_labels("--test-size", "1"), "--test-size: must be strictly between 0 and 1, got 1"),
    (
        "test size negative",
        with_labels("--test-size", "-0.5"),
        "--test-size: must be strictly between 0 and 1, got -0.5",
    ),
    ("test size nan", with_labels("--test-size", "nan"), "--test-size: must be strictly between 0 and 1, got nan"),
    ("test size inf", with_labels("--test-size", "inf"), "--test-size: must be strictly between 0 and 1, got inf"),
    # ---- --model and --task
    (
        "model unknown",
        with_labels("--model", "svm"),
        "--model: 'svm' is not one of logreg, knn, ridge, gbdt, mlp or module:Class",
    ),
    (
        "model logreg for regression",
        with_labels("--model", "logreg", "--task", "regression"),
        "--model: logreg is for classification",
    ),
    (
        "model logreg on numeric labels",
        with_labels("--model", "logreg", text="".join(f"k{i},{i * 0.37}\n" for i in range(N))),
        "--model: logreg is for classification, and these labels are numeric",
    ),
    (
        "task unknown",
        with_labels("--task", "clustering"),
        "'--task': 'clustering' is not one of 'auto', 'classification', 'regression'",
    ),
    (
        "knn with too few training keys",
        with_labels("--model", "knn", "--min-class-size", "1", text="k0,a\nk1,a\nk2,a\nk3,b\nk4,b\nk5,b\n"),
        "4 training keys are fewer than the 5 neighbours --model knn uses",
    ),
    # ---- --reference: needs the run count, checked right after loading
    ("reference beyond the runs", with_labels("--reference", "5"), "--reference: 5 must be a run position from 0 to 1"),
    (
        "reference negative",
        with_labels("--reference", "-1"),
        "--reference: must be at least 0, got",
    ),
    # ---- --variants
    ("variant unknown", with_labels("--variants", "h,rff:8"), "--variants: unknown variant 'rff:8'"),
    ("variant odd M", with_labels("--variants", "phi:7"), "--variants: 'phi:7' needs an even M >= 2"),
    ("variant M zero", with_labels("--variants", "phi:0"), "--variants: 'phi:0' needs an even M >= 2"),
    ("variant sigma zero", with_labels("--variants", "phi:8@0"), "positive finite sigma"),
    ("variant sigma inf", with_labels("--variants", "phi:8@1e999"), "positive finite sigma"),
    (
        "variant sigma not a number",
        with_labels("--variants", "phi:8@1e"),
        "--variants: 'phi:8@1e': '1e' is not a number",
    ),
    ("variants empty", with_labels("--variants", ","), "--variants: empty list"),
    ("variant needs 800 GB", with_labels("--variants", f"h,phi:{HUGE}"), f"--variants: phi:{HUGE} needs about"),
    (
        "aligned variant needs 800 GB",
        with_labels("--variants", f"aligned+phi:{HUGE}"),
        f"--variants: aligned+phi:{HUGE} needs about",
    ),
    # ---- --featurize-dims and --sigmas
    (
        "featurize dims odd",
        with_labels("--variants", "phi:8", "--featurize-dims", "9"),
        "--featurize-dims: 9 must be an even",
    ),
    (
        "featurize dims zero",
        with_labels("--variants", "phi:8", "--featurize-dims", "0"),
        "--featurize-dims: 0 must be an even",
    ),
    (
        "featurize dims negative",
        with_labels("--variants", "phi:8", "--featurize-dims", "-4"),
        "--featurize-dims: -4 must be",
    ),
    (
        "featurize dims not ints",
        with_labels("--variants", "phi:8", "--featurize-dims", "8,x"),
        "--featurize-dims '8,x'",
    ),
    (
        "featurize dims without phi",
        with_labels("--variants", "h", "--featurize-dims", "8"),
        "--featurize-dims: sweeps the phi variants, but --variants has none",
    ),
    (
        "featurize dims huge",
        with_labels("--variants", "phi:8", "--featurize-dims", HUGE),
        f"--featurize-dims: phi:{HUGE} needs about",
    ),
    ("sigma zero", with_labels("--variants", "phi:8", "--sigmas", "0"), "--sigmas: 0 is not a positive finite number"),
    ("sigma negative", with_labels("--variants", "phi:8", "--sigmas", "1,-2"), "--sigmas: -2 is not a positive"),
    ("sigma nan", with_labels("--variants", "phi:8", "--sigmas", "nan"), "--sigmas: nan is not a positive"),
    ("sigma inf", with_labels("--variants", "phi:8", "--sigmas", "inf"), "--sigmas: inf is not a positive"),
    (
        "sigma beyond 1e300",
        with_labels("--variants", "phi:8", "--sigmas", "1e308"),
        "--sigmas: 1e+308 is not a positive finite number up to 1e+300",
    ),
    ("variant sigma beyond 1e300", with_labels("--variants", "phi:8@1e301"), "positive finite sigma up to 1e+300"),
    (
        "sigmas without phi",
        with_labels("--variants", "h,aligned", "--sigmas", "1"),
        "--sigmas: sweeps the phi variants",
    ),
    # ---- --jobs, --min-class-size, seeds, encoding
    ("jobs zero", with_labels("--jobs", "0"), "--jobs: must be at least 1, got"),
    ("jobs negative", with_labels("--jobs", "-3"), "--jobs: must be at least 1, got"),
    (
        "min class size zero",
        with_labels("--min-class-size", "0"),
        "--min-class-size: must be at least 1, got",
    ),
    (
        "min class size negative",
        with_labels("--min-class-size", "-2"),
        "--min-class-size: must be at least 1, got",
    ),
    (
        "min class size drops every class",
        with_labels("--min-class-size", "100"),
        "no class has at least 100 labeled keys (--min-class-size 100 dropped 'g0' (20), 'g1' (20))",
    ),
    (
        "min class size leaves one class",
        with_labels(text="".join(f"k{i},{'rare' if i < 3 else 'common'}\n" for i in range(N))),
        "only one class ('common') has at least 5 labeled keys (--min-class-size 5 dropped 'rare' (3))",
    ),
    (
        "min class size without labels",
        lambda t: ["audit", *two_runs(t), "--min-class-size", "3"],
        "--min-class-size only apply with --labels FILE",
    ),
    (
        "split seed negative",
        with_labels("--split-seed", "-1"),
        "--split-seed: must be between 0 and 4294967295, got",
    ),
    (
        "split seed too large",
        with_labels("--split-seed", str(2**32)),
        "--split-seed: must be between 0 and 4294967295, got 4294967296",
    ),
    ("phi seed negative", with_labels("--seed", "-7"), "--seed: must be at least 0, got -7"),
    (
        "label encoding unknown",
        with_labels("--encoding", "no-such-codec"),
        "--encoding: unknown encoding 'no-such-codec'",
    ),
    # ---- labels whose numbers are not finite
    (
        "regression label beyond float64",
        with_labels("--task", "regression", text="".join(f"k{i},{'1e999' if i == 7 else i}\n" for i in range(N))),
        "--task regression needs finite numeric labels, found '1e999'",
    ),
    # ---- embeddings with no geometry
    (
        "all-zero runs",
        lambda t: ["audit", save(t / "a.npy", np.zeros((N, D))), save(t / "b.npy", np.zeros((N, D)))],
        "a.npy: every value is 0; an all-zero run has no geometry to compare (2 such runs)",
    ),
    (
        "one all-zero run",
        lambda t: ["audit", two_runs(t)[0], save(t / "zero.npy", np.zeros((N, D), np.float32))],
        "zero.npy: every value is 0",
    ),
    (
        "all-zero float64 run with --normalize",
        lambda t: ["audit", "--normalize", two_runs(t, dtype=np.float64)[0], save(t / "zero.npy", np.zeros((N, D)))],
        "zero.npy: every value is 0",
    ),
    (
        "long double beyond float64",
        lambda t: ["audit", two_runs(t)[0], save(t / "ld.npy", np.full((N, D), np.longdouble("1e4000")))],
        "values up to 1e4000 exceed float64's range (1.8e308)",
    ),
    (
        "zero-column arrays",
        lambda t: ["audit", save(t / "a.npy", np.zeros((N, 0))), save(t / "b.npy", np.zeros((N, 0)))],
        "a.npy: vectors have 0 dimensions",
    ),
    (
        "zero-column arrays with labels",
        lambda t: [
            "audit",
            save(t / "a.npy", np.zeros((N, 0), np.float32)),
            save(t / "b.npy", np.zeros((N, 0), np.float32)),
            "--labels",
            labels(t),
        ],
        "a.npy: vectors have 0 dimensions",
    ),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("name, make_args, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_downstream_and_numeric_inputs(tmp_path, name, make_args, fragment):
    args = make_args(tmp_path)
    before = files_state(tmp_path)
    assert_bad_input(run(tmp_path, *args, "--json", tmp_path / "report.json"), fragment, tmp_path, before)


@pytest.mark.bad_input
def test_memory_refusal_comes_before_the_gram_pass(tmp_path, monkeypatch):
    """The estimate is checked against the available memory before any metric runs."""
    import stabcli.measure.metrics

    def boom(*_):
        raise AssertionError("the Gram pass ran before the memory check")

    monkeypatch.setattr(stabcli.measure.metrics, "gram_blocks", boom)
    args = with_labels("--variants", f"phi:{HUGE}")(tmp_path)
    result = run(tmp_path, *args)
    assert_bad_input(result, "--variants: phi:100000000000 needs about")
    assert "of memory available" in result.stderr


# ------------------------------------------------------------------ finite extremes are not bad inputs

INVARIANT = (
    "noise_share",
    "aligned_noise_share",
    "inner_product_noise_share",
    "knn_overlap",
    "pip_loss_relative",
    "cka",
    "eigenspace_overlap",
    "semantic_displacement",
)


def strict_json(text):
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")

    return __import__("json").loads(text, parse_constant=refuse)


def audit_json(tmp, files, *options):
    result = (
        run(
            tmp,
            "audit",
            *files,
            "--format",
            "json",
            "--pairs",
            "300",
            "--knn-queries",
            "20",
            "--knn-k",
            "3",
            "--jobs",
            "1",
            *options,
        )
        if "--labels" in options
        else run(
            tmp, "audit", *files, "--format", "json", "--pairs", "300", "--knn-queries", "20", "--knn-k", "3", *options
        )
    )
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr and "warning" not in result.stderr.lower(), result.stderr
    return strict_json(result.stdout)


@pytest.mark.parametrize("exponent, normalize", [(1000, False), (-1000, False), (664, True), (-1040, False)])
def test_float64_runs_at_float64_extremes_audit_like_ordinary_ones(tmp_path, exponent, normalize):
    """2^1000 ≈ 1e301, 2^-1000 ≈ 1e-301, 2^664 ≈ 1e200 with --normalize, 2^-1040 subnormal:
    exit 0, no warning, strict JSON, and every scale-invariant number as at ordinary magnitude."""
    (tmp_path / "x").mkdir()
    (tmp_path / "o").mkdir()
    ordinary = two_runs(tmp_path / "o", dtype=np.float64)
    extreme = [save(tmp_path / "x" / p.name, np.ldexp(np.load(p), exponent)) for p in ordinary]
    if exponent < -1022:  # subnormal: compare with the values that survived, at ordinary magnitude
        ordinary = [save(p, np.ldexp(np.load(e), -exponent)) for p, e in zip(ordinary, extreme, strict=False)]
    flags = ["--normalize"] if normalize else []
    got, expected = audit_json(tmp_path, extreme, *flags), audit_json(tmp_path, ordinary, *flags)
    for key in INVARIANT:
        assert got["representation"][key] == pytest.approx(expected["representation"][key], rel=1e-9, abs=1e-12), key
    if exponent > 600 and not normalize:  # variances (squares) beyond float64: null, never "Infinity"
        assert got["representation"]["pip_loss"] is None and got["representation"]["variance_per_dim"][0] is None


def test_regression_labels_near_1e300(tmp_path):
    """Labels × 2^1000: the same fits on exactly scaled labels, R² unchanged, RMSE and churn × 2^1000."""
    files = two_runs(tmp_path)
    rng = np.random.default_rng(3)
    values = rng.standard_normal(N) * 3 + 10
    (tmp_path / "small.csv").write_text("".join(f"{k},{float(v)!r}\n" for k, v in zip(KEYS, values, strict=False)))
    (tmp_path / "huge.csv").write_text(
        "".join(f"{k},{float(np.ldexp(v, 1000))!r}\n" for k, v in zip(KEYS, values, strict=False))
    )
    small = audit_json(tmp_path, files, "--labels", tmp_path / "small.csv", "--variants", "h,aligned")["downstream"]
    huge = audit_json(tmp_path, files, "--labels", tmp_path / "huge.csv", "--variants", "h,aligned")["downstream"]
    assert huge["task"] == "regression" and huge["label_scale"] > 1e300 and small["label_scale"] == 1
    for name in ("h", "aligned"):
        a, b = small["variants"][name], huge["variants"][name]
        assert b["r2_mean"] == pytest.approx(a["r2_mean"], rel=1e-9)
        assert b["rmse_mean"] == pytest.approx(np.ldexp(a["rmse_mean"], 1000), rel=1e-9)
        assert b["churn"] == pytest.approx(np.ldexp(a["churn"], 1000), rel=1e-6, abs=1e-300 * 2.0**1000)
    assert huge["recommendation"]["variant"] == small["recommendation"]["variant"]


def test_classification_on_features_near_1e300(tmp_path):
    """Features beyond 2^±100 are divided by one common power of two before fitting (recorded)."""
    files = [
        save(tmp_path / p.name.replace("run", "big"), np.ldexp(np.load(p).astype(np.float64), 1000))
        for p in two_runs(tmp_path)
    ]
    ds = audit_json(tmp_path, files, "--labels", labels(tmp_path))["downstream"]
    assert ds["feature_scale"] > 1e300 and all(v["accuracy_mean"] is not None for v in ds["variants"].values())


def test_plots_and_markdown_of_runs_near_1e300(tmp_path):
    """Null variances (beyond float64) are left out of the Fig. 1a histogram, not a crash."""
    files = [
        save(tmp_path / p.name.replace("run", "big"), np.ldexp(np.load(p).astype(np.float64), 1000))
        for p in two_runs(tmp_path)
    ]
    result = run(
        tmp_path,
        "audit",
        *files,
        "--plots",
        tmp_path / "plots",
        "--markdown",
        tmp_path / "r.md",
        "--labels",
        labels(tmp_path),
        "--jobs",
        "2",
    )
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr and "Traceback" not in result.output
    assert (tmp_path / "plots" / "fig1a_variance_per_dim.png").stat().st_size > 0
    assert "PIP loss | —" in (tmp_path / "r.md").read_text()


def write_vec(path, array, keys=KEYS):
    path.write_text(
        f"{len(keys)} {array.shape[1]}\n"
        + "".join(f"{k} " + " ".join(repr(float(v)) for v in row) + "\n" for k, row in zip(keys, array, strict=False))
    )
    return path


@pytest.mark.parametrize("exponent", [1000, -1000])
def test_word2vec_text_beyond_float32_is_read_in_float64(tmp_path, exponent):
    """Finite text values that float32 would turn into inf (1e301) or 0 (1e-301) promote the
    file to float64; before, 1e301 was reported as "NaN or infinite" after a RuntimeWarning."""
    from stabcli.inputs.embeddings import read_embedding

    ordinary = [np.load(p).astype(np.float64) for p in two_runs(tmp_path)]
    files = [write_vec(tmp_path / f"x{r}.vec", np.ldexp(a, exponent)) for r, a in enumerate(ordinary)]
    emb = read_embedding(files[0])
    assert emb.vectors.dtype == np.float64 and np.array_equal(emb.vectors, np.ldexp(ordinary[0], exponent))
    got = audit_json(tmp_path, files)["representation"]
    expected = audit_json(tmp_path, [write_vec(tmp_path / f"o{r}.vec", a) for r, a in enumerate(ordinary)])
    for key in INVARIANT:
        assert got[key] == pytest.approx(expected["representation"][key], rel=1e-6, abs=1e-9), key
    assert read_embedding(tmp_path / "o0.vec").vectors.dtype == np.float32  # ordinary files stay float32


@pytest.mark.bad_input
def test_word2vec_text_with_a_huge_value_and_a_nan_names_the_nan_row(tmp_path):
    array = np.random.default_rng(1).standard_normal((N, D))
    array[3, 1], array[5, 0] = np.nan, 1e300
    files = [two_runs(tmp_path)[0], write_vec(tmp_path / "bad.vec", array)]
    before = files_state(tmp_path)
    assert_bad_input(run(tmp_path, "audit", *files), "bad.vec: key 'k3' has NaN or infinite values", tmp_path, before)


def test_parquet_beyond_float32_is_read_in_float64(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from stabcli.inputs.embeddings import read_embedding

    array = np.random.default_rng(2).standard_normal((N, D)) * 1e300
    table = pd.DataFrame(array, columns=[f"d{j}" for j in range(D)])
    table.insert(0, "key", KEYS)
    table.to_parquet(tmp_path / "x.parquet")
    emb = read_embedding(tmp_path / "x.parquet")
    assert emb.vectors.dtype == np.float64 and np.array_equal(emb.vectors, array)


def test_long_double_within_float64_is_read_as_float64(tmp_path):
    from stabcli.inputs.embeddings import read_embedding

    ordinary = [np.load(p).astype(np.float64) for p in two_runs(tmp_path)]
    files = [
        save(tmp_path / f"ld{r}.npy", a.astype(np.longdouble) * np.longdouble(1e300)) for r, a in enumerate(ordinary)
    ]
    assert read_embedding(files[0]).vectors.dtype == np.float64
    got, expected = (
        audit_json(tmp_path, files),
        audit_json(tmp_path, [save(tmp_path / f"o{r}.npy", a) for r, a in enumerate(ordinary)]),
    )
    for key in INVARIANT:
        assert got["representation"][key] == pytest.approx(expected["representation"][key], rel=1e-9, abs=1e-12), key
