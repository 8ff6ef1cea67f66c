"""Shared test fixtures that are plain functions (imported by the test modules)."""

from __future__ import annotations

import numpy as np

import attnflow as af


def random_attention(d: int, beta: float, seed: int) -> af.Attention:
    """Seeded Gaussian Q, K, V with entries of variance 1/d."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.standard_normal((3, d, d)) / np.sqrt(d)
    return af.Attention(Q, K, V, beta)
