"""Atomic file writes, and the one place that spells stabcli's temporary names and hashes files.

A writer writes into a temporary name in the target's directory, fsyncs it and renames it
over the target, so a reader sees the old file or the new one, never half of one. A
failure (or Ctrl-C) removes the temporary file.

Temporary names are ``.NAME.tmp-PID`` (a file being written), ``.NAME.partial-PID`` (a
directory being built) and ``.NAME.old-PID`` (a directory moved aside while its
replacement is renamed in), optionally followed by a suffix such as ``.npz``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stabcli.errors import WriteError, quote

TEMP_KINDS = ("tmp", "partial", "old")
_TEMP_RE = re.compile(r"^\..+\.(tmp|partial|old)-\d+(\..*)?$")


def temp_path(path: Path, suffix: str = "", *, kind: str = "tmp") -> Path:
    """The temporary name this process writes ``path`` under: ``.NAME.KIND-PID`` + ``suffix``,
    ``kind`` one of :data:`TEMP_KINDS`."""
    if kind not in TEMP_KINDS:
        raise ValueError(f"kind {quote(kind)}: expected one of {', '.join(TEMP_KINDS)}")
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}{suffix}")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temporary name of some stabcli process (:func:`temp_path`)."""
    return bool(_TEMP_RE.match(name))


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    ``suffix`` keeps writers that append their own extension happy (``np.savez`` adds
    ``.npz`` unless the name ends with it). On any exception the temporary file is removed
    and the target is left as it was.

    Examples
    --------
    >>> with atomic_path(target) as tmp:  # doctest: +SKIP
    ...     np.save(tmp, vectors)
    """
    path = Path(path)
    tmp = temp_path(path, suffix)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BrokenPipeError:
        tmp.unlink(missing_ok=True)
        raise
    except OSError as exc:  # a full disk, a file-size limit: one line naming the real file
        tmp.unlink(missing_ok=True)
        raise cannot_write(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def cannot_write(path: str | Path, exc: OSError) -> WriteError:
    """``PATH: cannot write (No space left on device)``: the real name, never a temporary one."""
    return WriteError(f"{path}: cannot write ({exc.strerror or os.strerror(exc.errno or errno.EIO)})")


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON (indented, no NaN: a non-finite number is a bug in the caller) atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- publication without replacing ------------------------------------------------------------

_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


def _load_renameat2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):  # not Linux, or a libc before glibc 2.28
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def rename_noreplace(source: str | Path, target: str | Path) -> None:
    """Rename ``source`` (a file or a directory) to ``target`` atomically, failing with
    ``FileExistsError`` when ``target`` exists, whoever created it and whenever: two
    commands publishing the same new output cannot both succeed.

    Linux ``renameat2(RENAME_NOREPLACE)``; where the call or the file system lacks it, a file
    is hard-linked (``link`` never replaces) and its temporary name unlinked, and a directory
    is renamed onto an empty directory this call created with ``mkdir`` (which never replaces)."""
    source, target = Path(source), Path(target)
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(target))
    if source.is_dir() and not source.is_symlink():
        os.mkdir(target)
        try:
            os.rename(source, target)
        except OSError:
            os.rmdir(target)
            raise
    else:
        os.link(source, target, follow_symlinks=False)
        os.unlink(source)


_STALE_RE = re.compile(rf"^\.(?P<name>.+)\.(?P<kind>{'|'.join(TEMP_KINDS)})-(?P<pid>\d+)(?:\..*)?$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid != 0  # another user's process (or an absurd number: left alone)
    return True


def remove_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the hidden temporaries of ``path`` (``.NAME.tmp-PID``, ``.NAME.partial-PID``,
    ``.NAME.old-PID``) left by a stabcli process that no longer runs (``kill -9``). A live
    pid's entries are left alone. An ``.old`` copy (what ``--force`` was replacing) is put
    back when ``path`` itself is gone, so a kill between the two renames loses nothing.
    Returns what was removed."""
    path = Path(path)
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        match = _STALE_RE.match(name)
        if match is None or match["name"] != path.name or int(match["pid"]) == os.getpid():
            continue
        if _pid_alive(int(match["pid"])):
            continue
        stale = path.parent / name
        try:
            if match["kind"] == "old" and not os.path.lexists(path):
                os.rename(stale, path)
                continue
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            else:
                stale.unlink()
            removed.append(stale)
        except OSError:  # another process cleaning up at the same time, or no permission
            continue
    return removed
