"""The next-item recommendation task: metrics against a brute-force loop, list churn, stale lists."""

import math

import numpy as np
import pytest
from scipy.stats import ortho_group

from stabcli.errors import InputError, OptionError
from stabcli.measure.align import generalized_procrustes
from stabcli.measure.downstream.nextitem import (
    NextItemOptions,
    best_k,
    chance_overlap,
    hit_metrics,
    holdout,
    list_overlap,
    next_item_report,
    profiles,
    ranked_lists,
    top_k,
)
from stabcli.measure.metrics import gram_blocks, unit_rows


def brute_force(items, history, target, kind, k):
    """Recall@k and NDCG@k straight from the definition: cosine to every item, history excluded."""
    unit = items / np.linalg.norm(items, axis=1, keepdims=True)
    recall = ndcg = 0.0
    for past, held in zip(history, target, strict=True):
        profile = unit[list(past)].mean(axis=0) if kind == "mean" else unit[past[-1]]
        profile = profile / np.linalg.norm(profile)
        scores = {j: float(unit[j] @ profile) for j in range(len(items)) if j not in past}
        ranked = sorted(scores, key=lambda j: (-scores[j], j))[:k]
        if held in ranked:
            recall += 1
            ndcg += 1 / math.log2(ranked.index(held) + 2)
    return recall / len(target), ndcg / len(target)


def sessions(n_users, n_items, rng, length=(2, 7)):
    return [[f"i{j}" for j in rng.choice(n_items, size=rng.integers(*length), replace=False)] for _ in range(n_users)]


@pytest.mark.parametrize("kind", ["mean", "last"])
def test_recall_and_ndcg_equal_a_brute_force_computation(kind):
    rng = np.random.default_rng(0)
    items = rng.standard_normal((40, 6))
    keys = [f"i{j}" for j in range(40)]
    split = holdout(sessions(60, 40, rng), keys, 0, 0)
    history = [list(split.history(u)) for u in range(split.users)]
    unit = unit_rows(items.astype(np.float32))
    lists = top_k(unit, profiles(unit, split, kind), split, 7, block_bytes=4 * 40 * 7)  # blocks of 7 users
    got = hit_metrics(lists, split.target, [1, 3, 7])
    for k in (1, 3, 7):
        assert got[k] == pytest.approx(brute_force(items, history, split.target, kind, k), abs=1e-9), k
    assert not any(set(lists[u]) & set(history[u]) for u in range(split.users))  # history excluded
    assert got[7][0] > 0  # the small case has hits to compare


def test_best_k_equals_sorting_whole_rows_with_ties_and_excluded_items():
    rng = np.random.default_rng(4)
    # 5,000 columns: a strided sample of 317 (step 15) bounds the candidates; few distinct values: many ties
    scores = rng.integers(0, 60, size=(50, 5000)).astype(np.float32)
    scores[:3, :] = -np.inf  # rows whose items are all excluded but 4: the lists end in excluded items
    scores[:3, [7, 300, 301, 4999]] = [2.0, 1.0, 2.0, 0.5]
    scores[3] = 0.0  # one tie across the whole row
    expected = np.array([np.lexsort((np.arange(5000), -row))[:6] for row in scores])
    assert np.array_equal(best_k(scores.copy(), 6), expected)
    assert expected[0, :4].tolist() == [7, 301, 300, 4999] and expected[3].tolist() == list(range(6))


def test_profile_sets_scored_together_equal_each_set_alone():
    rng = np.random.default_rng(5)
    # items ±e_j: every score is one profile entry, exact whatever the GEMM's blocks (and tied 90 ways)
    items = np.zeros((900, 5), dtype=np.float32)
    items[np.arange(900), rng.integers(0, 5, 900)] = rng.choice([-1.0, 1.0], 900)
    split = holdout(sessions(70, 900, rng, length=(2, 30)), [f"i{j}" for j in range(900)], 0, 0)
    sets = [rng.standard_normal((split.users, 5)).astype(np.float32) for _ in range(3)]
    together = ranked_lists(items, sets, split, 8, block_bytes=4 * 900 * 3 * 11)  # blocks of 11 users
    for users, lists in zip(sets, together, strict=True):
        assert np.array_equal(lists, top_k(items, users, split, 8))
        assert not any(set(lists[u]) & set(split.history(u)) for u in range(split.users))


def test_holdout_keeps_order_skips_and_samples():
    keys = ["a", "b", "c", "d"]
    split = holdout([["a", "b", "c"], ["a"], ["x", "a"], ["a", "b", "a"], ["b", "zz", "d"]], keys, 0, 0)
    assert split.skipped == {"one_interaction": 1, "no_vector": 1, "repeat": 1}
    assert split.target.tolist() == [2, 3] and split.last.tolist() == [1, 1]
    assert [list(split.history(u)) for u in range(2)] == [[0, 1], [1]]
    sampled = holdout([["a", "b"], ["b", "c"], ["c", "d"], ["d", "a"]], keys, 2, 0)
    assert sampled.users == 2 and sampled.evaluable == 4


def holdout_by_user(sequences, keys, users, seed):
    """Leave-last-out straight from the definition, one user at a time."""
    row = {k: i for i, k in enumerate(keys)}
    skipped = {"one_interaction": 0, "no_vector": 0, "repeat": 0}
    kept = []
    for seq in sequences:
        if len(seq) < 2:
            skipped["one_interaction"] += 1
            continue
        target = row.get(seq[-1])
        history = list(dict.fromkeys(row[t] for t in seq[:-1] if t in row))
        if target is None or not history:
            skipped["no_vector"] += 1
        elif target in history:
            skipped["repeat"] += 1
        else:
            before = row.get(seq[-2])
            kept.append((target, history if before is None else [r for r in history if r != before] + [before]))
    evaluable = len(kept)
    if users and evaluable > users:
        kept = [kept[i] for i in np.sort(np.random.default_rng(seed).choice(evaluable, size=users, replace=False))]
    return kept, evaluable, skipped


@pytest.mark.parametrize("users", [0, 7])
def test_holdout_equals_the_split_user_by_user(users):
    rng = np.random.default_rng(9)
    for trial in range(20):
        n = int(rng.integers(3, 30))
        # repeats, items without a vector, short and empty sequences
        sequences = [[f"i{j}" for j in rng.integers(0, n, size=rng.integers(0, 9))] for _ in range(rng.integers(1, 80))]
        keys = [f"i{j}" for j in rng.permutation(n)[: rng.integers(1, n + 1)]]
        split = holdout(sequences, keys, users, trial)
        kept, evaluable, skipped = holdout_by_user(sequences, keys, users, trial)
        assert (split.evaluable, split.skipped, split.total_users) == (evaluable, skipped, len(sequences))
        assert split.target.tolist() == [t for t, _ in kept]
        assert [split.history(u).tolist() for u in range(split.users)] == [h for _, h in kept]
        assert split.last.tolist() == [h[-1] for _, h in kept]


def test_list_overlap_is_one_for_identical_lists_and_chance_for_unrelated_ones():
    rng = np.random.default_rng(1)
    n, k, users = 200, 10, 4000
    a = np.array([rng.choice(n, size=k, replace=False) for _ in range(users)])
    assert list_overlap(a, a.copy(), k, 0.9) == pytest.approx((1.0, 1.0))
    b = np.array([rng.choice(n, size=k, replace=False) for _ in range(users)])
    jaccard, rbo = list_overlap(a, b, k, 0.9)
    expected_j, expected_rbo = chance_overlap(k, n, 0.9)
    assert jaccard == pytest.approx(expected_j, rel=0.08) and rbo == pytest.approx(expected_rbo, rel=0.1)
    # same items in reverse order: Jaccard 1; RBO from |A_d ∩ B_d| = max(0, 2d − k)
    j_rev, rbo_rev = list_overlap(a, a[:, ::-1], k, 0.9)
    d = np.arange(1, k + 1)
    expected = sum(0.1 * 0.9 ** (i - 1) * max(0, 2 * i - k) / i for i in d) / (1 - 0.9**k)
    assert j_rev == 1.0 and rbo_rev == pytest.approx(expected, abs=1e-12) and rbo_rev < 0.3


def write_interactions(path, users, n_items, rng, clusters=None):
    """A user-item-timestamp log in shuffled file order; with ``clusters`` (item → cluster)
    every user stays in one cluster, so the next item is predictable from the history."""
    rows = []
    for u in range(users):
        pool = np.arange(n_items)
        if clusters is not None:
            pool = np.flatnonzero(clusters == rng.integers(clusters.max() + 1))
        seq = rng.choice(pool, size=rng.integers(3, 8), replace=False)
        rows += [f"u{u},i{j},{1000 + 10 * t + (u % 3)}" for t, j in enumerate(seq)]
    order = rng.permutation(len(rows))  # time order, not file order, decides the held-out item
    path.write_text("user,item,timestamp\n" + "\n".join(rows[i] for i in order) + "\n")
    return path


def runs_report(arrays, path, **options):
    keys = [f"i{j}" for j in range(len(arrays[0]))]
    rotations, _ = generalized_procrustes(gram_blocks(arrays))
    names = [f"run-{r:03d}" for r in range(len(arrays))]
    return next_item_report(arrays, keys, rotations, NextItemOptions(path, **options), names)


def test_identical_runs_have_no_list_churn_and_rotated_runs_need_alignment_when_stale(tmp_path):
    rng = np.random.default_rng(2)
    n_items = 300
    clusters = np.arange(n_items) % 10
    base = (3 * rng.standard_normal((10, 8))[clusters] + rng.standard_normal((n_items, 8))).astype(np.float32)
    path = write_interactions(tmp_path / "log.csv", 400, n_items, rng, clusters)
    same = runs_report([base, base.copy(), base.copy()], path, k_list=[5, 10])
    h = same["variants"]["h"]["mean"]["10"]
    assert h["jaccard"] == 1.0 and h["rbo"] == pytest.approx(1.0) and h["recall_std"] == 0
    assert h["stale_recall_raw"] == pytest.approx(h["recall_mean"], abs=1e-12)
    assert h["stale_recall_aligned"] == pytest.approx(h["recall_mean"], abs=0.005)  # GPA's rotations are ≈ I
    assert same["evaluated_users"] == 400 and same["sampled"] is False
    rotated = [base, base @ ortho_group.rvs(8, random_state=1).astype(np.float32)]
    turned = runs_report(rotated, path, k_list=[10], profiles=["last"])["variants"]["h"]["last"]["10"]
    # cosine rankings ignore a rotation: fresh lists agree; stale profiles need the aligned item table
    assert turned["jaccard"] == pytest.approx(1.0, abs=0.01)
    assert turned["stale_recall_aligned"] == pytest.approx(turned["recall_mean"], abs=0.01)
    assert turned["recall_mean"] > 0.25 and turned["stale_recall_raw"] < 0.5 * turned["recall_mean"]


def test_float64_runs_beyond_float32_range_score_as_their_directions(tmp_path):
    """Scores are cosines: runs scaled by 1e39 (float64, beyond float32's range) give the
    report of the unscaled runs, for h and for avg (they were inf, then NaN scores)."""
    rng = np.random.default_rng(5)
    n_items = 200
    arrays = [rng.standard_normal((n_items, 8)) for _ in range(3)]
    path = write_interactions(tmp_path / "log.csv", 150, n_items, rng)
    plain = runs_report(arrays, path, k_list=[5], variants=["h", "avg"])
    scaled = runs_report([a * 1e39 for a in arrays], path, k_list=[5], variants=["h", "avg"])
    for variant in ("h", "avg"):
        for key, value in plain["variants"][variant]["mean"]["5"].items():
            assert scaled["variants"][variant]["mean"]["5"][key] == pytest.approx(value, abs=1e-9), (variant, key)


def test_unrelated_runs_churn_at_chance_and_users_are_sampled(tmp_path):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((500, 8)).astype(np.float32) for _ in range(3)]
    path = write_interactions(tmp_path / "log.csv", 600, 500, rng)
    report = runs_report(arrays, path, k_list=[10], users=300, variants=["h"])
    entry = report["variants"]["h"]["mean"]["10"]
    assert report["evaluated_users"] == 300 and report["sampled"] is True
    assert entry["jaccard"] == pytest.approx(entry["jaccard_chance"], rel=0.35)
    assert entry["jaccard"] < 0.05


def test_next_item_options_and_inputs_are_checked(tmp_path):
    for kwargs, param in [
        ({"k_list": [0]}, "k_list"),
        ({"profiles": ["median"]}, "profiles"),
        ({"users": -1}, "users"),
        ({"rbo_p": 1.0}, "rbo_p"),
        ({"variants": ["aligned"]}, "variants"),
    ]:
        with pytest.raises(OptionError) as info:
            NextItemOptions(tmp_path / "x.csv", **kwargs)
        assert info.value.param == param
    path = tmp_path / "log.csv"
    path.write_text("user,item\nu1,zz\nu1,yy\n")
    with pytest.raises(InputError, match="no user can be evaluated"):
        runs_report([np.eye(4, dtype=np.float32)] * 2, path)
