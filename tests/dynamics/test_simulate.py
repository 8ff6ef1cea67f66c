"""simulate's settings in one place each: solver options, weights, devices, and the guards it shares
with the experiment configs (float32 tolerance, memory of the saved trajectory)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import attnflow as af
from attnflow import _checks
from attnflow.dynamics.integrate import OPTIONS, simulate
from helpers import needs_cuda, one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def weighted_field(X: np.ndarray, att: af.Attention, w: np.ndarray) -> np.ndarray:
    """float64 NumPy reference of the weighted velocity (MATH.md, "Weighted measures")."""
    S = att.beta * (X @ att.B @ X.T) + np.log(w)[None, :]
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    U = (W @ (X @ att.V.T)) / W.sum(axis=1, keepdims=True)
    return U - np.sum(X * U, axis=1, keepdims=True) * X


# ---------------------------------------------------------------- options


def test_options_per_method():
    att = random_attention(3, 5.0, seed=1)
    X0 = af.sample_uniform(12, 3, seed=2)
    a = simulate(X0, att, [0.5], method="adaptive", options={"rtol": 1e-9, "atol": 1e-11})
    assert a.info["rtol"] == 1e-9 and a.info["atol"] == 1e-11
    # a first step of the caller's choosing changes the steps, not the answer
    b = simulate(X0, att, [0.5], method="adaptive", options={"rtol": 1e-9, "atol": 1e-11, "first_step": 1e-4})
    assert b.info["n_steps"] != a.info["n_steps"]
    np.testing.assert_allclose(b.x, a.x, rtol=0, atol=1e-8)
    for method in ("euler", "heun", "rk4"):  # refused before the first step: 0.5 / dt = 50 steps
        with pytest.raises(ValueError, match=r"take 50 steps, more than options\['max_steps'\] = 3"):
            simulate(X0, att, [0.5], method=method, options={"max_steps": 3})
    assert set(OPTIONS["rk4"]) == {"max_steps"}
    assert set(OPTIONS["adaptive"]) == {"rtol", "atol", "max_steps", "first_step", "norm"}


def test_error_norms_over_the_tokens():
    """norm "max" is the largest per-token RMS over coordinates, "rms" the RMS over tokens and
    coordinates: equal for tokens with equal errors; one token's error counts sqrt(N) times more."""
    from attnflow.dynamics.steppers import _error_norm

    X = torch.nn.functional.normalize(torch.randn(2, 64, 3, dtype=torch.float64), dim=-1)
    even = torch.full((2, 64, 3), 1e-6, dtype=torch.float64)
    assert _error_norm(even, X, X, 1e-6, 0.0, "max") == pytest.approx(
        _error_norm(even, X, X, 1e-6, 0.0, "rms")
    )
    one = torch.zeros(2, 64, 3, dtype=torch.float64)
    one[1, 5] = 1e-6  # one token of the second cloud, every coordinate at the tolerance
    assert _error_norm(one, X, X, 1e-6, 0.0, "max") == pytest.approx(1.0)
    assert _error_norm(one, X, X, 1e-6, 0.0, "rms") == pytest.approx(1 / np.sqrt(64))


def test_max_norm_holds_the_few_fast_tokens():
    """A collapsed cluster and a few tokens far from it, which move: with norm "max" the worst
    token's error against a tight reference is smaller than with "rms" at the same tolerance (whose
    mean over the many still tokens lets the moving ones err more), for more steps."""
    att = af.worked_example(100.0, d=2)
    u1 = np.array([1.0, 1.0]) / np.sqrt(2)
    theta = np.concatenate([np.pi / 4 + 1e-3 * np.linspace(-1, 1, 252), [-0.6, -0.7, 2.3, 2.5]])
    X0 = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    assert np.abs(X0[:252] @ u1).min() > 0.999
    ref = simulate(X0, att, [3.0], method="adaptive", options={"rtol": 1e-11, "atol": 1e-13}).x[-1]
    worst, steps = {}, {}
    for norm in ("rms", "max"):
        tr = simulate(X0, att, [3.0], method="adaptive", options={"rtol": 1e-4, "atol": 1e-6, "norm": norm})
        worst[norm] = float(np.linalg.norm(tr.x[-1] - ref, axis=1).max())
        steps[norm] = tr.info["n_steps"]
        assert tr.info.get("norm", "rms") == norm
    assert worst["max"] < 0.5 * worst["rms"] and steps["max"] > steps["rms"]


@pytest.mark.parametrize(("method", "options", "error", "match"), [
    ("rk4", {"rtol": 1e-8}, ValueError, r"options \['rtol'\] are not settings of method 'rk4'"),
    ("adaptive", {"rtol": 1e-8, "dt": 0.1, "tol": 1}, ValueError, r"\['dt', 'tol'\] are not settings"),
    ("adaptive", {"max_steps": 2.5}, TypeError, r"options\['max_steps'\] must be a positive integer"),
    ("adaptive", {"first_step": 0.0}, ValueError, r"options\['first_step'\] must be a finite number > 0"),
    ("adaptive", [("rtol", 1e-8)], TypeError, "options must be a dict"),
    ("adaptive", {"norm": "l1"}, ValueError, r"options\['norm'\] must be one of \['rms', 'max'\], got 'l1'"),
])  # fmt: skip
def test_bad_options(method, options, error, match):
    with pytest.raises(error, match=match):
        simulate(
            af.sample_uniform(5, 3, seed=0), af.worked_example(10.0), [0.1], method=method, options=options
        )


# ---------------------------------------------------------------- one set of guards


def test_float32_needs_a_loose_rtol():
    """The rule the experiment configs apply (the same function), refused by the library too."""
    att = af.worked_example(1e6)
    X0 = af.sample_uniform(50, 3, seed=0)
    with pytest.raises(ValueError, match=r"rtol = 1e-07 .* dtype 'float32'.*rtol >= 1e-05"):
        simulate(X0, att, [0.1], method="adaptive", dtype="float32", options={"rtol": 1e-7})
    with pytest.raises(ValueError, match="rtol"):  # the default rtol 1e-6 is below float32's reach too
        simulate(X0, att, [0.1], method="adaptive", dtype="float32")
    tr = simulate(X0, att.with_beta(10.0), [0.1], method="adaptive", dtype="float32", options={"rtol": 1e-5})
    assert tr.x.dtype == np.float32
    simulate(X0, att.with_beta(10.0), [0.1], method="rk4", dtype="float32")  # fixed steps: no tolerance


def test_config_uses_the_same_rule():
    """The experiment config refuses float32 with a tight rtol with the library's own message."""
    from attnflow.experiments import load_config

    with pytest.raises(ValueError) as lib:
        _checks.check_rtol_for_dtype(1e-7, "float32", "adaptive")
    with pytest.raises(ValueError) as cfg:
        load_config("concentration", ["dtype=float32", "rtol=1e-7"])
    assert str(lib.value) in str(cfg.value)


def test_saved_trajectory_larger_than_memory_is_refused():
    """10^6 saved times of 10^5 tokens (2.4 TB) stop before anything is allocated."""
    att = af.worked_example(10.0)
    X0 = af.sample_uniform(100_000, 3, seed=0)
    with pytest.raises(ValueError, match=r"1000000 times x N = 100000 tokens.*save fewer times \(times\)"):
        simulate(X0, att, np.linspace(0.0, 1.0, 1_000_000))


def test_saved_memory_fraction(monkeypatch):
    att = af.worked_example(10.0)
    X0 = af.sample_uniform(10, 3, seed=0, M=2)
    need = 3 * 2 * 10 * 3 * 8  # 3 times x 2 clouds x 10 tokens x d = 3 x 8 bytes
    monkeypatch.setattr(_checks, "available_memory", lambda device=None: 2 * need - 1)
    with pytest.raises(ValueError, match="3 times x 2 clouds x N = 10 tokens x d = 3 x 8 bytes"):
        simulate(X0, att, [0.0, 0.1, 0.2])
    monkeypatch.setattr(_checks, "available_memory", lambda device=None: 2 * need)
    assert simulate(X0, att, [0.0, 0.1, 0.2]).x.shape == (3, 2, 10, 3)


# ---------------------------------------------------------------- weights


def test_weighted_run_matches_solve_ivp():
    att = random_attention(3, 8.0, seed=5)
    X0 = af.sample_uniform(16, 3, seed=6)
    w = np.random.default_rng(7).uniform(0.1, 3.0, 16)
    w /= w.sum()
    times = [0.2, 0.8]
    sol = solve_ivp(
        lambda t, y: weighted_field(y.reshape(16, 3), att, w).ravel(),
        (0.0, 0.8),
        X0.ravel(),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        t_eval=times,
    )
    ref = sol.y.T.reshape(2, 16, 3)
    rk4 = simulate(X0, att, times, method="rk4", dt=1e-3, weights=w)
    ada = simulate(X0, att, times, method="adaptive", weights=w, options={"rtol": 1e-10, "atol": 1e-12})
    np.testing.assert_allclose(rk4.x, ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ada.x, ref, rtol=0, atol=1e-8)
    assert np.abs(simulate(X0, att, times, method="rk4", dt=1e-3).x - ref).max() > 1e-3  # weights matter
    np.testing.assert_array_equal(rk4.weights, w)  # carried unchanged


def test_weights_are_multiplicities():
    """Token j carrying weight k_j / K moves as k_j equal copies of it in an unweighted cloud."""
    att = random_attention(3, 20.0, seed=8)
    X = af.sample_uniform(9, 3, seed=9)
    k = np.array([1, 4, 2, 1, 3, 1, 5, 2, 1])
    dup = np.repeat(X, k, axis=0)
    times = [0.5, 1.5]
    a = simulate(X, att, times, method="rk4", weights=k / k.sum())
    b = simulate(dup, att, times, method="rk4")
    np.testing.assert_allclose(a.x, b.x[:, np.cumsum(k) - 1], rtol=0, atol=1e-12)
    # adaptive: the error norms (RMS over tokens) differ, so do the steps; both within tolerance
    tight = {"rtol": 1e-10, "atol": 1e-12}
    a = simulate(X, att, times, method="adaptive", weights=k / k.sum(), options=tight)
    b = simulate(dup, att, times, method="adaptive", options=tight)
    np.testing.assert_allclose(a.x, b.x[:, np.cumsum(k) - 1], rtol=0, atol=1e-8)


def test_weights_batched_and_shared():
    att = random_attention(3, 10.0, seed=10)
    X0 = af.sample_uniform(12, 3, seed=11)
    rng = np.random.default_rng(12)
    w = rng.uniform(0.5, 2.0, (2, 12))
    w /= w.sum(axis=1, keepdims=True)
    both = simulate(X0, att, [0.5], weights=w)  # one cloud under two measures
    assert both.x.shape == (1, 2, 12, 3) and both.weights.shape == (2, 12)
    for m in range(2):
        np.testing.assert_allclose(both.x[:, m], simulate(X0, att, [0.5], weights=w[m]).x, rtol=0, atol=1e-13)
    # per-cloud betas and weights together
    atts = [att.with_beta(b) for b in (2.0, 50.0)]
    tr = simulate(X0, atts, [0.5], weights=w)
    np.testing.assert_allclose(tr.x[:, 1], simulate(X0, atts[1], [0.5], weights=w[1]).x, rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="X0 has 3, weights has 2"):
        simulate(af.sample_uniform(12, 3, seed=0, M=3), att, [0.5], weights=w)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        simulate(X0, att, [0.5], weights=np.full(12, 0.1))


# ---------------------------------------------------------------- devices


def test_device_cpu_plumbing():
    att = random_attention(3, 4.0, seed=13)
    X0 = af.sample_uniform(10, 3, seed=14)
    ref = simulate(X0, att, [0.2])
    assert ref.info["device"] == "cpu"
    on_cpu = simulate(X0, att, [0.2], device="cpu")
    assert isinstance(on_cpu.x, np.ndarray)
    np.testing.assert_array_equal(on_cpu.x, ref.x)
    t = simulate(torch.as_tensor(X0), att, [0.2], device=torch.device("cpu"), dtype="float32")
    assert isinstance(t.x, torch.Tensor) and t.x.dtype == torch.float32


@pytest.mark.parametrize(("device", "match"), [
    ("meta", "device 'meta' cannot run"),
    ("gpu", "device must be 'cpu', 'cuda'"),
])  # fmt: skip
def test_bad_device(device, match):
    with pytest.raises(ValueError, match=match):
        simulate(af.sample_uniform(5, 3, seed=0), af.worked_example(10.0), [0.1], device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_unavailable_cuda():
    with pytest.raises(ValueError, match="device 'cuda' is not available"):
        simulate(af.sample_uniform(5, 3, seed=0), af.worked_example(10.0), [0.1], device="cuda")


@needs_cuda
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kernel", ["sdpa", "truncated", "auto"])
def test_simulate_on_cuda(dtype, kernel):
    """The same trajectory on the GPU as on the CPU, NumPy in NumPy out, CUDA tensors stay there."""
    att = random_attention(3, 300.0, seed=15)
    X0 = af.sample_uniform(5000, 3, seed=16)
    w = np.random.default_rng(17).uniform(0.5, 2.0, 5000)
    w /= w.sum()
    kw = {"method": "rk4", "dt": 0.01, "kernel": kernel, "dtype": dtype, "weights": w}
    cpu = simulate(X0, att, [0.05], **kw)
    gpu = simulate(X0, att, [0.05], device="cuda", **kw)
    assert isinstance(gpu.x, np.ndarray) and gpu.info["device"].startswith("cuda")
    tol = 1e-10 if dtype == "float64" else 1e-3
    np.testing.assert_allclose(gpu.x, cpu.x, rtol=0, atol=tol)
    on = simulate(torch.as_tensor(X0, device="cuda"), att, [0.05], **kw)
    assert isinstance(on.x, torch.Tensor) and on.x.device.type == "cuda"
    np.testing.assert_allclose(on.x.cpu().numpy(), cpu.x, rtol=0, atol=tol)
