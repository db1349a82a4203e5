from pathlib import Path

import pytest

from stabcli.corpus import CorpusOptions, detect_format, file_sha256, read_corpus
from stabcli.errors import InputError, OptionError, UsageError


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def test_lines_splits_on_whitespace_and_skips_blank_lines(tmp_path):
    path = write(tmp_path, "c.txt", "a b  c\n\n  \nb\ta\r\nc\n")
    corpus = read_corpus(path)
    assert corpus.format == "lines"
    assert corpus.sequences == [["a", "b", "c"], ["b", "a"], ["c"]]
    assert corpus.n_tokens == 6


def test_vocabulary_is_frequency_then_key_order_and_honours_min_count(tmp_path):
    path = write(tmp_path, "c.txt", "b a c\nb a\nd b\n")
    corpus = read_corpus(path)
    assert corpus.vocabulary() == ["b", "a", "c", "d"]  # b:3, a:2, then c,d tie at 1 sorted by key
    assert corpus.vocabulary(min_count=2) == ["b", "a"]


def test_tagged_reads_tags_and_words(tmp_path):
    path = write(tmp_path, "d.tsv", "x1\thello world\nx2\tbye\nx1\tagain\n")
    corpus = read_corpus(path, model="doc2vec")
    assert corpus.format == "tagged"
    assert corpus.tags == ["x1", "x2", "x1"]
    assert corpus.sequences == [["hello", "world"], ["bye"], ["again"]]
    assert corpus.vocabulary() == ["x1", "x2"]


def test_tagged_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path, "d.tsv", "x1\thello\nno tab here\n")
    with pytest.raises(InputError, match=r"d\.tsv:2: expected 'tag<TAB>text', found no tab"):
        read_corpus(path, options=CorpusOptions(format="tagged"))


def test_tagged_empty_tag(tmp_path):
    path = write(tmp_path, "d.tsv", "\thello\n")
    with pytest.raises(InputError, match=r"d\.tsv:1: empty tag"):
        read_corpus(path, options=CorpusOptions(format="tagged"))


def test_movielens_u_data_orders_each_user_by_timestamp(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\t300\n2\t11\t3\t100\n1\t12\t4\t100\n1\t13\t2\t200\n")
    corpus = read_corpus(path)
    assert corpus.format == "movielens"
    # user 2 and user 1 both start at t=100; user 2's row comes first in the file.
    assert corpus.sequences == [["11"], ["12", "13", "10"]]


def test_movielens_ratings_dat_and_min_rating(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::10::5::3\n1::11::2::1\n1::12::4::2\n")
    corpus = read_corpus(path, options=CorpusOptions(min_rating=4))
    assert corpus.sequences == [["12", "10"]]
    assert corpus.skipped_lines == 1


def test_movielens_ratings_csv_header(tmp_path):
    path = write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n7,1,4.0,20\n7,2,3.5,10\n")
    assert read_corpus(path).sequences == [["2", "1"]]


def test_movielens_ratings_csv_wrong_header(tmp_path):
    path = write(tmp_path, "ratings.csv", "user,movie,rating,time\n7,1,4.0,20\n")
    with pytest.raises(InputError, match=r"ratings\.csv:1: expected header userId,movieId,rating,timestamp"):
        read_corpus(path)


def test_movielens_bad_timestamp_names_the_line(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\t300\n1\t11\t5\tsoon\n")
    with pytest.raises(InputError, match=r"u\.data:2: timestamp 'soon' \(column 3\) is not a number"):
        read_corpus(path)


def test_movielens_wrong_field_count(tmp_path):
    path = write(tmp_path, "u.data", "1\t10\t5\n1\t11\t5\n")
    with pytest.raises(InputError, match=r"u\.data:1: expected 4 tab-separated fields \(as in the first lines\), found 3"):
        read_corpus(path)


def test_interactions_with_custom_columns(tmp_path):
    path = write(tmp_path, "events.csv", "who,sku,when,stars\na,x,3,1\na,y,1,5\nb,x,2,5\na,z,0,4\nb,w,1,3\n")
    options = CorpusOptions(user_col="who", item_col="sku", time_col="when", rating_col="stars", min_rating=2)
    corpus = read_corpus(path, options=options)
    assert corpus.format == "interactions"
    assert corpus.sequences == [["z", "y"], ["w", "x"]]
    assert corpus.skipped_lines == 1
    assert corpus.columns == {"user": "'who'", "item": "'sku'", "time": "'when'", "rating": "'stars'"}


def test_interactions_without_timestamp_keep_file_order(tmp_path):
    path = write(tmp_path, "events.tsv", "user\titem\nu\tb\nu\ta\n")
    assert read_corpus(path).sequences == [["b", "a"]]


def test_interactions_unknown_header_names_ask_for_the_option(tmp_path):
    path = write(tmp_path, "events.csv", "who,what\n1,10\n1,11\n")
    with pytest.raises(InputError, match=r"events\.csv: no column of the header \(who, what\) is a known user column "
                                         r"name; pass --user-col NAME or a 0-based position"):
        read_corpus(path, options=CorpusOptions(format="interactions"))


def test_interactions_named_column_missing_lists_columns(tmp_path):
    path = write(tmp_path, "events.csv", "uid,item\na,x\na,y\n")
    with pytest.raises(InputError, match=r"events\.csv: no column 'customer' for --user-col; columns are uid, item"):
        read_corpus(path, options=CorpusOptions(user_col="customer"))


def test_auto_detection(tmp_path):
    assert detect_format(write(tmp_path, "u.data", "1\t2\t3\t4\n"), "word2vec", CorpusOptions()) == "movielens"
    assert detect_format(write(tmp_path, "e.csv", "user,item\n"), "word2vec", CorpusOptions()) == "interactions"
    assert detect_format(write(tmp_path, "d.tsv", "a\tb c\n"), "doc2vec", CorpusOptions()) == "tagged"
    assert detect_format(write(tmp_path, "s.txt", "a b\n"), "word2vec", CorpusOptions()) == "lines"


def test_invalid_utf8_names_line_and_byte(tmp_path):
    path = write(tmp_path, "c.txt", b"ok line\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"c\.txt:2: not valid utf-8 \(byte 0xff at column 5\)"):
        read_corpus(path)


def test_other_encoding_is_accepted_when_named(tmp_path):
    path = write(tmp_path, "c.txt", "caf\xe9 th\xe9\n".encode("latin-1"))
    assert read_corpus(path, options=CorpusOptions(encoding="latin-1")).sequences == [["café", "thé"]]


def test_binary_garbage_is_rejected(tmp_path):
    path = write(tmp_path, "c.txt", b"\x00\x01\x02garbage")
    with pytest.raises(InputError, match=r"c\.txt:1: contains NUL bytes"):
        read_corpus(path)


@pytest.mark.parametrize("name, data", [("c.txt", "\n \n"), ("u.data", ""), ("e.csv", "user,item\n")])
def test_empty_corpus_is_an_error(tmp_path, name, data):
    path = write(tmp_path, name, data)
    with pytest.raises(InputError, match="empty corpus"):
        read_corpus(path)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(InputError, match=r"nope\.txt: no such file"):
        read_corpus(tmp_path / "nope.txt")
    with pytest.raises(OptionError, match="corpus_format: unknown corpus format 'xml'"):
        read_corpus(write(tmp_path, "c.txt", "a"), options=CorpusOptions(format="xml"))


def test_file_sha256_matches_hashlib(tmp_path):
    import hashlib

    data = b"x" * (3 << 20)
    path = write(tmp_path, "big.txt", data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()
