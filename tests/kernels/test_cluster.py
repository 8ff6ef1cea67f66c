"""The collapsed-cluster kernel (kernels/cluster.py, kernels/cells.py).

References: a max-subtracted softmax in NumPy extended precision (long double), the dense fused
kernel, closed forms (one token, identical tokens), and the a-priori bound of the module docstring.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import cells, compiled
from attnflow.kernels import costs as kcosts
from attnflow.kernels.cluster import DEFAULT_TOL, velocity_cluster
from attnflow.kernels.cluster._sums import _monomial_features
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.fused import variant
from helpers import assert_kernel_matches_sdpa, random_attention

EPS = np.finfo(np.float64).eps
# costs that expand every cell pair whose series is valid
EXPAND_ALL = {"direct_pair": 1.0, "direct_cell_pair": 1.0, "series": 0.0, "expanded_pair": 0.0}


def scale(att: af.Attention) -> float:
    """||V||_2 bounds every velocity: errors are measured relative to it."""
    return float(np.linalg.norm(att.V, 2))


def reference(X: np.ndarray, att: af.Attention, w: np.ndarray | None = None, beta: float | None = None):
    """Tangent velocity by a weighted max-subtracted softmax in NumPy extended precision."""
    Xl = X.astype(np.longdouble)
    beta = att.beta if beta is None else beta
    S = beta * (Xl @ att.B.astype(np.longdouble)) @ Xl.T
    S -= S.max(axis=1, keepdims=True)
    W = np.exp(S) * (np.full(len(X), 1.0 / len(X)) if w is None else w).astype(np.longdouble)
    W /= W.sum(axis=1, keepdims=True)
    out = W @ (Xl @ att.V.astype(np.longdouble).T)
    out -= np.sum(out * Xl, axis=1, keepdims=True) * Xl
    return out.astype(np.float64)


def two_clusters(N: int, d: int, kappa: float, seed: int = 1) -> np.ndarray:
    """Two antipodal von Mises-Fisher clusters, as the dynamics make them."""
    X = af.sample_vmf(N, np.ones(d), kappa, seed=seed)
    X[::2] *= -1
    return X


def vc(X: np.ndarray, att: af.Attention, **kw) -> np.ndarray:
    w = kw.pop("weights", None)
    return velocity_cluster(
        torch.tensor(X), att, weights=None if w is None else torch.tensor(w), **kw
    ).numpy()


def bound(att: af.Attention, tol: float = DEFAULT_TOL, beta: float | None = None) -> float:
    """The documented bound plus the rounding floor of float64 scores (beta ||B|| eps) that every
    float64 kernel shares; 64 eps for the series' own rounding."""
    beta = att.beta if beta is None else beta
    return (tol + 64 * (1 + beta * att.norm_B) * EPS) * scale(att)


# ---------------------------------------------------------------- against extended precision


BETAS, KAPPAS = (10.0, 1e3, 1e4, 1e6), (10.0, 100.0, 1e4, 1e6)


def _grid():
    """Every (d, beta, kappa); the fast suite keeps, for each d, four pairs that take every beta and
    every kappa once (a Latin square shifted by d), the full suite all 48."""
    for d in (2, 3, 5):
        for i, beta in enumerate(BETAS):
            for j, kappa in enumerate(KAPPAS):
                fast = (i + d) % 4 == j
                yield pytest.param(d, beta, kappa, marks=() if fast else pytest.mark.slow)


@pytest.mark.parametrize(("d", "beta", "kappa"), list(_grid()))
def test_matches_reference(d, beta, kappa):
    att = random_attention(d, beta, seed=d)
    X = two_clusters(700, d, kappa, seed=d)
    w = np.random.default_rng(d).uniform(0.5, 2.0, len(X))
    w /= w.sum()
    for weights in (None, w):
        ref = reference(X, att, weights)
        stats: dict = {}
        v = vc(X, att, weights=weights, costs=EXPAND_ALL, leaf_min=4, stats=stats)
        assert np.max(np.abs(v - ref)) <= bound(att)
        np.testing.assert_allclose(vc(X, att, weights=weights), v, rtol=0, atol=bound(att))
    if beta * kappa**-1 <= 1.0 and d <= 3:  # tight enough for the series: it must have been used
        assert stats["expanded_pairs"] > 0 and stats["moment_rows"] > 0


@pytest.mark.parametrize("d", [2, 3, 5])
def test_series_carries_the_collapsed_cloud(d):
    """A collapsed state at scale: most pairs expanded, few evaluated directly, same field."""
    att = af.worked_example(1e3) if d == 3 else random_attention(d, 1e3, seed=d)
    X = two_clusters(6000, d, 1e5, seed=3)
    stats: dict = {}
    v = vc(X, att, stats=stats, costs=EXPAND_ALL)  # every valid pair expanded, whatever the machine
    assert stats["direct_pairs"] < 0.25 * 6000**2 and stats["expanded_pairs"] > 0
    dense = velocity_sdpa(torch.tensor(X), att).numpy()
    assert np.max(np.abs(v - dense)) <= bound(att)


@pytest.mark.parametrize("tol", [1e-3, 1e-5, 1e-7])
def test_error_bound_holds_at_loose_tolerances(tol):
    """|v^ - v| <= tol ||V|| with every valid pair expanded (and the dropped keys of the tolerance)."""
    att = af.worked_example(300.0)
    X = two_clusters(2000, 3, 300.0, seed=4)
    X[:200] = af.sample_uniform(200, 3, seed=5)  # some scattered tokens
    ref = velocity_sdpa(torch.tensor(X), att).numpy()  # 1e-14 from the exact field
    stats: dict = {}
    err = np.max(np.abs(vc(X, att, tol=tol, costs=EXPAND_ALL, leaf_min=4, stats=stats) - ref))
    assert stats["expanded_pairs"] > 0
    assert err <= tol * scale(att)


def test_default_tolerance_is_1e10():
    assert DEFAULT_TOL <= 1e-10
    share = cells.TOL_SHARE
    assert 2 * (2 * share) / (1 - share * 1e-10) ** 2 <= 1.0  # 2 (tol_e + tol_d) / (...) <= tol


# ---------------------------------------------------------------- the series and the monomials


@pytest.mark.parametrize("order", [2, 4, 6, 8, 10, 14])
@pytest.mark.parametrize("tol_e", [1e-4, 2.4e-11, 1e-14])
def test_series_bound_holds_and_is_tight(order, tol_e):
    rho, c = cells.series(order, tol_e)
    assert cells.series_error(rho, order) <= tol_e * (1 + 1e-9)
    assert cells.series_error(rho * 1.01, order) > tol_e  # the largest such rho
    z = np.linspace(-rho, rho, 20001)
    rel = np.abs(np.polynomial.polynomial.polyval(z, c) - np.exp(z)) * np.exp(-z)
    assert rel.max() <= tol_e + 64 * EPS
    if tol_e > 1e-13:
        assert rel.max() >= 1e-3 * tol_e  # the bound is not vacuous


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_monomials_and_coefficients(d):
    """Features are the monomials of the table; coefficients give q(a . y) = sum_k c_k (a . y)^k."""
    p = 5
    table = cells.monomials(d, p + 1)
    assert len(table.exponents) == math.comb(p + 1 + d, d) == table.count(p + 1)
    assert len({tuple(e) for e in table.exponents.tolist()}) == table.count(p + 1)
    rng = np.random.default_rng(d)
    a, y = rng.standard_normal((2, d)) * 0.4
    Fy = _monomial_features(torch.tensor(y).view(1, d, 1), table, p + 1).numpy().ravel()
    np.testing.assert_allclose(Fy, np.prod(y**table.exponents, axis=1), rtol=1e-14)
    c = rng.standard_normal(p + 1)
    Fa = _monomial_features(torch.tensor(a).view(1, d, 1), table, p).numpy().ravel()
    lhs = np.dot(Fa * table.coefficients(c), Fy[: table.count(p)])
    assert lhs == pytest.approx(np.polynomial.polynomial.polyval(a @ y, c), rel=1e-12)
    shift, low = table.shift(p), table.exponents[: table.count(p)]
    for v in range(d):
        np.testing.assert_array_equal(table.exponents[shift[:, v]], low + np.eye(d, dtype=int)[v])


# ---------------------------------------------------------------- edges


def test_single_token_and_identical_tokens():
    """One token: v = P_x^perp V x.  N identical tokens: the same, through one oversized cell."""
    att = af.worked_example(1e6)
    x = af.sample_uniform(1, 3, seed=6)
    expect = att.V @ x[0] - (x[0] @ att.V @ x[0]) * x[0]
    np.testing.assert_allclose(vc(x, att)[0], expect, atol=1e-15)
    same = np.repeat(x, 500, axis=0)
    stats: dict = {}
    v = vc(same, att, leaf_max=64, costs=EXPAND_ALL, stats=stats)
    assert stats["cells"] >= 500 // 64 and stats["expanded_pairs"] > 0
    np.testing.assert_allclose(v, np.repeat(expect[None], 500, axis=0), atol=1e-14)


def test_one_cluster_and_mixed_state():
    """One cluster; one cluster plus scattered tokens (far cells exact, dropped keys certified)."""
    att = af.worked_example(1e3)
    one = af.sample_vmf(2000, [1.0, 0.0, 1.0], 1e4, seed=7)
    mixed = np.concatenate([one, af.sample_uniform(500, 3, seed=8)])
    for X in (one, mixed):
        stats: dict = {}
        v = vc(X, att, costs=EXPAND_ALL, leaf_min=8, stats=stats)
        assert stats["expanded_pairs"] > 0
        assert np.max(np.abs(v - reference(X, att))) <= bound(att)


def test_beta_1e6_is_finite_and_right():
    att = af.worked_example(1e6)
    X = two_clusters(1500, 3, 1e8, seed=9)
    v = vc(X, att, costs=EXPAND_ALL, leaf_min=4)
    assert np.isfinite(v).all()
    assert np.max(np.abs(v - reference(X, att))) <= bound(att)


def test_float32_direct_pairs_run_the_float32_twin(monkeypatch):
    """float32 input on the compiled path: the direct pairs go through the core's float32 twin,
    within 1e-7 (1 + beta ||B||) ||V|| of the float64 field of the same points."""
    c = compiled.core()
    if c is None or not c.float32:
        pytest.skip(compiled.status())
    seen = []
    cells_of = compiled.Core.cells

    def spy(self, *args, **kwargs):
        seen.append(args[8] if len(args) > 8 else kwargs.get("dtype", "float64"))
        return cells_of(self, *args, **kwargs)

    monkeypatch.setattr(compiled.Core, "cells", spy)
    att = af.worked_example(1e3)
    X32 = torch.tensor(two_clusters(3000, 3, 1e4, seed=10), dtype=torch.float32)
    v32 = velocity_cluster(X32, att)
    assert seen and set(seen) == {"float32"}
    err = float((v32.double() - velocity_cluster(X32.double(), att)).abs().max())
    assert err < 1e-7 * (1 + att.beta * np.linalg.norm(att.B, 2)) * np.linalg.norm(att.V, 2)


def test_batch_betas_and_2d_input():
    att = af.worked_example(1e3)
    X = np.stack([two_clusters(800, 3, 1e4, seed=s) for s in (11, 12)])
    betas = torch.tensor([300.0, 3e3], dtype=torch.float64)
    batch = velocity_cluster(torch.tensor(X), att, betas=betas).numpy()
    for m in range(2):
        one = vc(X[m], att.with_beta(float(betas[m])))
        np.testing.assert_allclose(batch[m], one, rtol=0, atol=1e-15)
        assert np.max(np.abs(one - reference(X[m], att, beta=float(betas[m])))) <= bound(att, beta=3e3)
    assert vc(X[0], att).shape == (800, 3)


def test_off_sphere_rows_of_a_runge_kutta_stage():
    """Stages evaluate the field off the sphere (rows of norm 1 +- 15 %): same field as sdpa."""
    att = af.worked_example(1e3)
    X = two_clusters(3000, 3, 1e4, seed=18)
    X *= np.random.default_rng(18).uniform(0.9, 1.15, (len(X), 1))
    ref = velocity_sdpa(torch.tensor(X), att).numpy()
    for costs in (None, EXPAND_ALL):
        assert np.max(np.abs(vc(X, att, costs=costs) - ref)) <= 1.15 * bound(att)


def test_singular_B_rows_keep_every_key():
    """B^T x = 0 on the third axis: all scores of that row tie, its average is the weighted mean."""
    B = np.diag([1.0, 1.0, 0.0])
    att = af.Attention(np.eye(3), B, np.diag([1.0, 2.0, 3.0]), beta=1e4)
    X = two_clusters(600, 3, 1e3, seed=13)
    X[:3] = [0.0, 0.0, 1.0]
    v = vc(X, att)
    assert np.max(np.abs(v - reference(X, att))) <= bound(att)
    mean = (X @ att.V.T).mean(axis=0)
    np.testing.assert_allclose(v[0], mean - (mean @ X[0]) * X[0], atol=1e-12)


def test_small_batches_give_the_same_field(monkeypatch):
    """Every batching path (one cell per batch, chunks of pairs) gives the same field."""
    from attnflow.kernels.cluster import _sums as cluster_sums

    att = af.worked_example(1e3)
    X = two_clusters(2000, 3, 1e4, seed=14)
    ref = vc(X, att, costs=EXPAND_ALL)
    monkeypatch.setattr(cluster_sums, "BLOCK_ELEMENTS", 5000)
    np.testing.assert_allclose(vc(X, att, costs=EXPAND_ALL), ref, rtol=0, atol=1e-14 * scale(att))


def test_plan_counts_match_the_kernel():
    att = af.worked_example(1e3)
    X = two_clusters(4000, 3, 1e4, seed=15)
    stats: dict = {}
    vc(X, att, stats=stats)
    w = np.full(len(X), 1.0 / len(X))
    own = kcosts.active()["cluster"][variant(3)]  # the kernel's constants (torch path: no compiler)
    counts = cells.plan(X, w, att.B, att.beta, DEFAULT_TOL, 6, costs=own).counts()
    for key in ("cells", "expanded_pairs", "moment_rows", "eval_rows", "direct_pairs"):
        assert counts[key] == stats[key]


def test_auto_prices_the_cluster_kernel_by_its_plan():
    """auto's counts are the kernel's own; a collapsed cloud goes to "cluster", a small one to sdpa."""
    from attnflow.kernels import auto, registry

    att = af.worked_example(1e3)
    X = torch.tensor(two_clusters(8192, 3, 1e5, seed=17))[None]
    stats: dict = {}
    velocity_cluster(X, att, stats=stats)
    counts = auto.cluster_counts(X, att)
    assert all(counts[key] == stats[key] for key in cells.COUNTS)
    costs = auto.predict_costs(X, att)
    assert set(costs) == {s.name for s in registry.candidates()}
    assert costs["cluster"] == auto.cluster_cost(counts, 3, auto._variant(X))
    assert costs["cluster"] < costs["sdpa"] and costs["cluster"] < costs["fused"]
    assert auto.choose_kernel(X, att) == "cluster"
    assert auto.choose_kernel(X[:, : auto.MIN_N - 1], att) in ("fused", "sdpa")  # small N: dense


def test_auto_plans_with_the_weights():
    """auto prices the cluster kernel with the tokens' weights (torch or NumPy, any scale), as the
    kernel plans with them; resolve_kernel hands the weights on to choose_kernel."""
    from attnflow.kernels import auto, resolve_kernel

    att = af.worked_example(1e3)
    X = torch.tensor(two_clusters(8192, 3, 1e3, seed=17))[None]  # wide enough that weights matter
    w = np.random.default_rng(5).uniform(0.01, 2.0, X.shape[1])
    stats: dict = {}
    velocity_cluster(X, att, weights=torch.tensor(w), stats=stats)
    for given in (torch.tensor(w), w * 7.0):
        counts = auto.cluster_counts(X, att, given)
        assert all(counts[key] == stats[key] for key in cells.COUNTS)
    uniform = auto.cluster_counts(X, att)
    assert any(uniform[key] != stats[key] for key in cells.COUNTS)  # the weights do change the plan
    wt = torch.tensor(w / w.sum())[None]
    assert resolve_kernel("auto", att, X, wt) == auto.choose_kernel(X, att, wt)
    assert auto.predict_costs(X, att, wt)["cluster"] == auto.cluster_cost(stats, 3, auto._variant(X))


def test_bad_input():
    att = af.worked_example(10.0)
    X = torch.tensor(af.sample_uniform(50, 3, seed=0))
    with pytest.raises(ValueError, match="beta"):
        velocity_cluster(X, att.with_beta(math.inf))
    with pytest.raises(ValueError, match="tol"):
        velocity_cluster(X, att, tol=2.0)
    with pytest.raises(ValueError, match="tol"):
        velocity_cluster(X, att, tol=-1.0)
    with pytest.raises(TypeError, match="order"):
        velocity_cluster(X, att, order=2.5)
    with pytest.raises(ValueError, match="weights"):
        velocity_cluster(X, att, weights=torch.ones(49))
    with pytest.raises(ValueError, match="weights"):
        velocity_cluster(X, att, weights=torch.zeros(50))
    # the scale of the weights does not matter
    w = torch.rand(50, dtype=torch.float64) + 0.5
    np.testing.assert_allclose(
        velocity_cluster(X, att, weights=w * 1e6), velocity_cluster(X, att, weights=w), rtol=0, atol=1e-14
    )
    with pytest.raises(ValueError, match="betas"):
        velocity_cluster(X, att, betas=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="X"):
        velocity_cluster(X[None, None], att)


def test_registry_and_simulate():
    """kernel="cluster" through velocity() and the integrator gives the dense results."""
    att = af.worked_example(1e3)
    X0 = two_clusters(400, 3, 1e4, seed=16)
    assert_kernel_matches_sdpa(X0, att, "cluster")
