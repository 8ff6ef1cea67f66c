"""The error of a per-beta quantity: its parts add, each where it comes from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnflow.science.curves import band, crossing, locate_minimum
from attnflow.science.uncertainty import ERROR_PARTS, flatness, measured, time_step_change


def test_the_parts_of_an_error_add():
    record = {"value": 0.3, "error": 1e-4, "converged": True, "reason": "", "tol": 6e-3, "grid": 2e-5}
    q = measured(record, time_step=3e-6, flat=0.0, seeds=1e-5)
    assert q.error == pytest.approx(1e-4 + 3e-6 + 2e-5 + 1e-5)
    assert set(q.parts) == set(ERROR_PARTS) and q.usable and q.tol == 6e-3
    d = q.to_dict()
    assert d["error_parts"]["grid"] == 2e-5 and d["converged"] is True
    one_level = measured({**record, "error": math.nan})
    assert not math.isfinite(one_level.error) and not one_level.usable
    assert one_level.to_dict()["error"] is None


def test_time_step_changes_of_times_are_absolute_and_of_distances_relative():
    assert time_step_change("time", 5.0, 5.01, 12.0) == pytest.approx(0.01)
    assert time_step_change("distance", 0.2, 0.2002, 0.05) == pytest.approx(0.05e-3)
    assert math.isnan(time_step_change("time", math.nan, 5.0, 5.0))


def test_flatness_is_the_band_where_the_curve_cannot_be_told_from_its_minimum():
    t = np.arange(0.0, 10.0 + 1e-9, 0.1)
    k = 0.05
    w = 0.3 + k * (t - 4.03) ** 2
    m = locate_minimum(t, w)
    # w <= m (1 + e/m) for |t - t*| <= sqrt(e / k): 0.01 for e = 5e-6 (inside one step), 1 for e = 0.05
    assert flatness(t, w, m, 5e-6) == pytest.approx(math.sqrt(5e-6 / k), rel=1e-3)
    assert flatness(t, w, m, 0.05) == pytest.approx(1.0, abs=0.01)
    assert flatness(t, w, m, 0.0) == 0.0
    b = band(t, w, m, 0.05 / 0.3)
    assert b.lo == pytest.approx(3.03, abs=0.01) and b.hi == pytest.approx(5.03, abs=0.01)


def test_crossings_between_saved_times_and_curves_that_never_cross():
    t = np.arange(0.0, 5.0 + 1e-9, 0.25)
    up = crossing(t, np.sinh(t), 2.0, "up")
    assert abs(up.t - math.asinh(2.0)) < 0.01 and up.bias == 0.25  # the saved step
    assert math.isnan(crossing(t, np.sinh(t), 1e3, "up").t)
    already = crossing(t, np.sinh(t) + 5.0, 2.0, "up")
    assert already.t == 0.0 and already.bias == 0.0
    mass = np.clip(np.sin(t), 0.0, None)  # rises above 1/2, then falls below it at 5 pi / 6
    down = crossing(t, mass, 0.5, "down", start=int(np.flatnonzero(mass >= 0.5)[0]))
    assert abs(down.t - 5 * math.pi / 6) <= down.bias + 1e-3
