import itertools
import math

import numpy as np
import pytest
from scipy import special

import attnflow as af
from attnflow.dynamics.separatrix import (
    SeparatrixSettings,
    default_brackets,
    kernel_width,
    locate_separatrices,
    mean_field_quadrature,
)
from attnflow.measures.densities import vmf_density
from attnflow.measures.quadrature import graded_circle_quadrature

S = -math.pi / 4  # a centre, and its antipode below


def angles(X):
    return np.arctan2(X[:, 1], X[:, 0])


@pytest.mark.parametrize(("h", "du", "eps"), [(0.05, 0.1, 1e-11), (0.01, 0.03, 1e-6), (0.2, 0.5, 1e-12)])
def test_graded_integrates_smooth_functions(h, du, eps):
    X, w = graded_circle_quadrature([S, S + math.pi], h, du, eps)
    th = angles(X)
    assert np.all(w > 0) and abs(w.sum() - 1.0) < 1e-14
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-15)
    # exact values: mean of cos^2 is 1/2, of exp(cos(theta - a)) is I_0(1), of cos(3 theta) is 0
    assert abs(w @ np.cos(th) ** 2 - 0.5) < 1e-12
    assert abs(w @ np.exp(np.cos(th - 0.3)) - special.i0(1.0)) < 1e-12
    assert abs(w @ np.cos(3 * th)) < 1e-12


def test_graded_with_density_gives_vmf_mean_resultant():
    kappa, mu = 4.0, np.array([math.cos(0.7), math.sin(0.7)])
    X, w = graded_circle_quadrature([S], 0.05, 0.1, 1e-10, density=vmf_density(mu, kappa))
    assert abs(w @ (X @ mu) - special.i1(kappa) / special.i0(kappa)) < 1e-12


def test_graded_spacing_node_count_and_symmetry():
    h, du, eps = 0.02, 0.05, 1e-10
    X, _ = graded_circle_quadrature([S, S + math.pi], h, du, eps)
    th = angles(X)
    # N: u(2 pi) = 2 pi / h + 2 log(8 / eps) / du per centre (up to O(eps^2) and O(h / du) terms),
    # rounded up to a multiple of 4
    U = 2 * math.pi / h + 2 * 2 * math.log(8 / eps) / du
    assert len(th) % 4 == 0 and abs(len(th) - U) < 4 + 0.01 * U
    r = np.sort(np.abs(np.angle(np.exp(1j * (th - S)))))
    # each centre lies midway between two nodes eps du apart; then distances grow by e^du per node
    np.testing.assert_allclose(r[:2], eps * du / 2, rtol=1e-3)
    mid = r[(r > 1e3 * eps) & (r < 1e-3)]
    ratios = mid[2::2] / mid[:-2:2]  # nodes come in pairs, one each side
    np.testing.assert_allclose(ratios, math.exp(du), rtol=1e-3)
    assert np.max(np.diff(np.sort(th))) <= h * (1 + 1e-9)
    # antipodal centres and the uniform density: the node set is symmetric under x -> -x
    np.testing.assert_allclose(np.sort(angles(-X)), np.sort(th), atol=1e-13)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"h": 0.0}, "h"), ({"du": -1.0}, "du"), ({"eps": 2.0}, "eps"), ({"centres": [np.nan]}, "centres")],
)
def test_graded_rejects_bad_arguments(kwargs, match):
    args = {"centres": [S], "h": 0.1, "du": 0.1, "eps": 1e-8, **kwargs}
    with pytest.raises(ValueError, match=match):
        graded_circle_quadrature(**args)


def symmetric_attention(beta):
    """B = I and V = A: the reflection swapping +-u_1 and fixing u_2 commutes with B and V, so the
    finite-beta separatrices of the uniform measure are exactly +-u_2 (angles 3 pi / 4 and -pi / 4)."""
    A = np.array([[0.25, 0.75], [0.75, 0.25]])
    return af.Attention(np.eye(2), np.eye(2), A, beta=beta)


def test_locate_separatrices_finds_the_symmetric_answer():
    att = symmetric_attention(5.0)
    kw = kernel_width(att)
    off = np.array([-0.05, 0.02])  # brackets not centred on the answer
    brackets = np.stack([S + off, S + math.pi + off])
    res = locate_separatrices(att, brackets, 12.0, h=kw, du=2 * kw, tracers=32, max_passes=6, tol=1e-9)
    exact = np.array([S, S + math.pi])
    assert res.width < 1e-8
    assert np.all(res.brackets[:, 0] <= exact + 1e-12) and np.all(exact - 1e-12 <= res.brackets[:, 1])
    np.testing.assert_allclose(res.angles, exact, atol=res.width)
    widths = [p["width"] for p in res.passes]
    assert all(b < a for a, b in itertools.pairwise(widths))


def test_separatrix_settings_record_is_the_keywords():
    """A SeparatrixSettings gives the search its keywords would (to the bit); keywords override its
    fields; bad fields are refused when the record is made."""
    att = symmetric_attention(5.0)
    kw = kernel_width(att)
    brackets = [[S - 0.05, S + 0.02], [S + math.pi - 0.05, S + math.pi + 0.02]]
    by_keywords = locate_separatrices(att, brackets, 6.0, h=kw, du=2 * kw, tracers=8, max_passes=1)
    settings = SeparatrixSettings(h=kw, du=2 * kw, tracers=99, max_passes=1)
    by_record = locate_separatrices(att, brackets, 6.0, settings, tracers=8)
    np.testing.assert_array_equal(by_record.brackets, by_keywords.brackets)
    assert by_record.passes[0]["tracers"] == by_keywords.passes[0]["tracers"] == 16  # 8 per bracket
    assert settings.tracers == 99  # a record is not changed by the overrides
    with pytest.raises(ValueError, match="tracers must be a positive integer"):
        SeparatrixSettings(h=kw, du=2 * kw, tracers=0)
    with pytest.raises(TypeError, match="max_passes must be a positive integer"):
        locate_separatrices(att, brackets, 6.0, h=kw, du=2 * kw, max_passes=1.5)


def test_locate_separatrices_refuses_a_bracket_without_one():
    att = symmetric_attention(5.0)
    u1 = math.pi / 4  # the attractor: nothing leaves its neighbourhood
    with pytest.raises(ValueError, match="no separatrix"):
        locate_separatrices(
            att, [[u1 - 0.05, u1 + 0.05], [u1 + math.pi - 0.05, u1 + math.pi + 0.05]], 5.0, h=0.3, du=0.6
        )


def test_mean_field_quadrature_levels_and_default_brackets():
    att = af.worked_example(10.0, d=2)
    br = default_brackets(att)
    np.testing.assert_allclose(br.mean(1), [3 * math.pi / 4, 7 * math.pi / 4])  # +-u_2
    X0, w0, res = mean_field_quadrature(att, 8.0, 0, tracers=16, max_passes=1)
    assert np.all(res.brackets[:, 0] >= br[:, 0]) and np.all(res.brackets[:, 1] <= br[:, 1])
    X1, w1, same = mean_field_quadrature(att, 8.0, 1, search=res)
    assert same is res and 1.8 < len(w1) / len(w0) < 2.2
    for X, w in ((X0, w0), (X1, w1)):
        assert abs(w @ np.exp(np.cos(angles(X))) - special.i0(1.0)) < 1e-12
    with pytest.raises(ValueError, match="level"):
        mean_field_quadrature(att, 10.0, -1, search=res)
    with pytest.raises(ValueError, match="d = 2"):
        mean_field_quadrature(af.worked_example(10.0), 10.0)
