"""The contract of every registered kernel (attnflow.kernels, registry.py): the field of a NumPy
reference, tangent, weighted, batched (M, N, d) as one cloud at a time, float32, and beta = inf
refused by the finite-temperature kernels; and the registry itself: a kernel registered in one place
(one KernelSpec) runs end to end through velocity, simulate and "auto"."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnflow as af
import attnflow.kernels as kernels
from attnflow.experiments.config import KERNEL_CHOICES
from attnflow.kernels import KERNELS, CostModel, KernelSpec, auto, registry, velocity
from helpers import assert_kernel_matches_sdpa, one_torch_thread  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPECS = registry.specs()
BETA = 300.0  # cold enough that the truncated kernel drops keys and the cluster kernel expands cells
M, N, D = 2, 300, 3


def reference(X: np.ndarray, att: af.Attention, w: np.ndarray | None = None) -> np.ndarray:
    """The field of one cloud X (N, d) in NumPy: the weighted softmax mean (max subtracted, the full
    N x N scores) at finite beta, P^perp A x / |B^T x| at beta = inf (weights do not enter), then
    projected on the tangent space."""
    if math.isinf(att.beta):
        U = X @ att.A.T / np.linalg.norm(X @ att.B, axis=1, keepdims=True)
    else:
        S = att.beta * (X @ att.B @ X.T) + (0.0 if w is None else np.log(w)[None, :])
        W = np.exp(S - S.max(axis=1, keepdims=True))
        U = (W @ (X @ att.V.T)) / W.sum(axis=1, keepdims=True)
    return U - np.sum(X * U, axis=1, keepdims=True) * X


def problem(spec: KernelSpec) -> tuple[af.Attention, np.ndarray, np.ndarray]:
    """The attention (beta = inf for a kernel that is not finite-only), M clouds of N tokens in
    D dimensions (two clusters and a uniform cloud) and weights (M, N)."""
    att = af.worked_example(BETA if spec.finite_only else math.inf)
    clustered = af.sample_vmf(N, [1.0, 0.0, 1.0], 200.0, seed=1)
    clustered[::2] *= -1
    X = np.stack([clustered, af.sample_uniform(N, D, seed=2)])
    w = np.random.default_rng(3).uniform(0.1, 1.0, (M, N))
    return att, X, w / w.sum(axis=1, keepdims=True)


def scale(att: af.Attention) -> float:
    return float(np.linalg.norm(att.V, 2))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_field_matches_the_reference_and_is_tangent(spec):
    att, X, _ = problem(spec)
    out = velocity(X, att, kernel=spec.name)
    assert out.shape == (M, N, D) and out.dtype == np.float64
    ref = np.stack([reference(x, att) for x in X])
    assert np.abs(ref).max() > 0.1  # not trivially zero
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-9 * scale(att))
    assert np.abs(np.sum(out * X, axis=-1)).max() < 1e-12


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_weights(spec):
    """Weights (M, N): the weighted field of each cloud (the zero-temperature field ignores them)."""
    att, X, w = problem(spec)
    out = spec.load()(torch.as_tensor(X), att, weights=torch.as_tensor(w)).numpy()
    ref = np.stack([reference(X[m], att, w[m]) for m in range(M)])
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-9 * scale(att))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_a_batch_is_its_clouds_one_at_a_time(spec):
    att, X, _ = problem(spec)
    fn = spec.load()
    together = fn(torch.as_tensor(X), att).numpy()
    for m in range(M):
        alone = fn(torch.as_tensor(X[m : m + 1]), att).numpy()[0]
        np.testing.assert_allclose(together[m], alone, rtol=0, atol=1e-12 * scale(att))


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_float32(spec):
    """float32 in, float32 out, within the documented error of about beta ||B|| 1e-7."""
    att, X, _ = problem(spec)
    out = spec.load()(torch.as_tensor(X, dtype=torch.float32), att)
    assert out.dtype == torch.float32
    ref = np.stack([reference(x, att) for x in X])
    beta = 1.0 if math.isinf(att.beta) else att.beta
    assert np.abs(out.numpy() - ref).max() <= 10 * max(1.0, beta * att.norm_B) * 1.2e-7 * scale(att)


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_infinite_beta_is_refused_by_finite_only_kernels(spec):
    att, X, _ = problem(spec)
    cold = att.with_beta(math.inf)
    if spec.finite_only:
        with pytest.raises(ValueError, match="finite-temperature kernel but beta = inf"):
            velocity(X, cold, kernel=spec.name)
        with pytest.raises(ValueError, match="beta"):
            spec.load()(torch.as_tensor(X), cold)
    else:
        assert np.all(np.isfinite(velocity(X, cold, kernel=spec.name)))


# ---------------------------------------------------------------- the registry


def plain_softmax(X, att, *, betas=None, weights=None):
    """The field in plain torch, every score at once (a kernel of the kernel signature)."""
    B = torch.tensor(att.B, dtype=X.dtype)
    V = torch.tensor(att.V, dtype=X.dtype)
    beta = att.beta if betas is None else betas.view(-1, 1, 1)
    S = beta * (X @ B @ X.transpose(-1, -2))
    if weights is not None:
        S = S + torch.log(weights)[:, None, :]
    U = torch.softmax(S, dim=-1) @ (X @ V.T)
    return U - (X * U).sum(dim=-1, keepdim=True) * X


def test_a_kernel_registered_in_one_place_runs_end_to_end():
    """One KernelSpec: velocity, simulate and the integrator run it, "auto" prices it (a closed
    form of 0 s: it is picked, and simulate records it), and it is gone once removed."""
    cost = CostModel(("call",), {"any": {"call": 0.0}}, seconds=lambda w, c: c["call"], price=lambda p: 0.0)
    spec = KernelSpec("toy", plain_softmax, "every score at once, in plain torch", cost=cost)
    att = af.worked_example(30.0)
    X0 = af.sample_uniform(200, 3, seed=4)
    with registry.registered(spec):
        assert "toy" in KERNELS and KERNELS["toy"] is spec and registry.candidates()[-1] is spec
        assert_kernel_matches_sdpa(X0, att, "toy")
        big = torch.as_tensor(af.sample_uniform(8192, 3, seed=5))[None]
        assert auto.predict_costs(big, att)["toy"] == 0.0
        traj = af.simulate(X0, att, [0.0, 0.1], method="heun", dt=0.05, kernel="auto")
        assert traj.info["kernel"] == "toy"
        assert registry.table().splitlines()[-2].strip().startswith('"toy"')
    assert "toy" not in KERNELS and "toy" not in auto.predict_costs(torch.as_tensor(X0)[None], att)
    with pytest.raises(ValueError, match="kernel must be one of"):
        velocity(X0, att, kernel="toy")


def test_registry_refusals():
    with pytest.raises(ValueError, match="taken"):
        registry.register(KernelSpec("sdpa", plain_softmax))
    with pytest.raises(ValueError, match="taken"):
        registry.register(KernelSpec("auto", plain_softmax))
    with pytest.raises(ValueError, match="not a kernel added by register"):
        registry.unregister("sdpa")
    with pytest.raises(ValueError, match="must give the terms"):
        CostModel(("call",), {"any": {"pair": 1.0}}, seconds=lambda w, c: 0.0, price=lambda p: 0.0)


def test_the_tables_come_from_the_registry():
    """The kernels' docstring table, the config's kernel choices and the model paths of a Dynamics
    are the registry's."""
    assert registry.table() in (kernels.__doc__ or "")
    assert KERNEL_CHOICES == ("auto", *(s.name for s in SPECS if s.finite_only))
    from attnflow.kernels import variants

    assert set(variants.IMPLEMENTATIONS) == {s.name for s in SPECS if s.dynamics}
    assert list(KERNELS) == [s.name for s in SPECS]
