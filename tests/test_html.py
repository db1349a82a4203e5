"""HTML reports (``stabcli.reports.html`` and each command's ``render_html``): valid and
self-contained pages, numbers equal to the JSON, data escaped, the per-key table, and a
real headless Chromium loading the page and sorting the table."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import assert_bad_input, assert_numbers_match, drift_argv, files_state, make_runset, parse
from stabcli.cli.app import app
from stabcli.commands.audit import AuditOptions, build_report, load_runs
from stabcli.commands.drift import DriftOptions, compute_drift, load_inputs
from stabcli.inputs.keytable import per_key_frame
from stabcli.reports import audit_render, audit_tables, drift_render, html, schema

HOSTILE = '<script>alert("x")</script> & "q" \'s'


FAST = AuditOptions(knn_k=3, knn_queries=10, pairs=200, top=5)


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    root = make_runset(tmp_path_factory.mktemp("audit") / "runs", runs=3, n=40, dim=6, epochs=3)
    names = {"k1": HOSTILE, "k2": "Café"}
    report = build_report(
        load_runs([root]), FAST, checks=["representation.knn_overlap>=0.99"], key_names=names, per_key=True
    )
    s = report.key_stats
    frame = per_key_frame(
        s.keys, names, s.frequency, s.norm, s.aligned_variance, s.relative_instability, s.displacement, s.knn_overlap
    )
    return report, frame


def test_audit_page_is_valid_self_contained_and_carries_the_json(audited):
    report, frame = audited
    page = audit_render.render_html(report, frame, None)
    parser = parse(page)
    embedded = json.loads(parser.scripts["stabcli-report"])
    assert embedded == json.loads(schema.dumps(report))
    assert_numbers_match(parser, embedded, least=8 + 10 + 1)  # metrics, histogram bins, the check
    text = " ".join(parser.text)
    assert audit_tables.verdict(report) in text
    assert "No figures: drawing them needs matplotlib (pip install 'stabcli[plots]')." in text
    for title in ("Representation stability", "Training convergence", "Checks", "Every key", "Least stable keys"):
        assert title in text
    failed = [row for row in parser.tables["table-4"] if row[0][0] == "representation.knn_overlap>=0.99"]
    assert failed and failed[0][2][0] == "FAIL"


def test_audit_page_tables_equal_the_terminal_rows(audited):
    report, frame = audited
    parser = parse(audit_render.render_html(report, frame, None))
    tables = list(parser.tables.values())
    metric = [[text for text, _ in row] for row in tables[0][1:]]
    assert metric == [list(row[:3]) for row in audit_tables.metric_rows(report)]
    headers, rows = audit_tables.least_stable_table(report)
    least = [[text for text, _ in row] for row in tables[2]]
    assert least == [headers, *rows]
    headers, rows = audit_tables.convergence_table(report)
    assert [[text for text, _ in row] for row in tables[3]] == [headers, *rows]


def test_keys_and_names_are_data_not_markup(audited):
    report, frame = audited
    page = audit_render.render_html(report, frame, None)
    parser = parse(page)
    assert list(parser.scripts) == ["stabcli-report", "inline-1"]  # the name's <script> is text, not an element
    assert HOSTILE not in page
    assert html.esc(HOSTILE) in page
    names = [row[1][0] for row in parser.tables["keys"][1:]]
    assert HOSTILE in names and "Café" in names
    # the embedded JSON cannot end its script element early, and reads back equal
    assert "</script>" not in parser.scripts["stabcli-report"]


def test_per_key_table_holds_every_key_with_the_per_key_values(audited):
    report, frame = audited
    parser = parse(audit_render.render_html(report, frame, None))
    rows = parser.tables["keys"]
    headers = [text for text, _ in rows[0]]
    assert headers == [c for c in frame.columns if not frame[c].isna().all()]
    assert "frequency" not in headers  # no counts recorded: the empty column is left out
    body = rows[1:]
    assert len(body) == len(frame)
    by_key = frame.set_index("key")
    for row in body:
        cells = dict(zip(headers, row, strict=True))
        key = cells["key"][0]
        for column in ("norm", "aligned_variance", "relative_instability", "displacement"):
            assert float(cells[column][1]["data-value"]) == by_key.loc[key, column]
        knn = by_key.loc[key, "knn_overlap"]
        assert cells["knn_overlap"][1]["data-value"] == ("" if np.isnan(knn) else repr(float(knn)))
    shown = [float(row[headers.index("relative_instability")][1]["data-value"]) for row in body]
    assert shown == sorted(shown, reverse=True)  # least stable first


def test_per_key_table_is_trimmed_with_a_note(audited):
    _, frame = audited
    piece = html.key_table(frame, table_id="keys", order=range(len(frame)), fmt=str, what="in file order", limit=7)
    parser = parse(html.page("t", "v", [piece], "{}", "0"))
    assert len(parser.tables["keys"]) == 1 + 7
    assert f"The first 7 of {len(frame)} keys, in file order; every key is in the --per-key file." in piece


def test_figures_are_inline_png(audited):
    pytest.importorskip("matplotlib", reason="figures need matplotlib (stabcli[plots])")
    report, frame = audited
    drawn = audit_render.plot_figures(report)
    assert [f.name for f in drawn] == [
        "fig1a_variance_per_dim.png",
        "fig1b_loss_by_epoch.png",
        "fig1c_noise_by_epoch.png",
        "fig1d_coordinate_vs_inner_product.png",
    ]
    page = audit_render.render_html(report, frame, drawn)
    parser = parse(page)
    images = [u for u in parser.urls if u.startswith("data:image/png;base64,")]
    assert len(images) == 4
    import base64

    assert base64.b64decode(images[0].split(",", 1)[1]) == drawn[0].png
    assert drawn[0].png.startswith(b"\x89PNG")
    assert "No figures" not in page


@pytest.fixture(scope="module")
def drifted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    noise = make_runset(tmp / "noise", runs=4, n=60, dim=6)
    before = np.load(noise / "run-000" / "vectors.npy")
    after = before + np.random.default_rng(9).normal(0, 0.05, before.shape).astype(np.float32)
    after[:3] = np.random.default_rng(10).standard_normal((3, 6)) * 3  # k0, k1, k2 moved far
    np.save(tmp / "after.npy", after)
    (tmp / "after.keys.txt").write_text((noise / "keys.txt").read_text())
    names = {"k0": HOSTILE}
    inputs = load_inputs(noise, tmp / "after.npy", noise)
    report, per_key = compute_drift(inputs, DriftOptions(knn_k=3, top=5), key_names=names, key_names_path="n.tsv")
    from stabcli.commands.drift import evaluate_checks, validate_checks

    report = evaluate_checks(report, validate_checks(["drift.moved_share<0.5"], True, False))
    return report, per_key


def test_drift_page_is_valid_with_numbers_equal_to_the_json(drifted):
    report, per_key = drifted
    page = drift_render.render_html(report, per_key, None)
    parser = parse(page)
    embedded = json.loads(parser.scripts["stabcli-report"])
    assert embedded == json.loads(schema.dumps(report))
    assert_numbers_match(parser, embedded, least=10)
    summary = [[text for text, _ in row] for row in next(iter(parser.tables.values()))[1:]]
    assert summary == [list(row[:3]) for row in drift_render.summary_rows(report)]
    rows = parser.tables["keys"]
    headers = [text for text, _ in rows[0]]
    assert len(rows) - 1 == report.input.keys_compared
    keys = [row[0][0] for row in rows[1:4]]
    assert sorted(keys) == ["k0", "k1", "k2"]  # the moved keys first (smallest p-value)
    assert rows[1 + keys.index("k0")][headers.index("name")][0] == HOSTILE
    frame = per_key.frame().set_index("key")
    for row in rows[1:]:
        cells = dict(zip(headers, row, strict=True))
        assert float(cells["distance"][1]["data-value"]) == frame.loc[cells["key"][0], "distance"]


def test_drift_figures_are_drawn_once_for_both_outputs(drifted, tmp_path):
    pytest.importorskip("matplotlib", reason="figures need matplotlib (stabcli[plots])")
    report, per_key = drifted
    drawn = drift_render.plot_figures(report, per_key)
    assert [f.name for f in drawn] == list(drift_render.PLOT_NAMES)
    written = drift_render.write_plots(report, per_key, tmp_path / "plots")
    assert [p.name for p in written] == list(drift_render.PLOT_NAMES)
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


# ------------------------------------------------------------------ a real browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,900",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Selenium driving the system's Chromium (Debian packages chromium and chromium-driver);
    skipped, with the reason, where either is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra has it)")
    chromium = shutil.which("chromium") or (str(CHROMIUM) if CHROMIUM.exists() else None)
    driver_path = shutil.which("chromedriver") or (str(CHROMEDRIVER) if CHROMEDRIVER.exists() else None)
    if chromium is None or driver_path is None or not sys.platform.startswith("linux"):
        pytest.skip("no system Chromium: apt-get install -y chromium chromium-driver (Debian) to run the browser test")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*BROWSER_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)  # a given driver: nothing downloaded
    try:
        yield driver
    finally:
        driver.quit()


def _errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_browser_reports_errors_and_blocked_requests(browser, tmp_path):
    """The control: a page with a script error and an external image shows both in the log,
    so an empty log on a report page means something."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        html.page("t", "v", ['<img src="http://192.0.2.1/x.png" alt="x">'], "{}", "0").replace(
            "<script>\n(function", "<script>undefinedFunction();(function"
        )
    )
    browser.get(bad.as_uri())
    messages = " ".join(entry["message"] for entry in _errors(browser))
    assert "undefinedFunction" in messages
    assert "Content Security Policy" in messages


def test_browser_loads_the_page_without_errors_and_sorts_and_filters(browser, audited, tmp_path):
    from selenium.webdriver.common.by import By

    report, frame = audited
    path = tmp_path / "audit.html"
    path.write_text(audit_render.render_html(report, frame, None), encoding="utf-8")
    browser.get(path.as_uri())
    assert _errors(browser) == []
    assert browser.title == "stabcli audit"

    def column(name):
        headers = [th.text.strip(" ▲▼") for th in browser.find_elements(By.CSS_SELECTOR, "#keys thead th")]
        i = headers.index(name)
        cells = browser.find_elements(By.CSS_SELECTOR, f"#keys tbody tr:not([hidden]) td:nth-child({i + 1})")
        return browser.find_elements(By.CSS_SELECTOR, "#keys thead th")[i], cells

    head, cells = column("norm")
    before = [float(c.get_attribute("data-value")) for c in cells]
    assert before != sorted(before)  # least stable first, not by norm
    head.click()
    _, cells = column("norm")
    assert [float(c.get_attribute("data-value")) for c in cells] == sorted(before)
    assert head.get_attribute("aria-sort") == "ascending"
    head.click()
    _, cells = column("norm")
    assert [float(c.get_attribute("data-value")) for c in cells] == sorted(before, reverse=True)
    head, _ = column("key")
    head.click()
    _, cells = column("key")
    assert [c.text for c in cells] == sorted(frame["key"])
    search = browser.find_element(By.CSS_SELECTOR, "input[data-filter=keys]")
    search.send_keys("café")
    _, cells = column("key")
    assert [c.text for c in cells] == ["k2"]
    assert _errors(browser) == []


# ------------------------------------------------------------------ the command line

runner = CliRunner()
CLI_FAST = ["--knn-k", "3", "--knn-queries", "10", "--pairs", "200", "--top", "5"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_audit_html_from_the_command_line_equals_its_json(tmp_path):
    root = make_runset(tmp_path / "runs", runs=3, n=30, dim=5, epochs=2)
    args = ["audit", root, *CLI_FAST, "--html", tmp_path / "a.html", "--json", tmp_path / "a.json"]
    plots = importlib.util.find_spec("matplotlib") is not None
    result = invoke(*args, *(["--plots", tmp_path / "plots"] if plots else []))
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'a.html'}" in result.stderr
    parser = parse((tmp_path / "a.html").read_text(encoding="utf-8"))
    text = (tmp_path / "a.json").read_text()
    assert json.loads(parser.scripts["stabcli-report"]) == json.loads(text)
    assert_numbers_match(parser, json.loads(text), least=8)
    assert len(parser.tables["keys"]) == 1 + 30  # every key, with the displacement the page asked for
    if plots:  # the page's figures are the --plots files: drawn once
        import base64

        images = [base64.b64decode(u.split(",", 1)[1]) for u in parser.urls if u.startswith("data:image/png")]
        files = [p.read_bytes() for p in sorted((tmp_path / "plots").iterdir())]
        assert sorted(images) == sorted(files) and len(files) == 4
    again = invoke("audit", root, *CLI_FAST, "--html", tmp_path / "a.html")
    assert_bad_input(again, f"--html {tmp_path / 'a.html'}: already exists; pass --force to replace it")
    assert invoke("audit", root, *CLI_FAST, "--html", tmp_path / "a.html", "--force").exit_code == 0


def test_html_output_that_is_an_input_is_refused(tmp_path):
    root = make_runset(tmp_path / "runs", runs=2, n=20, dim=4)
    before = files_state(tmp_path)
    result = invoke("audit", root, *CLI_FAST, "--html", root / "keys.txt")
    assert_bad_input(result, "--html", tmp_path, before)
    assert "lies inside the input" in result.stderr


def test_drift_html_from_the_command_line(tmp_path):
    noise = make_runset(tmp_path / "noise", runs=4, n=30, dim=5)
    result = invoke(
        *drift_argv(noise),
        "--html",
        tmp_path / "d.html",
        "--json",
        tmp_path / "d.json",
    )
    assert result.exit_code == 0, result.output
    parser = parse((tmp_path / "d.html").read_text(encoding="utf-8"))
    data = json.loads((tmp_path / "d.json").read_text())
    assert json.loads(parser.scripts["stabcli-report"]) == data
    assert_numbers_match(parser, data, least=10)
    assert len(parser.tables["keys"]) == 1 + 30


def test_featurize_html_from_the_command_line(tmp_path):
    root = make_runset(tmp_path / "runs", runs=2, n=30, dim=4)
    args = ["featurize", root, "--out", tmp_path / "phi", "--epsilon", "0.2", "--html", tmp_path / "f.html"]
    result = invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    parser = parse((tmp_path / "f.html").read_text(encoding="utf-8"))
    assert json.loads(parser.scripts["stabcli-report"]) == data
    assert_numbers_match(parser, data, least=6)  # rows, runs, dims, the measured error and its bound
    sidecar = json.loads((tmp_path / "phi.featurize.json").read_text())
    transform = {row[0][0]: row[1][0] for row in parser.tables["table-1"][1:]}
    assert transform["sigma"] == str(sidecar["sigma"]) and transform["seed"] == str(sidecar["seed"])
    refused = invoke("featurize", root, "--out", tmp_path / "phi2", "--html", root / "keys.txt")
    assert_bad_input(refused, "--html")
    assert not (tmp_path / "phi2").exists()  # refused before any work


def test_sweep_html_from_the_command_line(tmp_path, sessions_file):
    args = [
        "sweep", sessions_file, "--out", tmp_path / "sw", "--grid", "window=2,3", "--sizes", "0.5,1",
        "--runs", "2", "--dim", "4", "--epochs", "1", "-j", "1", "--knn-k", "3",
        "--json", tmp_path / "s.json", "--html", tmp_path / "s.html",
    ]  # fmt: skip
    plots = importlib.util.find_spec("matplotlib") is not None
    result = invoke(*args, *(["--plots", tmp_path / "figs"] if plots else []))
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "s.json").read_text())
    parser = parse((tmp_path / "s.html").read_text(encoding="utf-8"))
    assert json.loads(parser.scripts["stabcli-report"]) == data
    cells = parser.tables["cells"]
    assert len(cells) == 1 + len(data["cells"]) == 5
    assert {row[0][0].rstrip(" *") for row in cells[1:]} == set(data["cells"])
    if plots:  # the page's figures are the --plots files
        import base64

        images = [base64.b64decode(u.split(",", 1)[1]) for u in parser.urls if u.startswith("data:image/png")]
        assert sorted(images) == sorted(p.read_bytes() for p in (tmp_path / "figs").iterdir())
