"""Log a command's report to MLflow: options as params, every scalar of the report as a
metric (lists as metric steps: per epoch, per dimension, per run), the renderings as
artifacts. MLflow is the optional extra ``stabcli[mlflow]``.

Where runs go is MLflow's own choice: ``MLFLOW_TRACKING_URI`` when set, otherwise MLflow's
default. Since MLflow 3.7 that default is ``sqlite:///mlflow.db`` in the working directory
(artifacts under ``./mlruns``), unless ``./mlruns`` already holds a file store, which is then
used; since 3.13 a file store (``MLFLOW_TRACKING_URI=./mlruns``) also needs
``MLFLOW_ALLOW_FILE_STORE=true``. The extra installs ``mlflow-skinny`` with SQLAlchemy and
Alembic, which the SQLite store needs (``mlflow-skinny`` alone has neither; the full
``mlflow`` package has both, and a tracking server's UI).

The library never prints: ``Tracker`` returns what it logged (run ids, the URI) for the
command line to say.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stabcli.errors import UsageError, quote

MLFLOW_INSTALL = "pip install 'stabcli[mlflow]'"
DEFAULT_EXPERIMENT = "stabcli"
_BAD_NAME = re.compile(r"[^/\w.\- :]")  # what MLflow accepts in a metric or param name (POSIX)
_KEY_LENGTH, _PARAM_LENGTH, _TAG_LENGTH = 250, 6000, 8000
_METRICS_PER_BATCH, _PARAMS_PER_BATCH = 1000, 100


def require_mlflow() -> None:
    """UsageError naming the extra to install when MLflow is missing."""
    if importlib.util.find_spec("mlflow") is None:
        raise UsageError(f"--mlflow needs MLflow: {MLFLOW_INSTALL}")


def metric_name(path: str) -> str:
    """A dotted report path as an MLflow metric name (characters MLflow refuses become ``_``)."""
    return _BAD_NAME.sub("_", path)[:_KEY_LENGTH]


def report_metrics(data: Any, prefix: str = "") -> Iterator[tuple[str, float, int]]:
    """(name, value, step) for every number and boolean (as 0/1) of a report's JSON.

    A list of numbers is one metric whose steps are the positions (per dimension, per run);
    a list of rows with an ``epoch`` is one metric per field, stepped by epoch (the
    per-epoch noise and variance, Fig. 1c); a list of lists names its positions. Lists of
    other rows (the least stable keys, the checks) are per-key data, not metrics: they are
    in the JSON artifact. Nulls are left out.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            yield from report_metrics(value, f"{prefix}{key}.")
        return
    name = prefix.rstrip(".")
    if isinstance(data, bool):
        yield metric_name(name), float(data), 0
    elif isinstance(data, (int, float)):
        if math.isfinite(data):
            yield metric_name(name), float(data), 0
    elif isinstance(data, list):
        if all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in data):
            for step, value in enumerate(data):
                if value is not None and math.isfinite(value):
                    yield metric_name(name), float(value), step
        elif all(isinstance(v, list) for v in data):
            for i, inner in enumerate(data):
                yield from report_metrics(inner, f"{prefix}{i}.")
        elif all(isinstance(v, dict) and isinstance(v.get("epoch"), int) for v in data):
            for row in data:
                fields = {k: v for k, v in row.items() if k != "epoch"}
                for field_name, value, _ in report_metrics(fields, prefix):
                    yield field_name, value, row["epoch"]


def report_tags(data: Any, prefix: str = "stabcli.") -> dict[str, str]:
    """Every string of a report's JSON outside lists (the recommended variant, the inputs),
    as ``stabcli.PATH`` tags."""
    tags: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str):
                tags[metric_name(f"{prefix}{key}")] = value[:_TAG_LENGTH]
            elif isinstance(value, dict):
                tags.update(report_tags(value, f"{prefix}{key}."))
    return tags


def params_of(options: Mapping[str, Any]) -> dict[str, str]:
    """A command's options as MLflow params: lists joined by commas, unset options left out."""
    params = {}
    for name, value in options.items():
        if value is None or value == [] or value == ():
            continue
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        params[metric_name(name)] = text[:_PARAM_LENGTH]
    return params


@dataclass(frozen=True)
class LoggedRun:
    run_id: str
    experiment_id: str
    artifact_uri: str


@dataclass(frozen=True)
class RunRecord:
    """One run to log: its name, params, metrics ``(name, value, step)``, tags and artifacts
    (relative name → bytes or text; ``writers``: relative name → a function writing that
    file, for tables too large to hold twice)."""

    name: str
    params: Mapping[str, str]
    metrics: Sequence[tuple[str, float, int]] = ()
    tags: Mapping[str, str] | None = None
    artifacts: Mapping[str, bytes | str] | None = None
    writers: Mapping[str, Callable[[Path], None]] | None = None


class Tracker:
    """An MLflow experiment to log runs into (``MlflowClient``: no global MLflow state).

    Opening it resolves the tracking URI and creates the experiment when needed, so a store
    MLflow refuses fails before the command's work, as one ``UsageError`` line.

    Parameters
    ----------
    experiment : str or None
        Experiment name; None: ``MLFLOW_EXPERIMENT_NAME``, else ``"stabcli"``.
    tracking_uri : str or None
        None: ``MLFLOW_TRACKING_URI``, else MLflow's default.
    """

    def __init__(self, experiment: str | None = None, tracking_uri: str | None = None):
        require_mlflow()
        self.experiment = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
        self.tracking_uri: str | None = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        with self._errors():
            import mlflow
            from mlflow.tracking import MlflowClient

            self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()
            self.client = MlflowClient(tracking_uri=self.tracking_uri)
            found = self.client.get_experiment_by_name(self.experiment)
            self.experiment_id = (
                found.experiment_id if found is not None else self.client.create_experiment(self.experiment)
            )

    def _errors(self) -> Any:
        return _mlflow_errors(self.tracking_uri)

    def log(self, record: RunRecord, parent: str | None = None) -> LoggedRun:
        """Create a run (a child of run ``parent`` when given), log ``record`` and finish it;
        a failure marks the run FAILED and is a UsageError."""
        from mlflow.entities import Metric, Param

        tags = {**(record.tags or {}), "mlflow.runName": record.name}
        if parent is not None:
            tags["mlflow.parentRunId"] = parent
        with self._errors():
            run = self.client.create_run(self.experiment_id, run_name=record.name, tags=tags)
        run_id = run.info.run_id
        status = "FAILED"
        try:
            with self._errors():
                now = int(time.time() * 1000)
                params = [Param(k, v) for k, v in record.params.items()]
                for start in range(0, len(params), _PARAMS_PER_BATCH):
                    self.client.log_batch(run_id, params=params[start : start + _PARAMS_PER_BATCH])
                metrics = [Metric(k, v, now, step) for k, v, step in record.metrics]
                for start in range(0, len(metrics), _METRICS_PER_BATCH):
                    self.client.log_batch(run_id, metrics=metrics[start : start + _METRICS_PER_BATCH])
                if record.artifacts or record.writers:
                    with tempfile.TemporaryDirectory(prefix="stabcli-mlflow-") as tmp:
                        for name, content in (record.artifacts or {}).items():
                            path = Path(tmp) / name
                            path.parent.mkdir(parents=True, exist_ok=True)
                            path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
                        for name, write in (record.writers or {}).items():
                            path = Path(tmp) / name
                            path.parent.mkdir(parents=True, exist_ok=True)
                            write(path)
                        self.client.log_artifacts(run_id, tmp)
            status = "FINISHED"
        finally:
            self.client.set_terminated(run_id, status)
        return LoggedRun(run_id, self.experiment_id, run.info.artifact_uri)


def store_path(uri: str) -> Path | None:
    """The local file or directory a tracking URI writes (``sqlite:///PATH``, ``file:PATH``,
    a bare path: MLflow's file store); None for a server."""
    from urllib.parse import unquote, urlparse

    if uri.startswith("sqlite:///"):
        return Path(unquote(uri.removeprefix("sqlite:///").split("?")[0]) or ".").absolute()
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).absolute()
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(uri).absolute()
    return None


@contextmanager
def _mlflow_errors(uri: str | None) -> Iterator[None]:
    """MLflow's refusals (a file store without MLFLOW_ALLOW_FILE_STORE, an unreachable
    server, a store whose driver is missing) as one UsageError line naming the URI."""
    from mlflow.exceptions import MlflowException

    where = f"MLflow at {uri}" if uri else "MLflow"
    try:
        yield
    except ModuleNotFoundError as exc:
        raise UsageError(f"{where}: needs the Python package {quote(exc.name)}: {MLFLOW_INSTALL}") from None
    except MlflowException as exc:
        raise UsageError(f"{where}: {exc.message.strip().splitlines()[0]}") from None
    except OSError as exc:
        raise UsageError(f"{where}: {exc}") from None
    except Exception as exc:  # the store's database driver (SQLAlchemy: a file that is not a database)
        if not type(exc).__module__.startswith("sqlalchemy"):
            raise
        cause = getattr(exc, "orig", None) or exc
        raise UsageError(f"{where}: {str(cause).strip().splitlines()[0]}") from None


def pretrain_records(result: Any, options: Mapping[str, Any]) -> tuple[RunRecord, list[RunRecord]]:
    """The runs ``pretrain --mlflow`` logs for a ``PretrainResult``: a parent for the run set
    (the options, run and key counts, the corpus, the manifest as an artifact) and one child
    per run (its seed, seconds, final loss, the loss of every epoch as steps, its status)."""
    from stabcli.runset.layout import MANIFEST, is_runset
    from stabcli.runset.reader import RunSet

    runset = RunSet.open(result.root) if is_runset(result.root) else None
    counts = {status: sum(r.status == status for r in result.runs) for status in ("complete", "kept", "failed")}
    metrics = [(f"runs_{status}", float(n), 0) for status, n in counts.items()]
    if result.keys is not None:
        metrics.append(("keys", float(result.keys), 0))
    for name, value in (result.corpus or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics.append((metric_name(f"corpus.{name}"), float(value), 0))
    manifest = result.root / MANIFEST
    parent = RunRecord(
        name=f"stabcli pretrain {result.root.name}",
        params=params_of(options),
        metrics=metrics,
        tags={"stabcli.command": "pretrain", "stabcli.run_set": str(result.root)},
        artifacts={MANIFEST: manifest.read_bytes()} if manifest.is_file() else None,
    )
    children = []
    for run in result.runs:
        losses = (runset.losses(run.index) if runset is not None and run.status != "failed" else None) or []
        child_metrics = [("loss", float(v), epoch) for epoch, v in enumerate(losses, start=1) if v is not None]
        for name in ("seconds", "final_loss"):
            value = getattr(run, name)
            if value is not None:
                child_metrics.append((name, float(value), 0))
        children.append(
            RunRecord(
                name=f"run-{run.index:03d}",
                params={"seed": str(run.seed), "run": str(run.index)},
                metrics=child_metrics,
                tags={
                    "stabcli.status": run.status,
                    **({"stabcli.error": run.error[:_TAG_LENGTH]} if run.error else {}),
                },
            )
        )
    return parent, children


def log_nested(tracker: Tracker, parent: RunRecord, children: Sequence[RunRecord]) -> tuple[LoggedRun, list[LoggedRun]]:
    """``parent`` and every child as its nested run."""
    top = tracker.log(parent)
    return top, [tracker.log(child, parent=top.run_id) for child in children]


def log_report(tracker: Tracker, command: str, options: Mapping[str, Any], renderings: Any) -> LoggedRun:
    """Log a report command's run: its options as params, every number of the report as a
    metric, and the JSON, Markdown, HTML (where the command has one), figures and per-key
    table as artifacts (``renderings``: ``stabcli.commands.common.Renderings``)."""
    import json

    from stabcli.inputs.keytable import write_per_key

    data = json.loads(renderings.text)
    artifacts: dict[str, bytes | str] = {f"{command}.json": renderings.text, f"{command}.md": renderings.markdown()}
    if renderings.has_page:
        artifacts[f"{command}.html"] = renderings.page()
    for figure in renderings.figures() or []:
        artifacts[f"plots/{figure.name}"] = figure.png
    frame = renderings.frame()
    writers = (
        {} if frame is None else {f"{command}-per-key.csv": lambda path: write_per_key(frame, Path(path.name), path)}
    )
    return tracker.log(
        RunRecord(
            name=f"stabcli {command}",
            params=params_of(options),
            metrics=list(report_metrics(data)),
            tags={"stabcli.command": command, **report_tags(data)},
            artifacts=artifacts,
            writers=writers,
        )
    )
