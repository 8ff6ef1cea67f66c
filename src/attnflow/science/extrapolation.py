"""How far a ladder's levels leave an answer uncertain: Richardson's extrapolation over levels refined
by one factor, and the gap between two levels' W2 curves where a minimum is read (`convergence`
judges the ladder with them)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["REFINE_RTOL", "curve_gap", "richardson"]

# The refinement factors of a ladder and how far N_{k+1} / N_k may lie from them: graded quadratures
# halve their spacing exactly but round their node counts (on S^1 to a multiple of 4, about 0.1 %; on
# S^2 ring by ring, 9488 -> 36664 at beta = 10: 3.86).
REFINE_RTOL = {2.0: 0.01, 4.0: 0.05}


def richardson(Ns: ArrayLike, values: ArrayLike) -> tuple[float, float, float | None]:
    """N -> infinity estimate of values (L,) at levels Ns (L,) refined by one factor f: (estimate,
    error, order r). f = 2 (N doubling; a graded quadrature on S^1 halving its spacing) or 4 (a graded
    quadrature on S^2 halving its spacing in two dimensions); every N_{k+1} / N_k lies within
    REFINE_RTOL[f] of f (the quadratures round their node counts).

    With three or more levels, q_N ~ q_inf + c N^-r gives r = log(|q_{N} - q_{N/f}| / |q_{fN} - q_N|)
    / log f from the last three; the estimate is q_fN + (q_fN - q_N) / (f^r - 1) when r > 0 is finite,
    else the last value. The error is the last difference |q_fN - q_N| (a level alone: NaN).
    """
    N = np.asarray(Ns, dtype=np.float64)
    q = np.asarray(values, dtype=np.float64)
    if q.size == 0 or not math.isfinite(q[-1]):
        return math.nan, math.nan, None
    if q.size == 1:
        return float(q[-1]), math.nan, None
    ratios = N[1:] / N[:-1]
    f = 2.0 ** round(math.log2(ratios[-1])) if ratios[-1] > 1.0 else 0.0
    if f not in REFINE_RTOL or not np.allclose(ratios, f, rtol=REFINE_RTOL[f]):
        raise ValueError(
            f"Richardson extrapolation needs levels refined by one factor (N doubling, or x4 for "
            f"graded nodes on S^2), got N = {N.tolist()}"
        )
    last = float(q[-1] - q[-2])
    err = abs(last)
    if q.size < 3 or not math.isfinite(q[-3]) or last == 0.0:
        return float(q[-1]), err, None
    prev = float(q[-2] - q[-3])
    if prev == 0.0 or prev * last < 0 or abs(last) >= abs(prev):
        return float(q[-1]), err, None  # not (yet) in the asymptotic range: no extrapolation
    r = math.log(abs(prev) / abs(last)) / math.log(f)
    return float(q[-1] + last / (f**r - 1.0)), err, r


def curve_gap(t: ArrayLike, fine: ArrayLike, coarse: ArrayLike, lo: float, hi: float) -> float:
    """The largest |fine - coarse| (two levels' W2 curves at the saved times t) over [lo, hi] and the
    saved times next to it: a minimum read there is known to no better (NaN without such times)."""
    t = np.asarray(t, dtype=np.float64)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.nan
    i, j = np.searchsorted(t, lo, side="right") - 1, np.searchsorted(t, hi, side="left") + 1
    sl = slice(max(int(i), 0), min(int(j), t.size))
    d = np.abs(np.asarray(fine, dtype=np.float64)[sl] - np.asarray(coarse, dtype=np.float64)[sl])
    return float(np.max(d)) if d.size else math.nan
