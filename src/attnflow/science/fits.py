"""Time scales and fits of W2 curves (MATH.md, "The results to reproduce").

t*(beta) and its plateau, t* = a + b log beta, min W2 ~ C a(beta)^p with a(beta) = sqrt(log(beta+1)/beta),
exponential decay rates, the terminal time (the theorem's bound curve and its fitted constants:
`bound`).
Every fitted quantity is labelled `label="fitted"`: the constants of Theorem 1 are not known, only
fitted to data. Results are small frozen dataclasses with `.to_dict()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_betas, check_times, to_numpy
from ._results import Result
from .bound import temperature_scale


def _check_values(y: ArrayLike, name: str, n: int | None = None, positive: bool = False) -> np.ndarray:
    try:
        v = to_numpy(y).astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D array of real numbers") from None
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {v.shape}")
    if n is not None and v.size != n:
        raise ValueError(f"{name} must have {n} entries to match the times/betas, got {v.size}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains NaN or inf")
    if positive and np.any(v <= 0):
        raise ValueError(f"{name} must be > 0 (its logarithm is fitted), got min {v.min():.3g}")
    if not positive and np.any(v < 0):
        raise ValueError(f"{name} must be >= 0, got min {v.min():.3g}")
    return v


# ---------------------------------------------------------------------------------------- t*


@dataclass(frozen=True)
class TStar(Result):
    """Time of smallest W2 on a saved-time grid.

    t_star: the argmin (MATH.md's definition); w2_min its value; index its position.
    t_lo, t_hi: the plateau, first and last saved times with w2 <= w2_min (1 + rel_tol); it contains
        every near-minimiser, also when the minimum region oscillates (then n_segments > 1 and the
        argmin can jump between local minima: use t_mid, the plateau midpoint, as a steadier value).
    uncertainty: (t_hi - t_lo) / 2, at least half the local grid step.
    at_boundary: the minimum is at the first or last saved time (t* may lie outside the grid).
    """

    t_star: float
    w2_min: float
    index: int
    t_lo: float
    t_hi: float
    t_mid: float
    uncertainty: float
    rel_tol: float
    n_segments: int
    at_boundary: bool
    notes: str = ""


def t_star(t: ArrayLike, w2: ArrayLike, rel_tol: float = 0.05) -> TStar:
    """t* = argmin_t W2(t) on saved times t (T,), with the plateau where W2 <= min (1 + rel_tol).

    Parameters
    ----------
    t : array (T,)
        Saved times.
    w2 : array (T,)
        W2 at those times.
    rel_tol : float
        The plateau's relative tolerance, >= 0.

    Returns
    -------
    TStar
        t*, the minimum W2 and the plateau's ends.
    """
    t = check_times(t, "t")
    w = _check_values(w2, "w2", n=t.size)
    rel_tol = float(rel_tol)
    if not math.isfinite(rel_tol) or rel_tol < 0:
        raise ValueError(f"rel_tol must be a finite number >= 0, got {rel_tol!r}")
    k = int(np.argmin(w))
    near = w <= w[k] * (1.0 + rel_tol)
    idx = np.flatnonzero(near)
    lo, hi = int(idx[0]), int(idx[-1])
    segments = 1 + int(np.sum(np.diff(idx) > 1))
    step = 0.5 * float(np.diff(t)[max(k - 1, 0)]) if t.size > 1 else 0.0
    at_boundary = k in (0, t.size - 1)
    notes = "minimum at the end of the time grid: t* may lie outside it" if at_boundary else ""
    if segments > 1:
        notes = (notes + "; " if notes else "") + f"near-minimal region has {segments} separate pieces"
    return TStar(
        t_star=float(t[k]),
        w2_min=float(w[k]),
        index=k,
        t_lo=float(t[lo]),
        t_hi=float(t[hi]),
        t_mid=0.5 * float(t[lo] + t[hi]),
        uncertainty=max(0.5 * float(t[hi] - t[lo]), step),
        rel_tol=rel_tol,
        n_segments=segments,
        at_boundary=at_boundary,
        notes=notes,
    )


# ---------------------------------------------------------------------------- linear fits


class _Line(TypedDict):
    intercept: float
    slope: float
    intercept_err: float
    slope_err: float
    r2: float
    n: int


def _linfit(x: np.ndarray, y: np.ndarray, sigma: np.ndarray | None) -> _Line:
    """Weighted least squares y = intercept + slope x with standard errors (scaled by the residual
    variance, as scipy's curve_fit with absolute_sigma=False); errors are NaN with 2 points."""
    n = x.size
    if n < 2 or np.ptp(x) == 0:
        raise ValueError(
            f"need at least 2 distinct abscissae to fit a line, got {n} ({np.unique(x).size} distinct)"
        )
    w = np.ones(n) if sigma is None else 1.0 / sigma**2
    sw = np.sqrt(w)
    D = np.stack([np.ones(n), x], axis=1) * sw[:, None]
    coef, *_ = np.linalg.lstsq(D, y * sw, rcond=None)
    resid = (y - coef[0] - coef[1] * x) * sw
    dof = n - 2
    if dof > 0:
        cov = np.linalg.inv(D.T @ D) * float(resid @ resid) / dof
        errs = np.sqrt(np.diag(cov))
    else:
        errs = np.array([np.nan, np.nan])
    ybar = np.average(y, weights=w)
    ss_tot = float(np.sum(w * (y - ybar) ** 2))
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    return {
        "intercept": float(coef[0]),
        "slope": float(coef[1]),
        "intercept_err": float(errs[0]),
        "slope_err": float(errs[1]),
        "r2": r2,
        "n": n,
    }


def _check_sigma(sigma: ArrayLike | None, n: int) -> np.ndarray | None:
    if sigma is None:
        return None
    return _check_values(sigma, "sigma", n=n, positive=True)


@dataclass(frozen=True)
class LinearFit(Result):
    """t* = a + b log(beta), fitted: a, b with standard errors, R^2, number of points."""

    a: float
    b: float
    a_err: float
    b_err: float
    r2: float
    n: int
    model: str = "t_star = a + b log(beta)"
    label: str = "fitted"


def fit_t_star(betas: ArrayLike, t_stars: ArrayLike, sigma: ArrayLike | None = None) -> LinearFit:
    """Fit t* = a + b log(beta) by least squares.

    Parameters
    ----------
    betas : array (B,)
        Finite, > 0.
    t_stars : array (B,)
        t* at each beta.
    sigma : array (B,), optional
        Their errors (e.g. TStar uncertainties): weights 1/sigma^2.

    Returns
    -------
    LinearFit
        a, b and their errors.
    """
    beta = check_betas(betas)
    ts = _check_values(t_stars, "t_stars", n=beta.size)
    f = _linfit(np.log(beta), ts, _check_sigma(sigma, beta.size))
    return LinearFit(f["intercept"], f["slope"], f["intercept_err"], f["slope_err"], f["r2"], f["n"])


@dataclass(frozen=True)
class PowerFit(Result):
    """min W2 ~ C a(beta)^p with a(beta) = sqrt(log(beta+1)/beta), fitted on log-log axes."""

    p: float
    C: float
    p_err: float
    C_err: float
    r2: float
    n: int
    model: str = "min_w2 = C * (log(beta + 1) / beta)^(p / 2)"
    label: str = "fitted"


def fit_min_w2(betas: ArrayLike, min_w2: ArrayLike, sigma: ArrayLike | None = None) -> PowerFit:
    """Fit min_t W2 = C a(beta)^p: log min_w2 = log C + p log a(beta).

    Parameters
    ----------
    betas : array (B,)
        Inverse temperatures.
    min_w2 : array (B,)
        The minimum W2 at each beta.
    sigma : array (B,), optional
        Relative errors of min_w2 (errors of log min_w2).

    Returns
    -------
    PowerFit
        p, C and their errors (C_err by the delta method).
    """
    beta = check_betas(betas)
    y = _check_values(min_w2, "min_w2", n=beta.size, positive=True)
    f = _linfit(np.log(temperature_scale(beta)), np.log(y), _check_sigma(sigma, beta.size))
    C = math.exp(f["intercept"])
    return PowerFit(f["slope"], C, f["slope_err"], C * f["intercept_err"], f["r2"], f["n"])


@dataclass(frozen=True)
class RateFit(Result):
    """W2 ~ K exp(-rate t) on the window [t_lo, t_hi], fitted: rate, its standard error, K."""

    rate: float
    rate_err: float
    prefactor: float
    t_lo: float
    t_hi: float
    n: int
    r2: float
    model: str = "w2 = prefactor * exp(-rate * t)"
    label: str = "fitted"


def fit_decay_rate(t: ArrayLike, w2: ArrayLike, tail: float | tuple[float, float] = 0.5) -> RateFit:
    """Exponential decay rate from a linear least-squares fit of log W2 against t on a window.

    Parameters
    ----------
    t : array (T,)
        Saved times; at least 3 of them in the window.
    w2 : array (T,)
        W2 at those times, > 0 in the window.
    tail : float or (float, float)
        A fraction f in (0, 1] (the window is the last f of the time span), or (t_lo, t_hi).

    Returns
    -------
    RateFit
        The rate (per unit time); a positive rate means decay.
    """
    t = check_times(t, "t")
    w = _check_values(w2, "w2", n=t.size)
    if isinstance(tail, tuple | list):
        if len(tail) != 2 or not all(math.isfinite(float(x)) for x in tail) or tail[0] >= tail[1]:
            raise ValueError(f"tail must be a fraction in (0, 1] or a window (t_lo, t_hi), got {tail!r}")
        lo, hi = float(tail[0]), float(tail[1])
    else:
        frac = float(tail)
        if not 0 < frac <= 1:
            raise ValueError(f"tail must be a fraction in (0, 1] or a window (t_lo, t_hi), got {tail!r}")
        hi = float(t[-1])
        lo = hi - frac * float(t[-1] - t[0])
    sel = (t >= lo) & (t <= hi)
    if sel.sum() < 3:
        raise ValueError(f"the fit window [{lo:.4g}, {hi:.4g}] holds {int(sel.sum())} saved times; need >= 3")
    if np.any(w[sel] <= 0):
        raise ValueError("w2 must be > 0 in the fit window (its logarithm is fitted)")
    f = _linfit(t[sel], np.log(w[sel]), None)
    return RateFit(
        rate=-f["slope"],
        rate_err=f["slope_err"],
        prefactor=math.exp(f["intercept"]),
        t_lo=float(t[sel][0]),
        t_hi=float(t[sel][-1]),
        n=f["n"],
        r2=f["r2"],
    )


# ------------------------------------------------------------------------ the theorem's bound


@dataclass(frozen=True)
class TerminalTime(Result):
    """First time the mass near V's top eigenspace reaches `threshold` (NaN, with a reason, if never)."""

    t: float
    index: int | None
    threshold: float
    reason: str = ""


def terminal_time(t: ArrayLike, mass: ArrayLike, threshold: float = 0.5) -> TerminalTime:
    """First crossing of `threshold` by mass on saved times, linearly interpolated between the saved
    times around it.

    Parameters
    ----------
    t : array (T,)
        Saved times.
    mass : array (T,)
        Values in [0, 1].
    threshold : float
        The level to cross.

    Returns
    -------
    TerminalTime
        The time, NaN with a reason when it never gets there.
    """
    t = check_times(t, "t")
    m = _check_values(mass, "mass", n=t.size)
    if np.any(m > 1):
        raise ValueError("mass must be fractions in [0, 1]")
    threshold = float(threshold)
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    hits = np.flatnonzero(m >= threshold)
    if hits.size == 0:
        return TerminalTime(
            math.nan,
            None,
            threshold,
            f"mass stays below {threshold} up to t = {t[-1]:.4g} (max {m.max():.3g})",
        )
    k = int(hits[0])
    if k == 0:
        return TerminalTime(float(t[0]), 0, threshold, "already at or above the threshold at the first time")
    m0, m1 = m[k - 1], m[k]
    tc = t[k - 1] + (threshold - m0) / (m1 - m0) * (t[k] - t[k - 1])
    return TerminalTime(float(tc), k, threshold)


# ------------------------------------------------------------------ lines with honest errors


@dataclass(frozen=True)
class LineFit(Result):
    """y = intercept + slope x fitted by weighted least squares (weights 1/sigma^2).

    slope_err, intercept_err: the larger of the errors the sigmas imply (absolute) and those the
    scatter implies (scaled by the residuals, as scipy's curve_fit with absolute_sigma=False; none
    with 2 points); rms: root mean square residual in the units of y; chi2: the weighted sum of
    squared residuals per degree of freedom (NaN with 2 points); x: what the abscissa is, in words.
    """

    slope: float
    intercept: float
    slope_err: float
    intercept_err: float
    rms: float
    chi2: float
    n: int
    x: str = "x"
    label: str = "fitted"


def fit_line(x: ArrayLike, y: ArrayLike, sigma: ArrayLike | None = None, x_name: str = "x") -> LineFit:
    """Fit y = intercept + slope x: x, y (n,) finite with at least 2 distinct x; sigma (n,) > 0
    the errors of y (None: equal weights, the errors from the scatter alone)."""
    xv = np.asarray(to_numpy(x), dtype=np.float64).ravel()
    yv = np.asarray(to_numpy(y), dtype=np.float64).ravel()
    if xv.shape != yv.shape or not (np.all(np.isfinite(xv)) and np.all(np.isfinite(yv))):
        raise ValueError(f"x and y must be finite and of one length, got {xv.shape} and {yv.shape}")
    if np.unique(xv).size < 2:
        raise ValueError(f"need at least 2 distinct abscissae to fit a line, got {xv.size} points")
    s = np.ones_like(xv) if sigma is None else np.asarray(to_numpy(sigma), dtype=np.float64).ravel()
    if s.shape != xv.shape or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("sigma must hold one finite error > 0 per point")
    D = np.stack([np.ones_like(xv), xv], axis=1) / s[:, None]
    coef, *_ = np.linalg.lstsq(D, yv / s, rcond=None)
    cov = np.linalg.inv(D.T @ D)
    resid = yv - coef[0] - coef[1] * xv
    dof = xv.size - 2
    chi2 = float(np.sum((resid / s) ** 2) / dof) if dof > 0 else math.nan
    if sigma is None:
        scale = chi2  # the residual variance alone (NaN with two points)
    else:
        scale = max(chi2, 1.0) if dof > 0 else 1.0  # two points: only the sigmas speak
    errs = np.sqrt(np.diag(cov) * scale)
    return LineFit(
        slope=float(coef[1]),
        intercept=float(coef[0]),
        slope_err=float(errs[1]),
        intercept_err=float(errs[0]),
        rms=float(np.sqrt(np.mean(resid**2))),
        chi2=chi2,
        n=int(xv.size),
        x=x_name,
    )
