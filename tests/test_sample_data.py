import importlib.util
import math
from collections import Counter

from conftest import REPO


def test_committed_sample_data_is_what_the_seeded_generator_writes():
    spec = importlib.util.spec_from_file_location("generate", REPO / "sample_data" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = module.generate(seed=0)
    for name, text in files.items():
        assert (REPO / "sample_data" / name).read_text(encoding="utf-8") == text, name
    counts = Counter(files["sessions.txt"].split())
    rows = [line.split("\t") for line in files["item_popularity.tsv"].splitlines()[1:]]
    assert len(rows) == len(counts) and all(float(v) == round(math.log(counts[k]), 4) for k, v in rows)
