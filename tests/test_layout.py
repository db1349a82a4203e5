"""Reports at any terminal width: no table drops a column or cuts a key or a number; below
the width a table needs, it is stacked (one block per row). Help written to a pipe is
never cut."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from conftest import make_runset
from stabcli.cli import output
from stabcli.cli.app import app
from stabcli.inputs.embeddings import write_embedding
from stabcli.reports.layout import needed_width, print_table

runner = CliRunner()
WIDTHS = [40, 60, 70, 80, 120]
BOX = re.compile(r"[\u2500-\u257f]")  # box-drawing characters


def _tokens(text: str) -> set[str]:
    return {t.rstrip(":") for t in BOX.sub(" ", text).split()} - {""}


def _render(table_factory, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), markup=False, emoji=False, highlight=False)
    print_table(console, table_factory(), "Title of the table")
    return console.file.getvalue()


def _table() -> Table:
    table = Table()
    table.add_column("variant", no_wrap=True)
    table.add_column("accuracy", justify="right", no_wrap=True)
    table.add_column("flip rate", justify="right", no_wrap=True)
    table.add_column("reading")
    table.add_row("phi:64@0.5", "0.449 (0.012)", "0.0312", "featurized with a long note about it")
    table.add_row("aligned", "0.451 (0.010)", "0.0299", "short")
    return table


@pytest.mark.parametrize("width", WIDTHS)
def test_print_table_is_whole_or_stacked(width):
    text = _render(_table, width)
    assert _tokens(_render(_table, 1000)) <= _tokens(text)
    for cell in ("phi:64@0.5", "0.449 (0.012)", "0.0312", "0.451 (0.010)"):
        assert cell in text  # every key and number whole, on one line
    stacked = needed_width(_table()) > width
    assert ("  accuracy: 0.449 (0.012)" in text) == stacked
    assert text.splitlines()[0] == "Title of the table"


def _report_tokens(args: list[str], width: int, monkeypatch) -> tuple[set[str], str]:
    monkeypatch.setattr(output.out, "width", width)
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code in (0, 1), result.output
    return _tokens(result.stdout), result.stdout


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout")
    runs = make_runset(root / "runs", runs=3, n=60, dim=6)
    labels = root / "labels.csv"
    labels.write_text("".join(f"k{i},{'abc'[i % 3]}\n" for i in range(60)))
    names = root / "names.tsv"
    names.write_text("".join(f"k{i}\tA Rather Long Display Name For Key Number {i} (1995)\n" for i in range(60)))
    keys = [f"k{i}" for i in range(60)]
    rng = np.random.default_rng(3)
    before = rng.standard_normal((60, 6)).astype(np.float32)
    write_embedding(root / "before.npy", keys, before)
    write_embedding(root / "after.npy", keys, before + 0.3 * rng.standard_normal((60, 6)).astype(np.float32))
    return {"root": root, "runs": runs, "labels": labels, "names": names}


def _check_all_widths(args, monkeypatch):
    wide, _ = _report_tokens(args, 1000, monkeypatch)
    for width in WIDTHS:
        narrow, text = _report_tokens(args, width, monkeypatch)
        missing = wide - narrow
        assert not missing, (width, sorted(missing)[:10], text)


def test_audit_with_labels_at_every_width(inputs, monkeypatch):
    args = ["audit", inputs["runs"], "--knn-k", "3", "--knn-queries", "10", "--pairs", "200"]
    args += ["--labels", inputs["labels"], "--key-names", inputs["names"], "--top", "5"]
    _check_all_widths(args, monkeypatch)


def test_drift_at_every_width(inputs, monkeypatch):
    root = inputs["root"]
    args = ["drift", root / "before.npy", root / "after.npy", "--labels", inputs["labels"]]
    args += ["--key-names", inputs["names"]]
    _check_all_widths(args, monkeypatch)


def test_featurize_report_at_every_width(inputs, monkeypatch, tmp_path):
    for width in [1000, *WIDTHS]:
        monkeypatch.setattr(output.out, "width", width)
        out = tmp_path / f"phi{width}.npy"
        result = runner.invoke(app, ["featurize", str(inputs["root"] / "before.npy"), "--out", str(out), "--dim", "16"])
        assert result.exit_code == 0, result.output
        assert f"wrote {out}:" in result.stdout.replace("\n", "")
        assert all(len(line) > 0 for line in result.stdout.splitlines())


@pytest.mark.parametrize("command", ["audit", "drift", "featurize", "pretrain", "sweep"])
def test_help_into_a_pipe_is_never_cut(command, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    piped = runner.invoke(app, [command, "--help"]).stdout
    import typer.rich_utils

    monkeypatch.setenv("TERMINAL_WIDTH", "1000")  # typer reads it at import: set its module value too
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)
    whole = runner.invoke(app, [command, "--help"]).stdout
    assert piped.count("…") == whole.count("…")  # only the help's own ellipses
    assert _tokens(whole) <= _tokens(piped)
