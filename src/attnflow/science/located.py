"""A level's times located on its continuous solution (docs/math.md, "Times read from a curve").

`locate_times` takes what a level saved (times, its W2 and mass curves, its states) and a way to
integrate again from a saved state (`curves.Advance`), and locates t*, the band entry, t_dev(delta)
and t_depart each inside the saved step (or two, for the minimum) where the saved samples put it
(`curves.zoom_crossing`, `curves.zoom_minimum`). Each located time carries the half-width of its
final bracket as its error: the root tolerance. The other parts of its error (the N levels, the time
step) are the ladder's and the probe's.

The reference of t_dev (the zero-temperature curve at N = infinity) is smooth and known at the
saved times only: between them it is read by a cubic spline, whose error (fourth order in the saved
step) is far below the other parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NoReturn

import numpy as np

from .curves import (
    ZOOM_POINTS,
    ZOOM_RTOL,
    Advance,
    Located,
    S,
    crossing,
    departure,
    zoom_crossing,
    zoom_minimum,
    zoom_points,
)

__all__ = ["LOCATED", "brackets", "locate_times"]

#: the names of the located times (besides min_w2, the value at t_star)
LOCATED = ("t_star", "t_entry", "t_dev_5", "t_dev", "t_dev_20", "t_depart")


def _spline(t: np.ndarray, y: np.ndarray) -> Callable[[float], float]:
    from scipy.interpolate import CubicSpline

    ok = np.isfinite(y)
    if ok.sum() < 4:
        return lambda s: float(np.interp(s, t[ok], y[ok])) if ok.any() else math.nan
    spline = CubicSpline(t[ok], y[ok])
    return lambda s: float(spline(s))


def brackets(
    times: np.ndarray,
    w2: np.ndarray,
    mass: np.ndarray,
    *,
    band: float,
    deviations: dict[str, float],
    reference: np.ndarray | None = None,
    level: float = 0.5,
    n: int = ZOOM_POINTS,
) -> np.ndarray:
    """The first zoom's points of every time `locate_times` would locate on these saved curves, and
    of the brackets one saved step either side (the next pass of a solver may read its time one step
    away), sorted: where a solver that cannot restart saves its states densely."""
    t = np.asarray(times, dtype=np.float64)
    points: list[np.ndarray] = []

    def record(_state: object, t0: float, ts: np.ndarray) -> NoReturn:
        i0, i1 = (int(np.searchsorted(t, x)) for x in (t0, float(ts[-1])))
        for shift in (-1, 0, 1):
            if 0 <= i0 + shift and i1 + shift < t.size:
                points.append(zoom_points(float(t[i0 + shift]), float(t[i1 + shift]), n))
        raise LookupError  # one zoom: its points are what a dense save needs

    w = np.asarray(w2, dtype=np.float64)
    placeholders = [None] * t.size
    locate_times(
        t,
        w,
        mass,
        placeholders,
        record,
        lambda s: math.nan,
        lambda s: math.nan,
        band=band,
        deviations=deviations,
        reference=reference,
        level=level,
        n=n,
    )
    if not points:
        return np.zeros(0)
    return np.unique(np.concatenate(points))


def _deviation(
    w2_of: Callable[[S], float], ref: Callable[[float], float], delta: float
) -> Callable[[S, float], float]:
    """g(state, t) = W2(state) - (1 + delta) W2_ref(t): t_dev(delta) is where it turns positive."""
    return lambda state, t: w2_of(state) - (1.0 + delta) * ref(t)


def locate_times(
    times: np.ndarray,
    w2: np.ndarray,
    mass: np.ndarray,
    states: Sequence[S],
    advance: Advance[S],
    w2_of: Callable[[S], float],
    mass_of: Callable[[S], float],
    *,
    band: float,
    deviations: dict[str, float],
    reference: np.ndarray | None = None,
    level: float = 0.5,
    tol: float | None = None,
    n: int = ZOOM_POINTS,
) -> dict[str, Located]:
    """name -> Located for the times of LOCATED that the saved curves have (t_star needs a saved
    minimum that is not the first or last saved time; t_dev a reference; t_depart a departure).

    times (T,) saved times; w2, mass (T,) the saved W2 and mass curves (mass: near A's top
    eigenspace, departed below `level`); states[k] the saved state at times[k]; advance integrates
    again from one; w2_of, mass_of: the quantities of a state. deviations: name -> delta of t_dev;
    reference (T,) the zero-temperature W2 curve or None. tol: the root tolerance (None: ZOOM_RTOL
    times the saved step); n: points per zoom (`brackets` says where they fall).
    """
    t = np.asarray(times, dtype=np.float64)
    w = np.asarray(w2, dtype=np.float64)
    tol = float(ZOOM_RTOL * np.min(np.diff(t))) if tol is None else float(tol)
    out: dict[str, Located] = {}

    def within(j: int, g: Callable[[S, float], float]) -> Located:
        return zoom_crossing(advance, g, float(t[j - 1]), states[j - 1], float(t[j]), j, tol, n)

    finite = np.flatnonzero(np.isfinite(w))
    k = int(finite[np.argmin(w[finite])]) if finite.size else 0
    if 0 < k < t.size - 1:
        lo, hi = float(t[k - 1]), float(t[k + 1])
        m = zoom_minimum(advance, lambda s, _t: w2_of(s), lo, states[k - 1], hi, k, tol, n)
        out["t_star"] = m
        least = m.value if math.isfinite(m.value) else float(w[k])
        entry = crossing(t[: k + 1], w[: k + 1], (1.0 + band) * least, "down")
        if entry.index > 0:
            out["t_entry"] = within(entry.index, lambda s, _t: (1.0 + band) * least - w2_of(s))
    if reference is not None:
        ref = _spline(t, np.asarray(reference, dtype=np.float64))
        for name, delta in deviations.items():
            c = crossing(t, w, (1.0 + delta) * np.asarray(reference, dtype=np.float64), "up")
            if c.index > 0:
                out[name] = within(c.index, _deviation(w2_of, ref, delta))
    d = departure(t, mass, level)
    if d.index > 0:
        out["t_depart"] = within(d.index, lambda s, _t: level - mass_of(s))
    return out
