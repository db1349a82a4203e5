import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split

from conftest import runner
from stabcli import FourierFeaturizer
from stabcli.errors import InputError, UsageError
from stabcli.inputs.labels import read_labels
from stabcli.measure.align import generalized_procrustes
from stabcli.measure.downstream import DownstreamOptions, churn, downstream_report, parse_variants, recommend
from stabcli.measure.metrics import gram_blocks

N, D, CLASSES = 400, 8, 4


def planted(seed=0):
    """Keys in 4 well-separated Gaussian clusters; the cluster is the label."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((CLASSES, D)) * 1.5
    y = rng.integers(0, CLASSES, N)
    return centers[y] + rng.standard_normal((N, D)), y


def write_labels(path, y, header="key,label\n"):
    path.write_text(header + "".join(f"k{i},c{label}\n" for i, label in enumerate(y)))
    return path


def report_for(arrays, labels, **options):
    keys = [f"k{i}" for i in range(len(arrays[0]))]
    rotations, _ = generalized_procrustes(gram_blocks(arrays))
    names = [f"run-{r:03d}" for r in range(len(arrays))]
    return downstream_report(arrays, keys, rotations, DownstreamOptions(labels, jobs=1, **options), names)


def test_rotated_runs_known_answers(tmp_path):
    x, y = planted()
    arrays = [x @ ortho_group.rvs(D, random_state=s) for s in range(4)]
    ds = report_for(arrays, write_labels(tmp_path / "labels.csv", y))
    assert (ds["task"], ds["model"], ds["train"], ds["test"], ds["skipped_keys"], ds["classes"]) == (
        "classification",
        "logreg",
        320,
        80,
        0,
        4,
    )
    assert list(ds["variants"]) == ["h", "avg", "aligned", "phi:8", "phi:16"]
    h, aligned = ds["variants"]["h"], ds["variants"]["aligned"]
    # L2 logistic regression is rotation invariant: refitting on a rotated run changes nothing
    assert h["accuracy_std"] < 1e-12 and h["churn"] == 0
    assert h["accuracy_mean"] > 0.85 > 0.3 > ds["majority_accuracy"]  # planted structure, well above chance
    # a stale model sees rotated coordinates and collapses; after alignment it keeps its accuracy
    assert h["stale_accuracy_mean"] < 0.6 and h["stale_drop"] > 0.3
    assert aligned["stale_drop"] == pytest.approx(0, abs=1e-12) and aligned["churn"] == 0
    avg = ds["variants"]["avg"]
    assert avg["accuracy_std"] is None and avg["churn"] is None and avg["stale_drop"] is None
    assert len(avg["accuracy_by_run"]) == 1 and len(h["accuracy_by_run"]) == 4


def test_identical_runs_have_zero_spread_everywhere(tmp_path):
    x, y = planted(1)
    ds = report_for(
        [x, x.copy(), x.copy()],
        write_labels(tmp_path / "labels.csv", y),
        variants=["h", "aligned", "phi:16", "aligned+phi:16"],
    )
    for name, v in ds["variants"].items():
        assert v["accuracy_std"] == 0 and v["f1_macro_std"] == 0 and v["churn"] == 0, name
        assert v["stale_drop"] == pytest.approx(0, abs=1e-12), name
    assert ds["recommendation"]["variant"] == "h"
    assert ds["recommendation"]["reason"].startswith("raw h is already the best choice")


def test_matches_a_direct_scikit_learn_computation(tmp_path):
    x, y = planted(2)
    rng = np.random.default_rng(5)
    arrays = [x + 0.8 * rng.standard_normal(x.shape) for _ in range(3)]  # noisy runs: nonzero spread
    ds = report_for(
        arrays,
        write_labels(tmp_path / "labels.csv", y),
        variants=["h", "phi:16@0.5"],
        test_size=0.25,
        split_seed=3,
        seed=7,
    )
    labels = np.array([f"c{v}" for v in y], dtype=object)
    train, test = train_test_split(np.arange(N), test_size=0.25, random_state=3, stratify=labels)
    for name, transform in [
        ("h", lambda a: a),
        ("phi:16@0.5", FourierFeaturizer(n_components=16, sigma=0.5, random_state=7).fit(x).transform),
    ]:
        preds = []
        for a in arrays:
            a = transform(np.asarray(a, dtype=np.float32).astype(np.float64))
            model = LogisticRegression(max_iter=5000, tol=1e-6).fit(a[train], labels[train])
            preds.append(model.predict(a[test]))
        accuracy = [accuracy_score(labels[test], p) for p in preds]
        f1 = [f1_score(labels[test], p, average="macro") for p in preds]
        differ = [np.mean(preds[i] != preds[j]) for i, j in [(0, 1), (0, 2), (1, 2)]]
        v = ds["variants"][name]
        assert v["accuracy_by_run"] == pytest.approx(accuracy, abs=1e-12)
        assert v["accuracy_std"] == pytest.approx(np.std(accuracy, ddof=1), abs=1e-12)
        assert v["f1_macro_mean"] == pytest.approx(np.mean(f1), abs=1e-12)
        assert v["churn"] == pytest.approx(np.mean(differ), abs=1e-12)
    assert ds["variants"]["h"]["churn"] > 0


def test_parallel_fits_equal_sequential(tmp_path):
    x, y = planted(3)
    rng = np.random.default_rng(0)
    arrays = [x + 0.5 * rng.standard_normal(x.shape) for _ in range(3)]
    labels = write_labels(tmp_path / "labels.csv", y)
    keys = [f"k{i}" for i in range(N)]
    rotations, _ = generalized_procrustes(gram_blocks(arrays))
    one, two = (
        downstream_report(arrays, keys, rotations, DownstreamOptions(labels, jobs=j), ["a", "b", "c"]) for j in (1, 2)
    )
    assert one == two


def test_regression_task_with_ridge(tmp_path):
    x, _ = planted(4)
    target = x @ np.arange(1, D + 1) / D
    (tmp_path / "y.tsv").write_text("".join(f"k{i}\t{v:.6f}\n" for i, v in enumerate(target)))
    ds = report_for([x, x @ ortho_group.rvs(D, random_state=0)], tmp_path / "y.tsv", variants=["h", "aligned"])
    assert (ds["task"], ds["model"], ds["classes"], ds["majority_accuracy"]) == ("regression", "ridge", None, None)
    h = ds["variants"]["h"]
    assert h["r2_mean"] > 0.99 and h["rmse_mean"] < 0.1 and h["churn"] < 1e-6  # ridge is rotation invariant too
    assert h["stale_r2_mean"] < 0.5 and ds["variants"]["aligned"]["stale_drop"] == pytest.approx(0, abs=1e-9)
    with pytest.raises(UsageError, match="model: logreg is for classification"):
        report_for([x, x], tmp_path / "y.tsv", model="logreg")


def test_knn_model_and_skipped_keys(tmp_path):
    x, y = planted(5)
    path = tmp_path / "labels.tsv"
    path.write_text("".join(f"k{i}\tc{y[i]}\n" for i in range(300)))  # 100 keys without a label, no header
    ds = report_for([x, x], path, model="knn", variants=["h"])
    assert ds["skipped_keys"] == 100 and ds["train"] + ds["test"] == 300 and ds["model"] == "knn"
    assert ds["variants"]["h"]["accuracy_mean"] > 0.8


def test_churn_known_answers():
    a, b, c = np.array([0, 1, 2, 3]), np.array([0, 1, 2, 0]), np.array([1, 1, 0, 0])
    assert churn("classification", [a, b, c]) == pytest.approx((1 / 4 + 3 / 4 + 2 / 4) / 3)
    assert churn("regression", [np.zeros(4), np.full(4, 2.0)]) == pytest.approx(2.0)


def entry(mean, std, churn_, drop=0.0):
    return {
        "accuracy_mean": mean,
        "accuracy_std": std,
        "churn": churn_,
        "stale_drop": drop,
        "stale_accuracy_mean": mean - drop,
    }


def test_recommendation_picks_the_most_stable_close_variant():
    results = {
        "h": entry(0.80, 0.02, 0.10),
        "aligned": entry(0.79, 0.01, 0.04),
        "phi:64": entry(0.70, 0.01, 0.01),
        "avg": {
            "accuracy_mean": 0.81,
            "accuracy_std": None,
            "churn": None,
            "stale_drop": None,
            "stale_accuracy_mean": None,
        },
    }
    rec = recommend(results, "accuracy")
    assert rec["variant"] == "aligned"  # phi:64 churns less but loses more than the noise
    assert rec["reason"].startswith(
        "aligned: churn 4.0%, accuracy 0.790 (std 0.010), against raw h's churn 10.0%, accuracy 0.800 "
        "(std 0.020); steadier, accuracy change -0.010."
    )
    assert "not refit" not in rec["reason"]  # its stale drop (0) is within tolerance
    results["aligned"].update(stale_drop=0.2, stale_accuracy_mean=0.59)
    results["phi:64"].update(stale_drop=0.3, stale_accuracy_mean=0.4)
    assert (
        rec["reason"] + " A downstream model that is not refit scores accuracy 0.590 with aligned (drop 0.200); "
        "with h it keeps 0.800, so refit on every refresh or use h." == recommend(results, "accuracy")["reason"]
    )
    assert recommend({"h": entry(0.8, 0.01, 0.05), "phi:8": entry(0.8, 0.01, 0.05)}, "accuracy")["variant"] == "h"
    # std 0 everywhere: the noise is the metric's resolution, one test prediction (1/100)
    exact = {"h": entry(0.99, 0.0, 0.0), "phi:64": entry(1.0, 0.0, 0.0)}
    assert recommend(exact, "accuracy")["variant"] == "phi:64"
    assert recommend(exact, "accuracy", resolution=0.01)["variant"] == "h"


def test_recommendation_needs_a_gain_beyond_the_noise_for_more_churn():
    """The reported case: phi:64 with 2.6× the churn and 6.7× the run-to-run std of raw h for
    +0.018 R² was recommended; the gain is within 2× its noise, so raw h stays."""
    results = {"h": regression_entry(0.500, 0.003, 0.05), "phi:64": regression_entry(0.518, 0.020, 0.13)}
    rec = recommend(results, "r2")
    assert rec["variant"] == "h"
    assert rec["reason"].startswith(
        "raw h is already the best choice: churn 0.05 RMS, R² 0.500 (std 0.003). phi:64 gains R² +0.018 but with "
        "2.6× the churn and 6.7× the std: within 2× the noise (0.040)."
    )
    assert "Rule: --prefer balanced: a variant with more churn or a larger run-to-run std than raw h" in rec["reason"]
    assert recommend(results, "r2", prefer="accuracy")["variant"] == "h"  # +0.018 is within 1× the noise too
    results["phi:64"] = regression_entry(0.545, 0.020, 0.13)  # +0.045: beyond 2× the noise (0.040)
    assert recommend(results, "r2")["variant"] == "phi:64"
    assert recommend(results, "r2", prefer="accuracy")["variant"] == "phi:64"
    assert recommend(results, "r2", prefer="stability")["variant"] == "h"  # never more churn
    assert recommend(results, "r2", prefer="stability")["reason"].endswith(
        "Rule: --prefer stability: a variant with more churn or a larger run-to-run std than raw h is never recommended."
    )
    # a steadier variant is taken when it loses no more than the noise, whatever the preference
    steady = {"h": regression_entry(0.50, 0.02, 0.10), "aligned": regression_entry(0.49, 0.01, 0.04)}
    assert {recommend(steady, "r2", prefer=p)["variant"] for p in ("stability", "balanced")} == {"aligned"}
    assert recommend(steady, "r2", prefer="accuracy")["variant"] == "h"


def test_a_featurized_input_is_phi_h_and_never_featurized_again():
    results = {
        "phi(h)": regression_entry(0.50, 0.01, 0.100),
        "aligned": regression_entry(0.50, 0.01, 0.090),
        "phi:128": regression_entry(0.50, 0.01, 0.099),
    }
    rec = recommend(results, "r2", baseline="phi(h)")
    assert rec["variant"] == "aligned"
    results["aligned"] = regression_entry(0.40, 0.01, 0.090)
    rec = recommend(results, "r2", baseline="phi(h)")
    assert rec["variant"] == "phi(h)" and rec["reason"].startswith("phi(h) is already the best choice")
    assert "The input is already featurized (phi(h)): phi:128 (phi of phi) not recommended." in rec["reason"]
    assert "raw h" not in rec["reason"]
    assert [v.name for v in parse_variants(None, 64, featurized=True)] == ["h", "avg", "aligned"]


def test_parse_variants_defaults_sweeps_and_errors():
    assert [v.name for v in parse_variants(None, 32)] == ["h", "avg", "aligned", "phi:32", "phi:64"]
    assert [v.name for v in parse_variants(None, 5)] == ["h", "avg", "aligned", "phi:6", "phi:12"]
    swept = parse_variants(["h", "aligned+phi:64", "phi:8"], 16, featurize_dims=[16, 32], sigmas=[0.5, 2])
    assert [v.name for v in swept] == [
        "h",
        "aligned+phi:16@0.5",
        "aligned+phi:16@2",
        "aligned+phi:32@0.5",
        "aligned+phi:32@2",
        "phi:16@0.5",
        "phi:16@2",
        "phi:32@0.5",
        "phi:32@2",
    ]
    assert swept[1].source == "aligned" and swept[1].phi_dim == 16 and swept[1].sigma == 0.5
    assert [v.name for v in parse_variants(["phi:8@1", "h+phi:8", "phi:8@0.25"], 4)] == ["phi:8", "phi:8@0.25"]
    for bad, message in [
        (["phi:7"], "even M"),
        (["rff:8"], "unknown variant 'rff:8'"),
        (["phi:8@0"], "positive finite sigma"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_variants(bad, 4)
    with pytest.raises(UsageError, match="featurize_dims: sweeps the phi variants, but --variants has none"):
        parse_variants(["h"], 4, featurize_dims=[8])
    with pytest.raises(UsageError, match="featurize_dims: 9 must be an even"):
        parse_variants(None, 4, featurize_dims=[9])


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("labels.csv", "key,label\na,x\nb,y\n", {"a": "x", "b": "y"}),
        ("labels.csv", 'a,x\n\nb,"y, z"\n', {"a": "x", "b": "y, z"}),
        ("labels.tsv", "item\tgenre\na\tx\nb\ty\n", {"a": "x", "b": "y"}),
        (
            "u.item",
            "1|Toy Story (1995)|01-Jan-1995||http://x|0|0|0|1|1|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n"
            "2|Unknown|01-Jan-1995||http://x|1|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0|0\n",
            {"1": "Animation"},
        ),
        (
            "movies.dat",
            "1::Toy Story (1995)::Animation|Children's|Comedy\n2::Jumanji (1995)::Adventure\n",
            {"1": "Animation", "2": "Adventure"},
        ),
        (
            "movies.csv",
            'movieId,title,genres\n1,"Toy Story, The (1995)",Adventure|Animation\n2,X,(no genres listed)\n',
            {"1": "Adventure"},
        ),
    ],
)
def test_label_formats(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    assert read_labels(path, {"a", "b", "1", "2"}).by_key == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no labels found"),
        ("a,x,extra\n", r"labels.csv:1: expected 2 columns \(key,label\), found 3"),
        ("a,x\nb,\n", "labels.csv:2: empty label"),
        ("a,x\nb,y\na,z\n", "labels.csv:3: key 'a' has label 'z' here but 'x' on line 1"),
        ("a,x\n\xff,y\n", "labels.csv:2: not valid utf-8"),
    ],
)
def test_bad_label_files(tmp_path, text, message):
    path = tmp_path / "labels.csv"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(InputError, match=message):
        read_labels(path, {"a", "b"})


def test_label_sets_that_cannot_be_evaluated(tmp_path):
    x, _y = planted()
    arrays = [x, x]
    cases = [
        (
            "".join(f"z{i},c\n" for i in range(5)),
            r"none of its 4 keys is an embedding key \(label key 'z1', "
            r"embedding key 'k0'\)",
        ),  # row 1 is read as a header
        ("".join(f"k{i},same\n" for i in range(20)), r"only one class \('same'\) among the 20 labeled keys"),
        ("".join(f"k{i},{'a' if i else 'lonely'}\n" for i in range(20)), "class 'lonely' has only 1 labeled key"),
        ("k0,a\nk1,a\nk2,b\nk3,b\n", "cannot split 4 labeled keys with --test-size 0.2"),
    ]
    for text, message in cases:
        (tmp_path / "l.csv").write_text(text)
        with pytest.raises(InputError, match=message):
            report_for(arrays, tmp_path / "l.csv", min_class_size=1)  # keep every class: the split must refuse
    (tmp_path / "l.csv").write_text("k0,a\nk1,b\n")
    with pytest.raises(InputError, match="--task regression needs finite numeric labels, found 'a'"):
        report_for(arrays, tmp_path / "l.csv", task="regression")
    with pytest.raises(UsageError, match="reference: 5 must be a run position from 0 to 1"):
        report_for(arrays, tmp_path / "l.csv", reference=5)
    with pytest.raises(InputError, match="label file not found"):
        report_for(arrays, tmp_path / "missing.csv")


# ------------------------------------------------------------------ rare classes, the recommendation's numbers


def u_item_line(item, genres):
    """A line in MovieLens 100K ``u.item`` layout (id|title|date|video date|url|19 genre flags)."""
    from stabcli.inputs.labels import ML100K_GENRES

    flags = "|".join("1" if g in genres else "0" for g in ML100K_GENRES)
    return f"{item}|Movie {item} (1995)|01-Jan-1995||http://example.org/{item}|{flags}\n"


def test_rare_classes_are_dropped_with_one_warning_and_recorded(tmp_path):
    """A generated u.item whose first-genre classes include one of 1 key (Fantasy) and one of 3
    (Western): the default --min-class-size 5 drops both, names them once, records them."""
    x, y = planted(7)
    genres = ["Action", "Comedy", "Drama", "Horror"]
    first = [genres[c] for c in y]
    first[10] = "Fantasy"
    first[20:23] = ["Western"] * 3
    (tmp_path / "u.item").write_text("".join(u_item_line(i, [g]) for i, g in enumerate(first)))
    keys = [str(i) for i in range(N)]
    rotations, _ = generalized_procrustes(gram_blocks([x, x]))
    warnings_seen = []
    ds = downstream_report(
        [x, x],
        keys,
        rotations,
        DownstreamOptions(tmp_path / "u.item", jobs=1, variants=["h"]),
        ["run-000", "run-001"],
        on_warning=warnings_seen.append,
    )
    assert ds["dropped_classes"] == {"Fantasy": 1, "Western": 3}
    assert ds["min_class_size"] == 5 and ds["classes"] == 4 and ds["train"] + ds["test"] == N - 4
    assert warnings_seen == [
        f"{tmp_path / 'u.item'}: dropped 2 class(es) with fewer than 5 labeled keys "
        "(--min-class-size): 'Fantasy' (1), 'Western' (3)"
    ]
    # a smaller threshold keeps Western; 1 keeps Fantasy too, which no stratified split can place
    kept = downstream_report(
        [x, x],
        keys,
        rotations,
        DownstreamOptions(tmp_path / "u.item", jobs=1, variants=["h"], min_class_size=2),
        ["a", "b"],
    )
    assert kept["dropped_classes"] == {"Fantasy": 1} and kept["classes"] == 5
    with pytest.raises(InputError, match=r"class 'Fantasy' has only 1 labeled key; .*--min-class-size 2 or more"):
        downstream_report([x, x], keys, rotations, DownstreamOptions(tmp_path / "u.item", min_class_size=1), ["a", "b"])


def test_rare_classes_on_the_command_line(tmp_path):
    from stabcli.cli.app import app
    from stabcli.inputs.embeddings import write_embedding

    x, y = planted(8)
    keys = [str(i) for i in range(N)]
    files = []
    for r in range(2):
        files.append(tmp_path / f"run{r}.npy")
        write_embedding(files[-1], keys, x + 0.1 * np.random.default_rng(r).standard_normal(x.shape))
    first = ["Comedy" if c % 2 else "Drama" for c in y]
    first[5] = "Fantasy"
    (tmp_path / "u.item").write_text("".join(u_item_line(i, [g]) for i, g in enumerate(first)))
    result = runner.invoke(
        app,
        [
            "audit",
            *map(str, files),
            "--labels",
            str(tmp_path / "u.item"),
            "--variants",
            "h",
            "--jobs",
            "1",
            "--format",
            "json",
            "--pairs",
            "100",
            "--knn-queries",
            "10",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"warning: {tmp_path / 'u.item'}: dropped 1 class(es) with fewer than 5 "
        "labeled keys (--min-class-size): 'Fantasy' (1)"
    ]
    import json

    assert json.loads(result.stdout)["downstream"]["dropped_classes"] == {"Fantasy": 1}


def regression_entry(mean, std, churn_):
    return {"r2_mean": mean, "r2_std": std, "churn": churn_, "stale_drop": 0.0, "stale_r2_mean": mean}


def assert_sentence_matches_json(ds):
    """Every number the recommendation quotes is the JSON value of the variant it names."""
    primary = "accuracy" if ds["task"] == "classification" else "r2"
    label = "accuracy" if primary == "accuracy" else "R²"
    text = (lambda v: f"{v:.1%}") if primary == "accuracy" else (lambda v: f"{v:.3g} RMS")
    variants, rec = ds["variants"], ds["recommendation"]
    chosen = variants[rec["variant"]]
    reason = rec["reason"]
    assert f"churn {text(chosen['churn'])}, {label} {chosen[primary + '_mean']:.3f} " in reason
    assert f"(std {chosen[primary + '_std']:.3f})" in reason
    if rec["variant"] != "h":
        h = variants["h"]
        assert f"against raw h's churn {text(h['churn'])}, {label} {h[primary + '_mean']:.3f} " in reason
        steadier = chosen["churn"] <= h["churn"] and chosen[primary + "_std"] <= h[primary + "_std"]
        assert ("; steadier," in reason) == steadier


def test_recommendation_sentences_match_the_json(tmp_path):
    x, y = planted(9)
    rng = np.random.default_rng(2)
    arrays = [x + 0.9 * rng.standard_normal(x.shape) for _ in range(3)]
    variants = ["h", "aligned", "phi:8", "phi:32@0.5"]
    assert_sentence_matches_json(report_for(arrays, write_labels(tmp_path / "c.csv", y), variants=variants))
    target = x @ np.arange(1, D + 1) / D + 0.5 * rng.standard_normal(N)
    (tmp_path / "r.tsv").write_text("".join(f"k{i}\t{v:.6f}\n" for i, v in enumerate(target)))
    assert_sentence_matches_json(report_for(arrays, tmp_path / "r.tsv", variants=variants))


# ------------------------------------------------------------------ one protocol: audit and drift agree


def audit_and_drift(tmp_path, b, a, labels, **options):
    """The audit's downstream section on the runs [b, a] and drift's on BEFORE=b, AFTER=a."""
    from stabcli.commands.drift_compute import compute_drift
    from stabcli.commands.drift_inputs import DriftInputs, DriftOptions

    keys = [f"k{i}" for i in range(len(b))]
    audit = report_for([b, a], labels, variants=["h", "aligned"], **options)
    inputs = DriftInputs("b", "a", keys, b, a, [], [], False)
    report, _ = compute_drift(inputs, DriftOptions(), DownstreamOptions(labels, jobs=1, **options))
    return audit, report.downstream


@pytest.mark.parametrize("scale", [1e-150, 1.0, 1e150])
def test_audit_and_drift_report_the_same_numbers_at_any_label_scale(tmp_path, scale):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((N, D))
    target = x @ rng.standard_normal(D) + 0.5 * rng.standard_normal(N)
    b = x + 0.3 * rng.standard_normal(x.shape)
    a = (x + 0.3 * rng.standard_normal(x.shape)) @ ortho_group.rvs(D, random_state=1)
    labels = tmp_path / "y.tsv"
    labels.write_text("".join(f"k{i}\t{float(v) * scale!r}\n" for i, v in enumerate(target)))
    audit, drift = audit_and_drift(tmp_path, b, a, labels, task="regression")
    h, aligned = audit["variants"]["h"], audit["variants"]["aligned"]
    assert drift.metric == "r2" and drift.model == audit["model"] == "ridge"
    assert drift.before == pytest.approx(h["r2_by_run"][0], rel=1e-9)
    assert drift.refit == pytest.approx(h["r2_by_run"][1], rel=1e-9)
    assert drift.stale_raw == pytest.approx(h["stale_r2_mean"], rel=1e-9)
    assert drift.drop_raw == pytest.approx(h["stale_drop"], rel=1e-9)
    assert drift.churn_refit == pytest.approx(h["churn"], rel=1e-9)  # both in label units
    # ridge is rotation invariant: the consensus frame and AFTER-onto-BEFORE give the same stale model
    assert drift.stale_aligned == pytest.approx(aligned["stale_r2_mean"], rel=1e-6)
    # the churn is an RMS difference in label units: it scales with the labels, R² does not
    unit = np.sqrt(np.mean((target - target.mean()) ** 2))
    assert 0.01 * unit * scale < drift.churn_refit < unit * scale
    assert 0.5 < drift.refit < 1
    assert (drift.label_scale == 1.0) == (scale == 1.0)  # labels beyond 2^±400 are fit divided by a power of two


def test_audit_and_drift_agree_on_classification(tmp_path):
    x, y = planted(9)
    rng = np.random.default_rng(1)
    b, a = (x + 0.9 * rng.standard_normal(x.shape) for _ in range(2))
    audit, drift = audit_and_drift(tmp_path, b, a, write_labels(tmp_path / "labels.csv", y))
    h = audit["variants"]["h"]
    assert (drift.before, drift.refit) == pytest.approx(tuple(h["accuracy_by_run"]), abs=1e-12)
    assert drift.churn_refit == pytest.approx(h["churn"], abs=1e-12) and drift.churn_refit > 0
    assert drift.stale_raw == pytest.approx(h["stale_accuracy_mean"], abs=1e-12)
