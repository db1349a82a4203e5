"""Run sets, the on-disk contract between commands: ``pretrain`` writes them, ``featurize``
derives them, ``audit`` and ``drift`` read them.

``layout`` spells the names and decides what stabcli wrote, ``manifest`` reads the JSON
files, ``reader`` opens a run set, ``writer`` holds the lock and publishes runs.
"""

from stabcli.runset.layout import (
    EPOCHS,
    KEYS,
    LOG,
    MANIFEST,
    PROGRESS,
    SCHEMA_VERSION,
    VECTORS,
    check_entries,
    check_input_outside,
    check_removable_runset,
    checkpoint_path,
    entry_kind,
    is_runset,
    owned,
    remove_stabcli_entries,
    run_name,
)
from stabcli.runset.manifest import read_losses, read_manifest
from stabcli.runset.reader import RunSet, complete_runs
from stabcli.runset.writer import RunSetLock, RunSetWriter, check_keys, write_run

__all__ = [
    "EPOCHS",
    "KEYS",
    "LOG",
    "MANIFEST",
    "PROGRESS",
    "SCHEMA_VERSION",
    "VECTORS",
    "RunSet",
    "RunSetLock",
    "RunSetWriter",
    "check_entries",
    "check_input_outside",
    "check_keys",
    "check_removable_runset",
    "checkpoint_path",
    "complete_runs",
    "entry_kind",
    "is_runset",
    "owned",
    "read_losses",
    "read_manifest",
    "remove_stabcli_entries",
    "run_name",
    "write_run",
]
