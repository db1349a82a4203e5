"""Interaction tables read by columns (stabcli/inputs/tablecolumns.py): pandas' reading of
plain chunks gives exactly what the line-by-line reader gives, chunk by chunk."""

import sys
from collections import Counter

import numpy as np
import pytest

import stabcli.inputs.interactions as interactions
import stabcli.inputs.tablecolumns as tablecolumns
from stabcli.errors import InputError
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.tablecolumns import UNICODE_SPACE, EncodedSequences, sessions


def test_unicode_space_is_every_non_ascii_whitespace_of_str_split():
    spaces = {chr(c) for c in range(128, sys.maxunicode + 1) if chr(c).isspace()}
    assert spaces == set(UNICODE_SPACE)


def _table(rng: np.random.Generator, rows: int, odd: bool) -> str:
    """A ratings table with ties in time, duplicate (user, item) rows, unsorted rows and,
    when ``odd``, lines the plain reading refuses (spaces, quotes, blank lines, a trailing
    delimiter, an ISO date)."""
    lines = ["user,item,rating,ts"]
    for j in range(rows):
        user, item = f"u{rng.integers(40)}", f"i{rng.integers(60):02d}"
        rating, stamp = f"{rng.integers(1, 11) / 2:.1f}", str(int(rng.integers(1000, 1100)))
        line = f"{user},{item},{rating},{stamp}"
        if odd and j % 97 == 5:
            line = f' {user} ,"{item}", {rating},{stamp}'
        elif odd and j % 89 == 7:
            line += ","
        elif odd and j % 83 == 3:
            line = f"{user},{item},{rating},2000-01-01T00:00:{rng.integers(60):02d}"
        lines.append(line)
        if odd and j % 101 == 9:
            lines.append("")
    return "\n".join(lines) + "\n"


def _line_by_line(monkeypatch, path, options):
    with monkeypatch.context() as m:
        m.setattr(interactions, "plain_rows", lambda *args: None)
        return read_corpus(path, options=options)


@pytest.mark.parametrize("odd", [False, True])
@pytest.mark.parametrize("min_rating", [None, 3.0])
@pytest.mark.parametrize("time_col", [None, "none"])
def test_chunked_columns_equal_the_line_by_line_reading(tmp_path, monkeypatch, odd, min_rating, time_col):
    path = tmp_path / "t.csv"
    path.write_text(_table(np.random.default_rng(7), 3000, odd), encoding="utf-8")
    options = CorpusOptions(format="interactions", min_rating=min_rating, time_col=time_col)
    expected = _line_by_line(monkeypatch, path, options)
    monkeypatch.setattr(interactions, "PIECE_CHARS", 600)  # many chunks and pieces, some plain and some not
    monkeypatch.setattr(interactions, "chunks", lambda blocks: tablecolumns.chunks(blocks, 4000))
    corpus = read_corpus(path, options=options)
    assert corpus.sequences == expected.sequences
    assert corpus.skipped_lines == expected.skipped_lines
    assert corpus.summary() == expected.summary()
    assert corpus.encoded is not None and corpus.encoded.lists() == corpus.sequences
    by_token = Counter(tok for seq in corpus.sequences for tok in seq)
    assert list(corpus.token_counts().items()) == list(by_token.items())  # counts, in first-appearance order
    assert corpus.vocabulary(2) == expected.vocabulary(2)


def test_plain_table_is_read_by_pandas(tmp_path, monkeypatch):
    path = tmp_path / "ratings.csv"
    text = _table(np.random.default_rng(1), 500, odd=False).replace(
        "user,item,rating,ts", "userId,movieId,rating,timestamp"
    )
    path.write_bytes(text.replace("\n", "\r\n").encode())
    expected = _line_by_line(monkeypatch, path, CorpusOptions(min_rating=2.5))

    def refuse(*args):
        raise AssertionError("a plain chunk was read line by line")

    monkeypatch.setattr(interactions, "_line_rows", refuse)
    corpus = read_corpus(path, options=CorpusOptions(min_rating=2.5))
    assert corpus.sequences == expected.sequences and corpus.skipped_lines == expected.skipped_lines


def test_error_in_a_later_chunk_names_its_line(tmp_path, monkeypatch):
    path = tmp_path / "t.tsv"
    rows = [f"{j % 7}\t{j % 11}\t{1000 + j}" for j in range(2000)]
    rows[1500] = "3\t4"
    path.write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(interactions, "chunks", lambda blocks: tablecolumns.chunks(blocks, 3000))
    with pytest.raises(
        InputError, match=r"t\.tsv:1501: expected 3 tab-separated fields \(as in the first lines\), found 2"
    ):
        read_corpus(path, options=CorpusOptions(format="interactions"))


def test_sessions_order_items_by_time_and_users_by_first_interaction():
    # rows (user, item, time): user 2 starts first (t=0.5); users 0 and 1 both start at t=1,
    # user 0 on an earlier row; user 0's items a and c tie at t=1 and keep their row order
    users = np.array([0, 1, 0, 1, 2, 0])
    items = np.array([0, 1, 2, 3, 4, 5])
    stamps = np.array([1.0, 5.0, 1.0, 1.0, 0.5, 2.0])
    got = sessions(users, items, stamps, 3, list("abcdef"))
    assert got.lists() == [["e"], ["a", "c", "f"], ["d", "b"]]
    plain = sessions(users, items, None, 3, list("abcdef"))
    assert plain.lists() == [["a", "c", "f"], ["b", "d"], ["e"]]


def test_encoded_sequences_lists():
    encoded = EncodedSequences(["x", "y"], np.array([1, 0, 0]), np.array([0, 2, 2, 3]))
    assert encoded.lists() == [["y", "x"], [], ["x"]]


def _sessions_directly(users, items, stamps, keys):
    rows = sorted(range(len(users)), key=lambda j: (stamps[j], j))
    firsts: dict[int, tuple[float, int]] = {}
    for j in rows:
        firsts.setdefault(users[j], (stamps[j], j))
    order = sorted(firsts, key=firsts.__getitem__)
    return [[keys[items[j]] for j in rows if users[j] == u] for u in order]


@pytest.mark.parametrize(
    "how",
    [
        "integral",  # one integer key: user · span + (time − earliest)
        "fractional",  # the time's rank among the distinct times
        "overflow",  # users × span beyond int64: lexsort
    ],
)
def test_sessions_equal_a_direct_computation(how):
    rng = np.random.default_rng(3)
    n_users = 1500 if how == "overflow" else 40
    users = rng.permutation(np.concatenate([np.arange(n_users), rng.integers(0, n_users, 3000)]))
    _, users = np.unique(users, return_inverse=True)
    first = np.unique(users, return_index=True)[1]
    users = np.argsort(np.argsort(first))[users].astype(np.int32)  # codes in order of first appearance
    items = rng.integers(0, 50, len(users)).astype(np.int32)
    stamps = rng.integers(0, 30, len(users)).astype(np.float64)  # ties
    if how == "fractional":
        stamps += rng.choice([0.0, 0.25], len(users))
    elif how == "overflow":
        stamps[0] = 2.0**52 - 8  # integral, but 1,500 users × 2**52 does not fit
    keys = [f"i{j}" for j in range(50)]
    expected = _sessions_directly(users.tolist(), items.tolist(), stamps.tolist(), keys)
    assert sessions(users, items, stamps.copy(), n_users, keys).lists() == expected


def test_column_grows_and_keeps_every_row():
    column = tablecolumns.Column(np.int32)
    parts = [np.arange(j, j + 700_000, dtype=np.int32) for j in range(0, 2_100_000, 700_000)]
    for part in parts:
        column.append(part)
    assert np.array_equal(column.take(), np.concatenate(parts))
