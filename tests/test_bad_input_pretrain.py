"""Bad inputs of ``stabcli pretrain`` (and run sets read by audit): exit 2, one line, nothing changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, invoke, make_sessions, runner
from stabcli.cli.app import app
from stabcli.errors import OptionError
from stabcli.training.pretrain import TrainConfig, pretrain

SMALL = ["--runs", "1", "--dim", "4", "--epochs", "1", "--jobs", "1"]


def corpus(t: Path) -> Path:
    path = t / "sessions.txt"
    if not path.exists():
        path.write_text(make_sessions(40, 12), encoding="utf-8")
    return path


PARAM_CASES = [
    ("alpha=1e999", "--param alpha=inf"),
    ("alpha=-0.1", "--param alpha=-0.1"),
    ("alpha=0", "--param alpha=0"),
    ("alpha=nan", "--param alpha='nan'"),
    ("alpha=None", "--param alpha=None"),
    ("alpha=True", "--param alpha=True"),
    ("alpha=b'x'", "--param alpha=b'x'"),
    ("alpha={1}", "--param alpha={1}"),
    ("alpha=1j", "--param alpha=1j"),
    ("alpha={'a': 1}", "--param alpha={'a': 1}"),
    ("alpha=[0.1]", "--param alpha=[0.1]"),
    ("ns_exponent=1e999", "--param ns_exponent=inf"),
    ("ns_exponent=-1e999", "--param ns_exponent=-inf"),
    ("sample=-1", "--param sample=-1"),
    ("sample=2", "--param sample=2"),
    ("min_alpha=-1", "--param min_alpha=-1"),
    ("min_alpha=1e999", "--param min_alpha=inf"),
    ("hs=2", "--param hs=2"),
    ("hs=0.5", "--param hs=0.5"),
    ("hs=-1", "--param hs=-1"),
    ("cbow_mean=3", "--param cbow_mean=3"),
    ("max_vocab_size=-1", "--param max_vocab_size=-1"),
    ("max_vocab_size=0", "--param max_vocab_size=0"),
    ("max_final_vocab=1.5", "--param max_final_vocab=1.5"),
    ("batch_words=0", "--param batch_words=0"),
    ("batch_words=10**99", "--param batch_words='10**99'"),
    ("callbacks=[]", "--param callbacks: set by stabcli itself"),
    ("corpus_file='/etc/passwd'", "--param corpus_file: set by"),
    ("sentences=[]", "--param sentences: set by"),
    ("trim_rule=print", "--param trim_rule: not an argument"),
    ("comment='x'", "--param comment: not an argument"),
    ("hashfxn=hash", "--param hashfxn: not an argument"),
    ("dm_mean=1", "--param dm_mean: not an argument of gensim Word2Vec that stabcli passes on (a doc2vec"),
    ("seed=3", "--param seed: set by stabcli itself"),
    ("workers=8", "--param workers: set by stabcli itself"),
    ("=1", "expected key=value"),
    ("alpha", "expected key=value"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("param, fragment", PARAM_CASES, ids=[c[0] for c in PARAM_CASES])
def test_bad_param_values_are_refused_before_gensim_sees_them(tmp_path, param, fragment):
    path = corpus(tmp_path)
    before = files_state(tmp_path)
    result = invoke("pretrain", path, "--out", tmp_path / "r", *SMALL, "--param", param)
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_doc2vec_params_are_checked_too(tmp_path, tagged_file):
    before = files_state(tmp_path)
    result = invoke(
        "pretrain", tagged_file, "--model", "doc2vec", "--out", tmp_path / "r", *SMALL, "--param", "dm_concat=7"
    )
    assert_bad_input(result, "--param dm_concat=7: expected 0 or 1", tmp_path, before)
    result = invoke(
        "pretrain", tagged_file, "--model", "doc2vec", "--out", tmp_path / "r", *SMALL, "--param", "dv_mapfile='x'"
    )
    assert_bad_input(result, "--param dv_mapfile: not an argument", tmp_path, before)


OPTION_CASES = [
    (["--runs", "0"], "'--runs' / '-n': Input should be greater than or equal to 1"),
    (["--runs", "-5"], "'--runs' / '-n': Input should be greater than or equal to 1"),
    (["--runs", "10000000"], "--runs: 10,000,000 runs: at most 100,000"),
    (["--runs", "1000000000"], "--runs: 1,000,000,000 runs"),
    (["--seed", "-1"], "'--seed': Input should be greater than or equal to 0"),
    (["--seed", str(2**32)], "--seed: must be between"),
    (["--dim", "0"], "--dim: must be at least 1, got"),
    (["--dim", "-3"], "--dim: must be at least 1, got"),
    (["--dim", "1000000000"], "--dim: "),
    (["--dim", str(2**40)], "--dim: 1099511627776 is larger than gensim accepts"),
    (["--window", "0"], "--window: must be at least 1, got"),
    (["--epochs", "0"], "--epochs: must be at least 1, got"),
    (["--min-count", "0"], "--min-count: must be at least 1, got"),
    (["--negative", "-1"], "--negative: must be at least 0, got"),
    (["--model", "glove"], "'--model': 'glove' is not one of 'word2vec', 'doc2vec'"),
    (["--vary", "jitter"], "'--vary': 'jitter' is not one of 'seed', 'shuffle', 'bootstrap'"),
    (["--timeout", "0"], "--timeout: must be a positive"),
    (["--timeout", "-1"], "--timeout: must be a positive"),
    (["--timeout", "inf"], "--timeout: must be a positive"),
    (["--timeout", "nan"], "--timeout: must be a positive"),
    (["--min-count", "1000"], "distinct token(s) occur at least --min-count 1000"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("args, fragment", OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_bad_option_values(tmp_path, args, fragment):
    path = corpus(tmp_path)
    before = files_state(tmp_path)
    result = invoke("pretrain", path, "--out", tmp_path / "r", "--epochs", "1", "--jobs", "1", *args)
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_a_memory_estimate_names_the_option_and_both_sizes(tmp_path):
    path = corpus(tmp_path)
    before = files_state(tmp_path)
    result = invoke("pretrain", path, "--out", tmp_path / "r", "--runs", "1", "--dim", "1000000000")
    assert_bad_input(result, "--dim: ", tmp_path, before)
    assert "needs about" in result.stderr and "of memory is available" in result.stderr


SCRIPT_CASES = [
    ("train --seed {seed}", "--script: must contain {out}"),
    ("train 'unclosed {out}", "--script: cannot split"),
    ("train {corpus} {out}", "--script uses {corpus} but no CORPUS"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("template, fragment", SCRIPT_CASES, ids=[c[0] for c in SCRIPT_CASES])
def test_bad_script_templates(tmp_path, template, fragment):
    before = files_state(tmp_path)
    result = invoke("pretrain", "--script", template, "--out", tmp_path / "r", "--runs", "1")
    assert_bad_input(result, fragment, tmp_path, before)


@pytest.mark.bad_input
def test_a_doc2vec_tag_with_whitespace_is_refused_naming_the_key(tmp_path):
    docs = tmp_path / "docs.tsv"
    docs.write_text("a b\tw1 w2 w3\nc\tw2 w3 w4\n", encoding="utf-8")
    before = files_state(tmp_path)
    result = invoke(
        "pretrain", docs, "--model", "doc2vec", "--corpus-format", "tagged", "--out", tmp_path / "r", *SMALL
    )
    assert_bad_input(result, "tag 'a b' contains whitespace", tmp_path, before)


# ---------------------------------------------------------------- the output directory


@pytest.mark.bad_input
def test_a_directory_of_user_files_is_refused_with_or_without_force(tmp_path):
    path = corpus(tmp_path)
    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "thesis.tex").write_text("years of work")
    before = files_state(tmp_path)
    for extra in ([], ["--force"]):
        result = invoke("pretrain", path, "--out", mine, *SMALL, *extra)
        assert_bad_input(result, "is not a run set (it holds photos)", tmp_path, before)


@pytest.mark.bad_input
def test_force_with_a_stray_manifest_leaves_every_user_file(tmp_path):
    path = corpus(tmp_path)
    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "photos" / "a.jpg").write_bytes(b"jpg")
    (mine / "thesis.tex").write_text("years of work")
    (mine / "stabcli.json").write_text(json.dumps({"schema_version": 1, "config": {"dim": 99}, "seed": 0, "runs": {}}))
    result = invoke("pretrain", path, "--out", mine, *SMALL)
    assert_bad_input(result, "made with a different configuration")
    result = invoke("pretrain", path, "--out", mine, *SMALL, "--force")
    assert result.exit_code == 0, result.output
    assert (mine / "thesis.tex").read_text() == "years of work" and (mine / "photos" / "a.jpg").read_bytes() == b"jpg"
    assert (mine / "run-000" / "vectors.npy").is_file()


def test_force_removes_only_what_stabcli_wrote_and_never_follows_a_symlink(tmp_path):
    path = corpus(tmp_path)
    root = tmp_path / "r"
    assert invoke("pretrain", path, "--out", root, *SMALL, "--runs", "2").exit_code == 0
    (root / "notes.txt").write_text("mine")
    (root / "analysis").mkdir()
    (root / "analysis" / "plot.png").write_bytes(b"png")
    inside = root / "corpus-copy.txt"
    inside.write_text(path.read_text())
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (root / "link-to-precious").symlink_to(outside)
    (root / "run-000" / "link").symlink_to(outside)  # inside a run stabcli removes
    result = invoke("pretrain", inside, "--out", root, *SMALL, "--dim", "5", "--force")
    assert result.exit_code == 0, result.output
    assert (root / "notes.txt").read_text() == "mine" and (root / "analysis" / "plot.png").read_bytes() == b"png"
    assert inside.is_file() and (outside / "keep.txt").read_text() == "keep"
    assert (root / "link-to-precious").is_symlink()
    assert not (root / "run-001").exists()  # the old run beyond --runs 1 is gone
    assert np.load(root / "run-000" / "vectors.npy").shape[1] == 5


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "name, make",
    [
        ("run-000", lambda p: p.write_text("x")),
        (".run-001.partial", lambda p: p.write_text("x")),
        ("run-002.failed", lambda p: p.write_text("x")),
        ("stabcli.lock", lambda p: p.mkdir()),
        ("keys.txt", lambda p: p.mkdir()),
    ],
)
def test_entries_of_the_wrong_kind_are_refused(tmp_path, name, make):
    path = corpus(tmp_path)
    root = tmp_path / "r"
    assert invoke("pretrain", path, "--out", root, *SMALL).exit_code == 0
    if (root / name).exists():
        import shutil

        shutil.rmtree(root / name) if (root / name).is_dir() else (root / name).unlink()
    make(root / name)
    before = files_state(tmp_path)
    result = invoke("pretrain", path, "--out", root, *SMALL, "--runs", "3")
    assert_bad_input(result, name, tmp_path, before)
    if name != "stabcli.lock":
        result = invoke("audit", root)
        assert_bad_input(result, name, tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("runs", [], "'runs' is a list"),
        ("seed", "0", "'seed' is a str"),
        ("config", 3, "'config' is a int"),
        ("runs", {"run-000": 5}, "runs['run-000'] is a int"),
        ("seed", True, "'seed' is a bool"),
    ],
)
def test_manifest_fields_of_the_wrong_type(tmp_path, field, value, fragment):
    path = corpus(tmp_path)
    root = tmp_path / "r"
    assert invoke("pretrain", path, "--out", root, *SMALL).exit_code == 0
    manifest = json.loads((root / "stabcli.json").read_text())
    manifest[field] = value
    (root / "stabcli.json").write_text(json.dumps(manifest))
    before = files_state(tmp_path)
    for argv in (["pretrain", path, "--out", root, *SMALL], ["audit", root]):
        assert_bad_input(invoke(*argv), fragment, tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"schema_version": 1, "seed": ' + "9" * 5000 + "}", "corrupted manifest"),
        ('{"schema_version": 1, "seed": NaN}', "corrupted manifest (NaN is not a number JSON allows)"),
        (b'{"schema_version": 1, "x": "\xff"}', "corrupted manifest (not UTF-8"),
        ('{"schema_version": ' + "9" * 5000 + "}", "corrupted manifest"),
    ],
)
def test_corrupt_manifests(tmp_path, text, fragment):
    root = tmp_path / "r"
    root.mkdir()
    (root / "stabcli.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    before = files_state(tmp_path)
    assert_bad_input(invoke("audit", root), fragment, tmp_path, before)
    assert_bad_input(invoke("pretrain", corpus(tmp_path), "--out", root, *SMALL), fragment)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"[1.0, NaN]", "not valid JSON (NaN is not a number JSON allows)"),
        (b"[1.0, Infinity]", "not valid JSON"),
        (b"\xff\xfe[1]", "not valid JSON (not UTF-8"),
        (b'[1, "a"]', "expected a list of per-epoch losses"),
        (b"[true]", "expected a list of per-epoch losses"),
        (b"[" + b"9" * 5000 + b"]", "not valid JSON"),
        (b"[1e999]", "contains a non-finite loss"),
    ],
)
def test_bad_losses_json_in_a_run_set(tmp_path, content, fragment):
    path = corpus(tmp_path)
    root = tmp_path / "r"
    assert invoke("pretrain", path, "--out", root, *SMALL, "--runs", "2").exit_code == 0
    (root / "run-001" / "losses.json").write_bytes(content)
    before = files_state(tmp_path)
    assert_bad_input(invoke("audit", root), fragment, tmp_path, before)


LOSSES_SCRIPT = """
import sys, numpy as np, pathlib
out = pathlib.Path(sys.argv[1])
np.save(out / 'vectors.npy', np.ones((2, 2)))
(out / 'vectors.keys.txt').write_text('a\\nb\\n')
(out / 'losses.json').write_bytes({content!r})
"""


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"[1.0, NaN]", "losses.json: not valid JSON (NaN"),
        (b"\xff", "losses.json: not valid JSON (not UTF-8"),
        (b"[1e999]", "losses.json: contains a non-finite loss"),
    ],
)
def test_a_script_writing_bad_losses_fails_its_run(tmp_path, content, fragment):
    script = tmp_path / "train.py"
    script.write_text(LOSSES_SCRIPT.format(content=content))
    result = invoke(
        "pretrain",
        "--script",
        f"{sys.executable} {script} {{out}}",
        "--out",
        tmp_path / "r",
        "--runs",
        "1",
        "--jobs",
        "1",
    )
    assert result.exit_code == 2
    assert "run-000" in result.stderr and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.output


KEYS_SCRIPT = """
import sys, numpy as np, pathlib
out = pathlib.Path(sys.argv[1])
keys = {keys!r}
np.save(out / 'vectors.npy', np.ones((len(keys), 2)))
(out / 'vectors.keys.txt').write_text(''.join(k + '\\n' for k in keys))
"""


@pytest.mark.parametrize(
    "keys, fragment",
    [
        (["a", "a"], "duplicate key 'a'"),
        (["a", "b c"], "b c"),
        (["a", ""], "run-000"),
    ],
)
def test_a_script_writing_bad_keys_fails_its_run_naming_the_key(tmp_path, keys, fragment):
    script = tmp_path / "train.py"
    script.write_text(KEYS_SCRIPT.format(keys=keys))
    result = invoke(
        "pretrain",
        "--script",
        f"{sys.executable} {script} {{out}}",
        "--out",
        tmp_path / "r",
        "--runs",
        "1",
        "--jobs",
        "1",
    )
    assert result.exit_code == 2, result.output
    assert "run-000" in result.stderr and fragment in result.stderr, result.stderr
    assert not (tmp_path / "r" / "run-000").exists()


@pytest.mark.bad_input
def test_demo_refuses_to_delete_a_user_file_in_its_featurized_run_set(tmp_path):
    phi = tmp_path / "d" / "runs-phi64"
    phi.mkdir(parents=True)
    (phi / "mywork.txt").write_text("mine")
    before = files_state(tmp_path)
    result = invoke("demo", "--out", tmp_path / "d", "--jobs", "1")
    assert_bad_input(result, "holds mywork.txt, which stabcli did not write", tmp_path, before)


@pytest.mark.bad_input
@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_refused(tmp_path, sessions_file, jobs):
    """--jobs 0 once meant every core and --jobs -3 one at a time, silently."""
    before = files_state(tmp_path)
    result = runner.invoke(app, ["pretrain", str(sessions_file), "--out", str(tmp_path / "r"), "--jobs", jobs])
    assert_bad_input(result, "--jobs", tmp_path, before)


def test_library_jobs_below_one_names_the_parameter(tmp_path, sessions_file):
    with pytest.raises(OptionError) as info:
        pretrain(tmp_path / "r", sessions_file, TrainConfig(dim=4, epochs=1), runs=1, jobs=0)
    assert info.value.param == "jobs" and not (tmp_path / "r").exists()
