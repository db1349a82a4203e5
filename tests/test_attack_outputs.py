"""Hostile outputs: hard links, run sets reached through one of their files, devices and
FIFOs, COLUMNS values. Each case is an attack that once lost data or output."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, invoke, make_runset


def save_npy(path: Path, seed: int = 0, n: int = 12, d: int = 4) -> Path:
    np.save(path, np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32))
    return path


AUDIT_FAST = ("--knn-k", "2", "--knn-queries", "5", "--pairs", "20")


# -- hard links: the same file under another name is the input ------------------------------


def test_featurize_out_hard_linked_to_the_input_is_refused_even_with_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_npy(tmp_path / "a.npy")
    os.link(tmp_path / "a.npy", tmp_path / "same.npy")
    before = files_state(tmp_path)
    assert_bad_input(
        invoke("featurize", "a.npy", "--out", "same.npy", "--dim", "4", "--force"),
        "--out same.npy: is the input a.npy",
        tmp_path,
        before,
    )


def test_featurize_keys_file_hard_linked_to_the_inputs_keys_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_npy(tmp_path / "a.npy")
    (tmp_path / "a.keys.txt").write_text("".join(f"k{i}\n" for i in range(12)))
    os.link(tmp_path / "a.keys.txt", tmp_path / "o.keys.txt")
    before = files_state(tmp_path)
    assert_bad_input(
        invoke("featurize", "a.npy", "--out", "o.npy", "--dim", "4", "--force"),
        "is the input a.keys.txt",
        tmp_path,
        before,
    )


def test_audit_json_hard_linked_to_a_run_set_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    os.link(tmp_path / "runs" / "stabcli.json", tmp_path / "report.json")
    before = files_state(tmp_path)
    assert_bad_input(
        invoke("audit", "runs", *AUDIT_FAST, "--json", "report.json", "--force"),
        "--json report.json: is the input",
        tmp_path,
        before,
    )


def test_summary_hard_linked_to_an_input_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    os.link(tmp_path / "runs" / "keys.txt", tmp_path / "summary.md")
    before = files_state(tmp_path)
    result = invoke("audit", "runs", *AUDIT_FAST, env={"GITHUB_STEP_SUMMARY": "summary.md"})
    assert_bad_input(result, "GITHUB_STEP_SUMMARY summary.md: is the input", tmp_path, before)


# -- a run set is an input when one of its files is ----------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "runs/run-001/vectors.npy",  # a run's vectors, not itself an input
        "runs/stabcli.json",  # the manifest
        "runs/keys.txt",  # the keys file
        "runs/run-001/report.json",  # a new file inside a run
        "runs/report.json",  # a new file at the top of the run set
        "runs/run-001/epochs/001.npy",  # a checkpoint
    ],
)
def test_audit_of_run_files_never_writes_into_their_run_set(tmp_path, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs", runs=3)
    before = files_state(tmp_path)
    result = invoke(
        "audit", "runs/run-000/vectors.npy", "runs/run-002/vectors.npy", *AUDIT_FAST, "--json", target, "--force"
    )
    assert_bad_input(result, f"--json {target}: lies inside the run set runs", tmp_path, before)


def test_featurize_of_a_checkpoint_never_writes_into_its_run_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs", runs=2)
    before = files_state(tmp_path)
    result = invoke(
        "featurize", "runs/run-000/epochs/001.npy", "--out", "runs/run-001/vectors.npy", "--dim", "4", "--force"
    )
    assert_bad_input(result, "--out runs/run-001/vectors.npy: lies inside the run set runs", tmp_path, before)


def test_a_file_that_only_looks_like_a_run_file_does_not_block_its_folder(tmp_path, monkeypatch):
    """Without a manifest beside it, ``run-000/`` is just a folder: outputs may go next to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run-000").mkdir()
    save_npy(tmp_path / "run-000" / "vectors.npy")
    result = invoke("featurize", "run-000/vectors.npy", "--out", "run-000/phi.npy", "--dim", "4")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run-000" / "phi.npy").is_file()


# -- outputs that exist and are not regular files ------------------------------------------


def test_an_existing_fifo_output_is_refused_even_with_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    os.mkfifo(tmp_path / "pipe")
    before = files_state(tmp_path / "runs")  # (reading a FIFO's bytes would block)
    assert_bad_input(
        invoke("audit", "runs", *AUDIT_FAST, "--json", "pipe", "--force"),
        "--json pipe: is not a regular file",
        tmp_path / "runs",
        before,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "runs"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)


def test_an_existing_socket_output_is_refused_even_with_force(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    save_npy(tmp_path / "in" / "a.npy")
    path = tmp_path / "s.npy"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
        before = files_state(tmp_path / "in")
        assert_bad_input(
            invoke("featurize", "in/a.npy", "--out", "s.npy", "--dim", "4", "--force"),
            "--out s.npy: is not a regular file",
            tmp_path / "in",
            before,
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "s.npy"]
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        sock.close()


def test_a_symlink_to_a_device_is_refused_even_with_force(tmp_path, monkeypatch):
    """``--markdown /dev/null --force`` as root would rename a temporary file over the
    system's /dev/null; a link to it is refused the same way, and the link stays."""
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    (tmp_path / "null.md").symlink_to(os.devnull)
    before = files_state(tmp_path)  # (a symlink is recorded by its target, never read)
    assert_bad_input(
        invoke("audit", "runs", *AUDIT_FAST, "--markdown", "null.md", "--force"),
        "--markdown null.md: is not a regular file",
        tmp_path,
        before,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_character_device_is_refused_before_any_work(tmp_path, monkeypatch):
    """As root, ``--json /dev/null --force`` renamed a regular file over /dev/null. Tested on
    a private device node (never the real /dev/null, in case the guard regresses)."""
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    before = files_state(tmp_path / "runs")
    assert_bad_input(
        invoke("audit", "runs", *AUDIT_FAST, "--json", "null", "--force"),
        "--json null: is not a regular file",
        tmp_path / "runs",
        before,
    )
    assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)


# -- COLUMNS ---------------------------------------------------------------------------------


def run_cli(args, columns, cwd):
    env = {**os.environ, "COLUMNS": columns}
    return subprocess.run(
        [sys.executable, "-m", "stabcli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("columns", ["0", "1", "00"])
def test_columns_zero_or_tiny_never_swallows_an_error_line(tmp_path, columns):
    result = run_cli(["audit", "missing-runs"], columns, tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "missing-runs" in lines[0], result.stderr


@pytest.mark.parametrize("columns", ["0", "3", "abc", "-7", "80"])
def test_columns_never_loses_featurize_output(tmp_path, columns):
    save_npy(tmp_path / "a.npy")
    result = run_cli(["featurize", "a.npy", "--out", "o.npy", "--dim", "4"], columns, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote o.npy: 1 run(s) × 12 keys, 4 → 4 dims (sidecar o.npy.featurize.json)" in result.stdout
    assert result.stderr == ""


# -- GITHUB_STEP_SUMMARY under a file-size limit -------------------------------------------


def limited_audit(tmp_path, summary: str):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    make_runset(tmp_path / "runs")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": summary}
    return subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", "runs", *AUDIT_FAST],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


def test_a_summary_append_that_fails_leaves_the_summary_as_it_was(tmp_path):
    """``ulimit -f`` mid-append left the first 1,024 bytes of the report glued to the
    summary of earlier steps; now the append is all or nothing too."""
    earlier = "## earlier step\n\nall good\n"
    (tmp_path / "summary.md").write_text(earlier)
    result = limited_audit(tmp_path, "summary.md")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["error: summary.md: cannot write (File too large)"]
    assert (tmp_path / "summary.md").read_text() == earlier


def test_a_new_summary_that_fails_is_not_left_behind(tmp_path):
    result = limited_audit(tmp_path, "summary.md")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == ["error: summary.md: cannot write (File too large)"]
    assert not (tmp_path / "summary.md").exists()


def test_a_summary_on_a_pipe_is_still_appended(tmp_path):
    """``GITHUB_STEP_SUMMARY=/dev/stdout`` with stdout a pipe: appended, no seek error."""
    make_runset(tmp_path / "runs")
    env = {**os.environ, "GITHUB_STEP_SUMMARY": "/dev/stdout"}
    result = subprocess.run(
        [sys.executable, "-m", "stabcli", "audit", "runs", *AUDIT_FAST, "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "# " in result.stdout and '"passed": true' in result.stdout


# -- outputs spelled as a bare directory ('', '.', '/') --------------------------------------


@pytest.mark.parametrize("option", ["--json", "--markdown", "--per-key", "--plots"])
@pytest.mark.parametrize("spelling", ["", ".", "/", "./", "sub/.."])
def test_audit_outputs_without_a_name_are_one_line(tmp_path, monkeypatch, option, spelling):
    """``--json .`` or ``--json ''`` ended in "ValueError: PosixPath('.') has an empty name"."""
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs")
    (tmp_path / "sub").mkdir()
    before = files_state(tmp_path)
    result = invoke("audit", "runs", *AUDIT_FAST, option, spelling, "--force")
    assert_bad_input(result, f"{option} ", tmp_path, before)
    assert "name" in result.stderr or "contains the input" in result.stderr, result.stderr


@pytest.mark.parametrize("source", ["a.npy", "runs"])
@pytest.mark.parametrize("option", ["--out", "--save-transform"])
@pytest.mark.parametrize("spelling", ["", ".", "/"])
def test_featurize_outputs_without_a_name_are_one_line(tmp_path, monkeypatch, source, option, spelling):
    monkeypatch.chdir(tmp_path)
    save_npy(tmp_path / "a.npy")
    make_runset(tmp_path / "runs")
    before = files_state(tmp_path)
    args = (
        ["--out", spelling]
        if option == "--out"
        else ["--out", "o.npy" if source == "a.npy" else "o", "--save-transform", spelling]
    )
    result = invoke("featurize", source, *args, "--dim", "4", "--force")
    assert_bad_input(result, f"{option} ", tmp_path, before)
    assert "name" in result.stderr or "contains the input" in result.stderr, result.stderr


# -- names with line breaks or escape sequences stay one visible line ------------------------


@pytest.mark.parametrize(
    "name, shown",
    [
        ("no\nsuch", "no\\nsuch"),
        ("x\r\x1b[31mred", "x\\r\\x1b[31mred"),
        ("rtl\u200fmark\u2028", "rtl\\u200fmark\\u2028"),
    ],
)
def test_an_input_name_with_a_line_break_is_one_escaped_line(tmp_path, monkeypatch, name, shown):
    monkeypatch.chdir(tmp_path)
    assert_bad_input(invoke("audit", name), f"{shown}: ")


def test_an_output_directory_with_a_newline_is_one_escaped_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_npy(tmp_path / "a.npy")
    before = files_state(tmp_path)
    assert_bad_input(
        invoke("featurize", "a.npy", "--out", "x\ny/o.npy", "--dim", "4"),
        "--out x\\ny/o.npy: directory x\\ny does not exist",
        tmp_path,
        before,
    )


def test_a_stray_file_with_a_newline_is_named_on_one_line(tmp_path, monkeypatch):
    """pretrain's "is not a run set (it holds …)" printed the raw name across two lines."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a\nb").write_text("mine")
    (tmp_path / "c.txt").write_text("t1 t2 t3\nt2 t3 t1\n")
    before = files_state(tmp_path)
    result = invoke("pretrain", "c.txt", "--out", "out", "--runs", "2", "--epochs", "1", "--dim", "4", "--jobs", "1")
    assert_bad_input(result, "a\\nb", tmp_path, before)


# -- drift's outputs follow the same rule --------------------------------------------------


def drift_pair(tmp_path):
    for name, seed in (("before", 1), ("after", 2)):
        save_npy(tmp_path / f"{name}.npy", seed)
        (tmp_path / f"{name}.keys.txt").write_text("".join(f"k{i}\n" for i in range(12)))


def test_drift_json_hard_linked_to_an_input_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    drift_pair(tmp_path)
    os.link(tmp_path / "after.npy", tmp_path / "same.npy")
    before = files_state(tmp_path)
    assert_bad_input(
        invoke("drift", "before.npy", "after.npy", "--knn-k", "2", "--json", "same.npy", "--force"),
        "--json same.npy: is the input after.npy",
        tmp_path,
        before,
    )


def test_drift_of_run_files_never_writes_into_their_run_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_runset(tmp_path / "runs", runs=3, n=12)
    before = files_state(tmp_path)
    result = invoke(
        "drift",
        "runs/run-000/vectors.npy",
        "runs/run-001/vectors.npy",
        "--knn-k",
        "2",
        "--json",
        "runs/run-002/vectors.npy",
        "--force",
    )
    assert_bad_input(result, "--json runs/run-002/vectors.npy: lies inside the run set runs", tmp_path, before)


def test_drift_never_replaces_a_fifo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    drift_pair(tmp_path / "in")
    os.mkfifo(tmp_path / "pipe")
    before = files_state(tmp_path / "in")
    result = invoke("drift", "in/before.npy", "in/after.npy", "--knn-k", "2", "--markdown", "pipe", "--force")
    assert_bad_input(result, "--markdown pipe: is not a regular file", tmp_path / "in", before)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
