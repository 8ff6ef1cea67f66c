"""The branches of the metastable time on arrays (attnflow.science.metastability) and the departure
of a mass curve read between saved times (attnflow.science.curves.departure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnflow.science.curves import FORMED, departure
from attnflow.science.metastability import (
    SIGMA_FLOOR,
    crossover,
    fit_log_n,
    heuristic_branch,
    mean_field_departure,
    measured_branch,
    on_finite_n_branch,
)

# ------------------------------------------------------------------------------ departure


def test_departure_of_a_quadratic_bump_is_exact_between_saved_times():
    """m(t) = 1 - (t - 5)^2 / 8 forms a cluster (reaches FORMED) and falls below 1/2 at t = 7, between
    the saved times 6.9 and 7.2: the quadratic through three saved points is the curve itself."""
    t = np.arange(0.0, 10.0, 0.3)
    m = 1.0 - 0.125 * (t - 5.0) ** 2
    c = departure(t, m, 0.5)
    assert c.t == pytest.approx(7.0, abs=1e-12)
    assert t[c.index - 1] < 7.0 < t[c.index]
    assert c.bias == pytest.approx(0.3)  # read off the samples: known to the saved step


def test_departure_error_bounds_the_save_grids_bias():
    """A Gaussian bump crosses 1/2 at 5 + sqrt(8 ln 2): the quadratic's error is below the grid
    error it reports (the saved step), for several save grids."""
    exact = 5.0 + math.sqrt(8.0 * math.log(2.0))
    for h in (0.05, 0.1, 0.2, 0.4):
        t = np.arange(0.0, 12.0, h)
        c = departure(t, np.exp(-((t - 5.0) ** 2) / 8.0), 0.5)
        assert abs(c.t - exact) <= c.bias
        assert abs(c.t - exact) < 2e-3 * (h / 0.1) ** 3 + 1e-12


def test_departure_needs_a_metastable_phase_and_a_fall():
    t = np.linspace(0.0, 10.0, 101)
    never = departure(t, 0.4 * np.ones_like(t), 0.5)
    stays = departure(t, np.minimum(t / 5.0, 0.9), 0.5)
    assert math.isnan(never.t) and never.index == -1
    assert math.isnan(stays.t) and stays.index == -1
    # falls below, comes back, falls again: the first fall counts
    m = np.where((t > 2) & (t < 4), 0.8, 0.2) + np.where((t > 6) & (t < 8), 0.6, 0.0)
    assert 3.9 < departure(t, m, 0.5).t < 4.0
    # a mass that hovers around 1/2 never formed a cluster (FORMED): no metastable phase, no departure
    hovers = np.where((t > 2) & (t < 4), 0.6, 0.2)
    assert FORMED > 0.6 and math.isnan(departure(t, hovers, 0.5).t)
    assert 3.9 < departure(t, hovers, 0.5, formed=0.5).t < 4.0


def test_concentration_departure_time_is_the_same_reading():
    from attnflow.experiments.concentration.levels import departure_time

    t = np.arange(0.0, 10.0, 0.3)
    m = 0.9 - 0.1 * (t - 5.0) ** 2
    assert departure_time(t, m) == departure(t, m)


# ------------------------------------------------------------------------ log N fits


def test_fit_log_n_recovers_an_exact_line():
    Ns = 2 ** np.arange(8, 17)
    fit = fit_log_n(Ns, 1.42 * np.log(Ns) + 0.5)
    assert fit.a == pytest.approx(1.42, abs=1e-12) and fit.b == pytest.approx(0.5, abs=1e-10)
    assert fit.rms < 1e-10 and fit.n == 9 and fit.Ns == tuple(int(n) for n in Ns)
    assert fit.at(1024) == pytest.approx(1.42 * math.log(1024) + 0.5)


def test_fit_log_n_against_scipy_curve_fit():
    """Weighted fit with scatter larger than the sigmas: the values and errors of scipy's curve_fit
    (absolute_sigma=False, which scales by the residuals as the fit does when chi2 > 1)."""
    from scipy.optimize import curve_fit

    rng = np.random.default_rng(3)
    Ns = 2 ** np.arange(8, 17)
    sigma = rng.uniform(0.02, 0.2, Ns.size)
    t = 1.4 * np.log(Ns) + 0.3 + rng.normal(0.0, 3 * sigma)
    fit = fit_log_n(Ns, t, sigma)
    assert fit.chi2 > 1
    p, cov = curve_fit(lambda x, a, b: a * x + b, np.log(Ns), t, sigma=sigma, absolute_sigma=False)
    assert fit.a == pytest.approx(p[0], rel=1e-7) and fit.b == pytest.approx(p[1], rel=1e-7)
    assert fit.a_err == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-6)
    assert fit.b_err == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-6)
    # about the weighted mean of log N the intercept is uncorrelated with the slope
    w = 1 / sigma**2
    assert fit.centre == pytest.approx(np.sum(w * np.log(Ns)) / np.sum(w))
    J = np.array([fit.centre, 1.0])
    assert fit.b_centre_err == pytest.approx(math.sqrt(J @ cov @ J), rel=1e-6)


def test_fit_log_n_floors_tiny_errors_and_refuses_one_n():
    Ns = np.array([256, 512, 1024])
    t = np.array([7.0, 8.1, 8.9])
    assert fit_log_n(Ns, t, [1e-9, 1e-9, 1e-9]) == fit_log_n(Ns, t, [SIGMA_FLOOR] * 3)
    with pytest.raises(ValueError, match="2 distinct"):
        fit_log_n([256, 256], [7.0, 7.1])
    with pytest.raises(ValueError, match="finite"):
        fit_log_n(Ns, [7.0, math.nan, 8.0])


# ------------------------------------------------------------------------------- crossover


def test_crossover_of_exact_branches():
    Ns = 2 ** np.arange(8, 13)
    fit = fit_log_n(Ns, 1.5 * np.log(Ns) - 1.0)
    c = crossover(fit, 20.0, 0.0)
    assert c.log_N_star == pytest.approx(14.0, abs=1e-9) and c.N_star == pytest.approx(math.exp(14.0))
    assert 0 < c.log_N_star_err < 0.05  # exact data: the errors are SIGMA_FLOOR's
    flat = fit_log_n(Ns, np.full(Ns.size, 3.0))
    assert (
        math.isnan(crossover(flat, 20.0, 0.0).N_star) and "does not grow" in crossover(flat, 20.0, 0.0).reason
    )
    assert "not known" in crossover(fit, math.nan, math.nan).reason


def test_crossover_error_matches_the_scatter_of_repeated_fits():
    """log N*'s propagated error against the spread of log N* over noisy data sets."""
    rng = np.random.default_rng(11)
    Ns = 2 ** np.arange(8, 17)
    sigma = np.full(Ns.size, 0.3)
    logs, errs = [], []
    for _ in range(400):
        t = 1.4 * np.log(Ns) + 0.5 + rng.normal(0.0, sigma)
        t_mf = 25.0 + rng.normal(0.0, 0.5)
        c = crossover(fit_log_n(Ns, t, sigma), t_mf, 0.5)
        logs.append(c.log_N_star)
        errs.append(c.log_N_star_err)
    assert np.mean(logs) == pytest.approx((25.0 - 0.5) / 1.4, abs=0.1)
    assert 0.85 < np.median(errs) / np.std(logs) < 1.35


# ------------------------------------------------------------------------------- mean field


def test_mean_field_departure_where_the_largest_n_agree():
    Ns = [256, 512, 1024, 2048]
    err = [0.01] * 4
    assert mean_field_departure(Ns, [5.70, 5.66, 5.65, 5.649], err, 0.05, 0.02) == pytest.approx(
        (5.649, math.hypot(0.001, 0.01))
    )
    assert mean_field_departure(Ns, [7.0, 8.0, 9.0, 10.0], err, 0.05, 0.02) is None
    # the two largest N with a departure decide (the last point has none)
    assert mean_field_departure(Ns, [7.0, 8.0, 8.05, math.nan], err, 0.05, 0.02)[0] == 8.05
    assert mean_field_departure(Ns, [math.nan, math.nan, 5.0, math.nan], err, 0.05, 0.02) is None


def test_on_finite_n_branch():
    t = np.array([5.0, 9.0, 11.4, 12.4, math.nan])
    assert on_finite_n_branch(t, 12.5, 1.0).tolist() == [True, True, True, False, False]
    assert on_finite_n_branch(t, math.inf, 1.0).tolist() == [True, True, True, True, False]


def test_heuristic_branch_fits_its_intercept():
    betas = np.array([17.8, 20.0, 25.0])
    b = heuristic_branch(0.666, betas, 0.666 * betas - 7.7, [0.01, 0.02, 0.01])
    assert b.intercept == pytest.approx(-7.7) and b.slope == 0.666 and b.rms < 1e-12
    assert b.at(100.0)[0] == pytest.approx(66.6 - 7.7)
    none = heuristic_branch(0.666, [], [], [])
    assert none.intercept == 0.0 and math.isnan(none.at(50.0)[1]) and "not measured" in none.source


def test_measured_branch_is_a_line_through_the_run():
    betas = [20.0, 30.0, 40.0]
    b = measured_branch(betas, [5.649, 12.560, 19.262], [0.006, 0.012, 0.012], 0.666, "a run")
    assert b.slope == pytest.approx(0.682, abs=0.005) and b.intercept == pytest.approx(-8.0, abs=0.2)
    value, error = b.at(30.0)
    assert value == pytest.approx(12.56, abs=0.1) and 0 < error < 0.2
    one = measured_branch([30.0], [12.56], [0.01], 0.666, "a run")
    assert one.slope == 0.666 and one.intercept == pytest.approx(12.56 - 19.98) and "a run" in one.source
