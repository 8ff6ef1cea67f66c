import numpy as np
import pytest

from attnflow.dynamics.rates import local_rates


def test_default_windows_stop_where_the_curve_underflows_to_zero():
    """A curve e^(-0.35 t) that reaches 0 (float64's range, or a measure concentrated exactly):
    the default windows end before its first zero and give the rate; a window given across it is
    still refused, in one line."""
    t = np.linspace(0.0, 40.0, 201)
    w = np.exp(-0.35 * t)
    w[t > 30.0] = 0.0
    rates = local_rates(t, w, width=4.0)
    assert [r["window"] for r in rates][-1] == [24.0, 28.0]  # 28 + 4 would pass t = 30
    assert all(r["rate"] == pytest.approx(0.35, rel=1e-12) for r in rates)
    with pytest.raises(ValueError, match="W2 must be > 0"):
        local_rates(t, w, windows=[[28.0, 32.0]])
