import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.model import Attention, attention_from_A, top_eigenspace, worked_example


def random_orthogonal(d, rng):
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    return Q * np.sign(np.diag(R))


def test_B_and_A_definitions():
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((4, 4)) for _ in range(3))
    att = Attention(Q, K, V, beta=2.0)
    x, y = rng.standard_normal(4), rng.standard_normal(4)
    assert np.isclose((Q @ x) @ (K @ y), x @ att.B @ y)
    np.testing.assert_allclose(att.A, V @ (Q.T @ K).T)
    assert att.d == 4 and att.beta == 2.0


def test_worked_example_spectrum():
    s = worked_example(10.0).spectrum()
    np.testing.assert_allclose(s.eigenvalues, [1.0, -0.5, -1.0], atol=1e-14)
    assert s.symmetric and s.multiplicity == 1
    assert s.mu1 == pytest.approx(1.0) and s.mu2 == pytest.approx(-0.5) and s.gap == pytest.approx(1.5)
    u1 = s.top.basis[:, 0]
    assert abs(abs(u1 @ np.array([1, 0, 1])) / math.sqrt(2) - 1) < 1e-12
    # V = A B^{-T} has eigenvalues 1, -1/2, -1; top eigenvector (3, 0, 1)/sqrt(10)
    v1 = s.v_top_real.basis[:, 0]
    assert abs(abs(v1 @ np.array([3, 0, 1])) / math.sqrt(10) - 1) < 1e-12
    np.testing.assert_allclose(np.sort(s.v_top_magnitude.eigenvalues.real), [-1.0, 1.0], atol=1e-12)
    assert s.v_top_magnitude.dim == 2


@pytest.mark.parametrize("d", [2, 3, 5, 8])
def test_planted_spectrum_and_multiplicity(d):
    rng = np.random.default_rng(d)
    U = random_orthogonal(d, rng)
    mus = np.sort(rng.uniform(-2, 1, d))[::-1].copy()
    mus[1] = mus[0] = 1.5  # two-dimensional top eigenspace
    if d > 2:
        mus[2] = 0.25
    A = U @ np.diag(mus) @ U.T
    B = random_orthogonal(d, rng) @ np.diag(rng.uniform(0.5, 2, d))
    att = attention_from_A(A, B)
    np.testing.assert_allclose(att.A, A, atol=1e-12)
    s = att.spectrum()
    assert s.multiplicity == 2
    np.testing.assert_allclose(s.eigenvalues, mus, atol=1e-12)
    if d > 2:
        assert s.gap == pytest.approx(1.25, abs=1e-12)
    else:
        assert s.mu2 is None and s.gap == 0.0
    P = U[:, :2] @ U[:, :2].T
    np.testing.assert_allclose(s.top_projector, P, atol=1e-12)


def test_nonsymmetric_riesz_projector():
    rng = np.random.default_rng(1)
    d = 4
    R = rng.standard_normal((d, d))
    A = R @ np.diag([3.0, 1.0, -1.0, -2.0]) @ np.linalg.inv(R)
    att = attention_from_A(A, np.eye(d))
    s = att.spectrum()
    assert not s.symmetric and s.asymmetry > 1e-3
    P = s.top_projector
    np.testing.assert_allclose(P @ P, P, atol=1e-10)
    np.testing.assert_allclose(P @ A, A @ P, atol=1e-10)
    np.testing.assert_allclose(P @ R[:, 0], R[:, 0], atol=1e-10)
    assert s.mu1 == pytest.approx(3.0) and s.gap == pytest.approx(2.0)


def test_planted_asymmetry():
    S = np.diag([2.0, 1.0, 0.0])
    W = np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 0.0]])
    for eps in [0.0, 0.1, 1.0]:
        A = S + eps * W
        att = attention_from_A(A, np.eye(3))
        expected = np.linalg.norm(eps * W) / np.linalg.norm(A)
        assert att.spectrum().asymmetry == pytest.approx(expected, abs=1e-14)


def test_complex_top_pair_gives_real_plane():
    A = np.array([[1.0, -2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, -1.0]])
    E = top_eigenspace(A, "real")
    assert E.dim == 2
    np.testing.assert_allclose(E.projector, np.diag([1.0, 1.0, 0.0]), atol=1e-12)


def test_cond_B():
    B = np.diag([1e3, 1.0, 1e-2])
    att = Attention(np.eye(3), B, np.eye(3))
    assert att.cond_B == pytest.approx(1e5)
    assert att.norm_B == pytest.approx(1e3)
    assert Attention(np.eye(2), np.diag([1.0, 0.0]), np.eye(2)).cond_B == math.inf


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(Q=np.ones((2, 3))), "Q must be a square"),
        (dict(K=np.eye(4)), "K must be 3 x 3"),
        (dict(V=np.full((3, 3), np.nan)), "V contains NaN"),
        (dict(beta=0.0), r"beta must be in \(0, inf\]"),
        (dict(beta=-1.0), r"beta must be in \(0, inf\]"),
        (dict(beta=float("nan")), r"beta must be in \(0, inf\]"),
        (dict(Q=np.eye(1)), "at least 2 x 2"),
    ],
)
def test_bad_input(kwargs, match):
    args = dict(Q=np.eye(3), K=np.eye(3), V=np.eye(3), beta=1.0) | kwargs
    with pytest.raises(ValueError, match=match):
        Attention(**args)


def test_beta_type_error_and_inf_allowed():
    with pytest.raises(TypeError, match="beta"):
        Attention(np.eye(2), np.eye(2), np.eye(2), beta="hot")
    assert Attention(np.eye(2), np.eye(2), np.eye(2), beta=math.inf).beta == math.inf


def test_immutable_and_with_beta():
    att = worked_example(10.0)
    with pytest.raises(ValueError):
        att.A[0, 0] = 5.0
    att2 = att.with_beta(1e6)
    assert att2.beta == 1e6 and att.beta == 10.0
    np.testing.assert_array_equal(att2.A, att.A)


def test_singular_B_rejected_by_attention_from_A():
    with pytest.raises(ValueError, match="B must be invertible"):
        attention_from_A(np.eye(3), np.diag([1.0, 1.0, 0.0]))


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_spectrum_rotation_invariant(d, seed):
    """Eigenvalues, gap and asymmetry do not change under X -> R X (Q, K, V -> R Q R^T, ...)."""
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    R = random_orthogonal(d, rng)
    s1 = Attention(Q, K, V).spectrum()
    s2 = Attention(R @ Q @ R.T, R @ K @ R.T, R @ V @ R.T).spectrum()
    assert s1.asymmetry == pytest.approx(s2.asymmetry, rel=1e-8, abs=1e-12)
    assert s1.mu1 == pytest.approx(s2.mu1, rel=1e-7, abs=1e-9)
