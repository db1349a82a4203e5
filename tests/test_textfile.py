"""Text files as they come (stabcli/inputs/textfile.py): lines and their numbers across the
1 MiB blocks the file is read in."""

import pytest

from stabcli.errors import InputError
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.textfile import BLOCK, text_blocks, text_lines


@pytest.mark.parametrize("first", [BLOCK - 1, BLOCK - 2, BLOCK, BLOCK + 5])
def test_lines_are_numbered_across_block_boundaries(tmp_path, first):
    # the first line ends exactly at, just before or after the first block's end
    path = tmp_path / "t.txt"
    path.write_bytes(b"a" * first + b"\r\nb\n\nc")
    assert [(n, len(line)) for n, line in text_lines(path)] == [(1, first), (2, 1), (3, 0), (4, 1)]
    blocks = list(text_blocks(path))
    assert "".join(text for _, text in blocks) == "a" * first + "\r\nb\n\nc"
    assert all(n == 1 + sum(t.count("\n") for _, t in blocks[:i]) for i, (n, _) in enumerate(blocks))


def test_an_error_after_a_block_ending_in_a_newline_names_its_line(tmp_path):
    # the first 1 MiB block ends exactly with the first row's newline (this once counted an
    # extra empty line, so every later message named the line after the right one)
    path = tmp_path / "t.tsv"
    rows = ["u0\t" + "i" * (BLOCK - 6) + "\t0"] + [f"u{j % 50}\ti{j % 70}\t{j}" for j in range(1, 3000)]
    rows[2500] = "u1\ti2"
    path.write_text("\n".join(rows) + "\n")
    assert path.read_bytes()[BLOCK - 1 : BLOCK] == b"\n"
    with pytest.raises(InputError, match=r"t\.tsv:2501: expected 3 tab-separated fields"):
        read_corpus(path, options=CorpusOptions(format="interactions"))
