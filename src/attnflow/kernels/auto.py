"""Automatic kernel choice: the kernel with the smallest predicted cost on the state, decided cheaply.

Predicted CPU seconds of one evaluation (costs.py: the formulas and the constants, calibrated per
machine by `python -m attnflow.kernels.calibrate`):

    fused, sdpa   closed forms in M, N and d
    truncated     from its plan's counts (truncated.candidate_counts: tree, nearest neighbours,
                  cells and ball counts, no exponential) in a cold state of at most PLAN_MAX_N
                  tokens; else from a sampled plan (truncated_geometry.sampled_counts: N / 16
                  queries, 1024 to 4096, and 256 at 4096 tokens)
    cluster       from its plan's counts (cluster.cloud_plans, cells.Plan.counts)

How a decision stays cheap:

1. Bounds before plans.  SAMPLE queries, each against every token (its counts against up to
   SAMPLE_KEYS of them), give the kept fraction f and the median number of tokens within the cluster
   kernel's series scale of a token, its neighbours (`sample_state`).  Then truncated >= call +
   token M N + pair f M N^2 and cluster >= call + token M N.  A kernel is planned only where its
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
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import check_positive
from . import costs as _costs

if TYPE_CHECKING:
    import torch

    from ..attention import Attention

MIN_N = 4096  # below this the dense kernels take milliseconds: no decision, the cheaper of the two
TRUNCATED_MAX_D = 6  # cells of directions stop paying off in higher dimension
CLUSTER_MAX_D = 5  # C(p + d, d) moments per cell pair grow too fast beyond
SAMPLE = 32  # queries of the kept-fraction sample (all clouds of a batch together)
SAMPLE_KEYS = 16384  # keys of the sample's counts (its queries' maximum scores take every key)
HOT = 0.1  # above this sampled kept fraction a state is hot ...
DENSE = 256  # ... and the cluster kernel is not planned unless tokens have this many neighbours
SPARSE = 64  # nor, in any state, unless they have this many (2 LEAF_MIN: its cells stay small)
CANDIDATES = ("fused", "sdpa", "truncated", "cluster")
PLAN_MAX_N = 4096  # above this the truncated kernel is priced by a sampled plan (median 4x cheaper)
HOT_SAMPLE = 256  # the fewest queries of a sampled plan in a hot state of at most PLAN_MAX_N tokens
MARGIN = 0.1  # a kernel is not planned unless its bound is this much below the best prediction
SURE = 4.0  # ... and is taken unpriced where its bound is below the best by this factor (sampled plans)
SAMPLE_ROWS = 64  # rows compared to tell whether a state has moved since its decision
MOVE_TOL = 0.05  # largest move of a sampled row (chordal) that keeps a decision
REUSE_MAX = 100  # uses of a kept decision before it is made afresh
KEEP = 8  # decisions kept (the most recent)


@dataclass(frozen=True)
class Sampled:
    """What SAMPLE queries tell about a state, exactly on the sample: `kept`, the fraction of keys
    within the truncated kernel's cutoff of each query's maximum score; `neighbours`, the median
    number of tokens within the cluster kernel's expansion scale h = sqrt(rho / (beta ||B||)) of a
    sampled token (rho: its series radius), which says how large its cells can grow."""

    kept: float
    neighbours: float


def sample_state(
    X: torch.Tensor, att: Attention, cutoff: float | None = None, sample: int = SAMPLE, seed: int = 0
) -> Sampled:
    """`Sampled` statistics of X (M, N, d) or (N, d) for att (finite beta): `sample` queries drawn
    with `seed`, spread over the M clouds, each against all N tokens of its cloud for its maximum
    score, and against SAMPLE_KEYS of them drawn with it (all where N is at most that) for the
    counts, scaled by N / SAMPLE_KEYS (4.4 against 7.0 ms at N = 65536)."""
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
    B = torch.tensor(att.B, dtype=torch.float64, device=X3.device)
    cos_h = 1.0 - _series_radius(d) / (2.0 * beta * max(att.norm_B, 1e-300))  # |x_j - x_i| <= h
    kept, near = 0, []
    for m in range(M):
        Xm = X3[m].to(torch.float64)
        xs = Xm[torch.as_tensor(rng.choice(N, size=per, replace=False), device=X3.device)]  # (per, d)
        b = xs @ B  # (per, d): rows b_i = B^T x_i
        S = torch.mm(b, Xm.T)  # (per, N) scores <b_i, x_j>
        top = S.amax(dim=1, keepdim=True)
        if n_keys < N:
            Xm = Xm[torch.as_tensor(rng.choice(N, size=n_keys, replace=False), device=X3.device)]
            S = torch.mm(b, Xm.T)
        kept += int(torch.count_nonzero(S > top - cutoff / beta))
        near.append(torch.count_nonzero(torch.mm(xs, Xm.T) >= cos_h, dim=1))
    scale = N / n_keys
    return Sampled(kept / (M * per * n_keys), float(torch.cat(near).double().median()) * scale)


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


def _dtype(X: torch.Tensor) -> str:
    return "float32" if str(X.dtype).endswith("float32") else "float64"


def _variant(X: torch.Tensor) -> str:
    from .fused import variant

    return variant(X.shape[-1], X.device)


def dense_cost(kernel: str, M: int, N: int, d: int, variant: str, constants: dict | None = None) -> float:
    """Predicted seconds of "fused" (variant: backend) or "sdpa" (variant: dtype) on M clouds of N;
    constants: the kernel's terms (default: costs.active())."""
    c = _costs.active()[kernel][variant] if constants is None else constants
    return M * (c["call"] + N * N * (c["pair"] + c["pair_d"] * d))


def truncated_cost(
    counts: Mapping[str, float], M: int, N: int, variant: str, constants: dict | None = None
) -> float:
    """Predicted seconds of the truncated kernel from `truncated.candidate_counts` (or its stats, or
    `sampled_counts`)."""
    c = _costs.active()["truncated"][variant] if constants is None else constants
    return M * c["call"] + c["token"] * M * N + c["pair"] * counts["pairs"] + c["key"] * counts["keys"]


def cluster_cost(
    counts: dict[str, int], d: int, variant: str = "compiled", clouds: int = 1, constants: dict | None = None
) -> float:
    """Predicted seconds of the cluster kernel from the work counts of cells.Plan.counts (summed over
    `clouds` clouds, the largest series order)."""
    c = _costs.active()["cluster"][variant] if constants is None else constants
    p = counts["order"]
    rows = (
        math.comb(p + 1 + d, d) * counts["moment_rows"] + math.comb(p + d, d) * (d + 1) * counts["eval_rows"]
    )
    return (
        clouds * c["call"]
        + c["token"] * counts["tokens"]
        + c["cell"] * counts["cells"]
        + c["cell_pair"] * (counts["expanded_pairs"] + counts["direct_cell_pairs"])
        + c["direct_pair"] * counts["direct_pairs"]
        + c["direct_key"] * counts["direct_keys"]
        + c["direct_cell_pair"] * counts["direct_cell_pairs"]
        + c["series"] * rows
        + c["expanded_pair"] * counts["expanded_pairs"]
    )


def cluster_counts(X: torch.Tensor, att: Attention, weights=None) -> dict[str, int]:
    """Work counts of the cluster kernel on X (M, N, d), summed over the clouds (largest order), from
    its plans (cluster.cloud_plans: kept for the kernel)."""
    from .cluster import cloud_plans

    total: dict[str, int] = {}
    for plan in cloud_plans(X, att, weights=weights):
        for key, value in plan.counts().items():
            total[key] = max(total.get(key, 0), value) if key == "order" else total.get(key, 0) + value
    return total


def _bounds(X: torch.Tensor, sampled: Sampled, table: _costs.Costs) -> dict[str, float]:
    """Lower bounds on the truncated and cluster kernels' seconds on X (M, N, d) from its sample: inf
    where they do not apply, and for the cluster kernel where its cells cannot grow (module
    docstring, 1.)."""
    M, N, d = X.shape
    v = _variant(X)
    out = {"truncated": math.inf, "cluster": math.inf}
    if d > TRUNCATED_MAX_D:
        return out
    c = table["truncated"][v]
    out["truncated"] = M * c["call"] + c["token"] * M * N + c["pair"] * sampled.kept * M * N * N
    sparse = sampled.neighbours < SPARSE or (sampled.kept > HOT and sampled.neighbours < DENSE)
    if d <= CLUSTER_MAX_D and not sparse:
        c = table["cluster"][v]
        out["cluster"] = M * (c["call"] + c["cell"]) + c["token"] * M * N
    return out


def predict_costs(X: torch.Tensor, att: Attention, weights=None) -> dict[str, float]:
    """Predicted seconds of one evaluation of each candidate kernel on X (M, N, d) (finite beta).

    "truncated" and "cluster" are inf where they do not apply (d above TRUNCATED_MAX_D,
    CLUSTER_MAX_D) or are not worth pricing (module docstring, 1.): their plans are not computed
    then.  The truncated kernel is priced by its plan in a cold state of at most PLAN_MAX_N tokens
    (the kernel takes it), else by a sampled plan, after the cluster kernel; where it is taken
    without a price, its entry is its lower bound.
    """
    from .truncated_geometry import candidate_counts, sampled_counts

    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    M, N, d = X3.shape
    v = _variant(X3)
    table = _costs.active()  # read once: it checks the calibration file
    dense = "torch" if v == "torch" else "compiled"
    out = {
        "fused": dense_cost("fused", M, N, d, dense, table["fused"][dense]),
        "sdpa": dense_cost("sdpa", M, N, d, _dtype(X3), table["sdpa"][_dtype(X3)]),
        "truncated": math.inf,
        "cluster": math.inf,
    }
    if X3.device.type != "cpu":
        out["fused"] = out["sdpa"]  # the fused kernel runs torch's SDPA there
    if d > TRUNCATED_MAX_D:
        return out
    sampled = sample_state(X3, att)
    bounds = _bounds(X3, sampled, table)
    by_sample = N > PLAN_MAX_N or sampled.kept > HOT  # the truncated kernel priced by a sampled plan
    for name in sorted(bounds, key=lambda k: (k == "truncated" and by_sample, bounds[k])):
        best = min(out.values())
        if not bounds[name] < (1.0 - MARGIN) * best:
            continue
        if name == "cluster":
            out[name] = cluster_cost(
                cluster_counts(X, att, weights), d, v, clouds=M, constants=table["cluster"][v]
            )
        elif by_sample and SURE * bounds[name] < best:
            out[name] = bounds[name]
        else:
            n = None if N > PLAN_MAX_N else max(HOT_SAMPLE, N // 16)  # a hot state: 256 of 4096
            counts = (
                sampled_counts(X, att, weights=weights, n=n)
                if by_sample
                else candidate_counts(X, att, weights=weights)
            )
            out[name] = truncated_cost(counts, M, N, v, table["truncated"][v])
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
    fingerprint: tuple = ()
    rows: Any = field(default=None, repr=False)  # the sampled rows of the state decided on


_decisions: list[Decision] = []
_lock = threading.Lock()


@lru_cache(maxsize=16)
def _sample_rows(N: int) -> np.ndarray:
    return np.sort(np.random.default_rng(0).choice(N, size=min(N, SAMPLE_ROWS), replace=False))


def _fingerprint(X: torch.Tensor, att: Attention, weights) -> tuple[tuple, Any]:
    """(what must be equal, the sampled rows) for a kept decision on X (M, N, d)."""
    import torch

    M, N, d = X.shape
    idx = torch.as_tensor(_sample_rows(N))
    rows = X[:, idx.to(X.device)].detach().to("cpu", torch.float64).clone()
    w: tuple = ()
    if weights is not None:
        wt = torch.as_tensor(weights).detach().to("cpu", torch.float64)
        w = (tuple(wt.shape), *wt.reshape(-1, wt.shape[-1])[:, idx].reshape(-1).tolist())
    key = (M, N, d, str(X.dtype), str(X.device), float(att.beta), att.B.tobytes(), _costs.source(), w)
    return key, rows


def _kept(key: tuple, rows) -> Decision | None:
    with _lock:
        for dec in reversed(_decisions):
            if dec.fingerprint == key and dec.reused < REUSE_MAX:
                moved = float((rows - dec.rows).norm(dim=-1).max())
                if moved < MOVE_TOL:
                    dec.reused += 1
                    return dec
    return None


def decide(X: torch.Tensor, att: Attention, weights=None, keep: bool = True) -> Decision:
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
    kernel = min(CANDIDATES, key=lambda k: predicted[k])
    dec = Decision(kernel, predicted, time.process_time() - c0, fingerprint=key, rows=rows)
    if keep:
        with _lock:
            _decisions.append(dec)
            del _decisions[:-KEEP]
    return dec


def forget() -> None:
    """Drop every kept decision (and the plans kept for the kernels, reuse.py)."""
    from . import reuse

    with _lock:
        _decisions.clear()
    reuse.clear()


def dense_pick(X: torch.Tensor) -> str:
    """The cheaper dense kernel on X (M, N, d) by the closed forms of `dense_cost`: "fused" on the
    CPU where its compiled core runs and it is predicted cheaper (from N of about 400 at d = 3 with
    the shipped constants: its fixed cost per call is larger, its cost per pair 2.8 times smaller),
    else "sdpa" (off the CPU the fused kernel is torch's SDPA)."""
    M, N, d = X.shape if X.dim() == 3 else (1, *X.shape)
    if X.device.type != "cpu" or _variant(X) != "compiled":
        return "sdpa"
    table = _costs.active()  # read once: it checks the calibration file
    fused = dense_cost("fused", M, N, d, "compiled", table["fused"]["compiled"])
    return "fused" if fused < dense_cost("sdpa", M, N, d, _dtype(X), table["sdpa"][_dtype(X)]) else "sdpa"


def choose_kernel(X: torch.Tensor | None, att: Attention, weights=None) -> str:
    """Name of the kernel to use on the state X (M, N, d): "zero" when beta = inf, "sdpa" without a
    state, the cheaper dense kernel (`dense_pick`, no decision) for small N (< MIN_N), else
    `decide(X, att, weights).kernel`.

    weights: optional (N,) or (M, N) quadrature weights of the tokens (the cluster kernel's cutoff
    depends on them).
    """
    if math.isinf(att.beta):
        return "zero"
    if X is None:
        return "sdpa"
    if X.shape[-2] < MIN_N:
        return dense_pick(X)
    return decide(X, att, weights).kernel
