import math

import numpy as np
import pytest
from scipy import special

from attnflow.dynamics.meanfield.patch import Grid, Patch
from attnflow.dynamics.meanfield.tail import SIGMA_EXACT, arc_family

C = (-math.pi / 4, 3 * math.pi / 4)  # two separatrices, pi apart


def quadrature(h, du, depth=-80.0):
    """rho_0 uniform on nodes of the two arcs between the centres C, every label down to `depth`
    in log-offset, plus the closed-form sum of the labels below (at the centres)."""
    fam = arc_family(math.pi, h, du)
    last = fam.first_below(depth)
    idx = np.arange(last)
    sig, ds = fam.sigma(idx), fam.dsigma(idx)
    th, w = [], []
    for c in C:
        for s in (1, -1):
            th.append(c + s * np.exp(sig) if s > 0 else c + math.pi + s * np.exp(sig) - math.pi)
            w.append(np.exp(sig) * ds)
    rest = math.exp(float(fam.sigma(last))) * du / (1 - math.exp(-du))
    th.append(np.array(C))
    w.append(np.full(2, 2 * rest))
    th, w = np.concatenate(th), np.concatenate(w)
    return fam, th, w / w.sum(), w.sum()


@pytest.mark.parametrize(("h", "du"), [(0.05, 0.1), (0.2, 0.5)])
def test_label_family_is_a_spectral_quadrature(h, du):
    fam, th, w, total = quadrature(h, du)
    assert abs(total - 2 * math.pi) < 1e-12  # the midpoint rule in u integrates d theta exactly
    assert abs(w @ np.cos(th) ** 2 - 0.5) < 1e-13
    assert abs(w @ np.exp(np.cos(th - 0.3)) - special.i0(1.0)) < 1e-13
    # the stored labels solve u(x_i) = -(i + 1/2); below SIGMA_EXACT they are arithmetic
    assert np.all(np.diff(fam.sig) < 0) and fam.sig[-1] >= SIGMA_EXACT
    deep = np.arange(fam.n_stored, fam.n_stored + 5)
    np.testing.assert_allclose(np.diff(fam.sigma(deep)), -du, rtol=1e-12)
    assert fam.first_below(-1000.0) == math.floor((fam.a + 1000.0) / du - 0.5) + 1
    assert fam.sigma(fam.first_below(-1000.0)) < -1000.0 <= fam.sigma(fam.first_below(-1000.0) - 1)


def test_patch_keys_carry_the_patch_mass_and_join_the_nodes():
    fam = arc_family(math.pi, 0.05, 0.1)
    grid = Grid.of(17)
    patch = Patch.start(0.3, 0.05, {-1: fam, 1: fam}, lambda t: np.zeros(np.shape(t)), grid)
    pos, lw = patch.keys(grid, 1e-6)
    # the patch holds the labels below offset 0.05 on each side, with the same midpoint weights
    inner = np.exp(fam.sig) < 0.05
    want = 2 * np.sum(np.exp(fam.sig[inner]) * fam.dsig[inner]) + 2 * math.exp(
        float(fam.sigma(fam.n_stored))
    ) * 0.1 / (1 - math.exp(-0.1))
    assert abs(np.exp(lw).sum() - want) < 1e-15
    assert patch.lo < pos.min() and pos.max() < patch.hi
    assert abs(pos[-1] - 0.3) < 1e-6  # the one node for the labels below the floor sits at the centre


def test_patch_under_a_pure_stretch():
    """The step map X = c + e^L (x - c) (an exact linear repelling point): the log-density drops by
    L, labels leave at the width with weights density x offset x dsigma, and the mass is kept."""
    fam = arc_family(math.pi, 0.05, 0.1)
    grid = Grid.of(17)
    logf = lambda t: np.log(1.0 + 0.3 * np.sin(np.asarray(t)))  # noqa: E731
    patch = Patch.start(0.3, 0.05, {-1: fam, 1: fam}, logf, grid)
    before = np.logaddexp.reduce(patch.keys(grid, 1e-9)[1])
    ell0 = float(patch.log_density(grid, np.array([0.3]))[0])
    emitted = []
    for _ in range(20):
        X = 0.3 + math.exp(0.05) * (patch.points(grid) - 0.3)
        emitted.append(patch.advance(grid, X, 0.3, 0.05))
    assert abs(float(patch.log_density(grid, np.array([0.3]))[0]) - (ell0 - 1.0)) < 1e-12
    assert abs(patch.stretch[1] - 1.0) < 1e-9 and abs(patch.stretch[-1] - 1.0) < 1e-9
    lw_out = np.concatenate([e[1] for e in emitted])
    after = np.logaddexp(np.logaddexp.reduce(patch.keys(grid, 1e-9)[1]), np.logaddexp.reduce(lw_out))
    assert abs(math.exp(after - before) - 1.0) < 1e-6  # the midpoint rule's boundary term, du^2 / 24 at most
    pos = np.concatenate([e[0] for e in emitted])
    assert np.all(np.abs(pos - 0.3) >= 0.05 * (1 - 1e-9)) and np.all(
        np.abs(pos - 0.3) < 0.05 * math.exp(0.05 + 0.1)
    )


def test_patch_shrink_and_dissolve_keep_mass():
    fam = arc_family(math.pi, 0.05, 0.1)
    grid = Grid.of(17)
    patch = Patch.start(0.3, 0.05, {-1: fam, 1: fam}, lambda t: np.zeros(np.shape(t)), grid)
    before = np.logaddexp.reduce(patch.keys(grid, 1e-9)[1])
    pos, lw = patch.shrink(grid, 0.01)
    assert (
        np.all(np.abs(pos - 0.3) >= 0.01 * (1 - 1e-12))
        and patch.hi - patch.lo < 0.02 * math.exp(0.05) + 1e-12
    )
    kept = np.logaddexp.reduce(patch.keys(grid, 1e-9)[1])
    assert abs(math.exp(np.logaddexp(kept, np.logaddexp.reduce(lw)) - before) - 1.0) < 1e-12
    _, lw2 = patch.dissolve(grid, 1e-9)
    assert not patch.alive and patch.keys(grid, 1e-9)[0].size == 0
    assert abs(math.exp(np.logaddexp.reduce(lw2) - kept) - 1.0) < 1e-12
