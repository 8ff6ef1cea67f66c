"""The metastable time of N tokens, on arrays: its two branches and where they meet (docs/math.md,
"Why concentration lasts longer than guaranteed").

A cluster at u_1 is held by the tail of the measure near y* = B^T u_1 / |B^T u_1|. For N tokens that
tail is gone after about log N / lambda, so the finite-N departure grows like a log N + b; the
mean-field departure grows like (delta / lambda) beta. The metastable time of N tokens is about the
smaller of the two:

- `fit_log_n`: t_depart = a log N + b by weighted least squares (`fits.fit_line`), about the weighted
  mean of log N so that a and the intercept there are uncorrelated (the crossover's error needs both);
- `mean_field_departure`: the mean-field departure at one beta, where it is measured: the departures
  of the two largest N agree within max(tol t, dt) (the ladder's rule for times,
  `attnflow.science.convergence`);
- `on_finite_n_branch`: the points below the mean-field departure by more than a gap (the transition
  between the branches is not sharp: points near it would bend the fitted line);
- `MeanFieldBranch`: t_mf(beta) = slope beta + intercept, from the heuristic slope delta / lambda with
  the intercept fitted where the mean-field departure is measured (`heuristic_branch`), or a line
  through measured mean-field departures (`measured_branch`);
- `crossover`: N*, where the branches meet (a log N* + b = t_mf), with its error.

What these fit are observed laws, labelled "fitted": no verdict on the paper.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .fits import fit_line

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "SIGMA_FLOOR",
    "Crossover",
    "LogNFit",
    "MeanFieldBranch",
    "crossover",
    "fit_log_n",
    "heuristic_branch",
    "mean_field_departure",
    "measured_branch",
    "on_finite_n_branch",
]

#: the smallest error (time units) a departure is fitted with: the integrator's tolerance moves a
#: departure by about 1e-3 (rtol 1e-5 against 1e-9, docs/experiments.md "metastability"), and the save
#: grid's bias alone can be far smaller, which would let one point outweigh all the others
SIGMA_FLOOR = 0.01


def _plain(record: DataclassInstance) -> dict[str, object]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(record).items()}


def _sigmas(errors: ArrayLike | None, n: int) -> np.ndarray:
    """Errors of n values, NaN or missing ones and those below SIGMA_FLOOR raised to it."""
    s = np.full(n, SIGMA_FLOOR) if errors is None else np.asarray(errors, dtype=np.float64).ravel()
    if s.shape != (n,):
        raise ValueError(f"errors must hold one error per value ({n}), got shape {s.shape}")
    return np.where(np.isfinite(s), np.maximum(s, SIGMA_FLOOR), SIGMA_FLOOR)


# ------------------------------------------------------------------------------ finite N


@dataclass(frozen=True)
class LogNFit:
    """t_depart = a log N + b, fitted (weights 1/sigma^2).

    a: time per e-fold of N (a ln 2 per doubling); b: the intercept (log N = 0); centre: the weighted
    mean of log N, where the line's value b_centre = a centre + b is uncorrelated with a; errors: the
    larger of those the sigmas and the scatter imply (`fits.LineFit`); rms: root mean square residual
    (time units); chi2 per degree of freedom (NaN with two points); Ns: the N fitted.
    """

    a: float
    a_err: float
    b: float
    b_err: float
    centre: float
    b_centre: float
    b_centre_err: float
    rms: float
    chi2: float
    n: int
    Ns: tuple[int, ...]
    model: str = "t_depart = a log N + b"
    label: str = "fitted"

    def at(self, N: ArrayLike) -> np.ndarray:
        """a log N + b at N (a number or an array)."""
        return self.a * np.log(np.asarray(N, dtype=np.float64)) + self.b

    def to_dict(self) -> dict[str, object]:
        return _plain(self)


def fit_log_n(Ns: ArrayLike, t: ArrayLike, errors: ArrayLike | None = None) -> LogNFit:
    """Fit t = a log N + b to departures t (n,) at token counts Ns (n,), n >= 2 with two distinct N;
    errors (n,): each departure's error, floored at SIGMA_FLOOR (None: SIGMA_FLOOR each)."""
    N = np.asarray(Ns, dtype=np.float64).ravel()
    y = np.asarray(t, dtype=np.float64).ravel()
    if N.shape != y.shape or not (np.all(np.isfinite(y)) and np.all(N >= 1)):
        raise ValueError(f"Ns and t must be finite, N >= 1, and of one length; got {N.shape} and {y.shape}")
    s = _sigmas(errors, y.size)
    x = np.log(N)
    w = 1.0 / s**2
    centre = float(np.sum(w * x) / np.sum(w)) if x.size else math.nan
    f = fit_line(x - centre, y, s, x_name="log N - centre")
    b = f.intercept - f.slope * centre
    b_err = math.hypot(f.intercept_err, centre * f.slope_err)
    return LogNFit(
        a=f.slope,
        a_err=f.slope_err,
        b=b,
        b_err=b_err,
        centre=centre,
        b_centre=f.intercept,
        b_centre_err=f.intercept_err,
        rms=f.rms,
        chi2=f.chi2,
        n=f.n,
        Ns=tuple(round(float(v)) for v in N),
    )


def on_finite_n_branch(t: ArrayLike, t_mf: float, gap: float) -> np.ndarray:
    """Which departures t (n,) lie on the finite-N branch: finite and below the mean-field departure
    t_mf by more than `gap` (every finite one when t_mf is NaN or inf)."""
    y = np.asarray(t, dtype=np.float64)
    if not math.isfinite(t_mf):
        return np.isfinite(y)
    return np.isfinite(y) & (y < t_mf - gap)


def mean_field_departure(
    Ns: ArrayLike, t: ArrayLike, errors: ArrayLike, dt: float, tol: float
) -> tuple[float, float] | None:
    """The mean-field departure at one beta, (value, error), where it is measured: the departures of
    the two largest N (of those with a finite departure) differ by at most max(tol t, dt); the value
    is the largest N's, its error the last difference and that departure's own error, in quadrature.
    None where they differ more (the departure still grows with N) or fewer than two N departed."""
    N = np.asarray(Ns, dtype=np.float64).ravel()
    y = np.asarray(t, dtype=np.float64).ravel()
    e = np.asarray(errors, dtype=np.float64).ravel()
    ok = np.flatnonzero(np.isfinite(y))
    if ok.size < 2:
        return None
    order = ok[np.argsort(N[ok])]
    last, before = int(order[-1]), int(order[-2])
    diff = abs(float(y[last] - y[before]))
    if diff > max(tol * abs(float(y[last])), dt):
        return None
    own = float(e[last]) if math.isfinite(float(e[last])) else 0.0
    return float(y[last]), math.hypot(diff, own)


# ---------------------------------------------------------------------------- mean field


@dataclass(frozen=True)
class MeanFieldBranch:
    """t_mf(beta) = slope beta + intercept: the mean-field departure against beta.

    slope, slope_err: the heuristic delta / lambda (error 0) or a fitted slope; intercept and its
    error, fitted (NaN error where nothing was measured: then the intercept is 0, the heuristic
    alone); centre: the beta where the line's error, centre_err, is uncorrelated with the slope's;
    betas, values, errors: the
    measured mean-field departures it was fitted to; rms of their residuals; source: in words.
    """

    slope: float
    slope_err: float
    intercept: float
    intercept_err: float
    centre: float
    centre_err: float
    betas: tuple[float, ...]
    values: tuple[float, ...]
    errors: tuple[float, ...]
    rms: float
    source: str

    def at(self, beta: float) -> tuple[float, float]:
        """(t_mf, its error) at beta."""
        value = self.slope * beta + self.intercept
        return value, math.hypot(self.centre_err, (beta - self.centre) * self.slope_err)

    def to_dict(self) -> dict[str, object]:
        return _plain(self)


def heuristic_branch(slope: float, betas: ArrayLike, values: ArrayLike, errors: ArrayLike) -> MeanFieldBranch:
    """t_mf = slope beta + c with the heuristic slope (delta / lambda) and c fitted to the measured
    mean-field departures `values` (n,) at `betas` (n,) with their `errors` (n,) (weights 1/error^2,
    the error scaled by the scatter as `fits.fit_line` does); with none measured, c = 0 with a NaN
    error (the heuristic alone)."""
    b = np.asarray(betas, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    s = _sigmas(np.asarray(errors, dtype=np.float64), y.size)
    words = f"heuristic slope delta/lambda = {slope:.4g}"
    if y.size == 0:
        return MeanFieldBranch(
            slope, 0.0, 0.0, math.nan, 0.0, math.nan, (), (), (), math.nan,
            f"{words}, intercept not measured (taken as 0: no beta's departure converged in N)",
        )  # fmt: skip
    resid = y - slope * b
    w = 1.0 / s**2
    c = float(np.sum(w * resid) / np.sum(w))
    chi2 = float(np.sum(w * (resid - c) ** 2) / (y.size - 1)) if y.size > 1 else math.nan
    c_err = math.sqrt(max(chi2, 1.0) / float(np.sum(w))) if y.size > 1 else math.sqrt(1.0 / float(np.sum(w)))
    rms = float(np.sqrt(np.mean((resid - c) ** 2)))
    where = ", ".join(f"{v:g}" for v in b)
    return MeanFieldBranch(
        slope, 0.0, c, c_err, 0.0, c_err, tuple(b.tolist()), tuple(y.tolist()), tuple(s.tolist()), rms,
        f"{words}, intercept fitted to the mean-field departures measured at beta = {where}",
    )  # fmt: skip


def measured_branch(
    betas: ArrayLike, values: ArrayLike, errors: ArrayLike, slope: float, source: str
) -> MeanFieldBranch:
    """t_mf = s beta + c fitted (both free) to mean-field departures measured at two betas or more
    (`source` says where they come from); at one beta, the heuristic `slope` through it."""
    b = np.asarray(betas, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    s = _sigmas(np.asarray(errors, dtype=np.float64), y.size)
    if np.unique(b).size < 2:
        branch = heuristic_branch(slope, b, y, s)
        return MeanFieldBranch(**{**asdict(branch), "source": f"{source}; {branch.source}"})
    w = 1.0 / s**2
    centre = float(np.sum(w * b) / np.sum(w))
    f = fit_line(b - centre, y, s, x_name="beta - centre")
    intercept = f.intercept - f.slope * centre
    return MeanFieldBranch(
        f.slope, f.slope_err, intercept, math.hypot(f.intercept_err, centre * f.slope_err), centre,
        f.intercept_err, tuple(b.tolist()), tuple(y.tolist()), tuple(s.tolist()), f.rms,
        f"{source}: a line through the mean-field departures at beta = {', '.join(f'{v:g}' for v in b)}",
    )  # fmt: skip


# ----------------------------------------------------------------------------- crossover


@dataclass(frozen=True)
class Crossover:
    """N*, where the finite-N branch a log N + b reaches the mean-field departure t_mf: log N* and its
    error (NaN with a reason where the branch does not grow with N or t_mf is unknown)."""

    N_star: float
    log_N_star: float
    log_N_star_err: float
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return _plain(self)


def crossover(fit: LogNFit, t_mf: float, t_mf_err: float) -> Crossover:
    """N* = exp((t_mf - b) / a), its error propagated from a, the centred intercept and t_mf (each
    independent): var log N* = (err_t_mf^2 + err_b_centre^2 + ((t_mf - b_centre) err_a / a)^2) / a^2.
    Not determined (NaN, with the reason) where a is not positive by more than its error."""
    if not (math.isfinite(fit.a) and fit.a > 0 and fit.a > fit.a_err):
        return Crossover(
            math.nan,
            math.nan,
            math.nan,
            f"the finite-N branch does not grow with N (a = {fit.a:.3g} ± {fit.a_err:.2g})",
        )
    if not math.isfinite(t_mf):
        return Crossover(math.nan, math.nan, math.nan, "the mean-field departure is not known")
    rise = t_mf - fit.b_centre
    log_n = fit.centre + rise / fit.a
    t_err = t_mf_err if math.isfinite(t_mf_err) else math.nan
    var = (t_err**2 + fit.b_centre_err**2 + (rise * fit.a_err / fit.a) ** 2) / fit.a**2
    N_star = math.exp(log_n) if log_n < 700 else math.inf
    return Crossover(N_star, log_n, math.sqrt(var) if math.isfinite(var) else math.nan)
