import math

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.dynamics.meanfield import circle_field
from attnflow.dynamics.meanfield.circle_field import CircleField, importance, sparse_field
from attnflow.kernels import compiled

F64 = torch.float64


def tangential(X, V):
    return -X[:, 1] * V[:, 0] + X[:, 0] * V[:, 1]


@pytest.mark.parametrize("beta", [5.0, 300.0])
def test_field_is_the_packages_velocity_on_angles(beta):
    att = af.worked_example(beta, d=2)
    rng = np.random.default_rng(1)
    th = rng.uniform(0, 2 * math.pi, 64)
    w = rng.uniform(0.2, 1.0, 64)
    w /= w.sum()
    X = np.stack([np.cos(th), np.sin(th)], 1)
    want = tangential(X, af.velocity(X, att, weights=w))
    got = CircleField(att)(torch.tensor(th), torch.tensor(th), torch.tensor(np.log(w))).numpy()
    np.testing.assert_allclose(got, want, atol=1e-13)


def stream_state(n=3000, seed=0):
    """Two clusters, two thin streams with log-weights falling to -400, a sprinkle of bulk."""
    rng = np.random.default_rng(seed)
    c = [math.pi / 4, 5 * math.pi / 4]
    th = [np.array(c), np.array(c) + 1e-3]
    lw = [np.log([0.4, 0.4]), np.log([0.05, 0.05])]
    s = np.linspace(0.0, 2.5, n // 2)
    for c0 in (-math.pi / 4, 3 * math.pi / 4):
        th.append(c0 + s)
        lw.append(-400.0 * (1.0 - s / 2.5) - 20.0 + 0.1 * rng.standard_normal(s.size))
    return torch.tensor(np.concatenate(th)), torch.tensor(np.concatenate(lw))


@pytest.mark.parametrize("beta", [20.0, 1e4])
def test_sparse_path_equals_dense(beta):
    f = CircleField(af.worked_example(beta, d=2))
    th, lw = stream_state()
    phi = torch.cat([th, torch.linspace(-3, 9, 257, dtype=F64)])
    dense, sparse = f.dense(phi, th, lw), sparse_field(f, phi, th, lw)
    assert torch.isfinite(sparse).all()
    assert float((dense - sparse).abs().max()) < 1e-13


BACKENDS = [
    "torch",
    pytest.param(
        "compiled",
        marks=pytest.mark.skipif(compiled.core() is None, reason="no compiled core (no C compiler)"),
    ),
]


@pytest.mark.parametrize("beta", [20.0, 1e4])
def test_the_compiled_core_gives_the_torch_field(beta):
    """The dense field by the fused C core (the default where it exists) against torch's fused
    attention and its sparse path, on two clusters and thin streams with log-weights to -420."""
    if compiled.core() is None:
        pytest.skip("no compiled core (no C compiler)")
    att = af.worked_example(beta, d=2)
    th, lw = stream_state()
    phi = torch.cat([th, torch.linspace(-3, 9, 257, dtype=F64)])
    fast, ref = CircleField(att, "compiled"), CircleField(att, "torch")
    assert fast.backend == "compiled" and ref.backend == "torch"
    got = fast(phi, th, lw)
    assert float((got - ref.dense(phi, th, lw)).abs().max()) < 1e-13
    assert float((got - sparse_field(ref, phi, th, lw)).abs().max()) < 1e-13


@pytest.mark.parametrize("backend", BACKENDS)
def test_field_keeps_masses_far_below_float_range(backend):
    """Log-weights of -5000 (e^-5000 underflows to 0): a common shift changes no softmax, and a
    key of weight e^-5000 next to heavy ones changes nothing."""
    f = CircleField(af.worked_example(1e4, d=2), backend)
    th, lw = stream_state(400)
    phi = torch.linspace(0.0, 6.0, 101, dtype=F64)
    base = f.dense(phi, th, lw)
    shifted = f.dense(phi, th, lw - 5000.0)
    assert float((base - shifted).abs().max()) < 1e-13
    more = f.dense(
        phi,
        torch.cat([th, torch.tensor([2.0], dtype=F64)]),
        torch.cat([lw, torch.tensor([-5000.0], dtype=F64)]),
    )
    assert float((base - more).abs().max()) < 1e-15


def test_importance_follows_attention_not_mass():
    """A heavy node at u_1 attends the light nodes near y* = B^T u_1 / |B^T u_1| (6.3 degrees):
    they matter although their mass is e^-30; light nodes far from every y* do not."""
    att = af.worked_example(100.0, d=2)
    f = CircleField(att)
    y_star = math.atan2(1.0, 9.0)
    th = torch.tensor([math.pi / 4, y_star, y_star + 0.005, 1.9, 2.0], dtype=F64)
    lw = torch.tensor([0.0, -30.0, -30.0, -30.0, -30.0], dtype=F64)
    imp = importance(f, th, lw).numpy()
    assert imp[0] == 1.0
    assert imp[1] > 0.1 and imp[2] > 0.1
    assert imp[3] < 1e-10 and imp[4] < 1e-10


def test_sparse_importance_equals_dense(monkeypatch):
    f = CircleField(af.worked_example(300.0, d=2))
    th, lw = stream_state(1200, seed=3)
    monkeypatch.setattr(circle_field, "SPARSE_MIN_PAIRS", 10**15)
    dense = importance(f, th, lw)
    monkeypatch.setattr(circle_field, "SPARSE_MIN_PAIRS", 1)
    sparse = importance(f, th, lw)
    # shares below e^-CUTOFF are dropped by the sparse path: equal to rounding, down to e^-40
    np.testing.assert_allclose(sparse.numpy(), dense.numpy(), rtol=1e-12, atol=math.exp(-40.0))
