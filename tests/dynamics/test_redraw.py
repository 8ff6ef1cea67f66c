"""Weights redrawn every T units of time: the run is the runs of its segments, one after the other."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics, Redraw


def heads(k: int) -> list[af.Attention]:
    return [af.random_attention(3, 10 + k, symmetric=False), af.random_attention(3, 20 + k, symmetric=False)]


@pytest.fixture(scope="module")
def dyn():
    return Dynamics([h.with_beta(4.0) for h in heads(0)], mask="causal", redraw=Redraw(0.5, heads, "seeded"))


@pytest.mark.parametrize("method", ["rk4", "adaptive"])
def test_a_redrawn_run_is_its_segments_in_turn(dyn, method):
    X0 = af.sample_uniform(40, 3, seed=1)
    times = np.array([0.0, 0.25, 0.5, 0.8, 1.0, 1.3])
    opts = {"options": {"rtol": 1e-10, "atol": 1e-12}} if method == "adaptive" else {"dt": 0.05}
    tr = af.simulate(X0, dyn, times, method=method, **opts)
    assert tr.info["segments"] == 3 and tr.info["redraw_period"] == 0.5
    X, pieces = X0, []
    for k, (a, b) in enumerate([(0.0, 0.5), (0.5, 1.0), (1.0, 1.3)]):
        seg = dyn.segment(k)
        local = [t - a for t in times if a <= t < b or (k == 2 and t == b)]
        part = af.simulate(X, Dynamics(seg.heads, mask="causal"), [*local, b - a], method=method, **opts)
        pieces.extend(part.x[: len(local)])
        X = part.x[-1]
    np.testing.assert_allclose(tr.x, np.stack(pieces), rtol=0, atol=1e-12 if method == "rk4" else 1e-8)


def test_a_period_longer_than_the_run_is_no_redraw(dyn):
    X0 = af.sample_uniform(40, 3, seed=2)
    long = Dynamics(dyn.heads, mask="causal", redraw=Redraw(5.0, heads))
    a = af.simulate(X0, long, [0.0, 1.0, 2.0], method="rk4", dt=0.05)
    b = af.simulate(X0, Dynamics(dyn.heads, mask="causal"), [0.0, 1.0, 2.0], method="rk4", dt=0.05)
    assert np.array_equal(a.x, b.x)
