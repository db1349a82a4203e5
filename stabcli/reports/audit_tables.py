"""The audit report as the lines and tables every renderer shows (terminal, Markdown, HTML):
the verdict, the metric rows with their JSON paths, and the frequency, least-stable-keys and
convergence tables. Renderers only lay them out (``stabcli.reports.audit_render``)."""

from __future__ import annotations

from stabcli.reports.audit_report import AuditReport, PairSpread
from stabcli.reports.text import num, pct

_BARS = " ▁▂▃▄▅▆▇█"
NO_LOSS = "the model reports no training loss"


def verdict(report: AuditReport) -> str:
    """One line: e.g. ``coordinates: 91% noise (pure noise: 90%) · … · neighbours: 62% stable``."""
    rep = report.representation
    line = (
        f"coordinates: {pct(rep.noise_share)} noise ({pure_noise_text(report)}) · "
        f"aligned: {pct(rep.aligned_noise_share)} noise · "
        f"inner products: {pct(rep.inner_product_noise_share)} noise · "
        f"neighbours: {pct(rep.knn_overlap)} stable (chance: {pct(rep.knn_chance)})"
    )
    transform = featurized_text(report)
    return line + (f" · {transform}" if transform else "")


def pure_noise_text(report: AuditReport) -> str:
    """``pure noise: 90% ± 1.3%; at the pure-noise level`` (± two standard deviations of the
    noise share of randomly rotated runs)."""
    rep = report.representation
    text = f"pure noise: {pct(rep.noise_share_independent)} ± {pct(2 * rep.noise_share_independent_std)}"
    return text + ("; at the pure-noise level" if rep.at_pure_noise_level else "")


def range_text(spread: PairSpread, digits: int = 3) -> str:
    """``0.990–0.994``: min–max over run pairs (one number when they agree to the digits shown)."""
    low, high = num(spread.min, digits), num(spread.max, digits)
    return f"{low}–{high}" if low != high else low


def featurized_text(report: AuditReport) -> str | None:
    """``featurized: phi M=64, σ=1`` for a run set written by ``stabcli featurize``."""
    block = report.input.featurized
    if not block:
        return None
    dim = block.get("dim")
    what = "aligned only" if dim == 0 else f"phi M={dim}, σ={block.get('sigma')}"
    return f"featurized run set ({what})"


def metric_rows(report: AuditReport) -> list[tuple[str, str, str, str]]:
    """(metric, value, how to read it, JSON path of the value) rows shared by the terminal,
    Markdown and HTML views; every pairwise measure with its range over run pairs."""
    rep = report.representation
    ratio = rep.inner_to_coordinate_ratio
    spreads = rep.by_pair
    pairs = spreads.cka.pairs
    over = f"run pairs: {{}} ({pairs} pair{'s' if pairs != 1 else ''})"
    return [
        (
            "noise share (coordinates)",
            pct(rep.noise_share),
            "run-to-run share of coordinate energy; 0 = identical runs; runs turned by random rotations give "
            f"{pct(rep.noise_share_independent)} ± {pct(2 * rep.noise_share_independent_std)} (2 std)"
            + ("; at the pure-noise level" if rep.at_pure_noise_level else ""),
            "representation.noise_share",
        ),
        (
            "aligned noise share",
            pct(rep.aligned_noise_share),
            f"after Procrustes to the consensus ({rep.procrustes_iterations} iterations): noise no rotation explains",
            "representation.aligned_noise_share",
        ),
        (
            "inner-product noise share",
            pct(rep.inner_product_noise_share),
            f"same share on cosine similarities of {rep.inner_product_pairs:,} key pairs"
            + (f"; {ratio:.3g}× the coordinate share" if ratio is not None else ""),
            "representation.inner_product_noise_share",
        ),
        (
            f"k-NN overlap@{rep.knn_k}",
            num(rep.knn_overlap, 3),
            f"shared neighbours between runs, {rep.knn_queries:,} queries (chance {rep.knn_chance:.2g}); "
            + over.format(range_text(spreads.knn_overlap)),
            "representation.knn_overlap",
        ),
        (
            "PIP loss",
            num(rep.pip_loss),
            f"‖H_r H_rᵀ − H_s H_sᵀ‖_F; relative to ‖HHᵀ‖_F: {num(rep.pip_loss_relative, 3)}; "
            + over.format(range_text(spreads.pip_loss_relative)),
            "representation.pip_loss",
        ),
        (
            "linear CKA",
            num(rep.cka, 4),
            "1 = same representation up to rotation and scale; " + over.format(range_text(spreads.cka, 4)),
            "representation.cka",
        ),
        (
            "eigenspace overlap",
            num(rep.eigenspace_overlap, 4),
            "overlap of left singular spaces; 1 = same span; " + over.format(range_text(spreads.eigenspace_overlap, 4)),
            "representation.eigenspace_overlap",
        ),
        (
            "semantic displacement",
            num(rep.semantic_displacement, 3),
            "mean cosine distance after pairwise Procrustes; " + over.format(range_text(spreads.semantic_displacement)),
            "representation.semantic_displacement",
        ),
        *spectral_rows(report),
    ]


def spread_text(spread: PairSpread | None, digits: int = 4) -> str:
    """``mean ± std`` over run pairs (the mean alone for one pair)."""
    if spread is None or spread.mean is None:
        return "n/a"
    return num(spread.mean, digits) + ("" if spread.std is None else f" ± {num(spread.std, 2)}")


def spectral_rows(report: AuditReport) -> list[tuple[str, str, str, str]]:
    """EIS, weighted eigenspace overlap and debiased CKA rows (absent from older reports);
    the JSON path is the mean's."""
    rep = report.representation
    if rep.eis is None:
        return []
    anchor = "the runs' consensus" if rep.eis_anchor == "consensus" else "the --eis-anchor embedding"
    rows = [
        (
            "EIS",
            spread_text(rep.eis),
            f"eigenspace instability vs {anchor} (alpha = {num(rep.eis_alpha, 3)}); 0 = same span, mean ± std over pairs",
            "representation.eis.mean",
        ),
    ]
    if rep.weighted_eigenspace_overlap is not None:
        rows.append(
            (
                "weighted eigenspace overlap",
                spread_text(rep.weighted_eigenspace_overlap),
                "overlap of singular spaces weighted by the spectrum; 1 = same span",
                "representation.weighted_eigenspace_overlap.mean",
            )
        )
    if rep.cka_debiased is not None:
        rows.append(
            (
                "debiased CKA",
                spread_text(rep.cka_debiased),
                "unbiased HSIC: ≈ 0 for unrelated runs at any n",
                "representation.cka_debiased.mean",
            )
        )
    return rows


def sparkline(counts: list[int]) -> str:
    top = max(counts) or 1
    return "".join(_BARS[round(c / top * (len(_BARS) - 1))] for c in counts)


def input_line(report: AuditReport, markdown: bool = False) -> str:
    inp = report.input
    if markdown:
        return f"{inp.runs} runs × {inp.keys:,} keys × {inp.dim} dims" + (
            f"; {inp.dropped_keys:,} keys not in every run left out" if inp.dropped_keys else ""
        )
    return (
        f"{inp.runs} runs × {inp.keys:,} keys × {inp.dim} dims"
        + (f" ({inp.dropped_keys:,} keys not in every run left out)" if inp.dropped_keys else "")
        + (" · rows L2-normalized" if inp.normalized else "")
    )


LEAST_STABLE_TITLE = "Least stable keys (top {n} of {ranked:,} by k-NN overlap, lowest first{where})"
BY_FREQUENCY_TITLE = "Stability by frequency ({source})"


def least_stable_title(report: AuditReport, n: int) -> str:
    rep = report.representation
    where = f"; frequency ≥ {rep.min_frequency:,}" if rep.min_frequency is not None else ""
    return LEAST_STABLE_TITLE.format(n=n, ranked=rep.least_stable_ranked, where=where)


def least_stable_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the least-stable-keys table; name and frequency columns only
    when some key has them (with frequencies, the band and its median k-NN overlap too)."""
    rep = report.representation
    items = rep.least_stable
    named = any(i.name is not None for i in items)
    counted = any(i.frequency is not None for i in items)
    headers = [
        "key",
        *(["name"] if named else []),
        *(["frequency", "band"] if counted else []),
        f"k-NN overlap@{rep.knn_k}",
        *(["band's median k-NN"] if counted else []),
        "relative instability",
        "aligned variance",
    ]
    rows = [
        [
            i.key,
            *([i.name or ""] if named else []),
            *([num(i.frequency), i.band or "—"] if counted else []),
            num(i.knn_overlap, 3),
            *([num(i.peers_knn_overlap_median, 3)] if counted else []),
            pct(i.relative_instability),
            num(i.aligned_variance),
        ]
        for i in items
    ]
    return headers, rows


def by_frequency_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the stability-by-frequency table, one row per non-empty band."""
    rep = report.representation
    headers = [
        "frequency",
        "keys",
        "median relative instability",
        "aligned noise share",
        f"median k-NN overlap@{rep.knn_k}",
    ]
    rows = [
        [
            b.band,
            f"{b.keys:,}",
            pct(b.relative_instability_median),
            pct(b.aligned_noise_share),
            num(b.knn_overlap_median, 3) + ("" if b.knn_keys == b.keys else f" ({b.knn_keys:,} keys)"),
        ]
        for b in rep.by_frequency
    ]
    return headers, rows


def convergence_table(report: AuditReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-epoch table; the loss column only when the model reports
    a loss, the variance columns only with checkpoints."""
    tr = report.training
    with_loss = tr.reports_loss
    with_variance = any(row.variance_mean is not None for row in tr.by_epoch)
    headers = [
        "epoch",
        *(["mean loss"] if with_loss else []),
        "noise share",
        *(["variance mean", "variance per dim (min · median · max)"] if with_variance else []),
    ]
    rows = []
    for row in tr.by_epoch:
        q = row.variance_quantiles
        spread = "—" if q is None else f"{num(q.min, 3)} · {num(q.median, 3)} · {num(q.max, 3)}"
        rows.append(
            [
                str(row.epoch),
                *([num(row.loss_mean)] if with_loss else []),
                pct(row.noise_share),
                *([num(row.variance_mean), spread] if with_variance else []),
            ]
        )
    return headers, rows
