"""Embedding formats as other tools write them: gensim's word2vec text and binary, GloVe
text, Facebook fastText .bin (every layout gensim reads), each also gzip-, bzip2- and
xz-compressed; checked against gensim's own readers on the same files."""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct

import numpy as np
import pytest
from gensim.models import FastText, KeyedVectors, Word2Vec
from gensim.models.fasttext import load_facebook_vectors, save_facebook_model

from stabcli.errors import InputError
from stabcli.inputs.embeddings import READ_FORMATS, match_inputs, read_embedding
from stabcli.inputs.embeddings.fasttext import MAGIC

SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["the", "dog", "sat", "on", "the", "log"],
    ["a", "cat", "and", "a", "dog", "ran"],
    ["caf\u00e9", "na\u00efve", "the", "cat"],
] * 5
COMPRESSORS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.fixture(scope="module")
def w2v() -> KeyedVectors:
    return Word2Vec(SENTENCES, vector_size=8, min_count=1, epochs=2, seed=1, workers=1).wv


@pytest.fixture(scope="module")
def ft_model() -> FastText:
    return FastText(SENTENCES, vector_size=6, min_count=1, epochs=2, seed=1, workers=1, bucket=50, min_n=2, max_n=4)


def _same(emb, kv: KeyedVectors, atol: float = 1e-6) -> None:
    assert emb.keys == list(kv.index_to_key)
    np.testing.assert_allclose(np.asarray(emb.vectors), kv.vectors, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("compression", ["gz", "bz2", "xz"])
def test_compressed_word2vec_files_read_as_gensim_reads_them(tmp_path, w2v, binary, compression):
    plain = tmp_path / ("e.bin" if binary else "e.vec")
    w2v.save_word2vec_format(str(plain), binary=binary)
    packed = plain.with_name(plain.name + "." + compression)
    packed.write_bytes(COMPRESSORS[compression](plain.read_bytes()))
    emb = read_embedding(packed)
    _same(emb, KeyedVectors.load_word2vec_format(str(packed), binary=binary))
    _same(emb, w2v)
    kind = {"gz": "gzip", "bz2": "bzip2", "xz": "xz"}[compression]
    assert emb.read_as == f"{kind}-compressed word2vec {'binary' if binary else 'text'}"


def test_gensim_gzip_writer_and_a_compressed_file_without_suffix(tmp_path, w2v):
    w2v.save_word2vec_format(str(tmp_path / "g.txt.gz"))  # gensim compresses by the name
    _same(read_embedding(tmp_path / "g.txt.gz"), w2v)
    (tmp_path / "h.txt").write_bytes((tmp_path / "g.txt.gz").read_bytes())  # the magic bytes decide
    _same(read_embedding(tmp_path / "h.txt"), w2v)


def test_compressed_npy_and_parquet(tmp_path, w2v):
    pytest.importorskip("pyarrow")
    from stabcli.inputs.embeddings import write_embedding

    write_embedding(tmp_path / "e.npy", list(w2v.index_to_key), w2v.vectors)
    (tmp_path / "e.npy.gz").write_bytes(gzip.compress((tmp_path / "e.npy").read_bytes()))
    (tmp_path / "e.npy").unlink()
    _same(read_embedding(tmp_path / "e.npy.gz"), w2v)  # keys from e.keys.txt
    write_embedding(tmp_path / "p.parquet", list(w2v.index_to_key), w2v.vectors)
    (tmp_path / "p.parquet.xz").write_bytes(lzma.compress((tmp_path / "p.parquet").read_bytes()))
    _same(read_embedding(tmp_path / "p.parquet.xz"), w2v)


@pytest.mark.parametrize("cut", [0.5, 0.95])
def test_truncated_compressed_file_is_one_error_naming_it(tmp_path, w2v, cut):
    w2v.save_word2vec_format(str(tmp_path / "e.bin"), binary=True)
    data = gzip.compress((tmp_path / "e.bin").read_bytes())
    (tmp_path / "e.bin.gz").write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(
        InputError, match=r"e\.bin\.gz: (gzip data is truncated or corrupt|vector \d+ of \d+: file ends)"
    ):
        read_embedding(tmp_path / "e.bin.gz")


def test_zstd_and_zip_are_refused_in_one_line(tmp_path):
    (tmp_path / "e.vec.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))
    with pytest.raises(InputError, match=r"e\.vec\.zst: is zstd-compressed, which stabcli does not read .*unzstd"):
        read_embedding(tmp_path / "e.vec.zst")
    (tmp_path / "e.vec.zip").write_bytes(b"PK\x03\x04" + bytes(20))
    with pytest.raises(InputError, match=r"e\.vec\.zip: is a zip archive"):
        read_embedding(tmp_path / "e.vec.zip", fmt="word2vec")


@pytest.mark.parametrize("name", ["glove.6B.8d.txt", "glove.vec.gz"])
def test_glove_text_is_recognised_and_said(tmp_path, w2v, name):
    path = tmp_path / name
    w2v.save_word2vec_format(str(path), write_header=False)
    emb = read_embedding(path)
    _same(emb, KeyedVectors.load_word2vec_format(str(path), no_header=True))
    assert "GloVe text (no header line)" in emb.read_as
    notes: list[str] = []
    match_inputs([emb, emb], on_note=notes.append)
    assert notes == [f"{path}, {path}: read as {emb.read_as}"]
    assert "glove" in READ_FORMATS
    _same(read_embedding(path, fmt="glove"), w2v)


def test_glove_with_a_malformed_line_names_it(tmp_path):
    (tmp_path / "g.txt").write_text("a 1 2 3\nb 1 2\n")
    with pytest.raises(InputError, match=r"g\.txt:2: expected 4 fields \(key \+ 3 values\), found 3"):
        read_embedding(tmp_path / "g.txt")


def test_glove_keys_with_spaces_as_in_glove_840b(tmp_path, w2v):
    """GloVe 840B has keys such as ``. . .`` and ``at name@domain.com``; gensim refuses those
    lines, stabcli takes the last d fields as the vector (also on the first line, and in
    word2vec text with a header); a row with one value too many stays an error."""
    rows = [(". . .", [0.5, -1.0, 2.0]), ("at name@domain.com", [1.0, 2.0, 3.0]), ("the", [0.25, 0.0, -3.5])]
    text = "".join(f"{k} {' '.join(map(str, v))}\n" for k, v in rows)
    (tmp_path / "glove.840B.3d.txt").write_text(text)
    (tmp_path / "w.vec").write_text("3 3\n" + text)
    for name in ("glove.840B.3d.txt", "w.vec"):
        emb = read_embedding(tmp_path / name)
        assert emb.keys == [k for k, _ in rows]
        np.testing.assert_array_equal(emb.vectors, np.array([v for _, v in rows]))
    (tmp_path / "bad.vec").write_text("2 2\na 1 2\nb 0.5 1 2\n")
    with pytest.raises(InputError, match=r"bad\.vec:3: expected 3 fields \(key \+ 2 values\), found 4"):
        read_embedding(tmp_path / "bad.vec")


def test_glove_of_dimension_one_whose_first_line_looks_like_a_header(tmp_path):
    """``1990 2`` then ``1991 3``: read as gensim's ``no_header=True`` reads it (a header would
    announce 2 values per row, and the next line has one); ``N 1`` stays a header (gensim's
    default), and ``--input-format glove`` reads such a file as GloVe."""
    (tmp_path / "years.txt").write_text("1990 2\n1991 3\n1992 -1.5\n")
    emb = read_embedding(tmp_path / "years.txt")
    ref = KeyedVectors.load_word2vec_format(str(tmp_path / "years.txt"), no_header=True)
    _same(emb, ref)
    assert "GloVe" in emb.read_as
    (tmp_path / "one.txt").write_text("2 1\na 0.5\nb 1.5\n")
    _same(read_embedding(tmp_path / "one.txt"), KeyedVectors.load_word2vec_format(str(tmp_path / "one.txt")))
    assert read_embedding(tmp_path / "one.txt", fmt="glove").keys == ["2", "a", "b"]
    (tmp_path / "words.txt").write_text("the 0.5\ncat -1\n")  # dimension 1, first key a word
    assert read_embedding(tmp_path / "words.txt").keys == ["the", "cat"]


# ---- fastText .bin: every layout gensim's reader accepts


def _old_layout(new: bytes) -> bytes:
    """The same model in fastText's layout before format versions: no magic number and
    version (the file starts with dim, ws), no pruning-index size, no quantization flags."""
    args_end = 8 + struct.calcsize("<12id")
    (size,) = struct.unpack_from("<i", new, args_end)
    pos = args_end + 12 + 8  # sizes, ntokens
    prune_at = pos
    pos += 8
    for _ in range(size):
        pos = new.index(b"\x00", pos) + 1 + 9
    assert struct.unpack_from("<q", new, prune_at)[0] <= 0
    matrix = pos  # quant flag, then rows, cols, floats
    rows, cols = struct.unpack_from("<2q", new, matrix + 1)
    output = matrix + 1 + 16 + rows * cols * 4
    return (
        new[8:prune_at]
        + new[prune_at + 8 : matrix]
        + new[matrix + 1 : output]
        + new[output + 1 :]  # the output matrix without its quantization flag
    )


@pytest.fixture
def ft_files(tmp_path, ft_model):
    new = tmp_path / "new.bin"
    save_facebook_model(ft_model, str(new))
    data = new.read_bytes()
    assert struct.unpack_from("<2i", data) == (MAGIC, 12)
    v11 = tmp_path / "v11.bin"
    v11.write_bytes(data[:4] + struct.pack("<i", 11) + data[8:])
    old = tmp_path / "old.bin"
    old.write_bytes(_old_layout(data))
    return {"new": new, "v11": v11, "old": old}


@pytest.mark.parametrize("layout", ["new", "v11", "old"])
def test_every_fasttext_layout_gensim_reads(tmp_path, ft_files, ft_model, layout):
    path = ft_files[layout]
    theirs = load_facebook_vectors(str(path))  # gensim reads all three
    ours = read_embedding(path)
    _same(ours, theirs, atol=1e-6)
    _same(ours, ft_model.wv, atol=1e-5)
    assert ("before format versions" in ours.read_as) == (layout == "old")
    for compression, compress in COMPRESSORS.items():
        packed = tmp_path / f"{layout}.bin.{compression}"
        packed.write_bytes(compress(path.read_bytes()))
        emb = read_embedding(packed)
        _same(emb, theirs, atol=1e-6)
        assert emb.read_as.startswith({"gz": "gzip", "bz2": "bzip2", "xz": "xz"}[compression] + "-compressed fastText")


def test_fasttext_without_buckets_and_many_chunks(tmp_path, monkeypatch):
    from stabcli.inputs.embeddings import fasttext

    model = FastText(SENTENCES, vector_size=4, min_count=1, epochs=1, seed=2, workers=1, bucket=300, min_n=1, max_n=3)
    save_facebook_model(model, str(tmp_path / "m.bin"))
    monkeypatch.setattr(fasttext, "CHUNK_ROWS", 7)  # bucket rows summed across many chunks
    _same(read_embedding(tmp_path / "m.bin"), load_facebook_vectors(str(tmp_path / "m.bin")), atol=1e-6)
    plain = FastText(SENTENCES, vector_size=4, min_count=1, epochs=1, seed=2, workers=1, max_n=0)
    save_facebook_model(plain, str(tmp_path / "p.bin"))
    _same(read_embedding(tmp_path / "p.bin"), load_facebook_vectors(str(tmp_path / "p.bin")), atol=1e-6)


def test_fasttext_refusals(tmp_path, ft_files):
    data = ft_files["new"].read_bytes()
    args_end = 8 + struct.calcsize("<12id")
    supervised = bytearray(data)
    struct.pack_into("<i", supervised, args_end + 8, 2)  # nlabels
    (tmp_path / "sup.bin").write_bytes(bytes(supervised))
    with pytest.raises(InputError, match=r"sup\.bin: a supervised fastText model \(2 labels\)"):
        read_embedding(tmp_path / "sup.bin")
    (tmp_path / "cut.bin.gz").write_bytes(gzip.compress(data[: len(data) // 3]))
    with pytest.raises(InputError, match=r"cut\.bin\.gz: not a readable fastText \.bin file \(truncated"):
        read_embedding(tmp_path / "cut.bin.gz")
    lying = bytearray(data)
    struct.pack_into("<i", lying, args_end, 2**31 - 1)  # a dictionary of 2 billion words in a small file
    struct.pack_into("<i", lying, args_end + 4, 2**31 - 1)
    (tmp_path / "lie.bin").write_bytes(bytes(lying))
    with pytest.raises(InputError, match=r"lie\.bin: not a readable fastText \.bin file \(truncated"):
        read_embedding(tmp_path / "lie.bin")


def test_word2vec_binary_is_not_taken_for_old_fasttext(tmp_path, w2v):
    w2v.save_word2vec_format(str(tmp_path / "w.bin"), binary=True)
    emb = read_embedding(tmp_path / "w.bin")
    assert emb.read_as == ""
    _same(emb, w2v)
