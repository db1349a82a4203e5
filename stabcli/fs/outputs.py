"""Every output of a command, decided in one place before the first byte is written.

The rule, the same for every command and every kind of output:

* An output (after resolving symlinks) that is an input, lies inside an input directory (a
  run set and everything in it), or is a directory holding an input, is refused, naming
  both paths. So are two outputs that are the same file. "Is an input" includes a hard
  link to an input file (or to any file inside an input directory), and an input file
  inside a run set (``runs/run-000/vectors.npy``) makes its whole run set an input.
* An existing output that is not a regular file or directory (a device such as
  ``/dev/null``, a FIFO, a socket; symlinks followed) is refused, with or without ``force``.
* An output that exists is refused unless ``force``. With ``force`` a file is replaced
  atomically, and a directory only if it holds nothing but what stabcli writes there
  (``owned``); a symlink inside it, or any other file, is refused by name.
* ``kind="append"`` (``GITHUB_STEP_SUMMARY``) is appended to, as its protocol says, but
  is still checked against the inputs. ``exists_ok=True`` leaves existence to the caller
  (``pretrain --out`` resumes a run set); the input checks still apply.
* Writes go to temporary names beside their target (``.NAME.tmp-PID`` for files,
  ``.NAME.partial-PID`` for directories) and are renamed into place together by
  ``commit``; any failure before that removes every temporary, so a command leaves all its
  outputs or none. Errors name the real output, never a temporary name.

Example
-------
>>> plan = OutputPlan(inputs=["a.npy"], force=False)          # doctest: +SKIP
>>> plan.add("o.npy", "--out"); plan.add("o.npy.featurize.json", "--out")
>>> plan.check()                                               # before any work
>>> with plan:                                                 # rollback on any exception
...     with open(plan.staging("o.npy"), "wb") as fh:          # write to the temporary name
...         np.save(fh, array)
...     plan.write_json("o.npy.featurize.json", sidecar)
... # leaving the block without an exception commits: every output appears at once
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from stabcli.errors import UsageError, WriteError, quote
from stabcli.fs.atomic import cannot_write, is_temp_name, remove_stale_temporaries, rename_noreplace, temp_path
from stabcli.inputs.embeddings import keys_path_for
from stabcli.inputs.textfile import check_regular_file
from stabcli.runset.layout import enclosing_runset

Owned = Callable[[PurePosixPath, bool], bool]
"""``owned(relative_path, is_dir)``: whether stabcli writes this entry of a directory output
(``stabcli.runset.owned`` for a run set, :func:`plots_owned` for ``--plots``)."""


def plots_owned(rel: PurePosixPath, is_dir: bool) -> bool:
    """The PNG figures ``audit --plots`` writes."""
    return len(rel.parts) == 1 and not is_dir and (rel.name.endswith(".png") or is_temp_name(rel.name))


def foreign_entry(root: Path, owned: Owned) -> Path | None:
    """The first entry under ``root`` that stabcli did not write (a symlink never counts as
    written by stabcli), or None. Symlinks are never followed."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for name in sorted(dirnames) + sorted(filenames):
            path = here / name
            rel = PurePosixPath(path.relative_to(root).as_posix())
            if path.is_symlink() or not owned(rel, path.is_dir()):
                return path
    return None


def with_companions(path: str | Path) -> list[Path]:
    """An input path and the files reading it also reads (an ``.npy``'s ``NAME.keys.txt``);
    declare them all as inputs. A directory input covers everything inside it already."""
    path = Path(path)
    if path.suffix.lower() == ".npy":
        return [path, keys_path_for(path)]
    return [path]


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _shown(path: Path) -> str:
    """A resolved path as the user would write it from here: relative when below the
    working directory, else absolute."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def _same_file(path: Path, other: Path) -> bool:
    """Two names of one file (hard links included); False when either does not exist."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def _hard_link_to(path: Path, directory: Path) -> Path | None:
    """A file inside ``directory`` (symlinks not followed) that is ``path`` under another name."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if info.st_nlink < 2 or not stat.S_ISREG(info.st_mode):
        return None
    for dirpath, _dirnames, filenames in os.walk(directory, followlinks=False):
        for name in filenames:
            candidate = Path(dirpath) / name
            try:
                other = os.lstat(candidate)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino):
                return candidate
    return None


def _special(path: Path) -> bool:
    """Whether ``path`` (a symlink followed) is a device, FIFO or socket: replacing it would
    replace, say, /dev/null itself; writing into it would block or go elsewhere."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # a dangling symlink: replacing the link is an ordinary write
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _remove_entry(path: Path) -> None:
    """Remove a file, symlink or directory tree (never following a symlink); quietly."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _inside(path: Path, directory: Path) -> bool:
    return path != directory and path.is_relative_to(directory)


@dataclass
class _Output:
    path: Path  # as given: shown in every message
    label: str  # "--out", "--json", "GITHUB_STEP_SUMMARY", "sidecar of --out" ...
    kind: str  # "file", "dir" or "append"
    owned: Owned | None = None
    exists_ok: bool = False
    staged: Path | None = None  # the temporary name once something was written
    replaces: bool = False  # existed at check time (with force): replaced at commit
    aside: Path | None = None  # the replaced output, kept until every output is in place
    nested: bool = False  # staged inside a private temporary directory (``staging(nested=True)``)
    text: list[str] = field(default_factory=list)  # what an "append" output receives on commit

    @property
    def name(self) -> str:
        return f"{self.label} {self.path}" if self.label else str(self.path)

    def temporary(self) -> Path:
        return temp_path(self.path, kind="partial" if self.kind == "dir" else "tmp")

    def old(self) -> Path:
        return temp_path(self.path, kind="old")


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` whole or not at all: a failed write (disk full, ``ulimit -f``) cuts
    the file back to its length before, and removes it if this call created it."""
    existed = os.path.lexists(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    regular, start = False, 0
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)  # /dev/stdout may be a pipe: no seeking
        start = os.lseek(fd, 0, os.SEEK_END) if regular else 0
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        try:
            if not existed:
                os.unlink(path)
            elif regular:
                os.ftruncate(fd, start)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)


class OutputPlan:
    """The outputs of one command: checked together, written atomically, all or nothing.

    Parameters
    ----------
    inputs : iterable of path
        Every input: files, run-set directories (everything inside them counts), corpora,
        label files, references, keys files. More with :meth:`add_input`.
    force : bool
        Replace existing outputs (files atomically; directories only when they hold nothing
        but what stabcli writes there).
    """

    def __init__(self, inputs: Iterable[str | Path] = (), *, force: bool = False):
        self.force = force
        self._inputs: list[Path] = []
        self._outputs: list[_Output] = []
        self._committed: list[tuple[_Output, bool]] = []  # (output, existed before)
        self._current: _Output | None = None
        for path in inputs:
            self.add_input(path)

    # -- declaring -----------------------------------------------------------------------
    def add_input(self, path: str | Path) -> None:
        """Declare an input; a directory makes everything inside it an input too."""
        self._inputs.append(Path(path))

    def input_holding(self, path: str | Path) -> Path | None:
        """The declared input that ``path`` is, or lies inside (symlinks resolved); None."""
        real = Path(os.path.realpath(path))
        for given in self._inputs:
            target = Path(os.path.realpath(given))
            if real == target or _inside(real, target):
                return given
        return None

    def add(
        self,
        path: str | Path,
        label: str = "",
        *,
        kind: str = "file",
        owned: Owned | None = None,
        exists_ok: bool = False,
    ) -> Path:
        """Declare an output; returns it as a Path. ``label`` names it in messages (the
        option, e.g. ``--json``). ``kind`` is ``file``, ``dir`` (built whole, then renamed;
        ``owned`` says which entries ``force`` may replace) or ``append``. ``exists_ok``:
        only the input and collision checks apply; the caller writes the output itself
        (``pretrain --out`` resuming a run set)."""
        if kind not in ("file", "dir", "append"):
            raise ValueError(f"kind {quote(kind)}: expected file, dir or append")
        output = _Output(Path(path), label, kind, owned, exists_ok)
        if not output.path.name:  # '', '.', '/': a directory spelled without a name to write
            what = "directory" if kind == "dir" else "file"
            raise UsageError(f"{output.name}: has no {what} name; give a path that ends in one")
        self._outputs.append(output)
        return output.path

    @property
    def outputs(self) -> list[Path]:
        return [o.path for o in self._outputs]

    # -- checking ------------------------------------------------------------------------
    def check(self) -> None:
        """Refuse (UsageError naming the paths) any output that collides with an input or
        another output, exists without ``force``, or cannot be created. Writes nothing but
        removes the stale temporaries of these outputs that a killed stabcli left."""
        for given in self._inputs:  # one check for every input of every command: never read a FIFO or device
            if os.path.exists(given) and not os.path.isdir(given):
                check_regular_file(given)
        for output in self._outputs:
            if not output.exists_ok:
                remove_stale_temporaries(output.path)
        inputs = [(given, _real(given)) for given in self._inputs]
        runsets = [(given, runset) for given in self._inputs if (runset := enclosing_runset(given)) is not None]
        seen: list[tuple[_Output, Path]] = []
        for output in self._outputs:
            real = _real(output.path)
            for candidate in (real, _real(output.path.parent) / output.temporary().name):
                for given, source in inputs:
                    if candidate == source or (candidate == real and _same_file(real, source)):
                        raise UsageError(f"{output.name}: is the input {given}; write the output elsewhere")
                    if source.is_dir() and _inside(candidate, source):
                        raise UsageError(f"{output.name}: lies inside the input {given}; write the output elsewhere")
                    if output.kind == "dir" and _inside(source, candidate):
                        raise UsageError(f"{output.name}: contains the input {given}; write the output elsewhere")
                for given, runset in runsets:
                    if candidate == runset or _inside(candidate, runset):
                        raise UsageError(
                            f"{output.name}: lies inside the run set {_shown(runset)} of the input {given}; "
                            "write the output elsewhere"
                        )
            for _given, source in inputs:  # a hard link into an input directory is a file of that input
                if source.is_dir() and (twin := _hard_link_to(real, source)) is not None:
                    raise UsageError(
                        f"{output.name}: is the input {_shown(twin)} (a hard link to it); write the output elsewhere"
                    )
            for given, runset in runsets:  # ... and so is a hard link into the run set of an input file
                if (twin := _hard_link_to(real, runset)) is not None:
                    raise UsageError(
                        f"{output.name}: is {_shown(twin)} (a hard link to it) in the run set of the input {given}; "
                        "write the output elsewhere"
                    )
            for other, other_real in seen:
                if real == other_real:
                    raise UsageError(f"{output.name}: is also {other.name}; give them different paths")
                if (other.kind == "dir" and _inside(real, other_real)) or (
                    output.kind == "dir" and _inside(other_real, real)
                ):
                    raise UsageError(f"{output.name}: overlaps {other.name}; give them separate paths")
            seen.append((output, real))
        for output in self._outputs:  # collisions first: they are named whatever else is wrong
            self._check_location(output)

    def _check_location(self, output: _Output) -> None:
        path, parent = output.path, output.path.parent
        if not parent.exists():
            raise UsageError(f"{output.name}: directory {parent} does not exist")
        if not parent.is_dir():
            raise UsageError(f"{output.name}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(f"{output.name}: cannot write in {parent} (permission denied)")
        if not os.path.lexists(path):
            return
        if output.kind != "append" and _special(path):
            raise UsageError(
                f"{output.name}: is not a regular file (a device, FIFO or socket); "
                "stabcli writes only regular files and directories"
            )
        if output.kind == "append":
            if path.is_dir():
                raise UsageError(f"{output.name}: is a directory")
            return
        if output.exists_ok:
            return
        if output.kind == "file" and path.is_dir() and not path.is_symlink():
            raise UsageError(f"{output.name}: is a directory; give a file name")
        if output.kind == "dir" and not path.is_dir():
            raise UsageError(f"{output.name}: exists and is not a directory")
        if not self.force:
            raise UsageError(f"{output.name}: already exists; pass --force to replace it")
        output.replaces = True
        if output.kind == "dir":
            if path.is_symlink():
                raise UsageError(f"{output.name}: is a symlink; stabcli replaces only directories it wrote")
            foreign = foreign_entry(path, output.owned or (lambda rel, is_dir: False))
            if foreign is not None:
                raise UsageError(
                    f"{output.name}: holds {foreign}, which stabcli did not write; "
                    f"refusing to replace it even with --force"
                )

    # -- writing -------------------------------------------------------------------------
    def _find(self, path: str | Path) -> _Output:
        path = Path(path)
        for output in self._outputs:
            if output.path == path:
                return output
        raise ValueError(f"{path} was not declared with OutputPlan.add")

    def staging(self, path: str | Path, *, nested: bool = False) -> Path:
        """The temporary name to write output ``path`` under (a fresh directory for a ``dir``
        output); ``commit`` renames it into place. ``nested=True`` gives a file of the same
        name inside a private temporary directory, for writers that make temporary files
        of their own beside their target (gensim, pandas, matplotlib): rollback removes
        them with the directory."""
        output = self._find(path)
        if output.kind == "append":
            raise ValueError(f"{path}: an append output is written with write_text")
        if output.exists_ok and output.kind == "dir":
            raise ValueError(f"{path}: an exists_ok directory is written by its caller (committing would replace it)")
        self._current = output
        if output.staged is None:
            tmp = output.temporary()
            if os.path.lexists(tmp):  # left by an earlier attempt of this very pid
                shutil.rmtree(tmp) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink()
            output.nested = nested and output.kind == "file"
            if output.kind == "dir" or output.nested:
                tmp.mkdir()
            output.staged = tmp / output.path.name if output.nested else tmp
        return output.staged

    def write_bytes(self, path: str | Path, data: bytes) -> None:
        with open(self.staging(path), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def write_text(self, path: str | Path, text: str) -> None:
        output = self._find(path)
        if output.kind == "append":
            self._current = output
            output.text.append(text)
        else:
            self.write_bytes(path, text.encode("utf-8"))

    def write_json(self, path: str | Path, data: Any) -> None:
        self.write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")

    def commit(self) -> None:
        """Publish every staged output, then append to the ``append`` outputs, all or nothing.

        The order: each output that ``force`` replaces is renamed aside (``.NAME.old-PID``);
        each staged output is renamed into place without replacing (an output that appeared
        since :meth:`check`, written by another command, is refused here); the appends run
        last; only then are the replaced outputs removed. A failure at any step (a full disk
        while appending to ``GITHUB_STEP_SUMMARY`` included) removes what this plan published
        and puts every replaced output back, then raises WriteError naming the output."""
        try:
            for output in self._outputs:
                if output.staged is not None:
                    self._current = output
                    self._publish(output)
            for output in self._outputs:
                if output.kind == "append" and output.text:
                    self._current = output
                    _append(output.path, "".join(output.text).encode("utf-8"))
        except FileExistsError:
            assert self._current is not None
            error = WriteError(
                f"{self._current.name}: was created by another command while this one ran; refusing to "
                "replace it (nothing was written)"
            )
            self.rollback()
            raise error from None
        except OSError as exc:
            error = self.write_error(exc)
            self.rollback()
            raise error from None
        for output in self._outputs:  # everything is in place: drop the replaced outputs
            if output.aside is not None:
                _remove_entry(output.aside)
                output.aside = None
        self._committed.clear()

    def _publish(self, output: _Output) -> None:
        assert output.staged is not None
        existed = os.path.lexists(output.path)
        if output.exists_ok:  # the caller owns this output's existence (pretrain resuming)
            os.replace(output.staged, output.path)
        else:
            if output.replaces and existed:
                os.rename(output.path, output.old())
                output.aside, existed = output.old(), False
            rename_noreplace(output.staged, output.path)
        if output.nested:
            shutil.rmtree(output.staged.parent)
        output.staged = None
        self._committed.append((output, existed))

    def rollback(self) -> None:
        """Remove every temporary name and every output this plan already created, and put
        back every output it was replacing."""
        for output in self._outputs:
            staged = output.staged.parent if output.staged is not None and output.nested else output.staged
            if staged is not None and os.path.lexists(staged):
                _remove_entry(staged)
            output.staged = None
            output.text.clear()
        for output, existed in self._committed:
            if not existed:
                _remove_entry(output.path)
        self._committed.clear()
        for output in self._outputs:
            if output.aside is not None:
                with contextlib.suppress(OSError):  # another command's output took the name: it stays
                    rename_noreplace(output.aside, output.path)
                output.aside = None

    def write_error(self, exc: OSError) -> WriteError:
        """One line naming the real output (never a temporary name) for a failed write."""
        output, name = self._current, None
        filename = Path(exc.filename) if exc.filename else None
        for candidate in self._outputs:
            tmp = candidate.temporary()
            if filename is not None and (filename == tmp or _inside(filename, tmp)):
                output = candidate
                if candidate.kind == "dir" and filename != tmp:  # a file inside a directory output
                    name = candidate.path / filename.relative_to(tmp)
        name = name or (output.path if output is not None else filename)
        return cannot_write(name if name is not None else "output", exc)

    def __enter__(self) -> OutputPlan:
        self.check()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
            return
        error = self.write_error(exc) if isinstance(exc, OSError) else None
        self.rollback()
        if error is not None:
            raise error from None
