"""stabcli sweep: the plan (grid, nested samples, swaps), the curves (power law, Pareto) and
end-to-end sweeps on tiny corpora with known answers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import assert_bad_input, files_state, make_sessions, runner
from stabcli.cli.app import app
from stabcli.commands.audit import AuditOptions
from stabcli.commands.sweep import SweepOptions, run_sweep, target_size
from stabcli.errors import RunSetError, UsageError
from stabcli.measure import curves
from stabcli.training import sweep_plan as plan
from stabcli.training.pretrain import TrainConfig

FAST = TrainConfig(dim=8, epochs=2, window=3)
AUDIT = AuditOptions(knn_k=5, knn_queries=60, pairs=500, top=2)


def zipf_corpus(n_sequences: int, n_items: int = 60, seed: int = 0, length: int = 8) -> str:
    """Sequences whose items follow a Zipf law inside one of 4 topics (structure to learn)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_items // 4 + 1)
    weights /= weights.sum()
    lines = []
    for _ in range(n_sequences):
        topic = int(rng.integers(4))
        items = rng.choice(n_items // 4, size=length, p=weights) + topic * (n_items // 4)
        lines.append(" ".join(f"z{i}" for i in items))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the plan


def test_nested_samples_are_inside_each_other_and_seeded():
    order = plan.nested_order(1000, seed=7)
    small, large = plan.sample_indices(order, 0.1), plan.sample_indices(order, 0.2)
    assert len(small) == 100 and len(large) == 200
    assert set(small) <= set(large) and list(large) == sorted(large)  # corpus order kept
    assert list(plan.sample_indices(plan.nested_order(1000, 7), 0.1)) == list(small)
    assert list(plan.sample_indices(plan.nested_order(1000, 8), 0.1)) != list(small)
    assert len(plan.sample_indices(order, 1.0)) == 1000


def test_swaps_replace_one_sequence_with_one_from_outside():
    order = plan.nested_order(50, seed=1)
    inside = plan.sample_indices(order, 0.4)
    for swap in plan.swaps(order, 0.4, 5, seed=1):
        after = plan.swapped(inside, swap)
        assert len(after) == len(inside) and swap.removed in inside and swap.added not in inside
        assert sum(a != b for a, b in zip(after, inside, strict=True)) == 1
    full = plan.sample_indices(order, 1.0)  # nothing outside: a copy of another sequence
    for swap in plan.swaps(order, 1.0, 3, seed=1):
        assert swap.added != swap.removed and swap.added in full


def test_grid_parsing_and_cells():
    grid = plan.parse_grid("window=3,5 negative=3,10 alpha=0.01")
    assert grid == {"window": [3, 5], "negative": [3, 10], "alpha": [0.01]}
    cells = plan.cells(grid, [0.5, 1.0], FAST)
    assert len(cells) == 8 and cells[0].name == "size-0.5_window-3_negative-3_alpha-0.01"
    assert (
        cells[-1].config.window == 5 and cells[-1].config.negative == 10 and cells[-1].config.params == {"alpha": 0.01}
    )
    script = TrainConfig(script="python t.py --w {w} --seed {seed} --out {out} --corpus {corpus}")
    cell = plan.cells(plan.parse_grid("w=2,4", script=script.script), [1.0], script)[1]
    assert cell.config.script == "python t.py --w 4 --seed {seed} --out {out} --corpus {corpus}"
    as_written = plan.parse_grid("w=0x10,1e400,01", script=script.script)  # not 16, inf and a syntax error
    assert as_written == {"w": ["0x10", "1e400", "01"]}
    assert [c.name for c in plan.cells(as_written, [1.0], script)] == ["size-1_w-0x10", "size-1_w-1e400", "size-1_w-01"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("window", "expected NAME=VALUE"),
        ("window=3 window=5", "window is given twice"),
        ("callbacks=1", "not a pretrain option or a gensim argument"),
        ("alpha=2", "--grid alpha=2: expected a finite number in (0, 1]"),
        ("window=3,3", "a value is repeated"),
        ("hs=2", "--grid hs=2: expected 0 or 1"),
        ("dm_mean=1", "not a pretrain option"),  # a doc2vec argument on word2vec
    ],
)
def test_bad_grids_are_refused_up_front(text, fragment):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        plan.parse_grid(text)


def test_bad_cell_values_and_sizes():
    with pytest.raises(UsageError, match=r"--grid window=0: must be at least 1"):
        plan.cells(plan.parse_grid("window=0,3"), [1.0], FAST)
    for text in ("0", "1.5", "x", "0.5,0.5", "nan"):
        with pytest.raises(UsageError, match="--sizes"):
            plan.parse_sizes(text)
    assert plan.parse_sizes("1,0.1,0.4") == [0.1, 0.4, 1.0]
    with pytest.raises(UsageError, match=r"no \{w\} field"):
        plan.parse_grid("w=1", script="python t.py {out}")
    with pytest.raises(UsageError, match="script values"):
        plan.parse_grid("w=a;b", script="python t.py {w} {out}")


# ---------------------------------------------------------------- the curves


def test_power_law_fit_recovers_a_and_b():
    m = np.array([100.0, 200, 400, 800, 1600])
    fit = curves.fit_power_law(m, 3.5 * m**-0.7)
    assert (
        fit.a == pytest.approx(3.5, rel=1e-10)
        and fit.b == pytest.approx(-0.7, rel=1e-10)
        and fit.r2 == pytest.approx(1)
    )
    noisy = 3.5 * m**-0.7 * np.exp(np.random.default_rng(0).normal(0, 0.02, len(m)))
    fit = curves.fit_power_law(m, noisy)
    assert fit.b == pytest.approx(-0.7, abs=0.05) and 0.95 < fit.r2 < 1
    assert fit.size_for(fit.predict(5000.0)) == pytest.approx(5000.0)
    assert curves.fit_power_law([1, 2], [0.5, 0.25]).r2 is None  # two points: exact, no quality
    assert curves.fit_power_law([1, 1], [0.5, 0.25]) is None
    assert curves.fit_power_law([1, 2, 4], [0.5, 0.0, -1]) is None  # only one positive value


def test_rises_and_pareto_front():
    assert curves.rises([1, 2, 4, 8], [0.5, 0.4, 0.45, 0.3]) == [(2.0, 4.0)]
    assert curves.rises([8, 1, 4, 2], [0.3, 0.5, 0.35, 0.4]) == []  # unsorted sizes
    front = curves.pareto_front([0.9, 0.5, 0.8, 0.4, None], [0.1, 0.9, 0.5, 0.3, 1.0])
    assert front == [0, 1, 2]  # (0.4, 0.3) is beaten by (0.8, 0.5); a missing value is never on it


def test_target_is_stated_as_an_extrapolation():
    from stabcli.reports.sweep_report import PowerLaw

    law = PowerLaw(a=2.0, b=-0.5, r2=0.99, max_a=None, max_b=None, max_r2=None, monotone=True, points=[])
    target = target_size("knn_overlap", 0.8, law, corpus_sequences=1000, largest=1000)
    assert target.sequences == pytest.approx((0.2 / 2.0) ** (1 / -0.5))  # 100 sequences: inside the range
    assert not target.extrapolation and "within the sizes trained" in target.note
    target = target_size("knn_overlap", 0.99, law, corpus_sequences=1000, largest=1000)
    assert target.extrapolation and target.sequences == pytest.approx(40000) and "extrapolation" in target.note
    flat = PowerLaw(a=0.5, b=0.1, r2=0.5, max_a=None, max_b=None, max_r2=None, monotone=False, points=[])
    rising = target_size("eis", 0.01, flat, 1000, 1000)
    assert rising.sequences is None and "does not fall with data" in rising.note


# ---------------------------------------------------------------- sweeps with known answers


def test_a_noisier_setting_ranks_as_noisier_and_the_report_is_complete(tmp_path):
    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(200, 40), encoding="utf-8")
    options = SweepOptions(grid=plan.parse_grid("epochs=1,15"), sizes=[1.0], runs=3)
    report = run_sweep(
        corpus, tmp_path / "sw", FAST, options, audit=AUDIT, jobs=1, checks=["cells.size-1_epochs-1.knn_overlap>=0"]
    )
    calm, wild = report.cells["size-1_epochs-15"], report.cells["size-1_epochs-1"]
    # one epoch leaves every run near its own random start: lower overlap, higher EIS and aligned noise
    assert (
        wild.knn_overlap < calm.knn_overlap
        and wild.eis > calm.eis
        and wild.aligned_noise_share > calm.aligned_noise_share
    )
    assert calm.runs == 3 and calm.training_seconds > 0 and report.passed and report.checks[0].value == wild.knn_overlap
    assert report.data_size == {} and report.pareto is None and report.swap_one is None


def test_swap_one_distance_shrinks_with_size_on_a_zipf_corpus(tmp_path):
    corpus = tmp_path / "zipf.txt"
    corpus.write_text(zipf_corpus(400), encoding="utf-8")
    options = SweepOptions(sizes=[0.1, 1.0], runs=2, swap_one=3)
    report = run_sweep(corpus, tmp_path / "sw", FAST, options, audit=AUDIT, jobs=1)
    small, large = report.swap_one.curve.points
    assert (small.sequences, large.sequences) == (40, 400) and len(small.values) == 3
    assert large.median < small.median and large.max < small.max
    assert report.swap_one.curve.b < 0 and report.swap_one.curve.monotone


def is_subsequence(small: list[str], large: list[str]) -> bool:
    """Every line of ``small`` appears in ``large`` in the same order (a nested sample)."""
    rest = iter(large)
    return all(line in rest for line in small)


def test_a_duplicated_corpus_is_flat_in_data_size_at_a_fixed_number_of_updates(tmp_path):
    """Planted known answer: a corpus whose second half duplicates the first (50 distinct Zipf
    sequences, each written 8 times, so every half repeats the other) holds all 50 distinct
    sequences in its 50% sample. Training the 50% sample for 2E epochs is then the same
    objective as the whole corpus for E epochs, with the same number of updates: at a fixed
    number of updates (size × epochs) the duplicated corpus's stability curve is flat from
    0.5 to 1, because nothing new is added past 0.5.

    At fixed epochs it is not flat: run-to-run stability depends on the updates as well as on
    the data, so doubling the sample raises k-NN overlap as much as doubling the epochs does
    (measured at corpus and sweep seeds 0-2: size gain 0.31-0.37, epochs gain 0.32-0.39,
    the two within 0.02). The test fails if the sweep ignored --sizes (no size gain at 20
    epochs), trained samples that are not nested (checked on the written samples) or that
    miss distinct sequences (the fixed-updates cells would differ as 10 and 20 epochs do).
    """
    distinct = zipf_corpus(50, n_items=40).splitlines(keepends=True)
    corpus = tmp_path / "duplicated.txt"
    corpus.write_text("".join(distinct * 8), encoding="utf-8")
    options = SweepOptions(grid=plan.parse_grid("epochs=20,40"), sizes=[0.25, 0.5, 1.0], runs=3)
    report = run_sweep(corpus, tmp_path / "sw", FAST, options, audit=AUDIT, jobs=1)
    samples = {s: (tmp_path / "sw" / "corpora" / f"size-{s}.txt").read_text().splitlines() for s in ("0.25", "0.5")}
    assert is_subsequence(samples["0.25"], samples["0.5"]) and len(samples["0.25"]) == 100
    assert is_subsequence(samples["0.5"], corpus.read_text().splitlines()) and len(samples["0.5"]) == 200
    assert len(set(samples["0.5"])) == 50  # past 0.5 the corpus adds no new sequence
    knn = {(c.size, c.values["epochs"]): c.knn_overlap for c in report.cells.values()}
    size_gain = knn[1.0, 20] - knn[0.5, 20]  # twice the sample: twice the updates
    epochs_gain = knn[0.5, 40] - knn[0.5, 20]  # twice the epochs on the same sample
    assert size_gain > 0.15 and epochs_gain > 0.15
    assert abs(knn[1.0, 20] - knn[0.5, 40]) < 0.1  # the same updates of the same objective: flat


def test_a_rerun_resumes_and_a_different_seed_is_refused(tmp_path):
    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(80, 24), encoding="utf-8")
    options = SweepOptions(sizes=[0.5, 1.0], runs=2)
    first = run_sweep(corpus, tmp_path / "sw", FAST, options, audit=AUDIT, jobs=1)
    vectors = tmp_path / "sw" / "cells" / "size-0.5" / "run-001" / "vectors.npy"
    stamp = vectors.stat().st_mtime_ns
    shutil.rmtree(vectors.parent)  # as if the sweep was killed before this run finished
    again = run_sweep(corpus, tmp_path / "sw", FAST, options, audit=AUDIT, jobs=1)
    assert (tmp_path / "sw" / "cells" / "size-0.5" / "run-000" / "vectors.npy").is_file()
    assert again.cells["size-0.5"].knn_overlap == pytest.approx(first.cells["size-0.5"].knn_overlap)  # bitwise runs
    assert vectors.stat().st_mtime_ns != stamp  # the missing run was trained again
    with pytest.raises(RunSetError, match="a sweep of another seed; use --force"):
        run_sweep(corpus, tmp_path / "sw", FAST, SweepOptions(sizes=[0.5, 1.0], runs=2, seed=1), audit=AUDIT, jobs=1)


# ---------------------------------------------------------------- the command line


def test_cli_sweep_writes_every_output(tmp_path):
    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(120, 40), encoding="utf-8")
    labels = tmp_path / "labels.tsv"
    labels.write_text("".join(f"t{i}\tg{i // 10}\n" for i in range(40)), encoding="utf-8")
    args = [
        "sweep", str(corpus), "--out", str(tmp_path / "sw"), "--grid", "window=2,4", "--sizes", "0.5,1",
        "--runs", "2", "--dim", "8", "--epochs", "2", "-j", "1", "--knn-k", "5", "--knn-queries", "40",
        "--labels", str(labels), "--target", "knn_overlap=0.9", "--json", str(tmp_path / "s.json"),
        "--markdown", str(tmp_path / "s.md"), "--check", "data_size.knn_instability.points.0.median>=0",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    assert set(data["cells"]) == {"size-0.5_window-2", "size-0.5_window-4", "size-1_window-2", "size-1_window-4"}
    assert data["pareto"]["quality"] == "accuracy_mean" and data["pareto"]["front"]
    assert data["target"]["measure"] == "knn_overlap" and data["checks"][0]["passed"]
    assert set(data["data_size"]) >= {"noise_share", "knn_instability", "eis", "churn"}
    assert "Data size" in (tmp_path / "s.md").read_text() and "Pareto front" in result.stdout
    failing = runner.invoke(app, [*args[:-2], "--check", "cells.size-1_window-2.knn_overlap>2", "--force"])
    assert failing.exit_code == 1, failing.output


@pytest.mark.bad_input
def test_sweep_refuses_a_directory_that_is_not_a_sweep_and_inputs_inside_it(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(make_sessions(30, 12), encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "mine.txt").write_text("keep")
    before = files_state(tmp_path)
    result = runner.invoke(
        app, ["sweep", str(corpus), "--out", str(tmp_path / "other"), "--runs", "2", "--epochs", "1"]
    )
    assert_bad_input(result, "not a sweep directory (it holds mine.txt)", tmp_path, before)
    inside = tmp_path / "sw" / "corpora"
    inside.mkdir(parents=True)
    (inside / "c.txt").write_text(make_sessions(30, 12))
    before = files_state(tmp_path)
    result = runner.invoke(app, ["sweep", str(inside / "c.txt"), "--out", str(tmp_path / "sw")])
    assert_bad_input(result, "the input lies where the sweep writes", tmp_path, before)
    result = runner.invoke(app, ["sweep", str(corpus), "--out", str(tmp_path / "sw"), "--json", str(corpus)])
    assert_bad_input(result, "--json", tmp_path, before)


def test_a_script_trainer_gets_the_grid_values_as_template_fields(tmp_path):
    from conftest import EXAMPLE_SCRIPT

    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(100, 24), encoding="utf-8")
    template = f"python {EXAMPLE_SCRIPT} --corpus {{corpus}} --seed {{seed}} --out {{out}} --dim 6 --window {{w}}"
    config = TrainConfig(script=template)
    options = SweepOptions(grid=plan.parse_grid("w=1,3", script=template), sizes=[0.5, 1.0], runs=2)
    report = run_sweep(corpus, tmp_path / "sw", config, options, audit=AUDIT, jobs=2)
    assert set(report.cells) == {"size-0.5_w-1", "size-0.5_w-3", "size-1_w-1", "size-1_w-3"}
    log = (tmp_path / "sw" / "cells" / "size-0.5_w-3" / "run-001" / "log.txt").read_text()
    assert "--window 3" in log and "corpora/size-0.5.txt" in log and "--seed 1" in log
    assert report.model == "script" and report.cells["size-1_w-3"].keys == 24
    with pytest.raises(UsageError, match=r"needs \{corpus\}"):
        run_sweep(corpus, tmp_path / "sw2", TrainConfig(script="python x.py --out {out}"), SweepOptions(runs=2), jobs=1)


def test_the_python_api_gives_the_cli_json(tmp_path):
    import stabcli

    corpus = tmp_path / "sessions.txt"
    corpus.write_text(make_sessions(60, 20), encoding="utf-8")
    args = {"grid": "window=2,3", "sizes": "0.5,1", "runs": 2, "dim": 6, "epochs": 1, "jobs": 1, "knn_k": 3}
    report = stabcli.sweep(
        corpus, tmp_path / "sw", **args, checks=["cells.size-1_window-3.keys>0"], json=tmp_path / "a.json"
    )
    assert isinstance(report, stabcli.SweepReport) and report.passed and (tmp_path / "a.json").is_file()
    cli = runner.invoke(
        app,
        ["sweep", str(corpus), "--out", str(tmp_path / "sw"), "--grid", "window=2,3", "--sizes", "0.5,1", "--runs", "2",
         "--dim", "6", "--epochs", "1", "-j", "1", "--knn-k", "3", "--check", "cells.size-1_window-3.keys>0",
         "--format", "json"],
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    assert json.dumps(json.loads(cli.stdout), sort_keys=True) == json.dumps(report.to_dict(), sort_keys=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        stabcli.sweep(corpus, tmp_path / "sw", windows=3)
