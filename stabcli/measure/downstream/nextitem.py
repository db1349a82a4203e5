"""The next-item recommendation task (``audit --task next-item --interactions FILE``).

Each user's interactions (``pretrain``'s corpus reader: one sequence per user, in time order
when the table has a time column) are split leave-last-out: the last item is held out, the
items before it are her history. Users with fewer than two interactions, whose held-out or
history items have no vector, or whose held-out item is already in her history (a repeat
cannot be recommended) are skipped and counted. Above ``users`` evaluable users a seeded
sample is taken (stated in the report).

A user is scored by a profile built from her history in each run's item space:

* ``mean``: the mean of her history items' unit vectors;
* ``last``: the unit vector of her last history item.

Every item is ranked by cosine similarity to the profile, her history is excluded, and the
top K are her list. Recall@K is the share of users whose held-out item is in the list, and
NDCG@K is the mean of 1/log2(1 + rank) of the held-out item (0 outside the list; one
relevant item, so the ideal DCG is 1). Both are given as mean (std, ddof=1) over runs.

**List churn**: for every pair of runs, the overlap of the same user's top-K lists, as
Jaccard (shared items / distinct items in the two lists) and as rank-biased overlap truncated at depth K,
RBO@K = (1−p)/(1−p^K) · Σ_{d=1..K} p^(d−1) |A_d ∩ B_d| / d (Webber et al. 2010, normalized so
identical lists give 1), averaged over users and run pairs. Two unrelated rankings of n
items overlap by chance (hypergeometric shared items, E|A_d ∩ B_d| = d²/n): reported next to each value.

**Stale**: user profiles from the reference run's vectors scored against run r's items,
raw and after rotating run r into the reference frame (the audit's generalized Procrustes),
averaged over the other runs: what a recommender sees when the item table is refreshed but
the user vectors are not.

The user × item scores are computed in blocks of users (``block_bytes`` of float32 scores at
a time) with ``argpartition`` for the top K: memory is O(items · d + block), never users ×
items.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from stabcli.errors import InputError, OptionError, quote
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.measure.downstream.options import SEED_MAX, Variant, parse_variants
from stabcli.measure.downstream.protocol import mean_std
from stabcli.measure.metrics import unit_rows

PROFILES = ("mean", "last")
DEFAULT_K = (5, 10, 20)
DEFAULT_USERS = 10_000
BLOCK_BYTES = 64 << 20  # float32 scores of one block of users against every item


@dataclass(frozen=True)
class NextItemOptions:
    """Options of the next-item task; checked on construction (``OptionError`` names the parameter)."""

    interactions: Path
    corpus: CorpusOptions = field(default_factory=CorpusOptions)
    k_list: Sequence[int] = DEFAULT_K
    profiles: Sequence[str] = PROFILES
    users: int = DEFAULT_USERS  # 0: every evaluable user
    seed: int = 0  # the user sample
    variants: Sequence[str] | None = None  # default: h, avg
    featurize_dims: Sequence[int] = ()
    sigmas: Sequence[float] = ()
    phi_seed: int = 0
    reference: int = 0
    rbo_p: float = 0.9
    block_bytes: int = BLOCK_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "interactions", Path(self.interactions))
        for name in ("k_list", "profiles", "featurize_dims", "sigmas", "variants"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if not self.k_list or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.k_list):
            raise OptionError("k_list", f"{list(self.k_list)} must be positive integers (e.g. 5,10,20)")
        object.__setattr__(self, "k_list", tuple(sorted(set(self.k_list))))
        unknown = [p for p in self.profiles if p not in PROFILES]
        if unknown or not self.profiles:
            raise OptionError("profiles", f"{unknown or 'none'}: choose from {', '.join(PROFILES)}")
        if self.users < 0:
            raise OptionError("users", f"{self.users} must be 0 (every user) or a positive sample size")
        for name in ("seed", "phi_seed"):
            if not 0 <= getattr(self, name) <= SEED_MAX:
                raise OptionError(name, f"{getattr(self, name)} must be between 0 and {SEED_MAX}")
        if self.reference < 0:
            raise OptionError("reference", f"{self.reference} must be a run position (0 or more)")
        if not (isinstance(self.rbo_p, (int, float)) and 0 < self.rbo_p < 1):
            raise OptionError("rbo_p", f"{quote(self.rbo_p)} must be strictly between 0 and 1")
        if self.block_bytes < 1:
            raise OptionError("block_bytes", f"{self.block_bytes} must be positive")
        for source in self.variants or ():
            if source.startswith("aligned"):
                raise OptionError(
                    "variants",
                    f"{source}: cosine rankings do not change under a rotation, so aligned equals h here "
                    "(the stale case reports aligned item tables)",
                )
        parse_variants(self.variants, 2, self.featurize_dims, self.sigmas)


NEXT_ITEM_KEYWORDS = ("k_list", "profiles", "users")
CORPUS_KEYWORDS = ("corpus_format", "user_col", "item_col", "time_col", "rating_col", "min_rating")


def next_item_options(
    options: dict[str, Any], seed: int, reference: int, encoding: str | None
) -> NextItemOptions | None:
    """The ``NextItemOptions`` of the API keywords ``interactions``, ``k_list``, ``profiles``,
    ``users`` and pretrain's column keywords, removed from ``options``; None without
    ``interactions`` (then the others are a UsageError)."""
    from stabcli.errors import UsageError

    interactions = options.pop("interactions", None)
    given = {name: options.pop(name) for name in (*NEXT_ITEM_KEYWORDS, *CORPUS_KEYWORDS) if name in options}
    given = {name: value for name, value in given.items() if value is not None}
    if interactions is None:
        defaults = {
            "k_list": list(DEFAULT_K),
            "profiles": list(PROFILES),
            "users": DEFAULT_USERS,
            "corpus_format": "auto",
        }
        extra = [
            name
            for name, value in given.items()
            if defaults.get(name) != (list(value) if isinstance(value, tuple) else value)
        ]
        if extra:
            flags = ", ".join("--" + name.replace("_", "-") for name in extra)
            raise UsageError(f"{flags} only apply with --interactions FILE")
        return None
    corpus = CorpusOptions(
        given.pop("corpus_format", "auto"),
        encoding or "utf-8",
        *(given.pop(name, None) for name in CORPUS_KEYWORDS[1:]),
    )
    return NextItemOptions(interactions, corpus, seed=seed, phi_seed=seed, reference=reference, **given)


# ------------------------------------------------------------------ the held-out split


@dataclass
class Holdout:
    """The evaluated users: held-out item row, last history row, and history rows (CSR)."""

    target: np.ndarray  # [users] item row of the held-out item
    last: np.ndarray  # [users] item row of the last history item
    indptr: np.ndarray  # [users + 1]
    indices: np.ndarray  # history item rows, user by user
    total_users: int
    evaluable: int
    skipped: dict[str, int]

    @property
    def users(self) -> int:
        return len(self.target)

    def history(self, u: int) -> np.ndarray:
        return self.indices[self.indptr[u] : self.indptr[u + 1]]


def holdout(sequences: Sequence[Sequence[str]], keys: Sequence[str], users: int, seed: int) -> Holdout:
    """Leave-last-out over ``sequences`` (one per user, in order) against the item ``keys``;
    a seeded sample of ``users`` evaluable users (0: all). History items without a vector
    are left out of the history; repeats count once."""
    row = {k: i for i, k in enumerate(keys)}
    skipped = {"one_interaction": 0, "no_vector": 0, "repeat": 0}
    kept: list[tuple[int, list[int]]] = []
    for seq in sequences:
        if len(seq) < 2:
            skipped["one_interaction"] += 1
            continue
        target = row.get(seq[-1])
        history = list(dict.fromkeys(r for r in (row.get(t) for t in seq[:-1]) if r is not None))
        if target is None or not history:
            skipped["no_vector"] += 1
            continue
        if target in history:
            skipped["repeat"] += 1
            continue
        last = row.get(seq[-2])
        kept.append((target, history if last is None else [r for r in history if r != last] + [last]))
    evaluable = len(kept)
    if users and evaluable > users:
        chosen = np.sort(np.random.default_rng(seed).choice(evaluable, size=users, replace=False))
        kept = [kept[i] for i in chosen]
    lengths = np.fromiter((len(h) for _, h in kept), dtype=np.int64, count=len(kept))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.fromiter((r for _, h in kept for r in h), dtype=np.int64, count=int(indptr[-1]))
    targets = np.fromiter((t for t, _ in kept), dtype=np.int64, count=len(kept))
    lasts = indices[indptr[1:] - 1] if len(kept) else np.empty(0, dtype=np.int64)
    return Holdout(targets, lasts, indptr, indices, len(sequences), evaluable, skipped)


# ------------------------------------------------------------------ scoring


def profiles(items: np.ndarray, split: Holdout, kind: str) -> np.ndarray:
    """[users, d] profile vectors from unit item vectors ``items``: the mean of the history
    rows (``mean``) or the last history row (``last``)."""
    if kind == "last":
        return np.asarray(items[split.last], dtype=np.float32)
    sums = np.add.reduceat(np.asarray(items[split.indices], dtype=np.float64), split.indptr[:-1], axis=0)
    counts = np.diff(split.indptr)[:, None]
    return (sums / counts).astype(np.float32)


def top_k(items: np.ndarray, users: np.ndarray, split: Holdout, k: int, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """[users, k] item rows, best first, by cosine of each user's profile (``users`` rows) to
    the unit ``items``, excluding her history: blocks of users, argpartition per block."""
    n = items.shape[0]
    k = min(k, n)
    out = np.empty((users.shape[0], k), dtype=np.int64)
    block = max(1, block_bytes // (4 * n))
    unit = unit_rows(np.asarray(users, dtype=np.float32))
    for start in range(0, users.shape[0], block):
        stop = min(start + block, users.shape[0])
        scores = unit[start:stop] @ items.T  # float32 [block, n]
        lo, hi = split.indptr[start], split.indptr[stop]
        rows = np.repeat(np.arange(stop - start), np.diff(split.indptr[start : stop + 1]))
        scores[rows, split.indices[lo:hi]] = -np.inf
        part = np.argpartition(scores, n - k, axis=1)[:, n - k :]  # the k largest, unordered (no negated copy)
        chosen = np.take_along_axis(scores, part, axis=1)
        # best first; ties by item row, so equal scores give one order on every machine
        order = np.lexsort((part, -chosen), axis=1)
        out[start:stop] = np.take_along_axis(part, order, axis=1)
    return out


def hit_metrics(lists: np.ndarray, target: np.ndarray, k_list: Sequence[int]) -> dict[int, tuple[float, float]]:
    """K → (Recall@K, NDCG@K) of one held-out item per user."""
    found = lists == target[:, None]
    rank = np.where(found.any(axis=1), found.argmax(axis=1) + 1, 0)  # 1-based, 0 = not in the list
    out = {}
    for k in k_list:
        hit = (rank > 0) & (rank <= k)
        gain = np.zeros(len(rank))
        gain[hit] = 1.0 / np.log2(rank[hit] + 1.0)
        out[k] = (float(hit.mean()), float(gain.mean()))
    return out


def list_overlap(a: np.ndarray, b: np.ndarray, k: int, p: float) -> tuple[float, float]:
    """Mean over users of the Jaccard overlap and of RBO@k (normalized) of two [users, ≥k] lists."""
    a, b = a[:, :k], b[:, :k]
    same = a[:, :, None] == b[:, None, :]  # [users, k, k]
    prefix = same.cumsum(axis=1).cumsum(axis=2)  # |A_d ∩ B_e| at [d-1, e-1]
    depth = np.arange(1, k + 1)
    overlap = prefix[:, depth - 1, depth - 1]  # |A_d ∩ B_d|, [users, k]
    full = overlap[:, -1]
    jaccard = full / (2 * k - full)
    weights = (1 - p) * p ** (depth - 1) / (1 - p**k)
    rbo = (overlap / depth) @ weights
    return float(jaccard.mean()), float(rbo.mean())


def chance_overlap(k: int, n: int, p: float) -> tuple[float, float]:
    """Jaccard and RBO@k expected between two unrelated rankings of n items: the shared
    items of two random k-subsets are hypergeometric (Jaccard: its exact expectation of
    s/(2k − s)); RBO is linear in E|A_d ∩ B_d| = d²/n."""
    from scipy.stats import hypergeom

    shared = np.arange(0, k + 1)
    jaccard = float(hypergeom(n, k, k).pmf(shared) @ (shared / (2 * k - shared)))
    depth = np.arange(1, k + 1)
    weights = (1 - p) * p ** (depth - 1) / (1 - p**k)
    return jaccard, float((depth / n) @ weights)


# ------------------------------------------------------------------ the report


def plan_next_item(
    options: NextItemOptions, keys: Sequence[str], runs: int, dim: int
) -> tuple[Holdout, list[Variant], dict[str, Any]]:
    """Read the interactions and split them; every bad option or file fails here, before the
    audit's long computations. Returns the split, the variants and the corpus summary."""
    if options.reference >= runs:
        raise OptionError("reference", f"{options.reference} must be a run position from 0 to {runs - 1}")
    spec = options.variants if options.variants is not None else ("h", "avg")
    variants = parse_variants(spec, dim, options.featurize_dims, options.sigmas)
    corpus = read_corpus(options.interactions, "word2vec", options.corpus)
    if corpus.format == "tagged":
        raise InputError(f"{options.interactions}: a tagged corpus has no interactions; give a user-item table")
    split = holdout(corpus.sequences, keys, options.users, options.seed)
    if split.users == 0:
        raise InputError(
            f"{options.interactions}: no user can be evaluated ({split.total_users:,} users: "
            f"{split.skipped['one_interaction']:,} with one interaction, {split.skipped['no_vector']:,} whose "
            f"items have no vector, {split.skipped['repeat']:,} whose last item repeats her history)"
        )
    if max(options.k_list) >= len(keys):
        raise OptionError("k_list", f"{max(options.k_list)} must be below the number of items ({len(keys):,})")
    return split, variants, corpus.summary()


def next_item_report(
    arrays: Sequence[np.ndarray],
    keys: Sequence[str],
    rotations: Sequence[np.ndarray],
    options: NextItemOptions,
    run_names: Sequence[str],
    on_step: Callable[[str], None] | None = None,
    planned: tuple[Holdout, list[Variant], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``next_item`` section of the audit report (schema in docs/json.md)."""
    from stabcli.measure.fourier import draw_directions, fourier_features

    step = on_step or (lambda _: None)
    R, dim = len(arrays), int(arrays[0].shape[1])
    split, variants, corpus = planned or plan_next_item(options, keys, R, dim)
    kmax, p = max(options.k_list), options.rbo_p
    chance = {k: chance_overlap(k, len(keys), p) for k in options.k_list}

    def spaces(v: Variant) -> list[np.ndarray]:
        directions = draw_directions(dim, v.phi_dim, v.sigma, options.phi_seed) if v.phi_dim else None
        runs = [np.asarray(a, dtype=np.float32) for a in arrays]
        if v.source == "avg":
            aligned = [np.asarray(a, dtype=np.float64) @ q for a, q in zip(arrays, rotations, strict=True)]
            runs = [np.mean(aligned, axis=0).astype(np.float32)]
        if directions is not None:
            runs = [fourier_features(np.asarray(x, dtype=np.float64), directions, normalize=True) for x in runs]
        return [unit_rows(np.asarray(x, dtype=np.float32)) for x in runs]

    results: dict[str, Any] = {}
    for v in variants:
        items = spaces(v)
        by_profile: dict[str, Any] = {}
        for kind in options.profiles:
            lists = []
            for r, x in enumerate(items):
                step(f"next-item: {v.name}, {kind} profile, run {r + 1}/{len(items)}")
                lists.append(top_k(x, profiles(x, split, kind), split, kmax, options.block_bytes))
            stale = _stale(arrays, rotations, split, kind, kmax, options, step) if v.name == "h" and R > 1 else None
            by_profile[kind] = _per_k(lists, split, options, chance, stale)
        results[v.name] = by_profile
    return {
        "interactions": str(options.interactions),
        "corpus": corpus,
        "users": split.total_users,
        "evaluable_users": split.evaluable,
        "evaluated_users": split.users,
        "sampled": split.users < split.evaluable,
        "user_seed": options.seed,
        "skipped_users": dict(split.skipped),
        "items": len(keys),
        "history_mean": float(np.mean(np.diff(split.indptr))),
        "k_list": list(options.k_list),
        "rbo_p": p,
        "reference": run_names[options.reference],
        "variants": results,
    }


def _stale(
    arrays: Sequence[np.ndarray],
    rotations: Sequence[np.ndarray],
    split: Holdout,
    kind: str,
    kmax: int,
    options: NextItemOptions,
    step: Callable[[str], None],
) -> dict[str, list[np.ndarray]]:
    """Top-K lists of the reference run's profiles against every other run's items, raw and
    rotated into the reference frame (R_r R_ref^T)."""
    ref = options.reference
    users = profiles(unit_rows(np.asarray(arrays[ref], dtype=np.float32)), split, kind)
    out: dict[str, list[np.ndarray]] = {"raw": [], "aligned": []}
    for r, x in enumerate(arrays):
        if r == ref:
            continue
        step(f"next-item: stale {kind} profiles on run {r + 1}/{len(arrays)}")
        raw = unit_rows(np.asarray(x, dtype=np.float32))
        rotated = np.asarray(x, dtype=np.float64) @ (rotations[r] @ rotations[ref].T)
        out["raw"].append(top_k(raw, users, split, kmax, options.block_bytes))
        out["aligned"].append(top_k(unit_rows(rotated.astype(np.float32)), users, split, kmax, options.block_bytes))
    return out


def _per_k(
    lists: list[np.ndarray],
    split: Holdout,
    options: NextItemOptions,
    chance: dict[int, tuple[float, float]],
    stale: dict[str, list[np.ndarray]] | None,
) -> dict[str, Any]:
    """K → metrics of one variant and profile: Recall/NDCG mean (std) over runs, list churn, stale."""
    hits = [hit_metrics(x, split.target, options.k_list) for x in lists]
    stale_hits = {
        how: [hit_metrics(x, split.target, options.k_list) for x in runs] for how, runs in (stale or {}).items()
    }
    out: dict[str, Any] = {}
    for k in options.k_list:
        recall = [h[k][0] for h in hits]
        ndcg = [h[k][1] for h in hits]
        (recall_mean, recall_std), (ndcg_mean, ndcg_std) = mean_std(recall), mean_std(ndcg)
        overlaps = [list_overlap(a, b, k, options.rbo_p) for a, b in combinations(lists, 2)]
        entry: dict[str, Any] = {
            "recall_mean": recall_mean,
            "recall_std": recall_std,
            "recall_by_run": recall,
            "ndcg_mean": ndcg_mean,
            "ndcg_std": ndcg_std,
            "ndcg_by_run": ndcg,
            "jaccard": float(np.mean([o[0] for o in overlaps])) if overlaps else None,
            "rbo": float(np.mean([o[1] for o in overlaps])) if overlaps else None,
            "jaccard_chance": chance[k][0],
            "rbo_chance": chance[k][1],
        }
        for how in ("raw", "aligned"):
            runs = stale_hits.get(how)
            entry[f"stale_recall_{how}"] = float(np.mean([h[k][0] for h in runs])) if runs else None
            entry[f"stale_ndcg_{how}"] = float(np.mean([h[k][1] for h in runs])) if runs else None
        out[str(k)] = entry
    return out
