"""Tiny corpora and embeddings built in tmp_path; every test runs in seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_SCRIPT = REPO / "examples" / "train_numpy.py"


def make_sessions(n_sequences: int = 120, n_items: int = 40, seed: int = 0) -> str:
    """Genre-sticky sequences over a small vocabulary: structure word2vec can learn fast."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_sequences):
        group = rng.integers(0, 4)
        items = rng.integers(0, n_items // 4, size=int(rng.integers(4, 12))) + group * (n_items // 4)
        lines.append(" ".join(f"t{i}" for i in items))
    return "\n".join(lines) + "\n"


@pytest.fixture
def sessions_file(tmp_path: Path) -> Path:
    path = tmp_path / "sessions.txt"
    path.write_text(make_sessions(), encoding="utf-8")
    return path


@pytest.fixture
def tagged_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    lines = []
    for doc in range(30):
        words = rng.integers(0, 20, size=8) + (doc % 3) * 20
        lines.append(f"doc{doc}\t" + " ".join(f"w{w}" for w in words))
    path = tmp_path / "docs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def python() -> str:
    return sys.executable
