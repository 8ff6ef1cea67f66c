"""The claims table: fits over converged betas only, verdicts that can go either way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnflow.science.claims import claims_table, verdict_counts
from attnflow.science.fits import temperature_scale


def q(value, converged=True, error=0.01, reason=""):
    return {"value": value, "error": error, "converged": converged, "reason": reason}


def record(beta, t_star, min_w2, status="converged", t_conv=True, w_conv=True, t_depart=math.nan):
    return {
        "status": status,
        "t_star": q(t_star, t_conv, reason="" if t_conv else "the minimum lies at the end of the window"),
        "t_entry": q(t_star - 0.5),
        "t_dev": q(0.5 * t_star),
        "min_w2": q(min_w2, w_conv, error=1e-3),
        "t_depart": q(t_depart, not math.isnan(t_depart)),
        "w2_initial": 0.85,
        "mass_V_final": 0.9,
    }


BETAS = [10.0, 30.0, 100.0, 300.0, 1000.0]


def good_table(slope=1.5, p=1.0, **extra):
    return {b: record(b, 12.0 + slope * math.log(b), 0.8 * temperature_scale(b) ** p, **extra) for b in BETAS}


def row(rows, start):
    return next(r for r in rows if r["claim"].startswith(start))


def test_consistent_data_give_consistent_rows_with_the_fitted_numbers():
    rows = claims_table(good_table(), dt=0.1)
    t, m = row(rows, "t*(beta)"), row(rows, "min_t W2")
    assert t["verdict"] == "consistent" and t["measured"]["b"] == pytest.approx(1.5, rel=1e-6)
    assert m["verdict"] == "consistent" and m["measured"]["p"] == pytest.approx(1.0, rel=1e-6)
    assert t["betas"] == BETAS and not t["left_out"]
    assert row(rows, "before t*")["verdict"] == "consistent"


def test_contradicting_data_give_inconsistent_rows():
    rows = claims_table(good_table(slope=-1.0, p=-0.5), dt=0.1)
    assert row(rows, "t*(beta)")["verdict"] == "inconsistent"
    assert row(rows, "min_t W2")["verdict"] == "inconsistent"


def test_growth_faster_than_log_beta_is_inconsistent():
    """t* growing linearly in beta also has b > 0 in a log fit: the curvature test catches it."""
    table = good_table()
    for b, rec in table.items():
        rec["t_star"]["value"] = 1.0 + 0.05 * b
    t = row(claims_table(table, dt=0.1), "t*(beta)")
    assert t["measured"]["b"] > 0 and t["verdict"] == "inconsistent"
    assert "faster" in t["note"]
    assert t["measured"]["slope_in_beta"] == pytest.approx(0.05)
    # the deviation time of the same table grows like log beta: its own row stays consistent
    assert row(claims_table(table, dt=0.1), "the time the finite")["verdict"] == "consistent"


def test_flat_data_within_errors_are_not_resolved():
    table = good_table(slope=0.0)
    for rec in table.values():
        rec["t_star"]["error"] = 2.0
    assert row(claims_table(table, dt=0.1), "t*(beta)")["verdict"] == "not resolved"


def test_unconverged_and_edge_betas_are_left_out_of_the_fits_with_reasons():
    table = good_table()
    table[1000.0]["status"] = "resolved"
    table[300.0]["t_star"] = q(99.0, False, reason="the minimum lies at the end of the converged window")
    # poison the left-out points: if they were fitted, the slope would change a lot
    table[1000.0]["t_star"]["value"] = -50.0
    table[1000.0]["min_w2"]["value"] = 5.0
    rows = claims_table(table, dt=0.1)
    t = row(rows, "t*(beta)")
    assert t["betas"] == [10.0, 30.0, 100.0]
    assert t["measured"]["b"] == pytest.approx(1.5, rel=1e-6)
    assert "status resolved" in t["left_out"]["1000"]
    assert "end of the converged window" in t["left_out"]["300"]
    assert row(rows, "min_t W2")["betas"] == [10.0, 30.0, 100.0, 300.0]


def test_too_few_converged_betas_decide_nothing():
    table = good_table()
    for b in BETAS[2:]:
        table[b]["status"] = "under-resolved"
    rows = claims_table(table, dt=0.1)
    assert row(rows, "t*(beta)")["verdict"] == "not resolved"
    assert "2 converged" in row(rows, "t*(beta)")["note"]
    counts = verdict_counts(rows)
    assert sum(counts.values()) == len(rows) == 6


def test_entry_time_stands_in_for_t_star_when_only_it_converged():
    table = good_table()
    for rec in table.values():
        rec["t_star"]["converged"] = False
    t = claims_table(table, dt=0.1)[0]
    assert t["quantity"] == "t_entry" and "entry time" in t["claim"]
    assert t["verdict"] == "consistent"


def test_zero_temperature_rate_row():
    rates = [{"window": [0, 4], "rate": 0.40, "err": 1e-4}, {"window": [16, 20], "rate": 0.5828, "err": 1e-4}]
    ok = claims_table(good_table(), 0.1, {"local_rates": rates, "guaranteed": 0.25, "c_star": 0.5857})[-1]
    assert ok["verdict"] == "consistent" and ok["measured"]["rate"] == 0.5828
    short = [{"window": [0, 4], "rate": 0.40, "err": 1e-4}, {"window": [4, 8], "rate": 0.52, "err": 1e-4}]
    pending = claims_table(good_table(), 0.1, {"local_rates": short, "guaranteed": 0.25, "c_star": 0.5857})[
        -1
    ]
    assert pending["verdict"] == "not resolved"  # approaching c*, not there yet
    below = [{"window": [0, 4], "rate": 0.20, "err": 1e-4}, {"window": [4, 8], "rate": 0.58, "err": 1e-4}]
    bad = claims_table(good_table(), 0.1, {"local_rates": below, "guaranteed": 0.25, "c_star": 0.5857})[-1]
    assert bad["verdict"] == "inconsistent"
    assert claims_table(good_table(), 0.1, None)[-1]["verdict"] == "not resolved"


def test_terminal_row_needs_a_converged_departure():
    rows = claims_table(good_table(), dt=0.1)
    assert row(rows, "terminal phase")["verdict"] == "not resolved"
    table = good_table(t_depart=12.0)
    assert row(claims_table(table, dt=0.1), "terminal phase")["verdict"] == "consistent"
    for rec in table.values():
        rec["mass_V_final"] = 0.1
    assert row(claims_table(table, dt=0.1), "terminal phase")["verdict"] == "inconsistent"


def test_rows_are_plain_json():
    from attnflow.io import to_json

    text = to_json(claims_table(good_table(), dt=0.1))
    assert "NaN" not in text and np.isfinite(len(text))
