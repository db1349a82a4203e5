"""``stabcli drift``'s inputs: the options, BEFORE and AFTER matched on their common keys,
the noise run set checked against BEFORE (corpus, configuration, distinct runs), and the
``--key-names`` file."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from stabcli.commands.featurize import SIDECAR_SUFFIX
from stabcli.constraints import DRIFT_OPTIONS, Constraint, validate_params
from stabcli.environment import read_recorded
from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.embeddings import Embedding, ReadOptions, match_inputs
from stabcli.inputs.embeddings.core import require_float32_range
from stabcli.measure.align import match_keys, matched_vectors, rows_of
from stabcli.reports.drift_report import DEFAULT_MEASURE
from stabcli.runset import RunSet, is_runset
from stabcli.runset.layout import run_name
from stabcli.runset.manifest import corpus_reading, reading_differences

# the training configuration fields a noise run set must share with BEFORE's (checkpoints do not change vectors)
NOISE_CONFIG_IGNORED = ("checkpoints",)


# ------------------------------------------------------------------ options


@dataclass(frozen=True)
class DriftOptions:
    """Options of a drift comparison; validated on construction (``OptionError`` names the parameter)."""

    alpha: float = 0.01
    align: bool = True
    knn_k: int = 10
    knn_queries: int = 1_000
    top: int = 20
    seed: int = 0
    reference: int = 0
    measure: str = DEFAULT_MEASURE

    parameter_constraints: ClassVar[dict[str, Constraint]] = DRIFT_OPTIONS

    def __post_init__(self) -> None:
        validate_params(self)


# ------------------------------------------------------------------ loading


@dataclass
class DriftInputs:
    """BEFORE and AFTER restricted to their common keys (BEFORE's order), and the noise runs."""

    before: str
    after: str
    keys: list[str]
    b: np.ndarray
    a: np.ndarray
    added: list[str]
    removed: list[str]
    keyless: bool
    noise: str | None = None
    noise_runs: list[np.ndarray] | None = None
    before_in_noise: bool | None = None
    frequency: np.ndarray | None = None
    environments: dict[str, dict[str, str] | None] = field(default_factory=dict)  # recorded, by source
    noise_check: str = "unchecked"  # checked | overridden | unchecked (NoiseSection.compatibility)
    noise_warnings: list[str] = field(default_factory=list)

    @property
    def dim(self) -> int:
        return int(self.b.shape[1])


def _load_side(path: Path, reference: int, read: ReadOptions) -> tuple[Embedding, RunSet | None, int | None]:
    """An embedding file, or the ``reference`` run of a run set."""
    if path.is_dir():
        runset = RunSet.open_finished(path)
        if reference >= len(runset.runs):
            raise OptionError(
                "reference", f"{reference}: {path} has {len(runset.runs)} finished run(s) (0 to {len(runset.runs) - 1})"
            )
        index = runset.runs[reference]
        return runset.load(index), runset, index
    return read.read(path), None, None


def load_inputs(
    before: str | Path,
    after: str | Path,
    noise: str | Path | None = None,
    reference: int = 0,
    read: ReadOptions | None = None,
    allow_noise_mismatch: bool = False,
) -> DriftInputs:
    """Read BEFORE, AFTER (with ``read``: ``--input-format``, ``--trust-pickle``, ``--keys``)
    and the noise run set and match them on keys (``embeddings.match_inputs`` for keyless arrays).

    Raises ``InputError`` naming the file for mismatched dimensions, no common keys, NaN or
    inf rows, keyless inputs mixed with keyed ones, a noise run set with too few runs or
    without some of the compared keys.
    """
    before, after = Path(before), Path(after)
    read = read or ReadOptions()
    b_emb, b_set, b_index = _load_side(before, reference, read)
    a_emb, _a_set, _a_index = _load_side(after, reference, read)
    if a_emb.dim != b_emb.dim:
        raise InputError(f"{a_emb.source}: dimension {a_emb.dim}, but {b_emb.source} has {b_emb.dim}")
    b_emb, a_emb = match_inputs([b_emb, a_emb], read.keys_file)
    b_keyless = b_emb.keyless
    match = match_keys([b_emb.keys, a_emb.keys])
    keys, removed, added = match.keys, match.only_in(0), match.only_in(1)
    if not keys:
        raise InputError(f"{a_emb.source}: no keys in common with {b_emb.source}")
    if len(keys) < 2:
        raise InputError(f"{a_emb.source}: only 1 key in common with {b_emb.source}; drift needs at least 2")
    b, a = (matched_vectors(emb, rows, keys) for emb, rows in zip((b_emb, a_emb), match.rows, strict=True))
    for emb, arr in ((b_emb, b), (a_emb, a)):
        require_float32_range(emb.source, keys, arr, DRIFT_RANGE)
    inputs = DriftInputs(str(before), str(after), keys, b, a, added, removed, b_keyless)
    inputs.environments = {
        "before": recorded_environment(before, b_set, b_index),
        "after": recorded_environment(after, _a_set, _a_index),
    }
    frequency_set = b_set
    if noise is not None:
        noise = Path(noise)
        if b_keyless:
            raise InputError(f"{b_emb.source}: keyless arrays cannot be matched to the keyed runs of --noise {noise}")
        runset = _noise_runset(noise)
        if b_set is not None:
            inputs.noise_check, inputs.noise_warnings = check_noise_matches(b_set, runset, allow_noise_mismatch)
        runs = [runset.load(i) for i in runset.runs]
        member_by_path = b_set is not None and b_set.root.resolve() == runset.root.resolve() and b_index in runset.runs
        arrays = []
        for emb in runs:
            if emb.dim != b_emb.dim:
                raise InputError(f"{emb.source}: dimension {emb.dim}, but {b_emb.source} has {b_emb.dim}")
            arrays.append(matched_vectors(emb, _cover(emb, keys, noise), keys))
            require_float32_range(emb.source, keys, arrays[-1], DRIFT_RANGE)
        member = member_by_path or any(np.array_equal(arr, b) for arr in arrays)
        minimum = 3 if member else 4
        if len(arrays) < minimum:
            raise InputError(
                f"{noise}: {len(arrays)} finished run(s); a noise band needs at least {minimum} "
                f"({'BEFORE is one of them' if member else '4 when BEFORE is not one of them, 3 when it is'})"
            )
        refuse_same_noise_runs(noise, [f"run-{i:03d}" for i in runset.runs], arrays)
        inputs.noise, inputs.noise_runs, inputs.before_in_noise = str(noise), arrays, member
        inputs.environments.update({f"noise/{run_name(i)}": runset.environment(i) for i in runset.runs})
        frequency_set = runset
    if frequency_set is not None:
        counts = frequency_set.key_counts()
        if counts is not None:
            inputs.frequency = np.array([counts.get(k, -1) for k in keys], dtype=np.float64)
            inputs.frequency[inputs.frequency < 0] = np.nan
    return inputs


DRIFT_RANGE = "drift compares distances and noise bands in float32 magnitudes"


def recorded_environment(path: Path, runset: RunSet | None, index: int | None) -> dict[str, str] | None:
    """The environment a side was computed in: its run's training environment for a run set,
    the featurize sidecar's for a file ``stabcli featurize`` wrote, else None (not recorded)."""
    if runset is not None and index is not None:
        return runset.environment(index)
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    try:
        return read_recorded(json.loads(sidecar.read_text(encoding="utf-8")).get("environment"))
    except (OSError, ValueError, AttributeError, RecursionError):  # no sidecar, or not one stabcli wrote
        return None


def refuse_same_noise_runs(noise: Path, names: list[str], arrays: list[np.ndarray]) -> None:
    """InputError when two noise runs are identical or exact rotations of each other (the
    finding and its reason are audit's ``input.degenerate``): their noise band has zero width,
    and every key would look moved."""
    from stabcli.measure.degenerate import degenerate_runs

    degenerate = degenerate_runs(names, arrays)
    if degenerate is not None:
        raise InputError(f"{noise}: a noise band of zero width would flag every key as moved: {degenerate.reason}")


def noise_mismatches(before: dict[str, Any], noise: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, BEFORE's value, the noise's value) for every corpus or training setting on
    which two run-set manifests differ: the corpus hash and reading options, and every
    configuration field but ``NOISE_CONFIG_IGNORED``."""
    out = []
    b_corpus, n_corpus = before.get("corpus") or {}, noise.get("corpus") or {}
    if b_corpus.get("sha256") != n_corpus.get("sha256"):
        out.append(("corpus sha256", b_corpus.get("sha256"), n_corpus.get("sha256")))
    b_reading, n_reading = corpus_reading(b_corpus), corpus_reading(n_corpus)  # pretrain's resume identity
    for name in reading_differences(b_reading, n_reading):
        out.append((f"corpus {name}", b_reading[name], n_reading[name]))
    b_config, n_config = before.get("config") or {}, noise.get("config") or {}
    for name in sorted(set(b_config) | set(n_config)):
        if name not in NOISE_CONFIG_IGNORED and b_config.get(name) != n_config.get(name):
            out.append((name, b_config.get(name), n_config.get(name)))
    return out


def check_noise_matches(before: RunSet, noise: RunSet, allow: bool) -> tuple[str, list[str]]:
    """("checked" | "overridden", warnings): InputError naming the first differing field
    unless ``allow`` (``--allow-noise-mismatch``), which turns every difference into a warning."""
    if before.root.resolve() == noise.root.resolve():
        return "checked", []
    found = noise_mismatches(before.manifest, noise.manifest)
    if not found:
        return "checked", []

    def short(value: Any) -> str:
        text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
        return text if len(text) <= 24 else text[:12] + "…"

    words = [f"{name} {short(b)} (noise: {short(n)})" for name, b, n in found]
    if not allow:
        name, b, n = found[0]
        raise InputError(
            f"--noise {noise.root}: its {name} is {short(n)}, BEFORE's ({before.root}) is {short(b)}"
            + (f" (and {len(found) - 1} more field(s) differ)" if len(found) > 1 else "")
            + "; a noise band must come from BEFORE's corpus and configuration (--allow-noise-mismatch to use it anyway)"
        )
    return "overridden", [f"the noise run set differs from BEFORE's: {'; '.join(words)} (--allow-noise-mismatch)"]


def _noise_runset(noise: Path) -> RunSet:
    if not noise.exists():
        raise InputError(f"{noise}: no such run set (--noise)")
    if not noise.is_dir() or not is_runset(noise):
        raise InputError(f"{noise}: --noise needs a run set directory made by stabcli pretrain (no stabcli.json)")
    return RunSet.open(noise)


def _cover(emb: Embedding, keys: list[str], noise: Path) -> np.ndarray | None:
    """Row indices of ``keys`` in a noise run; InputError when some are missing."""
    rows, missing = rows_of(keys, emb.keys)
    if missing:
        raise InputError(
            f"{noise}: {len(missing):,} of the {len(keys):,} compared keys are not in its run "
            f"{emb.source.parent.name} (e.g. {quote(missing[0])}); the noise run set must be trained on "
            "BEFORE's data"
        )
    return rows


def read_key_names(path: str | Path, known: set[str], encoding: str | None = None) -> dict[str, str]:
    """Display names (``keytable.read_key_names``, the reader audit uses: ``key,name`` or
    ``key<TAB>name``, MovieLens ``u.item`` / ``movies.dat`` / ``movies.csv``); InputError when
    none of its keys is a compared key."""
    from stabcli.inputs.keytable import read_key_names as read_names
    from stabcli.inputs.keytable import require_named_keys

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: key names file not found" if not path.exists() else f"{path}: not a file")
    names = {key: name for key, name in read_names(path, encoding).items() if key and name}
    if not names:
        raise InputError(f"{path}: no key names found")
    require_named_keys(path, names, known)
    return names
