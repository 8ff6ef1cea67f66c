"""locate_sources and sphere_quadrature: the finite-beta source and separatrix of the mean-field flow
on S^2 (d = 3), located by fates, checked against fates of tracers on both sides."""

import math

import numpy as np
import pytest

import attnflow as af
from attnflow.dynamics.sources import SourceSearch, locate_sources, sphere_quadrature
from attnflow.measures.densities import vmf_density
from attnflow.measures.quadrature import graded_sphere_quadrature

BETA, T_MAX = 5.0, 5.0
COARSE = {"h": 0.26, "du": 0.5, "eps": 1e-3, "eps_sep": 1e-2, "tracers": 8, "max_passes": 5}


@pytest.fixture(scope="module")
def search() -> SourceSearch:
    return locate_sources(af.worked_example(beta=BETA), T_MAX, **COARSE)


def _fates(att, X, w, points):
    """Fates (sign of <u_1, x(T_MAX)>) of points moved with the measure (X, w) as tracers."""
    n = len(points)
    weights = np.concatenate([w * (1.0 - 1e-30 * n), np.full(n, 1e-30)])
    tr = af.simulate(np.concatenate([X, points]), att, [0.0, T_MAX], method="adaptive", weights=weights)
    u1 = att.spectrum().top.basis[:, 0]
    return np.sign(tr.x[-1, -n:] @ u1)


@pytest.mark.slow  # a search of five passes on 3128 nodes
def test_tracers_on_either_side_of_the_located_source_and_separatrix_part(search):
    att = af.worked_example(beta=BETA)
    assert np.ptp(search.alpha_bracket) < 1e-3
    assert 0.25 < abs(search.alpha) < 0.4  # O(1/beta) from u_3 (0.32 rad at beta = 5)
    X, w = graded_sphere_quadrature(search.centre, search.u2, 0.26, 0.5, 1e-3, search.separatrix, 1e-2)
    delta = 0.01
    a = search.alpha + np.array([-delta, delta])
    along = np.cos(a)[:, None] * search.u3 + np.sin(a)[:, None] * search.u1
    c, m = search.centre, search.u2
    b = np.cross(c, m)
    j = np.flatnonzero(np.ptp(search.brackets, axis=1) < 0.01)[-3:]  # three located rings
    assert j.size == 3
    phi = search.brackets[j].mean(axis=1)[:, None] + np.array([-delta, delta])
    th = search.theta[j, None]
    rings = np.cos(th)[..., None] * c + np.sin(th)[..., None] * (
        np.cos(phi)[..., None] * m + np.sin(phi)[..., None] * b
    )
    fate = _fates(att, X, w, np.concatenate([along, rings.reshape(-1, 3)]))
    np.testing.assert_array_equal(fate, np.tile([-1.0, 1.0], 1 + j.size))


def test_the_separatrix_is_interpolated_and_mirrored():
    s = SourceSearch(
        0.0, np.array([-1e-3, 1e-3]), np.eye(3)[0], np.eye(3)[1], np.eye(3)[2],
        np.array([0.01, 0.1, 1.0]), np.array([[0.0, 0.02], [0.1, 0.12], [0.3, 0.32]]),
    )  # fmt: skip
    az = s.separatrix(np.array([1e-4, 0.1, math.pi / 2, math.pi - 0.1]))
    np.testing.assert_allclose(az[:, 0], [0.01, 0.11, 0.0, -0.11])  # constant below the first ring,
    np.testing.assert_allclose(az[:, 1], math.pi - az[:, 0])  # 0 at the saddle, mirrored beyond it
    assert s.width == pytest.approx(0.02)


def test_the_quadrature_takes_a_given_search_and_halves_its_steps_per_level():
    att = af.worked_example(beta=BETA)
    s = SourceSearch(0.0, np.zeros(2), *np.linalg.eigh(att.A)[1].T[::-1], np.array([0.1]), np.zeros((1, 2)))
    _, w0, again = sphere_quadrature(att, T_MAX, 0, search=s, eps=1e-3, eps_sep=1e-2)
    _, w1, _ = sphere_quadrature(att, T_MAX, 1, search=s, eps=1e-3, eps_sep=1e-2)
    assert again is s and np.all(w0 > 0) and w1.sum() == pytest.approx(1.0)
    assert 3.0 < len(w1) / len(w0) < 4.5  # spacing and log-steps halved
    with pytest.raises(ValueError, match="only without a given search"):
        sphere_quadrature(att, T_MAX, 0, search=s, tracers=4)


def test_weights_without_the_symmetry_are_refused_in_one_line():
    att = af.worked_example(beta=BETA)
    B = att.B + 0.1  # no longer symmetric under the reflection; A = V B^T kept symmetric
    with pytest.raises(ValueError, match="reflection"):
        locate_sources(af.Attention(np.eye(3), B, att.A @ np.linalg.inv(B.T), BETA), T_MAX, **COARSE)
    with pytest.raises(ValueError, match="d = 3"):
        locate_sources(af.worked_example(beta=BETA, d=2), T_MAX, **COARSE)
    with pytest.raises(ValueError, match="finite beta"):
        locate_sources(af.worked_example(beta=math.inf), T_MAX, **COARSE)
    with pytest.raises(ValueError, match="invariant"):
        locate_sources(
            att, T_MAX, density=vmf_density(np.array([1.0, 0.0, 1.0]) / math.sqrt(2), 2.0), **COARSE
        )
    with pytest.raises(ValueError, match="t_max"):
        locate_sources(att, -1.0, **COARSE)
    with pytest.raises(ValueError, match="level"):
        sphere_quadrature(att, T_MAX, -1)
    with pytest.raises(ValueError, match="finite beta"):
        sphere_quadrature(af.worked_example(beta=math.inf), T_MAX, 0, search=None)
