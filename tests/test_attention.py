import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.attention import (
    WEIGHTS,
    Attention,
    attention_from_A,
    load_attention,
    random_attention,
    top_eigenspace,
    worked_example,
)


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


# ------------------------------------------------------------------- worked examples, random, file


def test_worked_example_2d_numbers_of_math_md():
    att = worked_example(10.0, d=2)
    np.testing.assert_allclose(att.B, np.diag([3.0, 1 / 3]), atol=1e-15)
    np.testing.assert_allclose(att.A, [[0.25, 0.75], [0.75, 0.25]], atol=1e-15)
    np.testing.assert_allclose(att.V, [[1 / 12, 9 / 4], [1 / 4, 3 / 4]], atol=1e-14)  # V = A B^{-T}
    s = att.spectrum()
    np.testing.assert_allclose(s.eigenvalues, [1.0, -0.5], atol=1e-14)
    assert s.symmetric and s.gap == pytest.approx(1.5)
    u1 = s.top.basis[:, 0] * np.sign(s.top.basis[0, 0])
    np.testing.assert_allclose(u1, np.array([1.0, 1.0]) / math.sqrt(2), atol=1e-14)
    wv = np.linalg.eigvals(att.V)
    order = np.argsort(-wv.real)
    assert wv.real[order] == pytest.approx([1.2374, -0.4041], abs=1e-4)
    v1 = s.v_top_real.basis[:, 0] * np.sign(s.v_top_real.basis[0, 0])
    assert v1 == pytest.approx([0.8898, 0.4564], abs=1e-4)
    assert math.degrees(math.acos(v1 @ u1)) == pytest.approx(17.8, abs=0.05)
    assert np.linalg.norm(att.B.T @ u1) == pytest.approx(2.134, abs=5e-4)
    assert att.norm_B == pytest.approx(3.0)
    # the d = 3 example has the same ||B|| and |B^T u_1|; worked_example(beta) stays d = 3
    three = worked_example(10.0)
    u3 = three.spectrum().top.basis[:, 0]
    assert three.d == 3 and three.norm_B == pytest.approx(3.0)
    assert np.linalg.norm(three.B.T @ u3) == pytest.approx(2.134, abs=5e-4)
    with pytest.raises(ValueError, match="d must be 2 or 3"):
        worked_example(1.0, d=4)


@pytest.mark.parametrize("d", [2, 3, 5, 16])
def test_random_attention_symmetric_with_gap_and_well_conditioned_B(d):
    att = random_attention(d, seed=d, beta=7.0)
    assert att.d == d and att.beta == 7.0
    s = att.spectrum()
    assert s.symmetric and s.multiplicity == 1
    assert s.mu1 == pytest.approx(1.0) and s.gap >= 0.5 - 1e-12
    assert att.cond_B <= 4.0 + 1e-9
    X = np.random.default_rng(d).standard_normal((500, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    widths = np.linalg.norm(X @ att.B, axis=1)
    assert np.all((widths >= 0.5 - 1e-12) & (widths <= 2.0 + 1e-12))
    again = random_attention(d, seed=d, beta=7.0)
    np.testing.assert_array_equal(att.V, again.V)
    assert not np.array_equal(att.V, random_attention(d, seed=d + 1).V)


def test_random_attention_fully_random():
    att = random_attention(4, seed=0, symmetric=False)
    assert not att.spectrum().symmetric and att.cond_B <= 4.0 + 1e-9
    with pytest.raises(ValueError, match="d must be an integer >= 2"):
        random_attention(1, seed=0)


def test_load_attention_round_trip_and_errors(tmp_path):
    att = random_attention(4, seed=3)
    path = tmp_path / "w.npz"
    np.savez(path, Q=att.Q, K=att.K, V=att.V)
    loaded = load_attention(path, beta=5.0)
    assert loaded.d == 4 and loaded.beta == 5.0
    np.testing.assert_array_equal(loaded.A, att.A)

    def bad(name, **arrays):
        p = tmp_path / name
        np.savez(p, **arrays)
        return p

    I3, I4 = np.eye(3), np.eye(4)
    nan = np.eye(3)
    nan[0, 1] = np.nan
    cases = [
        (bad("missing.npz", Q=I3, K=I3), r"missing.npz: missing V \(found Q, K\)"),
        (bad("shape.npz", Q=I3, K=I4, V=I3), "shape.npz: K must be 3 x 3"),
        (bad("square.npz", Q=np.ones((3, 2)), K=I3, V=I3), "square.npz: Q must be a square"),
        (bad("nan.npz", Q=I3, K=I3, V=nan), "nan.npz: V contains NaN"),
        (bad("complex.npz", Q=I3 * 1j, K=I3, V=I3), "complex.npz: Q must be a real matrix"),
    ]
    for p, match in cases:
        with pytest.raises(ValueError, match=match):
            load_attention(p)
    singular = bad("singular.npz", Q=I3, K=np.diag([1.0, 1.0, 0.0]), V=I3)
    assert load_attention(singular).d == 3  # finite beta: B may be singular
    with pytest.raises(ValueError, match=r"singular\.npz: B = Q\^T K is singular"):
        load_attention(singular, beta=math.inf)
    np.save(tmp_path / "one.npy", I3)
    with pytest.raises(ValueError, match=r"one\.npy: a single array"):
        load_attention(tmp_path / "one.npy")
    (tmp_path / "text.npz").write_text("Q K V")
    with pytest.raises(ValueError, match=r"text\.npz: not a NumPy array file"):
        load_attention(tmp_path / "text.npz")
    with pytest.raises(FileNotFoundError, match=r"nowhere\.npz: no such file"):
        load_attention(tmp_path / "nowhere.npz")


def _keys(family, seed=4, symmetric=True):
    given = {"weights_seed": seed, "symmetric": symmetric, "ensemble": "conditioned"}
    return {k: given[k] for k in family.keys}


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_every_named_weights_family_builds_in_every_dimension_it_claims(name):
    """A fixed-d family builds its d (and only it); a family whose d the `d` key chooses builds any
    d >= 2, the same weights for the same keys, and refuses d < 2 naming d."""
    family = WEIGHTS[name]
    dims = [family.d] if family.d else [2, 3, 5, 8]
    for d in dims:
        assert family.dimension(d) == d
        att = family.build(d, **_keys(family))
        assert isinstance(att, Attention) and att.d == d and att.beta == 1.0
        again = family.build(d, **_keys(family))
        for M, N in ((att.Q, again.Q), (att.K, again.K), (att.V, again.V)):
            np.testing.assert_array_equal(M, N)
        assert family.label(**_keys(family)).startswith(name)
    if family.d:
        assert family.dimension(None) == family.d
        contradicts = f"weights = {name} has d = {family.d}; d = 7 contradicts"
        with pytest.raises(ValueError, match=contradicts) as err:
            family.dimension(7)
        assert "\n" not in str(err.value)
        np.testing.assert_array_equal(family.build(family.d).A, worked_example(1.0, d=family.d).A)
    else:
        assert family.dimension(None) == family.default_d
        with pytest.raises(ValueError, match=f"weights = {name} needs d >= 2"):
            family.dimension(1)


def test_random_weights_family_is_random_attention_with_its_keys():
    family = WEIGHTS["random"]
    for symmetric in (True, False):
        att = family.build(4, **_keys(family, seed=9, symmetric=symmetric))
        ref = random_attention(4, 9, symmetric=symmetric)
        np.testing.assert_array_equal(att.V, ref.V)
        assert att.spectrum().symmetric == symmetric
    assert family.label(weights_seed=9, symmetric=False) == "random (seed 9, fully random)"
