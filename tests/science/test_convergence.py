"""The N ladder's judgement (attnflow.science.convergence) on curves with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attnflow.science.convergence import (
    DEVIATIONS,
    QUANTITIES,
    CurveQuantities,
    LadderRules,
    LevelReading,
    converged_window,
    curve_gap,
    curve_quantities,
    judge_ladder,
    richardson,
)

T = np.linspace(0.0, 20.0, 201)


def curve(N: int, depart_slope: float = 1.0) -> np.ndarray:
    """A W2 curve with a known N -> infinity limit: exp(-0.3 t) + 0.05 (a minimum plateau from
    t ~ 10 on), plus an N-error 1/N, and, like finite clouds, a departure that starts at a time
    growing like log N (depart_slope per doubling): there the curve rises to 0.3."""
    base = np.exp(-0.3 * T) + 0.05 + 1.0 / N
    t_dep = 8.0 + depart_slope * math.log2(N / 64)
    return np.where(T < t_dep, base, 0.3)


def judge(Ns, qs, ratio=0.1, extra_times=None, **rules):
    """judge_ladder on levels Ns with quantities qs, every level at resolution ratio `ratio`, the
    saved step dt = 0.1 over [0, 20] and ratio_ok = 0.5; extra_times: name -> one value per level."""
    extra = extra_times or {}
    readings = [
        LevelReading(N, q, ratio, times={k: v[i] for k, v in extra.items()})
        for i, (N, q) in enumerate(zip(Ns, qs, strict=True))
    ]
    return judge_ladder(readings, LadderRules(dt=0.1, t_max=20.0, ratio_ok=0.5, **rules))


def levels(Ns, **kw):
    out = []
    for k, N in enumerate(Ns):
        w = curve(N, **kw)
        t_end = converged_window(T, w, curve(Ns[k - 1], **kw)) if k else -math.inf
        out.append(curve_quantities(T, w, t_end))
    return out


def test_converged_window_ends_where_the_coarser_curve_departs():
    # level 128 departs at t = 9, level 256 at t = 10: they agree (within 5e-3 + 2 %) until 9
    t_end = converged_window(T, curve(256), curve(128))
    assert 8.8 <= t_end < 9.0
    assert converged_window(T, curve(256), curve(256)) == T[-1]
    assert converged_window(T, curve(256), curve(256) + 1.0) == T[0]


def test_minimum_at_the_window_edge_is_flagged_and_never_converges():
    # the plateau exp(-0.3 t) + 0.05 still falls where every level's window ends: edge at all levels
    Ns = [64, 128, 256, 512, 1024]
    qs = levels(Ns)
    assert all(q.edge for q in qs)
    d = judge(Ns, qs, N_max=1024)
    assert d.status == "resolved" and d.done  # N_max reached, not converged
    assert not d.quantities["min_w2"]["converged"]
    assert "end of the converged window" in d.quantities["min_w2"]["reason"]
    assert "agree only up to" in d.reasons[0]


def test_a_curve_converged_on_its_span_with_its_minimum_at_t_max():
    """Curves that agree up to t_max make a converged beta; a minimum at t_max is a quantity beyond
    the run's span (a longer run decides it), not an N problem: the ladder stops."""
    Ns = [1024, 2048, 4096]
    qs = []
    for k, N in enumerate(Ns):
        w = np.exp(-0.3 * T) + 1.0 / N
        t_end = converged_window(T, w, np.exp(-0.3 * T) + 2.0 / N) if k else -math.inf
        qs.append(curve_quantities(T, w, t_end))
    d = judge(Ns, qs, N_max=10**6)
    assert d.status == "converged" and d.done
    assert not d.quantities["t_star"]["converged"]
    assert "t_max" in d.quantities["t_star"]["reason"]


def test_a_true_minimum_inside_the_window_converges_with_richardson():
    # a curve with an interior minimum at t = 5, an N-error 1/N, and a departure growing with log N
    def bowl(N):  # agrees with the next level over the whole span within atol + rtol W2
        return (T - 5.0) ** 2 / 50 + 0.1 + 1.0 / N

    Ns = [512, 1024, 2048, 4096]
    qs = []
    for k, N in enumerate(Ns):
        t_end = converged_window(T, bowl(N), bowl(Ns[k - 1])) if k else -math.inf
        qs.append(curve_quantities(T, bowl(N), t_end))
    d = judge(Ns[:2], qs[:2], N_max=4096, streak=2)
    assert d.status == "resolved" and not d.done  # two levels: one comparison, two needed
    d = judge(Ns, qs, N_max=4096, streak=2)
    assert d.status == "converged" and d.done
    assert d.quantities["t_star"]["value"] == pytest.approx(5.0)
    # min W2 = 0.1 + 1/N: Richardson removes the 1/N error (order 1)
    est = d.quantities["min_w2"]["estimate"]
    assert est == pytest.approx(0.1, abs=1e-9)
    assert d.quantities["min_w2"]["order"] == pytest.approx(1.0)


def test_two_curves_that_cross_at_their_minimum_do_not_shrink_its_error():
    """The Fibonacci ladder at beta = 10 in d = 3 did this: the minima of N = 4096 and 8192 agreed to
    1.5e-6 while the curves differed by 1.3e-3 around them (and the truth lay 1.1e-3 away). The min
    W2's error is at least the curves' largest difference over the near-minimal band."""

    def bowl(N, tilt):  # the same minimum value 0.1, curves tilted apart around it
        return (T - 5.0) ** 2 / 50 + 0.1 + tilt * (T - 5.0) / N

    Ns = [1024, 2048]
    w = [bowl(1024, 1.0), bowl(2048, -1.0)]
    t_end = converged_window(T, w[1], w[0])
    q = [curve_quantities(T, w[0], None), curve_quantities(T, w[1], t_end)]
    gap = curve_gap(T, w[1], w[0], q[1].t_lo, q[1].t_hi)
    assert gap > 10 * abs(q[1].min_w2 - q[0].min_w2)
    before = curve_quantities(T, w[0], t_end)
    readings = [LevelReading(Ns[0], q[0], 0.1), LevelReading(Ns[1], q[1], 0.1, previous=before, gap=gap)]
    d = judge_ladder(readings, LadderRules(dt=0.1, t_max=20.0, ratio_ok=0.5, N_max=4096))
    assert d.quantities["min_w2"]["error"] == pytest.approx(gap)
    assert np.isnan(curve_gap(T, w[1], w[0], math.nan, 1.0))


def test_departure_growing_with_log_n_is_not_converged():
    Ns = [64, 128, 256, 512]
    qs = levels(Ns)
    dep = [8.0 + math.log2(N / 64) for N in Ns]
    d = judge(Ns, qs, N_max=512, extra_times={"t_depart": dep})
    assert not d.quantities["t_depart"]["converged"]
    assert "changed by 1" in d.quantities["t_depart"]["reason"]


def test_status_under_resolved_when_the_ratio_is_too_large():
    qs = levels([64, 128])
    d = judge([64, 128], qs, ratio=0.9, N_max=10_000)
    assert d.status == "under-resolved" and not d.done


@given(st.floats(0.1, 10.0), st.floats(0.5, 3.0), st.floats(0.01, 5.0), st.booleans())
@settings(max_examples=50, deadline=None)
def test_richardson_recovers_the_limit_of_a_power_law(q_inf, r, c, negative):
    c = -c if negative else c
    Ns = np.array([100, 200, 400, 800])
    q = q_inf + c * Ns**-r
    # the order comes from differences of q: rounding (1e-16 q_inf) must stay far below the last one
    assume(abs(q[-1] - q[-2]) > 1e-8 * abs(q_inf))
    est, err, order = richardson(Ns, q)
    assert order == pytest.approx(r, rel=1e-6)
    assert est == pytest.approx(q_inf, abs=1e-9 * max(1.0, abs(q_inf)))
    assert err == pytest.approx(abs(q[-1] - q[-2]))


def test_richardson_takes_any_one_factor_as_nodes_on_s2_refine_by_about_4():
    Ns = np.array([9488.0, 36664.0, 145000.0])  # factors 3.86 and 3.95: x4 up to rounding
    q = 0.448 + 2.0 / np.array([1.0, 4.0, 16.0])  # first order in the nodes, 4 per level
    est, err, order = richardson(Ns, q)
    assert order == pytest.approx(1.0) and est == pytest.approx(0.448)
    assert err == pytest.approx(abs(q[-1] - q[-2]))


def test_richardson_refuses_a_non_doubling_ladder_and_handles_short_ones():
    with pytest.raises(ValueError, match="refined by one factor"):
        richardson([100, 200, 600], [1.0, 2.0, 2.5])
    with pytest.raises(ValueError, match="refined by one factor"):
        richardson([100, 120], [1.0, 2.0])
    with pytest.raises(ValueError, match="refined by one factor"):
        richardson([100, 800], [1.0, 2.0])  # x8: no ladder refines so
    assert richardson([100], [1.5]) == (1.5, pytest.approx(math.nan, nan_ok=True), None)
    est, err, order = richardson([100, 200, 400], [1.0, 2.0, 2.5])  # not monotone in the asymptotic sense
    assert order is not None and est == pytest.approx(3.0)
    est, err, order = richardson([100, 200, 400], [1.0, 2.0, 1.0])  # oscillating: no extrapolation
    assert order is None and est == 1.0 and err == 1.0


def test_richardson_takes_graded_node_counts_that_double_up_to_rounding():
    # a graded quadrature halves its spacing exactly and rounds N up to a multiple of 4
    Ns = [600, 1196, 2388]
    q = [1.0 + 1.0 / n for n in (1, 2, 4)]  # first order in the spacing, 2 per level
    est, err, order = richardson(Ns, q)
    assert order == pytest.approx(1.0) and est == pytest.approx(1.0) and err == pytest.approx(0.25)
    with pytest.raises(ValueError, match="refined by one factor"):
        richardson([600, 1250], [1.0, 2.0])  # 4 % off a doubling


def test_curve_quantities_entry_and_deviation_times():
    """Crossing times lie between saved times, at their closed forms within the grid errors they
    carry: w = exp(-t/2) + 0.01 enters the band w <= 1.05 w(20) at -2 log(1.05 w(20) - 0.01) and
    leaves ref = exp(-t/2) by delta at t_dev(delta) = 2 log(0.01 / delta)^-1 = 2 log(100 delta)."""
    w = np.exp(-0.5 * T) + 0.01
    ref = np.exp(-0.5 * T)
    q = curve_quantities(T, w, band=0.05, reference=ref)
    assert q.t_star == T[-1] and q.edge  # the minimum at t_max is an edge
    assert q.min_w2 == pytest.approx(w[-1])
    entry = -2.0 * math.log(1.05 * w[-1] - 0.01)
    step = T[1] - T[0]
    # read off the saved samples only (nothing located): close, but known to the saved step
    assert abs(q.t_entry - entry) < 0.1 * step and q.bias["t_entry"] == pytest.approx(step)
    assert not T[np.flatnonzero(T <= entry)[-1]] == pytest.approx(entry)  # between saved times
    for name, delta in DEVIATIONS.items():
        exact = 2.0 * math.log(100.0 * delta)
        assert abs(getattr(q, name) - exact) < 0.01 and q.bias[name] == pytest.approx(step), name
    assert q.t_dev == pytest.approx(2.0 * math.log(10.0), abs=1e-3)
    with pytest.raises(ValueError, match="shape of t"):
        curve_quantities(T, w[:-1])


def test_a_minimum_between_saved_times_is_located_within_its_grid_error():
    """The save-grid bias: a curve whose minimum lies between saved times. The saved minimum
    overstates it and misplaces it by up to half a step; the interpolated one is close, its value
    within the error it carries, its time quoted to the saved step (only located times do better)."""
    from attnflow.science.curves import locate_minimum

    t = np.arange(0.0, 10.0 + 1e-9, 0.1)
    for t0 in (3.537, 3.55, 3.583, 6.012):
        s = t - t0
        w = 0.3 + 0.05 * s**2 + 0.02 * s**3 + 0.003 * s**4
        fine = np.linspace(t0 - 0.2, t0 + 0.2, 400_001)
        u = fine - t0
        exact = 0.3 + 0.05 * u**2 + 0.02 * u**3 + 0.003 * u**4
        t_true, w_true = fine[np.argmin(exact)], float(exact.min())
        m = locate_minimum(t, w)
        q = curve_quantities(t, w)
        assert (q.t_star, q.min_w2) == (m.t, m.value)
        assert abs(m.t - t_true) < 0.005 and m.t_bias == pytest.approx(0.1)  # known to the step
        assert abs(m.value - w_true) <= m.value_bias + 1e-12 and m.value_bias < 1e-5
        assert q.bias["t_star"] == m.t_bias and q.bias["min_w2"] == m.value_bias
        grid = float(w.min())
        assert grid - w_true > 10 * abs(m.value - w_true)  # the saved minimum overstates it
        assert q.t_lo < m.t < q.t_hi  # the 5 % band around it


def test_quantities_registry_names_every_judged_quantity_and_its_kind():
    """Every windowed quantity is read off CurveQuantities; times and distances are judged by their
    kind, not their spelling: a time may move by one saved step, a distance only by tol relative."""
    from dataclasses import fields

    names = {f.name for f in fields(CurveQuantities)}
    assert all(q.name in names for q in QUANTITIES.values() if q.windowed)
    assert {q.kind for q in QUANTITIES.values()} == {"time", "distance"}
    assert QUANTITIES["min_w2"].kind == "distance" and QUANTITIES["t_depart"].kind == "time"
    qs = levels([64, 128, 256])
    # a per-level time moving by exactly dt = 0.1 per doubling converges (within the grid's step) ...
    d = judge([64, 128, 256], qs, N_max=256, extra_times={"t_depart": [5.0, 5.1, 5.2]})
    assert d.quantities["t_depart"]["converged"], d.quantities["t_depart"]["reason"]
    # ... one moving by 0.2 does not
    d = judge([64, 128, 256], qs, N_max=256, extra_times={"t_depart": [5.0, 5.2, 5.4]})
    assert not d.quantities["t_depart"]["converged"]
    assert list(d.quantities) == ["t_star", "min_w2", "t_entry", "t_dev_5", "t_dev", "t_dev_20", "t_depart"]
    assert d.quantities["t_depart"]["tol"] == pytest.approx(0.108)  # max(tol t, dt) at t = 5.4
    with pytest.raises(ValueError, match="not a per-level quantity"):
        judge([64], qs[:1], N_max=256, extra_times={"t_star": [1.0]})
    with pytest.raises(ValueError, match="not a per-level quantity"):
        judge([64], qs[:1], N_max=256, extra_times={"t_foo": [1.0]})
