"""Automatic kernel choice: the kernel with the smallest predicted cost on the state, decided cheaply.

The candidates are the registered kernels with a cost model (registry.py: a KernelSpec's
CostModel), in their order; each predicts the CPU seconds of one evaluation on the state (the
shipped kernels' models: pricing.py; their constants calibrated per machine by `python -m
attnflow.kernels.calibrate`, costs.py):

    fused, sdpa   closed forms in M, N and d
    truncated     from its plan's counts (truncated.candidate_counts: tree, nearest neighbours,
                  cells and ball counts, no exponential) in a cold state of at most PLAN_MAX_N
                  tokens; else from a sampled plan (truncated.sampled_counts: N / 16
                  queries, 1024 to 4096, and 256 at 4096 tokens)
    cluster       from its plan's counts (cluster.cloud_plans, cells.Plan.counts)

How a decision stays cheap (the truncated and cluster kernels' constants PLAN_MAX_N, SURE, HOT,
DENSE, SPARSE and their pricing: pricing.py):

1. Bounds before plans.  SAMPLE queries, each against every token (its counts against up to
   SAMPLE_KEYS of them), give the kept fraction f and the median number of tokens within the cluster
   kernel's series scale of a token, its neighbours (`sample_state`).  Then truncated >= call +
   token M N + pair f M N^2 and cluster >= call + token M N (a cost model's `bound`; a closed
   form has none and is priced first).  A kernel is planned only where its
   bound is MARGIN below the best prediction so far (a plan that can gain less is not worth making);
   candidates are planned in increasing order of their bound, but a truncated kernel priced by a
   sampled plan comes after the cluster kernel (the cluster kernel takes its plan, the truncated
   kernel does not take a sampled one), and it is taken unpriced, at its bound, where that is SURE
   times below the best (on the benchmark's 24 states the truncated kernel took 1.0 to 3.4 times its
   bound).  The cluster kernel is not planned where tokens have fewer than SPARSE neighbours, or
   fewer than DENSE in a hot state (f > HOT): there its cells stay as small as the truncated
   kernel's, it sums nearly every kept pair directly after a heavier plan, and it was measured at
   0.9 to 1.5 times the truncated kernel's time where those are few pairs and far slower than the
   fused kernel where they are many (docs/benchmarks.md, "Choosing the kernel").
2. Plans are kept for the kernel (reuse.py): they are the kernels' own first stage, so the kernel
   picked takes its plan instead of computing it again; only the losers' planning is extra.  A
   sampled plan of the truncated kernel costs a quarter of its plan (median; its trees on the keys
   are kept for the kernel), which the kernel then makes only where it is picked.
3. Decisions are kept per cloud (`decide`): a state of the same shape, dtype, device, attention and
   weights whose SAMPLE_ROWS fixed rows moved by less than MOVE_TOL (chordal, every cloud) since a
   decision takes that decision again, at most REUSE_MAX times; then it is decided afresh.

The integrator asks again every AUTO_EVERY steps (dynamics/steppers.py); a loop of `velocity(...,
kernel="auto")` calls asks at every call and gets the kept decision while the state has not moved.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from .._checks import check_positive
from . import costs as _costs
from . import registry
from .pricing import Pricing, Sampled, cluster_counts  # noqa: F401 (cluster_counts: kept here for callers)

if TYPE_CHECKING:
    import torch

    from ..attention import Attention

MIN_N = 4096  # below this the dense kernels take milliseconds: no decision, the cheapest closed form
SAMPLE = 32  # queries of the kept-fraction sample (all clouds of a batch together)
SAMPLE_KEYS = 16384  # keys of the sample's counts (its queries' maximum scores take every key)
MARGIN = 0.1  # a kernel is not planned unless its bound is this much below the best prediction
SAMPLE_ROWS = 64  # rows compared to tell whether a state has moved since its decision
MOVE_TOL = 0.05  # largest move of a sampled row (chordal) that keeps a decision
REUSE_MAX = 100  # uses of a kept decision before it is made afresh
KEEP = 8  # decisions kept (the most recent)
INFINITE = "zero"  # the kernel at beta = inf
NO_STATE = "sdpa"  # the kernel where there is no state to decide on

Fingerprint = tuple[object, ...]  # what must be equal for a kept decision to be taken again


def sample_state(
    X: torch.Tensor, att: Attention, cutoff: float | None = None, sample: int = SAMPLE, seed: int = 0
) -> Sampled:
    """`Sampled` statistics of X (M, N, d) or (N, d) for att (finite beta): `sample` queries drawn
    with `seed`, spread over the M clouds, each against all N tokens of its cloud for its maximum
    score, and against SAMPLE_KEYS of them drawn with it (all where N is at most that) for the
    counts, scaled by N / SAMPLE_KEYS (4.4 against 7.0 ms at N = 65536).  In NumPy on a CPU copy of
    the sampled rows: torch's comparisons and counts on these small matrices cost 2.5 times more
    (0.78 against 0.33 ms at N = 4096, one thread)."""
    import torch

    from .truncated import DEFAULT_CUTOFF

    cutoff = DEFAULT_CUTOFF if cutoff is None else check_positive(cutoff, "cutoff")
    sample = int(check_positive(sample, "sample", integer=True))
    beta = float(att.beta)
    if math.isinf(beta):
        return Sampled(0.0, 0.0)
    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    M, N, d = X3.shape
    per = max(1, min(N, math.ceil(sample / M)))
    n_keys = min(N, SAMPLE_KEYS)
    rng = np.random.default_rng(seed)
    B = np.asarray(att.B, dtype=np.float64)
    cos_h = 1.0 - _series_radius(d) / (2.0 * beta * max(att.norm_B, 1e-300))  # |x_j - x_i| <= h
    kept, near = 0, []
    for m in range(M):
        Xm = X3[m].detach().to("cpu", torch.float64).numpy()
        xs = Xm[rng.choice(N, size=per, replace=False)]  # (per, d)
        b = xs @ B  # (per, d): rows b_i = B^T x_i
        keys = Xm if n_keys == N else Xm[rng.choice(N, size=n_keys, replace=False)]
        G = np.concatenate([b, xs]) @ keys.T  # (2 per, n_keys): scores, then cosines
        top = (G[:per] if n_keys == N else b @ Xm.T).max(axis=1, keepdims=True)  # over all N tokens
        kept += int(np.count_nonzero(G[:per] > top - cutoff / beta))
        near.append(np.count_nonzero(G[per:] >= cos_h, axis=1))
    counts = np.sort(np.concatenate(near))
    scale = N / n_keys
    return Sampled(kept / (M * per * n_keys), float(counts[(counts.size - 1) // 2]) * scale)  # lower median


@lru_cache(maxsize=8)
def _series_radius(d: int) -> float:
    """rho, the cluster kernel's series radius at its default order and tolerance in d dimensions."""
    from . import cells
    from .cluster import DEFAULT_TOL, default_order

    return cells.series(default_order(d), cells.TOL_SHARE * DEFAULT_TOL)[0]


def kept_fraction(
    X: torch.Tensor, att: Attention, cutoff: float | None = None, sample: int = SAMPLE, seed: int = 0
) -> float:
    """Estimated fraction of key-query pairs with beta (x_i^T B x_j - max_k x_i^T B x_k) > -cutoff:
    `sample_state(...).kept` (exact for `sample` queries, each against all N keys where N is at
    most SAMPLE_KEYS; 0.0 when beta = inf)."""
    return sample_state(X, att, cutoff, sample, seed).kept


def _variant(X: torch.Tensor) -> str:
    from .fused import variant

    return variant(X.shape[-1], X.device)


def dense_cost(
    kernel: str, M: int, N: int, d: int, variant: str, constants: Mapping[str, float] | None = None
) -> float:
    """Predicted seconds of a kernel priced in closed form ("fused", variant: backend; "sdpa",
    variant: dtype) on M clouds of N; constants: the kernel's terms (default: costs.active())."""
    c = _costs.active()[kernel][variant] if constants is None else constants
    return _model(kernel).seconds({"M": M, "N": N, "d": d, "clouds": M}, c)


def truncated_cost(
    counts: Mapping[str, float], M: int, N: int, variant: str, constants: Mapping[str, float] | None = None
) -> float:
    """Predicted seconds of the truncated kernel from `truncated.candidate_counts` (or its stats, or
    `sampled_counts`)."""
    c = _costs.active()["truncated"][variant] if constants is None else constants
    return _model("truncated").seconds({**counts, "M": M, "N": N}, c)


def cluster_cost(
    counts: dict[str, int],
    d: int,
    variant: str = "compiled",
    clouds: int = 1,
    constants: Mapping[str, float] | None = None,
) -> float:
    """Predicted seconds of the cluster kernel from the work counts of cells.Plan.counts (summed over
    `clouds` clouds, the largest series order)."""
    c = _costs.active()["cluster"][variant] if constants is None else constants
    return _model("cluster").seconds({**counts, "d": d, "clouds": clouds}, c)


def _model(kernel: str) -> registry.CostModel:
    cost = registry.get(kernel).cost
    if cost is None:
        raise ValueError(f"kernel {kernel!r} has no cost model")
    return cost


def predict_costs(X: torch.Tensor, att: Attention, weights: torch.Tensor | None = None) -> dict[str, float]:
    """Predicted seconds of one evaluation of each candidate kernel (registry.candidates) on X
    (M, N, d) (finite beta).

    Closed forms are priced first; a kernel with a lower bound is inf where it does not apply (d
    above its max_d) or is not worth pricing (module docstring, 1.): its plans are not computed
    then.  Those with a bound are priced in increasing order of it, late ones (the truncated
    kernel's sampled plan) last; where the truncated kernel is taken without a price, its entry is
    its lower bound.
    """
    p = Pricing(X, att, weights, _costs.active())  # the table read once: it checks the calibration file
    models = {s.name: s.cost for s in registry.candidates() if s.cost is not None}
    out = {name: (m.price(p) if m.bound is None else math.inf) for name, m in models.items()}
    d = p.shape[2]
    planned = {n: m for n, m in models.items() if m.bound is not None and (m.max_d is None or d <= m.max_d)}
    if not planned:
        return out
    p.sampled = sample_state(X if X.dim() == 3 else X.unsqueeze(0), att)
    bounds = {name: m.bound(p) for name, m in planned.items() if m.bound is not None}
    late = {name: m.late is not None and m.late(p) for name, m in planned.items()}
    for name in sorted(bounds, key=lambda k: (late[k], bounds[k])):
        p.best = min(out.values())
        if not bounds[name] < (1.0 - MARGIN) * p.best:
            continue
        p.bound = bounds[name]
        out[name] = planned[name].price(p)
    return out


@dataclass
class Decision:
    """A kernel choice: the kernel, the predicted seconds of every candidate (inf: not planned; the
    truncated kernel's bound where it was taken unpriced), the CPU seconds the decision took, and
    how often it has been taken again (`decide`)."""

    kernel: str
    costs: dict[str, float]
    seconds: float
    reused: int = 0
    fingerprint: Fingerprint = ()
    rows: torch.Tensor | None = field(default=None, repr=False)  # the sampled rows of the state decided on


_decisions: list[Decision] = []
_lock = threading.Lock()


@lru_cache(maxsize=16)
def _sample_rows(N: int) -> np.ndarray:
    return np.sort(np.random.default_rng(0).choice(N, size=min(N, SAMPLE_ROWS), replace=False))


def _fingerprint(
    X: torch.Tensor, att: Attention, weights: torch.Tensor | None
) -> tuple[Fingerprint, torch.Tensor]:
    """(what must be equal, the sampled rows) for a kept decision on X (M, N, d)."""
    import torch

    M, N, d = X.shape
    idx = torch.as_tensor(_sample_rows(N))
    rows = X[:, idx.to(X.device)].detach().to("cpu", torch.float64).clone()
    w: tuple[object, ...] = ()
    if weights is not None:
        wt = torch.as_tensor(weights).detach().to("cpu", torch.float64)
        w = (tuple(wt.shape), *wt.reshape(-1, wt.shape[-1])[:, idx].reshape(-1).tolist())
    version = registry.version()  # a kernel registered since: decided afresh
    key = (
        M,
        N,
        d,
        str(X.dtype),
        str(X.device),
        float(att.beta),
        att.B.tobytes(),
        _costs.source(),
        w,
        version,
    )
    return key, rows


def _kept(key: Fingerprint, rows: torch.Tensor) -> Decision | None:
    with _lock:
        for dec in reversed(_decisions):
            if dec.fingerprint == key and dec.reused < REUSE_MAX:
                assert dec.rows is not None  # kept decisions have their rows (decide)
                moved = float((rows - dec.rows).norm(dim=-1).max())
                if moved < MOVE_TOL:
                    dec.reused += 1
                    return dec
    return None


def decide(
    X: torch.Tensor, att: Attention, weights: torch.Tensor | None = None, keep: bool = True
) -> Decision:
    """The kernel for the state X (M, N, d) (finite beta, N >= MIN_N): a kept decision where the
    state has not moved since (module docstring), else the candidate with the smallest
    `predict_costs`, kept when `keep`."""
    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    key, rows = _fingerprint(X3, att, weights)
    if keep:
        found = _kept(key, rows)
        if found is not None:
            return found
    c0 = time.process_time()
    predicted = predict_costs(X, att, weights)
    kernel = min(predicted, key=lambda k: predicted[k])
    dec = Decision(kernel, predicted, time.process_time() - c0, fingerprint=key, rows=rows)
    if keep:
        with _lock:
            _decisions.append(dec)
            del _decisions[:-KEEP]
    return dec


def forget() -> None:
    """Drop every kept decision, the plans kept for the kernels (reuse.py) and the truncated
    kernel's geometry kept across moves: the next call decides and evaluates as in a new process."""
    from . import reuse
    from .truncated import forget_geometry

    with _lock:
        _decisions.clear()
    reuse.clear()
    forget_geometry()


def dense_pick(X: torch.Tensor) -> str:
    """The cheapest kernel priced in closed form on X (M, N, d), no state sampled: "fused" on the CPU
    where its compiled core runs and it is predicted cheaper (from N of about 400 at d = 3 with the
    shipped constants: its fixed cost per call is larger, its cost per pair 2.8 times smaller),
    else "sdpa" (pricing.fused_price)."""
    p = Pricing(X, None, None, _costs.active(), small=True)  # the table read once
    closed = [s for s in registry.candidates() if s.cost is not None and s.cost.bound is None]
    prices = {s.name: s.cost.price(p) for s in closed if s.cost is not None}
    best = min(prices, key=lambda k: prices[k], default=NO_STATE)
    return best if math.isfinite(prices.get(best, math.inf)) else NO_STATE


def choose_kernel(X: torch.Tensor | None, att: Attention, weights: torch.Tensor | None = None) -> str:
    """Name of the kernel to use on the state X (M, N, d): "zero" when beta = inf, "sdpa" without a
    state, the cheaper dense kernel (`dense_pick`, no decision) for small N (< MIN_N), else
    `decide(X, att, weights).kernel`.

    weights: optional (N,) or (M, N) quadrature weights of the tokens (the cluster kernel's cutoff
    depends on them).
    """
    if math.isinf(att.beta):
        return INFINITE
    if X is None:
        return NO_STATE
    if X.shape[-2] < MIN_N:
        return dense_pick(X)
    return decide(X, att, weights).kernel
