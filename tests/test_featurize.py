import json

import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.base import clone
from sklearn.kernel_approximation import RBFSampler
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from conftest import runner
from stabcli import FourierFeaturizer, ProcrustesAligner
from stabcli.cli.app import app
from stabcli.commands.audit import load_runs
from stabcli.commands.featurize import FeaturizeOptions, featurize
from stabcli.inputs.embeddings import read_embedding, write_embedding
from stabcli.measure.fourier import choose_dimension, gaussian_kernel_error
from stabcli.runset import RunSet


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_kernel(x, sigma):
    sq = np.square(x[:, None, :] - x[None, :, :]).sum(-1)
    return np.exp(-(sigma**2) * sq / 2)


def test_features_follow_the_formula():
    X = np.random.default_rng(1).standard_normal((7, 4))
    phi = FourierFeaturizer(n_components=10, sigma=0.7, random_state=3).fit_transform(X)
    U = np.random.default_rng(3).normal(0.0, 0.7, size=(4, 5))
    Z = unit(X) @ U
    np.testing.assert_allclose(phi, np.sqrt(1 / 5) * np.hstack([np.cos(Z), np.sin(Z)]), atol=1e-12)
    raw = FourierFeaturizer(n_components=10, sigma=0.7, normalize=False, random_state=3).fit_transform(X)
    np.testing.assert_allclose(raw, np.sqrt(1 / 5) * np.hstack([np.cos(X @ U), np.sin(X @ U)]), atol=1e-12)


def mean_error(n_components, seeds=range(10), sigma=1.0):
    X = unit(np.random.default_rng(0).standard_normal((60, 8)))
    K = exact_kernel(X, sigma)
    ours, theirs = [], []
    for seed in seeds:
        phi = FourierFeaturizer(
            n_components=n_components, sigma=sigma, normalize=False, random_state=seed
        ).fit_transform(X)
        ours.append(np.abs(phi @ phi.T - K).mean())
        rbf = RBFSampler(gamma=sigma**2 / 2, n_components=n_components, random_state=seed).fit_transform(X)
        theirs.append(np.abs(rbf @ rbf.T - K).mean())
    return np.mean(ours), np.mean(theirs)


def test_kernel_error_shrinks_like_one_over_sqrt_m_and_is_no_worse_than_rbfsampler():
    small, rbf_small = mean_error(32)
    large, rbf_large = mean_error(512)
    assert 2.5 < small / large < 6.5  # sqrt(512/32) = 4
    assert small <= rbf_small and large <= rbf_large


def test_kernel_is_rotation_invariant_within_monte_carlo_error():
    X = np.random.default_rng(2).standard_normal((40, 6))
    Q = ortho_group.rvs(6, random_state=0)
    f = FourierFeaturizer(n_components=2048, random_state=0)
    a = f.fit_transform(X)
    b = f.transform(X @ Q)
    assert np.abs(a @ a.T - b @ b.T).mean() < 3 / np.sqrt(1024)
    assert np.abs(a - b).mean() > 0.01  # the features themselves do change


def test_sklearn_compatibility():
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(FourierFeaturizer(n_components=8, random_state=0), on_fail=None)
    ran = [r for r in results if r["status"] == "passed"]
    failed = [r for r in results if r["status"] == "failed"]
    assert len(ran) > 20
    # sklearn forces n_components=1 in some checks; an odd M is rejected by design (cos/sin pairs)
    assert all("must be an even integer" in str(r["exception"]) for r in failed), failed
    f = FourierFeaturizer(n_components=16, sigma=2.0, random_state=1)
    assert clone(f).get_params() == f.get_params()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 5))
    y = (X[:, 0] > 0).astype(int)
    pipe = make_pipeline(FourierFeaturizer(n_components=64, random_state=0), LogisticRegression()).fit(X, y)
    assert pipe.score(X, y) > 0.8
    names = f.fit(X).get_feature_names_out()
    assert len(names) == 16 and names[0] == "fourierfeaturizer0"
    with pytest.raises(Exception, match="not fitted"):
        FourierFeaturizer().transform(X)


def test_procrustes_aligner_recovers_a_rotated_copy():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((50, 6))
    rotated = ref @ ortho_group.rvs(6, random_state=1)
    aligner = ProcrustesAligner(reference=ref)
    np.testing.assert_allclose(aligner.fit_transform(rotated), ref, atol=1e-10)
    np.testing.assert_array_equal(clone(aligner).get_params()["reference"], ref)
    y = (ref[:, 0] > 0).astype(int)
    pipe = make_pipeline(
        ProcrustesAligner(reference=ref), FourierFeaturizer(n_components=64, random_state=0), LogisticRegression()
    ).fit(rotated, y)
    assert pipe.score(rotated, y) > 0.8
    assert list(aligner.get_feature_names_out())[:2] == ["aligned0", "aligned1"]


@pytest.fixture
def emb(tmp_path):
    rng = np.random.default_rng(0)
    keys = [f"k{i}" for i in range(100)]
    vectors = rng.standard_normal((100, 8)).astype(np.float32)
    write_embedding(tmp_path / "in.npy", keys, vectors)
    return tmp_path / "in.npy", keys, vectors


def test_streaming_equals_unchunked_and_is_bitwise_reproducible(tmp_path, emb):
    path, keys, vectors = emb
    featurize(path, tmp_path / "a.npy", FeaturizeOptions(dim=16, chunk_rows=7))
    featurize(path, tmp_path / "b.npy", FeaturizeOptions(dim=16, chunk_rows=100_000))
    a = np.load(tmp_path / "a.npy")
    assert a.dtype == np.float32 and a.shape == (100, 16)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
    # files are computed in float32: within a few float32 ulps of the float64 estimator
    direct = FourierFeaturizer(n_components=16, random_state=0).fit_transform(vectors.astype(np.float64))
    np.testing.assert_allclose(a, direct, rtol=0, atol=3e-7)
    np.testing.assert_array_equal(a, FourierFeaturizer(n_components=16, random_state=0).fit_transform(vectors))
    assert read_embedding(tmp_path / "a.npy").keys == keys
    side = json.loads((tmp_path / "a.npy.featurize.json").read_text())
    assert {k: side[k] for k in ("seed", "sigma", "dim", "input_dim", "normalize")} == {
        "seed": 0,
        "sigma": 1.0,
        "dim": 16,
        "input_dim": 8,
        "normalize": True,
    }
    U = FourierFeaturizer(n_components=16, random_state=0).fit(vectors[:1]).directions_
    import hashlib

    assert side["directions_sha256"] == hashlib.sha256(U.astype("<f8").tobytes()).hexdigest()


def test_rows_float32_cannot_normalize_are_still_exact(tmp_path):
    """Zero rows stay zero before the cosine; rows whose float32 squares underflow (1e-25) or
    overflow (1e25) are normalized in float64 instead of being taken for zero or infinite."""
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((12, 6)).astype(np.float32)
    vectors[3] = 0
    vectors[7] *= np.float32(1e-25)
    vectors[11] *= np.float32(1e25)
    write_embedding(tmp_path / "in.npy", [f"k{i}" for i in range(12)], vectors)
    featurize(tmp_path / "in.npy", tmp_path / "out.npy", FeaturizeOptions(dim=8, chunk_rows=4))  # one odd row per chunk
    x = vectors.astype(np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    z = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0) @ np.random.default_rng(0).normal(0.0, 1.0, (6, 4))
    expected = np.sqrt(1 / 4) * np.hstack([np.cos(z), np.sin(z)])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=0, atol=3e-7)


@pytest.mark.parametrize("name, binary", [("o.txt", False), ("o.bin", True)])
def test_word2vec_outputs_load_in_gensim(tmp_path, emb, name, binary):
    from gensim.models import KeyedVectors

    path, keys, _ = emb
    featurize(path, tmp_path / name, FeaturizeOptions(dim=6))
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / name), binary=binary)
    assert kv.index_to_key == keys
    np.testing.assert_allclose(
        kv.vectors, np.load(featurize(path, tmp_path / "x.npy", FeaturizeOptions(dim=6)).output), atol=1e-6
    )


@pytest.mark.parametrize("fmt, name", [("kv", "o.kv"), ("parquet", "o.parquet"), ("npy", "o.vectors")])
def test_other_output_formats_round_trip(tmp_path, emb, fmt, name):
    path, keys, _ = emb
    direct = np.load(featurize(path, tmp_path / "d.npy", FeaturizeOptions(dim=6)).output)
    featurize(path, tmp_path / name, FeaturizeOptions(dim=6, output_format=fmt))
    if fmt == "npy":
        np.testing.assert_array_equal(np.load(tmp_path / name, allow_pickle=False), direct)
        assert (tmp_path / "o.keys.txt").read_text().splitlines() == keys
    else:
        got = read_embedding(tmp_path / name)
        assert got.keys == keys
        np.testing.assert_array_equal(np.asarray(got.vectors), direct)


def test_align_to_recovers_the_reference(tmp_path, emb):
    path, keys, vectors = emb
    rotated = vectors @ ortho_group.rvs(8, random_state=3).astype(np.float32)
    write_embedding(tmp_path / "rot.npy", keys[::-1], rotated[::-1])  # other key order
    result = featurize(tmp_path / "rot.npy", tmp_path / "back.npy", FeaturizeOptions(dim=0, align_to=path))
    back = read_embedding(tmp_path / "back.npy")
    order = [back.keys.index(k) for k in keys]
    np.testing.assert_allclose(np.asarray(back.vectors)[order], vectors, atol=1e-5)
    assert result.residual_before > 0.5 and result.residual_after < 1e-5


def test_epsilon_picks_a_dimension_that_meets_it(emb):
    _, _, vectors = emb
    dim, error = choose_dimension(vectors, 1.0, 0.02, 0, True)
    assert dim % 2 == 0 and error <= 0.02
    assert error == gaussian_kernel_error(vectors, 1.0, dim, 0, True)
    assert gaussian_kernel_error(vectors, 1.0, dim // 2, 0, True) > 0.02  # the doubling step before missed it


def test_run_set_becomes_a_run_set_audit_reads(tmp_path, sessions_file):
    from stabcli.training.pretrain import TrainConfig, pretrain

    pretrain(tmp_path / "runs", sessions_file, TrainConfig(dim=6, epochs=2), runs=3, jobs=1)
    result = featurize(tmp_path / "runs", tmp_path / "phi", FeaturizeOptions(dim=10))
    assert result.runs == 3
    runs = load_runs([tmp_path / "phi"])
    assert runs.dim == 10 and len(runs.arrays) == 3 and runs.keys == load_runs([tmp_path / "runs"]).keys
    manifest = json.loads((tmp_path / "phi" / "stabcli.json").read_text())
    assert manifest["featurize"]["dim"] == 10 and manifest["source_run_set"].endswith("runs")
    # written through the run-set writer: the source's keys, counts, losses and logs, no lock or partial left
    for name in ("keys.txt", "key_counts.txt"):
        assert (tmp_path / "phi" / name).read_bytes() == (tmp_path / "runs" / name).read_bytes()
    source, derived = RunSet.open(tmp_path / "runs"), RunSet.open(tmp_path / "phi")
    assert derived.runs == [0, 1, 2] and derived.key_counts() == source.key_counts()
    assert [derived.losses(i) for i in derived.runs] == [source.losses(i) for i in source.runs]
    assert derived.log(1) == source.log(1) and derived.log(1)
    assert sorted(p.name for p in (tmp_path / "phi").iterdir()) == [
        "key_counts.txt",
        "keys.txt",
        "run-000",
        "run-001",
        "run-002",
        "stabcli.json",
    ]
    U = FourierFeaturizer(n_components=10, random_state=0).fit(np.zeros((1, 6))).directions_
    raw = np.load(tmp_path / "runs" / "run-002" / "vectors.npy").astype(np.float64)
    phi = np.load(tmp_path / "phi" / "run-002" / "vectors.npy")
    np.testing.assert_allclose(
        phi, FourierFeaturizer(n_components=10, random_state=0).fit(raw).transform(raw), rtol=0, atol=3e-7
    )
    assert (
        manifest["featurize"]["directions_sha256"]
        == __import__("hashlib").sha256(U.astype("<f8").tobytes()).hexdigest()
    )


def test_save_transform_holds_u_and_recipe(tmp_path, emb):
    path, _, _ = emb
    featurize(path, tmp_path / "o.npy", FeaturizeOptions(dim=8, align_to=path), save_transform=tmp_path / "t.npz")
    saved = np.load(tmp_path / "t.npz")
    assert saved["directions"].shape == (8, 4) and saved["rotation"].shape == (8, 8)
    assert "cos" in str(saved["recipe"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dim", "7"], "--dim: 7 must be an even integer >= 2"),
        (["--dim", "0"], "--dim: 0 only aligns: it needs --align-to"),
        (["--sigma", "-1"], "--sigma: must be greater than 0, got -1"),
        (["--chunk-rows", "0"], "--chunk-rows: must be at least 1, got 0"),
    ],
)
def test_cli_bad_options(tmp_path, emb, args, message):
    path, _, _ = emb
    result = runner.invoke(app, ["featurize", str(path), "--out", str(tmp_path / "o.npy"), *args])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "o.npy").exists()


def test_cli_bad_inputs_leave_no_output(tmp_path, emb):
    path, keys, vectors = emb
    bad = vectors.copy()
    bad[50, 3] = np.nan
    np.save(tmp_path / "nan.npy", bad)  # write_embedding refuses NaN
    (tmp_path / "nan.keys.txt").write_text("\n".join(keys) + "\n", encoding="utf-8")
    result = runner.invoke(
        app, ["featurize", str(tmp_path / "nan.npy"), "--out", str(tmp_path / "o.npy"), "--chunk-rows", "10"]
    )
    assert result.exit_code == 2 and "nan.npy: key 'k50' has NaN or infinite values" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.keys.txt", "in.npy", "nan.keys.txt", "nan.npy"]
    write_embedding(tmp_path / "other.npy", ["zz"], vectors[:1])
    result = runner.invoke(
        app, ["featurize", str(path), "--out", str(tmp_path / "o.npy"), "--align-to", str(tmp_path / "other.npy")]
    )
    assert result.exit_code == 2 and "no keys in common" in result.output
    result = runner.invoke(app, ["featurize", str(path), "--out", str(tmp_path / "missing" / "o.npy")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_cli_featurize_reports(tmp_path, emb):
    path, _, _ = emb
    result = runner.invoke(app, ["featurize", str(path), "--out", str(tmp_path / "o.npy"), "--epsilon", "0.05"])
    assert result.exit_code == 0, result.output
    assert "measured mean kernel error" in result.output and "Rahimi–Recht" in result.output


# ---- options, outputs and faults (issues 12, 13, 14)


def test_featurize_options_validate_themselves_once():
    import dataclasses

    from stabcli.errors import OptionError

    assert FeaturizeOptions().dim == 128 and FeaturizeOptions(epsilon=0.1).dim is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        FeaturizeOptions().dim = 4
    for kwargs, param in [
        ({"dim": 7}, "dim"),
        ({"dim": 8, "epsilon": 0.1}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"sigma": float("nan")}, "sigma"),
        ({"dim": True}, "dim"),
        ({"chunk_rows": 0}, "chunk_rows"),
        ({"output_format": "csv"}, "output_format"),
        ({"reference": 2}, "reference"),
        ({"normalize": "yes"}, "normalize"),
    ]:
        with pytest.raises(OptionError) as info:
            FeaturizeOptions(**kwargs)
        assert info.value.param == param and isinstance(info.value, ValueError)


def test_estimators_validate_parameters_the_sklearn_way():
    from stabcli.errors import OptionError

    X = np.random.default_rng(0).standard_normal((6, 3))
    for kwargs in (
        {"sigma": -1.0},
        {"sigma": 0},
        {"random_state": -1},
        {"normalize": "yes"},
        {"n_components": 0},
        {"n_components": 2.5},
    ):
        with pytest.raises(ValueError, match="parameter of FourierFeaturizer must be"):
            FourierFeaturizer(**kwargs).fit(X)
    with pytest.raises(OptionError, match="n_components: 3 must be an even integer"):
        FourierFeaturizer(n_components=3).fit(X)
    with pytest.raises(ValueError, match="reference: must have the shape of X"):
        ProcrustesAligner(reference=np.zeros((2, 3))).fit(X)
    assert set(FourierFeaturizer._parameter_constraints) == set(FourierFeaturizer().get_params())
    assert set(ProcrustesAligner._parameter_constraints) == set(ProcrustesAligner().get_params())


def test_existing_outputs_need_force_which_replaces_them(tmp_path, emb):
    path, _, _ = emb
    out = tmp_path / "o.npy"
    assert runner.invoke(app, ["featurize", str(path), "--out", str(out), "--dim", "8"]).exit_code == 0
    result = runner.invoke(app, ["featurize", str(path), "--out", str(out), "--dim", "4"])
    assert result.exit_code == 2 and f"--out {out}: already exists; pass --force" in result.stderr
    assert np.load(out).shape == (100, 8)
    result = runner.invoke(app, ["featurize", str(path), "--out", str(out), "--dim", "4", "--force"])
    assert result.exit_code == 0, result.output
    assert np.load(out).shape == (100, 4) and json.loads((tmp_path / "o.npy.featurize.json").read_text())["dim"] == 4
    assert f"(sidecar {tmp_path / 'o.npy.featurize.json'})" in result.stdout  # as given, with its directory
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.keys.txt",
        "in.npy",
        "o.keys.txt",
        "o.npy",
        "o.npy.featurize.json",
    ]


def test_force_replaces_a_featurized_run_set(tmp_path, sessions_file):
    from stabcli.training.pretrain import TrainConfig, pretrain

    pretrain(tmp_path / "runs", sessions_file, TrainConfig(dim=6, epochs=1), runs=2, jobs=1)
    featurize(tmp_path / "runs", tmp_path / "phi", FeaturizeOptions(dim=10))
    result = featurize(tmp_path / "runs", tmp_path / "phi", FeaturizeOptions(dim=4), force=True)
    assert result.output_dim == 4 and load_runs([tmp_path / "phi"]).dim == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_align_to_a_run_set_uses_its_reference_run(tmp_path, sessions_file):
    from stabcli.training.pretrain import TrainConfig, pretrain

    pretrain(tmp_path / "runs", sessions_file, TrainConfig(dim=6, epochs=1), runs=3, jobs=1)
    run1 = read_embedding(tmp_path / "runs" / "run-001" / "vectors.npy")
    write_embedding(tmp_path / "run1.npy", load_runs([tmp_path / "runs"]).keys, np.asarray(run1.vectors))
    rotated = np.asarray(run1.vectors) @ ortho_group.rvs(6, random_state=2).astype(np.float32)
    write_embedding(tmp_path / "rot.npy", load_runs([tmp_path / "runs"]).keys, rotated)
    result = featurize(
        tmp_path / "rot.npy", tmp_path / "back.npy", FeaturizeOptions(dim=0, align_to=tmp_path / "runs", reference=1)
    )
    assert result.residual_after < 1e-4 < result.residual_before
    np.testing.assert_allclose(np.load(tmp_path / "back.npy"), run1.vectors, atol=1e-4)
    side = json.loads((tmp_path / "back.npy.featurize.json").read_text())
    assert side["align_to_run"] == "run-001"
    from stabcli.fs.atomic import file_sha256

    assert side["align_to_sha256"] == file_sha256(tmp_path / "runs" / "run-001" / "vectors.npy")


def test_keyless_arrays_align_by_position_with_a_note(tmp_path):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((40, 5)).astype(np.float32)
    np.save(tmp_path / "ref.npy", ref)
    np.save(tmp_path / "x.npy", ref @ ortho_group.rvs(5, random_state=1).astype(np.float32))
    result = runner.invoke(
        app,
        [
            "featurize",
            str(tmp_path / "x.npy"),
            "--out",
            str(tmp_path / "o.npy"),
            "--dim",
            "0",
            "--align-to",
            str(tmp_path / "ref.npy"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == "note: no input has a keys file: rows are matched by position"
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), ref, atol=1e-5)


def test_a_late_failure_removes_every_output_and_names_the_real_file(tmp_path, emb, monkeypatch):
    """All or nothing: --save-transform fails after the features, keys and sidecar were staged."""
    import errno

    from stabcli.commands import featurize as featurize_module

    path, _, _ = emb

    def disk_full(plan, target, *args):
        raise OSError(errno.ENOSPC, "No space left on device", str(plan.staging(target)))

    monkeypatch.setattr(featurize_module, "_save_transform", disk_full)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(
        app, ["featurize", str(path), "--out", str(tmp_path / "o.npy"), "--save-transform", str(tmp_path / "t.npz")]
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {tmp_path / 't.npz'}: cannot write (No space left on device)"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_chunk_rows_that_cannot_fit_are_refused_naming_the_option(tmp_path, monkeypatch):
    from stabcli.fs import resources

    write_embedding(tmp_path / "in.npy", [f"k{i}" for i in range(5000)], np.ones((5000, 4), np.float32))
    monkeypatch.setattr(resources, "available_memory", lambda: 4 << 20)
    args = ["featurize", str(tmp_path / "in.npy"), "--out", str(tmp_path / "o.npy"), "--dim", "128"]
    assert runner.invoke(app, args).exit_code == 0  # the default chunk (~1 MB of output) fits
    result = runner.invoke(app, args + ["--chunk-rows", "5000", "--force"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: --chunk-rows: 5,000 rows per chunk for 5,000 rows of dimension 4 (npy output) needs about "
    ), result.stderr
    assert result.stderr.strip().endswith("but only 4.0 MB of memory is available")


def _limited(args, limit):
    """Run the stabcli CLI in a child whose files may not exceed ``limit`` bytes (SIGXFSZ ignored)."""
    import subprocess
    import sys

    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from stabcli.cli.app import main\n"
        "sys.argv = ['stabcli'] + sys.argv[1:]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["o.npy", "o.vec", "o.kv"])
def test_a_file_size_limit_names_the_real_file_and_leaves_nothing(tmp_path, name):
    write_embedding(
        tmp_path / "in.npy",
        [f"k{i}" for i in range(2000)],
        np.random.default_rng(0).standard_normal((2000, 8)).astype(np.float32),
    )
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _limited(["featurize", tmp_path / "in.npy", "--out", tmp_path / name, "--dim", "64"], 100_000)
    assert done.returncode == 2, done
    assert done.stderr.strip() == f"error: {tmp_path / name}: cannot write (File too large)", done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_rahimi_recht_dimension_in_logarithms():
    import math

    from stabcli.measure.fourier import rahimi_recht_dimension

    for epsilon, sigma, dim, diameter in [(0.05, 1.0, 4, 2.0), (0.01, 0.5, 64, 2.0), (0.1, 3.0, 16, 7.5)]:
        direct = 4 * (dim + 2) / epsilon**2 * math.log(2**8 * (sigma * math.sqrt(dim) * diameter / epsilon) ** 2 / 0.05)
        assert rahimi_recht_dimension(epsilon, sigma, dim, diameter) == 2 * math.ceil(direct)
    assert rahimi_recht_dimension(0.1, 1e200, 4, 2.0) > 0  # (σ·diam/ε)² overflows a float; its logarithm does not
    assert rahimi_recht_dimension(0.1, 1.0, 4, 0.0) > 0  # all-zero rows


def test_a_keyless_file_named_like_a_run_is_still_keyless(tmp_path, emb):
    """Keylessness is what was read (no keys file beside an .npy), not a file name."""
    path, _, vectors = emb
    np.save(tmp_path / "vectors.npy", vectors)
    result = runner.invoke(
        app, ["featurize", str(tmp_path / "vectors.npy"), "--out", str(tmp_path / "o.npy"), "--align-to", str(path)]
    )
    assert result.exit_code == 2 and "vectors.npy: has no keys file (vectors.keys.txt)" in result.stderr


@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e200])
def test_float64_of_any_magnitude_normalizes_before_the_float32_cast(tmp_path, scale):
    """1e300 rows: ‖x‖² overflows float64 and the float32 cast gives inf; the features must
    equal those of the same data at ordinary scale (normalisation removes the scale)."""
    base = np.random.default_rng(4).standard_normal((30, 6))
    np.save(tmp_path / "big.npy", base * scale)
    np.save(tmp_path / "plain.npy", base)
    outs = {}
    for name in ("big", "plain"):
        result = runner.invoke(
            app, ["featurize", str(tmp_path / f"{name}.npy"), "--out", str(tmp_path / f"{name}-phi.npy"), "--dim", "16"]
        )
        assert result.exit_code == 0, result.stderr
        assert "warning" not in result.stderr.lower() and "NaN" not in result.stderr
        outs[name] = np.load(tmp_path / f"{name}-phi.npy")
    assert np.isfinite(outs["big"]).all()
    np.testing.assert_allclose(outs["big"], outs["plain"], atol=1e-6)
