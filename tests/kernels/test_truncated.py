"""The low-temperature truncated kernel and the automatic kernel choice.

References: the dense fused kernel (velocity_sdpa), a NumPy softmax in extended precision, the
truncated kernel itself with an infinite cutoff (isolates the truncation error), closed forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow as af
from attnflow.kernels import auto, compiled, pricing, reuse, truncated
from attnflow.kernels.auto import choose_kernel, kept_fraction
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.truncated import (
    DEFAULT_CUTOFF,
    candidate_pairs,
    cloud_geometry,
    kept_radius,
    sampled_counts,
    velocity_truncated,
)
from attnflow.kernels.truncated import _kernel as truncated_kernel
from attnflow.kernels.truncated import _moves as truncated_moves
from helpers import assert_kernel_matches_sdpa

EPS = np.finfo(np.float64).eps


def random_attention(d: int, beta: float, seed: int = 0) -> af.Attention:
    rng = np.random.default_rng(seed)
    return af.Attention(
        rng.standard_normal((d, d)), rng.standard_normal((d, d)), rng.standard_normal((d, d)), beta
    )


def cloud(kind: str, N: int, d: int, seed: int = 1) -> np.ndarray:
    mean = np.ones(d)
    if kind == "uniform":
        return af.sample_uniform(N, d, seed=seed)
    if kind == "vmf":
        return af.sample_vmf(N, mean, 50.0, seed=seed)
    if kind == "mixed":  # a spread-out half and a tight cluster
        tight = af.sample_vmf(N - N // 2, mean, 1e4, seed=seed + 1)
        return np.concatenate([af.sample_uniform(N // 2, d, seed=seed), tight])
    raise ValueError(kind)


def reference(X: np.ndarray, att: af.Attention) -> np.ndarray:
    """Tangent velocity by a max-subtracted softmax in NumPy extended precision (long double)."""
    Xl = X.astype(np.longdouble)
    S = att.beta * (Xl @ att.B.astype(np.longdouble)) @ Xl.T
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S)
    W /= W.sum(axis=1, keepdims=True)
    out = W @ (Xl @ att.V.astype(np.longdouble).T)
    out -= np.sum(out * Xl, axis=1, keepdims=True) * Xl
    return out.astype(np.float64)


def vt(X: np.ndarray, att: af.Attention, **kw) -> np.ndarray:
    return velocity_truncated(torch.tensor(X), att, **kw).numpy()


def scale(att: af.Attention) -> float:
    """||V||_2 bounds every velocity: errors are reported relative to it."""
    return float(np.linalg.norm(att.V, 2))


@pytest.mark.parametrize("kind", ["uniform", "vmf", "mixed"])
@pytest.mark.parametrize("beta", [10.0, 1e4, 1e6])
@pytest.mark.parametrize("d", [2, 3, 4, 6])
def test_matches_dense_float64(d, beta, kind):
    att = random_attention(d, beta, seed=d)
    X = cloud(kind, 400, d)
    v = vt(X, att)
    dense = velocity_sdpa(torch.tensor(X), att).numpy()
    # 1e-12 relative, above the rounding floor of the scores themselves (beta ||B|| eps: 2e-10 at
    # beta = 1e6), which any two float64 implementations share
    rounding = beta * att.norm_B * EPS
    assert np.max(np.abs(v - dense)) <= (1e-12 + rounding) * scale(att)
    # both agree with the extended-precision softmax to that floor
    assert np.max(np.abs(v - reference(X, att))) <= (1e-12 + 64 * rounding) * scale(att)


@pytest.mark.parametrize("kind", ["uniform", "mixed"])
def test_truncation_error_alone_is_below_1e12(kind):
    """Against the same kernel keeping every key (infinite cutoff): only truncation differs."""
    att = af.worked_example(3e3)
    X = cloud(kind, 1500, 3, seed=4)
    full = vt(X, att, cutoff=1e300)
    assert np.max(np.abs(vt(X, att) - full)) <= 1e-12 * scale(att)


@pytest.mark.parametrize("cutoff", [2.0, 4.0, 8.0])
def test_error_bound_holds_and_truncation_is_real(cutoff):
    """|v - v_full| <= 2 ||V|| N e^{-cutoff}; a small cutoff visibly drops keys."""
    att = af.worked_example(1e3)
    X = af.sample_uniform(2000, 3, seed=5)
    full = vt(X, att, cutoff=1e300)
    stats: dict = {}
    err = np.max(np.abs(vt(X, att, cutoff=cutoff, stats=stats) - full))
    assert err <= 2 * scale(att) * X.shape[0] * math.exp(-cutoff)
    assert stats["pairs"] < 0.5 * X.shape[0] ** 2  # keys were dropped ...
    if cutoff == 2.0:
        assert err > 1e-10  # ... and it shows


def test_default_cutoff_meets_documented_bound():
    assert 3.4e7 * math.exp(-DEFAULT_CUTOFF) <= 1e-12


def test_kept_radius_closed_form():
    """The ball of radius r around u holds exactly the keys with beta|b|(<u,x> - c) >= -cutoff."""
    X = af.sample_uniform(4000, 3, seed=2)
    u = af.sample_uniform(1, 3, seed=3)[0]
    bnorm, beta, cutoff = 2.5, 300.0, 10.0
    c = np.max(X @ u)
    dmin = np.min(np.linalg.norm(X - u, axis=1))
    r = kept_radius(np.array([dmin]), np.array([bnorm]), beta, cutoff)[0]
    inside = np.linalg.norm(X - u, axis=1) <= r
    kept = beta * bnorm * (X @ u - c) >= -cutoff
    assert np.all(inside[kept])  # every kept key is inside
    # nothing beyond the slack is inside: the radius is tight
    far = beta * bnorm * (X @ u - c) < -cutoff * (1 + 1e-6) - 1e-6
    assert not np.any(inside & far)
    assert np.isinf(kept_radius(np.array([0.0]), np.array([0.0]), beta, cutoff)[0])


def test_batch_equals_one_by_one_and_2d_input():
    att = af.worked_example(1e4)
    X = af.sample_uniform(900, 3, seed=6, M=3)
    X[1] = af.sample_vmf(900, [1.0, 0.0, 1.0], 200.0, seed=7)
    batch = vt(X, att)
    for m in range(3):
        np.testing.assert_allclose(batch[m], vt(X[m], att), rtol=0, atol=1e-15)
    assert vt(X[0], att).shape == (900, 3)


@pytest.mark.parametrize("beta", [100.0, 1e3, 1e4])
def test_float32_cells_run_the_float32_twin(beta):
    """float32 input on the compiled path: the cells run the fused core's float32 twin, within
    1e-7 (1 + beta ||B||) ||V|| of the float64 field of the same points, weights included."""
    c = compiled.core()
    if c is None or not c.float32:
        pytest.skip(compiled.status())
    att = af.worked_example(beta)
    X = torch.tensor(af.sample_uniform(1500, 3, seed=8, M=2), dtype=torch.float32)
    w = torch.tensor(np.random.default_rng(9).uniform(0.5, 2.0, (2, 1500)), dtype=torch.float32)
    w /= w.sum(dim=1, keepdim=True)
    stats: dict = {}
    v32 = velocity_truncated(X, att, weights=w, stats=stats)
    assert v32.dtype == torch.float32 and stats["sums"] == ["float32"] * 2
    v64 = velocity_truncated(X.double(), att, weights=w.double())
    err = float((v32.double() - v64).abs().max())
    assert 0 < err < 1e-7 * (1 + beta * np.linalg.norm(att.B, 2)) * np.linalg.norm(att.V, 2)


def test_singular_B_rows_keep_every_key():
    """B^T x = 0 for tokens on the third axis: all scores tie, the average is the plain mean."""
    B = np.diag([1.0, 1.0, 0.0])
    att = af.Attention(np.eye(3), B, np.diag([1.0, 2.0, 3.0]), beta=1e4)
    X = af.sample_uniform(600, 3, seed=9)
    X[:5] = [0.0, 0.0, 1.0]
    X[5:8] = [0.0, 0.0, -1.0]
    v = vt(X, att)
    dense = velocity_sdpa(torch.tensor(X), att).numpy()
    np.testing.assert_allclose(v, dense, rtol=0, atol=1e-12 * scale(att))
    mean = (X @ att.V.T).mean(axis=0)
    np.testing.assert_allclose(v[0], mean - (mean @ X[0]) * X[0], atol=1e-12)


def test_small_blocks_and_single_big_cells(monkeypatch):
    """Every grouping path (padded batches, cells alone, chunked ball queries) gives the same field."""
    att = af.worked_example(300.0)
    X = cloud("mixed", 600, 3, seed=10)
    ref = vt(X, att)
    monkeypatch.setattr(truncated_kernel, "BLOCK_ELEMENTS", 1000)
    monkeypatch.setattr(truncated_kernel, "BALL_CHUNK", 100)
    np.testing.assert_allclose(vt(X, att), ref, rtol=0, atol=1e-14 * scale(att))
    np.testing.assert_allclose(vt(X, att, leaf=4, leaf_min=1), ref, rtol=0, atol=1e-14 * scale(att))


def test_candidate_pairs_match_the_kernel():
    att = af.worked_example(1e4)
    X = torch.tensor(af.sample_uniform(1500, 3, seed=11, M=2))
    stats: dict = {}
    velocity_truncated(X, att, stats=stats)
    assert candidate_pairs(X, att) == stats["pairs"]
    assert stats["pairs"] < 0.2 * 2 * 1500**2


def test_candidate_pairs_take_the_kernels_settings():
    """Settings the kernel adjusts (leaf_min above leaf) or refuses: the count follows the kernel."""
    att = af.worked_example(1e4)
    X = torch.tensor(af.sample_uniform(800, 3, seed=5))
    stats: dict = {}
    velocity_truncated(X, att, leaf=4, leaf_min=64, stats=stats)
    assert candidate_pairs(X, att, leaf=4, leaf_min=64) == stats["pairs"]
    with pytest.raises(ValueError, match="cutoff"):
        candidate_pairs(X, att, cutoff=-1.0)
    with pytest.raises(TypeError, match="leaf"):
        candidate_pairs(X, att, leaf=2.5)


def test_sampled_counts_are_the_plan_where_every_query_is_sampled():
    """Up to 1024 tokens the sample is every token: the sampled plan is the kernel's own, weights and
    batches included."""
    att = af.worked_example(1e3)
    X = torch.tensor(af.sample_uniform(900, 3, seed=3, M=2))
    w = torch.tensor(np.random.default_rng(4).uniform(0.5, 1.5, (2, 900)))
    w /= w.sum(dim=1, keepdim=True)
    for weights in (None, w):
        exact = truncated.candidate_counts(X, att, weights=weights)
        assert sampled_counts(X, att, weights=weights) == {k: float(v) for k, v in exact.items()}


@pytest.mark.parametrize("kind", ["uniform", "vmf", "mixed"])
@pytest.mark.parametrize("beta", [30.0, 1e3, 1e5])
def test_sampled_counts_estimate_the_plan(kind, beta):
    """8192 tokens, 1024 sampled: the predicted cost within [0.67, 1.5] of the plan's, the pairs
    within [0.2, 3.5] (they matter where they are many; few pairs cost less than the tokens)."""
    att = random_attention(3, beta, seed=2)
    X = torch.tensor(cloud(kind, 8192, 3))
    exact, est = truncated.candidate_counts(X, att), sampled_counts(X, att)
    assert 0.2 <= est["pairs"] / exact["pairs"] <= 3.5, (est, exact)
    v = "compiled"  # the same prices on every machine (the torch path's weigh keys more: 0.65 at vmf, 1e5)
    assert 0.67 <= auto.truncated_cost(est, 1, 8192, v) / auto.truncated_cost(exact, 1, 8192, v) <= 1.5


def test_auto_prices_large_clouds_by_the_sampled_plan(monkeypatch):
    """Above PLAN_MAX_N tokens the decision makes no plan of the truncated kernel."""
    import attnflow.kernels.truncated._geometry as geometry

    att = af.worked_example(1e4)
    X = torch.tensor(af.sample_uniform(pricing.PLAN_MAX_N + 1, 3, seed=14))[None]

    def no_plan(*args, **kwargs):
        raise AssertionError("the truncated kernel was planned")

    monkeypatch.setattr(geometry, "candidate_counts", no_plan)
    monkeypatch.setattr(auto, "MARGIN", 0.0)  # priced whatever the constants say: the rule alone
    monkeypatch.setattr(pricing, "SURE", math.inf)
    costs = auto.predict_costs(X, att)
    assert math.isfinite(costs["truncated"])
    assert costs["truncated"] == auto.truncated_cost(sampled_counts(X, att), 1, X.shape[1], auto._variant(X))


def test_auto_prices_hot_states_by_a_small_sampled_plan(monkeypatch):
    """At PLAN_MAX_N tokens and below the plan prices a cold state (and is kept for the kernel); a
    hot one (most pairs kept), where the plan costs a third to a half of the kernel, is priced by a
    sampled plan of N / 16 queries (at least HOT_SAMPLE)."""
    import attnflow.kernels.truncated._geometry as geometry

    monkeypatch.setattr(auto, "MARGIN", 0.0)  # priced whatever the constants say: the rule alone
    monkeypatch.setattr(pricing, "SURE", math.inf)
    N = pricing.PLAN_MAX_N
    X = torch.tensor(af.sample_uniform(N, 3, seed=15))[None]
    hot, cold = af.worked_example(30.0), af.worked_example(1e3)
    assert auto.sample_state(X, hot).kept > pricing.HOT >= auto.sample_state(X, cold).kept
    plan = geometry.candidate_counts

    def no_plan(*args, **kwargs):
        raise AssertionError("the truncated kernel was planned")

    monkeypatch.setattr(geometry, "candidate_counts", no_plan)
    n = max(pricing.HOT_SAMPLE, N // 16)
    costs = auto.predict_costs(X, hot)
    assert costs["truncated"] == auto.truncated_cost(sampled_counts(X, hot, n=n), 1, N, auto._variant(X))
    monkeypatch.setattr(geometry, "candidate_counts", plan)
    reuse.clear()
    costs = auto.predict_costs(X, cold)
    assert costs["truncated"] == auto.truncated_cost(plan(X, cold), 1, N, auto._variant(X))


def test_the_kernel_takes_the_trees_of_the_sampled_plan(monkeypatch):
    """A sampled plan keeps its trees on the keys for the kernel's plan on the same tensor, which
    is the plan made afresh; another tensor gets its own."""
    import attnflow.kernels.truncated._geometry as geometry

    att = af.worked_example(1e3)
    X = torch.tensor(af.sample_uniform(3000, 3, seed=16, M=2))
    reuse.clear()
    fresh = truncated.candidate_counts(X, att)
    reuse.clear()
    truncated_moves.clear()  # else the kernel takes the whole geometry kept for the state
    sampled_counts(X, att, n=300)
    kept = geometry.trees(X)
    make = geometry._tree
    monkeypatch.setattr(geometry, "_tree", lambda Xn: pytest.fail("a tree was made again"))
    assert truncated.candidate_counts(X, att) == fresh
    assert [g.tree for g in cloud_geometry(X, att)] == kept
    monkeypatch.setattr(geometry, "_tree", make)
    assert geometry.trees(X.clone()) is not kept


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31), logbeta=st.floats(1.0, 5.0))
def test_rotation_equivariance(seed, logbeta):
    """Rotating tokens by R and weights by B -> R B R^T, V -> R V R^T rotates the field by R."""
    rng = np.random.default_rng(seed)
    att = random_attention(3, 10.0**logbeta, seed=seed % 1000)
    R, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    X = af.sample_uniform(200, 3, seed=rng)
    rot = af.Attention(R @ att.Q @ R.T, R @ att.K @ R.T, R @ att.V @ R.T, att.beta)
    lhs = vt(X @ R.T, rot)
    rhs = vt(X, att) @ R.T
    tol = (1e-12 + 64 * att.beta * att.norm_B * EPS) * scale(att)
    assert np.max(np.abs(lhs - rhs)) <= tol


def test_bad_input():
    att = af.worked_example(10.0)
    X = torch.tensor(af.sample_uniform(50, 3, seed=0))
    with pytest.raises(ValueError, match="beta"):
        velocity_truncated(X, att.with_beta(math.inf))
    with pytest.raises(ValueError, match="cutoff"):
        velocity_truncated(X, att, cutoff=-1.0)
    with pytest.raises(TypeError, match="leaf"):
        velocity_truncated(X, att, leaf=2.5)
    with pytest.raises(ValueError, match="X"):
        velocity_truncated(X[None, None], att)


def test_registry_and_simulate_unchanged():
    """kernel="truncated" through velocity() and the integrator gives the dense results."""
    att = af.worked_example(1e3)
    X0 = af.sample_uniform(300, 3, seed=12)
    assert_kernel_matches_sdpa(X0, att, "truncated")


def test_kept_fraction_is_exact_on_its_sample():
    att = af.worked_example(1e3)
    X = af.sample_uniform(800, 3, seed=13)
    S = att.beta * (X @ att.B) @ X.T
    exact = np.mean(S - S.max(axis=1, keepdims=True) > -DEFAULT_CUTOFF)
    assert kept_fraction(torch.tensor(X), att, sample=800) == pytest.approx(exact, abs=1e-12)
    assert kept_fraction(torch.tensor(X), att.with_beta(1e-3)) == 1.0


def test_auto_choices():
    """The truncated kernel where few keys count (the other choices: test_auto.py)."""
    X_uniform = torch.tensor(af.sample_uniform(8192, 3, seed=14))[None]
    cold = af.worked_example(1e4)
    assert choose_kernel(X_uniform, cold) == "truncated"
    costs = auto.predict_costs(X_uniform, cold)
    assert choose_kernel(X_uniform, cold) == min(costs, key=lambda k: costs[k])
    assert choose_kernel(X_uniform[:, :1000], cold) == auto.dense_pick(X_uniform[:, :1000])  # small N
