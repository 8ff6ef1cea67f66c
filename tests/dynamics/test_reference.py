"""The N = infinity zero-temperature reference (MATH.md "The zero-temperature flow at N = infinity").

Checked against an independent direct quadrature in d = 2 (scipy quad_vec over the initial angle, one
LSODA solve of the angle ODE per evaluation), against Monte Carlo clouds within their CLT interval,
under refinement, and its local rates against Corollary 2's c* and guaranteed rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import odeint, quad_vec

from attnflow.attention import Attention, attention_from_A, worked_example
from attnflow.dynamics.rates import local_rates
from attnflow.dynamics.reference import reference_w2
from attnflow.dynamics.zero_temperature import ExactFlow, project, simulate_zero_temperature
from attnflow.measures.sampling import sample_uniform, sample_vmf
from attnflow.science.assumptions import reference_rates
from attnflow.transport.wasserstein import w2_to_target


def worked_example_2d() -> Attention:
    """MATH.md's d = 2 worked example: Q = I, K = diag(3, 1/3), A = [[1/4, 3/4], [3/4, 1/4]]."""
    return attention_from_A(np.array([[0.25, 0.75], [0.75, 0.25]]), np.diag([3.0, 1.0 / 3.0]), math.inf)


def direct_w2sq_2d(att: Attention, times: np.ndarray, density=None, epsrel: float = 1e-8) -> np.ndarray:
    """W2^2 = (1/2pi) int 2 (1 - |<u_1, x(t; phi_0)>|) f(phi_0) dphi_0, the flow solved in the angle:
    dphi/dt = e_phi^T A x / |B^T x|, x = (cos phi, sin phi); quad_vec splits at the fixed points +-u_k."""
    (a00, a01), (a10, a11) = np.asarray(att.A).tolist()
    (b00, b01), (b10, b11) = np.asarray(att.B).tolist()
    sp = att.spectrum()
    u1 = np.asarray(sp.top.basis[:, 0])

    def rhs(phi, _t):
        c, s = math.cos(phi[0]), math.sin(phi[0])
        speed = math.hypot(b00 * c + b10 * s, b01 * c + b11 * s)  # |B^T x|
        return (-s * (a00 * c + a01 * s) + c * (a10 * c + a11 * s)) / speed

    def h(phi0):
        phi = odeint(rhs, [phi0], times, rtol=1e-12, atol=1e-12)[:, 0]
        f = 1.0 if density is None else density(phi0)
        return 2.0 * (1.0 - np.abs(np.cos(phi) * u1[0] + np.sin(phi) * u1[1])) * f / (2 * math.pi)

    U = np.asarray(sp.eigenvectors)
    angles = np.arctan2(U[1], U[0]) + np.array([[0.0], [math.pi]])  # the fixed points +-u_k
    fixed = sorted(np.mod(angles, 2 * math.pi).ravel())
    val, _ = quad_vec(h, 0.0, 2 * math.pi, points=fixed, epsrel=epsrel, epsabs=1e-15)
    return np.asarray(val)


TIMES_2D = np.array([0.0, 1.0, 3.0])


def test_d2_uniform_matches_a_direct_angle_quadrature():
    att = worked_example_2d()
    ref = reference_w2(att, TIMES_2D, rtol=1e-8)
    direct = direct_w2sq_2d(att, TIMES_2D)
    assert ref.info["converged"]
    np.testing.assert_allclose(ref.w2sq, direct, rtol=1e-7)
    assert np.all(ref.w2sq_err <= 1e-7 * ref.w2sq)
    assert abs(ref.w2[0] - math.sqrt(2 - 4 / math.pi)) < 1e-8  # W2^2(rho_0, Pi_# rho_0) = 2 - 4/pi on S^1


def test_d2_von_mises_and_an_unnormalised_callable_match_the_direct_quadrature():
    att = worked_example_2d()
    kappa, angle = 2.0, 0.3  # mean direction (cos 0.3, sin 0.3), not aligned with u_1
    mean = np.array([math.cos(angle), math.sin(angle)])
    from scipy.special import i0

    direct = direct_w2sq_2d(att, TIMES_2D, lambda p: math.exp(kappa * math.cos(p - angle)) / i0(kappa))
    ref = reference_w2(att, TIMES_2D, "vmf", mean=mean, kappa=kappa, rtol=1e-8)
    np.testing.assert_allclose(ref.w2sq, direct, rtol=1e-7)
    assert abs(ref.info["mass"] - 1.0) < 1e-9

    def unnormalised(X):
        return 5.0 * np.exp(kappa * (X @ mean))

    ref_f = reference_w2(att, TIMES_2D, unnormalised, rtol=1e-6)
    np.testing.assert_allclose(ref_f.w2sq, ref.w2sq, rtol=1e-6)
    assert ref_f.info["mass"] > 1.0  # divided by its own integral


def mc_w2sq(att: Attention, X0: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo W2^2 (the mean of 2 (1 - |<u_1, x_i(t)>|), exact for the sample) and its standard error."""
    traj = simulate_zero_temperature(X0, att, times)
    u1 = np.asarray(att.spectrum().top.basis[:, 0])
    h = 2.0 * (1.0 - np.abs(traj.x @ u1))  # (T, N)
    exact = w2_to_target(traj.x, project(X0, att)).values  # the few-atoms OT path, for the sample
    np.testing.assert_allclose(exact**2, h.mean(axis=1), rtol=1e-9, atol=1e-15)
    return h.mean(axis=1), h.std(axis=1, ddof=1) / math.sqrt(X0.shape[0])


def test_d3_uniform_agrees_with_monte_carlo_within_its_confidence_interval():
    att = worked_example(math.inf)
    times = np.array([0.0, 1.0, 2.0, 4.0])
    ref = reference_w2(att, times, rtol=1e-3, clock_rtol=1e-8)
    mean, se = mc_w2sq(att, sample_uniform(8000, 3, seed=11), times)
    z = np.abs(mean - ref.w2sq) / np.hypot(se, ref.w2sq_err)
    assert np.all(z < 4.0), z
    assert abs(ref.w2[0] - 1.0) < 1e-3  # uniform on S^2: W2^2(rho_0, Pi_# rho_0) = 2 (1 - 1/2) = 1


def test_d2_von_mises_agrees_with_monte_carlo_within_its_confidence_interval():
    att = worked_example_2d()
    mean_dir, kappa = np.array([0.2, -1.0]), 1.5
    times = np.array([0.0, 1.0, 3.0, 6.0])
    ref = reference_w2(att, times, "vmf", mean=mean_dir, kappa=kappa, rtol=1e-6, clock_rtol=1e-8)
    mean, se = mc_w2sq(att, sample_vmf(10000, mean_dir, kappa, seed=5), times)
    z = np.abs(mean - ref.w2sq) / se
    assert np.all(z < 4.0), z


def test_refinement_converges_and_the_error_estimates_cover_the_difference():
    att = worked_example_2d()
    times = np.array([0.0, 2.0, 8.0])
    fine = reference_w2(att, times, rtol=1e-8)
    coarse = reference_w2(att, times, rtol=1e-3, clock_rtol=1e-8)
    small_box = reference_w2(att, times, rtol=1e-8, L=8.0)  # truncation dominates its error
    assert np.all(fine.w2sq_err < coarse.w2sq_err)
    assert np.all(np.abs(coarse.w2sq - fine.w2sq) <= coarse.w2sq_err + fine.w2sq_err)
    diff = np.abs(small_box.w2sq - fine.w2sq)
    assert np.all(diff <= small_box.w2sq_err + fine.w2sq_err)
    assert np.all(small_box.info["error_parts"]["truncation"] > small_box.info["error_parts"]["quadrature"])
    assert small_box.info["L"] == 8.0 and fine.info["L"] > 8.0


@pytest.mark.slow
def test_d3_refinement_converges():
    att = worked_example(math.inf)
    times = np.array([0.0, 3.0, 8.0])
    fine = reference_w2(att, times, rtol=1e-4)
    coarse = reference_w2(att, times, rtol=1e-2)
    assert np.all(np.abs(coarse.w2sq - fine.w2sq) <= coarse.w2sq_err + fine.w2sq_err)
    assert np.all(fine.w2sq_err < coarse.w2sq_err)


def test_d2_local_rates_tend_to_c_star_above_the_guaranteed_rate():
    att = worked_example_2d()
    rates = reference_rates(att)
    c_star, guaranteed = rates["c_star"], rates["guaranteed"]
    times = np.arange(0.0, 20.0 + 1e-9, 1.0)
    ref = reference_w2(att, times, rtol=1e-5, clock_rtol=1e-8)
    out = local_rates(times, ref.w2, ref.w2_err, width=4.0)
    r = np.array([w["rate"] for w in out])
    assert [w["window"] for w in out] == [[0.0, 4.0], [4.0, 8.0], [8.0, 12.0], [12.0, 16.0], [16.0, 20.0]]
    assert np.all(r >= guaranteed)
    assert np.all(np.diff(np.abs(r - c_star)) < 0)  # each window closer to c*
    assert abs(r[-1] - c_star) < 1e-3 * c_star
    assert all(w["err"] < 1e-4 for w in out)


@pytest.mark.slow
def test_d3_last_window_within_one_percent_of_c_star():
    att = worked_example(math.inf)
    rates = reference_rates(att)
    c_star, guaranteed = rates["c_star"], rates["guaranteed"]
    assert abs(c_star - 0.58565) < 1e-5
    times = np.arange(0.0, 20.0 + 1e-9, 1.0)
    ref = reference_w2(att, times, rtol=1e-3)
    out = local_rates(times, ref.w2, ref.w2_err, width=4.0)
    r = np.array([w["rate"] for w in out])
    assert np.all(r >= guaranteed)
    assert np.all(np.diff(np.abs(r - c_star)) < 0)
    assert abs(r[-1] - c_star) + out[-1]["err"] < 0.01 * c_star


def test_local_rates_of_an_exponential():
    t = np.linspace(0.0, 10.0, 21)
    w = 3.0 * np.exp(-0.7 * t)
    out = local_rates(t, w, 1e-3 * w, windows=[[0.0, 5.0], [5.0, 10.0]])
    assert [o["window"] for o in out] == [[0.0, 5.0], [5.0, 10.0]]
    for o in out:
        assert abs(o["rate"] - 0.7) < 1e-12
        assert abs(o["err"] - 2e-3 / 5.0) < 1e-12
    assert [o["err"] for o in local_rates(t, w, width=2.5)] == [None] * 4
    with pytest.raises(ValueError, match="not one of the times"):
        local_rates(t, w, windows=[[0.0, 4.9]])
    with pytest.raises(ValueError, match="one value per time"):
        local_rates(t, w[:-1])


def test_unsupported_cases_raise_clear_errors():
    d4 = attention_from_A(np.diag([1.0, 0.5, 0.0, -0.5]), np.eye(4), math.inf)
    with pytest.raises(ValueError, match="d = 2 and d = 3"):
        reference_w2(d4, [0.0, 1.0])
    rng = np.random.default_rng(0)
    nonsym = Attention(np.eye(3), np.eye(3), rng.standard_normal((3, 3)), math.inf)
    with pytest.raises(ValueError, match="symmetric"):
        reference_w2(nonsym, [0.0, 1.0])
    double_top = attention_from_A(np.diag([1.0, 1.0, -0.5]), np.diag([2.0, 1.0, 0.5]), math.inf)
    with pytest.raises(ValueError, match="one-dimensional top eigenspace"):
        reference_w2(double_top, [0.0, 1.0])
    att = worked_example_2d()
    with pytest.raises(ValueError, match="rho0 must be"):
        reference_w2(att, [0.0, 1.0], "gaussian")
    with pytest.raises(ValueError, match="needs mean"):
        reference_w2(att, [0.0, 1.0], "vmf", kappa=1.0)
    with pytest.raises(ValueError, match="finite values >= 0"):
        reference_w2(att, [0.0, 1.0], lambda X: -np.ones(X.shape[0]))


def test_log_coefficients_keep_tokens_far_below_rounding():
    """A token with c_1 = e^{-100} leaves the equator at s = 100 / gamma; through X @ W it never would."""
    att = worked_example_2d()
    lam, U = np.linalg.eigh(np.asarray(att.A))
    lam, U = lam[::-1].copy(), U[:, ::-1].copy()
    gamma = lam[0] - lam[1]
    flow = ExactFlow.from_log_coefficients(np.array([[-100.0, 0.0]]), np.array([[1.0, 1.0]]), lam, U)
    e = flow.coef(np.array([100.0 / gamma]))
    assert abs(abs(e[0, 0]) / np.linalg.norm(e[:, 0]) - 1 / math.sqrt(2)) < 1e-12
    X = (np.array([[math.exp(-100.0), 1.0]])) @ U.T
    rounded = ExactFlow(X / np.linalg.norm(X), lam, U, symmetric=True).coef(np.array([100.0 / gamma]))
    # through X @ W, c_1 = e^{-100} is lost to rounding: it comes out 0 (the token never leaves) or
    # ~1e-17 (it leaves ~60 / gamma too early), depending on the BLAS; either way far from 1/sqrt 2
    assert abs(abs(rounded[0, 0]) / np.linalg.norm(rounded[:, 0]) - 1 / math.sqrt(2)) > 0.2
    # the same coefficients, given both ways, give the same flow where rounding does not matter
    C = np.array([[0.6, -0.8], [0.1, 0.99498743710662]])
    a = ExactFlow(C @ U.T, lam, U, symmetric=True)
    b = ExactFlow.from_log_coefficients(np.log(np.abs(C)), np.sign(C), lam, U)
    s = np.array([0.3, 2.0])
    B = np.asarray(att.B)
    np.testing.assert_allclose(a.clock_rate(s, B), b.clock_rate(s, B), rtol=1e-13)
    np.testing.assert_allclose(a.y(s), b.y(s), rtol=1e-13, atol=1e-15)
