"""graded_sphere_quadrature: rho_0 on S^2 graded toward two antipodal poles and a separatrix through
them (the sources of the d = 3 flow and the curve between the basins)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from attnflow.measures.densities import vmf_density
from attnflow.measures.quadrature import graded_sphere_quadrature

C = np.array([1.0, 0.0, -1.0]) / math.sqrt(2.0)  # the worked example's source u_3
M = np.array([0.0, 1.0, 0.0])  # toward its saddle u_2: u_1^perp is the great circle through C and M
U1 = np.array([1.0, 0.0, 1.0]) / math.sqrt(2.0)


def test_unit_rows_positive_weights_and_exact_low_moments():
    X, w = graded_sphere_quadrature(C, M, h=0.1, du=0.3, eps=1e-6, eps_sep=1e-3)
    assert np.all(w > 0) and w.sum() == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=4e-16)
    np.testing.assert_allclose(w @ X, 0.0, atol=1e-15)  # symmetric under x -> -x
    np.testing.assert_allclose((X * w[:, None]).T @ X, np.eye(3) / 3.0, atol=1e-13)
    assert w @ X[:, 0] ** 4 == pytest.approx(0.2, abs=1e-13)  # degree 4, off the frame's axes


def test_the_kink_at_the_separatrix_is_integrated_and_converges():
    """integral |<u_1, x>| = 1/2: the kink lies on the great circle through the poles, where every
    ring is graded; the error falls as the steps do."""
    errs = []
    for scale in (1.0, 0.5, 0.25):
        X, w = graded_sphere_quadrature(C, M, h=0.2 * scale, du=0.6 * scale, eps=1e-6, eps_sep=1e-3)
        errs.append(abs(1.0 - 2.0 * w @ np.abs(X @ U1)))
    assert errs[0] < 1e-7 and errs[1] < errs[0] / 3 and errs[2] < errs[1] / 3


def _rings(r):
    """The distinct radii of rings (equal to rounding within a ring)."""
    r = np.sort(r)
    return r[np.concatenate([[True], np.diff(r) > 1e-6 * r[1:]])]


def test_nodes_reach_the_poles_in_equal_log_steps():
    du, eps = 0.2, 1e-9
    X, _ = graded_sphere_quadrature(C, M, h=0.1, du=du, eps=eps)
    r = _rings(np.linalg.norm(X - C, axis=1))
    near = r[(r > 100 * eps) & (r < 1e-3)]
    np.testing.assert_allclose(np.diff(np.log(near)), du, rtol=0.02)
    assert r[0] < eps  # the grading goes on below eps, with spacing about eps du
    far = _rings(np.linalg.norm(X + C, axis=1))
    np.testing.assert_allclose(far[: r.size // 4], r[: r.size // 4], rtol=1e-9)  # the antipodal pole alike


def test_a_curved_separatrix_is_followed_ring_by_ring():
    """Azimuths given per ring: each ring has a pair of nodes straddling its azimuth, at eps_sep du."""

    def curve(theta):
        a = 0.3 * np.sin(theta)
        return np.stack([a, a + math.pi], axis=1)

    du, eps_sep = 0.3, 1e-4
    X, _ = graded_sphere_quadrature(C, M, h=0.1, du=du, eps=1e-6, separatrix=curve, eps_sep=eps_sep)
    b = np.cross(C, M)
    ct = np.clip(X @ C, -1.0, 1.0)
    theta = np.arccos(ct)
    phi = np.arctan2(X @ b, X @ M)
    ring = np.abs(theta - math.pi / 3) < 0.02
    off = np.angle(np.exp(1j * (phi[ring] - 0.3 * np.sin(theta[ring]))))
    assert np.min(np.abs(off)) < eps_sep * du  # graded toward the curve,
    assert np.min(np.abs(phi[ring])) > 1e-3  # not toward phi = 0


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 10**6))
def test_any_frame_integrates_the_same_polynomials(seed):
    R = Rotation.random(random_state=seed).as_matrix()
    X, w = graded_sphere_quadrature(R @ C, R @ M, h=0.15, du=0.4, eps=1e-5)
    np.testing.assert_allclose((X * w[:, None]).T @ X, np.eye(3) / 3.0, atol=1e-12)


def test_a_density_reweights_the_nodes():
    mean, kappa = np.array([0.0, 0.6, 0.8]), 4.0
    X, w = graded_sphere_quadrature(C, M, h=0.05, du=0.2, eps=1e-6, density=vmf_density(mean, kappa))
    expected = 1.0 / math.tanh(kappa) - 1.0 / kappa  # the mean resultant length in d = 3
    np.testing.assert_allclose(w @ X, expected * mean, atol=1e-10)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="orthonormal"):
        graded_sphere_quadrature(C, U1 + 0.1 * M, h=0.1, du=0.3)
    with pytest.raises(ValueError, match="3-vectors"):
        graded_sphere_quadrature([1.0, 0.0], M, h=0.1, du=0.3)
    with pytest.raises(ValueError, match=r"eps must be <= 0\.1"):
        graded_sphere_quadrature(C, M, h=0.1, du=0.3, eps=0.5)
    with pytest.raises(ValueError, match="h must be"):
        graded_sphere_quadrature(C, M, h=-1.0, du=0.3)
    with pytest.raises(ValueError, match="separatrix"):
        graded_sphere_quadrature(C, M, h=0.1, du=0.3, separatrix=lambda t: np.zeros((3, 2)))
