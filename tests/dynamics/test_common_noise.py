"""Common noise: one Brownian motion on so(d) shared by every token of a cloud, dx_i = v_i dt +
sigma o dW x_i (docs/math.md, "Common noise"). With V = 0 it turns the whole cloud (every <x_i, x_j>
kept), and each token alone is Brownian motion on the sphere: E <x(t), x(0)> = e^{-(d-1) sigma^2 t/2}."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics


def still(d: int, sigma: float, kind: str = "common", **kw) -> Dynamics:
    return Dynamics(
        af.Attention(np.eye(d), np.eye(d), np.zeros((d, d)), 1.0), noise=sigma, noise_kind=kind, **kw
    )


@pytest.mark.parametrize(("d", "layer_norm"), [(2, "post"), (3, "post"), (5, "post"), (3, "pre")])
def test_common_noise_without_drift_turns_the_whole_cloud(d, layer_norm):
    X0 = np.stack([af.sample_uniform(50, d, seed=s) for s in range(4)])
    tr = af.simulate(X0, still(d, 1.0, layer_norm=layer_norm), [0.0, 0.5, 1.0], method="rk4", dt=0.01, seed=3)
    gram0 = X0 @ X0.transpose(0, 2, 1)
    for X in tr.x[1:]:
        assert np.max(np.abs(X @ X.transpose(0, 2, 1) - gram0)) < 1e-10
    assert np.max(np.abs(tr.x[-1] - X0)) > 0.1  # it did move


def test_one_token_under_common_noise_is_brownian_motion_on_the_sphere():
    """E <x(t), x(0)> over 4000 clouds (the clouds are the independent samples: the tokens of one cloud
    share their noise), within 4 standard errors of the closed form; the scheme's bias is about
    sigma^4 t h / 12 = 1e-3 of it at d = 3 (one rotation step is E R = 1 - s + 5 s^2 / 12 + O(s^3),
    s = sigma^2 h, against e^{-s})."""
    d, sigma, t = 3, 1.0, 1.0
    X0 = np.stack([af.sample_uniform(5, d, seed=s) for s in range(4000)])
    tr = af.simulate(X0, still(d, sigma), [0.0, t], method="euler", dt=0.01, seed=7, kernel="sdpa")
    c = np.sum(tr.x[-1] * X0, axis=-1).mean(axis=-1)  # per cloud
    mean, se = float(c.mean()), float(c.std(ddof=1) / math.sqrt(c.size))
    assert abs(mean - math.exp(-(d - 1) * sigma**2 * t / 2)) < 4 * se


def test_common_noise_is_seeded_and_independent_noise_is_not_a_rotation():
    X0 = af.sample_uniform(30, 3, seed=0)
    runs = [af.simulate(X0, still(3, 1.0, kind), [0.0, 1.0], dt=0.05, seed=s).x[-1]
            for kind, s in (("common", 1), ("common", 1), ("common", 2), ("independent", 1))]  # fmt: skip
    assert np.array_equal(runs[0], runs[1]) and not np.allclose(runs[0], runs[2])
    assert np.max(np.abs(runs[3] @ runs[3].T - X0 @ X0.T)) > 0.1


def test_noise_kind_is_checked():
    with pytest.raises(ValueError, match="noise_kind"):
        still(3, 1.0, "shared")
    assert "common noise" in still(3, 0.5).describe()
