"""The downstream models (gbdt, mlp, any estimator), multi-label targets and per-key flips."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier

from stabcli.commands.audit_compute import band_label, frequency_bands
from stabcli.errors import InputError, OptionError
from stabcli.measure.align import generalized_procrustes
from stabcli.measure.downstream import DownstreamOptions, downstream_audit, make_model, parse_model_params
from stabcli.measure.downstream.flips import flips_summary, key_flips
from stabcli.measure.metrics import gram_blocks

N, D = 600, 8


def noisy_runs(runs=4, noise=0.6, seed=0, n=N):
    """Two Gaussian classes along two stable dimensions (a little noise per run); the other
    dimensions are redrawn for every run (pure training noise, no signal)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.standard_normal((n, D))
    x[:, :2] += 0.9 * (2 * y[:, None] - 1)
    out = []
    for _ in range(runs):
        run = x.copy()
        run[:, :2] += 0.1 * noise * rng.standard_normal((n, 2))
        run[:, 2:] = noise * rng.standard_normal((n, D - 2))
        out.append(run)
    return out, y


def audit(arrays, labels, **options):
    keys = [f"k{i}" for i in range(len(arrays[0]))]
    rotations, _ = generalized_procrustes(gram_blocks(arrays))
    names = [f"run-{r:03d}" for r in range(len(arrays))]
    return downstream_audit(arrays, keys, rotations, DownstreamOptions(labels, jobs=1, **options), names)


def write(path, y):
    path.write_text("".join(f"k{i},c{v}\n" for i, v in enumerate(y)))
    return path


def test_gbdt_and_mlp_churn_more_than_logistic_regression_on_noisy_embeddings(tmp_path):
    arrays, y = noisy_runs()
    labels = write(tmp_path / "y.csv", y)
    results = {m: audit(arrays, labels, model=m, variants=["h"])[0]["variants"]["h"] for m in ("logreg", "gbdt", "mlp")}
    for model, h in results.items():
        assert h["accuracy_mean"] > 0.7, model  # the planted direction is learned
    # a linear model at its optimum moves little with the noise; trees and nets fit it
    assert results["gbdt"]["churn"] > 1.5 * results["logreg"]["churn"] > 0
    assert results["mlp"]["churn"] > results["logreg"]["churn"]
    assert results["logreg"]["accuracy_mean"] >= results["gbdt"]["accuracy_mean"]


@pytest.mark.parametrize("model", ["gbdt", "mlp", "sklearn.ensemble:RandomForestClassifier"])
def test_seeded_models_refit_identically_on_identical_runs(tmp_path, model):
    arrays, y = noisy_runs(runs=1)
    ds, flips = audit([arrays[0], arrays[0].copy(), arrays[0].copy()], write(tmp_path / "y.csv", y), model=model)
    assert list(ds["variants"]) == ["h", "avg", "aligned", "phi:8"]  # costly models: no phi:2d by default
    for name, v in ds["variants"].items():
        assert v["accuracy_std"] in (0, None) and v["churn"] in (0, None), name
    assert ds["variants"]["h"]["flips"]["unstable_keys"] == 0
    assert not flips.by_variant["h"].flip_rate.any()


def test_an_estimator_by_import_path_with_parameters(tmp_path):
    arrays, y = noisy_runs(runs=3)
    labels = write(tmp_path / "y.csv", y)
    ds, _ = audit(arrays, labels, model="sklearn.svm:LinearSVC", model_params=["C=0.5"], variants=["h"])
    assert ds["model"] == "sklearn.svm:LinearSVC" and ds["model_params"] == {"C": 0.5}
    keys = np.arange(N)
    train, test = train_test_split(keys, test_size=0.2, random_state=0, stratify=y)
    from sklearn.svm import LinearSVC

    labels_y = np.array([f"c{v}" for v in y], dtype=object)
    direct = [
        accuracy_score(labels_y[test], LinearSVC(C=0.5, random_state=0).fit(a[train], labels_y[train]).predict(a[test]))
        for a in arrays
    ]
    assert ds["variants"]["h"]["accuracy_by_run"] == pytest.approx(direct, abs=1e-12)


def test_model_params_are_literals():
    assert parse_model_params(["max_iter=50", "hidden_layer_sizes=(16, 8)", "loss=log_loss", "x=None"]) == {
        "max_iter": 50,
        "hidden_layer_sizes": (16, 8),
        "loss": "log_loss",
        "x": None,
    }
    for bad, fragment in [
        ("max_iter", "not NAME=VALUE"),
        ("1x=3", "not NAME=VALUE"),
        ("f=__import__('os').system('true')", "not a Python literal"),
        ("a=1", None),
    ]:
        if fragment is None:
            continue
        with pytest.raises(OptionError, match=fragment):
            parse_model_params([bad])
    with pytest.raises(OptionError, match="given twice"):
        parse_model_params(["a=1", "a=2"])


@pytest.mark.parametrize(
    "model, params, task, fragment",
    [
        ("no_such_module_xyz:Model", (), "auto", "cannot import no_such_module_xyz"),
        ("sklearn.svm:NoSuchClass", (), "auto", "has no class NoSuchClass"),
        ("sklearn.svm", (), "auto", "or module:Class"),
        ("sklearn.preprocessing:StandardScaler", (), "auto", "not a scikit-learn estimator"),
        ("sklearn.linear_model:Ridge", (), "classification", "not a scikit-learn classifier"),
        ("sklearn.linear_model:LogisticRegression", (), "regression", "not a scikit-learn regressor"),
        ("gbdt", ("max_iter=-1",), "auto", "max_iter"),
        ("mlp", ("no_such_param=1",), "auto", "has no parameter no_such_param"),
        ("logreg", (), "regression", "logreg is for classification"),
        (None, ("alpha=1",), "auto", "needs --model"),
    ],
)
def test_bad_models_fail_when_the_options_are_built(tmp_path, model, params, task, fragment):
    with pytest.raises(OptionError, match=fragment):
        DownstreamOptions(tmp_path / "never-read.csv", model=model, model_params=params, task=task)


def test_an_estimator_that_fails_to_fit_is_one_input_error(tmp_path):
    arrays, y = noisy_runs(runs=2)
    # MultinomialNB refuses negative features: a fit failure, named with the model
    with pytest.raises(InputError, match=r"--model sklearn.naive_bayes:MultinomialNB: fitting failed \(ValueError"):
        audit(arrays, write(tmp_path / "y.csv", y), model="sklearn.naive_bayes:MultinomialNB", variants=["h"])


# ------------------------------------------------------------------ multi-label


GENRES = ["Action", "Comedy", "Drama", "Horror"]


def multilabel_runs(runs=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D))
    y = (x[:, :4] + 0.5 * rng.standard_normal((N, 4)) > 0.3).astype(int)  # label j planted on dimension j
    return [x + 0.5 * rng.standard_normal(x.shape) for _ in range(runs)], y


def test_multilabel_metrics_equal_scikit_learn_on_the_same_predictions(tmp_path):
    arrays, y = multilabel_runs()
    path = tmp_path / "movies.csv"
    path.write_text(
        "movieId,title,genres\n"
        + "".join(
            f'k{i},"Film {i}, The (1999)",{"|".join(g for g, f in zip(GENRES, row, strict=True) if f) or "(no genres listed)"}\n'
            for i, row in enumerate(y)
        )
    )
    warnings = []
    keys = [f"k{i}" for i in range(N)]
    rotations, _ = generalized_procrustes(gram_blocks(arrays))
    options = DownstreamOptions(path, jobs=1, variants=["h"])
    ds, _ = downstream_audit(arrays, keys, rotations, options, ["a", "b", "c"], on_warning=warnings.append)
    assert ds["task"] == "multilabel" and ds["classes"] == 4 and any("multi-label" in w for w in warnings)
    labeled = np.flatnonzero(y.sum(axis=1) > 0)  # "(no genres listed)" is no label
    target = y[labeled]
    train, test = train_test_split(np.arange(len(labeled)), test_size=0.2, random_state=0)
    preds = []
    for a in arrays:
        model = OneVsRestClassifier(LogisticRegression(max_iter=5000, tol=1e-6))
        preds.append(model.fit(a[labeled][train], target[train]).predict(a[labeled][test]))
    h = ds["variants"]["h"]
    for metric, direct in [
        ("f1_micro", [f1_score(target[test], p, average="micro") for p in preds]),
        ("f1_macro", [f1_score(target[test], p, average="macro") for p in preds]),
        ("subset_accuracy", [accuracy_score(target[test], p) for p in preds]),
    ]:
        assert h[f"{metric}_by_run"] == pytest.approx(direct, abs=1e-12), metric
    pairs = [(0, 1), (0, 2), (1, 2)]
    assert h["churn"] == pytest.approx(np.mean([np.mean(preds[i] != preds[j]) for i, j in pairs]), abs=1e-12)
    for j, genre in enumerate(GENRES):
        direct = np.mean([np.mean(preds[a][:, j] != preds[b][:, j]) for a, b in pairs])
        assert h["label_churn"][genre] == pytest.approx(direct, abs=1e-12)
    assert h["flips"]["flip_rate_mean"] == pytest.approx(h["churn"], abs=1e-12)
    assert h["churn"] > 0 and h["f1_micro_mean"] > 0.6


def test_multilabel_is_detected_in_every_genre_format(tmp_path):
    from stabcli.measure.downstream import targets_for

    keys = [str(i) for i in range(1, 11)]
    flags = ["0"] * 19
    rows = []
    for i in range(1, 11):
        f = list(flags)
        f[1] = "1"  # Action
        if i % 2:
            f[5] = "1"  # Comedy
        rows.append(f"{i}|Movie {i} (1995)|01-Jan-1995||http://x|" + "|".join(f))
    files = {
        "u.item": "\n".join(rows) + "\n",
        "movies.dat": "".join(f"{i}::Movie {i} (1995)::Action{'|Comedy' if i % 2 else ''}\n" for i in range(1, 11)),
        "pairs.csv": "".join(f"{i},Action\n" + (f"{i},Comedy\n" if i % 2 else "") for i in range(1, 11)),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="latin-1")
        said = []
        targets = targets_for(keys, DownstreamOptions(tmp_path / name, min_class_size=1), said.append)
        assert targets.task == "multilabel" and targets.classes == ["Action", "Comedy"], name
        assert targets.y[:, 1].tolist() == [1, 0] * 5 and said, name
    with pytest.raises(InputError, match="needs one label per key"):
        targets_for(keys, DownstreamOptions(tmp_path / "pairs.csv", task="classification"))


# ------------------------------------------------------------------ per-key flips


def test_key_flips_known_answers():
    runs = [np.array(["a", "a", "b", "b"]), np.array(["a", "b", "b", "a"]), np.array(["a", "b", "a", "b"])]
    flips = key_flips("classification", runs, 1.0, 0, ["a", "b"])
    # key 0 never flips; key 1: a,b,b -> 2 of 3 pairs differ; key 2: b,b,a -> 2/3; key 3: b,a,b -> 2/3
    assert flips.flip_rate.tolist() == pytest.approx([0, 2 / 3, 2 / 3, 2 / 3])
    # reference run 0: negatives (a) are keys 0,1; run 1 makes key 1 positive, run 2 key 1: mean 1/2
    assert flips.negative_to_positive == pytest.approx(0.5)
    # positives (b) keys 2,3: run 1 flips key 3, run 2 flips key 2: 1/2 each
    assert flips.positive_to_negative == pytest.approx(0.5) and flips.positive_class == "b"
    regression = key_flips("regression", [np.array([1.0, 2.0]), np.array([1.5, 2.0]), np.array([0.5, 2.0])], 4.0, 0, [])
    assert regression.prediction_range.tolist() == [4.0, 0.0]  # (1.5 − 0.5) × 4 label units

    def bands(f):
        return [(band_label(lo, hi), lo, hi, m) for lo, hi, m in frequency_bands(f)]

    summary = flips_summary(regression, ["x", "y"], {"x": "Ex"}, np.array([12, -1]), 5, bands)
    assert summary["most_unstable"] == [{"key": "x", "name": "Ex", "frequency": 12, "value": 4.0}]
    assert summary["unstable_keys"] == 1 and summary["flip_rate_mean"] is None
    assert summary["by_frequency"] == [
        {"band": "6–20", "low": 6, "high": 20, "keys": 1, "mean": 4.0, "unstable_share": 1.0}
    ]
    assert flips_summary(regression, ["x", "y"], None, None, 5, bands)["by_frequency"] is None


def test_mean_flip_rate_is_the_churn_and_the_per_key_columns_cover_the_test_keys(tmp_path):
    arrays, y = noisy_runs(runs=4, noise=1.0)
    ds, flips = audit(arrays, write(tmp_path / "y.csv", y), variants=["h", "aligned"], top=3)
    for name in ("h", "aligned"):
        v = ds["variants"][name]
        assert v["flips"]["flip_rate_mean"] == pytest.approx(v["churn"], abs=1e-12) and v["churn"] > 0
        assert len(v["flips"]["most_unstable"]) == 3
        values = [k["value"] for k in v["flips"]["most_unstable"]]
        assert values == sorted(values, reverse=True) and values[0] == pytest.approx(
            flips.by_variant[name].flip_rate.max()
        )
    keys = [f"k{i}" for i in range(N)]
    columns = flips.columns(keys)
    assert set(columns) == {"flip_rate[h]", "flip_rate[aligned]"}
    assert np.count_nonzero(~np.isnan(columns["flip_rate[h]"])) == ds["test"]
    assert np.nanmean(columns["flip_rate[h]"]) == pytest.approx(ds["variants"]["h"]["churn"])


def test_make_model_wraps_classifiers_one_vs_rest_for_multilabel():
    model = make_model("gbdt", "multilabel")
    assert isinstance(model, OneVsRestClassifier) and model.estimator.random_state == 0


NOISY_MODEL = """
import os

from sklearn.linear_model import LogisticRegression


class Noisy(LogisticRegression):
    def fit(self, X, y, sample_weight=None):
        print("python-level noise")  # as an estimator with verbose=True does
        os.write(1, b"fd-level noise\\n")  # as libsvm's printf does
        return super().fit(X, y, sample_weight)
"""


@pytest.mark.parametrize("command", ["audit", "drift"])
def test_what_a_users_model_prints_goes_to_stderr_and_json_stays_parseable(tmp_path, command):
    """``--model sklearn.svm:SVC --model-param verbose=True`` wrote libsvm's progress into
    ``--format json``'s stdout; both a Python print and a write to descriptor 1 now reach stderr."""
    import json
    import os
    import subprocess
    import sys

    from conftest import make_runset

    (tmp_path / "noisy_model.py").write_text(NOISY_MODEL)
    runs = make_runset(tmp_path / "runs", runs=2, n=40, dim=4)
    labels = tmp_path / "labels.tsv"
    labels.write_text("".join(f"k{i}\tg{i % 2}\n" for i in range(40)))
    inputs = [runs] if command == "audit" else [runs / "run-000" / "vectors.npy", runs / "run-001" / "vectors.npy"]
    args = [*inputs, "--labels", labels, "--model", "noisy_model:Noisy", "--format", "json"]
    args += ["--knn-k", "3"] if command == "audit" else []
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "stabcli", command, *map(str, args)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["downstream"] is not None
    assert "python-level noise" in result.stderr and "fd-level noise" in result.stderr
