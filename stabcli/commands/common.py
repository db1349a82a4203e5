"""What every command entry point shares: keyword options split into the options types,
and a report command's files (``--json``, ``--markdown``, ``--plots``, ``--per-key``, the CI
step summary) planned before any work and written all or nothing."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stabcli.errors import StabcliWarning, UsageError

if TYPE_CHECKING:
    from stabcli.fs.outputs import OutputPlan


def take(
    cls: type, options: dict[str, Any], rename: Mapping[str, str] | None = None, keep: Iterable[str] = ()
) -> dict[str, Any]:
    """Remove from ``options`` the keywords that are fields of the dataclass ``cls`` and
    return them as that class's keyword arguments. ``rename`` maps an API keyword to a field
    of another name (``keys`` → ``keys_file``); keywords in ``keep`` are copied, not removed
    (an option two options types share, as audit's ``seed``)."""
    rename = dict(rename or {})
    names = {f.name for f in fields(cls)}
    taken: dict[str, Any] = {}
    for keyword in list(options):
        name = rename.get(keyword, keyword)
        if name in names and (keyword in rename or name not in rename.values()):
            taken[name] = options[keyword] if keyword in keep else options.pop(keyword)
    return taken


def warn(message: str) -> None:
    """The entry points' default ``on_warning``: a ``StabcliWarning`` through Python's warnings."""
    warnings.warn(message, StabcliWarning, stacklevel=3)


def refuse_unknown(command: str, options: Mapping[str, Any]) -> None:
    """``TypeError`` for keywords no options type took, as Python reports a bad keyword."""
    if options:
        raise TypeError(f"{command}() got an unexpected keyword argument {next(iter(options))!r}")


def only_with(required: str, given: Iterable[tuple[str, bool]]) -> None:
    """``UsageError`` naming the flags given (``name, given``) that only apply with ``required``."""
    extra = [name for name, present in given if present]
    if extra:
        raise UsageError(f"{', '.join(extra)} only apply with {required}")


@dataclass(frozen=True)
class ReportFiles:
    """The files a report command writes besides its return value (all optional)."""

    json: Path | None = None
    markdown: Path | None = None
    plots: Path | None = None
    per_key: Path | None = None
    step_summary: Path | None = None  # the CLI passes $GITHUB_STEP_SUMMARY: Markdown appended
    force: bool = False

    @classmethod
    def take(cls, options: dict[str, Any]) -> ReportFiles:
        """The files named in ``options`` (keywords ``json``, ``markdown``, ``plots``,
        ``per_key``, ``step_summary``, ``force``), removed from it."""
        files = take(cls, options)
        for name in ("json", "markdown", "plots", "per_key", "step_summary"):
            if isinstance(files.get(name), str):
                files[name] = Path(files[name])
        return cls(**files)

    def check_formats(self) -> str | None:
        """Fail before any work: ``--plots`` without matplotlib, a ``--per-key`` suffix no
        reader opens. Returns the per-key table's format (``csv``/``parquet``) or None."""
        if self.plots:
            from stabcli.reports.audit_render import require_plots

            require_plots()
        if self.per_key:
            from stabcli.inputs.keytable import per_key_format

            return per_key_format(self.per_key)
        return None

    def plan(self, inputs: Iterable[Path], more_inputs: Iterable[Path | None] = ()) -> OutputPlan:
        """Every output against every input (``inputs`` with their companion keys files, and
        ``more_inputs``: labels, key names, keys file...), checked before any work."""
        from stabcli.fs.outputs import OutputPlan, plots_owned, with_companions

        plan = OutputPlan([companion for path in inputs for companion in with_companions(path)], force=self.force)
        for path in more_inputs:
            if path is not None:
                plan.add_input(path)
        if self.per_key:
            plan.add(self.per_key, "--per-key")
        if self.json:
            plan.add(self.json, "--json")
        if self.markdown:
            plan.add(self.markdown, "--markdown")
        if self.plots:
            plan.add(self.plots, "--plots", kind="dir", owned=plots_owned)
        if self.step_summary:
            plan.add(self.step_summary, "GITHUB_STEP_SUMMARY", kind="append")
        plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
        return plan

    def write(
        self,
        plan: OutputPlan,
        text: str,
        markdown: Callable[[], str],
        write_plots: Callable[[Path], list[Path]],
        frame: Callable[[], Any],
    ) -> list[Path]:
        """Write the JSON ``text``, the Markdown, the figures ``write_plots(directory)`` draws
        and the per-key table ``frame()`` all or nothing; returns the figures' paths."""
        written: list[Path] = []
        with plan:  # all or nothing: every output appears together, or none on any failure
            if self.json:
                plan.write_text(self.json, text)
            rendered = markdown() if self.markdown or self.step_summary else ""
            if self.markdown:
                plan.write_text(self.markdown, rendered)
            if self.step_summary:
                plan.write_text(self.step_summary, rendered)
            if self.plots:
                written = [self.plots / path.name for path in write_plots(plan.staging(self.plots))]
            if self.per_key:
                from stabcli.inputs.keytable import write_per_key  # pandas (60 MB, a second): only when asked

                write_per_key(frame(), self.per_key, plan.staging(self.per_key))
        return written
