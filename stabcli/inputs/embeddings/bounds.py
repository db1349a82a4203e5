"""Work a file may ask for, bounded by the file's own size: a count, a range or a length read
from a file never decides by itself how long a reader loops or how much it allocates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stabcli.errors import InputError, quote

# character n-grams allowed per byte of the file(s) that describe them; a real fastText model
# stores at least 4 bytes (one float) per word and per bucket, and has about 4 n-grams per
# character of its words (minn 3 .. maxn 6); the floor admits tiny test models
NGRAMS_PER_BYTE = 64
NGRAMS_FLOOR = 1_000_000


def ngram_count(words: Sequence[str], minn: int, maxn: int) -> int:
    """How many character n-grams fastText (and gensim's ``ft_ngram_hashes``) computes for
    ``words``: for each word of L characters, bracketed as ``<word>`` (L + 2), one per start
    position for each length n in [max(minn, 1), min(maxn, L + 2)]."""
    low = max(minn, 1)
    total = 0
    for word in words:
        length = len(word) + 2
        high = min(maxn, length)
        if high >= low:
            lengths = high - low + 1
            total += lengths * (length + 1) - (low + high) * lengths // 2
    return total


def check_ngram_work(path: Path, words: Sequence[str], minn: object, maxn: object, size: int) -> None:
    """InputError unless ``minn`` and ``maxn`` are integers and the character n-grams they ask
    for over ``words`` stay within what a file of ``size`` bytes can describe (a 20 KB file
    with one long word and a range of 1..10⁶ would ask for tens of millions)."""
    if isinstance(minn, bool) or isinstance(maxn, bool) or not isinstance(minn, int) or not isinstance(maxn, int):
        raise InputError(
            f"{path}: not a readable FastText model (n-gram range {quote(minn)}..{quote(maxn)} is not two integers)"
        )
    count = ngram_count(words, minn, maxn)
    allowed = max(NGRAMS_FLOOR, NGRAMS_PER_BYTE * size)
    if count > allowed:
        raise InputError(
            f"{path}: its n-gram range {minn}..{maxn} asks for {count:,} character n-grams over "
            f"{len(words):,} words, more than a file of {size:,} bytes can describe (at most {allowed:,}); "
            "refusing to compute them (a damaged or crafted file)"
        )


def total_size(path: Path) -> int:
    """Bytes of a gensim ``save()`` file and the arrays gensim stored beside it (``NAME.*.npy``)."""
    size = path.stat().st_size
    for companion in path.parent.glob(f"{path.name}.*.npy"):
        try:
            size += companion.stat().st_size
        except OSError:
            continue
    return size
