"""The sweep report, typed (``stabcli sweep``): cells × measures, the Pareto front, the
data-size curves with their power-law fits, swap-one stability and the target size.

JSON through ``stabcli.reports.schema.to_json``; its reference table in ``docs/json.md``
is generated from these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stabcli.reports.schema import Check, JsonReport, doc


@dataclass(frozen=True)
class SweepCell:
    size: float = doc("share of the corpus's sequences this cell trained on (nested samples)")
    sequences: int = doc("sequences in its sample")
    values: dict[str, Any] = doc("the grid values of this cell, by name")
    run_set: str = doc("its run set directory (inside --out)")
    runs: int = doc("runs audited")
    keys: int = doc("keys common to every run")
    training_seconds: float | None = doc("sum of the runs' training times (null for runs kept from earlier)")
    noise_share: float = doc("coordinate noise share (audit's representation.noise_share)")
    aligned_noise_share: float = doc("noise share after generalized Procrustes")
    inner_product_noise_share: float = doc("noise share of cosine similarities of sampled key pairs")
    knn_overlap: float = doc("mean k-NN overlap@k between runs")
    cka: float = doc("mean linear CKA over run pairs")
    cka_debiased: float | None = doc("mean debiased linear CKA over run pairs")
    eis: float | None = doc("mean EIS over run pairs (anchor: the runs' consensus)")
    eis_std: float | None = doc("std of EIS over run pairs (ddof=1)")
    downstream_metric: str | None = doc("`accuracy` or `r2` with --labels, else null")
    downstream_mean: float | None = doc("mean test metric over runs of the raw vectors (variant h)")
    downstream_std: float | None = doc("its std over runs (ddof=1)")
    churn: float | None = doc("mean share of differing test predictions over run pairs (regression: RMS difference)")
    by_frequency: Any = doc("the audit's stability by frequency band when it reports one, else null", default=None)
    pareto: bool = doc("on the Pareto front of stability against quality", default=False)


@dataclass(frozen=True)
class SizePoint:
    size: float = doc("share of the corpus")
    sequences: int = doc("m, the sample's sequences")
    median: float | None = doc("median instability over the cells (or swap-one pairs) of this size")
    max: float | None = doc("largest instability over them")
    values: list[float | None] = doc("every value, in cell (or pair) order")


@dataclass(frozen=True)
class PowerLaw:
    a: float | None = doc("a of the fit g(m) = a·m^b to the per-size medians (m in sequences)")
    b: float | None = doc("b of that fit (negative: instability falls with data)")
    r2: float | None = doc("R² of the log-log fit (null with two sizes: a line through two points)")
    max_a: float | None = doc("a of the fit to the per-size maxima")
    max_b: float | None = doc("b of the fit to the per-size maxima")
    max_r2: float | None = doc("R² of that fit")
    monotone: bool = doc("whether the median instability never rises with size")
    points: list[SizePoint] = doc("per size: the median, maximum and every value")


@dataclass(frozen=True)
class Target:
    measure: str = doc("the --target measure")
    value: float = doc("the value asked for")
    instability: float = doc("the same as an instability (1 − value for overlaps and CKA)")
    sequences: float | None = doc("m where the median fit reaches it (null when it never does)")
    share_of_corpus: float | None = doc("that m over the corpus's sequences")
    extrapolation: bool = doc("true when m lies beyond the largest size trained (the fit is extrapolated)")
    note: str = doc("the sentence stating it")


@dataclass(frozen=True)
class Pareto:
    stability: str = doc("the stability measure (`--stability`; higher is more stable unless said)")
    quality: str = doc("the quality measure (higher is better)")
    front: list[str] = doc("cells on the front, by stability descending")


@dataclass(frozen=True)
class SwapOne:
    pairs: int = doc("--swap-one N: pairs per size")
    seed: int = doc("the training seed both corpora of a pair use")
    curve: PowerLaw = doc("per size over the pairs: mean per-key cosine distance after Procrustes, and its fit")


@dataclass(frozen=True)
class SweepReport(JsonReport):
    stabcli_version: str = doc("version that wrote the report")
    corpus: str = doc("the corpus file")
    corpus_sequences: int = doc("its sequences (the 100% size)")
    corpus_read: str = doc(
        "how the corpus was read, as pretrain's summary says it: the format; for a table its delimiter, header "
        "and the user, item and time columns; the counts"
    )
    corpus_columns: dict[str, str] | None = doc(
        'a table\'s column for each role, as pretrain\'s manifest records it (`{"user": "\'uid\'", "item": '
        '"\'movie\'", "time": "\'when\'"}`; no `time`: file order); null for lines and tagged corpora'
    )
    out: str = doc("the sweep directory")
    model: str = doc("`word2vec`, `doc2vec` or `script`")
    grid: dict[str, list[Any]] = doc("the grid: name → values")
    sizes: list[float] = doc("the data sizes, shares of the corpus's sequences")
    runs: int = doc("runs per cell")
    seed: int = doc("run i of every cell uses seed + i; the subsamples use it too")
    cells: dict[str, SweepCell] = doc("one entry per cell (`size-S_NAME-VALUE_…`)")
    pareto: Pareto | None = doc("the cells no other beats on both stability and quality (null without --labels)")
    data_size: dict[str, PowerLaw] = doc(
        "per instability measure (noise_share, 1 − knn_overlap as `knn_instability`, …): the curve over sizes "
        "and its power-law fit (empty with one size)"
    )
    swap_one: SwapOne | None = doc("swap-one stability by size (null without --swap-one)")
    target: Target | None = doc("the size --target needs, from the median fit (null without --target)")
    warnings: list[str] = doc("curves that do not decrease, fits that could not be made")
    checks: list[Check] = doc("the `--check` results, in the order given", default_factory=list)
    passed: bool = doc("true when every check passed (true without checks)", default=True)
