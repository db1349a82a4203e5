"""The reproducibility contract (docs/reproducibility.md), claim by claim.

Claims about "another CPU" are tested by running stabcli in a child process with another
OpenBLAS kernel (``OPENBLAS_CORETYPE``: numpy's and scipy's wheels are built with
DYNAMIC_ARCH, so any x86-64 machine can run the kernels its CPU supports). Bits are asserted
only where the contract promises bits: the same machine, the same kernel.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes

from conftest import runner
from stabcli import FourierFeaturizer, ProcrustesAligner
from stabcli.cli.app import app
from stabcli.commands.featurize import FeaturizeOptions, featurize
from stabcli.inputs.embeddings import write_embedding
from stabcli.measure.fourier import MATMUL_BLOCK_ROWS, aligned_chunk_rows, blocked_matmul
from stabcli.training.pretrain import TrainConfig, pretrain

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"


@pytest.fixture
def cli():
    """Run the command line in this process; fails the test on a non-zero exit."""

    def run(args: list[str]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        return result

    return run


# kernels and the CPU flags they need (OpenBLAS dies with SIGILL on a CPU without them)
# (Linux names SSE3 "pni" in /proc/cpuinfo)
KERNELS = {
    "Prescott": {"pni"},
    "Sandybridge": {"avx"},
    "Haswell": {"avx2", "fma"},
    "Zen": {"avx2", "fma"},
    "SkylakeX": {"avx512f", "avx512bw"},
}


def _openblas_kernels() -> list[str]:
    """The OpenBLAS kernels this machine can run, or [] when numpy does not use a
    DYNAMIC_ARCH OpenBLAS on x86-64 (the kernel cannot be chosen there)."""
    from threadpoolctl import threadpool_info

    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    if not any(lib.get("internal_api") == "openblas" for lib in threadpool_info()):
        return []
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split())
    except (OSError, IndexError):
        return []
    return [name for name, needs in KERNELS.items() if needs <= flags]


OTHER_KERNELS = _openblas_kernels()
_skip_without_kernels = pytest.mark.skipif(
    len(OTHER_KERNELS) < 2, reason="needs an x86-64 CPU and numpy on a DYNAMIC_ARCH OpenBLAS to choose kernels"
)


def needs_kernels(test):
    """A claim about other kernels: its children run under each of OTHER_KERNELS, whatever the
    parent's kernel, so .ci/kernels leaves it out of its per-kernel reruns (marker cross_kernel)."""
    return pytest.mark.cross_kernel(_skip_without_kernels(test))


def stabcli_child(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python -m stabcli ARGS`` in a child with extra environment variables (a BLAS kernel,
    a thread count); fails the test on a non-zero exit."""
    environ = dict(os.environ) | env  # the parent's kernel (CI reruns these tests under others) unless overridden
    result = subprocess.run(
        [sys.executable, "-m", "stabcli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def numbers(value, path=""):
    """Every leaf of a JSON value, by its path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from numbers(item, f"{path}.{i}")
    else:
        yield path, value


def assert_json_close(a: dict, b: dict, rtol: float, atol: float) -> None:
    """Same keys, same strings, booleans and integers; floats within rtol·max(|a|,|b|) + atol."""
    left, right = dict(numbers(a)), dict(numbers(b))
    assert left.keys() == right.keys()
    for path, x in left.items():
        y = right[path]
        if isinstance(x, float) or isinstance(y, float):
            assert x is not None and y is not None, path
            assert abs(x - y) <= rtol * max(abs(x), abs(y)) + atol, (path, x, y)
        else:
            assert x == y, (path, x, y)


@pytest.fixture(scope="module")
def runsets(tmp_path_factory):
    """A 4-run set and a one-run refresh (another seed) of the bundled sample sessions."""
    root = tmp_path_factory.mktemp("repro")
    config = TrainConfig(dim=16, epochs=2)
    pretrain(root / "rs", SAMPLE / "sessions.txt", config, runs=4, seed=0)
    pretrain(root / "refresh", SAMPLE / "sessions.txt", config, runs=1, seed=100)
    return root


# ------------------------------------------------------------------ featurize


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocked_matmul_gives_the_same_bits_for_any_aligned_chunking(dtype):
    """Chunks that start at multiples of the GEMM block (what featurize streams: every chunk
    size is rounded up to whole blocks) give the bits of the whole product."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3 * MATMUL_BLOCK_ROWS + 5, 37)).astype(dtype)
    W = rng.standard_normal((37, 23)).astype(dtype)
    whole = blocked_matmul(X, W)
    np.testing.assert_allclose(whole, X.astype(np.float64) @ W.astype(np.float64), rtol=1e-5, atol=1e-5)
    for rows in (1, 7, MATMUL_BLOCK_ROWS - 1, MATMUL_BLOCK_ROWS + 1, 500, 10_000):
        chunk = aligned_chunk_rows(rows)
        assert chunk % MATMUL_BLOCK_ROWS == 0 and chunk >= rows
        parts = np.vstack([blocked_matmul(X[s : s + chunk], W) for s in range(0, len(X), chunk)])
        assert parts.tobytes() == whole.tobytes(), rows


@pytest.mark.parametrize("align", [False, True])
def test_featurize_bits_do_not_depend_on_the_chunk_size(tmp_path, align):
    """Claim: featurize output is bitwise identical on one machine whatever --chunk-rows."""
    rng = np.random.default_rng(1)
    keys = [f"k{i}" for i in range(600)]
    vectors = rng.standard_normal((600, 24)).astype(np.float32)
    write_embedding(tmp_path / "in.npy", keys, vectors)
    write_embedding(tmp_path / "ref.npy", keys, vectors @ np.linalg.qr(rng.standard_normal((24, 24)))[0])
    align_to = tmp_path / "ref.npy" if align else None
    outputs = []
    for chunk in (3, 255, 257, 100_000):
        out = tmp_path / f"out{chunk}.npy"
        featurize(tmp_path / "in.npy", out, FeaturizeOptions(dim=32, chunk_rows=chunk, align_to=align_to))
        outputs.append(out.read_bytes())
    assert len(set(outputs)) == 1


def test_featurize_file_equals_the_estimators_bit_for_bit(tmp_path):
    """Claim: a file featurize writes equals FourierFeaturizer (and ProcrustesAligner) on the
    same float32 rows, bit for bit, on one machine."""
    rng = np.random.default_rng(2)
    keys = [f"k{i}" for i in range(300)]
    vectors = rng.standard_normal((300, 12)).astype(np.float32)
    reference = vectors @ np.linalg.qr(rng.standard_normal((12, 12)))[0].astype(np.float32)
    write_embedding(tmp_path / "in.npy", keys, vectors)
    write_embedding(tmp_path / "ref.npy", keys, reference)
    featurize(tmp_path / "in.npy", tmp_path / "phi.npy", FeaturizeOptions(dim=20, chunk_rows=33, seed=5))
    expected = FourierFeaturizer(n_components=20, random_state=5).fit_transform(vectors)
    assert np.load(tmp_path / "phi.npy").tobytes() == expected.tobytes()
    featurize(
        tmp_path / "in.npy", tmp_path / "al.npy", FeaturizeOptions(dim=0, chunk_rows=33, align_to=tmp_path / "ref.npy")
    )
    aligner = ProcrustesAligner(reference=reference.astype(np.float64)).fit(vectors.astype(np.float64))
    rotated = blocked_matmul(vectors, aligner.rotation_.astype(np.float32))
    assert np.load(tmp_path / "al.npy").tobytes() == rotated.tobytes()


def test_featurize_bits_do_not_depend_on_blas_threads(tmp_path):
    """Claim: featurize output is bitwise identical on one machine whatever the BLAS thread count."""
    rng = np.random.default_rng(3)
    write_embedding(
        tmp_path / "in.npy", [f"k{i}" for i in range(2000)], rng.standard_normal((2000, 64)).astype(np.float32)
    )
    for threads in ("1", "2"):
        stabcli_child(
            ["featurize", "in.npy", "--out", f"t{threads}.npy", "--dim", "256"], tmp_path, OPENBLAS_NUM_THREADS=threads
        )
    assert (tmp_path / "t1.npy").read_bytes() == (tmp_path / "t2.npy").read_bytes()


def float32_feature_bound(X: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The contract's per-feature bound for a float32 featurize (normalize on) against the
    float64 computation: sqrt(1/k)·(E + 4·2⁻²⁴ + 2⁻²⁴) with
    E = g_d·Σ_i|x_i||u_i|/‖x‖ + |z|·(g_d + 3·2⁻²⁴), g_d = d·2⁻²⁴/(1 − d·2⁻²⁴), z = (x/‖x‖)·u:
    the float32 dot product's error bound (any summation order, so any kernel), the norm's,
    and 4 ulp for numpy's float32 cos and sin."""
    u = 2.0**-24
    d, k = X.shape[1], U.shape[1]
    gamma = d * u / (1 - d * u)
    x = X.astype(np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    z = (x / norms) @ U
    error = gamma * (np.abs(x) @ np.abs(U)) / norms + np.abs(z) * (gamma + 3 * u)
    bound = math.sqrt(1 / k) * (error + 5 * u)
    return np.hstack([bound, bound])


@needs_kernels
def test_featurize_on_other_blas_kernels_agrees_within_the_stated_float32_bound(tmp_path):
    """Claim: on another CPU or BLAS kernel, featurize agrees with the float64 computation
    (and so with every other kernel) within the stated float32 bound."""
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((1500, 300)).astype(np.float32)
    write_embedding(tmp_path / "in.npy", [f"k{i}" for i in range(1500)], vectors)
    exact = FourierFeaturizer(n_components=512, random_state=0).fit_transform(vectors.astype(np.float64))
    bound = float32_feature_bound(
        vectors, FourierFeaturizer(n_components=512, random_state=0).fit(vectors[:1]).directions_
    )
    outputs = {}
    for kernel in OTHER_KERNELS:
        stabcli_child(
            ["featurize", "in.npy", "--out", f"{kernel}.npy", "--dim", "512"], tmp_path, OPENBLAS_CORETYPE=kernel
        )
        outputs[kernel] = np.load(tmp_path / f"{kernel}.npy").astype(np.float64)
        assert (np.abs(outputs[kernel] - exact) <= bound).all(), kernel


# ------------------------------------------------------------------ pretrain


def test_pretrain_bits_do_not_depend_on_jobs_or_blas_threads(tmp_path):
    """Claim: on one machine the same corpus, options and seed give bitwise-identical vectors
    whatever --jobs and the BLAS thread count (--scheduler: tests/test_cluster.py)."""
    config = TrainConfig(dim=8, epochs=1)
    pretrain(tmp_path / "j1", SAMPLE / "sessions.txt", config, runs=2, seed=7, jobs=1)
    pretrain(tmp_path / "j2", SAMPLE / "sessions.txt", config, runs=2, seed=7, jobs=2)
    stabcli_child(
        [
            "pretrain",
            str(SAMPLE / "sessions.txt"),
            "--out",
            "t1",
            "--runs",
            "2",
            "--seed",
            "7",
            "--dim",
            "8",
            "--epochs",
            "1",
        ],
        tmp_path,
        OPENBLAS_NUM_THREADS="1",
    )
    for run in ("run-000", "run-001"):
        vectors = {(tmp_path / name / run / "vectors.npy").read_bytes() for name in ("j1", "j2", "t1")}
        assert len(vectors) == 1, run


@needs_kernels
def test_pretrain_on_another_kernel_differs_less_than_another_seed_and_audit_names_it(tmp_path, runsets):
    """Claims: pretrain on another BLAS kernel is not promised bit for bit, its runs differ from
    the same seed's by less than two seeds differ, and an audit of a run set resumed under
    another kernel names the differing environment field."""
    rs = tmp_path / "rs"
    config = TrainConfig(dim=16, epochs=2)
    pretrain(rs, SAMPLE / "sessions.txt", config, runs=2, seed=0)
    other = next(k for k in OTHER_KERNELS if _architecture(k) != _current_kernel())
    # resume to 3 runs under the other kernel, then train run-000 again there for comparison
    args = ["pretrain", str(SAMPLE / "sessions.txt"), "--dim", "16", "--epochs", "2", "--seed", "0"]
    stabcli_child([*args, "--out", "rs", "--runs", "3"], tmp_path, OPENBLAS_CORETYPE=other)
    stabcli_child([*args, "--out", "again", "--runs", "1"], tmp_path, OPENBLAS_CORETYPE=other)

    def distance(x, y):
        x, y = x.astype(np.float64), y.astype(np.float64)
        rotation, _ = orthogonal_procrustes(y, x)
        return np.linalg.norm(y @ rotation - x) / np.linalg.norm(x)

    runs = [np.load(rs / f"run-00{i}" / "vectors.npy") for i in range(3)]
    same_seed = distance(runs[0], np.load(tmp_path / "again" / "run-000" / "vectors.npy"))
    seeds = min(distance(runs[i], runs[j]) for i in range(3) for j in range(i + 1, 3))
    assert same_seed < seeds

    audit = json.loads(stabcli_child(["audit", "rs", "--format", "json"], tmp_path).stdout)
    blas = {d["field"]: d for d in audit["input"]["environment"]}["blas"]
    assert sorted(sorted(v["sources"]) for v in blas["values"]) == [["run-000", "run-001"], ["run-002"]]
    assert any(_architecture(other) in v["value"] for v in blas["values"])


def _current_kernel() -> str | None:
    from threadpoolctl import threadpool_info

    return next((lib.get("architecture") for lib in threadpool_info() if lib.get("internal_api") == "openblas"), None)


def _architecture(kernel: str) -> str:
    """The name OpenBLAS reports for ``OPENBLAS_CORETYPE=kernel`` (Prescott reports "Katmai",
    Zen on an Intel CPU "Haswell"), read in a child process."""
    code = "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])"
    environ = dict(os.environ) | {"OPENBLAS_CORETYPE": kernel}
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    ).stdout.strip()


# ------------------------------------------------------------------ audit and drift


def test_audit_json_bits_do_not_depend_on_jobs_or_blas_threads(runsets):
    """Claim: on one machine audit's JSON is bitwise identical whatever --jobs and the BLAS thread count."""
    labels = str(SAMPLE / "item_genres.tsv")
    args = ["audit", "rs", "--format", "json", "--labels", labels, "--variants", "h,phi:32"]
    one = stabcli_child([*args, "--jobs", "1"], runsets, OPENBLAS_NUM_THREADS="1").stdout
    two = stabcli_child([*args, "--jobs", "2"], runsets, OPENBLAS_NUM_THREADS="2").stdout
    assert one == two


@needs_kernels
def test_audit_on_other_kernels_agrees_within_1e_9(runsets):
    """Claim: on another CPU or kernel, audit's numbers agree within 1e-9 relative (float64
    accumulations), and everything that is not a float is identical."""
    args = ["audit", "rs", "--format", "json", "--labels", str(SAMPLE / "item_genres.tsv"), "--variants", "h"]
    reports = [json.loads(stabcli_child(args, runsets, OPENBLAS_CORETYPE=k).stdout) for k in OTHER_KERNELS]
    for report in reports[1:]:
        assert_json_close(reports[0], report, rtol=1e-9, atol=1e-12)


def test_drift_json_bits_do_not_depend_on_blas_threads(runsets):
    """Claim: on one machine drift's numbers agree within 1e-9 whatever the BLAS thread count
    (bitwise on some kernels, not on OpenBLAS's SkylakeX kernel)."""
    args = ["drift", "rs", "refresh", "--noise", "rs", "--format", "json"]
    one = json.loads(stabcli_child(args, runsets, OPENBLAS_NUM_THREADS="1").stdout)
    two = json.loads(stabcli_child(args, runsets, OPENBLAS_NUM_THREADS="2").stdout)
    assert_json_close(one, two, rtol=1e-9, atol=1e-12)


@needs_kernels
def test_drift_on_other_kernels_agrees_within_1e_9_and_moves_the_same_keys(runsets):
    """Claim: on another CPU or kernel, drift's numbers agree within 1e-9 relative (every
    distance and rotation in float64) and the keys it lists as moved are the same."""
    args = ["drift", "rs", "refresh", "--noise", "rs", "--format", "json"]
    reports = [json.loads(stabcli_child(args, runsets, OPENBLAS_CORETYPE=k).stdout) for k in OTHER_KERNELS]
    for report in reports[1:]:
        assert_json_close(reports[0], report, rtol=1e-9, atol=1e-12)


# ------------------------------------------------------------------ provenance


def test_pretrain_records_the_environment_of_every_run(runsets):
    manifest = json.loads((runsets / "rs" / "stabcli.json").read_text())
    for run in ("run-000", "run-003"):
        env = manifest["runs"][run]["environment"]
        assert set(env) == {"stabcli", "python", "numpy", "scipy", "gensim", "blas", "machine", "cpu"}
        assert env["numpy"] == np.__version__ and env["python"] == platform.python_version()


def _with_gensim(runset: Path, runs: list[str], version: str) -> None:
    manifest = json.loads((runset / "stabcli.json").read_text())
    for run in runs:
        manifest["runs"][run]["environment"]["gensim"] = version
    (runset / "stabcli.json").write_text(json.dumps(manifest))


def test_audit_names_the_runs_of_another_environment_and_is_silent_when_they_agree(tmp_path, runsets, cli):
    import shutil

    shutil.copytree(runsets / "rs", tmp_path / "rs")
    agree = json.loads(cli(["audit", str(tmp_path / "rs"), "--format", "json"]).stdout)
    assert agree["input"]["environment"] == []
    assert "environment differs" not in cli(["audit", str(tmp_path / "rs")]).stdout
    _with_gensim(tmp_path / "rs", ["run-002", "run-003"], "4.3.3")
    differ = json.loads(cli(["audit", str(tmp_path / "rs"), "--format", "json"]).stdout)
    (gensim,) = differ["input"]["environment"]
    assert gensim["field"] == "gensim"
    assert {v["value"]: v["sources"] for v in gensim["values"]} == {
        agree_version(): ["run-000", "run-001"],
        "4.3.3": ["run-002", "run-003"],
    }
    terminal = cli(["audit", str(tmp_path / "rs")]).stdout
    assert f"environment differs: gensim {agree_version()} (run-000, run-001) vs 4.3.3 (run-002, run-003)" in " ".join(
        terminal.split()
    )
    cli(["audit", str(tmp_path / "rs"), "--markdown", str(tmp_path / "report.md")])
    assert "**environment differs" in (tmp_path / "report.md").read_text()
    assert "4.3.3 (run-002, run-003)" in (tmp_path / "report.md").read_text()


def agree_version() -> str:
    from importlib.metadata import version

    return version("gensim")


def test_drift_names_the_fields_on_which_before_after_and_noise_differ(tmp_path, runsets, cli):
    import shutil

    for name in ("rs", "refresh"):
        shutil.copytree(runsets / name, tmp_path / name)
    same = json.loads(cli(["drift", str(tmp_path / "rs"), str(tmp_path / "refresh"), "--format", "json"]).stdout)
    assert same["input"]["environment"] == []
    _with_gensim(tmp_path / "refresh", ["run-000"], "4.3.3")
    report = json.loads(
        cli(
            [
                "drift",
                str(tmp_path / "rs"),
                str(tmp_path / "refresh"),
                "--noise",
                str(tmp_path / "rs"),
                "--format",
                "json",
            ]
        ).stdout
    )
    (gensim,) = report["input"]["environment"]
    values = {v["value"]: v["sources"] for v in gensim["values"]}
    assert values["4.3.3"] == ["after"]
    assert values[agree_version()] == ["before", "noise/run-000", "noise/run-001", "noise/run-002", "noise/run-003"]
    terminal = " ".join(cli(["drift", str(tmp_path / "rs"), str(tmp_path / "refresh")]).stdout.split())
    assert f"environment differs: gensim {agree_version()} (before) vs 4.3.3 (after)" in terminal


def test_featurize_records_its_environment_in_the_sidecar(tmp_path):
    write_embedding(tmp_path / "in.npy", ["a", "b", "c"], np.eye(3, dtype=np.float32))
    featurize(tmp_path / "in.npy", tmp_path / "out.npy", FeaturizeOptions(dim=4))
    side = json.loads((tmp_path / "out.npy.featurize.json").read_text())
    assert side["environment"]["numpy"] == np.__version__
    assert side["environment"]["blas"]
