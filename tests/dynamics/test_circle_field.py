import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

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


needs_core = pytest.mark.skipif(compiled.core() is None, reason="no compiled core (no C compiler)")


@needs_core
@pytest.mark.parametrize("beta", [20.0, 1e4])
def test_the_compiled_sparse_path_is_the_dense_field(beta):
    """From COMPILED_SPARSE_MIN_PAIRS pairs on, the compiled field takes each block of queries
    against its kept keys only: the dense field to rounding, on clusters and streams to -400."""
    f = CircleField(af.worked_example(beta, d=2), "compiled")
    th, lw = stream_state(3000)
    phi = torch.cat([th, torch.linspace(-3, 9, 257, dtype=F64)])
    assert len(phi) * len(th) >= circle_field.COMPILED_SPARSE_MIN_PAIRS
    cells = circle_field._cell_plan(f, phi, th, lw)
    assert cells.kept <= circle_field.SPARSE_MAX_KEPT  # the sparse path is the one taken
    got = f(phi, th, lw)
    assert float((got - f.dense(phi, th, lw)).abs().max()) < 1e-13


@needs_core
def test_the_compiled_importance_is_the_explicit_softmax_one(monkeypatch):
    f = CircleField(af.worked_example(1e4, d=2), "compiled")
    th, lw = stream_state(3000, seed=3)
    n = len(th) - 40  # the last nodes are keys only (a patch's virtual nodes)
    got = importance(f, th, lw, queries=n)
    monkeypatch.setattr(circle_field, "COMPILED_SPARSE_MIN_PAIRS", 10**15)
    monkeypatch.setattr(circle_field, "SPARSE_MIN_PAIRS", 10**15)  # the explicit softmax over blocks
    want = importance(f, th, lw, queries=n)
    # scores up to beta |B| = 3e4: exp of them carries 1e-12 relative; shares below e^-CUTOFF dropped
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=math.exp(-40.0))


@needs_core
def test_colmax_is_the_largest_shifted_score_of_each_key():
    rng = np.random.default_rng(5)
    nq, nk, d = 37, 29, 2
    q, a = rng.normal(size=(nq, d)) * 30, rng.normal(size=nq)
    rows = np.hstack([rng.normal(size=(nk, d)), rng.normal(size=(nk, 1)), rng.normal(size=(nk, d))])
    cells = [(rng.choice(nq, 11, replace=False), rng.choice(nk, 7, replace=False)) for _ in range(5)]
    qidx, kidx = np.concatenate([c[0] for c in cells]), np.concatenate([c[1] for c in cells])
    qs = np.arange(0, 11 * 6, 11, dtype=np.int64)
    ks = np.arange(0, 7 * 6, 7, dtype=np.int64)
    out = np.full(nk, -np.inf)
    compiled.core().colmax(q, a, qidx, qs, rows, kidx, ks, out)
    want = np.full(nk, -np.inf)
    for qi, ki in cells:
        want[ki] = np.maximum(want[ki], (a[qi, None] + q[qi] @ rows[ki, :d].T).max(0))
    np.testing.assert_allclose(out, want, rtol=1e-14, atol=1e-12)
    with pytest.raises(ValueError, match="index out of range"):
        compiled.core().colmax(q, a, qidx, qs, rows, kidx + nk, ks, out)


@given(st.floats(-20.0, 20.0), st.floats(0.0, 7.0))
def test_max_cos_is_the_largest_cosine_over_the_interval(low, width):
    bound = float(circle_field._max_cos(np.array(low), np.array(low + width)))
    inside = low + width * np.linspace(0.0, 1.0, 2001)
    assert np.cos(inside).max() <= bound + 1e-12  # an upper bound ...
    assert bound <= np.cos(inside).max() + 1e-5  # ... attained up to the grid's spacing


@pytest.mark.parametrize("n", [300, 3000])  # dense in torch; the sparse compiled path (if a core)
def test_log_row_sums_give_the_interaction_energy(n):
    """The field's softmax normalisers, log sum_j e^(beta x_i^T B x_j) w_j: every pair's, to
    rounding, and with them log E_beta of a weighted measure as science.energy computes it."""
    from scipy.special import logsumexp

    from attnflow.science.energy import log_energy_curve

    att = af.worked_example(1e4, d=2)
    th, lw = stream_state(n)
    rows = circle_field.log_row_sums(CircleField(att), th, th, lw).numpy()
    X = np.stack([np.cos(th.numpy()), np.sin(th.numpy())], -1)
    want = logsumexp(att.beta * (X @ att.B) @ X.T + lw.numpy()[None], axis=1)
    np.testing.assert_allclose(rows, want, rtol=1e-14, atol=1e-9)
    w = lw.numpy() - logsumexp(lw.numpy())
    energy = logsumexp(w + rows - logsumexp(lw.numpy())) - math.log(2 * att.beta)
    assert energy == pytest.approx(float(log_energy_curve(X, att, log_weights=lw.numpy())), rel=1e-14)
