"""Environment provenance: which software and machine computed a run or an output.

``pretrain`` records :func:`capture` once per run (in the process that trained it, so a Dask
worker on another machine records its own), ``featurize`` records it in its sidecar. ``audit``
and ``drift`` compare what the inputs recorded with :func:`differences` and name every field
that differs: a gensim upgrade or another CPU's BLAS kernel between two refreshes is a real
cause of change (docs/reproducibility.md).

A recorded environment is a flat ``dict[str, str]``; the fields are :data:`FIELDS`. Inputs
without one (older run sets, plain embedding files) are left out of the comparison.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from stabcli.reports.schema import doc

FIELDS = ("stabcli", "python", "numpy", "scipy", "gensim", "blas", "machine", "cpu")


def capture() -> dict[str, str]:
    """This process's environment: package versions, Python, the BLAS library with its
    version and the kernel (architecture) it runs, and the CPU.

    The BLAS entry comes from threadpoolctl (installed with scikit-learn) and is read at each
    call: it lists the libraries loaded so far (numpy's always, scipy's once scipy.linalg is in
    use), which grows during a process's life. The rest cannot change and is read once.
    """
    import numpy  # noqa: F401  (loads numpy's BLAS, so threadpoolctl can see it)

    return {**_fixed(), "blas": _blas()}


@functools.lru_cache(maxsize=1)
def _fixed() -> dict[str, str]:
    return {
        "stabcli": _version("stabcli"),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "scipy": _version("scipy"),
        "gensim": _version("gensim"),
        "machine": platform.machine() or "unknown",
        "cpu": _cpu_model(),
    }


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _blas() -> str:
    """``"openblas 0.3.31 SkylakeX"`` for every distinct BLAS loaded, joined by ``"; "``."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - scikit-learn always brings it
        return "unknown"
    seen: list[str] = []
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        text = " ".join(str(lib.get(k)) for k in ("internal_api", "version", "architecture") if lib.get(k))
        if text and text not in seen:
            seen.append(text)
    return "; ".join(sorted(seen)) or "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_recorded(value: Any) -> dict[str, str] | None:
    """A recorded environment as read from a manifest or sidecar, or None when there is none
    (or it is not a mapping of strings: nothing is compared then)."""
    if not isinstance(value, Mapping):
        return None
    out = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    return out or None


@dataclass(frozen=True)
class EnvironmentValue:
    value: str = doc("the recorded value (a version, a BLAS library with its kernel, a CPU)")
    sources: list[str] = doc("the inputs that recorded it (run names, or before/after/noise)")


@dataclass(frozen=True)
class EnvironmentDifference:
    field: str = doc(f"the field that differs: one of {', '.join(FIELDS)}")
    values: list[EnvironmentValue] = doc("each value seen, with the inputs that recorded it")


def differences(recorded: Mapping[str, Mapping[str, str] | None]) -> list[EnvironmentDifference]:
    """The fields on which the recorded environments disagree, in :data:`FIELDS` order.

    ``recorded`` maps a source name (``run-003``, ``before``) to its environment or None;
    sources without one are left out, and a field a source did not record is not compared.
    """
    known = {name: env for name, env in recorded.items() if env}
    out = []
    for name in FIELDS:
        values: dict[str, list[str]] = {}
        for source, env in known.items():
            if name in env:
                values.setdefault(env[name], []).append(source)
        if len(values) > 1:
            out.append(EnvironmentDifference(name, [EnvironmentValue(v, s) for v, s in values.items()]))
    return out


def describe(diffs: list[EnvironmentDifference]) -> str | None:
    """One line for the terminal and Markdown reports, or None when nothing differs:
    ``gensim 4.3.3 (run-000–run-004) vs 4.4.0 (run-005); blas … vs …``."""
    if not diffs:
        return None
    parts = []
    for diff in diffs:
        shown = " vs ".join(f"{v.value} ({_sources(v.sources)})" for v in diff.values)
        parts.append(f"{diff.field} {shown}")
    return "environment differs: " + "; ".join(parts)


def _sources(names: list[str]) -> str:
    if len(names) > 3:
        return f"{names[0]} … {names[-1]}, {len(names)} inputs"
    return ", ".join(names)
