"""Making several inputs comparable key by key (``--keys`` for keyless ``.npy`` inputs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from stabcli.errors import InputError, OptionError
from stabcli.inputs.embeddings.core import Embedding, keys_path_for, read_keys


def read_notes(embeddings: Sequence[Embedding]) -> list[str]:
    """One line per way of reading that the suffix does not say (GloVe without a header, a
    compressed file, the older fastText layout): ``a.txt, b.txt: read as GloVe text (no header line)``."""
    by_way: dict[str, list[str]] = {}
    for e in embeddings:
        if e.read_as:
            by_way.setdefault(e.read_as, []).append(str(e.source))
    return [f"{', '.join(names)}: read as {way}" for way, names in by_way.items()]


def match_inputs(
    embeddings: Sequence[Embedding], keys_file: str | Path | None = None, on_note: Callable[[str], None] | None = None
) -> list[Embedding]:
    """Make a list of inputs comparable key by key, or refuse.

    A keyless input (a ``.npy`` without a keys file: its keys are row numbers) cannot be
    matched with a keyed one: that would compare rows that hold different keys. So:

    * ``keys_file`` (``--keys``) gives every keyless input its keys (one per line, as many
      as the input has rows);
    * otherwise a mix of keyless and keyed inputs is an ``InputError`` naming one of each;
    * inputs that are all keyless are matched by position: they must have the same number
      of rows, and ``on_note`` receives one line saying so.

    Returns the embeddings in order, keyless ones replaced by keyed copies when
    ``keys_file`` is given. Commands that compare embeddings (audit, featurize
    ``--align-to``, drift) call this before matching keys.

    Raises
    ------
    OptionError
        ``keys_file`` given but no input is keyless (``param="keys"``).
    InputError
        Mixed inputs without ``keys_file``; a keys file whose length differs from a keyless
        input's rows; keyless inputs of different lengths.
    """
    embeddings = list(embeddings)
    if on_note:
        for note in read_notes(embeddings):
            on_note(note)
    keyless = [e for e in embeddings if e.keyless]
    if keys_file is not None:
        keys_file = Path(keys_file)
        if not keyless:
            raise OptionError(
                "keys", f"{keys_file}: every input already has keys (--keys is for .npy files without a keys file)"
            )
        if not keys_file.is_file():
            raise InputError(f"{keys_file}: no such keys file")
        keys = read_keys(keys_file)
        for e in keyless:
            if len(keys) != e.vectors.shape[0]:
                raise InputError(f"{keys_file}: {len(keys)} keys for {e.vectors.shape[0]} rows in {e.source}")
        return [replace(e, keys=keys, keyless=False) if e.keyless else e for e in embeddings]
    if not keyless:
        return embeddings
    keyed = [e for e in embeddings if not e.keyless]
    if keyed:
        raise InputError(
            f"{keyless[0].source}: has no keys file ({keys_path_for(Path(keyless[0].source)).name}), "
            f"but {keyed[0].source} has keys; rows cannot be matched to keys. Give --keys FILE "
            "(one key per row) or put the keys file beside it"
        )
    rows = keyless[0].vectors.shape[0]
    for e in keyless[1:]:
        if e.vectors.shape[0] != rows:
            raise InputError(
                f"{e.source}: {e.vectors.shape[0]} rows, but {keyless[0].source} has {rows}; inputs "
                "without keys files are matched by position and need the same rows (or give --keys)"
            )
    if on_note and len(embeddings) > 1:
        on_note("no input has a keys file: rows are matched by position")
    return embeddings
