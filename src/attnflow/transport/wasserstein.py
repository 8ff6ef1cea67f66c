"""Wasserstein-2 distances between weighted measures on the sphere (MATH.md, "Distances and
diagnostics", "Weighted measures").

A measure is rho = sum_i w_i delta_{x_i}: a cloud X (N, d) of unit rows and weights w (N,), positive
and summing to 1 (uniform 1/N when not given). W2 is exact (optimal assignment, POT's network
simplex, or the few-atoms path that makes W2 to Pi_# rho_0 exact at N = 10^6), entropic (debiased
Sinkhorn with a rigorous error bracket) or estimated on seeded subsamples drawn by weight. Every
value can come with a `W2Info` that says how far to trust it. The solvers live in `_transport`
(costs, network simplex, Sinkhorn) and `_atoms` (the few-atoms path).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, TypedDict, Unpack, overload

import numpy as np
from numpy.typing import ArrayLike

from .._checks import (
    SeedLike,
    check_choice,
    check_cloud,
    check_positive,
    check_stack,
    check_weights,
    rng_from,
)
from . import solvers as tp
from .atoms import MAX_ATOMS, atoms_cost, find_atoms
from .solvers import COSTS

__all__ = ["COSTS", "MAX_ATOMS", "W2Info", "W2Series", "find_atoms", "w2", "w2_to_target"]

METHODS = ("exact", "sinkhorn", "subsample")

#: Largest N * K for the general exact solvers (a dense N x K float64 cost matrix: 128 MB; about 3 s
#: for N = K = 4000 with SciPy's assignment or POT's network simplex on one core).
EXACT_MAX_PAIRS = 16_000_000
#: Largest max(N, K)^2 for the entropic solver (dense N x K, N x N and K x K matrices, a few
#: hundred iterations each): it is not a path to much larger clouds, "subsample" is.
SINKHORN_MAX_PAIRS = 25_000_000


@dataclass(frozen=True)
class W2Info:
    """How a W2 value was computed and how far it can be trusted.

    Attributes
    ----------
    method : str
        Solver used ("assignment", "network-simplex", "atoms-sort", "atoms-simplex", "single-atom",
        "sinkhorn", "subsample"). exact: True when the value is the exact W2 of the given clouds up
        to round-off (and `error`).
    error : float
        Bound or estimate of |value - W2| (0 for exact solvers; the snap of merged atoms for the
        few-atoms path; rigorous bracket width for Sinkhorn; CI half-width for subsampling).
    bounds, ci : (float, float) or None
        Rigorous (lower, upper) bracket of W2 (Sinkhorn: dual value and rounded-plan cost); 95%
        confidence interval of the subsample mean (covers subsampling noise, not its bias).
    noise_floor : float or None
        Subsampling only: mean W2 between two independent subsamples of one cloud, the scale of the
        upward bias of subsampled W2.
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class W2Series:
    """W2 from each saved state to one target: values (...) over the leading axes of X_t."""

    values: np.ndarray
    infos: tuple[W2Info, ...]
    exact: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "values": self.values.tolist(),
            "exact": self.exact,
            "infos": [i.to_dict() for i in self.infos],
        }


# ----------------------------------------------------------------------------------------- checks


def _measure_weights(w: ArrayLike | None, n: int, name: str) -> np.ndarray:
    """Weights (n,) of one cloud, as `check_weights` (positive, summing to 1); None -> uniform 1/n."""
    if w is None:
        return np.full(n, 1.0 / n)
    return check_weights(w, (n,), name)


def _check_cloud_pair(
    X: ArrayLike, Y: ArrayLike, nx: str = "X", ny: str = "Y"
) -> tuple[np.ndarray, np.ndarray]:
    X = check_cloud(X, nx)
    Y = check_cloud(Y, ny)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"{nx} has d = {X.shape[1]} columns but {ny} has d = {Y.shape[1]}: both clouds must lie on "
            "the same sphere"
        )
    return X, Y


def _too_big(N: int, K: int, limit: int, what: str, alternatives: str) -> None:
    if N * K > limit:
        gb = 8 * N * K / 1e9
        raise ValueError(
            f"{what} W2 between N = {N} and K = {K} points needs an N x K cost matrix ({gb:.2g} GB) "
            f"and is limited to N * K <= {limit:.3g}; use {alternatives}"
        )


# -------------------------------------------------------------------------------------- methods


def _exact_sq(X, Y, a, b, cost, uniform: bool) -> tuple[float, str]:
    """Exact W2^2 of general clouds: assignment (equal sizes, uniform) or network simplex."""
    N, K = len(X), len(Y)
    _too_big(N, K, EXACT_MAX_PAIRS, "exact", "method='subsample' (or 'sinkhorn' for N, K <= 5000)")
    M = tp.cost_matrix(X, Y, cost)
    if N == K and uniform:
        # Birkhoff: an optimal plan between equal-size uniform clouds is a permutation. SciPy's
        # assignment is as fast as POT's simplex here (measured) and needs no POT import.
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(M)
        return float(M[rows, cols].mean()), "assignment"
    return tp.emd(a, b, M), "network-simplex"


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
        sq, how = atoms_cost(a, X, pts, masses, cost)
        note = f"{len(pts)} distinct target points" + (f", merged rows within {snap:.2g}" if snap else "")
        info = W2Info(method=how, exact=True, cost=cost, error=snap, n_atoms=len(pts), notes=note)
    else:
        sq, how = _exact_sq(X, Y, a, b, cost, uniform)
        info = W2Info(method=how, exact=True, cost=cost)
    return math.sqrt(max(sq, 0.0)), info


def _sinkhorn(X, Y, a, b, cost, reg) -> tuple[float, W2Info]:
    """Debiased Sinkhorn divergence of the weighted clouds and a rigorous bracket of the exact W2."""
    N, K = len(X), len(Y)
    _too_big(max(N, K), max(N, K), SINKHORN_MAX_PAIRS, "entropic", "method='subsample'")
    if reg is not None:
        reg = check_positive(reg, "reg")
    r = tp.sinkhorn_divergence(X, Y, a, b, cost, reg)
    info = W2Info(
        method="sinkhorn",
        exact=False,
        cost=cost,
        error=r["error"],
        reg=r["reg"],
        bounds=r["bounds"],
        n_iter=r["n_iter"],
        converged=r["converged"],
        notes="debiased Sinkhorn divergence; bounds are a rigorous bracket of the exact W2",
    )
    return r["value"], info


def _subsample(X, Y, a, b, cost, n_sub, repeats, seed, uniform_a, uniform_b) -> tuple[float, W2Info]:
    """Mean exact W2 over `repeats` seeded subsamples of n_sub points of each cloud.

    A uniform cloud is subsampled without replacement; a weighted one by weight (n_sub i.i.d. draws
    with P(x_i) = w_i, with replacement), so each subsample is an unweighted sample of the measure.
    """
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
        "near it cannot be told from 0 at this n_sub"
        + (
            ""
            if uniform_a and uniform_b
            else ". A weighted cloud is subsampled by weight: n_sub i.i.d. draws with probabilities w_i "
            "(with replacement), each drawn point of mass 1/n_sub"
        ),
    )
    return mean, info


# ----------------------------------------------------------------------------------------- w2


class _W2Settings(TypedDict, total=False):
    """The settings of `w2` besides X, Y and log, as its overloads type them (by keyword)."""

    cost: str
    method: str
    a: ArrayLike | None
    b: ArrayLike | None
    reg: float | None
    n_sub: int | None
    seed: SeedLike
    repeats: int


class _Fallback(TypedDict, total=False):
    """The options of `w2_to_target` that go to `w2` with its fallback method."""

    reg: float | None
    n_sub: int | None
    seed: SeedLike
    repeats: int


@overload
def w2(
    X: ArrayLike, Y: ArrayLike, *, log: Literal[False] = ..., **settings: Unpack[_W2Settings]
) -> float: ...
@overload
def w2(
    X: ArrayLike, Y: ArrayLike, *, log: Literal[True], **settings: Unpack[_W2Settings]
) -> tuple[float, W2Info]: ...
@overload
def w2(
    X: ArrayLike, Y: ArrayLike, *, log: bool = ..., **settings: Unpack[_W2Settings]
) -> float | tuple[float, W2Info]: ...


def w2(
    X: ArrayLike,
    Y: ArrayLike,
    cost: str = "chordal",
    method: str = "exact",
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
    reg: float | None = None,
    n_sub: int | None = None,
    seed: SeedLike = 0,
    log: bool = False,
    repeats: int = 5,
) -> float | tuple[float, W2Info]:
    """Wasserstein-2 distance between the measures sum_i a_i delta_{x_i} and sum_j b_j delta_{y_j}.

    Parameters
    ----------
    X, Y : array (N, d), (K, d)
        Unit rows; a (N,), b (K,): weights, > 0 and summing to 1 (uniform when not given).
    cost : str
        "chordal" |x - y|^2 (default) or "geodesic" arccos(<x, y>)^2 (radians^2).
    method : str
        "exact": exact value, never approximated: a target (or source) with at most MAX_ATOMS
        distinct points is solved as an N x k transport problem (k = 2: one sort, O(N log N), about a
        second at N = 1e6; k >= 3: the network simplex, on a certified band of tokens for large N, a
        few seconds at N = 1e6); equal-size uniform clouds by optimal assignment (SciPy); otherwise
        POT's network simplex with the weights. Problems past EXACT_MAX_PAIRS raise ValueError
        suggesting "sinkhorn" or "subsample". "sinkhorn": debiased Sinkhorn divergence with
        regularisation `reg` (default 0.5% of the mean cost), log domain, with the weights; info
        carries a rigorous bracket of the exact W2 and its width. "subsample": mean exact W2 over
        `repeats` seeded subsamples of n_sub points (default min(N, K, 1000)) with a 95% CI; a
        weighted cloud is subsampled by weight (i.i.d. draws with P(x_i) = a_i), as info.notes says.

    Returns
    -------
    float or (float, W2Info)
        W2 (same units as the distance), or (W2, W2Info) with log=True.
    """
    cost = check_choice(cost, "cost", COSTS)
    method = check_choice(method, "method", METHODS)
    X, Y = _check_cloud_pair(X, Y)
    uniform_a, uniform_b = a is None, b is None
    a = _measure_weights(a, len(X), "a")
    b = _measure_weights(b, len(Y), "b")
    uniform_a = uniform_a or bool(np.all(a == a[0]))
    uniform_b = uniform_b or bool(np.all(b == b[0]))
    if method == "sinkhorn":
        value, info = _sinkhorn(X, Y, a, b, cost, reg)
    elif method == "subsample":
        value, info = _subsample(X, Y, a, b, cost, n_sub, repeats, seed, uniform_a, uniform_b)
    else:
        value, info = _exact(X, Y, a, b, cost, uniform_a and uniform_b)
    return (value, info) if log else value


@dataclass(frozen=True)
class _Target:
    """The target measure of `w2_to_target`: points T (K, d), weights b (K,), whether they are uniform,
    and its distinct atoms (`find_atoms`; None: more than MAX_ATOMS)."""

    T: np.ndarray
    b: np.ndarray
    uniform: bool
    atoms: tuple[np.ndarray, np.ndarray, float] | None


def _target_b(A: np.ndarray | None, b: ArrayLike | None, N: int, K: int) -> ArrayLike | None:
    """The target's weights as given, or by default those of the tokens, A (N,), when the target has
    N rows (row i is the image of token i); weights A without b otherwise are a ValueError."""
    if A is None or b is not None:
        return b
    if A.ndim == 1 and K == N:
        return A
    raise ValueError(
        f"weights are given but not the target's b: pass b ({K},), the target's weights "
        "(the default b = weights holds only for weights (N,) and a target of N rows)"
    )


def _to_target(
    X: np.ndarray,
    a: np.ndarray | None,
    tgt: _Target,
    cost: str,
    fallback: str | None,
    options: _Fallback,
) -> tuple[float, W2Info]:
    """(W2, W2Info) of one cloud X (N, d) with weights a (N,) (None: uniform) to the target: exact,
    or by the `fallback` method of `w2` when given."""
    if fallback is not None:
        b = None if tgt.uniform else tgt.b
        return w2(X, tgt.T, cost=cost, method=fallback, a=a, b=b, log=True, **options)
    uniform = a is None or bool(np.all(a == a[0]))
    a = np.full(len(X), 1.0 / len(X)) if a is None else a
    return _exact(X, tgt.T, a, tgt.b, cost, uniform and tgt.uniform, atoms=tgt.atoms)


def w2_to_target(
    X_t: ArrayLike,
    target: ArrayLike,
    cost: str = "chordal",
    b: ArrayLike | None = None,
    fallback: str | None = None,
    weights: ArrayLike | None = None,
    **options: Unpack[_Fallback],
) -> W2Series:
    """Exact W2 between each saved state X_t[k] (..., N, d) and one target cloud (K, d).

    A target with at most MAX_ATOMS distinct points (e.g. Pi_# rho_0 = two atoms +-u_1) uses the
    exact few-atoms path at any N; otherwise the general exact solvers up to their size limits.

    Parameters
    ----------
    weights : array (N,) or broadcasting, optional
        The measure's weights against X_t's leading axes (e.g. (M, N) for a batch of M clouds), > 0
        and summing to 1; uniform when not given. They never change in time (mass moves along
        characteristics).
    b : array (K,), optional
        The target's weights; by default uniform, or, when `weights` is (N,) and the target has N
        rows, `weights` themselves: the target Pi_# rho_0 is Pi(X0), row i the image of token i, and
        carries its weight.
    fallback : str, optional
        "sinkhorn" or "subsample": used past the exact solvers' limits (else they raise); the result
        then says exact=False. `options` go to w2 (reg, n_sub, seed, repeats).

    Returns
    -------
    W2Series
        `values` (...) over the leading axes of X_t, with each value's W2Info.
    """
    cost = check_choice(cost, "cost", COSTS)
    if fallback is not None:
        check_choice(fallback, "fallback", ("sinkhorn", "subsample"))
    Xs = check_stack(X_t, "X_t")
    T = check_cloud(target, "target")
    if T.shape[1] != Xs.shape[-1]:
        raise ValueError(f"target has d = {T.shape[1]} columns but X_t has d = {Xs.shape[-1]}")
    lead, (N, K) = Xs.shape[:-2], (Xs.shape[-2], len(T))
    A = None if weights is None else check_weights(weights, Xs.shape[:-1], "weights")
    b = _target_b(A, b, N, K)
    bw = _measure_weights(b, K, "b")
    tgt = _Target(T, bw, b is None or bool(np.all(bw == bw[0])), find_atoms(T, bw))
    A = None if A is None else np.broadcast_to(A, Xs.shape[:-1]).reshape(-1, N)
    too_big = tgt.atoms is None and N * K > EXACT_MAX_PAIRS
    if too_big and fallback is None:
        raise ValueError(
            f"exact W2 to this target (N = {N}, K = {K}) is past the exact size limit N * K <= "
            f"{EXACT_MAX_PAIRS:.3g}; pass fallback='subsample' or fallback='sinkhorn'"
        )
    pairs = [
        _to_target(X, None if A is None else A[k % len(A)], tgt, cost, fallback if too_big else None, options)
        for k, X in enumerate(Xs.reshape(-1, N, Xs.shape[-1]))
    ]
    values = np.array([v for v, _ in pairs]).reshape(lead)
    return W2Series(values, tuple(info for _, info in pairs), exact=not too_big)
