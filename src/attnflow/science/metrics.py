"""Concentration diagnostics on the sphere (MATH.md, "Distances and diagnostics", "Kernel width").

The synchronous coupling bound, the angle and mass near a subspace, the Lyapunov functional and the
mean-field resolution ratio. Every measure is rho = sum_i w_i delta_{x_i}: a cloud (..., N, d) and
optional weights (N,) or broadcasting against the cloud's leading axes (e.g. (M, N) for a batch of M
clouds), positive and summing to 1; uniform 1/N when not given. W2 lives in `attnflow.transport.wasserstein`;
time scales and fits in `attnflow.science.fits`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._checks import (
    check_beta,
    check_choice,
    check_matrix,
    check_positive,
    check_stack,
    check_weights,
    to_numpy,
)
from ..measures.geometry import spacing, sphere_area
from ..transport.solvers import COSTS, pointwise_cost

__all__ = [
    "RESOLUTION_OK",
    "angle_to_subspace",
    "coupling_bound",
    "lyapunov",
    "resolution_ratio",
    "subspace_mass",
]

#: Largest mean-field resolution ratio (token spacing over the kernel's angular width) at which a run
#: counts as resolved. The ratio below a threshold is necessary, not sufficient (MATH.md, "Kernel
#: width"): it only has to flag runs that cannot be mean-field, and convergence itself is shown by
#: doubling N. At ratio r the softmax at x averages over about (1/r)^(d-1) tokens per kernel width
#: (pi / r^2 in d = 3, 2 / r on S^1): at 0.5 that is a dozen in d = 3 and four on S^1, the fewest for
#: a quadrature of a smooth kernel rather than an argmax over a handful of neighbours. At 1 the
#: spacing equals the width and the softmax sees one or two tokens: the curves of large beta coincide.
RESOLUTION_OK = 0.5


def _token_mean(values: np.ndarray, weights: ArrayLike | None) -> np.ndarray:
    """Integral of values (..., N) over the measure: sum_i w_i v_i, or the plain mean without weights."""
    if weights is None:
        return values.mean(axis=-1)
    w = check_weights(weights, values.shape, "weights")
    return np.sum(values * w, axis=-1)


def _scalar_or_array(out: np.ndarray) -> np.ndarray | float:
    return float(out) if out.ndim == 0 else out


def coupling_bound(
    X_t: ArrayLike, PiX0: ArrayLike, cost: str = "chordal", weights: ArrayLike | None = None
) -> np.ndarray | float:
    """UPPER BOUND on W2(rho_t, Pi_# rho_0) from the synchronous coupling x_i(t) <-> Pi(x_i(0)):

        sqrt( sum_i w_i c(x_i(t), Pi(x_i(0))) )   (w_i = 1/N without weights),   O(N d).

    It is not W2: the true W2 can be much smaller. Label it as a bound wherever it is shown.

    Parameters
    ----------
    X_t : array (..., N, d)
        Saved states.
    PiX0 : array (N, d)
        The projected initial tokens (or broadcastable, e.g. (M, N, d) for a batch), row i matched
        with token i.
    cost : str
        "chordal" or "geodesic", as in `w2`.
    weights : array (N,), optional
        rho_0's weights, carried along.

    Returns
    -------
    array (...) or float
        The bound (a float for one state).
    """
    cost = check_choice(cost, "cost", COSTS)
    Xs = check_stack(X_t, "X_t")
    P = check_stack(PiX0, "PiX0")
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
    return _scalar_or_array(np.sqrt(_token_mean(pointwise_cost(Xs, P, cost), weights)))


def _check_basis(basis: ArrayLike, d: int) -> np.ndarray:
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


def angle_to_subspace(X: ArrayLike, basis: ArrayLike) -> np.ndarray:
    """Angle (radians, in [0, pi/2]) from each token (..., N, d) to span(basis), basis (d, m)."""
    Xs = check_stack(X, "X")
    U = _check_basis(basis, Xs.shape[-1])
    par = Xs @ U  # coordinates in the subspace (..., N, m)
    perp = Xs - par @ U.T  # computed directly: accurate for tokens close to the subspace
    return np.arctan2(np.linalg.norm(perp, axis=-1), np.linalg.norm(par, axis=-1))


def subspace_mass(
    X: ArrayLike, basis: ArrayLike, eps: float, weights: ArrayLike | None = None
) -> np.ndarray | float:
    """Mass within angle eps (radians, 0 < eps <= pi/2) of span(basis): sum_i w_i [angle_i <= eps].

    Parameters
    ----------
    X : array (..., N, d)
        E.g. (T, N, d).
    basis : array (d, m)
        Orthonormal columns (a (d,) vector is a line).
    eps : float or array (E,)
        The angle(s), radians.
    weights : array (N,), optional
        The measure's weights (the fraction of tokens without them).

    Returns
    -------
    array (...) or (..., E)
        Values in [0, 1]: (...) for a number eps, (..., E) for a 1-D array.
    """
    e = np.asarray(to_numpy(eps), dtype=np.float64)
    if e.ndim > 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0) or np.any(e > math.pi / 2):
        raise ValueError(f"eps must be an angle in (0, pi/2] radians (a number or 1-D array), got {eps!r}")
    ang = angle_to_subspace(X, basis)
    if e.ndim == 0:
        return _scalar_or_array(_token_mean((ang <= e).astype(np.float64), weights))
    inside = np.moveaxis(ang[..., None] <= e, -1, 0).astype(np.float64)  # (E, ..., N)
    return np.moveaxis(_token_mean(inside, weights), 0, -1)


def lyapunov(X: ArrayLike, P1: ArrayLike, weights: ArrayLike | None = None) -> np.ndarray | float:
    """Lyapunov functional integral |P_1^perp x|^2 drho = sum_i w_i |x_i - P_1 x_i|^2.

    Parameters
    ----------
    X : array (..., N, d)
        The tokens.
    P1 : array (d, d)
        Projector onto the top eigenspace (P1 @ P1 = P1; the orthogonal one for symmetric A).
    weights : array (N,), optional
        The measure's weights (the mean over tokens without them).

    Returns
    -------
    array (...) or float
        In [0, 1] for an orthogonal projector.
    """
    Xs = check_stack(X, "X")
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
    return _scalar_or_array(_token_mean(np.sum(R * R, axis=-1), weights))


def resolution_ratio(N: int, d: int, beta: float, B: ArrayLike, X: ArrayLike | None = None) -> float:
    """Token spacing over the softmax's angular width: spacing(N, d) * sqrt(beta * s).

    The softmax at x has angular width 1 / sqrt(beta |B^T x|) (MATH.md, "Kernel width"); s is its
    largest |B^T x| over the tokens: max_i |B^T x_i| when the cloud X (..., N, d) is given, ||B||_2
    (a bound) when only B (d, d) is. N tokens follow the mean-field equation only when the ratio is
    well below 1 (RESOLUTION_OK); that is necessary, not sufficient. spacing(N, d) is that of N
    evenly spread nodes (weights do not change it).

    Parameters
    ----------
    N, d : int
        Tokens and dimension.
    beta : float
        Inverse temperature; beta = inf gives inf.
    B : array (d, d)
        Q^T K; without X, s = ||B||_2.
    X : array (..., N, d), optional
        The cloud, for s = max_i |B^T x_i|.

    Returns
    -------
    float
        The ratio.
    """
    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    if d < 2:
        raise ValueError(f"d must be >= 2 (points of S^(d-1)), got {d}")
    beta = check_beta(beta)
    Bm = check_matrix(B, "B", d)
    if X is None:
        s = float(np.linalg.norm(Bm, 2))
    else:
        Xs = check_stack(X, "X")
        if Xs.shape[-2:] != (N, d):
            raise ValueError(f"X must be the cloud of N = {N} tokens in d = {d}: got shape {Xs.shape}")
        s = float(np.max(np.linalg.norm(Xs @ Bm, axis=-1)))  # rows x^T B = (B^T x)^T
    return math.inf if math.isinf(beta) else spacing(N, d) * math.sqrt(beta * s)


def tokens_for_ratio(d: int, beta: float, s: float, ratio: float = RESOLUTION_OK) -> int:
    """Smallest N whose resolution ratio spacing(N, d) sqrt(beta s) is at most `ratio`:
    N = |S^{d-1}| (beta s / ratio^2)^((d-1)/2), s = max_i |B^T x_i| (or ||B||)."""
    return math.ceil(sphere_area(d) * (beta * s / ratio**2) ** ((d - 1) / 2.0))
