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
a time): one GEMM per block for every profile of a run (fresh, stale raw, stale aligned, the
aligned case as rotated profiles against the same items), the history set to −inf by one
scatter, and the top K found from a sampled lower bound (``best_k``) rather than a partition
of every row. Memory is O(items · d + block), never users × items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from stabcli.constraints import NEXT_ITEM_OPTIONS, Constraint, validate_params
from stabcli.errors import InputError, OptionError
from stabcli.inputs.corpus import CorpusOptions, read_corpus
from stabcli.inputs.tablecolumns import EncodedSequences
from stabcli.measure.downstream.options import Variant, parse_variants
from stabcli.measure.metrics import mean_std, unit_rows

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

    parameter_constraints: ClassVar[dict[str, Constraint]] = NEXT_ITEM_OPTIONS

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
        validate_params(self)
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
    are left out of the history; repeats count once (``encoded_holdout`` of the sequences)."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(t, len(index)) for seq in sequences for t in seq), dtype=np.int64, count=-1)
    indptr = np.concatenate([[0], np.cumsum([len(seq) for seq in sequences], dtype=np.int64)])
    return encoded_holdout(EncodedSequences(list(index), codes, indptr), keys, users, seed)


def encoded_holdout(sequences: EncodedSequences, keys: Sequence[str], users: int, seed: int) -> Holdout:
    """``holdout`` of sequences given as item codes, with array operations over all users:
    the last item is the target; the history is the items before it that have a vector, each
    once (at its first place), with the item before the target moved to the end."""
    row = {k: i for i, k in enumerate(keys)}
    rows = np.array([row.get(item, -1) for item in sequences.items], dtype=np.int64)[sequences.codes]
    indptr = np.asarray(sequences.indptr, dtype=np.int64)
    lengths = np.diff(indptr)
    total = len(lengths)
    owner = np.repeat(np.arange(total), lengths)
    ends = indptr[1:] - 1
    target = np.where(lengths > 0, rows[np.maximum(ends, 0)], -1) if len(rows) else np.full(total, -1)
    before = np.where(lengths > 1, rows[np.maximum(ends - 1, 0)], -1) if len(rows) else np.full(total, -1)
    in_history = np.ones(len(rows), dtype=bool)
    in_history[ends[lengths > 0]] = False
    in_history &= rows >= 0
    history = np.bincount(owner[in_history], minlength=total)
    repeats = np.bincount(owner[in_history & (rows == target[owner])], minlength=total)
    one = lengths < 2
    no_vector = ~one & ((target < 0) | (history == 0))
    repeat = ~one & ~no_vector & (repeats > 0)
    skipped = {"one_interaction": int(one.sum()), "no_vector": int(no_vector.sum()), "repeat": int(repeat.sum())}
    kept = np.flatnonzero(~(one | no_vector | repeat))
    evaluable = len(kept)
    if users and evaluable > users:
        kept = kept[np.sort(np.random.default_rng(seed).choice(evaluable, size=users, replace=False))]
    chosen = np.zeros(total, dtype=bool)
    chosen[kept] = True
    place = np.flatnonzero(in_history & chosen[owner])  # history places of the chosen users, in order
    user = np.searchsorted(kept, owner[place])  # 0..len(kept)-1
    _, first = np.unique(user * (len(keys) + 1) + rows[place], return_index=True)
    place, user = place[np.sort(first)], user[np.sort(first)]  # each item once, at its first place
    moved = rows[place] == before[kept][user]  # the item before the target goes last
    order = np.lexsort((place, moved, user))
    indices = rows[place[order]]
    indptr_out = np.concatenate([[0], np.cumsum(np.bincount(user, minlength=len(kept)))]).astype(np.int64)
    lasts = indices[indptr_out[1:] - 1] if len(kept) else np.empty(0, dtype=np.int64)
    return Holdout(target[kept], lasts, indptr_out, indices, total, evaluable, skipped)


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
    the unit ``items``, excluding her history (``ranked_lists`` of one profile set)."""
    return ranked_lists(items, [users], split, k, block_bytes)[0]


def ranked_lists(
    items: np.ndarray, user_sets: Sequence[np.ndarray], split: Holdout, k: int, block_bytes: int = BLOCK_BYTES
) -> list[np.ndarray]:
    """For each [users, d] profile matrix of ``user_sets`` (the split's users, in order), the
    [users, k] item rows, best first and ties by item row, by cosine to the unit ``items``,
    her history excluded.

    One block of users of every set is scored by one float32 GEMM (``block_bytes`` of
    scores), her history is set to −inf by one scatter, and ``best_k`` selects the lists: the
    sets share the item matrix and the blocks.
    """
    n, sets = items.shape[0], len(user_sets)
    k = min(k, n)
    units = [unit_rows(np.asarray(u, dtype=np.float32)) for u in user_sets]
    out = [np.empty((split.users, k), dtype=np.int64) for _ in units]
    block = max(1, block_bytes // (4 * n * sets))
    buffer = np.empty((sets * min(block, split.users), n), dtype=np.float32)  # reused: no page faults per block
    mask = np.empty(buffer.shape, dtype=bool)
    for start in range(0, split.users, block):
        stop = min(start + block, split.users)
        size = stop - start
        scores = buffer[: sets * size]
        np.matmul(np.concatenate([u[start:stop] for u in units]), items.T, out=scores)  # float32 [sets · size, n]
        lo, hi = split.indptr[start], split.indptr[stop]
        rows = np.repeat(np.arange(size), np.diff(split.indptr[start : stop + 1]))
        rows = (rows + size * np.arange(sets)[:, None]).ravel()  # the same history in every set
        scores[rows, np.tile(split.indices[lo:hi], sets)] = -np.inf
        best = best_k(scores, k, mask[: sets * size])
        for s in range(sets):
            out[s][start:stop] = best[s * size : (s + 1) * size]
    return out


def best_k(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """[rows, k] columns of each row's k largest scores, largest first, ties by column: the
    first k of the row sorted by (−score, column), without sorting or partitioning whole rows.

    A row's k-th largest score among a strided sample of about 2·√(k·n) columns is at most
    its own k-th largest, so only the columns at or above it are candidates (about
    √(k·n)/2 per row); the exact k-th largest is found among those, and the columns at or
    above it (k, plus ties) are ordered. ``mask``: a boolean work array of the scores' shape.
    """
    rows, n = scores.shape
    step = max(1, n // max(k, math.ceil(2 * math.sqrt(k * n))))
    floor = np.partition(scores[:, ::step], -k, axis=1)[:, -k]
    flat = np.flatnonzero(np.greater_equal(scores, floor[:, None], out=mask))
    row, col = np.divmod(flat, n)
    counts = np.bincount(row, minlength=rows)  # at least k: the sample's k best are there
    width = int(counts.max())
    pos = np.arange(len(flat)) - (np.cumsum(counts) - counts)[row]
    values = np.full((rows, width), -np.inf, dtype=scores.dtype)
    columns = np.full((rows, width), n, dtype=np.int64)  # n: padding
    values[row, pos], columns[row, pos] = scores.ravel()[flat], col
    kth = np.partition(values, width - k, axis=1)[:, width - k]
    row, pos = np.nonzero((values >= kth[:, None]) & (columns < n))
    value, col = values[row, pos], columns[row, pos]
    order = np.lexsort((col, -value, row))
    row, col = row[order], col[order]
    rank = np.arange(len(row)) - np.searchsorted(row, np.arange(rows))[row]
    out = np.empty((rows, k), dtype=np.int64)
    out[row[rank < k], rank[rank < k]] = col[rank < k]
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


def overlap_curve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[users, k] |A_d ∩ B_d| for d = 1..k of two [users, k] lists of distinct items: an item
    at position i of A and j of B is shared from depth max(i, j) + 1 on."""
    users, k = a.shape
    user, i, j = np.nonzero(a[:, :, None] == b[:, None, :])
    first = np.bincount(user * k + np.maximum(i, j), minlength=users * k).reshape(users, k)
    return first.cumsum(axis=1)


def overlap_at(curve: np.ndarray, k: int, p: float) -> tuple[float, float]:
    """Mean over users of the Jaccard overlap and of RBO@k (normalized) from an ``overlap_curve``
    of depth k or more (the top-k lists are its first k positions)."""
    overlap = curve[:, :k]
    full = overlap[:, -1]
    jaccard = full / (2 * k - full)
    depth = np.arange(1, k + 1)
    weights = (1 - p) * p ** (depth - 1) / (1 - p**k)
    rbo = (overlap / depth) @ weights
    return float(jaccard.mean()), float(rbo.mean())


def list_overlap(a: np.ndarray, b: np.ndarray, k: int, p: float) -> tuple[float, float]:
    """Mean over users of the Jaccard overlap and of RBO@k (normalized) of two [users, ≥k] lists."""
    return overlap_at(overlap_curve(a[:, :k], b[:, :k]), k, p)


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
    if corpus.encoded is not None:
        split = encoded_holdout(corpus.encoded, keys, options.users, options.seed)
    else:
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
    chance = {k: chance_overlap(k, len(keys), options.rbo_p) for k in options.k_list}

    def spaces(v: Variant) -> tuple[int, Callable[[int], np.ndarray]]:
        """The variant's runs (one for avg) and run r → its unit item vectors, made when needed."""
        directions = draw_directions(dim, v.phi_dim, v.sigma, options.phi_seed) if v.phi_dim else None
        runs: Sequence[np.ndarray] = arrays
        if v.source == "avg":
            total = np.zeros(arrays[0].shape, dtype=np.float64)
            for a, q in zip(arrays, rotations, strict=True):
                total += np.asarray(a, dtype=np.float64) @ q
            runs = [total / R]

        def space(r: int) -> np.ndarray:
            # normalized in the input's precision, then float32: float64 rows beyond float32's
            # range (1e39) would become inf, NaN unit vectors and NaN scores
            x = np.asarray(runs[r])
            if directions is not None:
                x = fourier_features(np.asarray(x, dtype=np.float64), directions, normalize=True)
            return unit_rows(x).astype(np.float32, copy=False)

        return len(runs), space

    results: dict[str, Any] = {}
    for v in variants:
        fresh, stale = _lists(*spaces(v), rotations, split, options, v.name == "h" and R > 1, step, v.name)
        results[v.name] = {
            kind: _per_k(fresh[kind], split, options, chance, stale[kind] if stale else None)
            for kind in options.profiles
        }
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
        "rbo_p": options.rbo_p,
        "reference": run_names[options.reference],
        "variants": results,
    }


def _lists(
    runs: int,
    space: Callable[[int], np.ndarray],
    rotations: Sequence[np.ndarray],
    split: Holdout,
    options: NextItemOptions,
    with_stale: bool,
    step: Callable[[str], None],
    name: str,
) -> tuple[dict[str, list[np.ndarray]], dict[str, dict[str, list[np.ndarray]]] | None]:
    """Every run's top-K lists per profile and, ``with_stale``, the reference run's profiles
    against every other run's items, raw and rotated into the reference frame: one
    ``ranked_lists`` pass over each run's items for all of them. The rotated items x·M
    (M = R_r R_refᵀ) are scored as the profile u·Mᵀ against x: u·(x M) = (u Mᵀ)·x."""
    kinds, ref, kmax = options.profiles, options.reference, max(options.k_list)
    fresh: dict[str, list[np.ndarray]] = {kind: [] for kind in kinds}
    stale: dict[str, dict[str, list[np.ndarray]]] | None = None
    reference: dict[str, np.ndarray] = {}
    if with_stale:
        stale = {kind: {"raw": [], "aligned": []} for kind in kinds}
        reference = {kind: profiles(space(ref), split, kind) for kind in kinds}
    for r in range(runs):
        x = space(r)
        sets = [profiles(x, split, kind) for kind in kinds]
        turn = rotations[r] @ rotations[ref].T if stale is not None and r != ref else None
        step(f"next-item: {name}, run {r + 1}/{runs}" + ("" if turn is None else ", with stale profiles"))
        if turn is not None:
            sets += [u for kind in kinds for u in (reference[kind], (reference[kind] @ turn.T).astype(np.float32))]
        ranked = ranked_lists(x, sets, split, kmax, options.block_bytes)
        for i, kind in enumerate(kinds):
            fresh[kind].append(ranked[i])
            if stale is not None and turn is not None:
                stale[kind]["raw"].append(ranked[len(kinds) + 2 * i])
                stale[kind]["aligned"].append(ranked[len(kinds) + 2 * i + 1])
    return fresh, stale


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
    curves = [overlap_curve(a, b) for a, b in combinations(lists, 2)]  # at the largest K; a top-k is its prefix
    out: dict[str, Any] = {}
    for k in options.k_list:
        recall = [h[k][0] for h in hits]
        ndcg = [h[k][1] for h in hits]
        (recall_mean, recall_std), (ndcg_mean, ndcg_std) = mean_std(recall), mean_std(ndcg)
        overlaps = [overlap_at(curve, k, options.rbo_p) for curve in curves]
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
