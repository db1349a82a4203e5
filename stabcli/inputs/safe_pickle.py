"""Read gensim ``save()`` files without running code from them.

gensim's ``SaveLoad.load`` is ``pickle.load`` followed by ``_load_specials`` (attach the
arrays stored beside the file as ``NAME.ATTR.npy``). A pickle can call any importable
function while it loads (``os.system``, ``sys.exit``...), so stabcli replicates both steps
itself: an unpickler that admits only the globals a gensim 4 ``save()`` of KeyedVectors,
Word2Vec, Doc2Vec or FastText references (and the 3.x names of the same classes, loaded as
stand-ins of their gensim 4 successors) (listed by saving real objects and recording
every ``find_class`` call), and that builds gensim objects only through ``__new__``
(never calling a constructor with arguments from the file, never modifying a real
class); then the separately stored
arrays, read with ``numpy.load(allow_pickle=False)`` and only from attribute names that
are plain identifiers. The idea is ``torch.load(weights_only=True)``.

``trusted=True`` (the CLI's ``--trust-pickle``) uses the ordinary unpickler: the file can
then run any code. Even so, an exception of any kind raised while loading (``SystemExit``
included) becomes an ``InputError``, so a data file cannot end stabcli with exit 0.
"""

from __future__ import annotations

import _compat_pickle
import pickle
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import InputError, quote, quoted
from stabcli.inputs.compressed import compression_of, open_stream

# gensim objects: created only by NEWOBJ (cls.__new__(cls)) and filled by BUILD
MODEL_CLASSES: frozenset[tuple[str, str]] = frozenset(
    {
        ("gensim.models.keyedvectors", "KeyedVectors"),
        ("gensim.models.word2vec", "Word2Vec"),
        ("gensim.models.doc2vec", "Doc2Vec"),
        ("gensim.models.fasttext", "FastText"),
        ("gensim.models.fasttext", "FastTextKeyedVectors"),
    }
)

# gensim 3.x (and 1.x/2.x) names of the same classes, as their save() files reference them:
# each is loaded as a stand-in of the gensim 4 class that replaced it (gensim 4 keeps these
# names as aliases for the same purpose); the vectors are then read in the current layout
# (``embeddings.gensim_kv.current_layout``)
OLD_MODEL_CLASSES: dict[tuple[str, str], tuple[str, str]] = {
    ("gensim.models.keyedvectors", "Word2VecKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "Doc2VecKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "EuclideanKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "BaseKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "WordEmbeddingsKeyedVectors"): ("gensim.models.keyedvectors", "KeyedVectors"),
    # per-word records (count, index, sample_int, code, point) and the 3.x models' helpers
    ("gensim.models.keyedvectors", "Vocab"): ("gensim.models.keyedvectors", "CompatVocab"),
    ("gensim.models.keyedvectors", "CompatVocab"): ("gensim.models.keyedvectors", "CompatVocab"),
    ("gensim.models.word2vec", "Vocab"): ("gensim.models.keyedvectors", "CompatVocab"),
    ("gensim.models.word2vec", "Word2VecVocab"): ("gensim.models.word2vec", "Word2VecVocab"),
    ("gensim.models.word2vec", "Word2VecTrainables"): ("gensim.models.word2vec", "Word2VecTrainables"),
    ("gensim.models.doc2vec", "Doc2VecVocab"): ("gensim.models.doc2vec", "Doc2VecVocab"),
    ("gensim.models.doc2vec", "Doc2VecTrainables"): ("gensim.models.doc2vec", "Doc2VecTrainables"),
}
# gensim 3.x FastText: its word vectors need the 3.x n-gram layout, which the safe loader
# does not rebuild; named as such rather than as a foreign global
OLD_FASTTEXT = frozenset(
    {
        ("gensim.models.keyedvectors", "FastTextKeyedVectors"),
        ("gensim.models.fasttext", "FastTextVocab"),
        ("gensim.models.fasttext", "FastTextTrainables"),
    }
)
OLD_RECORDS = frozenset({("gensim.models.doc2vec", "Doctag")})  # 3.x: a namedtuple (offset, word_count, doc_count)

# everything else a gensim 4.x save() references; none of them can touch files or run code
HELPERS: frozenset[tuple[str, str]] = frozenset(
    {
        ("gensim.utils", "call_on_class_only"),  # stored as the instances' `load` attribute
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),  # files written under numpy 1.x
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random", "__RandomState_ctor"),  # files written under numpy < 1.17 (gensim 3.x's Word2Vec.random)
        ("collections", "defaultdict"),
        ("collections", "OrderedDict"),
        ("builtins", "int"),
        ("builtins", "float"),
        ("builtins", "hash"),  # Word2Vec.hashfxn
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "slice"),
        ("_codecs", "encode"),  # protocol 2 bytes (gensim 3.x files): latin-1 only, see _latin1_bytes
        ("builtins", "bytes"),  # protocol 2 empty bytes: bytes() only
    }
)

ALLOWED: frozenset[tuple[str, str]] = MODEL_CLASSES | HELPERS | frozenset(OLD_MODEL_CLASSES) | OLD_RECORDS

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_DEPTH = 4  # KeyedVectors inside a model: depth 1


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle references a global outside the allow-list."""

    def __init__(self, module: str, name: str, why: str = "not part of a gensim save() file"):
        super().__init__(f"{module}.{name}")
        self.qualname = quoted(f"{module}.{name}")
        self.why = why


class _SealedClass(type):
    """The type of the gensim stand-ins: a pickle's BUILD on the class itself (a class
    ``__del__``, ``__getattribute__`` or method taken from the file) is refused."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise RefusedGlobal(cls.__module__, cls.__qualname__, "has its class modified")

    def __delattr__(cls, name: str) -> None:
        raise RefusedGlobal(cls.__module__, cls.__qualname__, "has its class modified")


class _SealedFunction:
    """A function a pickle can call but not modify: no ``__dict__`` for BUILD to fill, no
    attribute (``__defaults__``, ``__code__``...) to set."""

    __slots__ = ("_function",)
    _function: Callable[..., Any]

    def __init__(self, function: Callable[..., Any]):
        object.__setattr__(self, "_function", function)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{name}: a function loaded from a pickle cannot be modified")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{name}: a function loaded from a pickle cannot be modified")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(*args, **kwargs)


def _bit_generator_ctor(bit_generator: Any = "MT19937") -> Any:
    """numpy's ``__bit_generator_ctor`` for numpy's own bit generators (by name or class)
    only; numpy's calls any class it is given."""
    from numpy.random import _pickle as numpy_pickle

    known: dict[str, Any] = dict(numpy_pickle.BitGenerators)  # name -> class
    if isinstance(bit_generator, str) and bit_generator in known:
        return known[bit_generator]()
    if any(bit_generator is cls for cls in known.values()):
        return bit_generator()
    raise RefusedGlobal("numpy.random._pickle", "__bit_generator_ctor", "asked for an unknown bit generator")


_BIT_GENERATOR_CTOR = _SealedFunction(_bit_generator_ctor)


def _random_ctor(make: Callable[[Any], Any]) -> Callable[..., Any]:
    """numpy's ``__randomstate_ctor`` / ``__generator_ctor``, which call their second
    argument: only ``_bit_generator_ctor`` is accepted there."""

    def ctor(bit_generator_name: Any = "MT19937", bit_generator_ctor: Any = _BIT_GENERATOR_CTOR) -> Any:
        from numpy.random.bit_generator import BitGenerator

        if bit_generator_ctor is not _BIT_GENERATOR_CTOR:
            raise RefusedGlobal("numpy.random._pickle", "__randomstate_ctor", "given a callable other than numpy's")
        if isinstance(bit_generator_name, BitGenerator):
            return make(bit_generator_name)
        return make(_bit_generator_ctor(bit_generator_name))

    return _SealedFunction(ctor)


def _legacy_random_state() -> Any:
    """numpy < 1.17's ``numpy.random.__RandomState_ctor``: a default ``RandomState``, whose
    state the pickle then sets (``__setstate__`` with the legacy tuple); takes no argument."""
    return np.random.RandomState()


def _latin1_bytes(text: Any = "", encoding: Any = "latin1", errors: Any = "strict") -> bytes:
    """``_codecs.encode`` as pickle protocol 2 uses it for ``bytes`` (array data in a gensim
    3.x file written under Python 3): a str to latin-1 bytes, and no other codec."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise RefusedGlobal("_codecs", "encode", "asked for something other than latin-1 bytes")
    return text.encode("latin-1")


def _empty_bytes(*args: Any) -> bytes:
    """``bytes()`` as pickle protocol 2 writes an empty bytes object; nothing else."""
    if args:
        raise RefusedGlobal("builtins", "bytes", "called with arguments")
    return b""


def _guarded() -> dict[tuple[str, str], Any]:
    return {
        ("_codecs", "encode"): _SealedFunction(_latin1_bytes),
        ("builtins", "bytes"): _SealedFunction(_empty_bytes),
        ("numpy.random._pickle", "__bit_generator_ctor"): _BIT_GENERATOR_CTOR,
        ("numpy.random._pickle", "__randomstate_ctor"): _random_ctor(np.random.RandomState),
        ("numpy.random._pickle", "__generator_ctor"): _random_ctor(np.random.Generator),
        ("numpy.random", "__RandomState_ctor"): _SealedFunction(_legacy_random_state),
    }


def _stand_in(cls: type, module: str, name: str) -> type:
    """A subclass of gensim's ``cls`` for one unpickling: objects are created only by
    ``__new__`` (a saved object), never by calling the class (a constructor could train, or
    read a ``corpus_file``), and a file that sets attributes on the class changes only this
    throwaway subclass."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RefusedGlobal(module, name, "called as a constructor (not a saved object)")

    return _SealedClass(name, (cls,), {"__init__": refuse, "__module__": module, "__qualname__": name})


class _OldRecord(metaclass=_SealedClass):
    """gensim 3.x's ``Doctag`` namedtuple, loaded as plain fields: NEWOBJ passes its three
    integers, which are kept (and must be integers); nothing of gensim's is constructed."""

    fields: tuple[int, ...]

    def __new__(cls, *fields: Any) -> _OldRecord:
        if len(fields) > 8 or not all(isinstance(f, int) and not isinstance(f, bool) for f in fields):
            raise RefusedGlobal("gensim.models.doc2vec", "Doctag", "given fields that are not integers")
        record = object.__new__(cls)
        record.__dict__["fields"] = fields
        return record


def _refuse_call(*args: Any, **kwargs: Any) -> None:
    raise AttributeError("This method should be called on a class object.")


# stands in for ``gensim.utils.call_on_class_only`` (gensim stores it as each instance's
# ``load``): a file can neither call nor modify gensim's own
_call_on_class_only = _SealedFunction(_refuse_call)


class _AllowListUnpickler(pickle.Unpickler):
    """``find_class`` admits only ``ALLOWED``, gensim classes as sealed stand-ins
    (``_stand_in``), numpy's random helpers and gensim's function as sealed guarded copies;
    builtins and numpy types cannot be modified. (The C unpickler: several times faster than a Python one.)"""

    def __init__(self, file: Any):
        super().__init__(file, encoding="latin1")  # gensim's own unpickle() uses latin1
        self.stand_ins: dict[tuple[str, str], Any] = {
            **_guarded(),
            ("gensim.utils", "call_on_class_only"): _call_on_class_only,
        }

    def find_class(self, module: str, name: str) -> Any:
        # Python 2 names (protocols 0-2), as pickle itself maps them, so the check sees real names
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in OLD_FASTTEXT:
            raise RefusedGlobal(module, name, "a gensim 3.x FastText model, which the safe loader does not read")
        if (module, name) not in ALLOWED:
            raise RefusedGlobal(module, name)
        if (module, name) not in self.stand_ins:
            if (module, name) in OLD_RECORDS:
                self.stand_ins[(module, name)] = _OldRecord
            elif (module, name) in OLD_MODEL_CLASSES:
                current = OLD_MODEL_CLASSES[(module, name)]
                self.stand_ins[(module, name)] = _stand_in(super().find_class(*current), module, name)
            else:
                found = super().find_class(module, name)
                self.stand_ins[(module, name)] = (
                    _stand_in(found, module, name) if (module, name) in MODEL_CLASSES else found
                )
        return self.stand_ins[(module, name)]

    def made(self, obj: Any) -> bool:
        """Whether ``obj`` is an instance of one of the gensim stand-ins (a model or vectors)."""
        models = [*MODEL_CLASSES, *(k for k, v in OLD_MODEL_CLASSES.items() if v in MODEL_CLASSES)]
        return any(type(obj) is self.stand_ins.get(key) for key in models)


def load_gensim(path: Path, trusted: bool = False) -> Any:
    """The object a gensim ``save()`` wrote to ``path``, with its separately saved arrays
    attached (memory-mapped, read-only). A gzip, bzip2 or xz file (gensim's ``save("m.kv.gz")``)
    is unpickled as a stream; its arrays are where gensim puts them: ``NAME.ATTR.npz`` beside a
    name ending in ``.gz`` or ``.bz2``, ``NAME.ATTR.npy`` otherwise.

    Raises
    ------
    InputError
        A global outside the allow-list (naming it), a file that is not a pickle, a
        missing or malformed companion array file, or any exception raised while loading.
    """
    unpickler = None
    try:
        with open_stream(path, compression_of(path)) as fh:
            if trusted:
                obj = pickle.load(fh, encoding="latin1")
            else:
                unpickler = _AllowListUnpickler(fh)
                obj = unpickler.load()
    except RefusedGlobal as exc:
        if "3.x FastText" in exc.why:
            raise InputError(
                f"{path}: {exc.why} ({exc.qualname}); save its word vectors with gensim "
                "(model.wv.save_word2vec_format('wv.vec')) and audit that, or pass --trust-pickle for a file you trust"
            ) from None
        raise InputError(
            f"{path}: refusing to load {exc.qualname}: {exc.why}; "
            "pass --trust-pickle only for a file you trust (it can run any code)"
        ) from None
    except InputError:  # unreadable, or corrupt compressed data (open_stream names the file)
        raise
    except MemoryError:
        raise InputError(f"{path}: not a gensim save() file (it asks for more memory than there is)") from None
    except BaseException as exc:  # a data file must not end stabcli, SystemExit included
        if isinstance(exc, KeyboardInterrupt) and not trusted:
            raise
        raise InputError(f"{path}: not a readable gensim save() file ({type(exc).__name__} while unpickling)") from None
    if unpickler is not None and not unpickler.made(obj):
        raise InputError(f"{path}: not a gensim save() file (it holds a {quoted(type(obj).__name__)})")
    attach_arrays(obj, path, str(path), 0)
    return obj


def attach_arrays(obj: Any, path: Path, prefix: str, depth: int) -> None:
    """gensim's ``_load_specials`` without its ``__scipys`` unpickling: set every attribute
    listed in ``__numpys`` from ``PREFIX.ATTR.npy`` (``.npz`` when gensim compressed them, as
    it does for a name ending in ``.gz`` or ``.bz2``) and recurse into ``__recursive_saveloads``."""
    state = getattr(obj, "__dict__", None)
    if not isinstance(state, dict):
        return
    if depth > _MAX_DEPTH:
        raise InputError(f"{path}: gensim objects nested more than {_MAX_DEPTH} deep")
    if state.get("__scipys"):
        raise InputError(f"{path}: holds scipy sparse matrices, which stabcli does not read")
    for attrib in _names(path, state.get("__recursive_saveloads", ())):
        child = state.get(attrib)
        if child is None:
            raise InputError(f"{path}: lists {quote(attrib)} as saved separately but does not hold it")
        attach_arrays(child, path, f"{prefix}.{attrib}", depth + 1)
    compressed = str(path).endswith((".gz", ".bz2"))  # gensim's own rule (SaveLoad._adapt_by_suffix)
    for attrib in _names(path, state.get("__numpys", ())):
        array_path = Path(f"{prefix}.{attrib}.{'npz' if compressed else 'npy'}")
        if not array_path.is_file():
            raise InputError(
                f"{array_path}: missing (gensim saved {quote(attrib)} of {path.name} there; "
                f"keep the .{array_path.suffix[1:]} files beside the model)"
            )
        state[attrib] = _saved_array(array_path, compressed)


def _saved_array(array_path: Path, compressed: bool) -> np.ndarray:
    """One array gensim saved separately: a ``.npy`` (memory-mapped), or the ``val`` entry of
    the ``.npz`` gensim writes beside a compressed file; never unpickled."""
    try:
        if not compressed:
            return np.load(array_path, mmap_mode="r", allow_pickle=False)
        with np.load(array_path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile) or "val" not in archive.files:
                raise ValueError("expected gensim's .npz with one array 'val'")
            return archive["val"]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"{array_path}: not a readable .np{'z' if compressed else 'y'} file ({quoted(str(exc))})"
        ) from None


def _names(path: Path, names: Any) -> list[str]:
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and _IDENTIFIER.match(n) for n in names):
        raise InputError(f"{path}: malformed list of separately saved attributes")
    return list(names)
