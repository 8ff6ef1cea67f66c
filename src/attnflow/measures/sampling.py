"""Random points of S^{d-1}: i.i.d. uniform and von Mises-Fisher samples, seeded."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._checks import SeedLike, check_positive, rng_from
from .densities import check_vmf
from .geometry import normalize

__all__ = ["sample_uniform", "sample_vmf"]


def sample_uniform(N: int, d: int, seed: SeedLike = None, M: int | None = None) -> np.ndarray:
    """N i.i.d. points uniform on S^{d-1}.

    Parameters
    ----------
    N, d : int
        Points and dimension (d >= 2).
    seed : int or numpy.random.Generator, optional
        The same seed gives the same points.
    M : int, optional
        A batch size.

    Returns
    -------
    array (N, d) or (M, N, d)
        float64, unit rows.
    """
    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    if d < 2:
        raise ValueError(f"d must be >= 2 (points of S^(d-1)), got {d}")
    shape = (N, d) if M is None else (int(check_positive(M, "M", integer=True)), N, d)
    G = rng_from(seed).standard_normal(shape)
    return normalize(G)


def _wood_cosines(N: int, m: float, kappa: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Wood's (1994) rejection sampler for w = <mean, x> of the von Mises-Fisher law on S^m:
    (w, 1 - w), each (N,), with 1 - w computed directly (no cancellation for kappa up to 1e6)."""
    b = m / (2.0 * kappa + math.sqrt(4.0 * kappa**2 + m**2))  # stable form of Wood's b
    x0 = (1.0 - b) / (1.0 + b)
    c = kappa * x0 + m * math.log1p(-x0 * x0) if x0 < 1 else kappa * x0
    w = np.empty(N)
    one_minus_w = np.empty(N)
    filled = 0
    while filled < N:
        n = N - filled
        z = rng.beta(m / 2.0, m / 2.0, size=n)
        u = rng.uniform(size=n)
        den = 1.0 - (1.0 - b) * z
        wt = (1.0 - (1.0 + b) * z) / den
        omw = 2.0 * b * z / den  # 1 - w without cancellation
        # 1 - x0 w = (1 - x0) + x0 (1 - w), again without cancellation
        one_minus_x0w = 2.0 * b / (1.0 + b) + x0 * omw
        with np.errstate(divide="ignore"):
            ok = kappa * wt + m * np.log(one_minus_x0w) - c >= np.log(u)
        k = int(ok.sum())
        w[filled : filled + k] = wt[ok]
        one_minus_w[filled : filled + k] = omw[ok]
        filled += k
    return w, one_minus_w


def sample_vmf(N: int, mean: ArrayLike, kappa: float, seed: SeedLike = None) -> np.ndarray:
    """N i.i.d. points from the von Mises-Fisher law on S^{d-1}: density ∝ exp(kappa <mean, x>).

    Wood's (1994) rejection sampler for w = <mean, x>, written so that kappa up to 1e6 and beyond
    neither overflows nor loses the tangent component: 1 - w is computed directly.

    Parameters
    ----------
    N : int
        Points.
    mean : array (d,)
        The mean direction.
    kappa : float
        The concentration, >= 0; kappa = 0 gives the uniform law.
    seed : int or numpy.random.Generator, optional
        The same seed gives the same points.

    Returns
    -------
    array (N, d)
        float64, unit rows.
    """
    N = int(check_positive(N, "N", integer=True))
    mu, kappa = check_vmf(mean, kappa)
    d = mu.size
    rng = rng_from(seed)
    if kappa == 0:
        return sample_uniform(N, d, rng)
    w, one_minus_w = _wood_cosines(N, d - 1.0, kappa, rng)
    # uniform directions orthogonal to mu
    G = rng.standard_normal((N, d))
    G -= np.outer(G @ mu, mu)
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    s = np.sqrt(np.clip(one_minus_w * (2.0 - one_minus_w), 0.0, None))  # sqrt(1 - w^2)
    X = w[:, None] * mu[None, :] + s[:, None] * G
    return normalize(X)
