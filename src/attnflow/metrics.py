"""Distances and concentration diagnostics on the sphere (MATH.md, "Distances and diagnostics").

W2 between empirical measures, exact, entropic (debiased Sinkhorn, with a rigorous error bracket) or
on seeded subsamples; the exact fast path to a target with few distinct atoms; the synchronous
coupling bound; mass near a subspace; the Lyapunov functional; the mean-field resolution ratio.
Time scales and fits live in `attnflow.fits`.

Nothing here imports POT at module level (`import ot` is slow): it is imported only by the exact
solver for unequal sizes or weights.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, overload

import numpy as np

from ._checks import UNIT_TOL, check_beta, check_points, check_positive, to_numpy
from .fits import (  # re-exported: time scales and fits belong to the metrics toolbox (DESIGN.md)
    BoundFit,
    LinearFit,
    PowerFit,
    RateFit,
    TerminalTime,
    TStar,
    bound_minimum,
    fit_decay_rate,
    fit_min_w2,
    fit_t_star,
    fit_theorem_bound,
    t_star,
    temperature_scale,
    terminal_time,
    theorem_bound,
)
from .sphere import SeedLike, geodesic_distance, rng_from, spacing

__all__ = [
    "BoundFit",
    "LinearFit",
    "PowerFit",
    "RateFit",
    "TStar",
    "TerminalTime",
    "W2Info",
    "W2Series",
    "angle_to_subspace",
    "bound_minimum",
    "coupling_bound",
    "find_atoms",
    "fit_decay_rate",
    "fit_min_w2",
    "fit_t_star",
    "fit_theorem_bound",
    "lyapunov",
    "resolution_ratio",
    "subspace_mass",
    "t_star",
    "temperature_scale",
    "terminal_time",
    "theorem_bound",
    "w2",
    "w2_to_target",
]

COSTS = ("chordal", "geodesic")
METHODS = ("exact", "sinkhorn", "subsample")

#: Largest N * K for the general exact solvers (a dense N x K float64 cost matrix: 128 MB; about 3 s
#: for N = K = 4000 with SciPy's assignment or POT's network simplex on one core).
EXACT_MAX_PAIRS = 16_000_000
#: Largest max(N, K)^2 for the entropic solver (dense N x K, N x N and K x K matrices, a few
#: hundred iterations each): it is not a path to much larger clouds, "subsample" is.
SINKHORN_MAX_PAIRS = 25_000_000
#: Few-atoms path: at most this many distinct target points ...
MAX_ATOMS = 8
#: For k >= 3 atoms: the whole N x k problem goes to POT's network simplex up to this N (its time
#: grows faster than linearly: about 0.07 s at N = 1e4, 8 s at N = 1e5 for k = 3); past it only
#: a band of at most this many tokens does (see _atoms_simplex).
ATOMS_EMD_MAX_N = 20_000
#: Rows equal after rounding to this many decimals count as one atom (the snap is reported).
ATOM_DECIMALS = 9
#: Over-relaxation of the Sinkhorn updates (1 = plain Sinkhorn; 1 < omega < 2 converges faster).
OMEGA = 1.8


@dataclass(frozen=True)
class W2Info:
    """How a W2 value was computed and how far it can be trusted.

    method: solver used ("assignment", "network-simplex", "atoms-sort", "atoms-simplex",
        "single-atom", "sinkhorn", "subsample").
    exact: True when the value is the exact W2 of the given clouds up to round-off (and `error`).
    error: bound or estimate of |value - W2| (0 for exact solvers; the snap of merged atoms for the
        few-atoms path; rigorous bracket width for Sinkhorn; CI half-width for subsampling).
    bounds: rigorous (lower, upper) bracket of W2 (Sinkhorn: dual value and rounded-plan cost).
    ci: 95% confidence interval of the subsample mean (covers subsampling noise, not its bias).
    noise_floor: subsampling only: mean W2 between two independent subsamples of one cloud, the
        scale of the upward bias of subsampled W2.
    """

    method: str
    exact: bool
    cost: str
    error: float = 0.0
    reg: float | None = None
    bounds: tuple[float, float] | None = None
    n_sub: int | None = None
    repeats: int | None = None
    ci: tuple[float, float] | None = None
    noise_floor: float | None = None
    n_atoms: int | None = None
    n_iter: int | None = None
    converged: bool | None = None
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------- checks


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _check_weights(w: Any, n: int, name: str) -> np.ndarray:
    """Non-negative finite weights (n,), normalised to total mass 1; None -> uniform."""
    if w is None:
        return np.full(n, 1.0 / n)
    try:
        w = to_numpy(w).astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D array of {n} non-negative weights") from None
    if w.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) to match its cloud, got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{name} must contain finite non-negative weights")
    total = w.sum()
    if total <= 0:
        raise ValueError(f"{name} must have a positive total mass, got {total}")
    return w / total


def _unit_rows(X: Any, name: str, allow_batch: bool = False) -> np.ndarray:
    """check_points, with float32 (or lower precision) input accepted within 1e-5 of unit norm and
    renormalised in float64 (a float32 trajectory's rows are off by about 1e-7)."""
    A = to_numpy(X)
    low = A.dtype.kind == "f" and A.dtype.itemsize < 8
    P = check_points(A, name, allow_batch=allow_batch, tol=1e-5 if low else UNIT_TOL)
    return P / np.linalg.norm(P, axis=-1, keepdims=True) if low else P


def _check_cloud_pair(X: Any, Y: Any, nx: str = "X", ny: str = "Y") -> tuple[np.ndarray, np.ndarray]:
    X = _unit_rows(X, nx)
    Y = _unit_rows(Y, ny)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"{nx} has d = {X.shape[1]} columns but {ny} has d = {Y.shape[1]}: both clouds must lie on "
            "the same sphere"
        )
    return X, Y


def _check_stack(X: Any, name: str) -> np.ndarray:
    """Unit rows with any leading axes (..., N, d), e.g. (T, N, d) or (T, M, N, d)."""
    A = to_numpy(X)
    if A.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d), e.g. (N, d) or (T, N, d), got {A.shape}")
    flat = A.reshape(-1, *A.shape[-2:]) if A.ndim > 3 else A
    return _unit_rows(flat, name, allow_batch=True).reshape(A.shape)


# ------------------------------------------------------------------------------------------ costs


def _cost_matrix(X: np.ndarray, Y: np.ndarray, cost: str) -> np.ndarray:
    """Pairwise cost (N, K): |x - y|^2 or arccos(<x, y>)^2, from differences (no cancellation)."""
    from scipy.spatial.distance import cdist

    if cost == "chordal":
        return cdist(X, Y, "sqeuclidean")
    return (2.0 * np.arctan2(cdist(X, Y), cdist(X, -Y))) ** 2


def _cost_to_point(X: np.ndarray, y: np.ndarray, cost: str) -> np.ndarray:
    """Cost (N,) from every row of X to one point y (d,)."""
    if cost == "chordal":
        diff = X - y
        return np.einsum("ij,ij->i", diff, diff)
    return geodesic_distance(X, y[None, :]) ** 2


# ------------------------------------------------------------------------------- few-atoms path


def find_atoms(
    Y: np.ndarray, b: np.ndarray, max_atoms: int = MAX_ATOMS
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Distinct rows of Y when there are at most `max_atoms` of them, else None.

    Rows equal after rounding to ATOM_DECIMALS decimals are merged into the first of them. Returns
    (atoms (k, d), masses (k,), snap) where snap = max |y_i - atom(y_i)| bounds the change in W2
    caused by the merge (W2(Y, Y_snapped) <= snap).
    """
    head = np.round(Y[: 4 * max_atoms + 1], ATOM_DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
    if len(np.unique(head, axis=0)) > max_atoms:  # cheap rejection of continuous clouds
        return None
    R = np.round(Y, ATOM_DECIMALS) + 0.0
    labels = np.full(len(Y), -1)
    first: list[int] = []
    rest = np.arange(len(Y))
    while rest.size:  # one pass per distinct row: O(N d k)
        if len(first) == max_atoms:
            return None
        same = np.all(R[rest] == R[rest[0]], axis=1)
        labels[rest[same]] = len(first)
        first.append(int(rest[0]))
        rest = rest[~same]
    atoms = Y[first]
    masses = np.bincount(labels, weights=b, minlength=len(first))
    snap = float(np.max(np.linalg.norm(Y - atoms[labels], axis=1)))
    return atoms, masses, snap


def _two_atom_cost(a: np.ndarray, C: np.ndarray, b: np.ndarray) -> float:
    """Exact OT cost from weights a (N,) to two atoms with masses b (2,), costs C (N, 2).

    The cost is sum_i a_i C_i2 + sum_i pi_i1 (C_i1 - C_i2) with 0 <= pi_i1 <= a_i, sum pi_i1 = b_1: a
    fractional knapsack. Sending mass to atom 1 in increasing order of C_i1 - C_i2 (a sort) is
    optimal; the token where the cumulative mass passes b_1 is split.  The cost is summed as
    sum pi_i1 C_i1 + (a_i - pi_i1) C_i2, all terms >= 0: no cancellation when W2 is tiny.
    """
    order = np.argsort(C[:, 0] - C[:, 1])
    a_sorted = a[order]
    before = np.cumsum(a_sorted) - a_sorted  # mass sent ahead of each token
    to_first = np.clip(b[0] - before, 0.0, a_sorted)
    Cs = C[order]
    return float(to_first @ Cs[:, 0] + (a_sorted - to_first) @ Cs[:, 1])


def _atoms_cost(a: np.ndarray, X: np.ndarray, atoms: np.ndarray, masses: np.ndarray, cost: str) -> tuple:
    """Exact W2^2 from (X, a) to few atoms: O(N k) costs plus a sort (k = 2) or a simplex (k >= 3)."""
    k = len(atoms)
    C = np.stack([_cost_to_point(X, y, cost) for y in atoms], axis=1)
    if k == 1:
        return float(a @ C[:, 0]), "single-atom"
    if k == 2:
        return _two_atom_cost(a, C, masses), "atoms-sort"
    return _atoms_simplex(a, C, masses), "atoms-simplex"


def _smoothed_softmin(CT, a, b, g, eps):
    """Entropic dual of the N x k problem at potentials g (k,): value and soft assignment (k, N)."""
    Z = (g[:, None] - CT) / eps
    m = Z.max(axis=0)
    Z -= m
    np.exp(Z, out=Z)
    s = Z.sum(axis=0)
    Z /= s
    return float(b @ g - eps * (a @ (np.log(s) + m))), Z


def _atom_potentials(CT: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """Approximate optimal atom potentials g (k,) of the N x k problem, costs CT (k, N).

    Damped Newton ascent on the entropic dual (k - 1 free variables, g_0 = 0), eps decreasing from
    0.1 to 1e-4 times the cost scale; O(N k^2) per step, a few steps per eps.
    """
    k = len(b)
    g = np.zeros(k)
    for eps, tol in zip(scale * np.array([1e-1, 1e-2, 1e-3, 1e-4]), [1e-3, 1e-4, 1e-6, 1e-8], strict=True):
        for _ in range(30):
            val, P = _smoothed_softmin(CT, a, b, g, eps)
            pa = P @ a
            grad = b - pa
            if np.abs(grad).sum() < tol:
                break
            H = ((P * a) @ P.T - np.diag(pa)) / eps  # Hessian, negative semi-definite (null: 1)
            try:
                step = np.linalg.solve(H[1:, 1:] - 1e-14 * np.eye(k - 1), -grad[1:])
            except np.linalg.LinAlgError:
                break
            d = np.concatenate([[0.0], step])
            t = 1.0
            while t > 1e-6 and _smoothed_softmin(CT, a, b, g + t * d, eps)[0] < val + 1e-4 * t * (grad @ d):
                t *= 0.5
            g = g + t * d
    return g


def _cyclically_monotone(CT: np.ndarray, support: list[np.ndarray], tol: float) -> bool:
    """Whether potentials g (k,) exist with C_ij - g_j <= C_il - g_l for every token i sending mass
    to atom j and every l: then the plan is optimal (LP complementary slackness).

    support[j]: indices of the tokens sending mass to atom j; CT: costs (k, N). The constraints
    g_l - g_j <= W_jl = min_i (C_il - C_ij) are difference constraints: solvable iff the graph W has
    no negative cycle (Floyd-Warshall on k nodes).
    """
    k = CT.shape[0]
    W = np.full((k, k), np.inf)
    for j, idx in enumerate(support):
        if idx.size:
            W[j] = np.min(CT[:, idx] - CT[j, idx], axis=1)
    np.fill_diagonal(W, np.minimum(np.diag(W), 0.0))
    for m in range(k):
        W = np.minimum(W, W[:, m, None] + W[None, m, :])
    return bool(np.all(np.diag(W) >= -tol))


def _atoms_simplex(a: np.ndarray, C: np.ndarray, b: np.ndarray) -> float:
    """Exact OT cost from weights a (N,) to k >= 3 atoms with masses b, costs C (N, k).

    Small N: POT's network simplex on the whole N x k problem. Large N: near-optimal atom potentials
    g from the entropic dual (Newton on k variables); tokens whose best atom under C - g wins by
    more than a margin delta are fixed to it, the rest (a band along the cell boundaries) go to the
    network simplex with the remaining masses. The combined plan is then certified optimal (its
    support must be c-cyclically monotone: no negative cycle among the k atoms); otherwise delta
    grows. O(N k^2) plus a simplex on the band; raises rather than return an uncertified value.
    """
    N, k = C.shape
    if N <= ATOMS_EMD_MAX_N:
        return _emd(a, b, C)
    scale = float(C.max()) or 1.0
    CT = np.ascontiguousarray(C.T)
    g = _atom_potentials(CT, a, b, scale)
    R = CT - g[:, None]
    cols = np.arange(N)
    best = R.argmin(axis=0)
    r_best = R[best, cols]
    R[best, cols] = np.inf
    margin = R.min(axis=0) - r_best
    del R
    for delta in scale * np.array([1e-4, 1e-3, 1e-2, 1e-1]):
        free = margin <= delta
        if free.sum() > ATOMS_EMD_MAX_N:
            break
        fixed = ~free
        rest = b - np.bincount(best[fixed], weights=a[fixed], minlength=k)
        if np.any(rest < -1e-12):
            continue
        cost = float(a[fixed] @ CT[best[fixed], cols[fixed]])
        support = [np.flatnonzero(fixed & (best == j)) for j in range(k)]
        if free.any():
            sub_cost, plan = _emd(a[free], np.clip(rest, 0.0, None), C[free], plan=True)
            cost += sub_cost
            idx = np.flatnonzero(free)
            support = [np.concatenate([s, idx[plan[:, j] > 0]]) for j, s in enumerate(support)]
        elif np.any(np.abs(rest) > 1e-12):
            continue
        if _cyclically_monotone(CT, support, tol=1e-11 * scale):
            return cost
    raise RuntimeError(
        f"exact W2 to {k} atoms at N = {N}: could not certify an optimal plan on a band of at most "
        f"{ATOMS_EMD_MAX_N} tokens; use method='sinkhorn' or method='subsample'"
    )


# -------------------------------------------------------------------------------------- solvers


def _emd(a: np.ndarray, b: np.ndarray, M: np.ndarray, plan: bool = False) -> Any:
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


def _too_big(N: int, K: int, limit: int, what: str, alternatives: str) -> None:
    if N * K > limit:
        gb = 8 * N * K / 1e9
        raise ValueError(
            f"{what} W2 between N = {N} and K = {K} points needs an N x K cost matrix ({gb:.2g} GB) "
            f"and is limited to N * K <= {limit:.3g}; use {alternatives}"
        )


def _exact_sq(X, Y, a, b, cost, uniform: bool) -> tuple[float, str]:
    """Exact W2^2 of general clouds: assignment (equal sizes, uniform) or network simplex."""
    N, K = len(X), len(Y)
    _too_big(N, K, EXACT_MAX_PAIRS, "exact", "method='subsample' (or 'sinkhorn' for N, K <= 5000)")
    M = _cost_matrix(X, Y, cost)
    if N == K and uniform:
        # Birkhoff: an optimal plan between equal-size uniform clouds is a permutation. SciPy's
        # assignment is as fast as POT's simplex here (measured) and needs no POT import.
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(M)
        return float(M[rows, cols].mean()), "assignment"
    return _emd(a, b, M), "network-simplex"


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


def _lse(Z: np.ndarray, axis: int) -> np.ndarray:
    """log sum exp along axis (NumPy; ~10x faster here than scipy.special.logsumexp)."""
    m = Z.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(Z - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def _sinkhorn_potentials(
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
        return -eps * _lse(lb[None, :] + (g[None, :] - M) / eps, axis=1)

    def g_of(f, eps):
        return -eps * _lse(la[:, None] + (f[:, None] - M) / eps, axis=0)

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


def _round_plan(P: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
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


def _sinkhorn(X, Y, a, b, cost, reg, max_iter=5000, tol=1e-9) -> tuple[float, W2Info]:
    """Debiased Sinkhorn divergence S = OT_r(a, b) - (OT_r(a, a) + OT_r(b, b)) / 2, and a rigorous
    bracket [L, U] of the exact W2^2 from the (a, b) potentials: L the dual value of their
    c-transforms, U the cost of the rounded plan."""
    N, K = len(X), len(Y)
    _too_big(max(N, K), max(N, K), SINKHORN_MAX_PAIRS, "entropic", "method='subsample'")
    M = _cost_matrix(X, Y, cost)
    if reg is None:
        # 0.5% of the mean cost under the product coupling (all points equal: any reg will do)
        reg = 0.005 * float(a @ M @ b) or 1e-3
    reg = check_positive(reg, "reg")
    its, conv = [], []

    def ot_eps(p, q, C, symmetric=False):
        f, g, n, ok = _sinkhorn_potentials(p, q, C, reg, max_iter, tol, symmetric)
        its.append(n)
        conv.append(ok)
        return f, g, float(p @ f + q @ g)

    f, g, ab = ot_eps(a, b, M)
    _, _, aa = ot_eps(a, a, _cost_matrix(X, X, cost), symmetric=True)
    _, _, bb = ot_eps(b, b, _cost_matrix(Y, Y, cost), symmetric=True)
    S = ab - 0.5 * (aa + bb)
    # lower bound: c-transforms make (f', g') dual feasible, so <a, f'> + <b, g'> <= W2^2
    g2 = np.min(M - f[:, None], axis=0)
    f2 = np.min(M - g2[None, :], axis=1)
    lower = max(float(a @ f2 + b @ g2), 0.0)
    # upper bound: a feasible plan's cost >= W2^2
    with np.errstate(over="ignore"):  # unconverged potentials: an inf upper bound is honest
        P = np.exp((f[:, None] + g[None, :] - M) / reg) * a[:, None] * b[None, :]
    upper = float(np.sum(_round_plan(P, a, b) * M))
    value = math.sqrt(max(S, 0.0))
    lo, hi = math.sqrt(lower), math.sqrt(max(upper, lower))
    err = max(value - lo, hi - value, 0.0) + 1e-12  # + round-off
    info = W2Info(
        method="sinkhorn",
        exact=False,
        cost=cost,
        error=err,
        reg=reg,
        bounds=(lo, hi),
        n_iter=max(its),
        converged=all(conv),
        notes="debiased Sinkhorn divergence; bounds are a rigorous bracket of the exact W2",
    )
    return value, info


def _subsample(X, Y, a, b, cost, n_sub, repeats, seed, uniform_a, uniform_b) -> tuple[float, W2Info]:
    """Mean exact W2 over `repeats` seeded subsamples of n_sub points of each cloud."""
    from scipy import stats

    N, K = len(X), len(Y)
    if n_sub is None:
        n_sub = min(N, K, 1000)
    n_sub = int(check_positive(n_sub, "n_sub", integer=True))
    repeats = int(check_positive(repeats, "repeats", integer=True))
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2 to give a confidence interval, got {repeats}")
    rng = rng_from(seed)

    def draw(n, w, uniform):
        if uniform:
            return rng.choice(n, size=min(n_sub, n), replace=False)
        return rng.choice(n, size=n_sub, replace=True, p=w)  # i.i.d. from the weighted measure

    def exact(P, R):
        sq, _ = _exact_sq(P, R, np.full(len(P), 1 / len(P)), np.full(len(R), 1 / len(R)), cost, True)
        return math.sqrt(max(sq, 0.0))

    vals = np.array([exact(X[draw(N, a, uniform_a)], Y[draw(K, b, uniform_b)]) for _ in range(repeats)])
    mean = float(vals.mean())
    half = float(stats.t.ppf(0.975, repeats - 1) * vals.std(ddof=1) / math.sqrt(repeats))
    # noise floor: W2 between two independent subsamples of the same cloud (0 when n_sub >= N, K)
    floor = 0.5 * (
        exact(X[draw(N, a, uniform_a)], X[draw(N, a, uniform_a)])
        + exact(Y[draw(K, b, uniform_b)], Y[draw(K, b, uniform_b)])
    )
    info = W2Info(
        method="subsample",
        exact=False,
        cost=cost,
        error=half,
        n_sub=min(n_sub, max(N, K)),
        repeats=repeats,
        ci=(mean - half, mean + half),
        noise_floor=floor,
        notes="exact W2 of seeded subsamples; the CI covers subsampling noise only. Subsampled W2 is "
        "biased upwards: noise_floor (W2 between two subsamples of one cloud) is its scale, and values "
        "near it cannot be told from 0 at this n_sub",
    )
    return mean, info


# ----------------------------------------------------------------------------------------- w2


@overload
def w2(
    X: Any,
    Y: Any,
    cost: str = ...,
    method: str = ...,
    a: Any = ...,
    b: Any = ...,
    reg: float | None = ...,
    n_sub: int | None = ...,
    seed: SeedLike = ...,
    log: Literal[False] = ...,
    repeats: int = ...,
) -> float: ...


@overload
def w2(
    X: Any,
    Y: Any,
    cost: str = ...,
    method: str = ...,
    a: Any = ...,
    b: Any = ...,
    reg: float | None = ...,
    n_sub: int | None = ...,
    seed: SeedLike = ...,
    *,
    log: Literal[True],
    repeats: int = ...,
) -> tuple[float, W2Info]: ...


@overload
def w2(
    X: Any,
    Y: Any,
    cost: str = ...,
    method: str = ...,
    a: Any = ...,
    b: Any = ...,
    reg: float | None = ...,
    n_sub: int | None = ...,
    seed: SeedLike = ...,
    log: bool = ...,
    repeats: int = ...,
) -> float | tuple[float, W2Info]: ...


def w2(
    X: Any,
    Y: Any,
    cost: str = "chordal",
    method: str = "exact",
    a: Any = None,
    b: Any = None,
    reg: float | None = None,
    n_sub: int | None = None,
    seed: SeedLike = 0,
    log: bool = False,
    repeats: int = 5,
) -> float | tuple[float, W2Info]:
    """Wasserstein-2 distance between the empirical measures sum a_i delta_{x_i} and sum b_j delta_{y_j}.

    X: (N, d), Y: (K, d) unit rows; a, b: weights (normalised to mass 1), uniform by default.
    cost: "chordal" |x - y|^2 (default) or "geodesic" arccos(<x, y>)^2 (radians^2).
    method:
      "exact"     exact value, never approximated: a target (or source) with at most MAX_ATOMS
                  distinct points is solved as an N x k transport problem (k = 2: one sort,
                  O(N log N), about a second at N = 1e6; k >= 3: the network simplex, on a certified
                  band of tokens for large N, a few seconds at N = 1e6); equal-size uniform clouds by
                  optimal assignment (SciPy); otherwise POT's network simplex. Problems past
                  EXACT_MAX_PAIRS raise ValueError suggesting "sinkhorn" or "subsample".
      "sinkhorn"  debiased Sinkhorn divergence with regularisation `reg` (default 0.5% of the mean
                  cost), log domain; info carries a rigorous bracket of the exact W2 and its width.
      "subsample" mean exact W2 over `repeats` seeded subsamples of n_sub points (default
                  min(N, K, 1000)) with a 95% CI.
    Returns W2 (same units as the distance), or (W2, W2Info) with log=True.
    """
    cost = _check_choice(cost, "cost", COSTS)
    method = _check_choice(method, "method", METHODS)
    X, Y = _check_cloud_pair(X, Y)
    uniform_a, uniform_b = a is None, b is None
    a = _check_weights(a, len(X), "a")
    b = _check_weights(b, len(Y), "b")
    uniform_a = uniform_a or bool(np.all(a == a[0]))
    uniform_b = uniform_b or bool(np.all(b == b[0]))
    if not (uniform_a and uniform_b):  # zero-weight points carry nothing: drop them
        X, a, Y, b = X[a > 0], a[a > 0], Y[b > 0], b[b > 0]
    if method == "sinkhorn":
        value, info = _sinkhorn(X, Y, a, b, cost, reg)
    elif method == "subsample":
        value, info = _subsample(X, Y, a, b, cost, n_sub, repeats, seed, uniform_a, uniform_b)
    else:
        value, info = _exact(X, Y, a, b, cost, uniform_a and uniform_b)
    return (value, info) if log else value


def _exact(X, Y, a, b, cost, uniform, atoms=None) -> tuple[float, W2Info]:
    """Exact W2 and its info; `atoms` = find_atoms(Y, b) when already known."""
    if atoms is None:
        atoms = find_atoms(Y, b)
        if atoms is None:
            found = find_atoms(X, a)
            if found is not None:  # W2 is symmetric: swap so that the few atoms are the target
                X, Y, a, b, atoms = Y, X, b, a, found
    if atoms is not None:
        pts, masses, snap = atoms
        sq, how = _atoms_cost(a, X, pts, masses, cost)
        note = f"{len(pts)} distinct target points" + (f", merged rows within {snap:.2g}" if snap else "")
        info = W2Info(method=how, exact=True, cost=cost, error=snap, n_atoms=len(pts), notes=note)
    else:
        sq, how = _exact_sq(X, Y, a, b, cost, uniform)
        info = W2Info(method=how, exact=True, cost=cost)
    return math.sqrt(max(sq, 0.0)), info


# -------------------------------------------------------------------------------- diagnostics


@dataclass(frozen=True)
class W2Series:
    """W2 from each saved state to one target: values (...) over the leading axes of X_t."""

    values: np.ndarray
    infos: tuple[W2Info, ...]
    exact: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": self.values.tolist(),
            "exact": self.exact,
            "infos": [i.to_dict() for i in self.infos],
        }


def w2_to_target(
    X_t: Any,
    target: Any,
    cost: str = "chordal",
    b: Any = None,
    fallback: str | None = None,
    **options: Any,
) -> W2Series:
    """Exact W2 between each saved state X_t[k] (..., N, d) and one target cloud (K, d).

    A target with at most MAX_ATOMS distinct points (e.g. Pi_# rho_0 = two atoms +-u_1) uses the
    exact few-atoms path at any N; otherwise the general exact solvers up to their size limits.
    Past those limits it raises, unless `fallback` ("sinkhorn" or "subsample") is given: then that
    method is used and the result says exact=False. `options` go to w2 (reg, n_sub, seed, repeats).
    """
    cost = _check_choice(cost, "cost", COSTS)
    if fallback is not None:
        _check_choice(fallback, "fallback", ("sinkhorn", "subsample"))
    Xs = _check_stack(X_t, "X_t")
    T = _unit_rows(target, "target")
    if T.shape[1] != Xs.shape[-1]:
        raise ValueError(f"target has d = {T.shape[1]} columns but X_t has d = {Xs.shape[-1]}")
    bw = _check_weights(b, len(T), "b")
    atoms = find_atoms(T, bw)
    lead = Xs.shape[:-2]
    flat = Xs.reshape(-1, *Xs.shape[-2:])
    N, K = flat.shape[1], len(T)
    a = np.full(N, 1.0 / N)
    uniform = b is None or bool(np.all(bw == bw[0]))
    too_big = atoms is None and N * K > EXACT_MAX_PAIRS
    if too_big and fallback is None:
        raise ValueError(
            f"exact W2 to this target (N = {N}, K = {K}) is past the exact size limit N * K <= "
            f"{EXACT_MAX_PAIRS:.3g}; pass fallback='subsample' or fallback='sinkhorn'"
        )
    values, infos = [], []
    for X in flat:
        if too_big:
            assert fallback is not None  # too_big without a fallback raised above
            v, info = w2(X, T, cost=cost, method=fallback, b=b, log=True, **options)
        else:
            v, info = _exact(X, T, a, bw, cost, uniform, atoms=atoms)
        values.append(v)
        infos.append(info)
    return W2Series(np.array(values).reshape(lead), tuple(infos), exact=not too_big)


def coupling_bound(X_t: Any, PiX0: Any, cost: str = "chordal") -> np.ndarray | float:
    """UPPER BOUND on W2(rho_t, Pi_# rho_0) from the synchronous coupling x_i(t) <-> Pi(x_i(0)):

        sqrt( (1/N) sum_i c(x_i(t), Pi(x_i(0))) ),   O(N d).

    X_t: (..., N, d) saved states; PiX0: (N, d) (or broadcastable, e.g. (M, N, d) for a batch) the
    projected initial tokens, row i matched with token i. Returns (...) (a float for one state).
    It is not W2: the true W2 can be much smaller. Label it as a bound wherever it is shown.
    """
    cost = _check_choice(cost, "cost", COSTS)
    Xs = _check_stack(X_t, "X_t")
    P = _check_stack(PiX0, "PiX0")
    if P.shape[-2:] != Xs.shape[-2:]:
        raise ValueError(
            f"PiX0 must match the tokens of X_t: X_t has (N, d) = {Xs.shape[-2:]}, PiX0 {P.shape[-2:]}"
        )
    try:
        np.broadcast_shapes(Xs.shape, P.shape)
    except ValueError:
        raise ValueError(
            f"PiX0 of shape {P.shape} does not broadcast against X_t of shape {Xs.shape}"
        ) from None
    if cost == "chordal":
        c = np.sum((Xs - P) ** 2, axis=-1)
    else:
        c = geodesic_distance(Xs, P) ** 2
    out = np.sqrt(c.mean(axis=-1))
    return float(out) if out.ndim == 0 else out


def _check_basis(basis: Any, d: int) -> np.ndarray:
    try:
        U = to_numpy(basis).astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError("basis must be a real (d, m) array with orthonormal columns") from None
    if U.ndim == 1:
        U = U[:, None]
    if U.ndim != 2 or U.shape[0] != d or not 1 <= U.shape[1] <= d:
        raise ValueError(f"basis must have shape (d, m) = ({d}, m) with 1 <= m <= {d}, got {U.shape}")
    if not np.all(np.isfinite(U)):
        raise ValueError("basis contains NaN or inf")
    dev = float(np.max(np.abs(U.T @ U - np.eye(U.shape[1]))))
    if dev > 1e-8:
        raise ValueError(f"basis must have orthonormal columns: max |U^T U - I| = {dev:.3g}")
    return U


def angle_to_subspace(X: Any, basis: Any) -> np.ndarray:
    """Angle (radians, in [0, pi/2]) from each token (..., N, d) to span(basis), basis (d, m)."""
    Xs = _check_stack(X, "X")
    U = _check_basis(basis, Xs.shape[-1])
    par = Xs @ U  # coordinates in the subspace (..., N, m)
    perp = Xs - par @ U.T  # computed directly: accurate for tokens close to the subspace
    return np.arctan2(np.linalg.norm(perp, axis=-1), np.linalg.norm(par, axis=-1))


def subspace_mass(X: Any, basis: Any, eps: Any) -> np.ndarray | float:
    """Fraction of tokens within angle eps (radians, 0 < eps <= pi/2) of span(basis).

    X: (..., N, d), e.g. (T, N, d); basis: (d, m) orthonormal columns (a (d,) vector is a line).
    eps: a number -> result (...); a 1-D array (E,) -> result (..., E). Values in [0, 1].
    """
    e = np.asarray(to_numpy(eps), dtype=np.float64)
    if e.ndim > 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0) or np.any(e > math.pi / 2):
        raise ValueError(f"eps must be an angle in (0, pi/2] radians (a number or 1-D array), got {eps!r}")
    ang = angle_to_subspace(X, basis)
    if e.ndim == 0:
        out = np.mean(ang <= e, axis=-1)
    else:
        out = np.mean(ang[..., None] <= e, axis=-2)
    return float(out) if out.ndim == 0 else out


def lyapunov(X: Any, P1: Any) -> np.ndarray | float:
    """Lyapunov functional integral |P_1^perp x|^2 drho = mean_i |x_i - P_1 x_i|^2.

    X: (..., N, d); P1: (d, d) projector onto the top eigenspace (P1 @ P1 = P1; the orthogonal one
    for symmetric A). Returns (...) in [0, 1] for an orthogonal projector.
    """
    Xs = _check_stack(X, "X")
    d = Xs.shape[-1]
    try:
        P = to_numpy(P1).astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError("P1 must be a real (d, d) projector") from None
    if P.shape != (d, d) or not np.all(np.isfinite(P)):
        raise ValueError(f"P1 must be a finite ({d}, {d}) projector matching X, got shape {P.shape}")
    if np.max(np.abs(P @ P - P)) > 1e-8 * max(1.0, float(np.abs(P).max())):
        raise ValueError("P1 must be a projector (P1 @ P1 = P1)")
    R = Xs - Xs @ P.T
    out = np.mean(np.sum(R * R, axis=-1), axis=-1)
    return float(out) if out.ndim == 0 else out


def resolution_ratio(N: int, d: int, beta: float) -> float:
    """Typical token spacing over the softmax angular resolution: spacing(N, d) / beta^(-1/2).

    The N-token system follows the mean-field equation only when this is << 1, i.e.
    N >> beta^((d-1)/2) (MATH.md, "Mean-field resolution"). beta = inf gives inf.
    """
    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    if d < 2:
        raise ValueError(f"d must be >= 2 (points of S^(d-1)), got {d}")
    beta = check_beta(beta)
    return math.inf if math.isinf(beta) else spacing(N, d) * math.sqrt(beta)
