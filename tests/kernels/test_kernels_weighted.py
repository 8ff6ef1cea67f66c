"""Weighted kernels (MATH.md, "Weighted measures") against a dense NumPy reference, and the device
plumbing of `velocity` (CPU here; the CUDA tests run where a GPU exists)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import velocity
from attnflow.kernels.dense import velocity_blocked, velocity_sdpa
from attnflow.kernels.truncated import velocity_truncated
from attnflow.kernels.zero import velocity_zero
from helpers import needs_cuda, one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

KERNELS = {"sdpa": velocity_sdpa, "blocked": velocity_blocked, "truncated": velocity_truncated}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ref_weighted(X: np.ndarray, att: af.Attention, w: np.ndarray, beta: float | None = None) -> np.ndarray:
    """float64 NumPy reference for one cloud: scores beta x_i^T B x_j + log w_j, the row maximum
    subtracted, explicit exp, the full (N, N) matrix."""
    beta = att.beta if beta is None else beta
    S = beta * (X @ att.B @ X.T) + np.log(w)[None, :]
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    U = (W @ (X @ att.V.T)) / W.sum(axis=1, keepdims=True)
    return U - np.sum(X * U, axis=1, keepdims=True) * X


def random_weights(rng: np.random.Generator, shape, spread: float = 6.0) -> np.ndarray:
    """Positive weights whose logs spread over `spread` nats, each row summing to 1."""
    w = np.exp(rng.uniform(-spread, 0.0, size=shape))
    return w / w.sum(axis=-1, keepdims=True)


def problem(beta: float, N: int, d: int, M: int, seed: int) -> tuple[af.Attention, np.ndarray]:
    """Weights and clouds on which the quadrature weights visibly change the field at this beta.

    Moderate beta: random Q, K, V and uniform clouds.  Large beta: B = I (each token's own direction
    maximises its scores) and clusters of angular size beta^(-1/2) (vMF, kappa = beta), so that the
    scores differ by O(1) within a cluster and the weights decide the softmax."""
    if beta <= 100:
        return random_attention(d, beta, seed=seed), af.sample_uniform(N, d, seed=seed, M=M)
    rng = np.random.default_rng(seed)
    att = af.Attention(np.eye(d), np.eye(d), rng.standard_normal((d, d)) / np.sqrt(d), beta)
    X = np.stack([af.sample_vmf(N, rng.standard_normal(d), beta, seed=seed + m) for m in range(M)])
    return att, X


# ---------------------------------------------------------------- against the dense reference


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("beta", [1.0, 100.0, 1e4, 1e6])
def test_weighted_matches_reference(name, d, beta):
    att, X = problem(beta, 60, d, 3, seed=d)
    w = random_weights(np.random.default_rng(int(beta) + d), (3, 60))
    out = KERNELS[name](torch.as_tensor(X), att, weights=torch.as_tensor(w)).numpy()
    ref = np.stack([ref_weighted(X[m], att, w[m]) for m in range(3)])
    unweighted = np.stack([ref_weighted(X[m], att, np.full(60, 1 / 60)) for m in range(3)])
    assert np.abs(ref - unweighted).max() > 1e-4  # the weights change the field
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(KERNELS))
def test_uniform_weights_equal_unweighted(name):
    att = random_attention(3, 300.0, seed=1)
    X = torch.as_tensor(af.sample_uniform(5000 if name == "truncated" else 300, 3, seed=2, M=2))
    w = torch.full(X.shape[:2], 1.0 / X.shape[1], dtype=torch.float64)
    a = KERNELS[name](X, att, weights=w)
    b = KERNELS[name](X, att)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-13)


@pytest.mark.parametrize("name", list(KERNELS))
def test_weights_and_betas_per_cloud(name):
    """Cloud m at beta_m under weights w_m, as the reference at att.with_beta(beta_m)."""
    att = random_attention(3, 1.0, seed=4)
    X = af.sample_uniform(80, 3, seed=5, M=3)
    w = random_weights(np.random.default_rng(6), (3, 80))
    betas = [0.5, 40.0, 3e3]
    out = KERNELS[name](
        torch.as_tensor(X), att, betas=torch.tensor(betas, dtype=torch.float64), weights=torch.as_tensor(w)
    ).numpy()
    for m, b in enumerate(betas):
        np.testing.assert_allclose(out[m], ref_weighted(X[m], att, w[m], b), rtol=0, atol=1e-11)


@pytest.mark.parametrize("name", ["sdpa", "blocked"])
@pytest.mark.parametrize("beta", [1.0, 100.0, 1e4])
def test_weighted_float32(name, beta):
    att, X = problem(beta, 64, 3, 1, seed=8)
    X = X[0]
    w = random_weights(np.random.default_rng(9), 64)
    ref = ref_weighted(X, att, w)
    f32 = torch.float32
    out = KERNELS[name](torch.tensor(X, dtype=f32), att, weights=torch.tensor(w, dtype=f32))
    assert out.dtype == torch.float32
    err = np.abs(out.numpy() - ref).max()
    assert 1e-10 < err < 5e-6 * max(1.0, beta * att.norm_B)  # float32 rounding, not garbage


def test_truncated_weighted_float32():
    att = random_attention(3, 1e3, seed=10)
    X = af.sample_uniform(3000, 3, seed=11)
    w = random_weights(np.random.default_rng(12), 3000)
    f32 = torch.float32
    out = velocity_truncated(torch.tensor(X, dtype=f32), att, weights=torch.tensor(w, dtype=f32))
    ref = ref_weighted(X, att, w)
    assert out.dtype == torch.float32
    assert np.abs(out.numpy() - ref).max() < 5e-6 * att.beta * att.norm_B


def test_truncated_light_nearest_key_widens_the_radius():
    """A nearest key of tiny weight next to heavy keys farther out: keeping only the keys the
    unweighted rule keeps (score within cutoff/beta of the maximum) would lose most of the mass; the
    widened radius keeps the a-priori bound D_i / Z_i <= N e^-cutoff, row by row."""
    beta, cutoff, N = 1e3, 15.0, 400
    att = random_attention(3, beta, seed=13)
    X = af.sample_uniform(N, 3, seed=14)
    w = random_weights(np.random.default_rng(15), N, spread=40.0)
    # what the unweighted rule would drop, measured on the reference
    S = beta * (X @ att.B @ X.T)
    S -= S.max(axis=1, keepdims=True)
    mass = w * np.exp(S)
    lost = np.where(S < -cutoff, mass, 0.0).sum(axis=1) / mass.sum(axis=1)
    assert lost.max() > 0.5  # the test case is adversarial
    # single-query cells (leaf = 1): the ball is the kept radius itself, no slack from the cells
    Xt, wt = torch.as_tensor(X), torch.as_tensor(w)
    out = velocity_truncated(Xt, att, weights=wt, cutoff=cutoff, leaf=1, leaf_min=1)
    bound = 2 * np.linalg.norm(att.V, 2) * N * np.exp(-cutoff)
    err = np.linalg.norm(out.numpy() - ref_weighted(X, att, w), axis=1).max()
    assert err <= bound, (err, bound)


def test_zero_kernel_ignores_weights_and_checks_betas():
    att = af.worked_example(np.inf)
    X = torch.as_tensor(af.sample_uniform(30, 3, seed=16, M=2))
    w = torch.as_tensor(random_weights(np.random.default_rng(17), (2, 30)))
    np.testing.assert_array_equal(velocity_zero(X, att, weights=w).numpy(), velocity_zero(X, att).numpy())
    velocity_zero(X, att, betas=torch.tensor([np.inf, np.inf]))
    with pytest.raises(ValueError, match="betas must all be inf"):
        velocity_zero(X, att, betas=torch.tensor([np.inf, 10.0]))


def test_truncated_bad_betas():
    att = af.worked_example(100.0)
    X = torch.as_tensor(af.sample_uniform(30, 3, seed=18, M=2))
    with pytest.raises(ValueError, match="3 entries for a batch of 2"):
        velocity_truncated(X, att, betas=torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="finite betas"):
        velocity_truncated(X, att, betas=torch.tensor([1.0, np.inf]))


# ---------------------------------------------------------------- velocity(weights=...)


def test_velocity_weights_api():
    att = random_attention(3, 50.0, seed=19)
    X = af.sample_uniform(40, 3, seed=20)
    w = random_weights(np.random.default_rng(21), (2, 40))
    for kernel in ("sdpa", "blocked", "truncated"):
        one = velocity(X, att, kernel=kernel, weights=w[0])
        np.testing.assert_allclose(one, ref_weighted(X, att, w[0]), rtol=0, atol=1e-12)
        # one cloud under two measures: (N, d) with (M, N) weights gives (M, N, d)
        two = velocity(X, att, kernel=kernel, weights=w)
        assert two.shape == (2, 40, 3)
        np.testing.assert_allclose(two[1], ref_weighted(X, att, w[1]), rtol=0, atol=1e-12)
    # exactly uniform weights take the unweighted path: the same numbers
    np.testing.assert_array_equal(velocity(X, att, weights=np.full(40, 1 / 40)), velocity(X, att))


@pytest.mark.parametrize(("w", "match"), [
    (np.ones(39) / 39, r"shape \(N,\) or \(M, N\) with N = 40"),
    (np.ones((2, 2, 40)) / 40, r"shape \(N,\) or \(M, N\)"),
    (np.r_[np.nan, np.ones(39) / 39], "weights contains NaN"),
    (np.r_[-0.1, np.full(39, 1.1 / 39)], "weights must be > 0"),
    (np.r_[0.0, np.full(39, 1 / 39)], "weights must be > 0"),
    (np.full(40, 1 / 40) * (1 + 1e-9), "sum to 1"),
    ("abc", "weights must be a real array"),
])  # fmt: skip
def test_velocity_bad_weights(w, match):
    att = af.worked_example(10.0)
    X = af.sample_uniform(40, 3, seed=0)
    with pytest.raises((ValueError, TypeError), match=match):
        velocity(X, att, weights=w)


def test_velocity_batch_mismatch():
    att = af.worked_example(10.0)
    X = af.sample_uniform(40, 3, seed=0, M=3)
    for w in (np.full((2, 40), 1 / 40), random_weights(np.random.default_rng(0), (2, 40))):
        with pytest.raises(ValueError, match="X has 3, weights has 2"):
            velocity(X, att, weights=w)


# ---------------------------------------------------------------- devices


def test_velocity_device_cpu_plumbing():
    att = af.worked_example(10.0)
    X = af.sample_uniform(20, 3, seed=1)
    v = velocity(X, att, device="cpu")
    assert isinstance(v, np.ndarray)
    vt = velocity(torch.as_tensor(X), att, device=torch.device("cpu"))
    assert isinstance(vt, torch.Tensor) and vt.device.type == "cpu"
    np.testing.assert_array_equal(vt.numpy(), v)
    v32 = velocity(torch.as_tensor(X), att, device="cpu", dtype="float32")
    assert v32.dtype == torch.float32


@pytest.mark.parametrize(("device", "match"), [
    ("meta", "device 'meta' cannot run"),
    ("tpu", "device must be 'cpu', 'cuda'"),
    (3.5, "device must be"),
])  # fmt: skip
def test_velocity_bad_device(device, match):
    with pytest.raises(ValueError, match=match):
        velocity(af.sample_uniform(5, 3, seed=0), af.worked_example(10.0), device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_velocity_unavailable_cuda():
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(ValueError, match="is not available: torch sees no CUDA GPU"):
            velocity(af.sample_uniform(5, 3, seed=0), af.worked_example(10.0), device=device)


@needs_cuda
@pytest.mark.parametrize("kernel", ["sdpa", "blocked", "truncated", "zero"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_velocity_on_cuda(kernel, dtype):
    """The same field on the GPU as on the CPU (fused float32, blocked float64, truncated with its
    geometry on the CPU); NumPy in gives NumPy out, a CUDA tensor gives a CUDA tensor."""
    beta = np.inf if kernel == "zero" else 300.0
    att = random_attention(3, beta, seed=22)
    X = af.sample_uniform(5000, 3, seed=23, M=2)
    w = random_weights(np.random.default_rng(24), (2, 5000))
    cpu = velocity(X, att, kernel=kernel, dtype=dtype, weights=w)
    gpu = velocity(X, att, kernel=kernel, dtype=dtype, weights=w, device="cuda")
    assert isinstance(gpu, np.ndarray)
    tol = 1e-12 if dtype == "float64" else 1e-3
    np.testing.assert_allclose(gpu, cpu, rtol=0, atol=tol)
    Xc = torch.as_tensor(X, device="cuda")
    out = velocity(Xc, att, kernel=kernel, dtype=dtype, weights=w)
    assert out.device.type == "cuda"
    np.testing.assert_allclose(out.cpu().numpy(), cpu, rtol=0, atol=tol)


# ---------------------------------------------------------------- memory


MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource
    import numpy as np, torch
    torch.set_num_threads(1)
    import attnflow as af
    from attnflow.kernels.dense import velocity_sdpa
    N = 16384
    att = af.worked_example(100.0)
    X = torch.as_tensor(af.sample_uniform(64, 3, seed=0))[None]
    velocity_sdpa(X, att, weights=torch.full((1, 64), 1 / 64, dtype=X.dtype))  # warm up
    # room for 512 MiB more: an N x N score matrix (2 GiB in float64, 1 GiB in float32) cannot be allocated
    vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 2**29, vm * 1024 + 2**29))
    for dtype in (torch.float64, torch.float32):
        X = torch.as_tensor(af.sample_uniform(N, 3, seed=0), dtype=dtype)[None]
        w = torch.rand(1, N, dtype=dtype, generator=torch.Generator().manual_seed(0)) + 0.5
        v = velocity_sdpa(X, att, weights=w / w.sum())
        assert v.shape == (1, N, 3) and bool(torch.isfinite(v).all())
    print("ok")
    """
)


@pytest.mark.slow
def test_weighted_sdpa_memory_is_linear_in_N():
    """The weighted fused kernel stays on torch's fused path (values padded to the queries' width):
    at N = 16384 it runs under an address-space limit that no N x N score matrix fits in."""
    res = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]
