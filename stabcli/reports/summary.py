"""The Markdown a command appends to ``GITHUB_STEP_SUMMARY``, kept under GitHub's limit.

GitHub refuses a step summary over 1 MiB (what the step appended in all, so what the file
already holds counts too) and then shows none of it. When the whole Markdown does not fit,
the per-key lists are cut to as many rows as fit, with a note saying so; when not even the
report without its lists fits, nothing is appended and the caller says why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes, per step (GitHub's documented limit)


def cut_note(shown: int, total: int) -> str:
    """The line under a per-key list cut for the step summary."""
    return (
        f"_{shown:,} of {total:,} rows shown: a GitHub step summary holds at most 1 MiB; "
        "every row is in the JSON and Markdown reports._"
    )


def bounded(
    render: Callable[[int | None], str], rows: int, used: int = 0, limit: int = STEP_SUMMARY_LIMIT
) -> str | None:
    """``render(None)`` (every row) when it fits in ``limit − used`` bytes of UTF-8; else
    ``render(k)`` for the largest ``k < rows`` per-key rows that fits; None when not even
    ``render(0)`` fits."""
    budget = limit - used

    def fits(text: str) -> bool:
        return len(text.encode("utf-8")) <= budget

    whole = render(None)
    if fits(whole):
        return whole
    low, high = 0, rows - 1  # the largest k in [low, high] whose rendering fits
    best = render(0)
    if not fits(best):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        text = render(middle)
        if fits(text):
            low, best = middle, text
        else:
            high = middle - 1
    return best


def step_summary_text(
    path: Path, render: Callable[[int | None], str], rows: int, on_warning: Callable[[str], None] | None = None
) -> str | None:
    """The Markdown to append to the step summary ``path``: ``bounded`` by what the file holds
    already; None, with a warning, when nothing fits."""
    try:
        used = path.stat().st_size if path.is_file() else 0  # /dev/stdout and pipes: nothing counted
    except OSError:
        used = 0
    text = bounded(render, rows, used)
    if text is None and on_warning is not None:
        on_warning(
            f"GITHUB_STEP_SUMMARY {path} holds {used:,} bytes; with this report it would pass GitHub's "
            f"{STEP_SUMMARY_LIMIT:,}-byte limit for a step, so the report is not appended to it"
        )
    return text
