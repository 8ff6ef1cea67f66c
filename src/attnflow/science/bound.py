"""The theorem's bound curve W2 <= K1 a(beta) e^(C1 t) + K2 e^(-c t) (MATH.md, "The results to
reproduce"): the curve, the time and value of its minimum, and its four constants fitted to W2
curves (`fit_theorem_bound`, labelled "fitted": the theorem does not give them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_beta, check_betas, check_times, to_numpy
from ._results import Result


def temperature_scale(beta: ArrayLike) -> np.ndarray | float:
    """a(beta) = sqrt(log(beta + 1) / beta), the finite-temperature error scale (0 at beta = inf)."""
    b = np.asarray(beta, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(np.isinf(b), 0.0, np.sqrt(np.log1p(b) / b))
    return float(out) if out.ndim == 0 else out


def theorem_bound(
    t: ArrayLike, beta: float, C1: float, c: float, K1: float = 1.0, K2: float = 1.0
) -> np.ndarray:
    """Theorem 1's bound curve K1 a(beta) exp(C1 t) + K2 exp(-c t), a(beta) = sqrt(log(beta+1)/beta).

    The constants are not known in closed form (see `fit_theorem_bound`).

    Parameters
    ----------
    t : array-like
        Times.
    beta : float
        Inverse temperature.
    C1, c, K1, K2 : float
        The constants of the bound.

    Returns
    -------
    array
        The bound, t's shape.
    """
    t = np.asarray(to_numpy(t), dtype=np.float64)
    beta = check_beta(beta)
    return K1 * temperature_scale(beta) * np.exp(C1 * t) + K2 * np.exp(-c * t)


def bound_minimum(beta: float, C1: float, c: float, K1: float = 1.0, K2: float = 1.0) -> tuple[float, float]:
    """Minimiser and minimum of theorem_bound in t >= 0: (t_min, value).

    t_min = log(K2 c / (K1 C1 a)) / (C1 + c), clipped at 0; grows like log(beta) / (2 (C1 + c)).
    """
    beta = check_beta(beta)
    a = temperature_scale(beta)
    if a == 0 or C1 <= 0:
        return math.inf, 0.0
    t_min = max(math.log(K2 * c / (K1 * C1 * a)) / (C1 + c), 0.0) if c > 0 else 0.0
    return t_min, float(theorem_bound(t_min, beta, C1, c, K1, K2))


@dataclass(frozen=True)
class BoundFit(Result):
    """Constants of K1 a(beta) exp(C1 t) + K2 exp(-c t) FITTED to W2 curves (not proven values).

    errors: standard errors from the Jacobian; rms_log_residual: fit quality on log W2.
    """

    C1: float
    c: float
    K1: float
    K2: float
    errors: dict[str, float]
    rms_log_residual: float
    n: int
    converged: bool
    model: str = "w2 = K1 sqrt(log(beta+1)/beta) exp(C1 t) + K2 exp(-c t)"
    label: str = "fitted"


def _bound_data(t: ArrayLike, w2: ArrayLike, beta: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fit_theorem_bound's inputs checked: times (T,), a(beta) (B, 1) and log W2 (B, T)."""
    t = check_times(t, "t")
    betas = check_betas(np.atleast_1d(to_numpy(beta)), "beta", finite=False)
    W = np.asarray(to_numpy(w2), dtype=np.float64)
    W = W[None, :] if W.ndim == 1 else W
    if W.shape != (betas.size, t.size):
        raise ValueError(f"w2 must have shape (T,) or (B, T) = ({betas.size}, {t.size}), got {np.shape(w2)}")
    if not np.all(np.isfinite(W)) or np.any(W <= 0):
        raise ValueError("w2 must be finite and > 0 (its logarithm is fitted)")
    if t.size < 3:
        raise ValueError("need at least 3 saved times to fit the bound")
    return t, np.asarray(temperature_scale(betas))[:, None], np.log(W)


def _bound_log(theta: np.ndarray, t: np.ndarray, a: np.ndarray) -> np.ndarray:
    """log of K1 a exp(C1 t) + K2 exp(-c t), (B, T), for theta = (log K1, C1, log K2, c)."""
    lk1, C1, lk2, c = theta
    first = lk1 + np.log(np.maximum(a, 1e-300)) + C1 * t[None, :]
    second = np.broadcast_to(lk2 - c * t[None, :], first.shape)
    return np.logaddexp(first, second)  # a = 0 (beta = inf) leaves the second term alone


def _bound_start(t: np.ndarray, a: np.ndarray, logW: np.ndarray) -> list[float]:
    """Initial (log K1, C1, log K2, c): early decay and late growth slopes of the mean curve."""
    third = max(t.size // 3, 2)
    mean_log = logW.mean(axis=0)
    c0 = max(-np.polyfit(t[:third], mean_log[:third], 1)[0], 1e-3)
    C10 = max(np.polyfit(t[-third:], mean_log[-third:], 1)[0], 1e-3)
    lk2 = float(mean_log[0])
    lk1 = float(np.mean(logW[:, -1] - np.log(np.maximum(a[:, 0], 1e-300)) - C10 * t[-1]))
    return [lk1, C10, lk2, c0]


def fit_theorem_bound(t: ArrayLike, w2: ArrayLike, beta: ArrayLike) -> BoundFit:
    """Fit K1, C1, K2, c (all >= 0) of the theorem's bound curve to W2 data, on log W2.

    Parameters
    ----------
    t : array (T,)
        Times.
    w2 : array (T,) or (B, T)
        W2 > 0 for one beta, or for B betas sharing the constants across temperatures (this is what
        separates K1 a(beta) from K2).
    beta : float or array (B,)
        In (0, inf].

    Returns
    -------
    BoundFit
        The fitted constants.
    """
    from scipy.optimize import least_squares

    t, a, logW = _bound_data(t, w2, beta)
    sol = least_squares(
        lambda theta: (_bound_log(theta, t, a) - logW).ravel(),
        x0=_bound_start(t, a, logW),
        bounds=([-np.inf, 0, -np.inf, 0], [np.inf, np.inf, np.inf, np.inf]),
    )
    r = sol.fun
    dof = max(r.size - 4, 1)
    try:
        cov = np.linalg.pinv(sol.jac.T @ sol.jac) * float(r @ r) / dof
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:  # pragma: no cover
        se = np.full(4, np.nan)
    lk1, C1, lk2, c = sol.x
    K1, K2 = math.exp(lk1), math.exp(lk2)
    return BoundFit(
        C1=float(C1),
        c=float(c),
        K1=K1,
        K2=K2,
        errors={"C1": float(se[1]), "c": float(se[3]), "K1": K1 * float(se[0]), "K2": K2 * float(se[2])},
        rms_log_residual=float(np.sqrt(np.mean(r**2))),
        n=int(r.size),
        converged=bool(sol.success),
    )


# --------------------------------------------------------------------------- terminal phase
