"""W2 between weighted measures: against POT's emd2 with the weights, and its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.measures.sampling import sample_uniform
from attnflow.transport.wasserstein import w2, w2_to_target

ot = pytest.importorskip("ot")


def prob(v):
    return np.asarray(v, dtype=float) / np.sum(v)


def pot_w2(X, Y, a, b, cost="chordal"):
    """Independent reference: POT's exact emd2 with the weights."""
    M = ot.dist(X, Y) if cost == "chordal" else np.arccos(np.clip(X @ Y.T, -1.0, 1.0)) ** 2
    return math.sqrt(ot.emd2(a, b, M, numItermax=10**7))


def weights(n, seed):
    return prob(np.random.default_rng(seed).random(n) + 0.05)


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
@pytest.mark.parametrize(
    ("N", "K", "d", "seed"), [(7, 7, 2, 0), (30, 30, 3, 1), (40, 25, 3, 2), (12, 50, 5, 3), (1, 9, 3, 4)]
)
def test_weighted_w2_matches_pot(cost, N, K, d, seed):
    X, Y = sample_uniform(N, d, seed=seed), sample_uniform(K, d, seed=seed + 100)
    a, b = weights(N, seed), weights(K, seed + 1)
    value, info = w2(X, Y, a=a, b=b, cost=cost, log=True)
    assert info.exact
    assert value == pytest.approx(pot_w2(X, Y, a, b, cost), abs=1e-9)
    # one side weighted, the other uniform
    assert w2(X, Y, a=a, cost=cost) == pytest.approx(pot_w2(X, Y, a, np.full(K, 1 / K), cost), abs=1e-9)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_weighted_few_atoms_path_matches_pot(k):
    X = sample_uniform(400, 3, seed=k)
    atoms = sample_uniform(k, 3, seed=10 + k)
    a, b = weights(400, k), weights(k, 20 + k)
    value, info = w2(X, atoms, a=a, b=b, log=True)
    assert info.method == {1: "single-atom", 2: "atoms-sort"}.get(k, "atoms-simplex")
    assert value == pytest.approx(pot_w2(X, atoms, a, b), abs=1e-9)
    # the atoms given as N rows of a cloud with weights: the same measure, the same path
    labels = np.random.default_rng(k).integers(0, k, 400)
    labels[:k] = np.arange(k)
    Y, c = atoms[labels], weights(400, 30 + k)
    value, info = w2(X, Y, a=a, b=c, log=True)
    assert info.n_atoms == k
    assert value == pytest.approx(pot_w2(X, Y, a, c), abs=1e-9)


def test_weighted_sinkhorn_brackets_the_exact_value():
    X, Y = sample_uniform(80, 3, seed=5), sample_uniform(60, 3, seed=6)
    a, b = weights(80, 5), weights(60, 6)
    exact = pot_w2(X, Y, a, b)
    value, info = w2(X, Y, a=a, b=b, method="sinkhorn", log=True)
    lo, hi = info.bounds
    assert info.converged and lo - 1e-9 <= exact <= hi + 1e-9 and abs(value - exact) <= info.error
    # the weights matter here: the unweighted value lies outside the weighted bracket
    assert not lo <= w2(X, Y) <= hi


@pytest.mark.parametrize("reg", [1e-300, 1e-12, 1e-7])
def test_sinkhorn_refuses_a_reg_it_cannot_certify(reg):
    """reg = 1e-300 returned a value 0.05 below the exact W2 with info.error = 1e-12 (a NaN upper
    bound hidden by max): a reg below REG_MIN_REL x the largest cost is refused, naming it."""
    X, Y = sample_uniform(50, 3, seed=0), sample_uniform(50, 3, seed=1)
    with pytest.raises(ValueError, match=r"^reg = .* below 1e-06 x the largest cost .* method='exact'"):
        w2(X, Y, method="sinkhorn", reg=reg)


@pytest.mark.parametrize("reg", [4.1e-6, 1e-5, 1e-3])
def test_sinkhorn_error_covers_the_exact_value_down_to_the_smallest_reg(reg):
    X, Y = sample_uniform(50, 3, seed=0), sample_uniform(50, 3, seed=1)
    exact = pot_w2(X, Y, np.full(50, 1 / 50), np.full(50, 1 / 50))
    value, info = w2(X, Y, method="sinkhorn", reg=reg, log=True)
    lo, hi = info.bounds
    assert lo - 1e-9 <= exact <= hi + 1e-9 and abs(value - exact) <= info.error


def test_an_overflowed_sinkhorn_bracket_is_an_infinite_error(monkeypatch):
    """Past the refusal (REG_MIN_REL set to 0), the NaN upper bound of an overflowed plan is an
    infinite error, never the round-off alone."""
    import warnings

    from attnflow.transport import solvers

    monkeypatch.setattr(solvers, "REG_MIN_REL", 0.0)
    X, Y = sample_uniform(50, 3, seed=0), sample_uniform(50, 3, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the overflow itself
        value, info = w2(X, Y, method="sinkhorn", reg=1e-300, log=True)
    assert info.error == math.inf and info.bounds[1] == math.inf and not info.converged
    assert abs(value - w2(X, Y)) <= info.error


def test_weighted_subsample_draws_by_weight():
    # 9/10 of the mass near the north pole, 1/10 near the south; the target is a cap at the north
    rng = np.random.default_rng(7)
    north = sample_uniform(300, 3, seed=8) * [0.1, 0.1, 1.0] + [0, 0, 3.0]
    north /= np.linalg.norm(north, axis=1, keepdims=True)
    X = np.concatenate([north, -north])
    a = prob(np.r_[np.full(300, 9.0), np.full(300, 1.0)])
    Y = north[rng.permutation(300)[:200]]
    exact = pot_w2(X, Y, a, np.full(200, 1 / 200))
    value, info = w2(X, Y, a=a, method="subsample", n_sub=200, repeats=6, seed=1, log=True)
    assert "by weight" in info.notes
    assert info.ci[0] - info.noise_floor <= exact <= info.ci[1] + info.noise_floor
    assert abs(value - exact) < 0.25 * abs(w2(X, Y) - exact)  # far from the unweighted W2


def test_w2_to_target_with_weights():
    """W2(rho_t, Pi_# rho_0) with rho_0 weighted: the target carries the tokens' weights."""
    X0 = sample_uniform(300, 3, seed=9)
    u = np.array([0.0, 0.6, 0.8])
    PiX0 = np.where((X0 @ u > 0)[:, None], u, -u)
    X_t = np.stack([X0, sample_uniform(300, 3, seed=10)])
    w = weights(300, 9)
    series = w2_to_target(X_t, PiX0, weights=w)
    assert series.exact and all(i.method == "atoms-sort" for i in series.infos)
    np.testing.assert_allclose(series.values, [pot_w2(X, PiX0, w, w) for X in X_t], atol=1e-9)
    # b given explicitly, for a target that is not row-matched with the tokens
    Y, c = sample_uniform(40, 3, seed=11), weights(40, 11)
    general = w2_to_target(X_t, Y, b=c, weights=w)
    np.testing.assert_allclose(general.values, [pot_w2(X, Y, w, c) for X in X_t], atol=1e-9)
    with pytest.raises(ValueError, match="pass b"):
        w2_to_target(X_t, Y, weights=w)
    # a batch of M = 2 clouds with their own weights (M, N), saved at T = 3 times: (T, M, N, d)
    W = np.stack([w, np.full(300, 1 / 300)])
    X_tm = np.stack([X_t, X_t[::-1], X_t])
    batch = w2_to_target(X_tm, Y, b=c, weights=W)
    assert batch.values.shape == (3, 2)
    np.testing.assert_allclose(
        batch.values[0], [pot_w2(X_t[0], Y, w, c), pot_w2(X_t[1], Y, W[1], c)], atol=1e-9
    )


# -------------------------------------------------------------------------------- properties

sizes = st.integers(min_value=1, max_value=10)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


@settings(max_examples=40, deadline=None)
@given(n=sizes, m=sizes, seed=seeds, cost=st.sampled_from(["chordal", "geodesic"]))
def test_uniform_weights_are_the_unweighted_measure(n, m, seed, cost):
    X, Y = sample_uniform(n, 3, seed=seed), sample_uniform(m, 3, seed=seed + 1)
    plain = w2(X, Y, cost=cost)
    assert w2(X, Y, a=np.full(n, 1 / n), b=np.full(m, 1 / m), cost=cost) == pytest.approx(plain, abs=1e-12)
    # and the equal-weight problem through POT's simplex (a not exactly uniform in float) agrees
    assert pot_w2(X, Y, np.full(n, 1 / n), np.full(m, 1 / m), cost) == pytest.approx(plain, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 10), m=sizes, seed=seeds, cost=st.sampled_from(["chordal", "geodesic"]))
def test_splitting_an_atom_leaves_w2_unchanged(n, m, seed, cost):
    """Duplicating a point and halving its weight is the same measure."""
    X, Y = sample_uniform(n, 3, seed=seed), sample_uniform(m, 3, seed=seed + 1)
    a, b = weights(n, seed), weights(m, seed + 1)
    i = seed % n
    X2 = np.concatenate([X, X[i : i + 1]])
    a2 = np.concatenate([a, [a[i] / 2]])
    a2[i] /= 2
    assert w2(X2, Y, a=a2, b=b, cost=cost) == pytest.approx(w2(X, Y, a=a, b=b, cost=cost), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=sizes, m=sizes, seed=seeds, cost=st.sampled_from(["chordal", "geodesic"]))
def test_weighted_w2_is_symmetric_and_zero_on_itself(n, m, seed, cost):
    X, Y = sample_uniform(n, 3, seed=seed), sample_uniform(m, 3, seed=seed + 1)
    a, b = weights(n, seed), weights(m, seed + 1)
    assert w2(X, Y, a=a, b=b, cost=cost) == pytest.approx(w2(Y, X, a=b, b=a, cost=cost), abs=1e-9)
    assert w2(X, X, a=a, b=a, cost=cost) <= 1e-7


# --------------------------------------------------------------------------------- bad weights


def test_weights_are_validated():
    X, Y = sample_uniform(10, 3, seed=0), sample_uniform(10, 3, seed=1)
    w = np.full(10, 0.1)
    for bad, match in [
        (np.r_[np.nan, w[1:]], "NaN"),
        (np.r_[-0.1, 0.2, w[2:]], r"a must be > 0"),
        (np.r_[0.0, np.full(9, 1 / 9)], r"a must be > 0"),
        (3 * w, r"a must sum to 1"),
        (np.full(9, 1 / 9), r"shape \(10,\)"),
        (np.full((2, 10), 0.1), r"shape \(10,\)"),
        ("heavy", "real array"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            w2(X, Y, a=bad)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        w2_to_target(X[None], Y, b=w, weights=2 * w)
    with pytest.raises(ValueError, match="weights must be > 0"):
        w2_to_target(X[None], Y, weights=np.r_[0.0, np.full(9, 1 / 9)])
