"""Polynomial interpolation on an interval by barycentric formulas: Chebyshev-Lobatto points, their
differentiation matrix, interpolation from any distinct points, local Lagrange on a uniform grid,
and the Chebyshev coefficients of sampled values (for a resolution test).  NumPy float64 throughout.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "barycentric_matrix",
    "barycentric_weights",
    "chebyshev_coefficients",
    "differentiation_matrix",
    "lobatto",
    "lobatto_weights",
    "local_lagrange",
]


def lobatto(p: int) -> np.ndarray:
    """The p >= 2 Chebyshev-Lobatto points on [-1, 1], increasing."""
    return -np.cos(np.pi * np.arange(p) / (p - 1))


def lobatto_weights(p: int) -> np.ndarray:
    """Barycentric weights of the Lobatto points (up to a common factor)."""
    w = (-1.0) ** np.arange(p)
    w[0] *= 0.5
    w[-1] *= 0.5
    return w


def barycentric_weights(x: np.ndarray) -> np.ndarray:
    """Barycentric weights 1 / prod_{k != j} (x_j - x_k) of distinct points x (p,), rescaled by the
    interval so that no product under- or overflows for p up to about 100."""
    scale = (x.max() - x.min()) / 4.0
    dx = (x[:, None] - x[None, :]) / scale
    np.fill_diagonal(dx, 1.0)
    result: np.ndarray = 1.0 / np.prod(dx, axis=1)
    return result


def barycentric_matrix(x: np.ndarray, weights: np.ndarray, y: np.ndarray) -> np.ndarray:
    """L (M, p) with L @ f(x) the interpolating polynomial of f at the points y (M,)."""
    d = y[:, None] - x[None, :]
    exact = d == 0
    c = weights[None, :] / np.where(exact, 1.0, d)
    L = c / c.sum(axis=1, keepdims=True)
    rows = exact.any(axis=1)
    if rows.any():
        L[rows] = exact[rows].astype(np.float64)
    result: np.ndarray = L
    return result


def differentiation_matrix(x: np.ndarray) -> np.ndarray:
    """D (p, p) with D @ f(x) the derivative of the interpolating polynomial at the points x."""
    bw = barycentric_weights(x)
    dx = x[:, None] - x[None, :]
    np.fill_diagonal(dx, 1.0)
    D = (bw[None, :] / bw[:, None]) / dx
    np.fill_diagonal(D, 0.0)
    np.fill_diagonal(D, -D.sum(axis=1))
    result: np.ndarray = D
    return result


def chebyshev_coefficients(values: np.ndarray) -> np.ndarray:
    """Chebyshev coefficients (p,) of the interpolant of values at the increasing Lobatto points."""
    p = len(values)
    v = values[::-1]
    c = np.real(np.fft.fft(np.concatenate([v, v[-2:0:-1]]))) / (p - 1)
    c[0] /= 2.0
    c[p - 1] /= 2.0
    return c[:p]


def local_lagrange(x0: float, dx: float, values: np.ndarray, y: float, order: int = 6) -> float:
    """Interpolant at y of values on the uniform grid x0 + dx * k, from the `order` nearest points."""
    n = len(values)
    i = int(np.clip(np.floor((y - x0) / dx) - (order // 2 - 1), 0, n - order))
    xs = x0 + dx * np.arange(i, i + order)
    num = y - xs
    out = 0.0
    for a in range(order):
        others = np.delete(np.arange(order), a)
        out += values[i + a] * float(np.prod(num[others] / (xs[a] - xs[others])))
    return out
