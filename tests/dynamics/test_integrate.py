"""Integrators on the sphere: agreement with SciPy, convergence orders, invariants, info, errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp
from scipy.linalg import expm
from scipy.stats import special_ortho_group

import attnflow as af
from attnflow.dynamics.integrate import simulate
from attnflow.kernels import velocity
from helpers import one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ref_field(X: np.ndarray, att: af.Attention) -> np.ndarray:
    """float64 NumPy reference field, max-subtracted softmax with the full N x N matrix."""
    S = att.beta * X @ att.B @ X.T
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=1, keepdims=True)
    U = W @ X @ att.V.T
    return U - np.sum(X * U, axis=1, keepdims=True) * X


def ref_trajectory(X0: np.ndarray, att: af.Attention, times, tol: float = 1e-12) -> np.ndarray:
    """SciPy DOP853 on the flattened system; (T, N, d) at `times` (t = 0 is X0)."""
    N, d = X0.shape
    times = np.asarray(times, dtype=float)
    t_eval, index = np.unique(times, return_inverse=True)
    sol = solve_ivp(
        lambda t, y: ref_field(y.reshape(N, d), att).ravel(),
        (0.0, float(times[-1])),
        X0.ravel(),
        method="DOP853",
        rtol=tol,
        atol=tol,
        t_eval=t_eval,
    )
    assert sol.success
    return sol.y.T.reshape(len(t_eval), N, d)[index]


def tolerances(method: str, rtol: float, atol: float) -> dict | None:
    """The adaptive method's options; None for the fixed-step methods (which take no tolerances)."""
    return {"rtol": rtol, "atol": atol} if method == "adaptive" else None


# ---------------------------------------------------------------- agreement with SciPy

CASES = [  # d, N, beta, T: T short enough at large beta that the dynamics stay resolvable at dt = 1e-3
    (2, 256, 0.5, 0.5),
    (3, 64, 10.0, 1.0),
    (4, 32, 100.0, 0.5),
    (5, 16, 1e3, 0.2),
    (6, 16, 1e4, 0.02),
]


@pytest.mark.parametrize(("d", "N", "beta", "T"), CASES)
def test_matches_solve_ivp(d, N, beta, T):
    att = random_attention(d, beta, seed=d)
    X0 = af.sample_uniform(N, d, seed=10 + d)
    times = np.linspace(0.0, T, 4)
    ref = ref_trajectory(X0, att, times)
    assert np.abs(ref[-1] - X0).max() > 1e-2  # the tokens actually move
    rk4 = simulate(X0, att, times, method="rk4", dt=1e-3)
    np.testing.assert_allclose(rk4.x, ref, rtol=0, atol=1e-6)
    ada = simulate(X0, att, times, method="adaptive", options={"rtol": 1e-9, "atol": 1e-12})
    np.testing.assert_allclose(ada.x, ref, rtol=0, atol=1e-6)
    assert ada.info["n_steps"] < rk4.info["n_steps"]


def test_output_times_not_on_the_grid():
    """Output exactly at the caller's times: times[0] > 0, repeats, and times off the dt grid."""
    att = random_attention(3, 5.0, seed=1)
    X0 = af.sample_uniform(20, 3, seed=2)
    times = [0.0123, 0.5, 0.5, 0.77]
    ref = ref_trajectory(X0, att, times)
    for method, kw in [("rk4", {"dt": 1e-2}), ("adaptive", {"options": {"rtol": 1e-10, "atol": 1e-12}})]:
        tr = simulate(X0, att, times, method=method, **kw)
        np.testing.assert_array_equal(tr.t, times)
        assert tr.x.shape == (4, 20, 3)
        np.testing.assert_allclose(tr.x, ref, rtol=0, atol=1e-7)
    tr = simulate(X0, att, [0.0, 0.3], method="euler", dt=0.1)
    np.testing.assert_array_equal(tr.x[0], X0)
    assert tr.info["n_steps"] == 3


def test_many_output_times():
    """Dense output grids (0.02 steps, not exact in binary) land on every time, fixed and adaptive."""
    att = random_attention(3, 5.0, seed=3)
    X0 = af.sample_uniform(10, 3, seed=4)
    times = np.linspace(0.0, 1.0, 51)
    ref = ref_trajectory(X0, att, times)
    for method in ("rk4", "adaptive"):
        tr = simulate(X0, att, times, method=method, dt=3e-3, options=tolerances(method, 1e-10, 1e-12))
        np.testing.assert_array_equal(tr.t, times)
        np.testing.assert_allclose(tr.x, ref, rtol=0, atol=1e-8)
    assert simulate(X0, att, [0.0]).x.shape == (1, 10, 3)


def test_adaptive_steps_do_not_stop_at_output_times():
    """Outputs far closer together than the steps come from the continuous extension: few steps,
    every output within tolerance of SciPy, and the renormalised outputs stay on the sphere."""
    att = random_attention(3, 2.0, seed=5)
    X0 = af.sample_uniform(30, 3, seed=6)
    times = np.linspace(0.0, 3.0, 601)
    ref = ref_trajectory(X0, att, times)
    tr = simulate(X0, att, times, method="adaptive", options={"rtol": 1e-8, "atol": 1e-10})
    assert tr.info["n_steps"] < len(times) / 5
    np.testing.assert_allclose(tr.x, ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(tr.x, axis=-1), 1.0, rtol=0, atol=1e-14)


def test_dense_output_order_four():
    """The continuous extension between two steps is 4th order: error / h^5 roughly constant."""
    import torch

    from attnflow.dynamics.steppers import DP_A, Field, dense_output

    att = random_attention(3, 2.0, seed=7)
    X0 = af.sample_uniform(12, 3, seed=8)
    f = Field(att, "sdpa", torch.as_tensor(X0[None]))
    errs = []
    hs = (0.4, 0.2, 0.1, 0.05)
    for h in hs:
        X = torch.as_tensor(X0[None])
        ks = [f(X)]
        for a_row in DP_A[1:]:
            ks.append(f(X + h * sum(a * k for a, k in zip(a_row, ks, strict=False) if a != 0.0)))
        mid = dense_output(X, ks, h, 0.37)[0].numpy()
        errs.append(np.abs(mid - ref_trajectory(X0, att, [0.37 * h], tol=1e-13)[-1]).max())
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    assert slope > 4.5, (slope, errs)  # local error O(h^5)


def test_batch_error_control_per_cloud():
    """A batch is stepped for its hardest cloud: resting clouds beside a moving one leave its steps
    and states as they are alone (an RMS over the whole batch would dilute the error of the moving
    cloud and take longer, less accurate steps)."""
    att = af.worked_example(20.0)
    w, U = np.linalg.eig(att.V)
    v = np.real(U[:, np.flatnonzero(np.abs(w.imag) < 1e-12)[0]])
    v /= np.linalg.norm(v)
    moving = af.sample_uniform(40, 3, seed=9)
    resting = np.tile(np.stack([v, -v]), (20, 1))  # +-v, V v = lambda v: a fixed point
    times = [0.5, 2.0]
    kw = {"method": "adaptive", "options": {"rtol": 1e-7, "atol": 1e-9}, "kernel": "sdpa"}
    alone = simulate(moving, att, times, **kw)
    batch = simulate(np.stack([moving] + [resting] * 7), att, times, **kw)
    assert alone.info["n_steps"] > 20
    assert batch.info["n_steps"] == alone.info["n_steps"]
    np.testing.assert_allclose(batch.x[:, 0], alone.x, rtol=0, atol=1e-6)  # first steps differ a little
    np.testing.assert_allclose(batch.x[:, 1:], np.broadcast_to(resting, (2, 7, 40, 3)), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- convergence orders


@pytest.mark.parametrize(("method", "order", "steps"), [
    ("euler", 1, (20, 40, 80, 160)),
    ("heun", 2, (10, 20, 40, 80)),
    ("rk4", 4, (5, 10, 20, 40)),
])  # fmt: skip
def test_convergence_order(method, order, steps):
    att = random_attention(3, 2.0, seed=1)
    X0 = af.sample_uniform(16, 3, seed=2)
    ref = ref_trajectory(X0, att, [1.0], tol=1e-13)[-1]
    errs = [np.abs(simulate(X0, att, [1.0], method=method, dt=1.0 / n).x[-1] - ref).max() for n in steps]
    slope = np.polyfit(np.log(1.0 / np.array(steps)), np.log(errs), 1)[0]
    assert abs(slope - order) < 0.2, (slope, errs)


def test_adaptive_tolerance_controls_error():
    att = random_attention(3, 4.0, seed=3)
    X0 = af.sample_uniform(24, 3, seed=4)
    ref = ref_trajectory(X0, att, [2.0])[-1]
    errs, steps = [], []
    for rtol in (1e-4, 1e-6, 1e-8):
        tr = simulate(X0, att, [2.0], method="adaptive", options={"rtol": rtol, "atol": rtol * 1e-3})
        errs.append(np.abs(tr.x[-1] - ref).max())
        steps.append(tr.info["n_steps"])
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-7
    assert steps[0] < steps[1] < steps[2]


# ---------------------------------------------------------------- invariants


@pytest.mark.parametrize("method", ["euler", "heun", "rk4", "adaptive"])
def test_unit_rows_after_long_run(method):
    att = random_attention(4, 10.0, seed=5)
    X0 = af.sample_uniform(8, 4, seed=6)
    tr = simulate(X0, att, [5.0, 20.0], method=method, dt=1e-2, options=tolerances(method, 1e-8, 1e-10))
    drift = np.abs(np.linalg.norm(tr.x, axis=-1) - 1.0).max()
    assert drift < 1e-12
    assert method == "adaptive" or tr.info["n_steps"] == 2000


@pytest.mark.parametrize("method", ["rk4", "adaptive"])
def test_permutation_equivariance(method):
    att = random_attention(3, 20.0, seed=7)
    X0 = af.sample_uniform(30, 3, seed=8)
    perm = np.random.default_rng(0).permutation(30)
    a = simulate(X0, att, [0.5, 1.0], method=method, dt=1e-2)
    b = simulate(X0[perm], att, [0.5, 1.0], method=method, dt=1e-2)
    np.testing.assert_allclose(b.x, a.x[:, perm], rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["heun", "adaptive"])
def test_rotation_equivariance(method):
    d = 4
    rng = np.random.default_rng(9)
    Q, K, V = rng.standard_normal((3, d, d))
    R = special_ortho_group.rvs(d, random_state=1)
    att = af.Attention(Q, K, V, 15.0)
    att_R = af.Attention(R @ Q @ R.T, R @ K @ R.T, R @ V @ R.T, 15.0)
    X0 = af.sample_uniform(25, d, seed=10)
    kw = {"method": method, "dt": 1e-2, "options": tolerances(method, 1e-10, 1e-12)}
    a = simulate(X0, att, [0.3, 0.8], **kw)
    b = simulate(X0 @ R.T, att_R, [0.3, 0.8], **kw)
    np.testing.assert_allclose(b.x, a.x @ R.T, rtol=0, atol=1e-12)  # the error norm is frame-free


def test_several_betas_in_one_run():
    """A list of Attention objects differing in beta: fixed steps give the separate runs; adaptive
    ones agree to tolerance."""
    att = random_attention(3, 1.0, seed=13)
    X0 = af.sample_uniform(24, 3, seed=14)
    times = [0.3, 1.0]
    betas = [2.0, 20.0, 200.0]
    atts = [att.with_beta(b) for b in betas]
    rk = simulate(X0, atts, times, method="rk4", dt=1e-2)
    tight = {"rtol": 1e-10, "atol": 1e-12}
    ada = simulate(X0, atts, times, method="adaptive", options=tight, kernel="blocked")
    assert rk.x.shape == (2, 3, 24, 3) and rk.info["betas"] == betas and rk.info["beta"] is None
    assert ada.info["kernel"] == "blocked"
    for m, b in enumerate(betas):
        alone = simulate(X0, att.with_beta(b), times, method="rk4", dt=1e-2, kernel="sdpa")
        np.testing.assert_allclose(rk.x[:, m], alone.x, rtol=0, atol=1e-13)
        np.testing.assert_allclose(
            ada.x[:, m], ref_trajectory(X0, att.with_beta(b), times), rtol=0, atol=1e-7
        )
    own = simulate(af.sample_uniform(24, 3, seed=15, M=3), atts, times, dt=1e-2)
    assert own.x.shape == (2, 3, 24, 3)
    # the truncated kernel takes one beta per cloud too
    tr = simulate(X0, atts, times, method="rk4", dt=1e-2, kernel="truncated")
    np.testing.assert_allclose(tr.x, rk.x, rtol=0, atol=1e-12)
    # equal betas: a plain batch at that beta
    same = simulate(X0, [att.with_beta(20.0)] * 2, times, method="rk4", dt=1e-2)
    assert same.info["beta"] == 20.0 and same.x.shape == (2, 2, 24, 3)
    np.testing.assert_allclose(same.x[:, 1], rk.x[:, 1], rtol=0, atol=1e-14)


def test_attention_list_bad_input():
    att = random_attention(3, 1.0, seed=13)
    X0 = af.sample_uniform(8, 3, seed=14)
    other = random_attention(3, 1.0, seed=14)
    with pytest.raises(ValueError, match=r"att\[1\] has another Q than att\[0\]"):
        simulate(X0, [att, other], [0.1])
    with pytest.raises(ValueError, match="mixing beta = inf"):
        simulate(X0, [att, att.with_beta(np.inf)], [0.1])
    with pytest.raises(TypeError, match=r"att\[1\] must be an attnflow\.Attention"):
        simulate(X0, [att, np.eye(3)], [0.1])
    with pytest.raises(ValueError, match="X0 has 2, att has 3"):
        simulate(af.sample_uniform(8, 3, seed=14, M=2), [att] * 3, [0.1])
    with pytest.raises(ValueError, match="betas must all be inf"):
        simulate(X0, [att, att.with_beta(2.0)], [0.1], kernel="zero")


def test_batch_equals_separate_runs():
    att = random_attention(3, 8.0, seed=11)
    X0 = af.sample_uniform(20, 3, seed=12, M=3)
    times = [0.25, 1.0]
    tb = simulate(X0, att, times, method="rk4", dt=1e-2)
    assert tb.x.shape == (2, 3, 20, 3)
    tight = {"rtol": 1e-10, "atol": 1e-12}
    ab = simulate(X0, att, times, method="adaptive", options=tight)
    for m in range(3):
        np.testing.assert_allclose(tb.x[:, m], simulate(X0[m], att, times, dt=1e-2).x, rtol=0, atol=1e-13)
        sep = simulate(X0[m], att, times, method="adaptive", options=tight)
        np.testing.assert_allclose(ab.x[:, m], sep.x, rtol=0, atol=1e-8)  # shared steps differ


@settings(max_examples=10, deadline=None)
@given(
    d=st.integers(2, 6),
    N=st.integers(1, 24),
    M=st.integers(1, 3),
    log_beta=st.floats(np.log(0.5), np.log(100.0)),
    seed=st.integers(0, 2**31 - 1),
)
def test_properties_random_problems(d, N, M, log_beta, seed):
    """Unit rows, batch = separate runs, permutation equivariance, agreement with SciPy."""
    att = random_attention(d, float(np.exp(log_beta)), seed)
    X0 = af.sample_uniform(N, d, seed=seed + 1, M=M)
    times = [0.01, 0.05]
    tr = simulate(X0, att, times, method="rk4", dt=1e-3)
    assert tr.x.shape == (2, M, N, d)
    assert np.abs(np.linalg.norm(tr.x, axis=-1) - 1.0).max() < 1e-13
    perm = np.random.default_rng(seed).permutation(N)
    one = simulate(X0[0][perm], att, times, method="rk4", dt=1e-3)
    np.testing.assert_allclose(one.x, tr.x[:, 0][:, perm], rtol=0, atol=1e-13)
    np.testing.assert_allclose(tr.x[:, 0], ref_trajectory(X0[0], att, times), rtol=0, atol=1e-8)


def test_torch_input():
    """A torch tensor in gives a torch tensor out, on its device; NumPy in gives NumPy out."""
    att = random_attention(3, 4.0, seed=2)
    X0 = af.sample_uniform(10, 3, seed=3)
    tr = simulate(torch.as_tensor(X0), att, [0.2])
    assert isinstance(tr.x, torch.Tensor) and tr.x.device.type == "cpu" and tr.x.dtype == torch.float64
    ref = simulate(X0, att, [0.2])
    assert isinstance(ref.x, np.ndarray)
    np.testing.assert_array_equal(tr.x.numpy(), ref.x)


def test_euler_step_is_one_layer_with_layer_norm():
    att = random_attention(5, 3.0, seed=13)
    X0 = af.sample_uniform(12, 5, seed=14)
    h = 0.1
    Y = X0 + h * velocity(X0, att)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    np.testing.assert_allclose(simulate(X0, att, [h], method="euler", dt=h).x[-1], Y, rtol=0, atol=1e-15)


def test_zero_temperature_flow_closed_form():
    """B = I, A = V symmetric: x(t) = expm(A t) x0 / |expm(A t) x0| (MATH.md, zero temperature)."""
    A = np.array([[1.0, 0.3, 0.0], [0.3, -0.5, 0.2], [0.0, 0.2, 0.1]])
    att = af.Attention(np.eye(3), np.eye(3), A, beta=np.inf)
    X0 = af.sample_uniform(10, 3, seed=15)
    times = [0.5, 2.0]
    Y = np.stack([X0 @ expm(A * t).T for t in times])
    Y /= np.linalg.norm(Y, axis=-1, keepdims=True)
    for method in ("rk4", "adaptive"):
        tr = simulate(X0, att, times, method=method, dt=1e-3, options=tolerances(method, 1e-10, 1e-12))
        assert tr.info["kernel"] == "zero"
        np.testing.assert_allclose(tr.x, Y, rtol=0, atol=1e-9)


def test_float32():
    att = random_attention(3, 10.0, seed=16)
    X0 = af.sample_uniform(20, 3, seed=17)
    a = simulate(X0, att, [0.5], dt=1e-2)
    b = simulate(X0, att, [0.5], dt=1e-2, dtype="float32")
    assert b.x.dtype == np.float32 and b.info["dtype"] == "float32"
    err = np.abs(b.x - a.x).max()
    assert 1e-9 < err < 1e-4


# ---------------------------------------------------------------- info, progress, auto


def test_info_and_progress():
    att = random_attention(3, 10.0, seed=18)
    X0 = af.sample_uniform(10, 3, seed=19)
    calls = []
    tr = simulate(X0, att, [0.1, 2.0], method="rk4", dt=1e-2, progress=lambda t, T: calls.append((t, T)))
    info = tr.info
    assert info["method"] == "rk4" and info["kernel"] == "sdpa" and info["dt"] == 1e-2
    assert info["n_steps"] == 200 and info["n_evals"] == 800 and info["n_rejected"] == 0
    assert info["dtype"] == "float64" and info["wall_time_s"] > 0
    assert calls[0] == (0.0, 2.0) and calls[-1] == (2.0, 2.0)
    assert 3 <= len(calls) <= 10
    assert all(b[0] >= a[0] for a, b in itertools.pairwise(calls))
    ada = simulate(X0, att, [2.0], method="adaptive", options={"rtol": 1e-7, "atol": 1e-9})
    assert ada.info["rtol"] == 1e-7 and ada.info["atol"] == 1e-9 and "dt" not in ada.info
    assert ada.info["n_evals"] >= 6 * (ada.info["n_steps"] + ada.info["n_rejected"])


def test_auto_kernel_redecided_during_run(monkeypatch):
    import attnflow.kernels.auto as auto

    decisions = []

    def choose(X, att):
        decisions.append(X.shape)
        return "sdpa" if len(decisions) == 1 else "blocked"

    monkeypatch.setattr(auto, "choose_kernel", choose)
    att = random_attention(3, 10.0, seed=20)
    X0 = af.sample_uniform(10, 3, seed=21)
    tr = simulate(X0, att, [1.2], method="euler", dt=1e-2)
    assert len(decisions) == 1 + 120 // 50
    assert tr.info["kernel"] == "blocked"
    assert tr.info["kernel_evals"] == {"sdpa": 50, "blocked": 70}


def test_max_steps():
    att = random_attention(3, 1.0, seed=22)
    X0 = af.sample_uniform(5, 3, seed=0)
    with pytest.raises(ValueError, match=r"take 100 steps, more than options\['max_steps'\] = 10"):
        simulate(X0, att, [1.0], dt=1e-2, options={"max_steps": 10})  # before the first step
    # 1.0 / dt = 100 steps, but landing on each of 200 output times takes one more each
    with pytest.raises(RuntimeError, match="max_steps = 150 reached"):
        simulate(X0, att, np.linspace(0.005, 1.0, 200), dt=1e-2, options={"max_steps": 150})


# ---------------------------------------------------------------- bad input


@pytest.fixture
def att():
    return af.worked_example(10.0)


@pytest.fixture
def X0():
    return af.sample_uniform(6, 3, seed=0)


def test_bad_dt(att, X0):
    with pytest.raises(ValueError, match="dt must be a finite number > 0"):
        simulate(X0, att, [1.0], dt=0.0)
    with pytest.raises(ValueError, match="dt must be a finite number > 0"):
        simulate(X0, att, [1.0], dt=-1e-2)


def test_unknown_method(att, X0):
    with pytest.raises(ValueError, match="method must be one of"):
        simulate(X0, att, [1.0], method="leapfrog")


def test_decreasing_times(att, X0):
    with pytest.raises(ValueError, match="times must be non-negative and non-decreasing"):
        simulate(X0, att, [1.0, 0.5])


def test_negative_times(att, X0):
    with pytest.raises(ValueError, match="times must be non-negative"):
        simulate(X0, att, [-0.1, 0.5])


def test_empty_times(att, X0):
    with pytest.raises(ValueError, match="times must be a non-empty 1-D array"):
        simulate(X0, att, [])


def test_bad_tolerances(att, X0):
    with pytest.raises(ValueError, match=r"options\['rtol'\] must be a finite number > 0"):
        simulate(X0, att, [1.0], method="adaptive", options={"rtol": 0.0})
    with pytest.raises(ValueError, match=r"options\['atol'\] must be a finite number > 0"):
        simulate(X0, att, [1.0], method="adaptive", options={"atol": -1.0})


def test_initial_nan(att, X0):
    X0[0, 0] = np.nan
    with pytest.raises(ValueError, match="X0 contains NaN or inf"):
        simulate(X0, att, [1.0])


def test_initial_not_unit(att, X0):
    with pytest.raises(ValueError, match=r"X0 must have unit rows.*normalize=True"):
        simulate(3.0 * X0, att, [1.0])
    tr = simulate(3.0 * X0, att, [0.1], normalize=True)
    np.testing.assert_allclose(tr.x[-1], simulate(X0, att, [0.1]).x[-1], atol=1e-15)


def test_initial_wrong_d(att):
    with pytest.raises(ValueError, match="X0 has d = 2 columns but the attention matrices are 3 x 3"):
        simulate(af.sample_uniform(6, 2, seed=0), att, [1.0])


def test_initial_wrong_shape(att):
    with pytest.raises(ValueError, match=r"X0 must have shape \(N, d\) or \(M, N, d\)"):
        simulate(np.ones((2, 2, 2, 3)), att, [1.0])


def test_initial_empty(att):
    with pytest.raises(ValueError, match="X0 is empty"):
        simulate(np.zeros((0, 3)), att, [1.0])


def test_unknown_kernel(att, X0):
    with pytest.raises(ValueError, match="kernel must be one of"):
        simulate(X0, att, [1.0], kernel="fast")


def test_finite_kernel_at_zero_temperature(att, X0):
    with pytest.raises(ValueError, match="finite-temperature kernel but beta = inf"):
        simulate(X0, att.with_beta(np.inf), [1.0], kernel="sdpa")


def test_bad_progress(att, X0):
    with pytest.raises(TypeError, match="progress must be a callable"):
        simulate(X0, att, [1.0], progress=1)


def test_bad_attention(X0):
    with pytest.raises(TypeError, match="att must be an attnflow"):
        simulate(X0, "attention", [1.0])
