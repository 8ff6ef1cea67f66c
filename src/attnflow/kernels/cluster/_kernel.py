"""Collapsed-cluster kernel: cells of tokens, series expansions between cells, a certified bound.

    v_i = P_{x_i}^perp ( sum_j w_j e^{s_ij} V x_j / sum_j w_j e^{s_ij} ),   s_ij = beta b_i . x_j,
    b_i = B^T x_i,   w_j the quadrature weights (uniform 1/N by default).

Cells (cells.py).  The nodes of a k-d tree on the tokens (sliding-midpoint cuts of the widest
coordinate) are taken top down as cells: a node is cut while it holds more than `leaf_max` tokens,
or more than `leaf_min` and its series would not be valid with itself (below).  Every cell is a key
cell with centre c_S (midpoint of the box of its x_j, half-widths hx_S) and a query cell with centre
b_T (midpoint of the box of its b_i, half-widths hb_T).

Expansion.  For i in a query cell T and j in a key cell S write b_i = b_T + delta_i, x_j = c_S + dy_j.
Exactly

    s_ij = beta b_i . c_S  +  beta b_T . dy_j  +  z_ij,     z_ij = beta delta_i . dy_j,
    |z_ij| <= rho_TS = beta sum_l hb_Tl hx_Sl.

The first term belongs to the query, the second (the tilt, up to beta |b_T| |dy| in size) to the
key: both are kept exactly.  Only e^z is replaced, by the polynomial q(z) = sum_{k<=p} c_k z^k that
interpolates e^z at the p + 1 Chebyshev points of [-rho, rho].  By the multinomial theorem
q(delta . dy) = sum_{|a|<=p} c_|a| |a|!/a! delta^a dy^a, so the pair (T, S) costs the moments
sum_j w_j e^{tilt_j} dy_j^a (|a| <= p + 1, which also give the moments of x_j = c_S + dy_j) and one
dot product per query and output: O((n_T + n_S) C(p + d, d) d) work instead of O(n_T n_S d).
Pairs with rho_TS > rho, and pairs too small for the series to pay (costs.py), are summed
directly, by torch's fused attention on the padded keys of each query cell with a sink key that
returns the shifted sums themselves (`_fused`).

Error bound.  Interpolation at Chebyshev points gives |e^z - q(z)| <= rho^{p+1} e^rho / (2^p (p+1)!)
for |z| <= rho, and e^z >= e^{-rho}: every expanded term w_j e^{s_ij} is replaced by one within a
relative eps_e = rho^{p+1} e^{2 rho} / (2^p (p+1)!) of it.  rho is the largest value with
eps_e <= tol_e (`cells.series`; then the lowest order whose rho covers the largest rho_TS in use).
Dropped keys: with m_i = max_j s_ij (exact, by a nearest-neighbour query as in truncated/_kernel.py, on keys
lifted to one sphere so that it holds off the unit sphere too: Runge-Kutta stages are evaluated
there), attained at j*, and cutoff_i = log(1 / (w_{j*} tol_d)), a key j is dropped only when
s_ij < m_i - cutoff_i, and then lies outside the ball of truncated/_kernel.py around b_i / |b_i|; a key cell
is dropped for a query cell only when none of its keys is in any ball of the query cell.  The dropped
mass is D_i <= e^{m_i - cutoff_i} <= tol_d w_{j*} e^{m_i} <= tol_d Z_i.  With the row sums Z_i, the
numerators N_i (|N_i| <= R Z_i, R = max_j |x_j| = 1 on the sphere) and y_i = N_i / Z_i, all terms
positive,

    |y^_i - y_i| <= 2 R (eps_e + tol_d) / ((1 - eps_e)(1 - tol_d)),   |v^_i - v_i| <= ||V||_2 |y^_i - y_i|.

tol_e = tol_d = 0.24 tol make |v^_i - v_i| <= tol ||V||_2 R for every token; tol = 1e-10 by default
(then rho = 0.177 at p = 6, the order for d = 3; 0.855 at p = 10).  Floating point adds the rounding of
the scores that every float64 kernel shares (about beta ||B|| 1e-16) and the series' own rounding,
at most about C(p + d, d) e^{2 rho} 1e-16.

Stability.  Every exponential is shifted: direct scores by m_i, tilts by their maximum over the key
cell (t_TS), the query factor by m_i: e^{beta b_i . c_S + t_TS - m_i} <= e^rho, so nothing
overflows at any beta.  The series runs in the scaled variables dy / h and beta h delta, so its
powers stay near 1.  float32 input: the geometry and the expansions run in float64, the direct pairs
in float32 (error about beta ||B|| 1e-7, as for the dense kernels; on the compiled path by the fused
core's float32 twin, fused.py).  Memory: O(N d) for the geometry, the moments of at most about
BLOCK_ELEMENTS / C(p + d + 1, d) pairs at a time and padded batches of at most about BLOCK_ELEMENTS
numbers.

Here: the kernel, one cloud after the other.  The plans of the clouds and their settings live in
`_plan`, the expanded and the direct sums of one cloud in `_sums`; the public names are importable
from the package (`attnflow.kernels.cluster`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from ..._threads import intra_op_threads as _threads
from .. import cells as _cells
from ..common import matrices_like, tangent
from ._plan import DEFAULT_TOL, _batched_plans, _cloud_weights
from ._sums import _Cloud, _direct, _expand

if TYPE_CHECKING:
    from ...attention import Attention
    from ..common import Stats


def _average_one(
    X: torch.Tensor,
    w: torch.Tensor,
    att: Attention,
    beta: float,
    plan: _cells.Plan,
    threads: int,
    stats: Stats,
) -> torch.Tensor:
    """Softmax average sum_j w_ij x_j of one cloud X (N, d) with weights w (N,) and its plan: (N, d),
    X's dtype.

    Adds to stats the work counts and the CPU seconds of the moments and series evaluation and of
    the direct sums ("expand_s", "direct_s")."""
    f64, dev = torch.float64, X.device
    c0 = time.process_time()
    perm = torch.as_tensor(plan.perm, device=dev)
    B = torch.tensor(att.B, dtype=f64, device=dev)
    Xp = X[perm].to(f64)
    cl = _Cloud(
        plan=plan,
        Xp=Xp,
        bp=Xp @ B,
        wp=w[perm].to(f64),
        mp=torch.as_tensor(plan.row_max[plan.perm], dtype=f64, device=dev),
        beta=beta,
        acc=torch.zeros((X.shape[0], X.shape[1] + 1), dtype=f64, device=dev),
        threads=threads,
        stats=stats,
    )
    _expand(cl)
    c1 = time.process_time()
    if X.dtype == f64:
        _direct(cl, cl.Xp, cl.bp, cl.wp, cl.mp)
    else:
        X32 = X[perm]
        _direct(cl, X32, X32 @ B.to(X.dtype), cl.wp.to(X.dtype), cl.mp.to(X.dtype))
    out = torch.empty_like(X)
    out[perm] = (cl.acc[:, 1:] / cl.acc[:, :1]).to(X.dtype)
    c2 = time.process_time()
    counts = plan.counts()
    for key in ("tokens", "cells", "expanded_pairs", "direct_cell_pairs", "direct_keys", "kept_pairs"):
        cl.count(key, counts[key])
    stats["order"] = max(stats["order"], counts["order"])
    for key, value in (("expand_s", c1 - c0), ("direct_s", c2 - c1)):
        stats[key] = stats.get(key, 0.0) + value
    return out


def velocity_cluster(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    tol: float = DEFAULT_TOL,
    order: int | None = None,
    leaf_min: int = _cells.LEAF_MIN,
    leaf_max: int = _cells.LEAF_MAX,
    costs: dict[str, float] | None = None,
    stats: Stats | None = None,
) -> torch.Tensor:
    """Tangent velocity of every token, cell pairs by certified series expansions or directly.

    X: (M, N, d) (or (N, d)) unit rows, float64 or float32; att: Attention with finite beta.
    betas: optional (M,) inverse temperatures, one per cloud.  weights: optional (M, N) positive
    quadrature weights (None: uniform).  tol: |v^_i - v_i| <= tol ||V||_2 for every token (see the
    module docstring).  order: series order p (default by d, ORDERS).  leaf_min, leaf_max: cells hold
    at most leaf_max tokens and are not cut below leaf_min.  costs: the cost constants deciding which
    valid cell pairs are expanded (`cells.plan`; default: the active constants of costs.py).
    stats: a dict to fill with the work counts of `cells.Plan.counts`, summed over the clouds (the
    largest series order for "order"), and the CPU seconds of the plans (0 where a plan made for
    `kernel="auto"` was reused), the expansions and the direct sums ("plan_s", "expand_s",
    "direct_s").
    Returns (M, N, d) (or (N, d)) like X.
    """
    squeeze = X.dim() == 2
    c0 = time.process_time()
    X3, beta_list, plans = _batched_plans(X, att, betas, weights, tol, order, leaf_min, leaf_max, costs)
    M, N, _ = X3.shape
    w = _cloud_weights(weights, M, N, X3)
    stats = {} if stats is None else stats
    for key in _cells.COUNTS:
        stats.setdefault(key, 0)
    stats["plan_s"] = stats.get("plan_s", 0.0) + time.process_time() - c0
    _, V = matrices_like(att, X3)
    out = torch.empty_like(X3)
    threads = torch.get_num_threads()
    with _threads(1):  # small operations run on one thread; large batches take all (PARALLEL_WORK)
        for m in range(M):
            y = _average_one(X3[m].contiguous(), w[m], att, beta_list[m], plans[m], threads, stats)
            out[m] = y @ V.T
    out = tangent(X3, out)
    return out.squeeze(0) if squeeze else out
