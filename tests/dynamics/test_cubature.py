"""Adaptive Clenshaw-Curtis cubature: exact on polynomials, honest error estimates, nodes budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnflow.dynamics.cubature import clenshaw_curtis, grid_cells, refine


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_clenshaw_curtis_is_exact_on_polynomials_up_to_degree_n(n):
    x, w = clenshaw_curtis(n)
    for k in range(n + 1):
        exact = 0.0 if k % 2 else 2.0 / (k + 1)
        assert abs(np.sum(w * x**k) - exact) < 1e-14
    if n >= 4:  # nested: every other node is a node of the n/2 rule
        np.testing.assert_allclose(x[::2], clenshaw_curtis(n // 2)[0], atol=1e-15)


def test_clenshaw_curtis_rejects_odd_n():
    with pytest.raises(ValueError, match="even"):
        clenshaw_curtis(5)


def test_refine_1d_vector_integrand_with_a_sharp_peak():
    def f(p):
        x = p[:, 0]
        return np.stack([np.exp(-(x**2)), 1.0 / (1.0 + (100.0 * (x - 0.3)) ** 2)], axis=1)

    lo, hi = grid_cells(-10.0, 10.0, 4.0, 1)
    r = refine(f, lo, hi, rtol=1e-10)
    exact = np.array([math.sqrt(math.pi), (math.atan(100 * 9.7) + math.atan(100 * 10.3)) / 100])
    assert r.converged
    assert np.all(np.abs(r.value - exact) <= r.error)
    assert np.all(r.error <= 1e-10 * exact)


def test_refine_2d_gaussians_error_estimate_covers_the_error():
    def f(p):
        x, y = p[:, 0], p[:, 1]
        return np.stack([np.exp(-(x**2) - 2 * y**2), np.exp(-50 * ((x - 1) ** 2 + y**2))], axis=1)

    lo, hi = grid_cells(-8.0, 8.0, 4.0, 2)
    r = refine(f, lo, hi, rtol=1e-8)
    exact = np.array([math.pi / math.sqrt(2), math.pi / 50])
    assert r.converged
    assert np.all(np.abs(r.value - exact) <= r.error)


def test_refine_stops_at_max_nodes_and_says_so():
    def f(p):
        return np.abs(p[:, :1] - 0.123)  # a kink: needs many rounds

    lo, hi = grid_cells(-1.0, 1.0, 2.0, 1)
    r = refine(f, lo, hi, rtol=1e-14, max_nodes=500)
    assert not r.converged
    assert r.nodes <= 500
    assert abs(r.value[0] - (1.123**2 + 0.877**2) / 2) <= r.error[0]
