"""Generate stabcli's synthetic, MovieLens-shaped sample data set (numpy only, seeded).

    python sample_data/generate.py [--seed 0] [--out sample_data]

Writes sessions.txt (corpus ``lines``: one user session of item ids per line),
item_genres.tsv (``item<TAB>genre`` with a header: downstream labels),
item_popularity.tsv (``item<TAB>log_count``: a regression target) and
item_descriptions.tsv (corpus ``tagged``: ``item<TAB>description words``).
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from pathlib import Path

import numpy as np

GENRES = [
    "Action",
    "Adventure",
    "Animation",
    "Children",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Horror",
    "Romance",
    "SciFi",
]
N_USERS = 1000
N_ITEMS = 1200
STICKINESS = 0.8  # chance the next item in a session keeps the previous item's genre
ZIPF_EXPONENT = 1.1  # item popularity within a genre ~ rank^-exponent
WORDS_PER_GENRE = 30
SHARED_WORDS = 60


def generate(seed: int = 0) -> dict[str, str]:
    """Return the text of each sample file, fully determined by ``seed``."""
    rng = np.random.default_rng(seed)
    item_genre = rng.integers(0, len(GENRES), size=N_ITEMS)
    items = [f"i{j:04d}" for j in range(N_ITEMS)]
    # Zipf popularity inside each genre: a random rank per item.
    popularity = np.empty(N_ITEMS)
    by_genre = []
    for g in range(len(GENRES)):
        members = np.flatnonzero(item_genre == g)
        ranks = rng.permutation(len(members)) + 1
        popularity[members] = ranks**-ZIPF_EXPONENT
        by_genre.append((members, popularity[members] / popularity[members].sum()))

    sessions = []
    for _ in range(N_USERS):
        preference = rng.dirichlet(np.full(len(GENRES), 0.2))  # each user likes a few genres
        for _ in range(rng.integers(1, 6)):
            length = int(rng.integers(5, 31))
            genre = rng.choice(len(GENRES), p=preference)
            session = []
            for _ in range(length):
                if rng.random() > STICKINESS:
                    genre = rng.choice(len(GENRES), p=preference)
                members, p = by_genre[genre]
                session.append(items[rng.choice(members, p=p)])
            sessions.append(" ".join(session))

    genre_words = [[f"{GENRES[g].lower()}{w:02d}" for w in range(WORDS_PER_GENRE)] for g in range(len(GENRES))]
    shared = [f"word{w:02d}" for w in range(SHARED_WORDS)]
    descriptions = []
    for j in range(N_ITEMS):
        n_words = int(rng.integers(8, 16))
        own = rng.choice(genre_words[item_genre[j]], size=n_words // 2 + 1)
        common = rng.choice(shared, size=n_words - len(own))
        words = rng.permutation(np.concatenate([own, common]))
        descriptions.append(f"{items[j]}\t{' '.join(words)}")

    # a regression target the embedding may or may not encode: how often the item was seen
    counts = Counter(token for session in sessions for token in session.split())
    popularity_rows = "".join(f"{item}\t{math.log(counts[item]):.4f}\n" for item in items if counts[item])

    return {
        "sessions.txt": "\n".join(sessions) + "\n",
        "item_popularity.tsv": "item\tlog_count\n" + popularity_rows,
        "item_genres.tsv": "item\tgenre\n" + "".join(f"{items[j]}\t{GENRES[item_genre[j]]}\n" for j in range(N_ITEMS)),
        "item_descriptions.tsv": "\n".join(descriptions) + "\n",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(args.seed).items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name} ({len(text.encode()):,} bytes)")


if __name__ == "__main__":
    main()
