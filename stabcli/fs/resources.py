"""The resource guard: refuse a request whose memory cannot fit before allocating it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from stabcli.errors import OptionError


def available_memory() -> int | None:
    """Bytes the system can still give a process (Linux ``MemAvailable``; else free
    physical pages), or None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def free_disk(path: Path) -> int | None:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def human_bytes(n: float) -> str:
    """``1536`` → ``'1.5 KB'`` (powers of 1024)."""
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def require_memory(param: str, needed: float, what: str) -> None:
    """OptionError naming ``param`` when ``needed`` bytes (for ``what``) exceed the memory
    available now; silent when the available memory is unknown."""
    available = available_memory()
    if available is not None and needed > available:
        raise OptionError(
            param, f"{what} needs about {human_bytes(needed)}, but only {human_bytes(available)} of memory is available"
        )


def require_disk(param: str, needed: float, where: Path, what: str) -> None:
    """OptionError naming ``param`` when ``needed`` bytes exceed the free space at ``where``."""
    free = free_disk(where)
    if free is not None and needed > free:
        raise OptionError(
            param, f"{what} needs about {human_bytes(needed)} on disk, but only {human_bytes(free)} is free at {where}"
        )
