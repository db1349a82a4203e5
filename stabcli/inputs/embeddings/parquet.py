"""Parquet (``.parquet``): a ``key`` column plus one numeric column per dimension (needs
pyarrow: ``pip install 'stabcli[parquet]'``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stabcli.errors import InputError, UsageError, quote, quoted
from stabcli.inputs.embeddings.core import DTYPE_KINDS, Embedding, Source, check_keys, fits_float32

MAGIC = b"PAR1"


def read(source: Source) -> Embedding:
    import pandas as pd

    path = source.path
    try:
        if source.compression is None:
            table = pd.read_parquet(path)
        else:
            with source.open() as stream:
                table = pd.read_parquet(stream)
    except ImportError:
        raise UsageError("reading parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable parquet file ({quoted(str(exc))})") from None
    if "key" not in table.columns:
        raise InputError(f"{path}: no 'key' column (columns: {', '.join(map(str, table.columns[:8]))})")
    if table["key"].isna().any():
        raise InputError(f"{path}: row {int(np.argmax(table['key'].isna().to_numpy())) + 1}: missing key")
    keys = table["key"].astype(str).tolist()
    values = table.drop(columns="key")
    if values.shape[1] == 0 or len(keys) == 0:
        raise InputError(f"{path}: no vectors ({len(keys)} rows, {values.shape[1]} vector columns)")
    for column, dtype in values.dtypes.items():
        kind = getattr(dtype, "kind", "O")
        if kind not in "fiu":
            raise InputError(
                f"{path}: column {quote(str(column))} has dtype {dtype} "
                f"({DTYPE_KINDS.get(kind, 'not numeric')}); expected real numbers"
            )
    try:
        vectors = values.to_numpy(dtype=np.float64)
    except (ValueError, TypeError):
        raise InputError(f"{path}: vector columns are not all numeric (missing values?)") from None
    if np.isnan(vectors).any():
        row = int(np.argmax(np.isnan(vectors).any(axis=1)))
        raise InputError(f"{path}: key {quote(keys[row])} has missing or NaN values")
    if fits_float32(vectors):  # float32 like every other format, unless that loses finite values
        vectors = vectors.astype(np.float32)
    check_keys(path, keys, unit="row ")
    return Embedding(keys, vectors, path, read_as=source.described("parquet") if source.compression else "")


def write(path: Path, tmp: Path, keys: list[str], vectors: np.ndarray) -> list[tuple[Path, Path]]:
    import pandas as pd

    table = pd.DataFrame(vectors, columns=[f"v{j}" for j in range(vectors.shape[1])])
    table.insert(0, "key", keys)
    try:
        table.to_parquet(tmp, index=False)
    except ImportError:
        raise UsageError("writing parquet needs pyarrow: pip install 'stabcli[parquet]'") from None
    return [(tmp, path)]
