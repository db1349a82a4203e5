"""Renderers of a featurize result (``stabcli.commands.featurize.FeaturizeResult``): the
terminal lines and the HTML page, from the same rows."""

from __future__ import annotations

from typing import Any

from stabcli.reports import html
from stabcli.reports.html import Cell
from stabcli.reports.schema import dumps


def summary_lines(result: Any, epsilon: float | None = None) -> list[str]:
    """What the command prints: what was written, the measured kernel error, the alignment."""
    lines = [
        f"wrote {result.output}: {result.runs} run(s) × {result.rows:,} keys, {result.input_dim} → "
        f"{result.output_dim} dims (sidecar {result.sidecar})"
    ]
    if result.measured_error is not None:
        lines.append(
            (f"--epsilon {epsilon:g}: " if epsilon is not None else "")
            + f"M = {result.output_dim}, measured mean kernel error {result.measured_error:.4g}; "
            f"Rahimi–Recht's uniform bound (95%) would need M = {result.rahimi_recht_dim:,}"
        )
    if result.residual_before is not None:
        lines.append(
            f"alignment residual ‖XQ − REF‖/‖REF‖ on shared keys: {result.residual_before:.4g} → "
            f"{result.residual_after:.4g}"
        )
    return lines


ROWS = (
    ("rows", "keys per run"),
    ("runs", "runs featurized"),
    ("input_dim", "input dimension d"),
    ("output_dim", "output dimension M"),
    ("measured_error", "measured mean kernel error (--epsilon)"),
    ("rahimi_recht_dim", "M Rahimi–Recht's uniform bound (95%) would need"),
    ("residual_before", "alignment residual before Procrustes"),
    ("residual_after", "alignment residual after Procrustes"),
)


def render_html(result: Any, transform: dict[str, Any] | None = None, epsilon: float | None = None) -> str:
    """The result as one self-contained page: what was written, its numbers (each with its
    JSON path), the transform recorded in the sidecar, the notes, and the JSON."""
    data = result.to_dict()
    rows: list[list[str | Cell]] = [
        [label, Cell(f"{data[name]:,}" if isinstance(data[name], int) else f"{data[name]:.6g}", data[name], name)]
        for name, label in ROWS
        if data.get(name) is not None
    ]
    body = [html.section("Result", html.table(["measure", "value"], rows))]
    if transform:
        body.append(
            html.section(
                "Transform (the sidecar)",
                html.table(["field", "value"], [[str(k), str(v)] for k, v in transform.items()], right_from=2),
            )
        )
    if result.notes:
        body.append(html.section("Notes", html.bullets(result.notes)))
    lines = summary_lines(result, epsilon)
    body.insert(0, html.bullets(lines[1:]) if len(lines) > 1 else "")
    from stabcli import __version__

    return html.page("stabcli featurize", lines[0], body, dumps(result), __version__)
