"""Times located on the continuous solution (attnflow.science.curves.zoom_*, science.located), against
closed forms and against an independent integration (SciPy's solve_ivp with dense output)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnflow.science.curves import Located, departure, zoom_crossing, zoom_minimum
from attnflow.science.located import brackets, locate_times


def clock(state: float, t0: float, ts: np.ndarray) -> list[float]:
    """The trivial flow whose state is the time itself."""
    return [float(t) for t in ts]


def test_a_cluster_leaving_within_one_saved_step_is_located_within_its_error():
    """A mass that falls from 1 to 0 within 1e-4 around t_true, saved every 0.1: the samples read 1,
    1, 0 wherever t_true lies in its step, so any reading of them gives the same time (the old
    artefact); located on the solution, every t_true is found within the error it states, and the
    reading of the samples is within its own error (the saved step)."""
    t = np.arange(0.0, 2.0 + 1e-9, 0.1)
    readings = set()
    for t_true in (1.2137, 1.25, 1.2871, 1.2993):

        def mass(s: float, t_true=t_true) -> float:
            return 0.5 - 0.5 * math.tanh((s - t_true) / 1e-5)

        saved = np.array([mass(s) for s in t])
        grid = departure(t, saved, 0.5)
        readings.add(round(grid.t, 12))
        assert abs(grid.t - t_true) <= grid.bias == pytest.approx(0.1)
        loc = zoom_crossing(
            clock,
            lambda s, _t: 0.5 - mass(s),
            t[grid.index - 1],
            t[grid.index - 1],
            t[grid.index],
            grid.index,
            tol=1e-6,
        )
        assert abs(loc.t - t_true) <= loc.error <= 1e-6
        assert loc.index == grid.index and loc.evaluations > 0
    assert len(readings) == 1  # the samples cannot tell these four departures apart


def test_zoom_minimum_finds_a_smooth_minimum_and_its_value():
    t_true = 0.4371

    def f(s: float) -> float:
        return 0.25 + (s - t_true) ** 2 + 0.3 * (s - t_true) ** 3

    loc = zoom_minimum(clock, lambda s, _t: f(s), 0.3, 0.3, 0.5, 4, tol=1e-7)
    assert abs(loc.t - t_true) <= loc.error <= 1e-7
    assert 0.0 <= loc.value - 0.25 <= loc.value_error + 1e-15


def test_an_advance_that_cannot_reach_ends_the_zoom_with_the_bracket_it_has():
    def nowhere(state, t0, ts):
        raise LookupError

    loc = zoom_crossing(nowhere, lambda s, _t: 1.0, 0.0, None, 0.1, 1, tol=1e-9)
    assert (loc.t, loc.error, loc.evaluations) == (pytest.approx(0.05), pytest.approx(0.05), 0)


def test_brackets_are_the_first_zoom_of_each_located_time():
    """A bowl with a minimum at 5.03, a mass curve that departs at 7.21, a reference left at 2.04:
    `brackets` lists the points a dense save needs, and `locate_times` on states saved there (and
    nowhere else) finds each time within one zoom step."""
    t = np.arange(0.0, 10.0 + 1e-9, 0.1)

    def w2(s: float) -> float:
        return 0.3 + 0.01 * (s - 5.03) ** 2

    def mass(s: float) -> float:
        return 0.9 if 1.0 <= s < 7.21 else 0.1

    ref = np.array([w2(s) for s in t]) / np.where(t < 2.04, 1.0, 1.3)
    curves = np.array([w2(s) for s in t]), np.array([mass(s) for s in t])
    kwargs = dict(band=0.05, deviations={"t_dev": 0.1}, reference=ref, n=16)
    points = brackets(t, *curves, **kwargs)
    assert points.size > 0 and np.all(np.diff(points) > 0)
    table = {round(float(p), 12): float(p) for p in points}

    def lookup(state, t0, ts):
        keys = [round(float(s), 12) for s in ts]
        if not all(k in table for k in keys):
            raise LookupError
        return [table[k] for k in keys]

    got = locate_times(t, *curves, list(t), lookup, w2, mass, **kwargs)
    assert set(got) == {"t_star", "t_entry", "t_dev", "t_depart"}
    assert abs(got["t_star"].t - 5.03) <= got["t_star"].error <= 0.2 / 16 + 1e-12
    assert abs(got["t_depart"].t - 7.21) <= got["t_depart"].error <= 0.1 / 32 + 1e-12
    assert abs(got["t_dev"].t - 2.04) <= got["t_dev"].error
    assert all(isinstance(v, Located) for v in got.values())


def _attention_field(X: np.ndarray, w: np.ndarray, att) -> np.ndarray:
    """The weighted particle field P_x^perp sum_j w_j e^{beta x^T B y_j} V y_j / sum_j (...), dense NumPy."""
    s = att.beta * X @ att.B @ X.T + np.log(w)[None]
    p = np.exp(s - s.max(axis=1, keepdims=True))
    m = (p / p.sum(axis=1, keepdims=True)) @ (X @ att.V.T)
    return m - np.sum(m * X, axis=1, keepdims=True) * X


def test_located_times_agree_with_scipy_dense_output():
    """64 equispaced tokens of the d = 2 worked example at beta = 20: t*, the band entry and the
    departure located by attnflow's integrator (restarted from saved states) agree with SciPy's
    solve_ivp (DOP853, rtol 1e-12, dense output, brentq / bounded minimisation) within the located
    error plus the integrators' tolerance."""
    from scipy.integrate import solve_ivp
    from scipy.optimize import brentq, minimize_scalar

    import attnflow as af
    from attnflow.science.metrics import subspace_mass
    from attnflow.transport.wasserstein import w2_to_target

    att = af.worked_example(beta=20.0, d=2)
    N, eps = 64, 0.3  # (within 0.3 rad the clusters of 64 tokens form: 3/4 of the mass)
    theta = 2 * math.pi * (np.arange(N) + 0.5) / N
    X0 = np.stack([np.cos(theta), np.sin(theta)], -1)
    w = np.full(N, 1.0 / N)
    target = af.project(X0, att)
    u1 = att.spectrum().top.basis
    times = np.arange(0.0, 12.0 + 1e-9, 0.1)
    opts = dict(method="adaptive", options={"rtol": 1e-10, "atol": 1e-12}, kernel="sdpa")
    x = af.simulate(X0, att, times, weights=w, **opts).x

    def advance(state, t0, ts):
        return list(af.simulate(state, att, np.asarray(ts) - t0, weights=w, **opts).x)

    def w2_of(X):
        return float(w2_to_target(X[None], target).values[0])

    def mass_of(X):
        return float(subspace_mass(X, u1, eps))

    curves = np.array([w2_of(s) for s in x]), np.array([mass_of(s) for s in x])
    got = locate_times(times, *curves, list(x), advance, w2_of, mass_of, band=0.05, deviations={})
    assert {"t_star", "t_entry", "t_depart"} <= set(got)

    ref = solve_ivp(
        lambda _t, y: _attention_field(y.reshape(N, 2), w, att).ravel(),
        (0.0, 12.0),
        X0.ravel(),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        dense_output=True,
    )

    def at(t):
        X = ref.sol(t).reshape(N, 2)
        return X / np.linalg.norm(X, axis=1, keepdims=True)

    k = got["t_depart"].index
    # "below 1/2", strictly: the mass of 64 tokens sits at 32 / 64 for a while before it falls
    t_depart = brentq(lambda s: mass_of(at(s)) - 0.5 + 1e-9, times[k - 1], times[k], xtol=1e-12)
    k = got["t_star"].index
    t_star = minimize_scalar(
        lambda s: w2_of(at(s)),
        bounds=(times[k - 1], times[k + 1]),
        method="bounded",
        options={"xatol": 1e-10},
    ).x
    least = w2_of(at(t_star))
    k = got["t_entry"].index
    t_entry = brentq(lambda s: w2_of(at(s)) - 1.05 * least, times[k - 1], times[k], xtol=1e-12)
    slack = 1e-6  # the two integrators' own tolerance, in time
    assert abs(got["t_depart"].t - t_depart) <= got["t_depart"].error + slack
    assert abs(got["t_entry"].t - t_entry) <= got["t_entry"].error + slack
    assert abs(got["t_star"].value - least) <= got["t_star"].value_error + 1e-9
    # the minimum of W2 is flat: its time is known to the bracket, and to sqrt(value tolerance)
    assert abs(got["t_star"].t - t_star) <= got["t_star"].error + 1e-3
