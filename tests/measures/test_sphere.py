import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from attnflow.measures.densities import vmf_density
from attnflow.measures.geometry import chordal_distance, geodesic_distance, spacing, tangent_project
from attnflow.measures.quadrature import circle_nodes, fibonacci_sphere, quadrature
from attnflow.measures.sampling import sample_uniform, sample_vmf


def mean_resultant(kappa, d):
    """E <mu, x> under vMF(kappa) on S^{d-1}: I_{d/2}(kappa) / I_{d/2-1}(kappa)."""
    return special.ive(d / 2, kappa) / special.ive(d / 2 - 1, kappa)


@pytest.mark.parametrize("d", [2, 3, 7])
def test_uniform_unit_rows_seeded_and_centred(d):
    X = sample_uniform(20000, d, seed=3)
    assert X.shape == (20000, d) and X.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    np.testing.assert_array_equal(X, sample_uniform(20000, d, seed=3))
    assert not np.array_equal(X, sample_uniform(20000, d, seed=4))
    # mean of a uniform point is 0, second moment I/d; 5 standard errors
    assert np.all(np.abs(X.mean(0)) < 5 / math.sqrt(20000 * d))
    np.testing.assert_allclose(X.T @ X / 20000, np.eye(d) / d, atol=5 * math.sqrt(2 / 20000) / d + 0.01)


def test_uniform_batch_shape():
    X = sample_uniform(10, 3, seed=0, M=4)
    assert X.shape == (4, 10, 3)


@pytest.mark.parametrize("d", [2, 3, 5, 16])
@pytest.mark.parametrize("kappa", [0.5, 10.0, 1e3, 1e6])
def test_vmf_mean_resultant_length(d, kappa):
    mean = np.zeros(d)
    mean[-1] = 1.0
    n = 20000
    X = sample_vmf(n, mean, kappa, seed=1)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    w = X @ mean
    # compare 1 - E<mu, x> (meaningful at large kappa) with the Bessel ratio
    target = 1 - mean_resultant(kappa, d)
    se = np.std(1 - w) / math.sqrt(n)
    assert abs(np.mean(1 - w) - target) < 6 * se + 1e-12


def test_vmf_exact_law_in_d3():
    """On S^2 the cosine w has density ∝ exp(kappa w) on [-1, 1]; KS test against its CDF."""
    kappa = 4.0
    w = sample_vmf(5000, [0, 0, 1], kappa, seed=2)[:, 2]

    def cdf(x):
        return np.expm1(kappa * (x + 1)) / np.expm1(2 * kappa)

    assert stats.kstest(w, cdf).pvalue > 1e-3


def test_vmf_tangent_direction_uniform():
    X = sample_vmf(20000, [0, 0, 1], 50.0, seed=5)
    phi = np.arctan2(X[:, 1], X[:, 0])
    assert stats.kstest(phi, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > 1e-3


def test_vmf_bad_input():
    with pytest.raises(ValueError, match="kappa"):
        sample_vmf(10, [0, 0, 1], -1.0)
    with pytest.raises(ValueError, match="mean"):
        sample_vmf(10, [0, 0, 0], 1.0)
    with pytest.raises(ValueError, match="N must be a positive integer"):
        sample_vmf(0, [0, 0, 1], 1.0)


def test_fibonacci_quasi_uniform():
    N = 4000
    X = fibonacci_sphere(N)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    assert np.all(np.abs(X.mean(0)) < 1e-3)
    # nearest-neighbour distances are all comparable to the spacing sqrt(4 pi / N)
    from scipy.spatial import cKDTree

    dist, _ = cKDTree(X).query(X, k=2)
    nn = dist[:, 1]
    h = spacing(N, 3)
    assert h == pytest.approx(math.sqrt(4 * math.pi / N))
    assert 0.5 * h < nn.min() and nn.max() < 1.5 * h


def test_geodesic_accurate_for_close_and_antipodal_points():
    x = np.array([1.0, 0.0, 0.0])
    for ang in [1e-12, 1e-6, 1.0, math.pi - 1e-9]:
        y = np.array([math.cos(ang), math.sin(ang), 0.0])
        assert geodesic_distance(x, y) == pytest.approx(ang, rel=1e-9)
        assert chordal_distance(x, y) == pytest.approx(2 * math.sin(ang / 2), rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 8), st.integers(0, 2**31 - 1))
def test_tangent_projection_is_tangent_and_idempotent(d, seed):
    rng = np.random.default_rng(seed)
    X = sample_uniform(16, d, seed=rng)
    W = rng.standard_normal((16, d))
    T = tangent_project(X, W)
    np.testing.assert_allclose(np.sum(T * X, axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(tangent_project(X, T), T, atol=1e-12)


# ---------------------------------------------------------------------------- quadrature nodes


def test_circle_nodes_equispaced_and_off_the_worked_examples_equator():
    X = circle_nodes(100)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-15)
    gaps = np.diff(np.unwrap(np.arctan2(X[:, 1], X[:, 0])))
    np.testing.assert_allclose(gaps, 2 * math.pi / 100, atol=1e-12)
    # N = 4 mod 8: midpoint nodes would sit on the line x_1 + x_2 = 0 (the d = 2 example's equator)
    for N in (4, 12, 100, 2**10):
        assert np.min(np.abs(circle_nodes(N) @ [1.0, 1.0])) > 1e-3 / N


@pytest.mark.parametrize("d", [2, 3])
def test_quadrature_second_moment_converges(d):
    """Mean of x_1^2 under the uniform measure is 1/d: exact on S^1 (trapezoid), converging on S^2."""
    errors = []
    for N in (100, 1000, 10000):
        X, w = quadrature(N, d)
        assert X.shape == (N, d) and w.shape == (N,) and np.all(w > 0)
        assert w.sum() == pytest.approx(1.0, abs=1e-14)
        errors.append(abs(w @ X[:, 0] ** 2 - 1 / d))
    if d == 2:
        assert max(errors) < 1e-14
    else:
        assert errors[0] > 5 * errors[1] > 25 * errors[2] and errors[2] < 1e-7


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("kappa", [0.5, 5.0, 50.0])
def test_vmf_quadrature_mean_resultant_converges(d, kappa):
    """sum_i w_i <mu, x_i> with w_i ∝ exp(kappa <mu, x_i>) tends to I_{d/2}(kappa) / I_{d/2-1}(kappa)."""
    mu = np.array([0.3, -0.5, 0.8][:d]) if d == 3 else np.array([0.6, 0.8])
    mu = mu / np.linalg.norm(mu)
    exact = mean_resultant(kappa, d)
    errors = []
    for N in (200, 2000, 20000):
        X, w = quadrature(N, d, density=vmf_density(mu, kappa))
        errors.append(abs(w @ (X @ mu) - exact))
    if d == 2:
        assert errors[-1] < 1e-12
    else:
        assert errors[2] < errors[1] < errors[0] and errors[2] < 1e-4 * (1 - exact + 1e-3)
    # kappa = 0: the uniform weights
    X, w = quadrature(50, d, density=vmf_density(mu, 0.0))
    np.testing.assert_allclose(w, 1 / 50, atol=1e-16)


def test_quadrature_with_a_user_density():
    # density 1 + x_3 on S^2: E[x_3] = E[x_3 + x_3^2] / E[1 + x_3] = 1/3
    X, w = quadrature(20000, 3, density=lambda X: 1.0 + X[:, 2] + 1e-3)
    assert w @ X[:, 2] == pytest.approx((1 / 3) / 1.001, abs=1e-6)


@pytest.mark.parametrize("d", [4, 6])
def test_quadrature_in_any_dimension_beats_a_cloud(d):
    """d >= 4 has no lattice: quasi-Monte Carlo nodes, unit rows, the same on every call, whose equal
    weights integrate smooth functions of the uniform measure (E[x_1^2] = 1/d, E[x_1^4] = 3/(d(d+2)),
    E[x_1 x_2] = 0) better than the median random cloud of the same size does."""
    from attnflow.measures.quadrature import qmc_sphere

    N = 4096
    X, w = quadrature(N, d)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-14)
    np.testing.assert_array_equal(X, qmc_sphere(N, d))
    np.testing.assert_allclose(w, 1.0 / N)

    def error(Y):
        return max(
            abs(np.mean(Y[:, 0] ** 2) - 1 / d),
            abs(np.mean(Y[:, 1] ** 4) - 3 / (d * (d + 2))),
            abs(np.mean(Y[:, 0] * Y[:, 2])),
        )

    clouds = sorted(error(sample_uniform(N, d, seed=s)) for s in range(9))
    assert error(X) < clouds[4] / 3


def test_quadrature_bad_input():
    with pytest.raises(ValueError, match=r"d >= 2, got d = 1"):
        quadrature(100, 1)
    with pytest.raises(ValueError, match=r"shape \(10,\)"):
        quadrature(10, 3, density=lambda X: np.ones(9))
    with pytest.raises(ValueError, match=">= 0"):
        quadrature(10, 3, density=lambda X: X[:, 0])
    with pytest.raises(ValueError, match=r"0 .*at 1 of the 10 nodes"):
        quadrature(10, 2, density=lambda X: (np.arange(10) > 0).astype(float))
    with pytest.raises(ValueError, match="underflows"):
        quadrature(1000, 3, density=vmf_density([0, 0, 1], 1e4))
    with pytest.raises(TypeError, match="callable"):
        quadrature(10, 3, density=np.ones(10))
    with pytest.raises(ValueError, match="d = 3"):
        quadrature(10, 3, density=vmf_density([1.0, 0.0], 1.0))
