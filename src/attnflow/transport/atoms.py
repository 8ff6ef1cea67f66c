"""The exact few-atoms path of W2 (private; the public entry is `attnflow.transport.wasserstein.w2`).

W2 from a weighted cloud sum_i a_i delta_{x_i} (N,) to a measure with k <= MAX_ATOMS distinct points
(Pi_# rho_0 is two atoms +-u_1 when the top eigenspace is a line) is an N x k transportation
problem: for k = 2 a sort, for k >= 3 the network simplex, on a certified band of tokens at large N.
O(N k log N): it makes W2(rho_t, Pi_# rho_0) exact at N = 10^6 (MATH.md, "Distances and diagnostics").
"""

from __future__ import annotations

import numpy as np

from .solvers import emd, pointwise_cost

#: Few-atoms path: at most this many distinct target points ...
MAX_ATOMS = 8
#: For k >= 3 atoms: the whole N x k problem goes to POT's network simplex up to this N (its time
#: grows faster than linearly: about 0.07 s at N = 1e4, 8 s at N = 1e5 for k = 3); past it only
#: a band of at most this many tokens does (see _atoms_simplex).
ATOMS_EMD_MAX_N = 20_000
#: Rows equal after rounding to this many decimals count as one atom (the snap is reported).
ATOM_DECIMALS = 9


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


def atoms_cost(a: np.ndarray, X: np.ndarray, atoms: np.ndarray, masses: np.ndarray, cost: str) -> tuple:
    """Exact W2^2 from (X, a) to few atoms: O(N k) costs plus a sort (k = 2) or a simplex (k >= 3)."""
    k = len(atoms)
    C = np.stack([pointwise_cost(X, y, cost) for y in atoms], axis=1)
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
        return emd(a, b, C)
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
            sub_cost, plan = emd(a[free], np.clip(rest, 0.0, None), C[free], plan=True)
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
