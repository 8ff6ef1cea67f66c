"""Velocity kernels: fused SDPA, blocked, zero temperature, the public `velocity` and its errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow as af
from attnflow.kernels import KERNELS, check_dtype, get_kernel, resolve_kernel, velocity
from attnflow.kernels.auto import choose_kernel
from attnflow.kernels.dense import field_blocked, field_sdpa, velocity_blocked, velocity_sdpa
from attnflow.kernels.zero import velocity_zero
from helpers import one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ref_field(Y: np.ndarray, X: np.ndarray, att: af.Attention) -> np.ndarray:
    """float64 NumPy reference: max-subtracted softmax with the full (Nq, N) score matrix."""
    S = att.beta * Y @ att.B @ X.T
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=1, keepdims=True)
    U = W @ X @ att.V.T
    return U - np.sum(Y * U, axis=1, keepdims=True) * Y


def ref_velocity(X: np.ndarray, att: af.Attention) -> np.ndarray:
    if X.ndim == 3:
        return np.stack([ref_field(x, x, att) for x in X])
    return ref_field(X, X, att)


# ---------------------------------------------------------------- agreement with the reference


@pytest.mark.parametrize("d", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("beta", [0.5, 3.0, 100.0, 1e4])
def test_sdpa_blocked_reference(d, beta):
    att = random_attention(d, beta, seed=d)
    X = af.sample_uniform(40, d, seed=7, M=3)
    ref = ref_velocity(X, att)
    Xt = torch.as_tensor(X)
    for kern in (velocity_sdpa, velocity_blocked):
        out = kern(Xt, att)
        assert out.shape == X.shape and out.dtype == torch.float64
        np.testing.assert_allclose(out.numpy(), ref, rtol=0, atol=1e-12)
    assert np.abs(ref).max() > 0.1  # the field is not trivially zero


@settings(max_examples=25, deadline=None)
@given(
    d=st.integers(2, 6),
    N=st.integers(1, 60),
    M=st.integers(1, 3),
    log_beta=st.floats(np.log(0.5), np.log(1e4)),
    seed=st.integers(0, 2**31 - 1),
)
def test_kernels_property(d, N, M, log_beta, seed):
    att = random_attention(d, float(np.exp(log_beta)), seed)
    X = af.sample_uniform(N, d, seed=seed + 1, M=M)
    ref = ref_velocity(X, att)
    for name in ("sdpa", "blocked"):
        out = velocity(X, att, kernel=name)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
        # tangent: <x_i, v_i> = 0
        assert np.abs(np.sum(out * X, axis=-1)).max() < 1e-13


@pytest.mark.parametrize("kappa", [1e10, 1e12])
def test_beta_1e6_tight_cluster(kappa):
    """Scores of size 1e6 whose spread is O(1-10): exp overflows unless the row max is subtracted."""
    att = random_attention(3, 1e6, seed=11)
    X = af.sample_vmf(300, [1.0, 2.0, -1.0], kappa, seed=3)
    S = att.beta * X @ att.B @ X.T
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(np.exp(S)))  # the naive softmax would overflow here
    W = np.exp(S - S.max(1, keepdims=True))
    W /= W.sum(1, keepdims=True)
    assert W.max(1).mean() < 0.9  # weights are spread over several keys, not an argmax
    ref = ref_field(X, X, att)
    for name in ("sdpa", "blocked"):
        out = velocity(X, att, kernel=name)
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("kernel", [velocity_sdpa, velocity_blocked])
def test_one_beta_per_cloud(kernel):
    """betas=(M,): cloud m moves at beta_m, as in a separate call with att.with_beta(beta_m)."""
    att = random_attention(4, 1.0, seed=3)
    X = torch.as_tensor(af.sample_uniform(50, 4, seed=4, M=3))
    betas = [0.5, 40.0, 3e4]
    together = kernel(X, att, betas=torch.tensor(betas, dtype=torch.float64)).numpy()
    for m, b in enumerate(betas):
        np.testing.assert_allclose(
            together[m], ref_velocity(X[m].numpy(), att.with_beta(b)), rtol=0, atol=1e-12
        )
    with pytest.raises(ValueError, match="3 entries for a batch of 2"):
        kernel(X[:2], att, betas=torch.tensor(betas))
    with pytest.raises(ValueError, match="finite betas"):
        kernel(X, att, betas=torch.tensor([1.0, float("inf"), 2.0]))


def test_blocked_block_sizes_and_field_at_other_points():
    att = random_attention(4, 20.0, seed=5)
    X = torch.as_tensor(af.sample_uniform(50, 4, seed=1, M=2))
    Y = torch.as_tensor(af.sample_uniform(17, 4, seed=2, M=2))
    ref = np.stack([ref_field(Y[m].numpy(), X[m].numpy(), att) for m in range(2)])
    np.testing.assert_allclose(field_sdpa(Y, X, att).numpy(), ref, rtol=0, atol=1e-12)
    for block in (1, 7, 17, 1000):
        np.testing.assert_allclose(field_blocked(Y, X, att, block=block).numpy(), ref, rtol=0, atol=1e-12)
    # (N, d) tensors work too and keep their shape
    assert field_sdpa(Y[0], X[0], att).shape == (17, 4)


def test_float32_error_scales_with_beta():
    X = af.sample_uniform(64, 3, seed=4)
    for beta in (1.0, 100.0):
        att = random_attention(3, beta, seed=2)
        ref = ref_field(X, X, att)
        for name in ("sdpa", "blocked"):
            out = velocity(X, att, kernel=name, dtype="float32")
            assert out.dtype == np.float32
            err = np.abs(out - ref).max()
            assert 1e-9 < err < 5e-6 * max(1.0, beta)  # float32 roundoff, not float64 and not garbage


def test_single_token_has_zero_velocity_when_alone_v_is_identity():
    att = af.Attention(np.eye(3), np.eye(3), np.eye(3), beta=5.0)
    X = af.sample_uniform(1, 3, seed=0)
    for name in ("sdpa", "blocked", "zero"):
        np.testing.assert_allclose(velocity(X, att, kernel=name), 0.0, atol=1e-15)


# ---------------------------------------------------------------- zero temperature


def test_zero_kernel_formula():
    att = af.worked_example(np.inf)
    X = af.sample_uniform(30, 3, seed=9, M=2)
    out = velocity(X, att, kernel="zero")
    AX = X @ att.A.T / np.linalg.norm(X @ att.B, axis=-1, keepdims=True)
    np.testing.assert_allclose(out, AX - np.sum(X * AX, -1, keepdims=True) * X, rtol=0, atol=1e-14)
    # "auto" at beta = inf is the zero kernel
    np.testing.assert_array_equal(velocity(X, att), out)


def test_zero_kernel_singular_B():
    Q = np.eye(3)
    K = np.diag([1.0, 1.0, 0.0])  # B = K singular, B^T e_3 = 0
    att = af.Attention(Q, K, np.eye(3), beta=np.inf)
    X = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"B\^T x = 0"):
        velocity(X, att, kernel="zero")
    # tokens off the kernel of B^T are fine
    assert np.all(np.isfinite(velocity(X[1:], att, kernel="zero")))


def test_finite_beta_field_tends_to_zero_temperature_field():
    """On a dense Fibonacci cloud (N >> beta) the error of v_beta against v_inf falls like 1/beta."""
    att = af.worked_example(1.0)
    X = torch.as_tensor(af.fibonacci_sphere(20_000))
    Y = torch.as_tensor(af.sample_uniform(100, 3, seed=3))
    v_inf = velocity_zero(Y, att)
    betas = np.array([16.0, 32.0, 64.0, 128.0, 256.0])
    errs = np.array([float((field_sdpa(Y, X, att.with_beta(b)) - v_inf).norm(dim=-1).max()) for b in betas])
    slope = np.polyfit(np.log(betas), np.log(errs), 1)[0]
    assert abs(slope + 1.0) < 0.1, (slope, errs)
    assert np.all(np.diff(errs) < 0)
    assert errs[-1] < 0.05


# ---------------------------------------------------------------- registry, auto, dtypes, types


def test_auto_choice_and_registry():
    X = torch.as_tensor(af.sample_uniform(5, 3, seed=0))[None]
    att = af.worked_example(10.0)
    assert choose_kernel(X, att) == "sdpa"
    assert choose_kernel(X, att.with_beta(np.inf)) == "zero"
    assert resolve_kernel("auto", att, X) == "sdpa"
    assert resolve_kernel("auto", att.with_beta(np.inf), X) == "zero"
    assert set(KERNELS) == {"sdpa", "blocked", "fused", "zero", "truncated", "cluster"}
    assert get_kernel("sdpa") is velocity_sdpa and get_kernel("zero") is velocity_zero


def test_dtype_names():
    assert check_dtype("float64") == check_dtype(np.float64) == check_dtype(torch.float64) == "float64"
    assert check_dtype("float32") == check_dtype(np.float32) == check_dtype(torch.float32) == "float32"


def test_torch_in_torch_out_and_shapes():
    att = af.worked_example(10.0)
    X = af.sample_uniform(12, 3, seed=1)
    v = velocity(X, att)
    assert isinstance(v, np.ndarray) and v.shape == (12, 3) and v.dtype == np.float64
    vt = velocity(torch.as_tensor(X), att)
    assert isinstance(vt, torch.Tensor) and vt.shape == (12, 3)
    np.testing.assert_array_equal(vt.numpy(), v)
    Xb = np.stack([X, X[::-1]])
    vb = velocity(Xb, att)
    assert vb.shape == (2, 12, 3)
    np.testing.assert_allclose(vb[1], v[::-1], atol=1e-14)
    # list input and normalize=True
    np.testing.assert_allclose(velocity((2.0 * X).tolist(), att, normalize=True), v, atol=1e-14)


# ---------------------------------------------------------------- bad input


@pytest.fixture
def att():
    return af.worked_example(10.0)


def test_bad_shape(att):
    with pytest.raises(ValueError, match=r"X must have shape \(N, d\) or \(M, N, d\)"):
        velocity(np.ones(3), att)


def test_nan(att):
    X = af.sample_uniform(4, 3, seed=0)
    X[1, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        velocity(X, att)


def test_inf(att):
    X = af.sample_uniform(4, 3, seed=0)
    X[2, 1] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        velocity(X, att)


def test_non_unit_rows(att):
    with pytest.raises(ValueError, match=r"unit rows.*normalize=True"):
        velocity(2.0 * af.sample_uniform(4, 3, seed=0), att)


def test_mismatched_d(att):
    with pytest.raises(ValueError, match="d = 4 columns but the attention matrices are 3 x 3"):
        velocity(af.sample_uniform(4, 4, seed=0), att)


def test_empty_cloud(att):
    with pytest.raises(ValueError, match="X is empty"):
        velocity(np.zeros((0, 3)), att)


def test_unknown_kernel(att):
    with pytest.raises(ValueError, match="kernel must be one of"):
        velocity(af.sample_uniform(4, 3, seed=0), att, kernel="flash")


def test_unknown_dtype(att):
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32'"):
        velocity(af.sample_uniform(4, 3, seed=0), att, dtype="float16")


def test_not_an_attention():
    with pytest.raises(TypeError, match=r"att must be an attnflow\.Attention"):
        velocity(af.sample_uniform(4, 3, seed=0), np.eye(3))


# ---------------------------------------------------------------- memory


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import torch
    torch.set_num_threads(1)
    import attnflow as af
    from attnflow.kernels.dense import velocity_sdpa
    N = 16384
    att = af.worked_example(100.0)
    X = torch.as_tensor(af.sample_uniform(N, 3, seed=0))[None]
    velocity_sdpa(X[:, :64], att)  # warm up
    # room for 512 MiB more: an N x N float64 score matrix (2 GiB, float32 1 GiB) cannot even be allocated
    vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 2**29, vm * 1024 + 2**29))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    v = velocity_sdpa(X, att)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert v.shape == (1, N, 3) and bool(torch.isfinite(v).all())
    print((after - before) * 1024)
    """
)


@pytest.mark.slow
def test_sdpa_memory_is_linear_in_N():
    """One float64 SDPA evaluation at N = 16384, d = 3: peak RSS grows by well under 256 MiB (N x N
    float64 would be 2 GiB, float32 1 GiB)."""
    res = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    delta = int(res.stdout.strip().splitlines()[-1])
    assert delta < 2**28, f"peak RSS grew by {delta / 2**20:.0f} MiB"
