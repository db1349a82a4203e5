"""``stabcli audit`` end to end: key names, per-key export, strict JSON, plots, output in
pipes (no wrapping, a closed pipe is quiet), featurized and loss-less run sets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import invoke, make_runset
from stabcli.cli.app import EXIT_BROKEN_PIPE
from stabcli.inputs.keytable import PER_KEY_COLUMNS

FAST = ["--knn-k", "3", "--knn-queries", "5", "--pairs", "200"]


def strict_json(text):
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def counted(tmp_path):
    root = make_runset(tmp_path / "runs", runs=3, n=12)
    (root / "key_counts.txt").write_text("".join(f"{10 * (i + 1)}\n" for i in range(12)))
    return root


def test_key_names_from_a_movielens_item_file_and_per_key_csv(counted, tmp_path):
    item = tmp_path / "u.item"
    item.write_bytes(
        "".join(f"k{i}|Café Film {i} (1995)|01-Jan-1995||http://x|0|1\n" for i in range(12)).encode("latin-1")
    )
    result = invoke(
        "audit",
        counted,
        *FAST,
        "--top",
        "12",
        "--key-names",
        item,
        "--encoding",
        "latin-1",
        "--per-key",
        tmp_path / "keys.csv",
        "--json",
        tmp_path / "r.json",
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "Café Film 3 (1995)" in result.stdout and "relative instability" in result.stdout
    report = strict_json((tmp_path / "r.json").read_text())
    table = pd.read_csv(tmp_path / "keys.csv")
    assert list(table.columns) == PER_KEY_COLUMNS and len(table) == 12
    assert table["frequency"].tolist() == [10 * (i + 1) for i in range(12)]
    assert table["name"].tolist() == [f"Café Film {i} (1995)" for i in range(12)]
    rows = table.set_index("key")
    for item_json in report["representation"]["least_stable"]:
        row = rows.loc[item_json["key"]]
        assert row["relative_instability"] == pytest.approx(item_json["relative_instability"])
        assert row["aligned_variance"] == pytest.approx(item_json["aligned_variance"])
        assert row["knn_overlap"] == pytest.approx(item_json["knn_overlap"])
        assert row["norm"] ** 2 == pytest.approx(item_json["mean_squared_norm"])
        assert item_json["frequency"] == row["frequency"] and item_json["name"] == row["name"]
    assert table["displacement"].mean() == pytest.approx(report["representation"]["semantic_displacement"])


@pytest.mark.parametrize(
    "name, content",
    [
        ("names.tsv", "key\ttitle\n" + "".join(f"k{i}\tTitle {i}\n" for i in range(12))),
        ("names.csv", "key,title\n" + "".join(f'k{i},"Title {i}, the sequel"\n' for i in range(12))),
        ("names.txt", "\ufeff" + "".join(f"k{i}::Title {i}::Drama\n" for i in range(12))),
    ],
)
def test_key_names_from_two_column_tables_and_parquet_export(counted, tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    result = invoke("audit", counted, *FAST, "--top", "12", "--key-names", path, "--per-key", tmp_path / "k.parquet")
    assert result.exit_code == 0, result.output
    assert "Title 7" in result.stdout
    table = pd.read_parquet(tmp_path / "k.parquet")
    assert list(table.columns) == PER_KEY_COLUMNS
    assert table.set_index("key").loc["k7", "name"].startswith("Title 7")
    assert table["knn_overlap"].notna().sum() == 12  # --top 12 computes every key's overlap


def test_json_on_stdout_is_strict_and_stderr_is_empty(counted):
    result = invoke("audit", counted, *FAST, "--format", "json", "--check", "representation.cka>=0")
    assert result.exit_code == 0 and result.stderr == ""
    report = strict_json(result.stdout)
    assert report["representation"]["noise_share_independent"] == pytest.approx(2 / 3)
    assert report["training"]["by_epoch"][-1]["variance_mean"] == pytest.approx(
        np.mean(report["representation"]["variance_per_dim"])
    )
    assert report["checks"][0]["passed"] is True and report["passed"] is True


def test_plots_draw_fig1c_and_skip_fig1b_without_losses(tmp_path):
    root = make_runset(tmp_path / "runs", losses=False, epochs=3)
    result = invoke("audit", root, *FAST, "--plots", tmp_path / "plots")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "fig1a_variance_per_dim.png",
        "fig1c_noise_by_epoch.png",
        "fig1d_coordinate_vs_inner_product.png",
    ]
    assert result.stdout.count("the model reports no training loss") == 1
    assert "n/a" not in result.stdout and "mean loss" not in result.stdout
    assert "variance mean" in result.stdout
    assert [line for line in result.stderr.splitlines() if line] == [
        f"wrote {tmp_path / 'plots' / name}"
        for name in ("fig1a_variance_per_dim.png", "fig1c_noise_by_epoch.png", "fig1d_coordinate_vs_inner_product.png")
    ]


def test_verdict_states_pure_noise_and_featurized_input(tmp_path):
    block = {"dim": 16, "sigma": 0.5, "seed": 0, "normalize": True}
    root = make_runset(tmp_path / "phi", runs=4, manifest={"schema_version": 1, "runs": {}, "featurize": block})
    result = invoke("audit", root, *FAST)
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert "(pure noise: 75% ± " in first and first.endswith("featurized run set (phi M=16, σ=0.5)")
    data = strict_json(invoke("audit", root, *FAST, "--format", "json").stdout)
    assert data["input"]["featurized"] == block


def _stabcli(args, env_extra=None, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "stabcli", *map(str, args)], capture_output=True, text=True, env=env, **kwargs
    )


def test_tables_do_not_wrap_in_a_pipe_and_honour_columns(tmp_path):
    root = make_runset(tmp_path / "runs", n=12)
    long_name = "A Very Long Display Name That Would Wrap At Eighty Columns In A CI Log (1995)"
    names = tmp_path / "names.tsv"
    names.write_text("".join(f"k{i}\t{long_name} #{i}\n" for i in range(12)))
    args = ["audit", root, *FAST, "--knn-queries", "12", "--top", "12", "--key-names", names]
    piped = _stabcli(args)
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert sum(long_name in line for line in lines) == 12  # every name whole, on one line
    assert any(line.startswith("Least stable keys (top 12 of 12 by k-NN overlap") for line in lines)
    assert max(map(len, lines)) > 120
    narrow = _stabcli(args, {"COLUMNS": "80"})  # tables fit the width asked for; sentences stay whole
    table_lines = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert narrow.returncode == 0 and table_lines and max(map(len, table_lines)) <= 80


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_closed_pipe_is_quiet(tmp_path, fmt):
    """``stabcli audit runs | head -1``: no traceback, no message, not the failed-check code."""
    root = make_runset(tmp_path / "runs", n=3000)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stabcli", "audit", str(root), *FAST, "--top", "3000", "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    stderr = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first.strip()
    assert stderr == "" and code in (0, EXIT_BROKEN_PIPE), (code, stderr)


def test_frequencies_file_gives_the_table_in_every_output(tmp_path):
    """Embedding files have no recorded counts: --frequencies adds the band table to the
    terminal, JSON, Markdown and plots; keys without a count are in no band (a warning)."""
    rng = np.random.default_rng(0)
    paths = []
    for r in range(3):
        path = tmp_path / f"run{r}.txt"
        path.write_text(
            "40 4\n"
            + "".join(f"w{i} " + " ".join(f"{v:.4f}" for v in rng.standard_normal(4)) + "\n" for i in range(40))
        )
        paths.append(path)
    counts = tmp_path / "counts.tsv"
    counts.write_text("word\tcount\n" + "".join(f"w{i}\t{1 + i * i}\n" for i in range(39)))
    result = invoke(
        "audit",
        *paths,
        "--knn-k",
        "3",
        "--frequencies",
        counts,
        "--min-frequency",
        "2",
        "--json",
        tmp_path / "r.json",
        "--markdown",
        tmp_path / "r.md",
        "--plots",
        tmp_path / "plots",
    )
    assert result.exit_code == 0, result.output
    assert "Stability by frequency (--frequencies)" in result.stdout
    assert "Least stable keys (top 20 of 38 by k-NN overlap, lowest first; frequency ≥ 2)" in result.stdout
    assert "warning: --frequencies: 1 of the 40 compared keys have no count; they are in no band" in result.stderr
    rep = strict_json((tmp_path / "r.json").read_text())["representation"]
    assert [b["band"] for b in rep["by_frequency"]] == ["1", "2–5", "6–20", "21–100", "101–1,000", ">1,000"]
    assert sum(b["keys"] for b in rep["by_frequency"]) == 39
    assert rep["frequency_source"] == "--frequencies" and rep["min_frequency"] == 2
    assert all(item["frequency"] >= 2 for item in rep["least_stable"])
    assert "Stability by frequency (--frequencies):" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "plots" / "by_frequency.png").stat().st_size > 0


def test_a_featurized_run_set_is_phi_h_in_the_downstream_audit(tmp_path):
    block = {"dim": 4, "sigma": 1.0, "seed": 0, "normalize": True}
    root = make_runset(tmp_path / "phi", runs=3, n=40, manifest={"schema_version": 1, "runs": {}, "featurize": block})
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"k{i},{'ab'[i % 2]}\n" for i in range(40)))
    result = invoke("audit", root, *FAST, "--labels", labels, "--json", tmp_path / "r.json", "--jobs", "1")
    assert result.exit_code == 0, result.output
    ds = strict_json((tmp_path / "r.json").read_text())["downstream"]
    assert list(ds["variants"]) == ["phi(h)", "avg", "aligned"]  # no phi of phi by default
    assert ds["variants"]["phi(h)"]["source"] == "phi(h)"
    assert ds["recommendation"]["prefer"] == "balanced" and "raw h" not in ds["recommendation"]["reason"]
    assert "phi(h)" in result.stdout and "raw h" not in result.stdout
    explicit = invoke("audit", root, *FAST, "--labels", labels, "--variants", "h,phi:8", "--format", "json")
    rec = strict_json(explicit.stdout)["downstream"]["recommendation"]
    assert rec["variant"] != "phi:8" and "phi:8 (phi of phi) not recommended" in rec["reason"]
