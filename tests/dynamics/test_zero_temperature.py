"""Exact zero-temperature flow and the projection Pi (MATH.md "Zero temperature", Corollary 2)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from scipy.stats import ortho_group

from attnflow.attention import Attention, attention_from_A, worked_example
from attnflow.dynamics.zero_temperature import ExactFlow, _eigen, project, simulate_zero_temperature
from attnflow.measures.sampling import sample_uniform


def random_problem(d: int, seed: int, mu=None) -> Attention:
    """Symmetric A = U diag(mu) U^T with descending mu (simple top) and a well-conditioned random B."""
    rng = np.random.default_rng(seed)
    U = ortho_group.rvs(d, random_state=rng)
    if mu is None:
        mu = np.sort(rng.uniform(-1.0, 1.0, d))[::-1]
        mu[0] = mu[1] + 0.3  # a visible gap
    A = U @ np.diag(mu) @ U.T
    B = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    return attention_from_A(A, B)


def reference_flow(X0: np.ndarray, att: Attention, times: np.ndarray) -> np.ndarray:
    """Independent reference: DOP853 (rtol 1e-12) on dx/dt = P_x^perp A x / |B^T x| itself."""
    A, B = np.asarray(att.A), np.asarray(att.B)
    n, d = X0.shape

    def rhs(_t, z):
        x = z.reshape(n, d)
        ax = x @ A.T
        return ((ax - np.sum(x * ax, 1, keepdims=True) * x) / np.linalg.norm(x @ B, axis=1)[:, None]).ravel()

    sol = solve_ivp(rhs, (0.0, times[-1]), X0.ravel(), method="DOP853", t_eval=times, rtol=1e-12, atol=1e-14)
    assert sol.success
    return sol.y.T.reshape(times.size, n, d)


def tan_to_top(X: np.ndarray, P1: np.ndarray) -> np.ndarray:
    """tan of the angle of each row to the subspace with orthogonal projector P1."""
    Y = X @ P1
    return np.linalg.norm(X - Y, axis=-1) / np.linalg.norm(Y, axis=-1)


TIMES = np.array([0.0, 0.25, 1.0, 2.5, 6.0])


@pytest.mark.parametrize("d", [2, 3, 4, 5, 6])
def test_exact_matches_direct_integration(d):
    att = random_problem(d, seed=d)
    X0 = sample_uniform(6, d, seed=10 + d)
    traj = simulate_zero_temperature(X0, att, TIMES)
    assert traj.info["method"] == "exact"
    assert traj.x.shape == (TIMES.size, 6, d)
    np.testing.assert_allclose(traj.x, reference_flow(X0, att, TIMES), atol=1e-9, rtol=0)


def test_worked_example_matches_direct_integration():
    att = worked_example()
    X0 = sample_uniform(10, 3, seed=3)
    traj = simulate_zero_temperature(X0, att, TIMES)
    np.testing.assert_allclose(traj.x, reference_flow(X0, att, TIMES), atol=1e-9, rtol=0)
    # the fallback integrator agrees too, states and clocks
    traj2 = simulate_zero_temperature(X0, att, TIMES, method="integrate")
    assert traj2.info["method"] == "integrate"
    np.testing.assert_allclose(traj2.x, traj.x, atol=1e-9, rtol=0)
    np.testing.assert_allclose(traj2.info["s"], traj.info["s"], atol=1e-9, rtol=0)


def test_state_is_expm_of_the_clock():
    """x(t_k) = expm(A s_k) x0 / |.| with the returned clocks (independent check through SciPy's expm)."""
    att = random_problem(4, seed=7)
    X0 = sample_uniform(5, 4, seed=8)
    traj = simulate_zero_temperature(X0, att, TIMES)
    S = traj.info["s"]
    assert S.shape == (TIMES.size, 5)
    for k in range(TIMES.size):
        for i in range(5):
            y = scipy.linalg.expm(np.asarray(att.A) * S[k, i]) @ X0[i]
            np.testing.assert_allclose(traj.x[k, i], y / np.linalg.norm(y), atol=1e-12)


def test_clock_bounds():
    """ds/dt = 1/|B^T x| lies in [1/||B||, ||B^{-1}||], so t/||B|| <= s <= t ||B^{-1}||."""
    att = random_problem(5, seed=2)
    X0 = sample_uniform(40, 5, seed=1)
    t = np.array([0.0, 0.1, 1.0, 10.0, 30.0])
    S = simulate_zero_temperature(X0, att, t).info["s"]
    assert np.all(S[0] == 0)
    lo = t[:, None] / att.norm_B
    hi = t[:, None] * np.linalg.norm(np.linalg.inv(att.B), 2)
    assert np.all(S >= lo * (1 - 1e-12)) and np.all(hi * (1 + 1e-12) >= S)
    assert np.all(np.diff(S, axis=0) > 0)


def test_tan_angle_closed_form():
    """From the closed form, with c = U^T x0 (U orthonormal eigenvectors of A, mu descending, top simple):

        tan angle(x(t), u_1) = sqrt( sum_{k>=2} exp(2 (mu_k - mu_1) s) c_k^2 ) / |c_1|
                            <= tan angle(x0, u_1) exp(-gamma s),

    with equality exactly when x0 lies in span(u_1, u_2) (always in d = 2).
    """
    d = 4
    mu = np.array([1.0, 0.4, -0.2, -1.0])
    att = random_problem(d, seed=5, mu=mu)
    sp = att.spectrum()
    U = np.asarray(sp.eigenvectors)
    X0 = sample_uniform(30, d, seed=4)
    # three tokens in span(u1, u2): equality
    X0[:3] = (
        np.array([[0.6, 0.8, 0, 0], [-0.3, np.sqrt(0.91), 0, 0], [0.05, -np.sqrt(1 - 0.0025), 0, 0]]) @ U.T
    )
    t = np.array([0.0, 0.5, 2.0, 8.0])
    traj = simulate_zero_temperature(X0, att, t)
    S = traj.info["s"]
    P1 = np.asarray(sp.top_projector)
    C = X0 @ U
    gamma = sp.gap
    assert gamma == pytest.approx(0.6)
    for k in range(t.size):
        got = tan_to_top(traj.x[k], P1)
        want = np.sqrt(np.sum((np.exp((mu[1:] - mu[0]) * S[k][:, None]) * C[:, 1:]) ** 2, 1)) / np.abs(
            C[:, 0]
        )
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-14)
        bound = tan_to_top(X0, P1) * np.exp(-gamma * S[k])
        assert np.all(got <= bound * (1 + 1e-9))
        np.testing.assert_allclose(got[:3], bound[:3], rtol=1e-9)
    # and the bound is strict for a generic token once s > 0
    assert np.all(tan_to_top(traj.x[-1][3:], P1) < 0.99 * tan_to_top(X0[3:], P1) * np.exp(-gamma * S[-1][3:]))


@pytest.mark.parametrize("tmax", [50.0, 1e3, 1e4])
def test_large_times_converge_to_pi(tmax):
    att = worked_example()
    X0 = sample_uniform(50, 3, seed=11)
    traj = simulate_zero_temperature(X0, att, [0.0, tmax])
    assert np.all(np.isfinite(traj.x)) and np.all(np.isfinite(traj.info["s"]))
    target = project(X0, att)
    sp = att.spectrum()
    # per token |x - Pi(x0)| <= tan angle <= tan angle(0) exp(-gamma s), s >= t/||B||
    tan0 = tan_to_top(X0, np.asarray(sp.top_projector))
    bound = tan0 * np.exp(-sp.gap * tmax / att.norm_B)
    err = np.linalg.norm(traj.x[-1] - target, axis=1)
    assert np.all(err <= bound + 1e-13)
    if tmax >= 1e3:
        assert err.max() < 1e-13


def test_batched_equals_unbatched():
    att = random_problem(3, seed=9)
    X0 = sample_uniform(7, 3, seed=1, M=3)
    traj = simulate_zero_temperature(X0, att, TIMES)
    assert traj.x.shape == (TIMES.size, 3, 7, 3)
    assert traj.info["s"].shape == (TIMES.size, 3, 7)
    for m in range(3):
        one = simulate_zero_temperature(X0[m], att, TIMES)
        np.testing.assert_allclose(traj.x[:, m], one.x, atol=1e-9)
        np.testing.assert_allclose(traj.info["s"][:, m], one.info["s"], atol=1e-9)


def test_rotation_equivariance_of_flow_and_pi():
    """Rotating the whole problem (Q, K, V -> R Q R^T, R K R^T, R V R^T and x -> R x) rotates x(t) and Pi."""
    att = random_problem(4, seed=3)
    R = ortho_group.rvs(4, random_state=2)
    rot = Attention(R @ att.Q @ R.T, R @ att.K @ R.T, R @ att.V @ R.T, beta=np.inf)
    X0 = sample_uniform(9, 4, seed=6)
    a = simulate_zero_temperature(X0, att, TIMES).x
    b = simulate_zero_temperature(X0 @ R.T, rot, TIMES).x
    np.testing.assert_allclose(b, a @ R.T, atol=1e-9)
    np.testing.assert_allclose(project(X0 @ R.T, rot), project(X0, att) @ R.T, atol=1e-12)


def test_project_idempotent_unit_and_batched():
    att = random_problem(5, seed=4)
    X = sample_uniform(20, 5, seed=0, M=2)
    P = project(X, att)
    assert P.shape == X.shape
    np.testing.assert_allclose(np.linalg.norm(P, axis=-1), 1.0, atol=1e-14)
    np.testing.assert_allclose(project(P, att), P, atol=1e-14)
    u1 = np.asarray(att.spectrum().top.basis)[:, 0]
    np.testing.assert_allclose(np.abs(P @ u1), 1.0, atol=1e-14)  # simple top: Pi(x) = +-u_1
    np.testing.assert_allclose(np.sign(P @ u1), np.sign(X @ u1))


def test_project_multiplicity_two():
    """Top eigenspace span(e1, e2) of A = diag(1, 1, -1): Pi(x) = (x1, x2, 0) / |(x1, x2)|."""
    att = attention_from_A(np.diag([1.0, 1.0, -1.0]), np.diag([2.0, 1.0, 0.5]))
    assert att.spectrum().multiplicity == 2
    X = sample_uniform(12, 3, seed=1)
    want = X.copy()
    want[:, 2] = 0
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(project(X, att), want, atol=1e-14)
    # and the flow goes there; the token's position within the top plane is kept
    traj = simulate_zero_temperature(X, att, [0.0, 100.0])
    np.testing.assert_allclose(traj.x[-1], want, atol=1e-12)


def test_project_undefined_names_the_token():
    att = attention_from_A(np.diag([1.0, 0.0, -1.0]), np.eye(3))
    X = sample_uniform(5, 3, seed=0)
    X[3] = [0.0, 0.6, 0.8]
    with pytest.raises(ValueError, match=r"token 3.*\|P_1 x\|"):
        project(X, att)
    Xb = np.stack([sample_uniform(5, 3, seed=1), X])
    with pytest.raises(ValueError, match="token 3 of cloud 1"):
        project(Xb, att)


def nonsymmetric(T: np.ndarray, seed: int = 0) -> Attention:
    """A = R T R^T with a random rotation R and a random well-conditioned B."""
    R = ortho_group.rvs(T.shape[0], random_state=seed)
    rng = np.random.default_rng(seed)
    return attention_from_A(R @ T @ R.T, np.eye(T.shape[0]) + 0.3 * rng.standard_normal(T.shape))


SIMPLE_REAL_TOP = np.array([[1.0, 1.5, -0.7], [0.0, -0.5, 0.8], [0.0, 0.0, -1.0]])  # eigenvalues 1, -0.5, -1
# eigenvalues 1, 1, -1, diagonalisable; Riesz projector onto span(e1, e2) along (-a/2, -b/2, 1)
DOUBLE_REAL_TOP = np.array([[1.0, 0.0, 1.2], [0.0, 1.0, -0.8], [0.0, 0.0, -1.0]])


@pytest.mark.parametrize("T", [SIMPLE_REAL_TOP, DOUBLE_REAL_TOP], ids=["simple", "double"])
def test_project_nonsymmetric_needs_spectral_and_gives_the_limit(T):
    att = nonsymmetric(T)
    X0 = sample_uniform(8, 3, seed=2)
    with pytest.raises(ValueError, match="spectral=True"):
        project(X0, att)
    Pi = project(X0, att, spectral=True)
    ref = simulate_zero_temperature(X0, att, [0.0, 60.0], method="integrate")
    np.testing.assert_allclose(ref.x[-1], Pi, atol=1e-9)
    exact = simulate_zero_temperature(X0, att, [0.0, 60.0])
    assert exact.info["method"] == "exact"
    np.testing.assert_allclose(exact.x[-1], Pi, atol=1e-12)
    if T is DOUBLE_REAL_TOP:
        # the orthogonal projection onto the same plane is a different map: the check is not vacuous
        B1 = np.asarray(att.spectrum().top.basis)
        assert B1.shape == (3, 2)
        orth = X0 @ B1 @ B1.T
        orth /= np.linalg.norm(orth, axis=1, keepdims=True)
        assert np.max(np.linalg.norm(orth - Pi, axis=1)) > 0.1


def test_nonsymmetric_exact_matches_integration_with_complex_pair():
    """Eigenvalues 0.3 +- 2i and -0.5: the complex-eigendecomposition path against direct integration."""
    T = np.array([[0.3, 2.0, 0.4], [-2.0, 0.3, 0.1], [0.0, 0.0, -0.5]])
    R = ortho_group.rvs(3, random_state=5)
    att = attention_from_A(R @ T @ R.T, np.diag([1.5, 1.0, 0.7]))
    X0 = sample_uniform(6, 3, seed=4)
    traj = simulate_zero_temperature(X0, att, TIMES)
    assert traj.info["method"] == "exact" and "eig" in traj.info["note"]
    np.testing.assert_allclose(traj.x, reference_flow(X0, att, TIMES), atol=1e-9)
    # the flow keeps rotating, so long runs are costly; the closed form itself at s = 1e4 (where
    # expm(A s) overflows) must stay finite and lie in the top invariant plane
    lam, W, _ = _eigen(np.asarray(att.A), symmetric=False)
    Y = ExactFlow(X0, lam, W, symmetric=False).y(np.full(6, 1e4))
    assert np.all(np.isfinite(Y))
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    P = np.asarray(att.spectrum().top_projector)
    np.testing.assert_allclose(Y @ P.T, Y, atol=1e-10)
    with pytest.raises(ValueError, match="not real"):
        project(X0, att, spectral=True)


def test_defective_A_falls_back_with_warning():
    A = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]])  # Jordan block on top
    att = attention_from_A(A, np.diag([1.0, 2.0, 0.5]))
    X0 = sample_uniform(4, 3, seed=0)
    with pytest.warns(UserWarning, match="falls back to direct integration"):
        traj = simulate_zero_temperature(X0, att, [0.0, 0.5, 2.0])
    assert traj.info["method"] == "integrate" and "condition number" in traj.info["note"]
    for k in range(3):
        for i in range(4):
            y = scipy.linalg.expm(A * traj.info["s"][k, i]) @ X0[i]
            np.testing.assert_allclose(traj.x[k, i], y / np.linalg.norm(y), atol=1e-9)
    with pytest.raises(ValueError, match="method='integrate'"):
        simulate_zero_temperature(X0, att, [0.0, 1.0], method="exact")


def test_times_with_repeats_and_zero_only():
    att = worked_example()
    X0 = sample_uniform(3, 3, seed=0)
    traj = simulate_zero_temperature(X0, att, [0.0, 1.0, 1.0, 2.0])
    np.testing.assert_array_equal(traj.x[1], traj.x[2])
    only0 = simulate_zero_temperature(X0, att, [0.0])
    np.testing.assert_array_equal(only0.x[0], X0)
    later = simulate_zero_temperature(X0, att, [1.0, 2.0])  # starts at t = 0 even if not saved
    np.testing.assert_allclose(later.x, traj.x[[1, 3]], atol=1e-10)


def test_bad_input():
    att = worked_example()
    X0 = sample_uniform(4, 3, seed=0)
    bad = X0.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="X0 contains NaN"):
        simulate_zero_temperature(bad, att, [0.0, 1.0])
    with pytest.raises(ValueError, match="X0 has d = 4"):
        simulate_zero_temperature(sample_uniform(4, 4, seed=0), att, [0.0, 1.0])
    with pytest.raises(ValueError, match="unit rows"):
        simulate_zero_temperature(2 * X0, att, [0.0, 1.0])
    singular = Attention(np.eye(3), np.diag([1.0, 1.0, 0.0]), np.eye(3))
    with pytest.raises(ValueError, match=r"B = Q\^T K must be invertible.*condition number"):
        simulate_zero_temperature(X0, singular, [0.0, 1.0])
    with pytest.raises(ValueError, match="method"):
        simulate_zero_temperature(X0, att, [0.0, 1.0], method="rk4")
    with pytest.raises(ValueError, match="times"):
        simulate_zero_temperature(X0, att, [1.0, 0.5])
    with pytest.raises(ValueError, match="rtol"):
        simulate_zero_temperature(X0, att, [1.0], rtol=-1)
    with pytest.raises(TypeError, match=r"att must be an attnflow\.Attention"):
        simulate_zero_temperature(X0, np.eye(3), [1.0])
    with pytest.raises(ValueError, match="X has d = 4"):
        project(sample_uniform(4, 4, seed=0), att)
    with pytest.raises(ValueError, match="X contains NaN"):
        project(bad, att)


@settings(max_examples=20, deadline=None)
@given(d=st.integers(2, 5), seed=st.integers(0, 10_000), t=st.floats(0.01, 20.0))
def test_property_on_sphere_and_pi_invariant(d, seed, t):
    """States stay on the sphere, Pi(x(t)) = Pi(x0) (the flow keeps P_1 x's direction), tan shrinks."""
    att = random_problem(d, seed)
    X0 = sample_uniform(5, d, seed=seed)
    traj = simulate_zero_temperature(X0, att, [0.0, t])
    np.testing.assert_allclose(np.linalg.norm(traj.x, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(project(traj.x[-1], att), project(X0, att), atol=1e-9)
    P1 = np.asarray(att.spectrum().top_projector)
    assert np.all(tan_to_top(traj.x[-1], P1) <= tan_to_top(X0, P1) * (1 + 1e-9))


def test_chunked_clocks_equal_one_solve(monkeypatch):
    """Tokens are integrated in difficulty-sorted chunks; the result does not depend on the chunking."""
    import attnflow.dynamics.zero_temperature as zt

    att = worked_example()
    X0 = sample_uniform(10, 3, seed=12)
    whole = simulate_zero_temperature(X0, att, TIMES)
    assert whole.info["chunks"] == 1
    monkeypatch.setattr(zt, "CHUNK", 3)
    parts = simulate_zero_temperature(X0, att, TIMES)
    assert parts.info["chunks"] == 4
    np.testing.assert_allclose(parts.x, whole.x, atol=1e-9)
    np.testing.assert_allclose(parts.info["s"], whole.info["s"], atol=1e-9)
    np.testing.assert_allclose(parts.x, reference_flow(X0, att, TIMES), atol=1e-9)


def test_fixed_points_and_tokens_orthogonal_to_top():
    """Eigenvectors of A are fixed points; a token with P_1 x0 = 0 (exactly: diagonal A, so its
    coefficient is an exact zero) never reaches u_1: it goes to +-u_2.  The per-token shift keeps it
    finite at t = 1e4, where every exp((mu_k - mu_1) s) underflows."""
    att = attention_from_A(np.diag([1.0, -0.5, -1.0]), np.diag([3.0, 1.0, 1.0 / 3.0]))
    X0 = np.concatenate([np.eye(3), [[0.0, 0.6, 0.8], [0.0, -0.6, 0.8]]])
    traj = simulate_zero_temperature(X0, att, [0.0, 3.0, 1e4])
    assert np.all(np.isfinite(traj.x))
    np.testing.assert_allclose(traj.x[:, :3], np.broadcast_to(np.eye(3), (3, 3, 3)), atol=1e-14)
    np.testing.assert_allclose(traj.x[-1, 3:], [[0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], atol=1e-12)
    # the clock of a fixed point e_k runs at the constant rate 1/|B^T e_k| = 1/B_kk
    np.testing.assert_allclose(traj.info["s"][1:, :3], np.outer([3.0, 1e4], [1 / 3, 1.0, 3.0]), rtol=1e-10)
    # a generic token orthogonal to u_1 up to rounding in a rotated frame still stays finite
    R = ortho_group.rvs(3, random_state=1)
    rot = attention_from_A(R @ np.diag([1.0, -0.5, -1.0]) @ R.T, R @ np.diag([3.0, 1.0, 1 / 3]) @ R.T)
    late = simulate_zero_temperature(X0 @ R.T, rot, [0.0, 1e4])
    assert np.all(np.isfinite(late.x)) and np.all(np.isfinite(late.info["s"]))
