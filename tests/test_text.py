"""Keys, names, paths and labels are data in every renderer and message
(``stabcli.reports.text``): never rich markup, emoji codes or highlighting in the terminal,
never Markdown syntax in Markdown, and quoted data in a message is shortened."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import invoke
from stabcli.errors import quoted, shorten
from stabcli.inputs.embeddings import write_embedding
from stabcli.reports.text import literal, md_code, md_text, plain_console

# rich would print 🆕, ❌ and a bold "x" for these (emoji codes and markup), and colour numbers
DATA_KEYS = ["sku:new:35", "[bold]x[/]", ":x:", "a`b|c", "*em*", "[link=http://e.x]l[/link]", "3.14"]
EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf]")


def keyed(path: Path, seed: int, n: int = 30) -> Path:
    keys = DATA_KEYS + [f"k{i}" for i in range(n - len(DATA_KEYS))]
    write_embedding(path, keys, np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32))
    return path


def runset(root: Path, runs: int = 3) -> Path:
    from conftest import make_runset

    make_runset(root, runs=runs, n=30, epochs=1)
    (root / "keys.txt").write_text("".join(k + "\n" for k in DATA_KEYS + [f"k{i}" for i in range(30 - len(DATA_KEYS))]))
    return root


def assert_literal(text: str, keys=DATA_KEYS) -> None:
    for key in keys:
        assert key in text, (key, text)
    assert "🆕" not in text and "❌" not in text and not EMOJI.search(text), text
    assert "\x1b" not in text, "no styles or highlighting in a pipe"


def test_drift_terminal_table_prints_keys_as_they_are(tmp_path):
    result = invoke("drift", keyed(tmp_path / "b.npy", 0), keyed(tmp_path / "a.npy", 1), "--top", "30")
    assert result.exit_code == 0, result.output
    assert_literal(result.stdout)


def test_drift_with_noise_terminal_table_prints_keys_as_they_are(tmp_path):
    noise = runset(tmp_path / "noise", runs=4)
    result = invoke(
        "drift", keyed(tmp_path / "b.npy", 0), keyed(tmp_path / "a.npy", 1), "--noise", noise, "--top", "30"
    )
    assert result.exit_code == 0, result.output
    table = result.stdout[result.stdout.index("┏") :] if "┏" in result.stdout else result.stdout
    assert "🆕" not in table and "❌" not in table


def test_audit_least_stable_table_prints_keys_and_names_as_they_are(tmp_path):
    names = tmp_path / "names.tsv"
    names.write_text("".join(f"{k}\tname {k} :rocket: [red]r[/]\n" for k in DATA_KEYS))
    result = invoke("audit", runset(tmp_path / "runs"), "--top", "30", "--key-names", names, "--pairs", "200")
    assert result.exit_code == 0, result.output
    assert_literal(result.stdout)
    assert ":rocket: [red]r[/]" in result.stdout and "🚀" not in result.stdout


@pytest.mark.parametrize("command", ["audit", "featurize", "drift", "pretrain"])
def test_an_error_line_prints_a_file_name_as_it_is(tmp_path, command):
    missing = tmp_path / "z:x: [bold]b[/] :new:.npy"
    argv = {
        "audit": ["audit", missing],
        "featurize": ["featurize", missing, "--out", tmp_path / "o.npy"],
        "drift": ["drift", missing, keyed(tmp_path / "a.npy", 1)],
        "pretrain": ["pretrain", missing, "--out", tmp_path / "r"],
    }[command]
    result = invoke(*argv)
    assert result.exit_code == 2
    assert "z:x: [bold]b[/] :new:.npy" in result.stderr, result.stderr
    assert "❌" not in result.stderr and "🆕" not in result.stderr


def test_a_parse_error_prints_the_value_as_it_is():
    result = invoke("audit", "runs", "--format", ":x:[b]")
    assert result.exit_code == 2
    assert ":x:[b]" in result.stderr and "❌" not in result.stderr


def test_markdown_keeps_keys_and_file_names_literal(tmp_path):
    before = keyed(tmp_path / "b`:x:`.npy", 0)
    result = invoke("drift", before, keyed(tmp_path / "a.npy", 1), "--top", "30", "--markdown", tmp_path / "d.md")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "d.md").read_text()
    for key in DATA_KEYS:
        assert md_code(key) in text, key
    assert md_code(str(before), cell=False) in text
    names = tmp_path / "names.tsv"
    names.write_text("".join(f"{k}\t*bold* <b>x</b> :x: a~b\n" for k in DATA_KEYS))
    result = invoke(
        "audit", runset(tmp_path / "runs"), "--top", "30", "--key-names", names, "--markdown", tmp_path / "a.md"
    )
    assert result.exit_code == 0, result.output
    text = (tmp_path / "a.md").read_text()
    assert "\\*bold\\* \\<b\\>x\\</b\\> \\:x\\: a\\~b" in text
    assert md_code("a`b|c") in text


def test_md_code_fences_around_backticks():
    assert md_code("plain") == "`plain`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`x`") == "`` `x` ``"
    assert md_code("a|b") == "`a\\|b`"
    assert md_code("a|b", cell=False) == "`a|b`"
    assert md_code("a\nb") == "`a\\nb`"


def test_md_text_escapes_every_markdown_character():
    assert md_text("*a* _b_ [c](d) <e> f|g :x: `h` ~i~ &amp;") == (
        "\\*a\\* \\_b\\_ \\[c\\](d) \\<e\\> f\\|g \\:x\\: \\`h\\` \\~i\\~ \\&amp;"
    )


def test_plain_console_and_literal_print_text_as_it_is():
    buffer = io.StringIO()
    console = plain_console(file=buffer, width=200, force_terminal=True, color_system="truecolor")
    console.print("sku:new:35 [bold]x[/] :x: 3.14 http://e.x")
    from rich.console import Console

    other = Console(file=io.StringIO(), width=200)  # a library user's console, markup and emoji on
    other.print(literal("sku:new:35 [bold]x[/] :x:"))
    assert "sku:new:35 [bold]x[/] :x: 3.14 http://e.x" in buffer.getvalue()  # no highlighting codes inside
    assert "sku:new:35 [bold]x[/] :x:" in other.file.getvalue()  # type: ignore[attr-defined]


def test_quoted_data_is_shortened_in_the_middle():
    text = "a" * 1000 + "END"
    short = quoted(text, 100)
    assert len(short) < 140 and short.startswith("a" * 66) and short.endswith("END") and "characters]" in short
    assert shorten("short", 100) == "short"
    assert quoted("a\nb") == "a\\nb"


def test_an_error_quoting_a_huge_class_name_stays_short(tmp_path):
    keys = [f"k{i}" for i in range(30)]
    runs = runset(tmp_path / "runs")
    (runs / "keys.txt").write_text("".join(k + "\n" for k in keys))
    labels = tmp_path / "labels.tsv"
    big = "C" * 1_000_000
    labels.write_text("".join(f"{k}\t{big if i == 0 else 'A'}\n" for i, k in enumerate(keys)))
    result = invoke("audit", runs, "--labels", labels, "--min-class-size", "1")
    assert result.exit_code == 2, result.output
    assert len(result.stderr) < 3000 and "characters]" in result.stderr, len(result.stderr)
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1
