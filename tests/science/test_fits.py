"""Fits recover planted parameters from noisy synthetic curves; t*, terminal time; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.science.bound import bound_minimum, fit_theorem_bound, theorem_bound
from attnflow.science.fits import (
    fit_decay_rate,
    fit_min_w2,
    fit_t_star,
    t_star,
    temperature_scale,
    terminal_time,
)

BETAS = np.array([10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 1e4])


def test_temperature_scale():
    assert temperature_scale(1.0) == pytest.approx(math.sqrt(math.log(2.0)))
    assert temperature_scale(math.inf) == 0.0
    np.testing.assert_allclose(temperature_scale(BETAS), np.sqrt(np.log1p(BETAS) / BETAS))


def test_t_star_smooth_curve():
    t = np.linspace(0, 10, 201)
    res = t_star(t, theorem_bound(t, 100.0, C1=0.5, c=1.0))
    t_true, v_true = bound_minimum(100.0, 0.5, 1.0)
    assert abs(res.t_star - t_true) <= 0.05 + 1e-12
    assert res.w2_min == pytest.approx(v_true, rel=1e-3)
    assert res.t_lo <= t_true <= res.t_hi and res.n_segments == 1 and not res.at_boundary
    assert res.to_dict()["t_star"] == res.t_star


@pytest.mark.parametrize("seed", range(5))
def test_t_star_plateau_contains_true_minimiser_of_oscillating_curve(seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 12, 241)
    t_true = 5.0 + rng.uniform(-0.5, 0.5)
    # a shallow well with fast oscillations and noise: the argmin jumps between ripples
    smooth = 0.1 + 0.01 * (t - t_true) ** 2
    w = smooth * (1 + 0.02 * np.sin(9 * t + rng.uniform(0, 6))) + 1e-4 * rng.standard_normal(t.size)
    res = t_star(t, w, rel_tol=0.05)
    assert res.t_lo <= t_true <= res.t_hi
    assert abs(res.t_mid - t_true) <= res.uncertainty
    assert res.uncertainty < 3.0


def test_t_star_reports_pieces_and_boundary():
    t = np.arange(6.0)
    res = t_star(t, [1.0, 0.5, 2.0, 0.51, 3.0, 4.0])
    assert res.n_segments == 2 and (res.t_lo, res.t_hi) == (1.0, 3.0) and res.t_star == 1.0
    edge = t_star(t, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5])
    assert edge.at_boundary and "outside" in edge.notes


def test_fit_t_star_recovers_slope():
    rng = np.random.default_rng(1)
    a, b = 0.7, 0.45
    ts = a + b * np.log(BETAS) + 0.02 * rng.standard_normal(BETAS.size)
    fit = fit_t_star(BETAS, ts)
    assert fit.label == "fitted"
    assert abs(fit.b - b) < 3 * fit.b_err + 1e-3 and fit.b_err < 0.02
    assert abs(fit.a - a) < 3 * fit.a_err + 1e-3
    exact = fit_t_star(BETAS, a + b * np.log(BETAS), sigma=np.full(BETAS.size, 0.1))
    assert exact.b == pytest.approx(b, abs=1e-12) and exact.r2 == pytest.approx(1.0)


def test_fit_min_w2_recovers_power():
    rng = np.random.default_rng(2)
    C, p = 1.7, 0.6
    y = C * temperature_scale(BETAS) ** p * np.exp(0.01 * rng.standard_normal(BETAS.size))
    fit = fit_min_w2(BETAS, y)
    assert abs(fit.p - p) < 3 * fit.p_err + 1e-3 and fit.p_err < 0.02
    assert abs(fit.C - C) < 3 * fit.C_err + 1e-3
    assert fit.to_dict()["label"] == "fitted"


def test_fit_decay_rate_on_tail():
    rng = np.random.default_rng(3)
    t = np.linspace(0, 20, 101)
    # fast transient then rate 0.8 decay; the transient is outside the last half
    w = 2.0 * np.exp(-0.8 * t) + 3.0 * np.exp(-5 * t)
    w *= np.exp(0.01 * rng.standard_normal(t.size))
    fit = fit_decay_rate(t, w, tail=0.5)
    assert abs(fit.rate - 0.8) < 3 * fit.rate_err + 1e-3 and fit.rate_err < 0.01
    assert fit.prefactor == pytest.approx(2.0, rel=0.05) and fit.t_lo == pytest.approx(10.0)
    window = fit_decay_rate(t, w, tail=(5.0, 15.0))
    assert window.t_lo == pytest.approx(5.0) and window.t_hi == pytest.approx(15.0)
    assert abs(window.rate - 0.8) < 0.02


def test_fit_theorem_bound_recovers_planted_constants():
    rng = np.random.default_rng(4)
    t = np.linspace(0, 12, 61)
    betas = np.array([100.0, 1000.0, 1e4])
    C1, c, K1, K2 = 0.4, 1.2, 0.8, 1.5
    W = np.stack([theorem_bound(t, b, C1, c, K1, K2) for b in betas])
    W *= np.exp(0.01 * rng.standard_normal(W.shape))
    fit = fit_theorem_bound(t, W, betas)
    assert fit.label == "fitted" and fit.converged
    for name, true in [("C1", C1), ("c", c), ("K1", K1), ("K2", K2)]:
        value, err = getattr(fit, name), fit.errors[name]
        assert abs(value - true) < 4 * err + 1e-3 * true, name
        assert err < 0.1 * true, name
    assert fit.rms_log_residual < 0.02
    single = fit_theorem_bound(t, W[1], 1000.0)
    assert single.C1 == pytest.approx(C1, rel=0.1) and single.c == pytest.approx(c, rel=0.1)


def test_bound_minimum_closed_form():
    t = np.linspace(0, 20, 20001)
    for beta in (10.0, 1e3, 1e6):
        t_min, value = bound_minimum(beta, 0.5, 1.5, 2.0, 0.7)
        curve = theorem_bound(t, beta, 0.5, 1.5, 2.0, 0.7)
        assert value == pytest.approx(curve.min(), rel=1e-6)
        assert t_min == pytest.approx(t[np.argmin(curve)], abs=2e-3)
    # t_min grows like log(beta) / (2 (C1 + c)) up to the slowly varying log log term
    t1, _ = bound_minimum(1e4, 0.5, 1.5)
    t2, _ = bound_minimum(1e8, 0.5, 1.5)
    assert (t2 - t1) == pytest.approx(math.log(1e4) / 4, rel=0.1)
    assert theorem_bound([0.0, 1.0], math.inf, 1.0, 2.0)[1] == pytest.approx(math.exp(-2.0))


def test_terminal_time():
    t = np.linspace(0, 10, 11)
    mass = np.clip(0.1 * t, 0, 1)
    res = terminal_time(t, mass, threshold=0.45)
    assert res.t == pytest.approx(4.5) and res.index == 5
    never = terminal_time(t, 0.3 * np.ones(11))
    assert math.isnan(never.t) and "below" in never.reason and never.index is None
    assert terminal_time(t, np.ones(11)).t == 0.0
    assert terminal_time(t, mass).to_dict()["threshold"] == 0.5


@settings(max_examples=40, deadline=None)
@given(
    slope=st.floats(min_value=0.01, max_value=1.0),
    start=st.floats(min_value=0.0, max_value=5.0),
    thr=st.floats(min_value=0.05, max_value=0.95),
)
def test_terminal_time_inverts_a_linear_ramp(slope, start, thr):
    t = np.linspace(0, 200, 401)
    mass = np.clip(slope * (t - start), 0, 1)
    res = terminal_time(t, mass, threshold=thr)
    # exact while both bracketing samples lie on the ramp, within a grid step when one is clipped
    on_ramp = t[res.index - 1] >= start and slope * (t[res.index] - start) <= 1
    tol = 1e-9 if on_ramp else t[1] - t[0]
    assert res.t == pytest.approx(start + thr / slope, abs=tol)
    assert t[res.index - 1] <= res.t <= t[res.index]


def test_bad_input():
    t = np.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="w2"):
        t_star(t, [1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        t_star(t, [1.0, np.nan, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="rel_tol"):
        t_star(t, np.ones(5), rel_tol=-1)
    with pytest.raises(ValueError, match="non-decreasing"):
        t_star(t[::-1], np.ones(5))
    with pytest.raises(ValueError, match="betas"):
        fit_t_star([0.0, 10.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="distinct"):
        fit_t_star([10.0, 10.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="min_w2"):
        fit_min_w2([10.0, 100.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="tail"):
        fit_decay_rate(t, np.ones(5), tail=0.0)
    with pytest.raises(ValueError, match="need >= 3"):
        fit_decay_rate(t, np.ones(5), tail=(0.0, 0.3))
    with pytest.raises(ValueError, match="shape"):
        fit_theorem_bound(t, np.ones((2, 5)), 10.0)
    with pytest.raises(ValueError, match="beta"):
        theorem_bound(t, -1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="threshold"):
        terminal_time(t, np.ones(5), threshold=0.0)
    with pytest.raises(ValueError, match="mass"):
        terminal_time(t, 2 * np.ones(5))
