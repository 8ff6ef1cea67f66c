"""Each layer norm through simulate: its defining invariant, or its stated evolution of the norm
r = |x| (docs/math.md, "Layer normalisation")."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics


@pytest.fixture(scope="module")
def att():
    return af.worked_example(5.0)


@pytest.mark.parametrize("layer_norm", ["post", "ngpt"])
def test_sphere_schemes_keep_unit_norms(att, layer_norm):
    X0 = af.sample_uniform(40, 3, seed=1)
    tr = af.simulate(
        X0, Dynamics(att, layer_norm=layer_norm, mask="causal"), [0, 1, 3], method="rk4", dt=0.05
    )
    np.testing.assert_allclose(np.linalg.norm(tr.x, axis=-1), 1.0, atol=1e-14)


@pytest.mark.parametrize(("layer_norm", "speed"), [("pre", 2.0), ("peri", 1.0)])
def test_a_lone_token_grows_linearly(layer_norm, speed):
    """One token, Q = K = I, V = 2 I: pre-LN dx/dt = V theta = 2 theta, so r = 1 + 2 t; peri-LN
    dx/dt = V theta / |V theta| = theta, so r = 1 + t; the direction stays."""
    att = af.Attention(np.eye(3), np.eye(3), 2 * np.eye(3), 4.0)
    x0 = af.sample_uniform(1, 3, seed=2)
    t = np.array([0.0, 0.5, 2.0])
    tr = af.simulate(x0, Dynamics(att, layer_norm=layer_norm), t, method="rk4", dt=0.1)
    np.testing.assert_allclose(tr.x[:, 0], (1 + speed * t)[:, None] * x0[0], rtol=1e-13)


@pytest.mark.parametrize("layer_norm", ["pre", "peri"])
def test_the_norm_evolves_as_stated(att, layer_norm):
    """d r_i/dt = <theta_i, F_i>, F the field (pre: m; peri: m / |m|): the central difference of r over
    a fine trajectory matches it to O(h^2); peri-LN moves r by at most t (|F| = 1)."""
    X0 = af.sample_uniform(30, 3, seed=3)
    dyn = Dynamics(att, layer_norm=layer_norm)
    h = 1e-4
    t = np.array([0.5 - h, 0.5, 0.5 + h, 2.0])
    tr = af.simulate(X0, dyn, t, method="rk4", dt=0.01)
    r = np.linalg.norm(tr.x, axis=-1)
    theta = tr.x[1] / r[1][:, None]
    drdt = np.sum(theta * af.velocity(tr.x[1], dyn), axis=-1)
    np.testing.assert_allclose((r[2] - r[0]) / (2 * h), drdt, atol=1e-7)
    if layer_norm == "peri":
        assert np.all(np.abs(r[3] - 1.0) <= 2.0 + 1e-12)
    assert np.ptp(r[3]) > 0.05  # the radii do change (speed regulation)


def test_ngpt_alpha_is_a_change_of_time(att):
    """dtheta/dt = alpha P^perp m / |m|: alpha = 2 at time t is alpha = 1 at time 2 t."""
    X0 = af.sample_uniform(30, 3, seed=4)
    fast = af.simulate(X0, Dynamics(att, layer_norm="ngpt", alpha=2.0), [0, 1], method="rk4", dt=0.01)
    slow = af.simulate(X0, Dynamics(att, layer_norm="ngpt"), [0, 2], method="rk4", dt=0.02)
    np.testing.assert_allclose(fast.x[-1], slow.x[-1], atol=1e-12)


def test_ngpt_moves_every_token_at_most_alpha(att):
    X0 = af.sample_uniform(60, 3, seed=5)
    dyn = Dynamics(att, layer_norm="ngpt", alpha=0.7)
    speeds = np.linalg.norm(af.velocity(X0, dyn), axis=-1)
    assert speeds.max() <= 0.7 + 1e-14 and speeds.min() > 0


def test_pre_ln_with_the_adaptive_method(att):
    """R^d states with the adaptive integrator and its dense output (no renormalisation)."""
    X0 = af.sample_uniform(30, 3, seed=6)
    dyn = Dynamics(att, layer_norm="pre")
    a = af.simulate(X0, dyn, [0.3, 1.0], method="adaptive", options={"rtol": 1e-10, "atol": 1e-12})
    b = af.simulate(X0, dyn, [0.3, 1.0], method="rk4", dt=1e-3)
    np.testing.assert_allclose(a.x, b.x, atol=1e-8)
    assert np.linalg.norm(a.x[-1], axis=-1).max() > 1.1
