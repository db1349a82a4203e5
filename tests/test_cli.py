import json
import re
import shlex
import sys

import numpy as np
import pytest

from conftest import files_state, invoke, runner
from stabcli import __version__
from stabcli.cli.app import app

SMALL = ["--runs", "2", "--dim", "4", "--epochs", "2", "--jobs", "1"]


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"stabcli {__version__}\n" and result.stderr == ""


def test_python_dash_m_works():
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "stabcli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "pretrain" in proc.stdout and "demo" in proc.stdout


def test_pretrain_table_summary(tmp_path, sessions_file):
    result = invoke("pretrain", sessions_file, "--out", tmp_path / "r", *SMALL)
    assert result.exit_code == 0, result.output
    assert "run-000" in result.stdout and "run-001" in result.stdout and "complete" in result.stdout
    assert "corpus read as lines: 120 sequences" in result.stdout
    assert [line.split(",")[0] for line in result.stderr.splitlines()] == [  # a log: one line per finished run
        "pretrain: run 1 of 2 finished",
        "pretrain: run 2 of 2 finished",
    ]
    assert (tmp_path / "r" / "run-001" / "vectors.npy").is_file()


def test_pretrain_json_summary_and_resume(tmp_path, sessions_file):
    first = invoke("pretrain", sessions_file, "--out", tmp_path / "r", *SMALL, "--format", "json", "--quiet")
    assert first.exit_code == 0, first.output
    assert first.stderr == ""
    payload = json.loads(first.stdout)
    assert payload["keys"] == 40 and payload["failed"] == 0
    assert [r["status"] for r in payload["runs"]] == ["complete", "complete"]
    again = invoke("pretrain", sessions_file, "--out", tmp_path / "r", *SMALL, "--format", "json")
    assert [r["status"] for r in json.loads(again.stdout)["runs"]] == ["kept", "kept"] and again.stderr == ""


def test_pretrain_params_reach_gensim(tmp_path, sessions_file):
    result = invoke(
        "pretrain", sessions_file, "--out", tmp_path / "r", *SMALL, "--param", "hs=1", "--param", "negative=0"
    )
    assert result.exit_code == 2  # negative is reserved: --negative exists
    assert result.stderr.startswith("error: --param negative: set by stabcli itself") and result.stdout == ""
    result = invoke(
        "pretrain", sessions_file, "--out", tmp_path / "r", *SMALL, "--param", "hs=1", "--negative", "0", "-q"
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == "" and "complete" in result.stdout
    assert json.loads((tmp_path / "r" / "stabcli.json").read_text())["config"]["params"] == {"hs": 1}
    assert "hs=1" in (tmp_path / "r" / "run-000" / "log.txt").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--param", "bogus=1"], "error: --param bogus: not an argument of gensim Word2Vec"),
        (["--model", "glove"], "error: Invalid value for '--model': 'glove' is not one of 'word2vec', 'doc2vec'."),
        (
            ["--corpus-format", "xml"],
            "error: Invalid value for '--corpus-format': 'xml' is not one of 'auto', 'lines', "
            "'tagged', 'movielens', 'interactions'.",
        ),
    ],
)
def test_pretrain_bad_options_exit_2_with_one_line(tmp_path, sessions_file, args, message):
    result = invoke("pretrain", sessions_file, "--out", tmp_path / "r", *SMALL, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1 and result.stdout == ""
    assert "Traceback" not in result.output
    assert not (tmp_path / "r").exists()


def test_pretrain_missing_and_malformed_corpus(tmp_path):
    result = invoke("pretrain", tmp_path / "nope.txt", "--out", tmp_path / "r", *SMALL)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "nope.txt: no such file" in result.stderr and result.stdout == ""
    bad = tmp_path / "docs.tsv"
    bad.write_text("a\tb\nno tab\n")
    result = invoke("pretrain", bad, "--model", "doc2vec", "--out", tmp_path / "r", *SMALL)
    assert result.exit_code == 2
    assert "docs.tsv:2: expected 'tag<TAB>text', found no tab" in result.stderr and result.stdout == ""


def test_pretrain_other_config_exit_2_and_runs_untouched(tmp_path, sessions_file):
    assert invoke("pretrain", sessions_file, "--out", tmp_path / "r", *SMALL).exit_code == 0
    before = (tmp_path / "r" / "run-000" / "vectors.npy").read_bytes()
    result = invoke("pretrain", sessions_file, "--out", tmp_path / "r", "--runs", "2", "--dim", "5", "--epochs", "2")
    assert result.exit_code == 2
    assert "made with a different configuration (dim 4 → 5); use --force" in result.stderr and result.stdout == ""
    assert (tmp_path / "r" / "run-000" / "vectors.npy").read_bytes() == before


def test_a_resume_reading_the_corpus_another_way_is_refused_or_replaced_with_force(tmp_path):
    # the run set's identity covers how the corpus is read: --tokenize and the table's columns
    text = tmp_path / "text.txt"
    text.write_text("".join(f"The Cat, sat on mat{i % 7}. A Dog ran!\n" for i in range(60)), encoding="utf-8")
    assert invoke("pretrain", text, "--out", tmp_path / "t", *SMALL).exit_code == 0
    before = (tmp_path / "t" / "run-000" / "vectors.npy").read_bytes()
    result = invoke("pretrain", text, "--out", tmp_path / "t", *SMALL, "--tokenize", "simple")
    assert result.exit_code == 2
    assert "made with a different configuration (corpus tokenize 'none' → 'simple')" in result.stderr
    assert (tmp_path / "t" / "run-000" / "vectors.npy").read_bytes() == before
    forced = invoke("pretrain", text, "--out", tmp_path / "t", *SMALL, "--tokenize", "simple", "--force")
    assert forced.exit_code == 0, forced.output
    keys = (tmp_path / "t" / "keys.txt").read_text(encoding="utf-8").split()
    assert "cat" in keys and "The" not in keys  # trained afresh on the simple tokens
    assert invoke("pretrain", text, "--out", tmp_path / "t", *SMALL, "--tokenize", "simple").exit_code == 0  # resumes

    rng = np.random.default_rng(0)
    rows = [(u, u % 5, int(rng.integers(0, 30)), t) for u in range(40) for t in range(6)]
    table = tmp_path / "clicks.csv"
    table.write_text("user,session,item,when\n" + "".join(f"{u},{s},i{it},{t}\n" for u, s, it, t in rows))
    columns = ["--corpus-format", "interactions", "--item-col", "item", "--time-col", "when"]
    assert invoke("pretrain", table, "--out", tmp_path / "c", *SMALL, *columns, "--user-col", "user").exit_code == 0
    result = invoke("pretrain", table, "--out", tmp_path / "c", *SMALL, *columns, "--user-col", "session")
    assert result.exit_code == 2 and "corpus columns" in result.stderr, result.output
    no_time = ["--corpus-format", "interactions", "--item-col", "item", "--user-col", "user"]
    result = invoke("pretrain", table, "--out", tmp_path / "c", *SMALL, *no_time)
    assert result.exit_code == 2 and "corpus columns" in result.stderr, result.output


def test_pretrain_script_failure_exit_2_lists_failed_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, pathlib\nrun = int(sys.argv[2])\n"
        "if run == 1: sys.exit(4)\n"
        "(pathlib.Path(sys.argv[1]) / 'v.npy').write_bytes(b'')\n"
        "import numpy; numpy.save(pathlib.Path(sys.argv[1]) / 'v.npy', numpy.ones((3, 2)))\n"
    )
    result = invoke(
        "pretrain", "--script", f"{sys.executable} {script} {{out}} {{run}}", "--runs", "2", "--out", tmp_path / "r",
        "--quiet",
    )  # fmt: skip
    assert result.exit_code == 2
    assert (
        result.stderr.startswith("failed: run-001: script exited with code 4") and len(result.stderr.splitlines()) == 1
    )
    assert "run-000" in result.stdout and "complete" in result.stdout and "failed" in result.stdout
    assert np.load(tmp_path / "r" / "run-000" / "vectors.npy").shape == (3, 2)


def test_debug_shows_the_traceback(tmp_path):
    result = runner.invoke(app, ["--debug", "pretrain", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and result.exception is not None  # the raw exception, for a developer


def test_demo_trains_the_sample(tmp_path):
    # demo --help's one example, run with its directory in tmp_path (test_help_examples runs the others)
    (argv,) = help_examples("demo")
    result = invoke(*[str(tmp_path / "demo") if a == "/tmp/stabcli-demo" else a for a in argv])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("complete") == 5
    assert "coordinates: " in result.stdout and "Representation stability" in result.stdout
    progress = result.stderr.splitlines()
    assert progress[0].startswith("stabcli demo: 5 item2vec runs on the synthetic sample sessions.txt")
    assert any(line.startswith("stabcli drift: a refresh where 12 Horror items") for line in progress)
    assert all(
        line.startswith(("stabcli demo:", "stabcli drift:", "wrote ", "HTML reports", "pretrain: run ", "audit: "))
        for line in progress
    ), progress
    assert json.loads((tmp_path / "demo" / "audit.json").read_text())["input"]["runs"] == 5
    assert "A vs B" in result.output and f"B: {tmp_path / 'demo' / 'runs-phi64'} (run set" in result.output
    assert "featurized: phi M=64" in result.output
    assert result.stderr.splitlines()[-1] == (
        f"HTML reports to open in a browser: {tmp_path / 'demo' / 'audit.html'}, "
        f"{tmp_path / 'demo' / 'compare.html'}, {tmp_path / 'demo' / 'drift.html'}"
    )
    for name in ("audit.html", "compare.html", "drift.html"):
        assert (tmp_path / "demo" / name).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "Downstream fluctuation across runs" in result.output and "recommendation: " in result.output
    downstream = json.loads((tmp_path / "demo" / "audit.json").read_text())["downstream"]
    assert downstream["classes"] == 12 and downstream["variants"]["h"]["accuracy_mean"] > 0.5
    assert (tmp_path / "demo" / "runs-phi64" / "run-004" / "vectors.npy").is_file()
    keys = (tmp_path / "demo" / "runs" / "keys.txt").read_text().splitlines()
    assert len(keys) > 1000 and np.load(tmp_path / "demo" / "runs" / "run-004" / "vectors.npy").shape == (len(keys), 32)
    drift = json.loads((tmp_path / "demo" / "drift.json").read_text())  # the drift step: 12 items moved
    assert drift["input"]["before_in_noise"] and 10 <= drift["drift"]["discoveries"] <= 14
    assert "listed keys are the 12 moved Horror items" in result.stdout
    # rerun (issue 12 §1): the demo replaces or resumes only what it wrote
    demo = tmp_path / "demo"
    first = {name: (demo / name).read_bytes() for name in ("drift.json", "drift.md", "sessions-refreshed.txt")}
    again = invoke("demo", "--out", demo)
    assert again.exit_code == 0, again.output
    assert {name: (demo / name).read_bytes() for name in first} == first  # same numbers: resumed runs, same report
    # and a directory that also holds a user's files is refused before any work, the files untouched
    (demo / "notes.txt").write_text("mine")
    (demo / "my-figures").mkdir()
    (demo / "my-figures" / "fig.png").write_bytes(b"mine")
    before = files_state(demo)
    refused = invoke("demo", "--out", demo)
    assert refused.exit_code == 2 and "which the demo did not write" in refused.stderr, refused.output
    assert files_state(demo) == before
    assert not [p for p in demo.iterdir() if ".tmp-" in p.name or ".partial-" in p.name]


@pytest.fixture
def runset(tmp_path, sessions_file):
    root = tmp_path / "runs"
    assert (
        invoke(
            "pretrain",
            sessions_file,
            "--out",
            root,
            "--runs",
            "3",
            "--dim",
            "6",
            "--epochs",
            "2",
            "--checkpoints",
            "--jobs",
            "1",
        ).exit_code
        == 0
    )
    return root


AUDIT_SMALL = ["--pairs", "300", "--knn-k", "3", "--knn-queries", "20", "--top", "3"]


def test_audit_terminal_report(runset):
    result = invoke("audit", runset, *AUDIT_SMALL)
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("coordinates: ") and "inner products: " in first and "% stable" in first
    for text in ("Representation stability", "k-NN overlap@3", "PIP loss", "Least stable keys", "Training convergence"):
        assert text in result.output
    assert first == result.stdout.splitlines()[0] and "(pure noise: 67% ± " in first
    assert "variance mean" in result.stdout and result.stderr == ""


def test_audit_json_markdown_plots_and_step_summary(runset, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = invoke(
        "audit",
        runset,
        *AUDIT_SMALL,
        "--format",
        "json",
        "--json",
        tmp_path / "r.json",
        "--markdown",
        tmp_path / "r.md",
        "--plots",
        tmp_path / "plots",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert json.loads((tmp_path / "r.json").read_text()) == report
    for key in ("stabcli_version", "input", "representation", "training", "downstream", "checks", "passed"):
        assert key in report
    for key in (
        "noise_share",
        "noise_share_per_dim",
        "variance_per_dim",
        "aligned_noise_share",
        "inner_product_noise_share",
        "knn_overlap",
        "knn_k",
        "pip_loss",
        "pip_loss_relative",
        "cka",
        "eigenspace_overlap",
        "semantic_displacement",
        "least_stable",
    ):
        assert key in report["representation"]
    assert report["input"]["runs"] == 3 and report["input"]["dim"] == 6
    assert [row["epoch"] for row in report["training"]["by_epoch"]] == [1, 2]
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("## stabcli audit") and "| linear CKA |" in markdown
    assert summary.read_text() == "earlier step\n" + markdown
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "by_frequency.png",
        "fig1a_variance_per_dim.png",
        "fig1b_loss_by_epoch.png",
        "fig1c_noise_by_epoch.png",
        "fig1d_coordinate_vs_inner_product.png",
    ]
    assert (tmp_path / "plots" / "fig1a_variance_per_dim.png").read_bytes()[:4] == b"\x89PNG"
    assert result.stderr.splitlines() == [
        f"wrote {tmp_path / 'plots' / name}"
        for name in (
            "fig1a_variance_per_dim.png",
            "fig1b_loss_by_epoch.png",
            "fig1c_noise_by_epoch.png",
            "fig1d_coordinate_vs_inner_product.png",
            "by_frequency.png",
        )
    ]


def test_audit_checks_pass_fail_and_bad_paths(runset):
    ok = invoke("audit", runset, *AUDIT_SMALL, "--check", "representation.cka>0", "--check", "input.runs==3")
    assert ok.exit_code == 0, ok.output
    assert ok.stderr == "" and ok.stdout.count("PASS") == 2
    failed = invoke(
        "audit", runset, *AUDIT_SMALL, "--check", "representation.cka>0", "--check", "representation.knn_overlap>1.5"
    )
    assert failed.exit_code == 1
    assert failed.output.strip().splitlines()[-1].startswith("FAIL representation.knn_overlap>1.5")
    assert failed.stdout.strip().splitlines()[-1].startswith("FAIL") and failed.stderr == ""
    unknown = invoke("audit", runset, *AUDIT_SMALL, "--check", "representation.knn>0.5")
    assert unknown.exit_code == 2 and "error: --check: no 'knn' in representation" in unknown.output
    assert unknown.stdout == "" and unknown.stderr.startswith("error: --check: no 'knn' in representation")
    malformed = invoke("audit", runset, "--check", "knn_overlap")
    assert malformed.exit_code == 2 and "expected PATH OP VALUE" in malformed.stderr and malformed.stdout == ""


def test_audit_bad_inputs_exit_2(tmp_path, runset):
    result = invoke("audit", runset / "run-000" / "vectors.npy")
    assert result.exit_code == 2 and "found 1 run(s); stability needs at least 2" in result.stderr
    assert result.stdout == ""
    (runset / "stabcli.json").write_text("{broken")
    result = invoke("audit", runset)
    assert result.exit_code == 2 and "stabcli.json: corrupted manifest" in result.stderr and result.stdout == ""
    result = invoke("audit", tmp_path / "missing.npy", tmp_path / "other.npy")
    assert result.exit_code == 2 and "missing.npy: no such file" in result.stderr and result.stdout == ""


def test_audit_unwritable_outputs_exit_2(runset, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = invoke("audit", runset, *AUDIT_SMALL, "--plots", blocker / "plots")
    assert result.exit_code == 2 and f"--plots {blocker / 'plots'}: {blocker} is not a directory" in result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    result = invoke("audit", runset, *AUDIT_SMALL, "--json", tmp_path / "missing-dir" / "r.json")
    assert result.exit_code == 2 and f"r.json: directory {tmp_path / 'missing-dir'} does not exist" in result.stderr
    assert result.stdout == ""


@pytest.fixture
def genre_labels(tmp_path):
    path = tmp_path / "genres.csv"
    path.write_text("item,genre\n" + "".join(f"t{i},g{i // 10}\n" for i in range(40)))
    return path


def test_audit_with_labels_table_json_markdown_plots(runset, genre_labels, tmp_path):
    result = invoke(
        "audit",
        runset,
        *AUDIT_SMALL,
        "--labels",
        genre_labels,
        "--variants",
        "h,aligned,phi:8",
        "--sigmas",
        "0.5,1",
        "--json",
        tmp_path / "r.json",
        "--markdown",
        tmp_path / "r.md",
        "--plots",
        tmp_path / "plots",
        "--jobs",
        "1",
    )
    assert result.exit_code == 0, result.output
    for text in (
        "Downstream fluctuation across runs",
        "stale acc.",
        "phi:8@0.5",
        "recommendation: ",
        "logreg on genres.csv (classification): 32 train / 8 test keys",
    ):
        assert text in result.stdout
    assert result.stderr.splitlines() == [
        f"wrote {tmp_path / 'plots' / name}"
        for name in (
            "fig1a_variance_per_dim.png",
            "fig1b_loss_by_epoch.png",
            "fig1c_noise_by_epoch.png",
            "fig1d_coordinate_vs_inner_product.png",
            "by_frequency.png",
            "fig2_downstream_spread.png",
        )
    ]
    ds = json.loads((tmp_path / "r.json").read_text())["downstream"]
    assert list(ds["variants"]) == ["h", "aligned", "phi:8@0.5", "phi:8@1"]
    assert set(ds["variants"]["h"]) >= {
        "accuracy_mean",
        "accuracy_std",
        "f1_macro_mean",
        "f1_macro_std",
        "churn",
        "stale_accuracy_mean",
        "stale_drop",
    }
    assert ds["recommendation"]["variant"] in ds["variants"] and ds["reference"] == "run-000"
    assert "### Downstream fluctuation across runs" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "plots" / "fig2_downstream_spread.png").read_bytes()[:4] == b"\x89PNG"


def test_audit_checks_reach_downstream_variants(runset, genre_labels):
    result = invoke(
        "audit",
        runset,
        *AUDIT_SMALL,
        "--labels",
        genre_labels,
        "--variants",
        "h,phi:8@0.5",
        "--check",
        "downstream.variants.h.churn<=1",
        "--check",
        "downstream.variants.phi:8@0.5.churn>=0",
        "--check",
        "downstream.variants.h.accuracy_mean>1",
    )
    assert result.exit_code == 1, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("FAIL downstream.variants.h.accuracy_mean>1")
    assert result.stdout.count("PASS") == 2 and result.stderr == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--variants", "h"], "--variants only apply with --labels FILE"),
        (["--labels", "MISSING"], "missing.csv: label file not found"),
        (["--labels", "GENRES", "--variants", "h,rff:8"], "unknown variant 'rff:8'"),
        (
            ["--labels", "GENRES", "--featurize-dims", "8,x"],
            "--featurize-dims '8,x': expected a comma-separated list of int",
        ),
        (
            ["--labels", "GENRES", "--model", "svm"],
            "--model: 'svm' is not one of logreg, knn, ridge, gbdt, mlp or module:Class",
        ),
        (["--labels", "GENRES", "--test-size", "1.5"], "--test-size: must be strictly between 0 and 1, got 1.5"),
        (["--labels", "GENRES", "--task", "regression"], "--task regression needs finite numeric labels, found 'g"),
        (["--labels", "ONECLASS"], "only one class ('g') among the 40 labeled keys"),
    ],
)
def test_audit_bad_label_options_exit_2(runset, genre_labels, tmp_path, args, message):
    (tmp_path / "one.csv").write_text("".join(f"t{i},g\n" for i in range(40)))
    paths = {"MISSING": tmp_path / "missing.csv", "GENRES": genre_labels, "ONECLASS": tmp_path / "one.csv"}
    result = invoke("audit", runset, *AUDIT_SMALL, *[paths.get(a, a) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.stdout == "" and result.stderr.startswith("error: ") and message in result.stderr


# ---- --help: readable names, defaults, choices, examples that run (issue 14 §3)

COMMANDS = ["pretrain", "audit", "featurize", "drift", "compare", "demo", "sweep"]
INTERNAL_TYPE = re.compile(r"<(?:bool|int|float|str|path|text|list\[[^\]]*\]|[a-z]+ range)>")


def click_command(name: str):
    import typer.main

    return typer.main.get_command(app).commands[name]


@pytest.mark.parametrize("args", [[], *[[c] for c in COMMANDS]], ids=["stabcli", *COMMANDS])
def test_help_shows_no_internal_type_names(args, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    result = invoke(*args, "--help")
    assert result.exit_code == 0 and result.stderr == ""
    usage = next(line for line in result.stdout.splitlines() if "Usage:" in line)
    assert not re.search(r"[{}]", usage), usage  # typer writes a required argument as {name}
    panels = result.stdout.index("╭")  # the argument, option and command panels come after the examples
    prose = result.stdout[:panels].split("Example")[0]  # examples may hold {seed}-style placeholders
    shown = prose + result.stdout[panels:]
    assert not INTERNAL_TYPE.findall(shown), INTERNAL_TYPE.findall(shown)


def test_usage_lines_name_arguments_in_capitals(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    usages = {
        c: next(line.strip() for line in invoke(c, "--help").stdout.splitlines() if "Usage:" in line) for c in COMMANDS
    }
    assert usages == {
        "pretrain": "Usage: root pretrain [OPTIONS] [CORPUS]",
        "audit": "Usage: root audit [OPTIONS] INPUTS...",
        "featurize": "Usage: root featurize [OPTIONS] INPUT",
        "drift": "Usage: root drift [OPTIONS] BEFORE AFTER",
        "compare": "Usage: root compare [OPTIONS] A B",
        "demo": "Usage: root demo [OPTIONS]",
        "sweep": "Usage: root sweep [OPTIONS] CORPUS",
    }


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_a_metavar_and_a_shown_default(name):
    import click

    command = click_command(name)
    ctx = command.make_context(name, ["--help"], resilient_parsing=True)
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.name == "help":
            continue
        if param.is_flag:
            assert param.metavar == "", param.name
            continue
        assert param.metavar and not param.metavar.startswith("<"), param.name
        _, help_text = param.get_help_record(ctx)
        if param.default not in (None, [], ()):
            assert "[default: " in help_text, (param.name, help_text)


def test_choices_and_ranges_are_declared_for_help_and_checked_by_typer():
    """Choices and lower bounds that --help shows are enforced by typer (one line, exit 2)
    with the same values the library accepts."""
    from stabcli.inputs.corpus import FORMATS
    from stabcli.inputs.embeddings import READ_FORMATS, WRITE_FORMATS
    from stabcli.measure.downstream import MODELS, TASKS
    from stabcli.training.pretrain import MODELS as TRAIN_MODELS
    from stabcli.training.pretrain import VARY

    declared = {(name, p.name): p.metavar for name in COMMANDS for p in click_command(name).params}
    assert declared[("pretrain", "model")] == "|".join(TRAIN_MODELS)
    assert declared[("pretrain", "vary")] == "|".join(VARY)
    assert declared[("audit", "task")] == declared[("drift", "task")] == "|".join((*TASKS, "next-item"))
    assert declared[("audit", "model")] == declared[("drift", "model")] == "|".join((*MODELS, "MODULE:CLASS"))
    for name in ("pretrain", "audit", "drift"):
        assert declared[(name, "fmt")] == "table|json"
    for value in FORMATS:
        assert invoke("pretrain", "--corpus-format", value, "--help").exit_code == 0
    for value in READ_FORMATS:
        assert invoke("audit", "--input-format", value, "--help").exit_code == 0
    for value in WRITE_FORMATS:
        assert invoke("featurize", "--output-format", value, "--help").exit_code == 0


def help_examples(name: str) -> list[list[str]]:
    """The `stabcli ...` command lines of a command's --help (split at `&&`)."""
    text = click_command(name).help or ""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("stabcli ")]
    commands = []
    for line in lines:
        for part in line.split("&&"):
            argv = shlex.split(part)
            assert argv[0] == "stabcli", part
            commands.append(argv[1:])
    return commands


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_examples_that_parse(name):
    examples = help_examples(name)
    assert examples, f"stabcli {name} --help has no example"
    for argv in examples:
        command = click_command(argv[0])
        command.make_context(argv[0], argv[1:])  # parses and converts every value; raises on a bad one


def test_demo_help_states_its_measured_duration():
    assert "under a minute on 2 cores" in (click_command("demo").help or "")
