"""Noise: the Stratonovich SDE dx = v dt + sigma P_x^perp o dW on the sphere (docs/math.md, "Noise").

With V = 0 the tokens do Brownian motion on S^{d-1}: E <x(t), x(0)> = exp(-(d-1) sigma^2 t / 2).
The step-then-project scheme with step h has E[x_{n+1} | x_n] = c(h) x_n exactly, c(h) =
E (1 + sigma^2 h chi^2_{d-1})^{-1/2}, so E <x_n, x_0> = c(h)^n: its bias against the closed form
is sigma^4 t h (d-1)(d+2)/4 e^{-(d-1) sigma^2 t/2} + O(h^2), weak order 1, measured here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import attnflow as af
from attnflow.flow import Dynamics

D = 3
M, N = 1000, 20  # 20000 independent tokens (V = 0: no interaction)


def brownian(sigma: float) -> Dynamics:
    return Dynamics(af.Attention(np.eye(D), np.eye(D), np.zeros((D, D)), 1.0), noise=sigma)


def exact(sigma: float, t: float) -> float:
    return math.exp(-(D - 1) * sigma**2 * t / 2)


def scheme(sigma: float, h: float, n: int) -> float:
    """E <x_n, x_0> of the scheme: c(h)^n."""
    pdf = stats.chi2(D - 1).pdf
    c, _ = integrate.quad(lambda x: pdf(x) / math.sqrt(1 + sigma**2 * h * x), 0, np.inf, epsabs=1e-14)
    return c**n


def mean_overlap(sigma: float, t: float, h: float, seed: int = 0) -> tuple[float, float]:
    """Monte Carlo E <x(t), x(0)> over M N tokens and its standard error."""
    X0 = np.stack([af.sample_uniform(N, D, seed=s) for s in range(M)])
    tr = af.simulate(X0, brownian(sigma), [0.0, t], method="euler", dt=h, seed=seed, kernel="sdpa")
    c = np.sum(tr.x[-1] * X0, axis=-1).ravel()
    return float(c.mean()), float(c.std(ddof=1) / math.sqrt(c.size))


def test_brownian_motion_on_the_sphere_matches_the_closed_form():
    sigma, t, h = 0.5, 1.0, 0.01
    mean, se = mean_overlap(sigma, t, h)
    assert abs(mean - exact(sigma, t)) < 4 * se + 2e-3  # 2e-3 > the scheme's bias, 1.2e-3
    assert abs(mean - scheme(sigma, h, round(t / h))) < 4 * se


def test_the_scheme_has_weak_order_one():
    """The Monte Carlo means at h = 0.2, 0.1, 0.05 are the scheme's own expectation c(h)^n, and
    their bias against exp(-(d-1) sigma^2 t/2) is a h + O(h^2) with a the predicted sigma^4 t
    (d-1)(d+2)/4 e^{-(d-1) sigma^2 t/2}; the exact bias of the scheme has local order -> 1."""
    sigma, t = 1.0, 1.0
    predicted = sigma**4 * t * (D - 1) * (D + 2) / 4 * exact(sigma, t)
    hs = np.array([0.2, 0.1, 0.05])
    biases = []
    for h in hs:
        mean, se = mean_overlap(sigma, t, h, seed=1)
        assert abs(mean - scheme(sigma, h, round(t / h))) < 4 * se
        biases.append(mean - exact(sigma, t))
    a, _ = np.linalg.lstsq(np.vstack([hs, hs**2]).T, biases, rcond=None)[0]
    assert a == pytest.approx(predicted, rel=0.25)
    fine = np.array([0.01, 0.005, 0.0025])
    b = np.array([scheme(sigma, h, round(t / h)) - exact(sigma, t) for h in fine])
    orders = np.diff(np.log(b)) / np.diff(np.log(fine))
    assert np.all(np.abs(orders - 1) < 0.05) and b[-1] / fine[-1] == pytest.approx(predicted, rel=0.02)


def test_a_seed_gives_the_same_path_and_another_seed_another():
    X0 = af.sample_uniform(30, D, seed=1)
    dyn = Dynamics(af.worked_example(5.0), noise=0.3, mask="causal")
    a = af.simulate(X0, dyn, [0, 1], method="rk4", dt=0.05, seed=7)
    b = af.simulate(X0, dyn, [0, 1], method="rk4", dt=0.05, seed=7)
    c = af.simulate(X0, dyn, [0, 1], method="rk4", dt=0.05, seed=8)
    assert np.array_equal(a.x, b.x) and not np.allclose(a.x, c.x)
    assert a.info["seed"] == 7 and a.info["noise"] == 0.3 and a.info["sde_orders"]["weak"] == 1.0
    np.testing.assert_allclose(np.linalg.norm(a.x, axis=-1), 1.0, atol=1e-14)


def test_noise_in_r_d_keeps_the_norm():
    """Pre-LN with V = 0: no drift, and Stratonovich tangent noise keeps |x| (= 1) exactly."""
    X0 = af.sample_uniform(50, D, seed=2)
    att = af.Attention(np.eye(D), np.eye(D), np.zeros((D, D)), 1.0)
    tr = af.simulate(X0, Dynamics(att, layer_norm="pre", noise=0.5), [0, 1], method="euler", dt=0.05)
    np.testing.assert_allclose(np.linalg.norm(tr.x, axis=-1), 1.0, atol=1e-14)
    assert np.abs(tr.x[-1] - X0).max() > 0.1


def test_noise_needs_a_fixed_step_method():
    X0 = af.sample_uniform(10, D, seed=1)
    with pytest.raises(ValueError, match=r"noise = 0\.1 needs a fixed-step method"):
        af.simulate(X0, brownian(0.1), [0, 1], method="adaptive")
    with pytest.raises(ValueError, match="seed must be an integer"):
        af.simulate(X0, brownian(0.1), [0, 1], method="euler", seed=-1)
