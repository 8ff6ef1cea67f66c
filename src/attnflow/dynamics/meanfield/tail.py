"""Label families: the initial quadrature of rho_0 on S^1 graded toward the separatrices, written in
log-offsets so that it continues without end toward each separatrix (MATH.md, "Weighted measures").

Each arc between two consecutive separatrices c_a < c_b (gap g) carries nodes equispaced in

    u(x) = (x - g/2) / h + ( log tan(x/4) - log tan((g - x)/4) ) / du,      x in (0, g)

the offset from c_a: the node density du/dx = 1/h + 1/(du 2 sin(x/2)) + 1/(du 2 sin((g - x)/2)) is
the graded quadrature's (`sphere.graded_circle_quadrature`, whose inner scale eps is 0 here), so
spacing h far from the separatrices and equal steps du in sigma = log(offset) near them.  u is odd
about the arc's midpoint, so both ends of an arc see the same offsets: x_i = exp(sigma_i) with
u(x_i) = -(i + 1/2), i = 0, 1, 2, ...  (labels; sigma decreasing without end).  The midpoint rule in
u gives node i the weight f(theta_i) / (du/dx) = f(theta_i) x_i dsigma_i with dsigma_i = 1 / (du/dsigma),
spectrally accurate for integrands smooth in u.  Below sigma = SIGMA_EXACT the offsets are an
arithmetic sequence in float64 (sigma_i = a - du (i + 1/2), dsigma_i = du): such labels are never
stored, only counted (`LabelFamily.sigma(i)` for any i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SIGMA_EXACT", "LabelFamily", "arc_family"]

SIGMA_EXACT = -40.0  # below this log-offset the x-terms of u are below float64 rounding
_LOG4 = math.log(4.0)


def _u_of_sigma(sigma: np.ndarray, g: float, h: float, du: float) -> np.ndarray:
    x = np.exp(sigma)
    q = x / 4.0
    tan_ratio = np.log(np.tan(q) / q)  # log tan(x/4) = sigma - log 4 + this, exact for tiny x
    result: np.ndarray = (x - g / 2.0) / h + (sigma - _LOG4 + tan_ratio - np.log(np.tan((g - x) / 4.0))) / du
    return result


def _du_dsigma(sigma: np.ndarray, g: float, h: float, du: float) -> np.ndarray:
    x = np.exp(sigma)
    result: np.ndarray = x / h + (x / (2.0 * np.sin(x / 2.0)) + x / (2.0 * np.sin((g - x) / 2.0))) / du
    return result


def _solve_offsets(g: float, h: float, du: float, n: int) -> tuple[np.ndarray, float]:
    """sigma_i (n,) with u(exp sigma_i) = -(i + 1/2) by safeguarded Newton, and the intercept a of
    the arithmetic tail sigma_i ~ a - du (i + 1/2)."""
    target = -(np.arange(n) + 0.5)
    a = du * g / (2.0 * h) + _LOG4 + math.log(math.tan(g / 4.0))
    top = math.log(g / 2.0)
    sigma = np.minimum(a + du * target, top - 1e-3)
    lo, hi = np.full(n, -np.inf), np.full(n, top)
    for _ in range(200):
        resid = _u_of_sigma(sigma, g, h, du) - target
        lo, hi = np.where(resid < 0, sigma, lo), np.where(resid > 0, sigma, hi)
        new = sigma - resid / _du_dsigma(sigma, g, h, du)
        bisect = np.where(np.isfinite(lo), 0.5 * (lo + hi), hi - 1.0)
        new = np.where((new <= lo) | (new >= hi), bisect, new)
        done = np.max(np.abs(new - sigma)) <= 1e-15 * (1.0 + np.max(np.abs(sigma)))
        sigma = new
        if done:
            break
    return sigma, a


@dataclass(frozen=True)
class LabelFamily:
    """The offsets of one arc end: labels i >= 0 at offset exp(sigma(i)) from the separatrix, cell
    width dsigma(i) in sigma.  sig, dsig: the stored labels (sigma >= SIGMA_EXACT); beyond them
    sigma(i) = a - du (i + 1/2) exactly."""

    sig: np.ndarray
    dsig: np.ndarray
    a: float
    du: float

    @property
    def n_stored(self) -> int:
        return len(self.sig)

    def sigma(self, i: np.ndarray | int) -> np.ndarray:
        i = np.asarray(i)
        deep = self.a - self.du * (i + 0.5)
        result: np.ndarray = np.where(i < self.n_stored, self.sig[np.minimum(i, self.n_stored - 1)], deep)
        return result

    def dsigma(self, i: np.ndarray | int) -> np.ndarray:
        i = np.asarray(i)
        return np.where(i < self.n_stored, self.dsig[np.minimum(i, self.n_stored - 1)], self.du)

    def first_below(self, log_r: float) -> int:
        """The smallest label whose sigma is < log_r."""
        k = int(np.searchsorted(-self.sig, -log_r, side="right"))
        if k < self.n_stored:
            return k
        return max(self.n_stored, math.floor((self.a - log_r) / self.du - 0.5) + 1)


def arc_family(g: float, h: float, du: float) -> LabelFamily:
    """The label family of an arc of length g in (0, 2 pi] (h, du > 0)."""
    n = 32
    while True:
        sig, a = _solve_offsets(g, h, du, n)
        if sig[-1] < SIGMA_EXACT:
            break
        n *= 2
    keep = sig >= SIGMA_EXACT
    return LabelFamily(sig[keep], 1.0 / _du_dsigma(sig[keep], g, h, du), a, du)
