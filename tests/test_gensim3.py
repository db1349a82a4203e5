"""gensim 3.x (and 2.x) save() files through the safe loader.

gensim 3.x cannot be installed next to gensim 4, so the files are written here the way a
3.x ``save()`` writes them: pickle protocol 2 of objects whose classes carry the 3.x
names (``gensim.models.keyedvectors.Word2VecKeyedVectors``, ``...keyedvectors.Vocab``,
``gensim.models.word2vec.Word2VecVocab``, the ``Doctag`` namedtuple...) and 3.x attribute
names (``index2word``, ``syn0``, ``vocab``, ``docvecs``/``vectors_docs``), with arrays
stored separately (``NAME.ATTR.npy``) as gensim does for large ones.
"""

from __future__ import annotations

import pickle
import sys
import types
from collections import namedtuple

import numpy as np
import pytest

from stabcli.errors import InputError
from stabcli.inputs.embeddings import read_embedding

MODULES = {
    "g3_keyedvectors": "gensim.models.keyedvectors",
    "g3_word2vec": "gensim.models.word2vec",
    "g3_doc2vec": "gensim.models.doc2vec",
}


@pytest.fixture
def g3(monkeypatch):
    """Classes named as in gensim 3.x, in stand-in modules renamed in the pickle bytes."""
    made = {}
    for fake in MODULES:
        module = types.ModuleType(fake)
        monkeypatch.setitem(sys.modules, fake, module)
        made[fake] = module

    def cls(module: str, name: str, base: type = object) -> type:
        new = type(name, (base,), {"__module__": module})
        setattr(made[module], name, new)
        return new

    ns = types.SimpleNamespace(
        Word2VecKeyedVectors=cls("g3_keyedvectors", "Word2VecKeyedVectors"),
        Doc2VecKeyedVectors=cls("g3_keyedvectors", "Doc2VecKeyedVectors"),
        EuclideanKeyedVectors=cls("g3_keyedvectors", "EuclideanKeyedVectors"),
        KeyedVectors=cls("g3_keyedvectors", "KeyedVectors"),
        Vocab=cls("g3_keyedvectors", "Vocab"),
        Word2Vec=cls("g3_word2vec", "Word2Vec"),
        OldVocab=cls("g3_word2vec", "Vocab"),
        Word2VecVocab=cls("g3_word2vec", "Word2VecVocab"),
        Word2VecTrainables=cls("g3_word2vec", "Word2VecTrainables"),
        Doc2Vec=cls("g3_doc2vec", "Doc2Vec"),
        Doctag=cls("g3_doc2vec", "Doctag", namedtuple("Doctag", "offset word_count doc_count")),
    )

    def dumps(obj: object) -> bytes:
        data = pickle.dumps(obj, protocol=2)  # what gensim 3.x's utils.pickle writes
        for fake, real in MODULES.items():
            data = data.replace(b"c" + fake.encode() + b"\n", b"c" + real.encode() + b"\n")
        assert b"g3_" not in data
        return data

    ns.dumps = dumps
    return ns


def _obj(cls: type, **state: object) -> object:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


def _kv3(g3, words: list[str], vectors: np.ndarray, cls_name: str = "Word2VecKeyedVectors", old: bool = False):
    vocab = {w: _obj(g3.OldVocab if old else g3.Vocab, count=10 - i, index=i) for i, w in enumerate(words)}
    names = ("syn0", "syn0norm") if old else ("vectors", "vectors_norm")
    return _obj(
        getattr(g3, cls_name),
        **{names[0]: vectors, names[1]: None},
        vocab=vocab,
        index2word=list(words),
        vector_size=vectors.shape[1],
        **{"__numpys": [], "__scipys": [], "__ignoreds": [names[1]], "__recursive_saveloads": []},
    )


WORDS = ["the", "cat", "sat", "caf\u00e9"]


@pytest.mark.parametrize("cls_name", ["Word2VecKeyedVectors", "EuclideanKeyedVectors", "KeyedVectors"])
def test_gensim3_keyedvectors(tmp_path, g3, cls_name):
    vectors = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    old = cls_name == "KeyedVectors"  # gensim 1.x/2.x: syn0 and word2vec.Vocab
    (tmp_path / "old.kv").write_bytes(g3.dumps(_kv3(g3, WORDS, vectors, cls_name, old=old)))
    emb = read_embedding(tmp_path / "old.kv")
    assert emb.keys == WORDS
    np.testing.assert_array_equal(emb.vectors, vectors)


def test_gensim3_word2vec_model_with_separately_stored_vectors(tmp_path, g3):
    vectors = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    wv = _kv3(g3, WORDS, vectors)
    wv.__dict__.pop("vectors")
    wv.__dict__["__numpys"] = ["vectors"]
    model = _obj(
        g3.Word2Vec,
        wv=wv,
        vocabulary=_obj(g3.Word2VecVocab, min_count=1, sample=0.001, raw_vocab={}),
        trainables=_obj(g3.Word2VecTrainables, hashfxn=hash, layer1_size=3, seed=1, syn1neg=None),
        random=np.random.RandomState(1),
        cum_table=np.arange(4, dtype=np.uint32),
        **{
            "__numpys": [],
            "__scipys": [],
            "__ignoreds": [],
            "__recursive_saveloads": ["wv", "vocabulary", "trainables"],
        },
    )
    (tmp_path / "w2v.model").write_bytes(g3.dumps(model))
    with pytest.raises(InputError, match=r"w2v\.model\.wv\.vectors\.npy: missing"):
        read_embedding(tmp_path / "w2v.model")
    np.save(tmp_path / "w2v.model.wv.vectors.npy", vectors)
    emb = read_embedding(tmp_path / "w2v.model")
    assert emb.keys == WORDS
    np.testing.assert_array_equal(emb.vectors, vectors)


class _Numpy116RandomState:
    """Pickles as numpy < 1.17 pickled a ``RandomState`` (gensim 3.x's ``Word2Vec.random``):
    ``numpy.random.__RandomState_ctor()`` then ``__setstate__`` with the legacy state tuple."""

    def __init__(self, seed: int):
        self.state = np.random.RandomState(seed).get_state()

    def __reduce__(self):
        return (_old_ctor, (), self.state)


def _old_ctor():  # stands in for numpy.random.__RandomState_ctor in the pickle bytes
    raise AssertionError("never called")


_old_ctor.__module__ = "numpy116_random"
_old_ctor.__qualname__ = _old_ctor.__name__ = "__RandomState_ctor"


def test_gensim3_model_pickled_under_numpy_1_16_keeps_its_random_state(tmp_path, g3, monkeypatch):
    module = types.ModuleType("numpy116_random")
    module.__RandomState_ctor = _old_ctor
    monkeypatch.setitem(sys.modules, "numpy116_random", module)
    vectors = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    model = _obj(
        g3.Word2Vec,
        wv=_kv3(g3, WORDS, vectors),
        random=_Numpy116RandomState(1),
        **{"__numpys": [], "__scipys": [], "__ignoreds": [], "__recursive_saveloads": ["wv"]},
    )
    data = g3.dumps(model).replace(b"cnumpy116_random\n", b"cnumpy.random\n")
    assert b"cnumpy.random\n__RandomState_ctor\n" in data
    (tmp_path / "w2v.model").write_bytes(data)
    emb = read_embedding(tmp_path / "w2v.model")
    assert emb.keys == WORDS
    np.testing.assert_array_equal(emb.vectors, vectors)
    # the old constructor takes no argument: one given is refused
    (tmp_path / "arg.model").write_bytes(b"\x80\x02cnumpy.random\n__RandomState_ctor\nK\x01\x85R.")
    with pytest.raises(InputError, match=r"arg\.model: not a readable gensim save\(\) file"):
        read_embedding(tmp_path / "arg.model")


def test_gensim3_doc2vec_model_gives_its_document_vectors(tmp_path, g3):
    docs = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    docvecs = _obj(
        g3.Doc2VecKeyedVectors,
        vectors_docs=docs,
        offset2doctag=["alpha", "beta"],
        max_rawint=1,  # integer tags 0 and 1 come first
        doctags={"alpha": g3.Doctag(0, 5, 1), "beta": g3.Doctag(1, 4, 1)},
        count=4,
        vector_size=3,
        **{"__numpys": [], "__scipys": [], "__ignoreds": [], "__recursive_saveloads": []},
    )
    words = _kv3(g3, WORDS, np.ones((4, 3), np.float32))
    model = _obj(
        g3.Doc2Vec,
        docvecs=docvecs,
        wv=words,
        **{"__numpys": [], "__scipys": [], "__ignoreds": [], "__recursive_saveloads": ["docvecs", "wv"]},
    )
    (tmp_path / "d2v.model").write_bytes(g3.dumps(model))
    emb = read_embedding(tmp_path / "d2v.model")
    assert emb.keys == ["0", "1", "alpha", "beta"]
    np.testing.assert_array_equal(emb.vectors, docs)


def test_gensim3_names_do_not_open_the_door_to_other_globals(tmp_path, g3):
    kv = _kv3(g3, WORDS, np.ones((4, 2), np.float32))
    kv.__dict__["evil"] = types.SimpleNamespace()  # types.SimpleNamespace is not a gensim class
    (tmp_path / "evil.kv").write_bytes(g3.dumps(kv))
    with pytest.raises(InputError, match=r"evil\.kv: refusing to load types\.SimpleNamespace"):
        read_embedding(tmp_path / "evil.kv")
    # protocol 2 spells bytes as _codecs.encode(text, "latin1"): any other codec is refused
    (tmp_path / "codec.kv").write_bytes(b"\x80\x02c_codecs\nencode\nX\x03\x00\x00\x00abcX\x06\x00\x00\x00base64\x86R.")
    with pytest.raises(InputError, match=r"codec\.kv: refusing to load _codecs\.encode: asked for something other"):
        read_embedding(tmp_path / "codec.kv")
    tag = g3.dumps(_obj(g3.Doc2VecKeyedVectors, doctags={"a": g3.Doctag("x", 1, 1)}))
    (tmp_path / "tag.kv").write_bytes(tag)
    with pytest.raises(InputError, match=r"tag\.kv: refusing to load gensim\.models\.doc2vec\.Doctag"):
        read_embedding(tmp_path / "tag.kv")


def test_gensim3_fasttext_is_named_with_what_to_do(tmp_path, g3, monkeypatch):
    """A 3.x FastText file is refused as such (the safe loader does not rebuild its n-gram
    layout), with the conversion to do, not as a foreign global."""
    fasttext = types.ModuleType("old3_fasttext")
    monkeypatch.setitem(sys.modules, "old3_fasttext", fasttext)
    vocab_cls = type("FastTextVocab", (object,), {"__module__": "old3_fasttext"})
    fasttext.FastTextVocab = vocab_cls
    model = _obj(g3.Word2Vec, vocabulary=_obj(vocab_cls, min_count=1))
    data = g3.dumps(model).replace(b"cold3_fasttext\n", b"cgensim.models.fasttext\n")
    (tmp_path / "ft.model").write_bytes(data)
    with pytest.raises(
        InputError,
        match=r"ft\.model: a gensim 3\.x FastText model, which the safe loader does not read .*save_word2vec",
    ):
        read_embedding(tmp_path / "ft.model")
