"""What the distribution ships besides the code: the PEP 561 marker and the tool config."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the check is the same on every version


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_py_typed_marker_exists_and_is_package_data():
    assert (ROOT / "stabcli" / "py.typed").is_file()
    assert "py.typed" in pyproject()["tool"]["setuptools"]["package-data"]["stabcli"]


def test_every_subpackage_is_in_the_distribution():
    """setuptools ships only the packages listed: a new subpackage missing from the list
    works in an editable install and is absent from ``pip install .``."""
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "stabcli").rglob("__init__.py")}
    listed = set(pyproject()["tool"]["setuptools"]["packages"]) - {"stabcli.sample_data"}
    assert found == listed


def test_the_test_extra_installs_the_linters_ci_runs():
    names = {req.split(">")[0].split("=")[0].strip() for req in pyproject()["project"]["optional-dependencies"]["test"]}
    assert {"ruff", "mypy", "pytest"} <= names


def test_linters_target_the_oldest_supported_python():
    config = pyproject()
    assert config["project"]["requires-python"] == ">=3.10"
    assert config["tool"]["ruff"]["target-version"] == "py310"
    assert config["tool"]["mypy"]["python_version"] == "3.10"


def test_the_command_line_needs_no_click_package():
    """typer >= 0.2x vendors click and does not install it: `pip install .` alone has no
    click, and an `import click` in stabcli made every command fail there."""
    import subprocess
    import sys

    code = "import sys; sys.modules['click'] = None; from stabcli.cli.app import app, main; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
