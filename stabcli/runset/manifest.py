"""A run set's JSON files: the manifest ``stabcli.json`` and each run's ``losses.json``.

Both are read strictly (UTF-8, no NaN, no 5,000-digit integers, the manifest's fields of
the documented types) so that a damaged file is one clear error naming it.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stabcli.errors import InputError, RunSetError, quote
from stabcli.runset.layout import MANIFEST, SCHEMA_VERSION


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(path: Path) -> Any:
    """JSON from ``path``; ValueError (with a reason) for non-UTF-8, NaN, huge integers, syntax."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)  # ValueError also for a 5,000-digit integer
    except RecursionError:  # [[[[… nested 100,000 deep: Python's parser gives up
        raise ValueError("nested too deeply") from None


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "config": (dict, type(None)),
    "corpus": (dict, type(None)),
    "runs": (dict,),
    "seeds": (list,),
    "seed": (int,),
    "stabcli_version": (str,),
    "created": (str,),
    "updated": (str,),
}


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of run set ``root``; a clear error when missing, corrupt or too new."""
    path = root / MANIFEST
    if path.is_dir():
        raise RunSetError(f"{path}: expected a file, found a directory")
    try:
        manifest = load_json(path)
    except FileNotFoundError:
        raise InputError(f"{root}: not a run set (no {MANIFEST})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise RunSetError(f"{path}: corrupted manifest ({exc})") from None
    if not isinstance(manifest, dict) or type(manifest.get("schema_version")) is not int:
        raise RunSetError(f"{path}: corrupted manifest (no schema_version)")
    if manifest["schema_version"] > SCHEMA_VERSION:
        raise RunSetError(
            f"{path}: schema version {manifest['schema_version']} is newer than this stabcli understands "
            f"({SCHEMA_VERSION}); upgrade stabcli"
        )
    for name, types in _MANIFEST_TYPES.items():
        if name in manifest and (not isinstance(manifest[name], types) or isinstance(manifest[name], bool)):
            raise RunSetError(f"{path}: corrupted manifest ({quote(name)} is a {type(manifest[name]).__name__})")
    for name, entry in (manifest.get("runs") or {}).items():
        if not isinstance(entry, dict):
            raise RunSetError(f"{path}: corrupted manifest (runs[{quote(name)}] is a {type(entry).__name__})")
    return manifest


def corpus_reading(corpus: dict[str, Any] | None) -> dict[str, Any]:
    """How a manifest's corpus (its ``corpus`` entry) was read into the sequences trained: the
    format as resolved, the encoding used, the columns as read (user, item, time, rating),
    ``--min-rating`` and ``--tokenize``. The same corpus bytes read the same way give the same
    sequences; an option that changes none of these (``--corpus-format auto`` resolving to
    ``lines``) changes nothing."""
    corpus = corpus or {}
    options = corpus.get("options") or {}
    return {
        "format": corpus.get("format"),
        # the codec actually used (recorded since 0.3); an older manifest's ``--encoding`` as
        # typed ("latin-1", "utf-16") is not that name, so it counts as unrecorded
        "encoding": corpus.get("encoding"),
        "columns": corpus.get("columns") or None,
        "min_rating": options.get("min_rating"),
        "tokenize": options.get("tokenize") or "none",
    }


# Reading fields that manifests written before 0.3 do not record: missing on one side they
# are unknown, not different (an older run set resumes, and serves as drift's noise set).
UNRECORDED_BEFORE_0_3 = ("encoding", "columns")


def reading_differences(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """The :func:`corpus_reading` fields on which two readings differ; a field in
    ``UNRECORDED_BEFORE_0_3`` that one side does not record is not a difference."""
    old, new = old or {}, new or {}
    return [
        name
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
        and not (name in UNRECORDED_BEFORE_0_3 and (old.get(name) is None or new.get(name) is None))
    ]


def same_identity(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether two :func:`identity` dicts are the same run set (an unrecorded reading field
    of an older manifest matches anything)."""
    rest = ("config", "corpus_sha256", "seed")
    if any(old.get(name) != new.get(name) for name in rest):
        return False
    if (old.get("corpus_reading") is None) != (new.get("corpus_reading") is None):
        return False
    return not reading_differences(old.get("corpus_reading"), new.get("corpus_reading"))


def identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """What makes two pretrains the same run set: configuration, corpus sha256, how the
    corpus was read (:func:`corpus_reading`; none in script mode without a corpus) and seed."""
    corpus = manifest.get("corpus")
    return {
        "config": manifest.get("config"),
        "corpus_sha256": (corpus or {}).get("sha256"),
        "corpus_reading": corpus_reading(corpus) if corpus else None,
        "seed": manifest.get("seed"),
    }


def _flat(ident: dict[str, Any]) -> dict[str, Any]:
    reading = {f"corpus {name}": value for name, value in (ident.get("corpus_reading") or {}).items()}
    return {
        **(ident.get("config") or {}),
        "corpus sha256": ident.get("corpus_sha256"),
        **reading,
        "seed": ident.get("seed"),
    }


def describe_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Up to four ``name old → new`` differences between two :func:`identity` dicts."""
    flat_old, flat_new = _flat(old), _flat(new)
    diffs = [
        f"{k} {quote(flat_old.get(k))} → {quote(flat_new.get(k))}"
        for k in flat_new
        if flat_old.get(k) != flat_new.get(k)
    ]
    diffs += [f"{k} {quote(flat_old[k])} → unset" for k in flat_old if k not in flat_new]
    return ", ".join(diffs[:4]) or "unknown difference"


def now() -> str:
    """The manifest's timestamp format: UTC, ISO 8601, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_losses(losses: Any, where: str) -> list[float | None]:
    """A per-epoch loss list (numbers or null, all finite), or InputError saying why not."""
    if not (
        isinstance(losses, list)
        and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in losses)
    ):
        raise InputError(f"{where}: expected a list of per-epoch losses (numbers or null)")
    if any(v is not None and not math.isfinite(v) for v in losses):
        raise InputError(f"{where}: contains a non-finite loss")
    return [None if v is None else float(v) for v in losses]


def read_losses(path: Path) -> list[float | None] | None:
    """``losses.json`` of a run (None when absent or null)."""
    if not path.is_file():
        return None
    try:
        losses = load_json(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    return None if losses is None else check_losses(losses, str(path))
