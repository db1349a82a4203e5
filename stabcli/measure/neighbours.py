"""Nearest neighbours by cosine and the k-NN overlap between runs (Wendlandt et al. 2018;
anchor-stability ``knn``), streamed: no n×n matrix, memory O(queries·(k + chunk)).

``knn_overlap_by_pair`` searches each run's neighbours on its own worker
(``threads.ordered_map``); a run's search is one float32 product per chunk of keys against
every query, then a threshold on the product, so only keys that beat a query's current
k-th best are merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

from stabcli.measure.metrics import unit_rows
from stabcli.measure.threads import ordered_map, stop_point

SCORE_ELEMENTS = 1 << 22  # float32 scores per chunk (16 MiB): measured faster than blocks that fit in cache


def nearest_neighbours(h: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Indices ``[q, k]`` of each query's k nearest keys by cosine, excluding the query itself.

    Streams keys in chunks against the q queries (O(q·n·d) time, O(q·chunk) memory). After
    the first chunk only scores above a query's current k-th best are merged, which keeps
    the selection cost far below a full partition of every chunk. The neighbours come back
    as a set per query, not in rank order.
    """
    n = h.shape[0]
    q_unit = unit_rows(np.asarray(h[queries])).astype(np.float32, copy=False)  # unit before float32: 1e300 stays finite
    step = max(k + 1, SCORE_ELEMENTS // max(len(queries), 1))
    best_scores: np.ndarray | None = None
    best_ids: np.ndarray | None = None
    for start in range(0, n, step):
        stop_point()  # a run takes seconds at a million keys: Ctrl-C does not wait for it
        chunk = unit_rows(np.asarray(h[start : start + step])).astype(np.float32, copy=False)
        scores = q_unit @ chunk.T
        inside = (queries >= start) & (queries < start + chunk.shape[0])
        scores[np.flatnonzero(inside), queries[inside] - start] = -np.inf
        if best_scores is None or best_scores.shape[1] < k:
            ids = np.broadcast_to(np.arange(start, start + chunk.shape[0]), scores.shape)
            if best_scores is not None:
                scores = np.concatenate([best_scores, scores], axis=1)
                ids = np.concatenate([best_ids, ids], axis=1)
            keep = min(k, scores.shape[1])
            top = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
            best_scores = np.take_along_axis(scores, top, axis=1)
            best_ids = np.take_along_axis(ids, top, axis=1)
            continue
        assert best_ids is not None
        # flat indices: numpy's 2-D nonzero is several times slower on a sparse mask
        flat = np.flatnonzero(scores > best_scores.min(axis=1)[:, None])
        if flat.size == 0:
            continue
        hit_rows, hit_cols = np.divmod(flat, scores.shape[1])
        rows = np.unique(hit_rows)
        cand_rows = np.concatenate([np.repeat(rows, k), hit_rows])
        cand_scores = np.concatenate([best_scores[rows].ravel(), scores[hit_rows, hit_cols]])
        cand_ids = np.concatenate([best_ids[rows].ravel(), hit_cols + start])
        order = np.lexsort((cand_ids, -cand_scores, cand_rows))  # by row, then best score first
        sorted_rows = cand_rows[order]
        group_start = np.searchsorted(sorted_rows, sorted_rows, side="left")
        first_k = order[np.arange(len(order)) - group_start < k]  # every row has >= k candidates
        best_scores[rows] = cand_scores[first_k].reshape(len(rows), k)
        best_ids[rows] = cand_ids[first_k].reshape(len(rows), k)
    assert best_ids is not None  # n > k keys: the first chunk filled it
    return best_ids


def knn_overlap(runs: Sequence[np.ndarray], queries: np.ndarray, k: int) -> np.ndarray:
    """Per query, ``|N_r(x) ∩ N_s(x)| / k`` averaged over run pairs r<s (Wendlandt et al.
    2018; anchor-stability ``knn``). Returns one value per query."""
    return knn_overlap_by_pair(runs, queries, k).mean(axis=0)


def knn_overlap_by_pair(runs: Sequence[np.ndarray], queries: np.ndarray, k: int) -> np.ndarray:
    """``|N_r(x) ∩ N_s(x)| / k`` for every run pair r<s (rows, ``combinations`` order) and
    query (columns): the spread of k-NN overlap over run pairs."""
    neighbours = list(ordered_map(lambda h: nearest_neighbours(h, queries, k), runs))  # a run per worker
    pairs = list(combinations(range(len(runs)), 2))
    overlap = np.zeros((len(pairs), len(queries)))
    for p, (r, s) in enumerate(pairs):
        common = (neighbours[r][:, :, None] == neighbours[s][:, None, :]).any(axis=2).sum(axis=1)
        overlap[p] = common / k
    return overlap
