"""Transport solvers behind `attnflow.transport.wasserstein.w2` (private; the public entry is `w2`).

Costs on the sphere, POT's network simplex, and the debiased Sinkhorn divergence with a rigorous
bracket of the exact W2 (log-domain potentials). Every solver takes weights a (N,), b (K,) summing
to 1: the measures sum_i a_i delta_{x_i} and sum_j b_j delta_{y_j}. The few-atoms path is `_atoms`.

Nothing here imports POT at module level (`import ot` is slow): `emd` imports it when called.
"""

from __future__ import annotations

import math
from typing import Literal, TypedDict, overload

import numpy as np

from ..measures.geometry import geodesic_distance

COSTS = ("chordal", "geodesic")
#: Over-relaxation of the Sinkhorn updates (1 = plain Sinkhorn; 1 < omega < 2 converges faster).
OMEGA = 1.8
#: Smallest reg, relative to the largest cost, that Sinkhorn accepts. The potentials are of the size
#: of the costs, so in float64 the exponents (f_i + g_j - M_ij) / reg carry a rounding error of about
#: 2.2e-16 max(M) / reg; below reg = 2.2e-7 max(M) it exceeds the stopping tolerance (1e-9 on the
#: marginal), which then certifies nothing (measured: reg = 1e-300 gave a value 0.05 below the exact
#: W2, 5000 iterations unconverged, and a NaN upper bound).
REG_MIN_REL = 1e-6


# ------------------------------------------------------------------------------------------ costs


def cost_matrix(X: np.ndarray, Y: np.ndarray, cost: str) -> np.ndarray:
    """Pairwise cost (N, K): |x - y|^2 or arccos(<x, y>)^2, from differences (no cancellation)."""
    from scipy.spatial.distance import cdist

    if cost == "chordal":
        return cdist(X, Y, "sqeuclidean")
    return (2.0 * np.arctan2(cdist(X, Y), cdist(X, -Y))) ** 2


def pointwise_cost(X: np.ndarray, Y: np.ndarray, cost: str) -> np.ndarray:
    """Cost between matched rows, broadcasting: (..., d) x (..., d) -> (...)."""
    if cost == "chordal":
        diff = X - Y
        return np.sum(diff * diff, axis=-1)
    return geodesic_distance(X, Y) ** 2


# ------------------------------------------------------------------------------ network simplex


@overload
def emd(a: np.ndarray, b: np.ndarray, M: np.ndarray, plan: Literal[False] = ...) -> float: ...
@overload
def emd(a: np.ndarray, b: np.ndarray, M: np.ndarray, plan: Literal[True]) -> tuple[float, np.ndarray]: ...


def emd(a: np.ndarray, b: np.ndarray, M: np.ndarray, plan: bool = False) -> float | tuple[float, np.ndarray]:
    """Exact OT cost by POT's network simplex; raises unless POT reports an optimal solution.

    With plan=True returns (cost, G), G (N, K) the optimal plan.
    """
    try:
        import ot
    except ImportError:  # pragma: no cover - POT is a declared dependency
        raise ImportError(
            "exact W2 between clouds of different sizes or non-uniform weights needs POT "
            "(pip install pot); equal-size uniform clouds use SciPy's assignment solver"
        ) from None
    iters = int(max(1_000_000, 200 * M.size))
    G, log = ot.emd(a, b, M, numItermax=iters, log=True)
    if log.get("result_code", 1) != 1 or log.get("warning"):
        raise RuntimeError(
            f"exact W2 did not reach an optimal solution ({log.get('warning')}); "
            "use method='sinkhorn' or method='subsample'"
        )
    return (float(log["cost"]), G) if plan else float(log["cost"])


# ------------------------------------------------------------------------------------- Sinkhorn

# Why a hand-written Sinkhorn and not POT's (measured with POT 0.9.7, SciPy 1.17, N = K = 300 and
# 1000 uniform on S^2, default reg, one process, same bracket code):
# - ot.sinkhorn(method="sinkhorn_log") gives the same potentials and bracket but has no
#   over-relaxation or eps-scaling warm start: about 1900 iterations for the (a, b) problem instead
#   of 155, and a symmetric one hit the 5000-iteration cap unconverged; each iteration is ~10x slower
#   (scipy.special.logsumexp: 5.4 ms vs 0.5 ms for a 300 x 300 matrix). w2 took 75 s instead of
#   0.9 s at N = 300 and reported converged=False; at N = 1000, 64 ms per iteration (minutes).
# - method="sinkhorn_stabilized" (matrix-vector products) returns a zero plan at N = 1000 (the
#   kernel underflows). method="sinkhorn_epsilon_scaling" solves the (a, b) problem at N = 300 in
#   0.5 s but leaves the symmetric (a, a) one unconverged after 50,000 iterations, and at N = 1000
#   did not finish the (a, b) problem in 400 s.
# POT stays the independent reference in the tests (same plan and entropic value).


def lse(Z: np.ndarray, axis: int) -> np.ndarray:
    """log sum exp along axis (NumPy; ~10x faster here than scipy.special.logsumexp)."""
    m = Z.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(Z - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def sinkhorn_potentials(
    a, b, M, reg, max_iter, tol, symmetric=False
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Entropic OT potentials (f, g) for min <P, M> + reg KL(P | a x b), in the log domain.

    P_ij = a_i b_j exp((f_i + g_j - M_ij) / reg). Epsilon-scaling from max M down to reg (halving,
    with averaged updates as in Feydy et al. 2019), then alternating updates until the L1 error of
    the row marginal is below tol (columns are exact). For a symmetric problem (a = b, M = M^T) the
    symmetric fixed point f = g is iterated instead.
    """
    la, lb = np.log(a), np.log(b)

    def f_of(g, eps):  # softmin over j: f_i = -eps log sum_j b_j exp((g_j - M_ij) / eps)
        return -eps * lse(lb[None, :] + (g[None, :] - M) / eps, axis=1)

    def g_of(f, eps):
        return -eps * lse(la[:, None] + (f[:, None] - M) / eps, axis=0)

    f, g = np.zeros(len(a)), np.zeros(len(b))
    eps = max(float(M.max()), reg)
    while True:
        if symmetric:
            f = g = 0.5 * (f + f_of(f, eps))
        else:
            f, g = 0.5 * (f + f_of(g, eps)), 0.5 * (g + g_of(f, eps))
        if eps <= reg:
            break
        eps = max(0.5 * eps, reg)
    if symmetric:
        for it in range(1, max_iter + 1):
            f_next = f_of(f, reg)
            err = float(a @ np.abs(np.expm1((f - f_next) / reg)))
            if err < tol:
                return f, f, it, True
            f = 0.5 * (f + f_next)
        return f, f, max_iter, False
    # over-relaxed alternating updates (omega = OMEGA); every 5th step the pair (f, g_of(f)), whose
    # columns are exact, is checked on its row marginal
    for it in range(1, max_iter + 1):
        f = (1 - OMEGA) * f + OMEGA * f_of(g, reg)
        g = (1 - OMEGA) * g + OMEGA * g_of(f, reg)
        if it % 5 == 0 or it == max_iter:
            g_c = g_of(f, reg)
            err = float(a @ np.abs(np.expm1((f - f_of(g_c, reg)) / reg)))
            if err < tol:
                return f, g_c, it, True
    return f, g_c, max_iter, False


def round_plan(P: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Altschuler-Weed-Rigollet rounding: a plan with exactly the marginals a, b, close to P."""
    r = P.sum(axis=1)
    P = P * np.minimum(1.0, a / np.where(r > 0, r, 1.0))[:, None]
    c = P.sum(axis=0)
    P = P * np.minimum(1.0, b / np.where(c > 0, c, 1.0))[None, :]
    ea, eb = a - P.sum(axis=1), b - P.sum(axis=0)
    s = ea.sum()
    if s > 0:
        P = P + np.outer(ea, eb) / s
    return P


class Sinkhorn(TypedDict):
    """What `sinkhorn_divergence` returns (its docstring says each entry)."""

    value: float
    bounds: tuple[float, float]
    error: float
    reg: float
    n_iter: int
    converged: bool


def sinkhorn_divergence(X, Y, a, b, cost, reg, max_iter=5000, tol=1e-9) -> Sinkhorn:
    """Debiased Sinkhorn divergence S = OT_r(a, b) - (OT_r(a, a) + OT_r(b, b)) / 2, and a rigorous
    bracket [L, U] of the exact W2^2 from the (a, b) potentials: L the dual value of their
    c-transforms, U the cost of the rounded plan.

    reg: the regularisation (None: 0.5% of the mean cost under the product coupling). Returns value
    (sqrt S), bounds (sqrt L, sqrt U), error (the bracket's reach from value), reg, n_iter, converged.
    """
    M = cost_matrix(X, Y, cost)
    if reg is None:
        # 0.5% of the mean cost under the product coupling (all points equal: any reg will do)
        reg = 0.005 * float(a @ M @ b) or 1e-3
    if reg < REG_MIN_REL * float(M.max()):
        raise ValueError(
            f"reg = {reg:.3g} is below {REG_MIN_REL:g} x the largest cost ({float(M.max()):.3g}), where the "
            "float64 Sinkhorn iteration cannot be certified; use reg >= "
            f"{REG_MIN_REL * float(M.max()):.3g} (default: 0.5% of the mean cost), or method='exact'"
        )
    its, conv = [], []

    def ot_eps(p, q, C, symmetric=False):
        f, g, n, ok = sinkhorn_potentials(p, q, C, reg, max_iter, tol, symmetric)
        its.append(n)
        conv.append(ok)
        return f, g, float(p @ f + q @ g)

    f, g, ab = ot_eps(a, b, M)
    _, _, aa = ot_eps(a, a, cost_matrix(X, X, cost), symmetric=True)
    _, _, bb = ot_eps(b, b, cost_matrix(Y, Y, cost), symmetric=True)
    S = ab - 0.5 * (aa + bb)
    # lower bound: c-transforms make (f', g') dual feasible, so <a, f'> + <b, g'> <= W2^2
    g2 = np.min(M - f[:, None], axis=0)
    f2 = np.min(M - g2[None, :], axis=1)
    lower = max(float(a @ f2 + b @ g2), 0.0)
    # upper bound: a feasible plan's cost >= W2^2
    with np.errstate(over="ignore"):  # unconverged potentials: an inf upper bound is honest
        P = np.exp((f[:, None] + g[None, :] - M) / reg) * a[:, None] * b[None, :]
    upper = float(np.sum(round_plan(P, a, b) * M))
    if not math.isfinite(upper):  # an overflowed plan bounds nothing from above
        upper = math.inf
    if not math.isfinite(lower):
        lower = 0.0
    value = math.sqrt(max(S, 0.0)) if math.isfinite(S) else math.nan
    lo, hi = math.sqrt(lower), math.sqrt(max(upper, lower))
    # the bracket's reach from the value; NaN never hides in a max: an uncertified value has error inf
    err = max(value - lo, hi - value, 0.0) + 1e-12 if math.isfinite(value) else math.inf  # + round-off
    return {
        "value": value,
        "bounds": (lo, hi),
        "error": err,
        "reg": reg,
        "n_iter": max(its),
        "converged": all(conv),
    }
