"""Shared test fixtures that are plain functions (imported by the test modules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnflow as af

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small problems on a shared machine: one torch thread is faster and steadier; restored after.
    A test module takes it for all its tests with `pytestmark = pytest.mark.usefixtures(...)`."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def random_attention(d: int, beta: float, seed: int) -> af.Attention:
    """Seeded Gaussian Q, K, V with entries of variance 1/d."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.standard_normal((3, d, d)) / np.sqrt(d)
    return af.Attention(Q, K, V, beta)


def assert_kernel_matches_sdpa(X0: np.ndarray, att: af.Attention, kernel: str, atol: float = 1e-12) -> None:
    """`kernel` through velocity() and through the integrator (Heun, two steps) gives the dense
    (`sdpa`) results within atol, and the trajectory records the kernel it ran."""
    np.testing.assert_allclose(
        af.velocity(X0, att, kernel=kernel), af.velocity(X0, att, kernel="sdpa"), atol=atol
    )
    times = [0.0, 0.1]
    a = af.simulate(X0, att, times, method="heun", dt=0.05, kernel=kernel)
    b = af.simulate(X0, att, times, method="heun", dt=0.05, kernel="sdpa")
    assert a.info["kernel"] == kernel
    np.testing.assert_allclose(a.x, b.x, rtol=0, atol=atol)
