"""Bad inputs of ``stabcli sweep`` found by a hostile probe of its grid, sizes, target and
script template: one ``error:`` line naming the option, exit 2, and nothing written (no
sweep directory, no sample), before any training (the bad-input catalogue)."""

from __future__ import annotations

import pytest

from conftest import assert_bad_input, files_state, invoke, make_sessions

pytestmark = pytest.mark.bad_input
TEMPLATE = "python train.py --corpus {corpus} --out {out} --seed {seed} --w {w}"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--grid", "nope=1"], "--grid nope: not a pretrain option"),
        (["--grid", "window=0"], "--grid window=0: must be at least 1"),
        (["--sizes", "0,1"], "--sizes '0,1': 0 is not a share in (0, 1]"),
        (["--runs", "1"], "'-n': Input should be greater than or equal to 2"),
        (["--target", "knn_overlap=1.5"], "--target 'knn_overlap=1.5'"),
        (["--target", "speed=1"], "expected MEASURE=VALUE"),
        (["--check", "pareto.front.0>1"], "--check pareto.front.0: the Pareto front needs --labels FILE"),
        (["--check", "cells.x.nothing>1"], "--check: no 'nothing' in cells.x"),
        (["--vary", "shuffle"], "No such option: --vary"),
        # a check or target on what this sweep does not measure: refused before training, not failed after it
        (["--target", "churn=0.1"], "--target 'churn=0.1': churn is measured with --labels FILE"),
        (["--check", "data_size.eis.b<0"], "--check data_size.eis.b: the data-size curves need at least two --sizes"),
        (["--sizes", "0.5,1", "--check", "data_size.churn.b<0"], "data_size.churn.b: the churn curve needs --labels"),
        (["--check", "swap_one.curve.b<0"], "--check swap_one.curve.b: needs --swap-one N"),
        # the same cell twice: values equal as numbers, sizes equal to the 6 digits of their names or in sequences
        (["--grid", "sg=1,True"], "--grid 'sg=1,True': a value is repeated"),
        (["--grid", "alpha=1,1.0"], "--grid 'alpha=1,1.0': a value is repeated"),
        (["--sizes", "0.5000001,0.5000002,1"], "--sizes 0.5000001,0.5000002: the same size to 6 digits (size-0.5)"),
        (["--sizes", "0.49,0.5,1"], "--sizes 0.49,0.5: both give the same sample (30 of 60 sequences)"),
        # digits of other scripts, which float() reads and no other option accepts
        (["--sizes", "\uff11"], "--sizes '\uff11': '\uff11' is not a number"),
        (["--target", "eis=\uff11"], "--target 'eis=\uff11': '\uff11' is not a number"),
        (["--sizes", ""], "--sizes '': '' is not a number"),
        # a min_count no token of a sample reaches: refused before the samples are written
        (["--grid", "min_count=1,100000"], "--grid min_count=100000: the size-1 sample (60 sequences) has 0 distinct"),
        (["--min-count", "100000", "--sizes", "0.5,1"], "--min-count 100000: the size-0.5 sample (30 sequences)"),
        # a template field nothing fills would reach every script literally
        (["--script", TEMPLATE + " --v {v}", "--grid", "w=1"], "--script: {v} is neither a field stabcli fills"),
        (["--script", TEMPLATE], "--script: {w} is neither a field stabcli fills ({seed} {out} {run} {corpus})"),
    ],
)
def test_bad_sweep_plans_are_refused_before_anything_is_written(tmp_path, extra, fragment):
    corpus = tmp_path / "c.txt"
    corpus.write_text(make_sessions(60, 20), encoding="utf-8")
    before = files_state(tmp_path)
    result = invoke("sweep", corpus, "--out", tmp_path / "sw", "--runs", "2", "--epochs", "1", "-j", "1", *extra)
    assert_bad_input(result, fragment, tmp_path, before)
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("option", ["--k-list", "--featurize-dims"])
def test_fullwidth_digits_in_a_list_option(tmp_path, option):
    from conftest import make_runset

    make_runset(tmp_path / "runs", runs=2, n=12)
    (tmp_path / "labels.tsv").write_text("".join(f"k{i}\tg{i % 2}\n" for i in range(12)))
    before = files_state(tmp_path)
    extra = ["--labels", tmp_path / "labels.tsv"] if option == "--featurize-dims" else []
    extra += ["--task", "next-item", "--interactions", tmp_path / "labels.tsv"] if option == "--k-list" else []
    result = invoke("audit", tmp_path / "runs", "--knn-k", "3", option, "\uff15", *extra)
    assert_bad_input(result, f"{option} '\uff15': expected a comma-separated list of int values", tmp_path, before)
