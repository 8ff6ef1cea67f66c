"""A saved curve read between its saved times: its minimum, the times it crosses a level, the band
around its minimum, each with the error the save grid leaves.

A curve is known at its saved times t (T,) only, and what is read off it lies between them:

- `locate_minimum`: the parabola through the three saved points around the smallest saved value,
  refined by the cubic through four (the three and the next one on the vertex's side): the cubic's
  local minimum is the minimum and its time. Its value's error is its difference with the
  parabola's vertex (the parabola's error, O(h^3) in value, bounds the cubic's); its time is known
  to the saved step only (the minimum of a unimodal stretch lies between the saved points around
  the smallest one): that step is its error.
- `crossing`: the first time a curve crosses a level, from the quadratic through three saved points
  around the crossing; its error is the saved step that brackets it (the crossing lies inside it,
  whatever the curve does between the samples).
- `band`: the times around the minimum where the curve stays within (1 + tol) of it, each edge a
  crossing; inside one saved step the parabola gives the edges (sqrt(tol m / k) from the vertex).
- `departure`: the first time after a mass curve has reached FORMED (a metastable phase) that it
  falls below a level (a cluster's departure), a crossing.

These readings of the saved samples are first guesses only: a tight cluster leaves a window within
one saved step, the samples read 1, 1, 0, and any curve through them puts the crossing at the same
fraction of the step whatever the truth (docs/math.md, "Times read from a curve"). A time that a
result quotes is located on the continuous solution:

- `zoom_crossing`, `zoom_minimum`: the time where a quantity of the *state* crosses a level, or is
  least, found by integrating again from the saved state before it (`Advance`) on a grid of `n`
  points inside the bracket, then inside the sub-bracket that holds it, until the bracket is
  narrower than `tol`. The located time is the bracket's midpoint and its error the half-width:
  the crossing (or the minimum of a unimodal stretch) lies inside it, whatever the curve's shape.
  Each zoom integrates one bracket, so a located time costs about one saved step of integration.
  A solver that cannot restart from a saved state (the mean-field flow) saves its states densely
  inside the brackets instead: `advance` then looks them up, and raises LookupError for points it
  has not saved, which ends the zoom (one zoom is then all there is).

Plain NumPy on 1-D arrays; records are frozen dataclasses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

__all__ = [
    "FORMED",
    "Advance",
    "Band",
    "Crossing",
    "Located",
    "Minimum",
    "band",
    "crossing",
    "departure",
    "locate_minimum",
    "zoom_crossing",
    "zoom_minimum",
    "zoom_points",
]


@dataclass(frozen=True)
class Minimum:
    """The minimum of a saved curve: its time `t` and `value` (the cubic's minimum), their grid
    errors `t_bias` (the saved step) and `value_bias` (cubic against parabola), the index of the
    smallest saved value,
    the parabola's curvature k (the curve ~ value + k (t - t_min)^2 near it; NaN at an edge) and
    `edge`: the smallest saved value is the first or last one (no parabola: the saved point itself)."""

    t: float
    value: float
    t_bias: float
    value_bias: float
    index: int
    curvature: float
    edge: bool


@dataclass(frozen=True)
class Crossing:
    """The first time `t` a curve crosses a level (NaN when it never does), its grid error `bias`
    (the saved step that brackets it) and the index of the first saved point across (-1)."""

    t: float
    bias: float
    index: int


@dataclass(frozen=True)
class Band:
    """The band around a minimum where the curve is within (1 + tol) of it: [lo, hi], each edge a
    crossing with its grid error (lo_bias, hi_bias); `half_width` = (hi - lo) / 2."""

    lo: float
    hi: float
    lo_bias: float
    hi_bias: float

    @property
    def half_width(self) -> float:
        return 0.5 * (self.hi - self.lo)


def _vertex(t: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """(time, value, curvature k) of the vertex of the parabola through three points; k <= 0 when
    the three are not convex (then the middle point itself)."""
    s = t - t[1]
    k2, k1, k0 = np.polyfit(s, w, 2)
    if not k2 > 0:
        return float(t[1]), float(w[1]), float(k2)
    at = -k1 / (2.0 * k2)
    at = min(max(at, s[0]), s[2])
    return float(t[1] + at), float(k0 + k1 * at + k2 * at * at), float(k2)


def _cubic_minimum(t: np.ndarray, w: np.ndarray, near: float) -> tuple[float, float] | None:
    """(time, value) of the local minimum of the cubic through four points closest to `near`, or None
    when the cubic has none inside their span."""
    s = t - near
    c = np.polyfit(s, w, 3)
    roots = np.roots(np.polyder(c))
    real = [float(r.real) for r in roots if abs(r.imag) < 1e-12 and s[0] <= r.real <= s[-1]]
    minima = [r for r in real if np.polyval(np.polyder(c, 2), r) > 0]
    if not minima:
        return None
    r = min(minima, key=abs)
    return near + r, float(np.polyval(c, r))


def locate_minimum(t: np.ndarray, w: np.ndarray) -> Minimum:
    """The minimum of the saved curve w (T,) at saved times t (T,), T >= 1 (see the module)."""
    t = np.asarray(t, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    k = int(np.argmin(w))
    if k == 0 or k == w.size - 1:
        return Minimum(float(t[k]), float(w[k]), 0.0, 0.0, k, math.nan, True)
    tv, wv, curv = _vertex(t[k - 1 : k + 2], w[k - 1 : k + 2])
    if not curv > 0:  # a flat stretch of equal values: the saved point, to half a step
        half = 0.5 * float(min(t[k] - t[k - 1], t[k + 1] - t[k]))
        return Minimum(float(t[k]), float(w[k]), half, 0.0, k, curv, False)
    sides = [(k - 1, k + 3), (k - 2, k + 2)] if tv >= t[k] else [(k - 2, k + 2), (k - 1, k + 3)]
    cubic = None
    for lo, hi in sides:
        if lo >= 0 and hi <= w.size:
            cubic = _cubic_minimum(t[lo:hi], w[lo:hi], tv)
            break
    step = float(max(t[k] - t[k - 1], t[k + 1] - t[k]))
    if cubic is None:  # fewer than four points, or no cubic minimum: the grid's own offset
        return Minimum(tv, wv, step, abs(wv - float(w[k])), k, curv, False)
    return Minimum(cubic[0], cubic[1], step, abs(cubic[1] - wv), k, curv, False)


def _quadratic_root(t: np.ndarray, y: np.ndarray, lo: float, hi: float, guess: float) -> float | None:
    """The root of the quadratic through three points (t, y) inside [lo, hi] nearest to guess."""
    c = np.polyfit(t - guess, y, 2)
    roots = [guess + float(r.real) for r in np.roots(c) if abs(r.imag) < 1e-12]
    inside = [r for r in roots if lo - 1e-12 <= r <= hi + 1e-12]
    return min(inside, key=lambda r: abs(r - guess)) if inside else None


def crossing(
    t: np.ndarray,
    y: np.ndarray,
    level: float | np.ndarray = 0.0,
    direction: Literal["up", "down"] = "up",
    start: int = 0,
) -> Crossing:
    """The first time from saved index `start` on that y (T,) goes above `level` (direction "up") or
    below it ("down"); level: a number or a curve (T,) (e.g. 1.1 times a reference). A curve already
    across at `start` crosses there (bias 0); one that never crosses gives NaN."""
    t = np.asarray(t, dtype=np.float64)
    g = np.asarray(y, dtype=np.float64) - np.asarray(level, dtype=np.float64)
    g = g if direction == "up" else -g
    across = np.flatnonzero((g > 0) & (np.arange(g.size) >= start))
    if across.size == 0:
        return Crossing(math.nan, math.nan, -1)
    j = int(across[0])
    if j == start:
        return Crossing(float(t[j]), 0.0, j)
    t0, t1, g0, g1 = float(t[j - 1]), float(t[j]), float(g[j - 1]), float(g[j])
    linear = t0 + (0.0 - g0) / (g1 - g0) * (t1 - t0)
    idx = [j - 2, j - 1, j] if j + 1 >= g.size or (j - 2 >= start and j - 2 >= 0) else [j - 1, j, j + 1]
    if min(idx) < 0 or max(idx) >= g.size:
        return Crossing(linear, abs(t1 - t0), j)  # two points only: the step itself bounds the bias
    root = _quadratic_root(t[idx], g[idx], t0, t1, linear)
    return Crossing(linear if root is None else root, abs(t1 - t0), j)


#: a metastable phase: the mass near the eigenspace (or a cluster's atom) has reached this fraction
#: at least once; a departure is a fall below 1/2 after it. The gap between the two levels is what
#: makes the definition robust: a mass that hovers around 1/2 (clusters that never tighten within
#: the window: min W2 far above the window's size) has no metastable phase and no departure.
FORMED = 0.75


def departure(t: np.ndarray, mass: np.ndarray, level: float = 0.5, formed: float = FORMED) -> Crossing:
    """The first time after mass (T,) has reached `formed` (a metastable phase) that it falls below
    `level`, between saved times t (T,), with its grid error; NaN (index -1) if never: the mass
    never reached `formed` (no metastable phase), or has not fallen back by t[-1]."""
    mass = np.asarray(mass, dtype=np.float64)
    above = np.flatnonzero(mass >= max(formed, level))
    if above.size == 0:
        return Crossing(math.nan, math.nan, -1)
    return crossing(t, mass, level, "down", start=int(above[0]))


def band(t: np.ndarray, w: np.ndarray, minimum: Minimum, tol: float) -> Band:
    """The band around `minimum` (of w (T,) on t (T,)) where w <= (1 + tol) minimum.value: where the
    parabola's edges t_min -+ sqrt(tol m / k) lie within the saved steps next to the minimum, those;
    else the crossings of that level on either side (linear interpolation). An edge the curve never
    crosses is the first or last saved time."""
    t = np.asarray(t, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    k = minimum.index
    if minimum.curvature > 0 and not minimum.edge:
        half = math.sqrt(max(tol * minimum.value, 0.0) / minimum.curvature)
        if float(t[k - 1]) <= minimum.t - half and minimum.t + half <= float(t[k + 1]):
            return Band(minimum.t - half, minimum.t + half, minimum.t_bias, minimum.t_bias)
    level = (1.0 + tol) * minimum.value
    right = crossing(t, w, level, "up", start=k)
    left = crossing(t[::-1], w[::-1], level, "up", start=w.size - 1 - k)
    lo = float(t[0]) if math.isnan(left.t) else left.t
    hi = float(t[-1]) if math.isnan(right.t) else right.t
    lo_bias = 0.0 if math.isnan(left.bias) else left.bias
    hi_bias = 0.0 if math.isnan(right.bias) else right.bias
    return Band(lo, hi, lo_bias, hi_bias)


#: advance(state, t, times) -> the states at `times` (increasing, all > t) of the solution through
#: `state` at time t: the integrator run again from a saved state (S: whatever a solver's state is)
S = TypeVar("S")
Advance = Callable[[S, float, np.ndarray], Sequence[S]]

#: the zoom's points per bracket, and the narrowest bracket it stops at, relative to the saved step
ZOOM_POINTS = 16
ZOOM_RTOL = 1e-3


@dataclass(frozen=True)
class Located:
    """A time located on the continuous solution: `t` (the final bracket's midpoint), `error` (its
    half-width: the true time lies within t -+ error), `value` (the quantity there: the smallest
    sample for a minimum, NaN for a crossing) and `value_error` (how far the samples at the final
    bracket's ends lie above it: the minimum's value is known to that), `index` (the saved index of
    the first bracket's end, as `Crossing.index`; for a minimum the saved argmin) and `evaluations`
    (states integrated again)."""

    t: float
    error: float
    value: float
    index: int
    evaluations: int
    value_error: float = math.nan

    def to_dict(self) -> dict[str, float]:
        return {
            "t": self.t,
            "error": self.error,
            "value": self.value,
            "value_error": self.value_error,
            "index": self.index,
        }


def zoom_points(t0: float, t1: float, n: int) -> np.ndarray:
    """The n points of one zoom of the bracket [t0, t1], after t0 (what a dense save must hold)."""
    return np.linspace(t0, t1, n + 1)[1:]


def _zoom(
    advance: Advance[S], state0: S, t0: float, t1: float, n: int
) -> tuple[np.ndarray, Sequence[S]] | None:
    """One zoom of the bracket [t0, t1]: its n points after t0 and the states there, integrated again
    from state0; None where `advance` cannot reach them (LookupError: a dense save without them)."""
    ts = zoom_points(t0, t1, n)
    try:
        return ts, advance(state0, t0, ts)
    except LookupError:
        return None


def zoom_crossing(
    advance: Advance[S],
    g: Callable[[S, float], float],
    t0: float,
    state0: S,
    t1: float,
    index: int,
    tol: float,
    n: int = ZOOM_POINTS,
) -> Located:
    """The time in (t0, t1] where g(state, t) first becomes > 0, from g(state0, t0) <= 0 (e.g. a mass
    minus its level, negated for a fall): each zoom integrates from the bracket's start to its end on
    n points and keeps the first sub-bracket across, until it is narrower than 2 tol. `index`: the
    saved index of t1. A solution that no longer crosses inside (t0, t1] (integrated again, it can
    differ from the saved one by the integrator's tolerance) leaves the bracket (t0, t1]."""
    evaluations = 0
    while t1 - t0 > 2.0 * tol and (zoom := _zoom(advance, state0, t0, t1, n)) is not None:
        ts, states = zoom
        evaluations += len(ts)
        across = [k for k, (s, t) in enumerate(zip(states, ts, strict=True)) if g(s, float(t)) > 0]
        if not across:
            break
        k = across[0]
        if k > 0:
            t0, state0 = float(ts[k - 1]), states[k - 1]
        t1 = float(ts[k])
    return Located(0.5 * (t0 + t1), 0.5 * (t1 - t0), math.nan, index, evaluations)


def zoom_minimum(
    advance: Advance[S],
    f: Callable[[S, float], float],
    t0: float,
    state0: S,
    t1: float,
    index: int,
    tol: float,
    n: int = ZOOM_POINTS,
) -> Located:
    """The time of the least f(state, t) on [t0, t1] (a bracket around a saved minimum): each zoom
    integrates from the bracket's start on n points and keeps the two sub-steps around the least
    sample, until the bracket is narrower than 2 tol. The minimum of a unimodal stretch lies in the
    final bracket; `value` is the least sample."""
    f0, evaluations = f(state0, t0), 0
    best_v, spread = math.nan, math.nan  # (no zoom: nothing sampled inside, no value)
    while t1 - t0 > 2.0 * tol and (zoom := _zoom(advance, state0, t0, t1, n)) is not None:
        ts, states = zoom
        evaluations += len(ts)
        all_t = [t0, *map(float, ts)]
        all_s = [state0, *states]
        all_v = [f0, *(f(s, float(t)) for s, t in zip(states, ts, strict=True))]
        k = int(np.argmin(all_v))
        best_v = all_v[k]
        lo, hi = max(k - 1, 0), min(k + 1, n)
        spread = max(all_v[lo], all_v[hi]) - best_v
        t0, state0, f0, t1 = all_t[lo], all_s[lo], all_v[lo], all_t[hi]
    return Located(0.5 * (t0 + t1), 0.5 * (t1 - t0), float(best_v), index, evaluations, float(spread))
