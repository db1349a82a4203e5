"""Embedding files: read and write every format in docs/formats.md.

One module per format (``npy``, ``word2vec_text`` with GloVe, ``word2vec_binary``,
``fasttext``, ``gensim_kv``, ``parquet``), the registry that picks one for a file
(``registry``: suffix, first bytes, ``--input-format``), what they share (``core``) and
the matching of several inputs (``matching``). gzip, bzip2 and xz files of every format
are read as streams (``stabcli.inputs.compressed``).
"""

from stabcli.inputs.embeddings.core import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    Embedding,
    fits_float32,
    keys_path_for,
    keys_text,
    read_keys,
    require_finite,
    require_real_dtype,
)
from stabcli.inputs.embeddings.fasttext import FASTTEXT_MAGIC
from stabcli.inputs.embeddings.matching import match_inputs
from stabcli.inputs.embeddings.npy import NPY_MAGIC, load_npy
from stabcli.inputs.embeddings.registry import (
    FORMATS,
    READ_FORMATS,
    WRITE_FORMATS,
    EmbeddingFormat,
    ReadOptions,
    check_keys_writable,
    check_writable,
    detect_format,
    embedding_suffix,
    format_for,
    is_embedding_file,
    read_embedding,
    write_embedding,
)

__all__ = [
    "FASTTEXT_MAGIC",
    "FLOAT32_MAX",
    "FLOAT32_TINY",
    "FORMATS",
    "NPY_MAGIC",
    "READ_FORMATS",
    "WRITE_FORMATS",
    "Embedding",
    "EmbeddingFormat",
    "ReadOptions",
    "check_keys_writable",
    "check_writable",
    "detect_format",
    "embedding_suffix",
    "fits_float32",
    "format_for",
    "is_embedding_file",
    "keys_path_for",
    "keys_text",
    "load_npy",
    "match_inputs",
    "read_embedding",
    "read_keys",
    "require_finite",
    "require_real_dtype",
    "write_embedding",
]
