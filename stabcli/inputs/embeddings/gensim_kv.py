"""gensim ``save()`` files (``.kv``, ``.wv``, ``.model``): KeyedVectors, Word2Vec and
FastText (their word vectors ``wv``), Doc2Vec (its document vectors ``dv``), with the
arrays gensim stored beside them; read through ``stabcli.inputs.safe_pickle`` (no code
from the file runs). gensim 3.x (and older) KeyedVectors, Word2Vec and Doc2Vec files are
read too, their attributes renamed to the current layout (``current_layout``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from stabcli.errors import InputError, quoted
from stabcli.inputs.embeddings.bounds import check_ngram_work, total_size
from stabcli.inputs.embeddings.core import Embedding, Source, check_keys, key_problem, require_real_dtype
from stabcli.inputs.safe_pickle import load_gensim


def read(source: Source) -> Embedding:
    from gensim.models import Doc2Vec, KeyedVectors, Word2Vec
    from gensim.models.fasttext import FastTextKeyedVectors

    path = source.path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = load_gensim(path, trusted=source.trust_pickle)
    if isinstance(obj, Doc2Vec):  # gensim 3.x: docvecs
        kv = obj.__dict__.get("dv", obj.__dict__.get("docvecs"))
        what = "document vectors (dv) of the Doc2Vec model"
    elif isinstance(obj, Word2Vec):  # FastText too
        kv, what = obj.__dict__.get("wv"), f"word vectors (wv) of the {type(obj).__name__} model"
    else:
        kv, what = obj, "vectors"
    if not isinstance(kv, KeyedVectors):
        raise InputError(f"{path}: not a gensim KeyedVectors or model file (found {quoted(type(kv).__name__)})")
    state = kv.__dict__
    current_layout(path, state)
    if isinstance(kv, FastTextKeyedVectors) and state.get("vectors") is None:
        words = state.get("index_to_key")
        if isinstance(words, list):  # the n-gram work is bounded by the file before gensim loops
            check_ngram_work(path, [str(w) for w in words], state.get("min_n"), state.get("max_n"), total_size(path))
        _fasttext_word_vectors(path, kv)
    keys, vectors = state.get("index_to_key"), state.get("vectors")
    if not isinstance(keys, list):
        raise InputError(f"{path}: {what}: no key list (index_to_key)")
    bad = next((i for i, k in enumerate(keys) if key_problem(k)), None)
    if bad is not None:
        raise InputError(f"{path}: {what}: key #{bad + 1} is {key_problem(keys[bad])}")
    if not isinstance(vectors, np.ndarray):
        raise InputError(f"{path}: {what}: no vector matrix (found {quoted(type(vectors).__name__)})")
    if vectors.ndim != 2:
        raise InputError(f"{path}: {what}: expected a 2-d matrix [keys, dims], found shape {vectors.shape}")
    require_real_dtype(path, vectors)
    if len(keys) != vectors.shape[0]:
        raise InputError(f"{path}: {what}: {len(keys)} keys for {vectors.shape[0]} rows")
    if not keys:
        raise InputError(f"{path}: {what}: empty (no keys)")
    keys = [str(k) for k in keys]  # Doc2Vec tags may be ints
    check_keys(path, keys, unit="key #")
    return Embedding(keys, vectors, path)


def current_layout(path: Path, state: dict[str, object]) -> None:
    """A gensim 3.x (or older) KeyedVectors' attributes under their gensim 4 names, as
    gensim 4's own ``load`` renames them: ``index2word``/``index2entity`` → ``index_to_key``,
    ``syn0`` → ``vectors``; a 3.x Doc2Vec's ``docvecs`` (``vectors_docs``; integer tags
    0…``max_rawint`` first, then ``offset2doctag``) → keys and vectors. Types are checked by
    the caller, as for any file."""
    if "index_to_key" in state:
        return
    if "vectors_docs" in state or "offset2doctag" in state:
        max_rawint, tags = state.get("max_rawint", -1), state.get("offset2doctag", [])
        if isinstance(max_rawint, bool) or not isinstance(max_rawint, int) or not isinstance(tags, list):
            raise InputError(f"{path}: malformed gensim 3.x document vectors (max_rawint, offset2doctag)")
        if not -1 <= max_rawint < 2**31:
            raise InputError(f"{path}: gensim 3.x document vectors claim {max_rawint:,} integer tags")
        state["index_to_key"] = list(range(max_rawint + 1)) + tags
        state["vectors"] = state.get("vectors_docs")
        return
    state["index_to_key"] = state.get("index2word", state.get("index2entity"))
    if state.get("vectors") is None:
        state["vectors"] = state.get("syn0")


def _fasttext_word_vectors(path: Path, kv: object) -> None:
    """gensim does not save FastText's word vectors; rebuild them from the vocabulary and
    n-gram arrays as its own ``load`` does (``adjust_vectors``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kv.recalc_char_ngram_buckets()  # type: ignore[attr-defined]
            kv.adjust_vectors()  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(f"{path}: inconsistent FastText vectors ({type(exc).__name__} rebuilding them)") from None


def write(path: Path, tmp: Path, keys: list[str], vectors: np.ndarray) -> list[tuple[Path, Path]]:
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=vectors.shape[1], count=0, dtype=np.float32)
    kv.add_vectors(keys, vectors)
    kv.save(str(tmp), separately=[])  # one file, so the rename is atomic
    return [(tmp, path)]
