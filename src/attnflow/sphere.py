"""Points of the unit sphere S^{d-1}: sampling, normalisation, tangent projection, distances."""

from __future__ import annotations

import math

import numpy as np

from ._checks import check_positive, to_numpy

SeedLike = int | np.random.Generator | None


def rng_from(seed: SeedLike) -> np.random.Generator:
    """A NumPy Generator from an int seed, a Generator (used as is) or None (fresh entropy)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def normalize(X: np.ndarray) -> np.ndarray:
    """Rows divided by their Euclidean norm, (..., d) -> (..., d)."""
    X = np.asarray(X, dtype=np.float64)
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def tangent_project(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """P_x^perp w = w - <x, w> x, row by row; X unit rows (..., d), W (..., d)."""
    return W - np.sum(X * W, axis=-1, keepdims=True) * X


def chordal_distance(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """|x - y| row by row, (..., d) x (..., d) -> (...)."""
    return np.linalg.norm(np.asarray(X) - np.asarray(Y), axis=-1)


def geodesic_distance(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Great-circle angle arccos <x, y> in [0, pi], computed as 2 atan2(|x - y|, |x + y|) (accurate
    for nearby and antipodal points alike)."""
    X, Y = np.asarray(X), np.asarray(Y)
    return 2.0 * np.arctan2(np.linalg.norm(X - Y, axis=-1), np.linalg.norm(X + Y, axis=-1))


def sample_uniform(N: int, d: int, seed: SeedLike = None, M: int | None = None) -> np.ndarray:
    """N i.i.d. points uniform on S^{d-1}: (N, d) float64, or (M, N, d) with a batch size M."""
    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    if d < 2:
        raise ValueError(f"d must be >= 2 (points of S^(d-1)), got {d}")
    shape = (N, d) if M is None else (int(check_positive(M, "M", integer=True)), N, d)
    G = rng_from(seed).standard_normal(shape)
    return normalize(G)


def sample_vmf(N: int, mean, kappa: float, seed: SeedLike = None) -> np.ndarray:
    """N i.i.d. points from the von Mises-Fisher law on S^{d-1}: density ∝ exp(kappa <mean, x>).

    Wood's (1994) rejection sampler for w = <mean, x>, written so that kappa up to 1e6 and beyond
    neither overflows nor loses the tangent component: 1 - w is computed directly.
    Returns (N, d) float64 with unit rows.  kappa = 0 gives the uniform law.
    """
    N = int(check_positive(N, "N", integer=True))
    mu = to_numpy(mean).astype(np.float64).ravel()
    if mu.size < 2 or not np.all(np.isfinite(mu)) or np.linalg.norm(mu) == 0:
        raise ValueError(f"mean must be a finite non-zero vector with d >= 2 entries, got {mean!r}")
    mu = mu / np.linalg.norm(mu)
    kappa = float(kappa)
    if not math.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa must be a finite number >= 0, got {kappa!r}")
    d = mu.size
    rng = rng_from(seed)
    if kappa == 0:
        return sample_uniform(N, d, rng)
    m = d - 1.0
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
    # uniform directions orthogonal to mu
    G = rng.standard_normal((N, d))
    G -= np.outer(G @ mu, mu)
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    s = np.sqrt(np.clip(one_minus_w * (2.0 - one_minus_w), 0.0, None))  # sqrt(1 - w^2)
    X = w[:, None] * mu[None, :] + s[:, None] * G
    return normalize(X)


def fibonacci_sphere(N: int) -> np.ndarray:
    """N quasi-uniform points on S^2 (Fibonacci lattice): (N, 3), even spacing about sqrt(4 pi / N)."""
    N = int(check_positive(N, "N", integer=True))
    k = np.arange(N, dtype=np.float64) + 0.5
    z = 1.0 - 2.0 * k / N
    r = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    phi = k * math.pi * (3.0 - math.sqrt(5.0))  # golden angle
    return normalize(np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1))


def spacing(N: int, d: int) -> float:
    """Typical spacing of N evenly spread points on S^{d-1}: (|S^{d-1}| / N)^{1/(d-1)}."""
    area = 2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0)
    return (area / N) ** (1.0 / (d - 1))
