"""Options of the downstream audit (``audit --labels``) and the variants it evaluates.

Every value is checked when ``DownstreamOptions`` is built, before any file is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from stabcli.constraints import DOWNSTREAM_OPTIONS, Constraint, validate_params
from stabcli.errors import OptionError, quote
from stabcli.inputs.textfile import check_encoding
from stabcli.measure.downstream.models import check_model, parse_model_params
from stabcli.measure.downstream.recommend import DEFAULT_PREFER

TASKS = ("auto", "classification", "regression", "multilabel")
SOURCES = ("h", "avg", "aligned")
# A class needs 1/test_size members to expect one of them in the test split: 5 for the default 0.2.
MIN_CLASS_SIZE = 5
SEED_MAX = 2**32 - 1  # scikit-learn's random_state range
SIGMA_MAX = 1e300  # N(0, σ²) directions beyond this overflow float64 (and phi is pure noise long before)


@dataclass(frozen=True)
class DownstreamOptions:
    """Options of the downstream audit; every value is checked on construction
    (``OptionError`` naming the parameter), before any file is read or anything computed.

    List options are stored as tuples. The run count is only known after loading: see
    ``check_runs``.
    """

    labels: Path
    task: str = "auto"
    model: str | None = None  # default: logreg for classification, ridge for regression; or module:Class
    model_params: Sequence[str] | Mapping[str, Any] = ()  # NAME=VALUE literals, or a dict (models.parse_model_params)
    test_size: float = 0.2
    split_seed: int = 0
    variants: Sequence[str] | None = None  # default: h, avg, aligned, phi:d, phi:2d (phi:d only for costly models)
    featurize_dims: Sequence[int] = ()
    sigmas: Sequence[float] = ()
    reference: int = 0
    seed: int = 0  # random Fourier directions, one draw for all runs
    jobs: int | None = None
    encoding: str | None = None  # None: utf-8, MovieLens u.item/movies.dat latin-1 (labels.read_labels)
    min_class_size: int = MIN_CLASS_SIZE  # smaller classes are dropped (with a warning)
    top: int = 10  # the test keys whose decisions flip most, listed per variant
    prefer: str = DEFAULT_PREFER  # the recommendation's trade-off (PREFERENCES)
    featurized: bool = False  # the input is already phi(h): named so, never featurized again

    parameter_constraints: ClassVar[dict[str, Constraint]] = DOWNSTREAM_OPTIONS

    def __post_init__(self) -> None:
        for name in ("variants", "featurize_dims", "sigmas", "model_params"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):  # a Mapping of model_params stays one
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "labels", Path(self.labels))
        if self.task not in TASKS:
            raise OptionError("task", f"{quote(self.task)} is not one of {', '.join(TASKS)}")
        params = parse_model_params(self.model_params)
        if self.model is not None or params:
            check_model(self.model, self.task, params)  # imports a module:Class and sets its parameters
        validate_params(self)
        if self.encoding is not None:
            check_encoding("encoding", self.encoding)
        parse_variants(self.variants, 2, self.featurize_dims, self.sigmas)  # syntax, M and sigma

    def check_runs(self, runs: int) -> None:
        """The checks that need the number of runs; call right after loading them."""
        if self.reference >= runs:
            raise OptionError(
                "reference", f"{self.reference} must be a run position from 0 to {runs - 1} ({runs} runs)"
            )


@dataclass(frozen=True)
class Variant:
    """A representation to evaluate: ``source`` (h, avg, aligned) optionally through phi."""

    name: str
    source: str
    phi_dim: int | None = None
    sigma: float = 1.0


_VARIANT_RE = re.compile(r"^(?:(h|avg|aligned)\+)?phi:(\d+)(?:@([0-9.eE+-]+))?$")


def parse_variants(
    spec: Sequence[str] | None,
    input_dim: int,
    featurize_dims: Sequence[int] = (),
    sigmas: Sequence[float] = (),
    costly: bool = False,
    featurized: bool = False,
) -> list[Variant]:
    """Variant names → variants, expanded over the M and σ sweeps, duplicates dropped.

    ``phi:M`` is short for ``h+phi:M``; ``phi:M@S`` sets σ = S. ``--featurize-dims``
    replaces M and ``--sigmas`` replaces σ in every variant that has phi. The default set
    is h, avg, aligned, phi:d, phi:2d (d the input dimension, made even); for a ``costly``
    model (gbdt, mlp, an imported estimator) it leaves out phi:2d, and for an input that is
    already phi(h) (``featurized``) every phi variant.
    """
    if spec is None:
        even = input_dim + input_dim % 2
        spec = ["h", "avg", "aligned"]
        if not featurized:
            spec += [f"phi:{even}"] + ([] if costly else [f"phi:{2 * even}"])
    for sigma in sigmas:
        if not _good_sigma(sigma):
            raise OptionError("sigmas", f"{sigma:g} is not a positive finite number up to {SIGMA_MAX:g}")
    for m in featurize_dims:
        if m < 2 or m % 2:
            raise OptionError("featurize_dims", f"{m} must be an even integer >= 2 (cos/sin pairs)")
    variants: list[Variant] = []
    has_phi = False
    for token in (t.strip() for t in spec):
        if token in SOURCES:
            variants.append(Variant(token, token))
            continue
        match = _VARIANT_RE.match(token)
        if not match:
            raise OptionError(
                "variants", f"unknown variant {quote(token)}; use h, avg, aligned, phi:M, phi:M@SIGMA or aligned+phi:M"
            )
        has_phi = True
        source, dim, sigma_text = match.group(1) or "h", int(match.group(2)), match.group(3)
        try:
            sigma = float(sigma_text) if sigma_text else 1.0
        except ValueError:
            raise OptionError("variants", f"{quote(token)}: {quote(sigma_text)} is not a number") from None
        for m in featurize_dims or [dim]:
            for s in sigmas or [sigma]:
                if m < 2 or m % 2 or not _good_sigma(s):
                    raise OptionError(
                        "variants",
                        f"{quote(token)} needs an even M >= 2 and a positive finite sigma up to {SIGMA_MAX:g}",
                    )
                prefix = "" if source == "h" else f"{source}+"
                suffix = f"@{s:g}" if sigmas or s != 1.0 else ""
                variants.append(Variant(f"{prefix}phi:{m}{suffix}", source, m, s))
    if (featurize_dims or sigmas) and not has_phi:
        raise OptionError(
            "featurize_dims" if featurize_dims else "sigmas",
            "sweeps the phi variants, but --variants has none (add phi:M)",
        )
    return list({v.name: v for v in variants}.values())  # first occurrence order, duplicates dropped


def _good_sigma(sigma: float) -> bool:
    return math.isfinite(sigma) and 0 < sigma <= SIGMA_MAX
