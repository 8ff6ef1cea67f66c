"""The interaction energy E_beta(rho) = (1 / 2 beta) int int exp(beta x^T B y) drho drho (docs/math.md,
"The interaction energy"): closed forms, the log domain at large beta, and its monotonicity along
the gradient flows it drives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ive

import attnflow as af
from attnflow.flow import Dynamics
from attnflow.science import energy
from attnflow.science.energy import interaction_energy


def identity(d: int, beta: float) -> af.Attention:
    return af.Attention(np.eye(d), np.eye(d), np.eye(d), beta)


def test_uniform_circle_and_one_atom_have_their_closed_forms():
    """N equispaced tokens on S^1 integrate e^{beta cos} to rounding: E = I_0(beta) / (2 beta); a
    collapsed cloud has E = e^beta / (2 beta), in the log domain at beta = 1e5 too."""
    for beta in (0.5, 10.0, 300.0):
        X = af.circle_nodes(512)
        expected = math.log(ive(0, beta)) + beta - math.log(2 * beta)
        assert interaction_energy(X, identity(2, beta), log=True) == pytest.approx(expected, rel=1e-12)
    X = np.tile([0.6, 0.8, 0.0], (7, 1))
    assert interaction_energy(X, identity(3, 1e5), log=True) == pytest.approx(1e5 - math.log(2e5), rel=1e-14)
    assert interaction_energy(X, identity(3, 2.0)) == pytest.approx(math.exp(2.0) / 4.0, rel=1e-14)


def test_weighted_clouds_match_the_double_sum(monkeypatch):
    rng = np.random.default_rng(0)
    Q, K = rng.normal(size=(2, 3, 3))
    att = af.Attention(Q, K, np.eye(3), 1.7)
    X = np.stack([af.sample_uniform(40, 3, seed=s) for s in range(3)])
    w = rng.uniform(0.5, 1.5, size=(3, 40))
    w /= w.sum(axis=1, keepdims=True)
    direct = [np.sum(np.outer(w[c], w[c]) * np.exp(1.7 * X[c] @ att.B @ X[c].T)) / 3.4 for c in range(3)]
    assert np.allclose(interaction_energy(X, att, w), direct, rtol=1e-13)
    monkeypatch.setattr(energy, "PAIR_ELEMENTS", 100)  # clouds one by one, rows in blocks of 2
    assert np.allclose(interaction_energy(X, att, w), direct, rtol=1e-13)


def test_log_weights_keep_masses_below_float64s_range():
    """A mass e^-800 (zero as a float64 weight) next to 63 equal ones: E is theirs alone, to
    rounding, and the log-weights may carry any normalisation."""
    X = af.circle_nodes(64)
    logw = np.zeros(64)
    logw[5] = -800.0
    att = identity(2, 3.0)
    rest = interaction_energy(np.delete(X, 5, axis=0), att, log=True)
    assert interaction_energy(X, att, log=True, log_weights=logw + 7.0) == pytest.approx(rest, rel=1e-14)
    with pytest.raises(ValueError, match="not both"):
        interaction_energy(X, att, np.full(64, 1 / 64), log_weights=logw)


def spd_head(beta: float) -> af.Attention:
    """Q = K (so B = Q^T Q, symmetric positive definite) and V = B: a gradient flow of E_beta."""
    Q = np.random.default_rng(3).normal(size=(3, 3)) / math.sqrt(3)
    return af.Attention(Q, Q, Q.T @ Q, beta)


@pytest.mark.parametrize(
    "model",
    [
        identity(3, 4.0),
        Dynamics(identity(3, 4.0), normalization="usa"),
        spd_head(6.0),
        Dynamics(spd_head(6.0), normalization="usa", usa_time="rescaled"),
    ],
)
def test_energy_never_decreases_along_a_gradient_flow(model):
    X0 = af.sample_uniform(64, 3, seed=1)
    times = np.linspace(0, 15, 151)
    tr = af.simulate(X0, model, times, method="adaptive", options={"rtol": 1e-10, "atol": 1e-12})
    logE = interaction_energy(tr.x, model, log=True)
    assert np.min(np.diff(logE)) > -1e-9
    assert logE[-1] - logE[0] > 0.5  # it climbed


def test_with_the_value_reversed_the_energy_falls():
    """V = -I runs the same flow backward in the energy: the test above can fail."""
    model = af.Attention(np.eye(3), np.eye(3), -np.eye(3), 4.0)
    tr = af.simulate(af.sample_uniform(64, 3, seed=1), model, np.linspace(0, 2, 21), method="rk4", dt=0.01)
    assert np.max(np.diff(interaction_energy(tr.x, model, log=True))) < 0


def test_models_without_one_head_or_finite_beta_are_refused():
    with pytest.raises(ValueError, match="one head"):
        interaction_energy(af.sample_uniform(5, 3, seed=0), Dynamics([identity(3, 1.0), spd_head(1.0)]))
    with pytest.raises(ValueError, match="finite beta"):
        interaction_energy(af.sample_uniform(5, 3, seed=0), identity(3, math.inf))
