"""``stabcli pretrain`` as a library call: train N independent runs into a run set."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stabcli.commands.common import refuse_unknown, take
from stabcli.inputs.corpus import CorpusOptions
from stabcli.training.pretrain import PretrainResult, TrainConfig, parse_params
from stabcli.training.pretrain import pretrain as train_runs

RUN_KEYWORDS = ("runs", "seed", "jobs", "force", "timeout")


def pretrain(corpus: str | Path | None, out: str | Path, **options: Any) -> PretrainResult:
    """Train N independent runs of an embedding into a run set (``stabcli pretrain``).

    Run ``i`` uses seed ``seed + i`` with one gensim worker, so the same call gives bitwise
    identical vectors whatever ``jobs`` is. Calling again resumes: finished runs are kept.

    Parameters
    ----------
    corpus : path or None
        The training corpus (optional with ``script``).
    out : path
        The run set directory to create or resume.
    **options
        The command's options by their library names: the model (``model``, ``dim``,
        ``window``, ``negative``, ``epochs``, ``sg``, ``min_count``, ``vary``, ``params`` as
        a dict or ``["KEY=VALUE", ...]``, ``script``, ``checkpoints``), the runs (``runs``,
        ``seed``, ``jobs``, ``force``, ``timeout``, ``scheduler``), the corpus
        (``corpus_format``, ``encoding``, ``user_col``, ``item_col``, ``time_col``,
        ``rating_col``, ``min_rating``) and callbacks ``on_progress(Progress)``,
        ``on_run(RunResult)`` and ``on_step(text)``. Each is validated as its flag is.

    Returns
    -------
    PretrainResult
        The runs (``status`` complete, kept or failed); ``result.to_dict()`` is what
        ``stabcli pretrain --format json`` prints.

    Raises
    ------
    StabcliError
        Bad corpus or options, or a run set made with another configuration (without ``force``).

    Examples
    --------
    >>> result = stabcli.pretrain("sessions.txt", "runs/exp1", runs=5, dim=32)  # doctest: +SKIP
    >>> [r.status for r in result.runs]  # doctest: +SKIP
    ['complete', 'complete', 'complete', 'complete', 'complete']
    """
    options = dict(options)
    on_step: Callable[[str], None] = options.pop("on_step", None) or (lambda _: None)
    scheduler = options.pop("scheduler", None)
    callbacks = {name: options.pop(name) for name in ("on_progress", "on_run") if name in options}
    params = options.pop("params", None) or {}
    if not isinstance(params, dict):
        params = parse_params(options.get("model", "word2vec"), params)
    config = TrainConfig(**take(TrainConfig, options), params=params)
    corpus_options = CorpusOptions(**take(CorpusOptions, options, {"corpus_format": "format"}))
    runs = {name: options.pop(name) for name in RUN_KEYWORDS if name in options}
    refuse_unknown("pretrain", options)
    from stabcli.training.cluster import scheduler_address

    address = scheduler_address(scheduler)
    if address is None:
        return train_runs(out, corpus, config, corpus_options=corpus_options, **runs, **callbacks)
    from stabcli.training.cluster import training_backend

    def announce(cluster: Any) -> None:
        dashboard = cluster.dashboard_link
        on_step(
            f"Dask scheduler {address}: {len(cluster.workers())} worker(s)"
            + (f"; dashboard {dashboard}" if dashboard else "")
        )

    with training_backend(address, announce) as backend:
        return train_runs(out, corpus, config, corpus_options=corpus_options, backend=backend, **runs, **callbacks)
