"""The sphere S^{d-1} itself: normalisation, tangent projection, distances, area, token spacing."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "chordal_distance",
    "geodesic_distance",
    "normalize",
    "spacing",
    "sphere_area",
    "tangent_project",
]


def normalize(X: np.ndarray) -> np.ndarray:
    """Rows divided by their Euclidean norm, (..., d) -> (..., d)."""
    X = np.asarray(X, dtype=np.float64)
    return np.asarray(X / np.linalg.norm(X, axis=-1, keepdims=True))


def tangent_project(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """P_x^perp w = w - <x, w> x, row by row; X unit rows (..., d), W (..., d)."""
    return np.asarray(W - np.sum(X * W, axis=-1, keepdims=True) * X)


def chordal_distance(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """|x - y| row by row, (..., d) x (..., d) -> (...)."""
    return np.asarray(np.linalg.norm(np.asarray(X) - np.asarray(Y), axis=-1))


def geodesic_distance(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Great-circle angle arccos <x, y> in [0, pi], computed as 2 atan2(|x - y|, |x + y|) (accurate
    for nearby and antipodal points alike)."""
    X, Y = np.asarray(X), np.asarray(Y)
    return np.asarray(2.0 * np.arctan2(np.linalg.norm(X - Y, axis=-1), np.linalg.norm(X + Y, axis=-1)))


def sphere_area(d: int) -> float:
    """Surface area |S^{d-1}| = 2 pi^{d/2} / Gamma(d/2) of the unit sphere in R^d (2 pi for d = 2,
    4 pi for d = 3)."""
    return float(2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0))


def spacing(N: int, d: int) -> float:
    """Typical spacing of N evenly spread points on S^{d-1}: (|S^{d-1}| / N)^{1/(d-1)}."""
    return float((sphere_area(d) / N) ** (1.0 / (d - 1)))
