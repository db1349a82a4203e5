"""The Python API (``stabcli.pretrain/audit/featurize/drift/demo``): the same results, JSON,
validation and errors as the command line, on the bundled sample data."""

import json
import subprocess
import sys
import warnings
from dataclasses import fields

import pytest

import stabcli
from conftest import runner
from stabcli.cli.app import app
from stabcli.commands.demo import sample_path
from stabcli.errors import OptionError, StabcliError, StabcliWarning, UsageError

SESSIONS = sample_path("sessions.txt")
GENRES = sample_path("item_genres.tsv")
# small and quick; the sample's 2,000 sessions make every measure meaningful
TRAIN = {"dim": 8, "epochs": 2, "jobs": 1, "corpus_format": "lines"}
TRAIN_ARGS = ["--dim", "8", "--epochs", "2", "--jobs", "1", "--corpus-format", "lines"]


def cli_json(*args) -> str:
    """The CLI's ``--format json`` stdout, parsed and dumped with sorted keys."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.dumps(json.loads(result.stdout), sort_keys=True)


def api_json(result) -> str:
    return json.dumps(result.to_dict(), sort_keys=True)


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory):
    """Three runs on the sample sessions (the noise run set) and one later run (the refresh)."""
    root = tmp_path_factory.mktemp("api")
    first = stabcli.pretrain(SESSIONS, root / "runs", runs=3, **TRAIN)
    later = stabcli.pretrain(SESSIONS, root / "later", runs=1, seed=50, **TRAIN)
    assert not first.failed and not later.failed
    return root


def test_pretrain_summary_is_the_cli_json(sample_runs):
    # both resume the complete run set (every run "kept"), so the two summaries are comparable
    api = stabcli.pretrain(SESSIONS, sample_runs / "runs", runs=3, **TRAIN)
    assert [r.status for r in api.runs] == ["kept"] * 3
    cli = cli_json("pretrain", SESSIONS, "--out", sample_runs / "runs", "--runs", "3", *TRAIN_ARGS, "--format", "json")
    assert api_json(api) == cli
    assert api.to_dict()["run_set"] == str(sample_runs / "runs") and api.to_dict()["failed"] == 0


def test_audit_report_is_the_cli_json(sample_runs):
    runs = sample_runs / "runs"
    api = stabcli.audit(runs, top=5, knn_k=5, labels=GENRES, variants=["h", "aligned"], jobs=1)
    cli = cli_json(
        "audit", runs, "--top", "5", "--knn-k", "5", "--labels", GENRES, "--variants", "h,aligned", "--jobs", "1",
        "--format", "json",
    )  # fmt: skip
    assert api_json(api) == cli
    assert isinstance(api, stabcli.AuditReport) and api.downstream is not None and api.passed


def test_audit_writes_the_files_the_cli_writes(sample_runs, tmp_path):
    report = stabcli.audit(
        [sample_runs / "runs"], top=3, json=tmp_path / "a.json", markdown=str(tmp_path / "a.md"),
        checks=["representation.knn_overlap>=2"],
    )  # fmt: skip
    assert json.loads((tmp_path / "a.json").read_text()) == report.to_dict()
    assert (tmp_path / "a.md").read_text().startswith("#")
    assert not report.passed and report.checks[0].path == "representation.knn_overlap"


def test_drift_report_is_the_cli_json(sample_runs, tmp_path):
    runs, later = sample_runs / "runs", sample_runs / "later"
    api = stabcli.drift(runs, later, noise=runs, top=5, knn_k=5, labels=GENRES, checks=["drift.moved_share<1"])
    cli = cli_json(
        "drift", runs, later, "--noise", runs, "--top", "5", "--knn-k", "5", "--labels", GENRES,
        "--check", "drift.moved_share<1", "--format", "json",
    )  # fmt: skip
    assert api_json(api) == cli
    assert isinstance(api, stabcli.DriftReport) and api.noise is not None and api.checks[0].passed


def test_featurize_result_is_the_cli_json(sample_runs, tmp_path):
    api = stabcli.featurize(sample_runs / "runs", tmp_path / "phi-api", dim=16, seed=3)
    cli = cli_json("featurize", sample_runs / "runs", "--out", tmp_path / "phi-cli", "--dim", "16", "--seed", "3",
                   "--format", "json")  # fmt: skip
    assert json.loads(cli)["output"] == str(tmp_path / "phi-cli")
    assert api_json(api) == cli.replace("phi-cli", "phi-api")
    assert (api.runs, api.output_dim) == (3, 16)


def test_same_validation_and_message_as_the_cli(sample_runs):
    with pytest.raises(OptionError) as info:
        stabcli.audit(sample_runs / "runs", pairs=0)
    assert info.value.param == "pairs"
    result = runner.invoke(app, ["drift", str(sample_runs / "runs"), str(sample_runs / "later"), "--alpha", "2"])
    with pytest.raises(OptionError) as info:
        stabcli.drift(sample_runs / "runs", sample_runs / "later", alpha=2.0)
    assert result.exit_code == 2 and f"--alpha: {info.value.problem}" in result.stderr
    with pytest.raises(UsageError, match=r"--model only apply with --labels FILE"):
        stabcli.audit(sample_runs / "runs", model="ridge")
    with pytest.raises(UsageError, match=r"--task only apply with --labels FILE"):
        stabcli.drift(sample_runs / "runs", sample_runs / "later", task="regression")
    with pytest.raises(TypeError, match="unexpected keyword argument 'knn'"):
        stabcli.audit(sample_runs / "runs", knn=3)
    with pytest.raises(StabcliError, match=r"no such file|not found|does not exist"):
        stabcli.audit([sample_runs / "missing.npy", sample_runs / "missing2.npy"])


def test_warnings_are_python_warnings_without_a_callback(tmp_path):
    import numpy as np

    keys = [f"k{i}" for i in range(30)]
    for seed, name in enumerate(("a", "b")):
        np.save(tmp_path / f"{name}.npy", np.random.default_rng(seed).normal(size=(30, 4)).astype(np.float32))
        own = keys if name == "a" else [*keys[:-1], "only-in-b"]  # one key not in every run: a warning
        (tmp_path / f"{name}.keys.txt").write_text("\n".join(own) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stabcli.audit([tmp_path / "a.npy", tmp_path / "b.npy"], knn_k=3, pairs=100)
    assert any(issubclass(w.category, StabcliWarning) and "not in every run" in str(w.message) for w in caught)
    seen = []
    stabcli.audit([tmp_path / "a.npy", tmp_path / "b.npy"], knn_k=3, pairs=100, on_warning=seen.append)
    assert any("not in every run" in message for message in seen)


def test_downstream_keywords_are_the_downstream_options():
    from stabcli.commands import audit, drift
    from stabcli.measure.downstream import DownstreamOptions

    names = {f.name for f in fields(DownstreamOptions)}
    assert set(audit.DOWNSTREAM_KEYWORDS) == names - {"featurized"}  # featurized: read from the run set
    assert set(drift.DOWNSTREAM_KEYWORDS) <= names


def test_import_stabcli_stays_cheap():
    code = "import sys, stabcli; print(sorted(m for m in ('sklearn', 'gensim', 'scipy', 'pandas') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
    assert callable(stabcli.audit) and callable(stabcli.drift) and "audit" in dir(stabcli)
