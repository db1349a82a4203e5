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
    stacked = needed_width(_table(), borders=False) > width
    assert ("  accuracy: 0.449 (0.012)" in text) == stacked
    assert text.splitlines()[0] == "Title of the table"
    bordered = needed_width(_table()) <= width
    assert (BOX.search(text) is not None) == bordered  # borders only when the table fits with them


def test_a_table_that_fits_only_without_borders_keeps_its_columns_and_stacked_blocks_name_every_key():
    table = _table()
    bare, boxed = needed_width(table, borders=False), needed_width(table)
    assert boxed - bare == len(table.columns) + 1  # one separator between columns and two edges
    text = _render(_table, bare)
    assert not BOX.search(text) and "phi:64@0.5  0.449 (0.012)     0.0312" in text  # columns, no borders
    assert "accuracy: " not in text
    console = Console(width=30, file=io.StringIO(), markup=False, emoji=False, highlight=False)
    print_table(console, _table(), "T", keys=2)
    lines = console.file.getvalue().splitlines()
    assert lines[1] == "variant: phi:64@0.5 · accuracy: 0.449 (0.012)" and lines[2] == "  flip rate: 0.0312"
    assert lines[-1] == "" and lines[-2] == "  reading: short"  # a blank line ends the last block


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


def test_compare_at_every_width_and_whole_at_120(inputs, monkeypatch):
    other = make_runset(inputs["root"] / f"other{len(list(inputs['root'].iterdir()))}", runs=3, n=60, dim=6, seed=5)
    args = ["compare", inputs["runs"], other, "--knn-k", "3", "--knn-queries", "10", "--pairs", "200"]
    _check_all_widths(args, monkeypatch)
    _, text = _report_tokens(args, 120, monkeypatch)
    lines = text.splitlines()
    assert lines[3] == "A vs B" and lines[4].split()[:3] == ["measure", "A", "B"]  # a table, not stacked blocks


def test_next_item_at_every_width_stacked_blocks_name_variant_profile_and_k(inputs, monkeypatch):
    rng = np.random.default_rng(4)
    sessions = inputs["root"] / "sessions.txt"
    sessions.write_text("".join(" ".join(f"k{i}" for i in rng.integers(0, 60, 6)) + "\n" for _ in range(80)))
    args = ["audit", inputs["runs"], "--task", "next-item", "--interactions", sessions, "--k-list", "5,10"]
    args += ["--knn-k", "3", "--knn-queries", "10", "--pairs", "200"]
    _check_all_widths(args, monkeypatch)
    _, text = _report_tokens(args, 60, monkeypatch)
    assert "variant: h · profile: mean · K: 10\n" in text and "  stale aligned: " in text


def test_sweep_at_every_width(tmp_path):
    from conftest import make_sessions
    from stabcli.commands.audit import AuditOptions
    from stabcli.commands.sweep import SweepOptions, run_sweep
    from stabcli.reports.sweep_render import render_terminal
    from stabcli.training import sweep_plan
    from stabcli.training.pretrain import TrainConfig

    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(60, 20), encoding="utf-8")
    options = SweepOptions(grid=sweep_plan.parse_grid("window=2,3"), sizes=[0.5, 1.0], runs=2, target="knn_overlap=0.9")
    config = TrainConfig(dim=4, epochs=1, window=2)
    report = run_sweep(corpus, tmp_path / "sw", config, options, audit=AuditOptions(knn_k=3, pairs=200), jobs=1)

    def render(width: int) -> str:
        console = Console(width=width, file=io.StringIO(), markup=False, emoji=False, highlight=False)
        render_terminal(report, console)
        return console.file.getvalue()

    wide = render(1000)
    for width in WIDTHS:
        text = render(width)
        assert not _tokens(wide) - _tokens(text), width
        assert "cell: size-0.5_window-2\n" in text or "size-0.5_window-2 " in text
        assert "\n\nData size" in text or "┘\nData size" in text or " \nData size" in text  # set apart


@pytest.mark.parametrize("columns", [None, "40", "80"])
@pytest.mark.parametrize("command", ["audit", "drift", "featurize", "pretrain", "sweep", "compare", "demo"])
def test_help_into_a_pipe_is_never_cut(command, columns, monkeypatch):
    """Into a pipe, help is whole even when COLUMNS asks for a narrow width (CI logs set it):
    the narrowest width from COLUMNS up that cuts no word."""
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    piped = runner.invoke(app, [command, "--help"]).stdout
    import typer.rich_utils

    monkeypatch.setenv("TERMINAL_WIDTH", "1000")  # typer reads it at import: set its module value too
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 1000)
    whole = runner.invoke(app, [command, "--help"]).stdout
    assert piped.count("…") == whole.count("…")  # only the help's own ellipses
    assert _tokens(whole) <= _tokens(piped)
