"""W2 solvers against POT and closed forms; diagnostics' invariants; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.measures.quadrature import fibonacci_sphere
from attnflow.measures.sampling import sample_uniform
from attnflow.science.metrics import (
    angle_to_subspace,
    coupling_bound,
    lyapunov,
    resolution_ratio,
    subspace_mass,
)
from attnflow.transport import atoms as _atoms
from attnflow.transport import solvers as _transport
from attnflow.transport import wasserstein
from attnflow.transport.wasserstein import find_atoms, w2, w2_to_target

ot = pytest.importorskip("ot")


def pot_w2(X, Y, a=None, b=None, cost="chordal"):
    a = np.full(len(X), 1 / len(X)) if a is None else np.asarray(a) / np.sum(a)
    b = np.full(len(Y), 1 / len(Y)) if b is None else np.asarray(b) / np.sum(b)
    G = np.clip(X @ Y.T, -1.0, 1.0)
    M = ot.dist(X, Y) if cost == "chordal" else np.arccos(G) ** 2
    return math.sqrt(ot.emd2(a, b, M, numItermax=10**7))


def prob(v):
    """Weights of a probability measure: v / sum(v)."""
    return np.asarray(v) / np.sum(v)


def random_cloud(n, d, seed):
    return sample_uniform(n, d, seed=seed)


# ------------------------------------------------------------------------------------ exact W2


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
@pytest.mark.parametrize(
    ("N", "K", "d", "weighted"), [(40, 40, 3, False), (50, 30, 3, True), (25, 25, 5, True)]
)
def test_exact_matches_pot(cost, N, K, d, weighted):
    rng = np.random.default_rng(N + K + d)
    X, Y = random_cloud(N, d, 1), random_cloud(K, d, 2)
    a = prob(rng.random(N)) if weighted else None
    b = prob(rng.random(K)) if weighted else None
    value, info = w2(X, Y, cost=cost, a=a, b=b, log=True)
    assert info.exact and info.error == 0.0
    assert value == pytest.approx(pot_w2(X, Y, a, b, cost), abs=1e-9)
    assert info.method == ("network-simplex" if weighted else "assignment")


def test_closed_form_single_atom_and_antipodes():
    X = random_cloud(500, 3, 3)
    u = np.array([0.0, 0.0, 1.0])
    # one atom: W2^2 = mean |x - u|^2 = 2 - 2 mean <x, u>
    assert w2(X, u[None, :]) == pytest.approx(math.sqrt(2 - 2 * np.mean(X @ u)), abs=1e-12)
    # a point mass to its antipode: chordal 2, geodesic pi
    assert w2(u[None], -u[None]) == pytest.approx(2.0)
    assert w2(u[None], -u[None], cost="geodesic") == pytest.approx(math.pi)


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
@pytest.mark.parametrize(("k", "b"), [(2, [0.5, 0.5]), (2, [0.13, 0.87]), (3, [0.2, 0.5, 0.3]), (3, None)])
def test_few_atoms_equals_full_problem(cost, k, b):
    X = random_cloud(301, 3, 4)  # odd N: the k = 2 sort splits one token
    atoms = random_cloud(k, 3, 5)
    a = prob(np.random.default_rng(6).random(301))
    for weights in (None, a):
        value, info = w2(X, atoms, cost=cost, a=weights, b=b, log=True)
        assert info.method == ("atoms-sort" if k == 2 else "atoms-simplex")
        assert value == pytest.approx(pot_w2(X, atoms, weights, b, cost), abs=1e-9)


def test_few_atoms_detected_in_repeated_rows_and_on_either_side():
    X = random_cloud(400, 3, 7)
    u = np.array([1.0, 0.0, 0.0])
    v = np.array([0.0, 0.6, 0.8])
    labels = np.random.default_rng(8).integers(0, 2, 400)
    Y = np.where(labels[:, None] == 0, u, v)
    Y[::2] = Y[::2] + 1e-13 * np.array([1.0, -1.0, 0.5])  # float noise as from a projection
    Y = Y / np.linalg.norm(Y, axis=1, keepdims=True)
    value, info = w2(X, Y, log=True)
    assert info.method == "atoms-sort" and info.n_atoms == 2 and info.error < 1e-12
    reference = pot_w2(X, Y)
    assert value == pytest.approx(reference, abs=1e-9)
    assert w2(Y, X) == pytest.approx(reference, abs=1e-9)  # atoms as the source are swapped over
    found = find_atoms(Y, np.full(400, 1 / 400))
    assert found is not None and found[1].sum() == pytest.approx(1.0)
    assert find_atoms(X, np.full(400, 1 / 400)) is None


def test_two_atom_target_at_a_million_tokens_is_exact_and_fast():
    import time

    X = random_cloud(10**6, 3, 9)
    u = np.array([0.0, 0.0, 1.0])
    b1 = np.mean(X @ u > 0)
    start = time.perf_counter()
    value = w2(X, np.array([u, -u]), b=[b1, 1 - b1])
    elapsed = time.perf_counter() - start
    # Pi_# rho_0: each token goes to the nearer pole, W2^2 = 2 - 2 mean |<x, u>|, here ~ 1 (|z| ~ U(0,1))
    assert value == pytest.approx(math.sqrt(2 - 2 * np.mean(np.abs(X @ u))), abs=1e-9)
    assert elapsed < 10.0


def test_exact_too_large_raises(monkeypatch):
    monkeypatch.setattr(wasserstein, "EXACT_MAX_PAIRS", 100)
    X, Y = random_cloud(20, 3, 1), random_cloud(20, 3, 2)
    with pytest.raises(ValueError, match=r"subsample.*sinkhorn"):
        w2(X, Y)
    with pytest.raises(ValueError, match="fallback"):
        w2_to_target(X[None], Y)


@pytest.mark.parametrize(("k", "cost"), [(3, "chordal"), (4, "geodesic"), (8, "chordal")])
def test_few_atoms_band_path_is_exact(monkeypatch, k, cost):
    # the large-N path for k >= 3 atoms (entropic potentials, simplex on a band, certificate),
    # forced at N = 3000 by lowering the size below which the whole problem goes to the simplex
    monkeypatch.setattr(_atoms, "ATOMS_EMD_MAX_N", 400)
    X = random_cloud(3000, 3, 40 + k)
    atoms = random_cloud(k, 3, k)
    b = prob(np.random.default_rng(k).random(k))
    a = prob(np.random.default_rng(1).random(3000))
    value, info = w2(X, atoms, a=a, b=b, cost=cost, log=True)
    assert info.method == "atoms-simplex" and info.exact
    assert value == pytest.approx(pot_w2(X, atoms, a, b, cost), abs=1e-9)
    monkeypatch.setattr(_atoms, "ATOMS_EMD_MAX_N", 0)  # no band allowed: refuse, never approximate
    with pytest.raises(RuntimeError, match="sinkhorn"):
        w2(X, atoms, a=a, b=b, cost=cost)


def test_certificate_rejects_a_crossed_plan():
    atoms = np.eye(3)
    X = np.array([[0.99, 0.1, 0.1], [0.1, 0.99, 0.1], [0.1, 0.1, 0.99]])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    CT = _transport.cost_matrix(X, atoms, "chordal").T
    good = [np.array([0]), np.array([1]), np.array([2])]
    crossed = [np.array([1]), np.array([0]), np.array([2])]  # tokens 0 and 1 swap atoms
    assert _atoms._cyclically_monotone(CT, good, tol=1e-12)
    assert not _atoms._cyclically_monotone(CT, crossed, tol=1e-12)


# ------------------------------------------------------------------------ approximate methods


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_sinkhorn_within_its_reported_error(cost):
    X, Y = random_cloud(120, 3, 10), random_cloud(90, 3, 11)
    a = prob(np.random.default_rng(12).random(120))
    exact = w2(X, Y, cost=cost, a=a)
    value, info = w2(X, Y, cost=cost, a=a, method="sinkhorn", log=True)
    assert not info.exact and info.reg > 0 and info.converged
    lo, hi = info.bounds
    assert lo - 1e-9 <= exact <= hi + 1e-9  # the bracket is rigorous
    assert abs(value - exact) <= info.error
    assert info.error < 0.2 * exact
    # a smaller reg tightens the bracket
    _, finer = w2(X, Y, cost=cost, a=a, method="sinkhorn", reg=info.reg / 4, log=True)
    assert finer.bounds[1] - finer.bounds[0] < hi - lo


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_sinkhorn_potentials_match_pot(cost):
    # independent reference: POT's log-domain Sinkhorn gives the same plan and entropic value
    X, Y = random_cloud(40, 3, 18), random_cloud(30, 3, 19)
    rng = np.random.default_rng(20)
    a, b = rng.random(40) + 0.1, rng.random(30) + 0.1
    a, b = a / a.sum(), b / b.sum()
    reg = 0.2
    for p, q, M, sym in [
        (a, b, _transport.cost_matrix(X, Y, cost), False),
        (a, a, _transport.cost_matrix(X, X, cost), True),
    ]:
        f, g, _, ok = _transport.sinkhorn_potentials(p, q, M, reg, 5000, 1e-12, symmetric=sym)
        G, log = ot.sinkhorn(p, q, M, reg, method="sinkhorn_log", numItermax=5000, stopThr=1e-13, log=True)
        assert ok
        P = np.exp((f[:, None] + g[None, :] - M) / reg) * p[:, None] * q[None, :]
        np.testing.assert_allclose(P, G, atol=1e-12)
        # entropic value <P, M> + reg KL(P | p x q) equals the dual value <p, f> + <q, g>
        value = np.sum(G * M) + reg * np.sum(G * np.log(G / np.outer(p, q)))
        assert p @ f + q @ g == pytest.approx(value, abs=1e-10)
        # POT's log-scalings are these potentials: f = reg (log_u - log p) up to a constant shift
        shift = reg * (log["log_u"] - np.log(p)) - f
        np.testing.assert_allclose(shift, shift[0], atol=1e-9)


def test_sinkhorn_divergence_vanishes_on_equal_clouds():
    X = random_cloud(60, 3, 13)
    value, info = w2(X, X, method="sinkhorn", log=True)
    assert value < 1e-6 and info.bounds[0] < 1e-6


def test_subsample_ci_contains_exact_value():
    X = random_cloud(600, 3, 14)
    Y = sample_uniform(600, 3, seed=15) @ np.diag([1.0, 1.0, 1.0])
    Y = np.abs(Y)  # the positive octant: far from X, so the subsampling bias is small
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    exact = w2(X, Y)
    value, info = w2(X, Y, method="subsample", n_sub=300, seed=3, repeats=8, log=True)
    assert info.n_sub == 300 and info.repeats == 8 and not info.exact
    assert info.ci[0] <= exact <= info.ci[1]
    assert w2(X, Y, method="subsample", n_sub=300, seed=3, repeats=8) == value  # seeded
    assert 0 < info.noise_floor < value


def test_subsample_noise_floor_flags_equal_laws():
    X, Y = random_cloud(2000, 3, 30), random_cloud(2000, 3, 31)
    value, info = w2(X, Y, method="subsample", n_sub=200, seed=0, log=True)
    # two samples of one law: the subsampled W2 is all bias, at the level of the noise floor
    assert w2(X, Y) < 0.5 * value
    assert info.noise_floor == pytest.approx(value, rel=0.3)


def test_subsample_with_weights_and_full_size_is_exact():
    X, Y = random_cloud(50, 3, 16), random_cloud(50, 3, 17)
    v, info = w2(X, Y, method="subsample", n_sub=50, log=True)
    assert v == pytest.approx(w2(X, Y), abs=1e-12) and info.error == pytest.approx(0.0, abs=1e-12)
    assert info.noise_floor == pytest.approx(0.0, abs=1e-12)
    a = prob(np.random.default_rng(1).random(50))
    v, info = w2(X, Y, a=a, method="subsample", n_sub=40, log=True)
    assert np.isfinite(v) and info.ci[0] <= v <= info.ci[1]


# -------------------------------------------------------------------------- metric properties

small = st.integers(min_value=1, max_value=12)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


@settings(max_examples=30, deadline=None)
@given(n=small, m=small, k=small, seed=seeds, cost=st.sampled_from(["chordal", "geodesic"]))
def test_w2_is_a_metric(n, m, k, seed, cost):
    X, Y, Z = random_cloud(n, 3, seed), random_cloud(m, 3, seed + 1), random_cloud(k, 3, seed + 2)
    xy, yx = w2(X, Y, cost=cost), w2(Y, X, cost=cost)
    assert xy == pytest.approx(yx, abs=1e-9)
    assert w2(X, X, cost=cost) <= 1e-7
    assert w2(X, Z, cost=cost) <= xy + w2(Y, Z, cost=cost) + 1e-9
    # invariant under a rotation of the whole problem and a relabelling of the tokens
    R = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))[0]
    perm = np.random.default_rng(seed).permutation(n)
    assert w2(X[perm] @ R.T, Y @ R.T, cost=cost) == pytest.approx(xy, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(min_value=1, max_value=30), T=st.integers(min_value=1, max_value=3), seed=seeds)
def test_coupling_bound_is_an_upper_bound(n, T, seed):
    X_t = sample_uniform(n, 3, seed=seed, M=T)
    P = random_cloud(n, 3, seed + 1)
    bounds = coupling_bound(X_t, P)
    assert bounds.shape == (T,)
    for X, bound in zip(X_t, bounds, strict=True):
        assert w2(X, P) <= bound + 1e-9
    geo = coupling_bound(X_t, P, cost="geodesic")
    assert np.all([w2(X, P, cost="geodesic") <= g + 1e-9 for X, g in zip(X_t, geo, strict=True)])


@settings(max_examples=40, deadline=None)
@given(
    seed=seeds,
    m=st.integers(min_value=1, max_value=3),
    e1=st.floats(min_value=1e-3, max_value=math.pi / 2),
    e2=st.floats(min_value=1e-3, max_value=math.pi / 2),
)
def test_subspace_mass_in_unit_interval_and_monotone(seed, m, e1, e2):
    X = sample_uniform(50, 4, seed=seed, M=2)
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((4, m)))[0]
    lo, hi = sorted((e1, e2))
    mass_lo, mass_hi = subspace_mass(X, basis, lo), subspace_mass(X, basis, hi)
    assert mass_lo.shape == (2,)
    assert np.all((mass_lo >= 0) & (mass_hi <= 1)) and np.all(mass_lo <= mass_hi)
    both = subspace_mass(X, basis, [lo, hi])
    np.testing.assert_array_equal(both, np.stack([mass_lo, mass_hi], axis=-1))
    np.testing.assert_array_equal(subspace_mass(X, basis, math.pi / 2), np.ones(2))


def test_float32_clouds_are_accepted_and_renormalised():
    X, Y = random_cloud(30, 3, 1), random_cloud(20, 3, 2)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    assert w2(X32, Y32) == pytest.approx(w2(X, Y), abs=1e-6)
    assert coupling_bound(X32[None], X32) == pytest.approx([0.0], abs=1e-7)
    with pytest.raises(ValueError, match="unit rows"):
        w2((1.01 * X).astype(np.float32), Y)


def test_subspace_mass_closed_form_on_s2():
    # uniform measure on S^2: the band |z| <= sin(eps) around the equator has mass sin(eps)
    X = fibonacci_sphere(20000)
    eps = 0.3
    assert subspace_mass(X, np.eye(3)[:, :2], eps) == pytest.approx(math.sin(eps), abs=1e-3)
    # the caps within eps of the z-axis (a line) have mass 1 - cos(eps)
    assert subspace_mass(X, np.array([0.0, 0.0, 1.0]), eps) == pytest.approx(1 - math.cos(eps), abs=1e-3)
    # angles from the equatorial plane are |asin z|, accurate near the plane
    z = np.array([[math.sqrt(1 - 1e-20), 0.0, 1e-10]])
    assert angle_to_subspace(z, np.eye(3)[:, :2])[0] == pytest.approx(1e-10, rel=1e-6)


def test_lyapunov_closed_form_and_batch():
    X = fibonacci_sphere(5000)
    P1 = np.diag([0.0, 0.0, 1.0])
    # integral |P^perp x|^2 = E[x^2 + y^2] = 2/3 on S^2
    assert lyapunov(X, P1) == pytest.approx(2 / 3, abs=1e-3)
    batch = np.stack([X, np.tile([0.0, 0.0, 1.0], (5000, 1))])
    np.testing.assert_allclose(lyapunov(batch, P1), [lyapunov(X, P1), 0.0], atol=1e-12)


def test_resolution_ratio():
    # d = 3: spacing sqrt(4 pi / N); ratio 1 at N = 4 pi beta (B = I: |B^T x| = 1)
    B = np.eye(3)
    assert resolution_ratio(int(4 * math.pi * 3000), 3, 3000.0, B=B) == pytest.approx(1.0, rel=1e-4)
    assert resolution_ratio(10, 3, math.inf, B=B) == math.inf
    assert resolution_ratio(40000, 3, 3000.0, B=B) < resolution_ratio(4000, 3, 3000.0, B=B)


def test_w2_to_target_over_times_and_fallback(monkeypatch):
    X_t = sample_uniform(200, 3, seed=20, M=3)
    u = np.array([0.0, 1.0, 0.0])
    target = np.where((X_t[0] @ u > 0)[:, None], u, -u)
    series = w2_to_target(X_t, target)
    assert series.values.shape == (3,) and series.exact
    assert all(i.method == "atoms-sort" for i in series.infos)
    np.testing.assert_allclose(series.values, [pot_w2(X, target) for X in X_t], atol=1e-9)
    assert series.to_dict()["infos"][0]["n_atoms"] == 2
    Y = random_cloud(150, 3, 21)
    general = w2_to_target(X_t[:2], Y)
    np.testing.assert_allclose(general.values, [pot_w2(X, Y) for X in X_t[:2]], atol=1e-9)
    monkeypatch.setattr(wasserstein, "EXACT_MAX_PAIRS", 100)
    approx = w2_to_target(X_t[:1], Y, fallback="subsample", n_sub=8, seed=1)
    assert not approx.exact and approx.infos[0].method == "subsample"


# --------------------------------------------------------------------------------- bad input


def test_bad_input_errors():
    X, Y = random_cloud(10, 3, 0), random_cloud(10, 3, 1)
    with pytest.raises(ValueError, match=r"d = 3.*d = 4"):
        w2(X, random_cloud(10, 4, 2))
    with pytest.raises(ValueError, match="empty"):
        w2(np.empty((0, 3)), Y)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        w2(bad, Y)
    with pytest.raises(ValueError, match="unit rows"):
        w2(2 * X, Y)
    with pytest.raises(ValueError, match="cost"):
        w2(X, Y, cost="euclidean")
    with pytest.raises(ValueError, match="method"):
        w2(X, Y, method="fast")
    with pytest.raises(ValueError, match="a must"):
        w2(X, Y, a=-np.ones(10))
    with pytest.raises(ValueError, match="shape"):
        w2(X, Y, b=np.ones(3))
    with pytest.raises(ValueError, match="reg"):
        w2(X, Y, method="sinkhorn", reg=-1.0)
    with pytest.raises(ValueError, match="repeats"):
        w2(X, Y, method="subsample", repeats=1)
    with pytest.raises(ValueError, match="fallback"):
        w2_to_target(X, Y, fallback="exact")
    for eps in (0.0, -0.1, 2.0, np.nan):
        with pytest.raises(ValueError, match="eps"):
            subspace_mass(X, np.eye(3)[:, :1], eps)
    with pytest.raises(ValueError, match="orthonormal"):
        subspace_mass(X, np.ones((3, 2)), 0.1)
    with pytest.raises(ValueError, match="basis"):
        subspace_mass(X, np.eye(4)[:, :1], 0.1)
    with pytest.raises(ValueError, match="projector"):
        lyapunov(X, np.ones((3, 3)))
    with pytest.raises(ValueError, match="PiX0"):
        coupling_bound(X, random_cloud(9, 3, 3))
    with pytest.raises(ValueError, match="beta"):
        resolution_ratio(100, 3, 0.0, B=np.eye(3))
    with pytest.raises(ValueError, match="X_t"):
        coupling_bound(np.ones(3), X)


def test_two_atom_path_has_no_cancellation_floor():
    """Tokens within 1e-9 of +-u: W2 to the two atoms is about 1e-9, not a rounding floor ~1e-7."""
    rng = np.random.default_rng(0)
    N, d = 50_000, 3
    u = np.array([1.0, 0.0, 0.0])
    signs = np.where(rng.random(N) < 0.5, 1.0, -1.0)
    target = signs[:, None] * u
    X = target + 1e-9 * rng.standard_normal((N, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    value = w2_to_target(X[None], target).values[0]
    bound = coupling_bound(X, target)
    assert 0 < value <= bound * (1 + 1e-6)
    assert value > 0.5 * bound  # each token is nearest its own atom: W2 equals the bound here


# ------------------------------------------------------------------------------ weighted measures


@settings(max_examples=30, deadline=None)
@given(n=st.integers(min_value=1, max_value=12), seed=seeds)
def test_weighted_diagnostics_equal_replicated_clouds(n, seed):
    """Integer weights c_i / sum c are the cloud with token i repeated c_i times."""
    rng = np.random.default_rng(seed)
    X_t = sample_uniform(n, 3, seed=seed, M=2)  # (T, N, d)
    P = random_cloud(n, 3, seed + 1)
    counts = rng.integers(1, 5, n)
    w = counts / counts.sum()
    rep = np.repeat(np.arange(n), counts)
    basis, P1 = np.eye(3)[:, :1], np.diag([1.0, 0.0, 0.0])
    np.testing.assert_allclose(
        coupling_bound(X_t, P, weights=w), coupling_bound(X_t[:, rep], P[rep]), atol=1e-12
    )
    np.testing.assert_allclose(lyapunov(X_t, P1, weights=w), lyapunov(X_t[:, rep], P1), atol=1e-12)
    eps = [0.3, 1.0]
    np.testing.assert_allclose(
        subspace_mass(X_t, basis, eps, weights=w), subspace_mass(X_t[:, rep], basis, eps), atol=1e-12
    )
    np.testing.assert_allclose(
        subspace_mass(X_t, basis, 0.5, weights=w), subspace_mass(X_t[:, rep], basis, 0.5), atol=1e-12
    )
    # the weighted coupling bound still bounds the weighted W2
    for X, bound in zip(X_t, coupling_bound(X_t, P, weights=w), strict=True):
        assert w2(X, P, a=w, b=w) <= bound + 1e-9


def test_weighted_diagnostics_batch_weights_and_errors():
    X_t = sample_uniform(20, 3, seed=1, M=8).reshape(2, 4, 20, 3)  # (T, M, N, d)
    W = np.random.default_rng(2).random((4, 20)) + 0.1
    W /= W.sum(axis=1, keepdims=True)
    P1 = np.diag([0.0, 0.0, 1.0])
    got = lyapunov(X_t, P1, weights=W)
    assert got.shape == (2, 4)
    want = [[lyapunov(X_t[t, m : m + 1], P1, weights=W[m])[0] for m in range(4)] for t in range(2)]
    np.testing.assert_allclose(got, want, atol=1e-14)
    uniform = np.full(20, 1 / 20)
    np.testing.assert_allclose(lyapunov(X_t, P1, weights=uniform), lyapunov(X_t, P1), atol=1e-14)
    with pytest.raises(ValueError, match="weights must sum to 1"):
        lyapunov(X_t, P1, weights=2 * W)
    with pytest.raises(ValueError, match="weights must have shape"):
        subspace_mass(X_t, np.eye(3)[:, :1], 0.1, weights=W[:3])
    with pytest.raises(ValueError, match="weights must be > 0"):
        coupling_bound(X_t, X_t[0, 0], weights=np.r_[0.0, np.full(19, 1 / 19)])


def test_resolution_ratio_uses_the_kernel_width():
    """concentration-converged's setting: worked example, N = 100,000 Fibonacci tokens, beta = 1000."""
    from attnflow.attention import worked_example
    from attnflow.measures.geometry import spacing

    att, N, beta = worked_example(1000.0), 100_000, 1000.0
    X = fibonacci_sphere(N)
    h = math.sqrt(4 * math.pi / N)
    assert spacing(N, 3) == pytest.approx(h)
    # s = max_i |B^T x_i|: the lattice has a node within 1e-2 of e_1, where |B^T x| = ||B|| = 3
    ratio = resolution_ratio(N, 3, beta, B=att.B, X=X)
    s = (ratio / h) ** 2 / beta
    assert 3.0 - 1e-4 < s <= 3.0
    assert ratio == pytest.approx(0.614, abs=5e-4)
    # ||B|| bounds s from above; the width beta^(-1/2) (s = 1: B = I) gives 0.354, sqrt(3) times smaller
    assert resolution_ratio(N, 3, beta, B=att.B) == pytest.approx(h * math.sqrt(3 * beta), rel=1e-12)
    assert resolution_ratio(N, 3, beta, B=np.eye(3)) == pytest.approx(0.3545, abs=1e-4)
    # a cloud near u_1 only sees |B^T u_1| = 2.134
    u1 = att.spectrum().top.basis[:, 0]
    near = np.tile(u1, (N, 1))
    assert resolution_ratio(N, 3, beta, B=att.B, X=near) == pytest.approx(
        h * math.sqrt(2.1344 * beta), rel=1e-4
    )
    with pytest.raises(ValueError, match=r"X must be the cloud of N = 10 tokens"):
        resolution_ratio(10, 3, beta, B=att.B, X=X)
    with pytest.raises(ValueError, match="B must be 3 x 3"):
        resolution_ratio(N, 3, beta, B=np.eye(2))
