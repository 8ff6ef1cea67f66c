"""Hardmax and localmax tokens (docs/math.md, "Hardmax and localmax tokens"): the velocity against a
dense reference, the beta -> inf limit of the softmax, and the geometry of hardmax with B positive
semidefinite (each token runs along the great circle to the leader it attends to)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics


def reference(X, att, w, r, causal=False):
    """P^perp of the w-weighted mean of V x_j over {j : s_ij >= max_k s_ik - r}, token by token."""
    N = len(X)
    out = np.empty_like(X)
    for i in range(N):
        keys = range(i + 1) if causal else range(N)
        s = np.array([X[i] @ att.B @ X[j] for j in keys])
        C = [j for j, sj in zip(keys, s, strict=True) if sj >= s.max() - r]
        m = sum(w[j] * att.V @ X[j] for j in C) / sum(w[j] for j in C)
        out[i] = m - (X[i] @ m) * X[i]
    return out


def cloud_with_ties(seed: int = 0):
    """30 tokens, the last 5 copies of the first 5 (exact ties), and random weights."""
    X = af.sample_uniform(25, 3, seed=seed)
    X = np.vstack([X, X[:5]])
    w = np.random.default_rng(seed).uniform(0.5, 1.5, 30)
    return X, w / w.sum()


@pytest.mark.parametrize(("normalization", "r"), [("hardmax", 0.0), ("localmax", 0.05), ("localmax", 0.5)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", ["fused", "blocked", "sdpa"])
def test_velocity_matches_the_dense_reference(normalization, r, causal, kernel):
    att = af.random_attention(3, 4, beta=2.0)
    X, w = cloud_with_ties()
    dyn = Dynamics(att, normalization=normalization, sensitivity=r, mask="causal" if causal else "none")
    v = af.velocity(X, dyn, kernel=kernel, weights=w)
    assert np.allclose(v, reference(X, att, w, r, causal), atol=1e-13)


def test_hardmax_is_the_limit_of_the_softmax_ties_included():
    """At beta = 1e7 the softmax puts e^{-beta gap} on a token a gap below the maximum (here gap >
    1e-5: nothing), and splits the weight of tied maximisers in proportion to w_j, as hardmax does."""
    att = af.random_attention(3, 4, beta=1e7)
    X, w = cloud_with_ties()
    distinct = [np.unique(np.round(row, 12)) for row in X @ att.B @ X.T]  # ties merged
    assert min(row[-1] - row[-2] for row in distinct) > 1e-5
    soft = af.velocity(X, Dynamics(att, mask="none"), kernel="blocked", weights=w)
    hard = af.velocity(X, Dynamics(att, normalization="hardmax"), weights=w)
    assert np.allclose(soft, hard, atol=1e-12)


def test_localmax_with_a_wide_sensitivity_averages_every_token():
    att = af.random_attention(3, 1, beta=1.0)
    X = af.sample_uniform(40, 3, seed=1)
    v = af.velocity(X, Dynamics(att, normalization="localmax", sensitivity=100.0))
    m = X.mean(axis=0) @ att.V.T
    assert np.allclose(v, m - (X @ m)[:, None] * X, atol=1e-14)


def test_hardmax_with_psd_b_runs_each_token_straight_to_its_leader():
    """Q = K (B = Q^T Q positive semidefinite), V = I. A leader attends to itself (Cauchy-Schwarz in
    B's inner product) and stays; a token whose maximiser is a leader moves along the great circle to
    it, d theta/dt = -sin theta: tan(theta / 2) = tan(theta_0 / 2) e^{-t}, in the plane of x_i(0) and
    the leader. Checked for every token whose maximiser is one leader over the whole run."""
    Q = np.random.default_rng(0).normal(size=(3, 3)) / math.sqrt(3)
    att = af.Attention(Q, Q, np.eye(3), 1.0)
    X0 = af.sample_uniform(40, 3, seed=2)
    times = np.linspace(0, 4, 41)
    tr = af.simulate(X0, Dynamics(att, normalization="hardmax"), times, method="rk4", dt=0.005)
    target = np.einsum("tid,de,tje->tij", tr.x, att.B, tr.x).argmax(axis=-1)  # (T, N)
    leaders = {i for i in range(40) if np.all(target[:, i] == i)}
    followers = [
        i for i in range(40) if np.all(target[:, i] == target[0, i]) and target[0, i] in leaders - {i}
    ]
    assert len(leaders) >= 2 and len(followers) >= 5
    for leader in leaders:
        assert np.allclose(tr.x[:, leader], X0[leader], atol=1e-14)
    for i in followers:
        lead = X0[target[0, i]]
        theta = np.arccos(np.clip(tr.x[:, i] @ lead, -1, 1))
        assert np.allclose(theta, 2 * np.arctan(math.tan(theta[0] / 2) * np.exp(-times)), atol=1e-10)
        normal = np.cross(X0[i], lead)
        assert np.max(np.abs(tr.x[:, i] @ normal)) < 1e-12


def test_sensitivity_belongs_to_localmax():
    att = af.random_attention(3, 1, beta=1.0)
    with pytest.raises(ValueError, match="localmax needs sensitivity r > 0"):
        Dynamics(att, normalization="localmax")
    with pytest.raises(ValueError, match="only localmax takes one"):
        Dynamics(att, normalization="hardmax", sensitivity=0.1)
    assert "sensitivity r = 0.2" in Dynamics(att, normalization="localmax", sensitivity=0.2).describe()
