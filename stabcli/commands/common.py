"""What every command entry point shares: keyword options split into the options types,
and a report command's files (``--json``, ``--markdown``, ``--html``, ``--plots``,
``--per-key``, the CI step summary) planned before any work and written all or nothing, and
its MLflow run (``--mlflow``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stabcli.errors import StabcliWarning, UsageError, quote

if TYPE_CHECKING:
    from stabcli.fs.outputs import OutputPlan
    from stabcli.reports.html import Figure
    from stabcli.reports.tracking import LoggedRun, Tracker


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
        raise TypeError(f"{command}() got an unexpected keyword argument {quote(next(iter(options)))}")


# options of the downstream protocol and their defaults: given with another value without
# --labels, they are refused (audit and drift alike), never silently ignored
LABEL_OPTION_DEFAULTS: dict[str, Any] = {
    "task": "auto",
    "model": None,
    "test_size": 0.2,
    "split_seed": 0,
    "min_class_size": 5,
    "variants": None,
    "featurize_dims": None,
    "sigmas": None,
}


def refuse_unused_table_options(labelled: dict[str, Any], tables: Iterable[tuple[str, object]]) -> None:
    """``UsageError`` for options given without the file they apply to: the downstream options
    (``--test-size``, ``--task``, …) without ``--labels``, ``--encoding`` without any of the
    text ``tables`` (``(flag, value)``: ``--labels``, ``--key-names``, …)."""
    tables = list(tables)
    if labelled.get("labels") is None:
        only_with(
            "--labels FILE",
            [
                ("--" + name.replace("_", "-"), name in labelled and labelled[name] != default)
                for name, default in LABEL_OPTION_DEFAULTS.items()
            ],
        )
    if labelled.get("encoding") is not None and all(value is None for _flag, value in tables):
        only_with(" or ".join(f"{flag} FILE" for flag, _value in tables), [("--encoding", True)])


def only_with(required: str, given: Iterable[tuple[str, bool]]) -> None:
    """``UsageError`` naming the flags given (``name, given``) that only apply with ``required``."""
    extra = [name for name, present in given if present]
    if extra:
        raise UsageError(f"{', '.join(extra)} only apply with {required}")


class Renderings:
    """A finished report's renderings, each made once and only when an output needs it: the
    JSON ``text``, ``markdown(key_rows)`` (per-key lists cut to ``key_rows`` rows; None: all),
    the figures ``draw()``, the per-key table ``frame()`` and the HTML ``page(figures, frame)``.
    ``key_rows`` is the length of the Markdown's per-key list."""

    def __init__(
        self,
        text: str,
        markdown: Callable[[int | None], str],
        draw: Callable[[], list[Figure]] | None = None,
        frame: Callable[[], Any] | None = None,
        page: Callable[[list[Figure] | None, Any], str] | None = None,
        key_rows: int = 0,
    ):
        self.text, self._markdown, self._draw, self._frame, self._page = text, markdown, draw, frame, page
        self.key_rows = key_rows
        self._cache: dict[str, Any] = {}

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def markdown(self, key_rows: int | None = None) -> str:
        if key_rows is not None:
            return self._markdown(key_rows)
        return self._once("markdown", lambda: self._markdown(None))

    def figures(self) -> list[Figure] | None:
        """The figures; None without matplotlib or without figures (an HTML page says so)."""
        from stabcli.reports.figures import available

        draw = self._draw
        return self._once("figures", lambda: draw() if draw is not None and available() else None)

    def frame(self) -> Any:
        frame = self._frame
        return self._once("frame", lambda: frame() if frame is not None else None)

    @property
    def has_page(self) -> bool:
        return self._page is not None

    def page(self) -> str:
        if self._page is None:
            raise UsageError("--html is not available for this command")
        page = self._page
        return self._once("page", lambda: page(self.figures(), self.frame()))


@dataclass(frozen=True)
class ReportFiles:
    """The files a report command writes besides its return value (all optional), and its
    MLflow run (``mlflow``, in ``mlflow_experiment``)."""

    json: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    plots: Path | None = None
    per_key: Path | None = None
    step_summary: Path | None = None  # the CLI passes $GITHUB_STEP_SUMMARY: Markdown appended
    force: bool = False
    mlflow: bool = False
    mlflow_experiment: str | None = None

    @classmethod
    def take(cls, options: dict[str, Any]) -> ReportFiles:
        """The files named in ``options`` (keywords ``json``, ``markdown``, ``html``, ``plots``,
        ``per_key``, ``step_summary``, ``force``, ``mlflow``, ``mlflow_experiment``), removed
        from it."""
        files = take(cls, options)
        for name in ("json", "markdown", "html", "plots", "per_key", "step_summary"):
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
        if self.html:
            plan.add(self.html, "--html")
        if self.plots:
            plan.add(self.plots, "--plots", kind="dir", owned=plots_owned)
        if self.step_summary:
            plan.add(self.step_summary, "GITHUB_STEP_SUMMARY", kind="append")
        plan.check()  # before any work: nothing of the inputs is overwritten, nothing existing without --force
        return plan

    def open_tracker(self, plan: OutputPlan | None = None) -> Tracker | None:
        """The MLflow experiment to log into (``mlflow``), opened before any work so that a
        missing extra or a store MLflow refuses is one error first; None without ``mlflow``.
        Given the command's ``plan``, a tracking store (file or SQLite) inside an input is refused."""
        if self.mlflow_experiment is not None and not self.mlflow:
            raise UsageError("--mlflow-experiment only applies with --mlflow")
        if self.mlflow_experiment is not None and not self.mlflow_experiment.strip():
            raise UsageError("--mlflow-experiment: empty name; omit it for MLFLOW_EXPERIMENT_NAME or 'stabcli'")
        if not self.mlflow:
            return None
        from stabcli.reports.tracking import Tracker, require_mlflow, store_path

        if plan is not None:
            require_mlflow()
            import mlflow

            uri = mlflow.get_tracking_uri()
            store = store_path(uri)
            holder = plan.input_holding(store) if store is not None else None
            if holder is not None:
                raise UsageError(
                    f"MLflow at {uri}: the tracking store lies inside {holder}, which this command reads or "
                    "writes; point MLFLOW_TRACKING_URI elsewhere"
                )
            return Tracker(self.mlflow_experiment, tracking_uri=uri)
        return Tracker(self.mlflow_experiment)

    def write(
        self,
        plan: OutputPlan,
        text: str,
        markdown: Callable[[], str] | None = None,
        write_plots: Callable[[Path], list[Path]] | None = None,
        frame: Callable[[], Any] | None = None,
        *,
        renderings: Renderings | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> list[Path]:
        """Write the JSON ``text``, the Markdown (appended to the step summary within
        GitHub's size limit), the HTML page, the figures and the per-key table all or
        nothing; returns the figures' paths and the page's. ``renderings`` makes each once
        (the figures for ``plots`` and the page alike); without it, ``markdown()``,
        ``write_plots(directory)`` and ``frame()``."""
        from stabcli.reports.summary import step_summary_text

        if renderings is None:
            assert markdown is not None
            shown = markdown
            renderings = Renderings(text, lambda _: shown(), frame=frame)
        written: list[Path] = []
        with plan:  # all or nothing: every output appears together, or none on any failure
            if self.json:
                plan.write_text(self.json, text)
            if self.markdown:
                plan.write_text(self.markdown, renderings.markdown())
            if self.step_summary:
                summary = step_summary_text(self.step_summary, renderings.markdown, renderings.key_rows, on_warning)
                if summary is not None:
                    plan.write_text(self.step_summary, summary)
            if self.html:
                plan.write_text(self.html, renderings.page())
            if self.plots:
                staged = plan.staging(self.plots)
                if write_plots is not None:
                    drawn = write_plots(staged)
                else:
                    from stabcli.reports.figures import save

                    drawn = save(renderings.figures() or [], staged)
                written = [self.plots / path.name for path in drawn]
            if self.per_key:
                from stabcli.inputs.keytable import write_per_key  # pandas (60 MB, a second): only when asked

                write_per_key(renderings.frame(), self.per_key, plan.staging(self.per_key))
        return written + ([self.html] if self.html else [])


def log_run(
    tracker: Tracker | None,
    command: str,
    params: Mapping[str, Any],
    renderings: Renderings,
    on_logged: Callable[[str], None] | None = None,
) -> LoggedRun | None:
    """Log a report command's run to MLflow (``tracking.log_report``) and say so through
    ``on_logged(line)``; nothing without a tracker."""
    if tracker is None:
        return None
    from stabcli.reports.tracking import log_report

    run = log_report(tracker, command, params, renderings)
    if on_logged is not None:
        on_logged(f"logged to MLflow: run {run.run_id} in experiment {tracker.experiment!r} at {tracker.tracking_uri}")
    return run


def params_given(options: Mapping[str, Any]) -> dict[str, Any]:
    """A command's options as given, for MLflow params: without the callbacks and the files."""
    skip = {"json", "markdown", "html", "plots", "per_key", "step_summary", "mlflow", "mlflow_experiment"}
    return {k: v for k, v in options.items() if not k.startswith("on_") and k not in skip}


@dataclass(frozen=True)
class Callbacks:
    """A report command's callbacks: ``on_step(text)`` (progress), ``on_warning(text)``
    (default: a ``StabcliWarning``), ``on_figure(path)`` (each file written besides the JSON
    and Markdown) and ``on_logged(line)`` (the MLflow run)."""

    on_step: Callable[[str], None] | None = None
    on_warning: Callable[[str], None] = warn
    on_figure: Callable[[Path], None] | None = None
    on_logged: Callable[[str], None] | None = None

    @classmethod
    def take(cls, options: dict[str, Any]) -> Callbacks:
        """The callbacks named in ``options``, removed from it."""
        taken = {name: options.pop(name, None) for name in ("on_step", "on_warning", "on_figure", "on_logged")}
        return cls(**{name: value for name, value in taken.items() if value is not None})


def publish(
    files: ReportFiles,
    plan: OutputPlan,
    renderings: Renderings,
    callbacks: Callbacks,
    logged: tuple[Tracker | None, str, Mapping[str, Any]],
) -> None:
    """Write a finished report's files all or nothing (``ReportFiles.write``), log its run
    (``logged``: the tracker, the command and its params) and name each figure written
    through ``callbacks.on_figure``."""
    figures = files.write(plan, renderings.text, renderings=renderings, on_warning=callbacks.on_warning)
    tracker, command, params = logged
    log_run(tracker, command, params, renderings, callbacks.on_logged)
    for figure in figures:
        if callbacks.on_figure is not None:
            callbacks.on_figure(figure)
