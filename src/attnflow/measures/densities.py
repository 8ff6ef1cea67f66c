"""Densities of rho_0 with respect to the uniform law on S^{d-1}, normalised and not.

A density is a callable X (N, d) -> (N,). `*_density` gives it up to its constant, scaled so that its
largest value is 1 (what quadrature weights need: they are normalised by their sum); `*_normaliser`
gives that constant Z = integral f dsigma, sigma the uniform probability, so that f / Z integrates to
1 (what the N = infinity reference needs). MEASURES (`registry`) names them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from .._checks import to_numpy

DensityFn = Callable[[np.ndarray], np.ndarray]

__all__ = [
    "DensityFn",
    "check_vmf",
    "uniform_density",
    "vmf_density",
    "vmf_normaliser",
    "vmf_pair_sup",
]


def uniform_density(d: int) -> DensityFn:
    """The uniform law's density, f = 1 (X (N, d) -> ones (N,))."""

    def f(X: np.ndarray) -> np.ndarray:
        return np.ones(np.shape(X)[0])

    return f


def check_vmf(mean: ArrayLike, kappa: float) -> tuple[np.ndarray, float]:
    """The von Mises-Fisher parameters, checked: the unit mean direction (d,) and kappa >= 0."""
    mu = to_numpy(mean).astype(np.float64).ravel()
    if mu.size < 2 or not np.all(np.isfinite(mu)) or np.linalg.norm(mu) == 0:
        raise ValueError(f"mean must be a finite non-zero vector with d >= 2 entries, got {mean!r}")
    mu = mu / np.linalg.norm(mu)
    kappa = float(kappa)
    if not math.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa must be a finite number >= 0, got {kappa!r}")
    return mu, kappa


def vmf_density(mean: ArrayLike, kappa: float) -> DensityFn:
    """The von Mises-Fisher density up to its constant, f(x) = exp(kappa (<mean, x> - 1)) in (0, 1].

    For `quadrature(N, d, density=vmf_density(mean, kappa))`. Written so that it never overflows; it
    underflows to 0 at the antipode of `mean` once 2 kappa > 745 (float64), which quadrature reports.

    Parameters
    ----------
    mean : array (d,)
        The mean direction.
    kappa : float
        The concentration, >= 0.

    Returns
    -------
    callable
        f: X (N, d) -> (N,).
    """
    mu, kappa = check_vmf(mean, kappa)

    def f(X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.shape[-1] != mu.size:
            raise ValueError(f"vmf_density: points have d = {X.shape[-1]} but mean has d = {mu.size}")
        return np.asarray(np.exp(kappa * (X @ mu - 1.0)))

    return f


def vmf_normaliser(d: int, kappa: float) -> float:
    """Z = integral exp(kappa (<m, x> - 1)) dsigma(x) over S^{d-1}, sigma the uniform probability: the
    constant that makes `vmf_density(m, kappa) / Z` a probability density w.r.t. sigma.

    Z = Gamma(d/2) (kappa/2)^{1 - d/2} I_{d/2-1}(kappa) e^{-kappa} = e^{-kappa} 0F1(; d/2; kappa^2/4); in
    closed form i0e(kappa) for d = 2 and (1 - e^{-2 kappa}) / (2 kappa) for d = 3; 1 at kappa = 0.
    Never overflows (the scaled Bessel function; the series where that underflows, at large d).
    """
    k = float(kappa)
    if not math.isfinite(k) or k < 0:
        raise ValueError(f"kappa must be a finite number >= 0, got {kappa!r}")
    if k == 0:
        return 1.0
    if d == 2:
        from scipy.special import i0e

        return float(i0e(k))
    if d == 3:
        return -math.expm1(-2.0 * k) / (2.0 * k)
    from scipy.special import gammaln, hyp0f1, ive

    nu = d / 2.0 - 1.0
    scaled = float(ive(nu, k))  # I_nu(kappa) e^{-kappa}
    if scaled > 0:
        return math.exp(float(gammaln(d / 2.0)) - nu * math.log(k / 2.0) + math.log(scaled))
    # kappa so small against nu that I_nu underflows: Z = e^{-kappa} 0F1(; d/2; kappa^2 / 4), whose
    # series is then near 1 (Z <= 1, so kappa < 745 here and nothing overflows)
    return math.exp(-k) * float(hyp0f1(d / 2.0, k * k / 4.0))


def vmf_pair_sup(d: int, kappa: float) -> float:
    """sup_x f(x) + f(-x) of `vmf_density` (at x = +-mean): 1 + e^{-2 kappa}."""
    return 1.0 + math.exp(-2.0 * float(kappa))
