"""The cost models of the shipped kernels (registry.py carries them, one per KernelSpec): the
formulas of predicted CPU seconds, their coefficients for the calibration's fit, and how each kernel
is priced on a state for `kernel="auto"` (auto.py: the order and the margins).

    kernel     predicted seconds                                              variant
    sdpa       call M + M N^2 (pair + pair_d d)                               dtype
    fused      call M + M N^2 (pair + pair_d d)                               backend
    truncated  call M + token M N + pair pairs + key keys                     backend
    cluster    call M + token M N + cell cells                                backend
               + cell_pair (expanded_pairs + direct_cell_pairs)
               + direct_pair direct_pairs + direct_key direct_keys
               + direct_cell_pair direct_cell_pairs + expanded_pair expanded_pairs
               + series (C(p + d + 1, d) moment_rows + C(p + d, d) (d + 1) eval_rows)

The dense kernels are priced in closed form; the truncated kernel from its plan's counts
(truncated.candidate_counts) in a cold state of at most PLAN_MAX_N tokens, else from a sampled plan
(truncated.sampled_counts: N / 16 queries, at least HOT_SAMPLE, at PLAN_MAX_N tokens and
below), or at its lower bound where that is SURE times below the best (on the benchmark's 24 states
the truncated kernel took 1.0 to 3.4 times its bound); the cluster kernel from its plans' counts
(cluster.cloud_plans, cells.Plan.counts), and not where tokens have fewer than SPARSE neighbours, or
fewer than DENSE in a hot state (kept fraction > HOT; auto.py's docstring says why).

This module imports nothing heavy: the kernels load when a state is priced.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..attention import Attention
    from .common import Stats

TRUNCATED_MAX_D = 6  # cells of directions stop paying off in higher dimension
CLUSTER_MAX_D = 5  # C(p + d, d) moments per cell pair grow too fast beyond
HOT = 0.1  # above this sampled kept fraction a state is hot ...
DENSE = 256  # ... and the cluster kernel is not planned unless tokens have this many neighbours
SPARSE = 64  # nor, in any state, unless they have this many (2 LEAF_MIN: its cells stay small)
PLAN_MAX_N = 4096  # above this the truncated kernel is priced by a sampled plan (median 4x cheaper)
HOT_SAMPLE = 256  # the fewest queries of a sampled plan in a hot state of at most PLAN_MAX_N tokens
SURE = 4.0  # a truncated bound this far below the best is taken unpriced (sampled plans)

Work = Mapping[str, float]  # the work counts of one evaluation: M, N, d, clouds and the kernel's own


@dataclass(frozen=True)
class Sampled:
    """What SAMPLE queries tell about a state, exactly on the sample: `kept`, the fraction of keys
    within the truncated kernel's cutoff of each query's maximum score; `neighbours`, the median
    number of tokens within the cluster kernel's expansion scale h = sqrt(rho / (beta ||B||)) of a
    sampled token (rho: its series radius), which says how large its cells can grow."""

    kept: float
    neighbours: float


class Timed(Protocol):
    """A kernel timed on a state (calibrate.Sample), as a cost model's `fit` reads it."""

    @property
    def M(self) -> int: ...
    @property
    def N(self) -> int: ...
    @property
    def d(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def stats(self) -> Stats: ...


@dataclass
class Pricing:
    """A state to price: X (M, N, d) or (N, d) as the kernels will get it (their plans are kept per
    tensor), its attention and weights, `table` the constants in use (kernel -> variant -> term),
    small (a state below auto.MIN_N: no plan), and, as auto fills them in, the sampled statistics
    (Sampled), the kernel's lower bound and the best prediction so far."""

    X: torch.Tensor
    att: Attention | None
    weights: torch.Tensor | None
    table: Mapping[str, Mapping[str, Mapping[str, float]]]
    small: bool = False
    sampled: Sampled | None = None
    bound: float = math.inf
    best: float = math.inf

    @cached_property
    def shape(self) -> tuple[int, int, int]:
        M, N, d = self.X.shape if self.X.dim() == 3 else (1, *self.X.shape)
        return M, N, d

    @property
    def device(self) -> str:
        return self.X.device.type

    @cached_property
    def variant(self) -> str:
        """The backend: "compiled" where the fused kernel's compiled core runs on X, else "torch"."""
        from .fused import variant

        return variant(self.shape[2], self.X.device)

    @property
    def dtype(self) -> str:
        return "float32" if str(self.X.dtype).endswith("float32") else "float64"

    @property
    def attention(self) -> Attention:
        """att, which the kernels priced on a plan need (auto.dense_pick prices none)."""
        assert self.att is not None, "a plan is priced without an attention"
        return self.att

    @property
    def sample(self) -> Sampled:
        """The sampled statistics, which a kernel with a bound needs (auto.predict_costs fills them in)."""
        assert self.sampled is not None, "a bound is priced before the state is sampled"
        return self.sampled

    def work(self, **counts: float) -> dict[str, float]:
        M, N, d = self.shape
        return {**counts, "M": M, "N": N, "d": d, "clouds": M}


# ---------------------------------------------------------------- dense kernels (closed forms)


def dense_seconds(work: Work, c: Mapping[str, float]) -> float:
    M, N, d = work["M"], work["N"], work["d"]
    return M * (c["call"] + N * N * (c["pair"] + c["pair_d"] * d))


def dense_features(work: Work) -> tuple[float, ...]:
    M, N, d = work["M"], work["N"], work["d"]
    return (M, M * N**2, M * N**2 * d)


def sdpa_price(p: Pricing) -> float:
    return dense_seconds(p.work(), p.table["sdpa"][p.dtype])


def fused_price(p: Pricing) -> float:
    """Off the CPU the fused kernel is torch's SDPA (and not a choice of its own below MIN_N);
    below MIN_N it is a choice only where its compiled core runs (its fixed cost per call is larger,
    its cost per pair 2.8 times smaller than sdpa's: it wins from N of about 400 at d = 3)."""
    if p.device != "cpu":
        return math.inf if p.small else sdpa_price(p)
    if p.small and p.variant != "compiled":
        return math.inf
    return dense_seconds(p.work(), p.table["fused"][p.variant])


# ---------------------------------------------------------------- truncated


def truncated_seconds(work: Work, c: Mapping[str, float]) -> float:
    M, N = work["M"], work["N"]
    return M * c["call"] + c["token"] * M * N + c["pair"] * work["pairs"] + c["key"] * work["keys"]


def truncated_features(work: Work) -> tuple[float, ...]:
    return (work["M"], work["M"] * work["N"], work["pairs"], work["keys"])


def truncated_bound(p: Pricing) -> float:
    """call + token M N + pair f M N^2 (f: the sampled kept fraction)."""
    M, N, _ = p.shape
    c = p.table["truncated"][p.variant]
    return M * c["call"] + c["token"] * M * N + c["pair"] * p.sample.kept * M * N * N


def truncated_late(p: Pricing) -> bool:
    """Priced by a sampled plan (which the kernel does not take): after the others."""
    return p.shape[1] > PLAN_MAX_N or p.sample.kept > HOT


def truncated_price(p: Pricing) -> float:
    from .truncated import candidate_counts, sampled_counts

    by_sample = truncated_late(p)
    if by_sample and SURE * p.bound < p.best:
        return p.bound
    N = p.shape[1]
    counts: Mapping[str, float]
    if by_sample:
        n = None if N > PLAN_MAX_N else max(HOT_SAMPLE, N // 16)  # a hot state: 256 of 4096
        counts = sampled_counts(p.X, p.attention, weights=p.weights, n=n)
    else:
        counts = candidate_counts(p.X, p.attention, weights=p.weights)
    return truncated_seconds(p.work(**counts), p.table["truncated"][p.variant])


# ---------------------------------------------------------------- cluster


def _series_rows(work: Work) -> float:
    p, d = int(work["order"]), int(work["d"])
    return math.comb(p + 1 + d, d) * work["moment_rows"] + math.comb(p + d, d) * (d + 1) * work["eval_rows"]


def cluster_seconds(work: Work, c: Mapping[str, float]) -> float:
    """From the work counts of cells.Plan.counts summed over `clouds` clouds (the largest order)."""
    return (
        work["clouds"] * c["call"]
        + c["token"] * work["tokens"]
        + c["cell"] * work["cells"]
        + c["cell_pair"] * (work["expanded_pairs"] + work["direct_cell_pairs"])
        + c["direct_pair"] * work["direct_pairs"]
        + c["direct_key"] * work["direct_keys"]
        + c["direct_cell_pair"] * work["direct_cell_pairs"]
        + c["series"] * _series_rows(work)
        + c["expanded_pair"] * work["expanded_pairs"]
    )


def cluster_counts(X: torch.Tensor, att: Attention, weights: torch.Tensor | None = None) -> dict[str, int]:
    """Work counts of the cluster kernel on X (M, N, d), summed over the clouds (largest order), from
    its plans (cluster.cloud_plans: kept for the kernel)."""
    from .cluster import cloud_plans

    total: dict[str, int] = {}
    for plan in cloud_plans(X, att, weights=weights):
        for key, value in plan.counts().items():
            total[key] = max(total.get(key, 0), value) if key == "order" else total.get(key, 0) + value
    return total


def cluster_bound(p: Pricing) -> float:
    """call + cell + token M N; inf where the sampled tokens have too few neighbours."""
    s = p.sample
    if s.neighbours < SPARSE or (s.kept > HOT and s.neighbours < DENSE):
        return math.inf
    M, N, _ = p.shape
    c = p.table["cluster"][p.variant]
    return M * (c["call"] + c["cell"]) + c["token"] * M * N


def cluster_price(p: Pricing) -> float:
    return cluster_seconds(
        p.work(**cluster_counts(p.X, p.attention, p.weights)), p.table["cluster"][p.variant]
    )


def cluster_fit(samples: Sequence[Timed]) -> dict[str, float]:
    """The cluster kernel's constants from calibrate.Samples, phase by phase (plan, series, direct
    sums: the kernel's stats time each); `call`: the median remainder per call."""
    import numpy as np

    def work(s: Timed) -> dict[str, float]:
        return {**s.stats, "M": s.M, "N": s.N, "d": s.d, "clouds": s.M}

    st = [s.stats for s in samples]
    plan = nnls(
        [[1.0, t["tokens"], t["cells"], t["expanded_pairs"] + t["direct_cell_pairs"]] for t in st],
        [t["plan_s"] for t in st],
    )
    ser = nnls(
        [[_series_rows(work(s)) + 1.0, s.stats["expanded_pairs"]] for s in samples],
        [max(s.stats["expand_s"], 1e-6) for s in samples],
    )
    dirs = nnls(
        [[t["direct_pairs"] + 1.0, t["direct_keys"], t["direct_cell_pairs"]] for t in st],
        [max(s.stats["direct_s"], 1e-6) for s in samples],
    )
    c = dict(zip(("token", "cell", "cell_pair"), plan[1:], strict=True))
    c |= {"series": ser[0], "expanded_pair": ser[1]}
    c |= dict(zip(("direct_pair", "direct_key", "direct_cell_pair"), dirs, strict=True))
    rest = [s.seconds - cluster_seconds(work(s), {**c, "call": 0.0}) for s in samples]
    return {"call": max(0.0, float(np.median(rest))), **{k: float(v) for k, v in c.items()}}


def nnls(rows: list[list[float]], seconds: list[float]) -> np.ndarray:
    """Non-negative least squares relative to each time (every sample weighs alike)."""
    import numpy as np
    from scipy.optimize import nnls as solve

    t = np.asarray(seconds, float)
    x: np.ndarray = solve(np.asarray(rows, float) / t[:, None], np.ones_like(t))[0]
    return x
