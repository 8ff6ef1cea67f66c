"""The truncated kernel's geometry kept across moves (truncated_moves.py): the kept geometry gives the
field of a new one on moved states (to the kernel's bound), a move beyond the margin, other
weights or another state make a new one, and a kept geometry that no check guarded would be wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import reuse
from attnflow.kernels.fused import velocity_fused
from attnflow.kernels.truncated import _geometry as truncated_geometry
from attnflow.kernels.truncated import _moves as truncated_moves
from attnflow.kernels.truncated import velocity_truncated
from helpers import one_torch_thread, random_attention  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def fresh():
    truncated_moves.clear()
    reuse.clear()
    yield
    truncated_moves.clear()


def moved(X: torch.Tensor, eps: float, seed: int) -> torch.Tensor:
    """X with every token moved by about eps (Gaussian steps, renormalised)."""
    g = torch.Generator().manual_seed(seed)
    Y = X + eps * torch.randn(X.shape, generator=g, dtype=X.dtype)
    return Y / Y.norm(dim=-1, keepdim=True)


def clouds(N: int) -> torch.Tensor:
    vmf = af.sample_vmf(N, np.array([0.0, 0.6, 0.8]), 200.0, seed=2)
    vmf[::2] *= -1
    return torch.as_tensor(np.stack([af.sample_uniform(N, 3, seed=1), vmf]))


@pytest.mark.parametrize("beta", [100.0, 1e3, 1e4])
@pytest.mark.parametrize("weighted", [False, True])
def test_kept_geometry_gives_the_field_of_a_new_one(beta, weighted):
    """Two clouds with their own betas, moved by 1e-3 three times: the geometry made at the start is
    kept every time, and the field matches a new geometry's and the dense field to 1e-12 ||V||."""
    att = random_attention(3, beta, seed=3)
    X = clouds(1500)
    w = torch.as_tensor(np.random.default_rng(4).uniform(0.5, 2.0, (2, 1500))) if weighted else None
    w = None if w is None else w / w.sum(dim=1, keepdim=True)
    betas = torch.tensor([beta, beta / 3])
    stats: dict = {}
    velocity_truncated(X, att, betas=betas, weights=w, margin=0.25, stats=stats)
    tol = 1e-12 * np.linalg.norm(att.V, 2)
    for k in range(3):
        X = moved(X, 1e-3, seed=k)
        kept: dict = {}
        v = velocity_truncated(X, att, betas=betas, weights=w, margin=0.25, stats=kept)
        assert kept["geometry_kept"] == 2 and kept["geometry_built"] == 0
        new = velocity_truncated(X, att, betas=betas, weights=w, margin=None)
        assert float((v - new).abs().max()) < tol
        assert float((v - velocity_fused(X, att, betas=betas, weights=w)).abs().max()) < tol


def test_a_move_beyond_the_margin_makes_a_new_geometry():
    att = af.worked_example(1e3)
    X = torch.as_tensor(af.sample_uniform(2000, 3, seed=5))
    velocity_truncated(X, att)
    for Y, kept in (
        (moved(X, 1e-6, seed=1), True),  # far inside the margin
        (torch.cat([-X[:1], X[1:]]), False),  # one token to its antipode: delta = 2
        (moved(X, 0.05, seed=2), False),  # every token by about 0.09: beyond the margin
        (torch.as_tensor(af.sample_uniform(2000, 3, seed=6)), False),  # another state
    ):
        truncated_moves.clear()
        velocity_truncated(X.clone(), att)  # the geometry of X
        stats: dict = {}
        v = velocity_truncated(Y, att, stats=stats)
        assert stats["geometry_kept" if kept else "geometry_built"] == 1
        assert float((v - velocity_fused(Y, att)).abs().max()) < 1e-12 * np.linalg.norm(att.V, 2)


def test_other_weights_make_a_new_geometry():
    att = af.worked_example(1e3)
    X = torch.as_tensor(af.sample_uniform(1000, 3, seed=7))
    w = torch.full((1000,), 1e-3, dtype=torch.float64)
    velocity_truncated(X, att, weights=w)
    w2 = w.clone()
    w2[0] *= 1e-6  # a light key: its widening L_i changes
    w2 /= w2.sum()
    stats: dict = {}
    velocity_truncated(X.clone(), att, weights=w2, stats=stats)
    assert stats["geometry_built"] == 1


def test_an_unchecked_kept_geometry_would_be_wrong(monkeypatch):
    """The check is what keeps the field right: a geometry kept for a cloud rotated by 0.3 rad
    without it misses keys (a wrong field); with it a new one is made (the right field)."""
    att = af.worked_example(1e3)
    X = torch.as_tensor(af.sample_uniform(2000, 3, seed=8))
    c, s = np.cos(0.3), np.sin(0.3)
    R = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    Y = X @ R.T
    ref = velocity_fused(Y, att)
    velocity_truncated(X, att)
    stats: dict = {}
    good = velocity_truncated(Y, att, stats=stats)
    assert stats["geometry_built"] == 1 and float((good - ref).abs().max()) < 1e-12
    truncated_moves.clear()
    velocity_truncated(X.clone(), att)
    monkeypatch.setattr(truncated_geometry, "holds", lambda *a: True)
    bad = velocity_truncated(Y.clone(), att)
    assert float((bad - ref).abs().max()) > 1e-3


def test_simulate_keeps_geometries_and_the_trajectory(monkeypatch):
    """RK4 with the truncated kernel: fewer geometries than evaluations, the same states as with a
    new geometry at every evaluation (to 1e-12)."""
    att = af.worked_example(300.0)
    vmf = af.sample_vmf(600, np.array([0.0, 0.6, 0.8]), 100.0, seed=9)
    built = [0]
    make = truncated_geometry._geometry

    def counting(*a, **k):
        built[0] += 1
        return make(*a, **k)

    monkeypatch.setattr(truncated_geometry, "_geometry", counting)
    runs = {}
    for margin in (None, truncated_moves.MARGIN):
        monkeypatch.setitem(velocity_truncated.__kwdefaults__, "margin", margin)
        built[0] = 0
        runs[margin] = (simulate_x(vmf, att), built[0])
    assert runs[None][1] == 4 * 5  # RK4: 4 evaluations a step, 5 steps, a geometry each
    assert runs[truncated_moves.MARGIN][1] < 10
    np.testing.assert_allclose(runs[truncated_moves.MARGIN][0], runs[None][0], rtol=0, atol=1e-12)


def simulate_x(X0: np.ndarray, att: af.Attention) -> np.ndarray:
    tr = af.simulate(X0, att, [0.0, 0.05], dt=0.01, kernel="truncated", threads=1)
    return np.asarray(tr.x[-1])


def test_margin_must_be_a_number_at_least_zero():
    att = af.worked_example(1e3)
    X = torch.as_tensor(af.sample_uniform(100, 3, seed=10))
    for bad in (-0.1, float("inf"), "wide"):
        with pytest.raises(ValueError, match="margin"):
            velocity_truncated(X, att, margin=bad)
