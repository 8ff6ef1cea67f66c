"""Convergence in N, made explicit: a doubling ladder N, 2N, 4N, ... judged on W2 curves.

A number about the theorem counts only when it is converged in N (docs/math.md, "Weighted
measures"; the rules of docs/experiments.md). For one beta the ladder runs the same experiment at
N_min, 2 N_min, ... and compares consecutive levels:

- the *converged window* [0, T_k] of level k is the longest initial stretch of saved times on which
  its W2 curve and that of level k-1 agree within `atol + rtol W2` (the first level: the window it
  shares with the second, so that `streak` doublings compare `streak` + 1 windowed levels, as many
  as the curves need). Beyond T_k the coarser run has
  left the mean-field solution (for N tokens the softmax loses the tokens near its maximiser after a
  time ~ log N: docs/experiments.md, "What converges in N");
- the *quantities* of level k are read off its curve inside that window only (the first level: its
  whole curve, the reference of the second): min W2, its argmin t*, the entry time into the
  near-minimal band and the deviation times t_dev(delta). They lie between saved times: each level
  locates them on its continuous solution (`attnflow.science.located`), and each carries where it
  was read as an error (`grid`: the root tolerance, or the saved step for a time read off the
  samples, `attnflow.science.curves`). A minimum at the window's right edge is not a minimum (the
  curve may fall further later): it is flagged `edge` and never counts as converged;
- a beta is *converged* when its curves agree over the whole saved span [0, t_max] for `streak`
  doublings in a row: more tokens cannot change what the run says;
- a quantity is *converged* when it is not at an edge and has changed by less than `tol` (relative
  for distances; for times relative too, but never less than one saved-time step) over `streak`
  doublings; its record carries that limit (`tol`, absolute) as the tolerance it was judged at;
- the N -> infinity value is estimated by Richardson extrapolation from the last three levels,
  q_inf ~ q_2N + (q_2N - q_N) / (2^r - 1), r fitted; its error is the last difference.

Everything here works on arrays: the experiments run the levels, this module judges them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, SupportsFloat

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_times
from .curves import band as band_of
from .curves import crossing, locate_minimum
from .extrapolation import curve_gap, richardson
from .metrics import RESOLUTION_OK

__all__ = [
    "DEVIATIONS",
    "QUANTITIES",
    "STATUSES",
    "CurveQuantities",
    "LadderDecision",
    "LadderRules",
    "LevelReading",
    "Quantity",
    "converged_window",
    "curve_gap",
    "curve_quantities",
    "judge_ladder",
    "richardson",
]


# A least value within this many saved steps of the window's end is no minimum (the curve may fall
# further later): its quantities at the minimum are flagged `edge`, and the figures draw no t* there.
EDGE_STEPS = 2

# Per-beta statuses, most trusted first.
STATUSES = ("converged", "resolved", "under-resolved")


@dataclass(frozen=True)
class Quantity:
    """A per-beta quantity the ladder judges (an entry of QUANTITIES).

    kind: "time" (converged when consecutive levels differ by at most max(tol t, dt)) or "distance"
    (by at most tol relative); windowed: read off the W2 curve inside the converged window (a field of
    CurveQuantities), else measured on each level's whole run (LevelReading.times); at_minimum: read
    at the curve's minimum, so that a minimum at the window's end voids it; headline: in the per-beta
    table of the experiment's summary.
    """

    name: str
    kind: Literal["time", "distance"]
    meaning: str
    windowed: bool = True
    at_minimum: bool = True
    headline: bool = True


#: t_dev(delta), the time the finite-beta curve leaves the zero-temperature one: the first time
#: W2^beta > (1 + delta) W2^inf, for these delta (`t_dev` is delta = 10 %; 5 and 20 % show that a law
#: of t_dev does not hang on the choice). One definition, a relative deviation from the reference:
#: the curve tolerance of the ladder (curve_atol + curve_rtol W2) is a numerical setting whose
#: absolute part dominates once W2 is small, so a deviation measured with it would change with the
#: ladder's settings rather than with beta.
DEVIATIONS: dict[str, float] = {"t_dev_5": 0.05, "t_dev": 0.1, "t_dev_20": 0.2}

#: the quantities of a beta, in the order results list them
QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity("t_star", "time", "argmin of W2 over the converged window"),
        Quantity("min_w2", "distance", "minimum of W2 over the converged window"),
        Quantity("t_entry", "time", "entry time into the near-minimal band W2 <= (1 + band) min W2"),
        Quantity(
            "t_depart",
            "time",
            "departure: the mass near A's top eigenspace falls back below 1/2",
            windowed=False,
            at_minimum=False,
        ),
        *(
            Quantity(
                name,
                "time",
                f"t_dev({delta:.0%}): first time W2 > (1 + {delta:g}) W2 at beta = inf (the N = infinity "
                "reference)",
                at_minimum=False,
                headline=False,
            )
            for name, delta in DEVIATIONS.items()
        ),
    )
}


def converged_window(
    t: ArrayLike, fine: ArrayLike, coarse: ArrayLike, atol: float = 5e-3, rtol: float = 0.02
) -> float:
    """Largest T such that |fine - coarse| <= atol + rtol |fine| at every saved time t <= T.

    t (T,) saved times; fine, coarse (T,) W2 curves of two levels. Returns t[0] when they already
    differ at the first time, t[-1] when they agree everywhere.
    """
    t = check_times(t, "t")
    f = np.asarray(fine, dtype=np.float64)
    c = np.asarray(coarse, dtype=np.float64)
    if f.shape != t.shape or c.shape != t.shape:
        raise ValueError(f"fine and coarse must have the shape of t {t.shape}, got {f.shape} and {c.shape}")
    bad = np.flatnonzero(~(np.abs(f - c) <= atol + rtol * np.abs(f)))
    if bad.size == 0:
        return float(t[-1])
    return float(t[max(int(bad[0]) - 1, 0)])


@dataclass(frozen=True)
class CurveQuantities:
    """What a W2 curve says inside its converged window [t[0], t_end], read between saved times
    (`attnflow.science.curves`).

    t_star, min_w2: the minimum over the window and its time (the cubic through the saved points
    around the smallest one); t_entry: first time with W2 <= (1 + band) min_w2 (the entry into the
    near-minimal band); t_dev, t_dev_5, t_dev_20: t_dev(delta) for DEVIATIONS, the first time
    W2 > (1 + delta) W2_ref (when the finite-beta curve leaves a reference curve, e.g. the exact
    zero-temperature one; NaN without a reference or when it stays within the window); t_lo, t_hi: the
    near-minimal band around the minimum; bias: name -> the save grid's error of that quantity
    (interpolated against its lower-order estimate); edge: the minimum lies within `edge_steps` saved
    steps of the window's end, which is t_end or the last saved time t_max (the curve may fall
    further after it), or the window is empty.
    """

    t_star: float
    min_w2: float
    t_entry: float
    t_end: float
    edge: bool
    t_dev: float = math.nan
    t_dev_5: float = math.nan
    t_dev_20: float = math.nan
    t_lo: float = math.nan
    t_hi: float = math.nan
    bias: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _deviations(
    t: np.ndarray, w: np.ndarray, reference: ArrayLike | None, inside: np.ndarray
) -> dict[str, Any]:
    """t_dev(delta) for every delta of DEVIATIONS (fields, their biases and, under "index", the saved
    index that ends each one's bracket), inside the window."""
    out: dict[str, Any] = {name: math.nan for name in DEVIATIONS}
    if reference is None:
        return {**out, "index": {}}
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape != t.shape:
        raise ValueError(f"reference must have the shape of t {t.shape}, got {ref.shape}")
    bias, index = {}, {}
    for name, delta in DEVIATIONS.items():
        c = crossing(t[inside], w[inside], (1.0 + delta) * ref[inside], "up")
        out[name], bias[name], index[name] = c.t, c.bias, _absolute(inside, c.index)
    return {**out, "bias": bias, "index": index}


def curve_quantities(
    t: ArrayLike,
    w2: ArrayLike,
    t_end: float | None = None,
    band: float = 0.05,
    edge_steps: int = EDGE_STEPS,
    reference: ArrayLike | None = None,
    located: Mapping[str, Mapping[str, float]] | None = None,
) -> CurveQuantities:
    """CurveQuantities of the W2 curve w2 (T,) on saved times t (T,) restricted to t <= t_end;
    reference: an optional (T,) curve for the deviation times t_dev(delta); located: the level's
    times located on its continuous solution (name -> Located.to_dict(), `science.located`), taken
    where they are the quantity the window reads (see `_take_located`)."""
    t = check_times(t, "t")
    w = np.asarray(w2, dtype=np.float64)
    if w.shape != t.shape:
        raise ValueError(f"w2 must have the shape of t {t.shape}, got {w.shape}")
    t_end = float(t[-1]) if t_end is None else float(t_end)
    inside = np.flatnonzero((t <= t_end + 1e-12) & np.isfinite(w))
    if inside.size < 2:
        return CurveQuantities(math.nan, math.nan, math.nan, t_end, True)
    gaps = np.flatnonzero(np.diff(inside) != 1)
    inside = inside[: int(gaps[0]) + 1] if gaps.size else inside  # up to the first undefined value
    if inside.size < 2:
        return CurveQuantities(math.nan, math.nan, math.nan, t_end, True)
    ti, wi = t[inside], w[inside]
    m = locate_minimum(ti, wi)
    entry = crossing(ti, wi, (1.0 + band) * m.value, "down")
    near = band_of(ti, wi, m, band)
    edge = m.index >= inside.size - 1 - edge_steps
    dev = _deviations(t, w, reference, inside)
    dev_index = dev.pop("index")
    bias = {"t_star": m.t_bias, "min_w2": m.value_bias, "t_entry": entry.bias, **dev.pop("bias", {})}
    q = CurveQuantities(
        m.t, m.value, entry.t, t_end, bool(edge), t_lo=near.lo, t_hi=near.hi, bias=bias, **dev
    )
    indices = {"t_star": int(inside[m.index]), "t_entry": _absolute(inside, entry.index), **dev_index}
    return _take_located(q, inside, indices, located or {})


def _absolute(inside: np.ndarray, index: int) -> int:
    return int(inside[index]) if index >= 0 else -1


def _number(x: SupportsFloat | None) -> float:
    """A number of a JSON record as a float (null: NaN)."""
    return math.nan if x is None else float(x)


def _take_located(
    q: CurveQuantities,
    inside: np.ndarray,
    indices: Mapping[str, int],
    located: Mapping[str, Mapping[str, float]],
) -> CurveQuantities:
    """q with its times located on the continuous solution where the saved samples of the window
    bracket the same event (the located one's saved index is the window's, and a minimum's bracket
    lies inside the window); their error is then the root tolerance. A time read off the samples
    only (none located, or another event) keeps the saved step as its error (`curves`)."""
    values: dict[str, Any] = {}
    bias = dict(q.bias)
    last = int(inside[-1])
    for name, index in indices.items():
        loc = located.get(name)
        span_ok = name != "t_star" or index + 1 <= last
        if loc is not None and index > 0 and int(loc["index"]) == index and span_ok:
            values[name], bias[name] = _number(loc["t"]), _number(loc["error"])
            least, spread = _number(loc.get("value")), _number(loc.get("value_error"))
            if name == "t_star" and math.isfinite(least) and math.isfinite(spread):
                values["min_w2"], bias["min_w2"] = least, spread
    return replace(q, **values, bias=bias)


@dataclass
class LadderDecision:
    """The ladder's verdict on one beta after its latest level.

    status: "converged" (every quantity converged), "resolved" (the resolution ratio is below the
    threshold but some quantity is not converged), "under-resolved" (ratio at or above it).
    done: whether to stop doubling (converged, or N_max reached).
    quantities: name -> {value, estimate, error (the last difference between levels), order,
    converged, reason, tol (the limit the last doubling was judged at, absolute), grid (the save
    grid's error at the last level)}.
    """

    status: str
    done: bool
    N: int
    quantities: dict[str, dict[str, Any]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LadderRules:
    """When a ladder stops and what it calls converged: dt the saved-time step (the resolution of the
    times), t_max the saved span's end, N_max the largest N, tol and streak (doublings in a row), and
    ratio_ok the resolution ratio below which an unconverged beta is "resolved"."""

    dt: float
    t_max: float
    N_max: int
    tol: float = 0.02
    streak: int = 2
    ratio_ok: float = RESOLUTION_OK


@dataclass(frozen=True)
class LevelReading:
    """What one level of the ladder says: its N, its curve's quantities (the first level: over the
    window it shares with the second, or its whole curve while alone), its resolution ratio,
    `previous` (level >= 1: the coarser level's curve read inside this level's window, where the two
    agree; None: the coarser level's own), and further per-level times judged without a window (name ->
    value, names of QUANTITIES that are not windowed, e.g. t_depart) with their grid errors (`bias`,
    name -> error; 0 where absent); `gap` (level >= 1) the largest |W2_N - W2_{N/2}| over the
    near-minimal band where the minimum is read (`curve_gap`; NaN: none)."""

    N: int
    quantities: CurveQuantities
    ratio: float
    previous: CurveQuantities | None = None
    times: Mapping[str, float] = field(default_factory=dict)
    bias: Mapping[str, float] = field(default_factory=dict)
    gap: float = math.nan

    def grid_error(self, name: str) -> float:
        """The save grid's error of quantity `name` at this level (0 when not recorded)."""
        kept = self.bias if name in self.times else self.quantities.bias
        value = kept.get(name, 0.0)
        return float(value) if math.isfinite(value) else 0.0


def _series(readings: Sequence[LevelReading]) -> dict[str, tuple[list[float], list[bool], list[float]]]:
    """name -> (value per level, edge flag per level, the value it is compared with per level)."""
    series: dict[str, tuple[list[float], list[bool], list[float]]] = {}
    for q in QUANTITIES.values():
        if q.windowed:
            values = [getattr(r.quantities, q.name) for r in readings]
            before = [math.nan] + [
                getattr(r.previous if r.previous is not None else p.quantities, q.name)
                for r, p in zip(readings[1:], readings[:-1], strict=True)
            ]
            edges = [r.quantities.edge and q.at_minimum for r in readings]
            series[q.name] = (values, edges, before)
    for name in readings[-1].times:
        if name not in QUANTITIES or QUANTITIES[name].windowed:
            raise ValueError(f"times[{name!r}]: not a per-level quantity of QUANTITIES")
        if any(name not in r.times for r in readings):
            raise ValueError(f"times[{name!r}] is missing at some level: every level needs it")
        values = [float(r.times[name]) for r in readings]
        series[name] = (values, [False] * len(values), [math.nan, *values[:-1]])
    return series


def judge_ladder(readings: Sequence[LevelReading], rules: LadderRules) -> LadderDecision:
    """Judge the levels of one beta's ladder, coarsest first.

    The status is "converged" when the W2 curves of the last `streak` doublings agree over the whole
    saved span [0, t_max]: the run is then converged in N on it, and more tokens cannot change what it
    says (a minimum beyond t_max needs a longer run, not more tokens). Each quantity carries its own
    flag: times (kind "time") converge when consecutive levels differ by at most max(tol t, dt),
    distances when they differ by at most tol relative, `streak` times in a row; a minimum at the end
    of the window never converges. Otherwise "resolved" when the last level's ratio is below
    ratio_ok, else "under-resolved".
    """
    if not readings:
        raise ValueError("readings must hold at least one level")
    Ns = [int(r.N) for r in readings]
    streak = max(int(rules.streak), 1)
    out: dict[str, dict[str, Any]] = {}
    reasons: list[str] = []
    whole = [r.quantities.t_end >= rules.t_max - 1e-9 * max(1.0, rules.t_max) for r in readings]
    for name, (values, edges, before) in _series(readings).items():
        estimate, error, order = richardson(Ns, values)
        if QUANTITIES[name].kind == "distance" and math.isfinite(readings[-1].gap):
            error = max(error, readings[-1].gap)  # two curves that cross can share their minimum
        ok, why = _converged(QUANTITIES[name].kind, values, edges, before, rules.dt, rules.tol, streak)
        if not ok and edges[-1] and whole[-1]:
            why = "the minimum lies at t_max: the curve still falls there (a longer t_max decides)"
        if not ok:
            reasons.append(f"{name}: {why}")
        out[name] = {
            "value": values[-1],
            "estimate": estimate,
            "error": error,
            "order": order,
            "converged": ok,
            "reason": why,
            "tol": _limit(QUANTITIES[name].kind, values[-1], rules.dt, rules.tol),
            "grid": readings[-1].grid_error(name),
        }
    converged = len(readings) > streak and all(whole[-streak:])
    if not converged:
        t_end = readings[-1].quantities.t_end
        reasons.insert(0, f"the W2 curves of N and N/2 agree only up to t = {t_end:.3g} < t_max")
    ratio = readings[-1].ratio
    status = "converged" if converged else ("resolved" if ratio < rules.ratio_ok else "under-resolved")
    return LadderDecision(status, converged or Ns[-1] * 2 > rules.N_max, Ns[-1], out, reasons)


def _converged(
    kind: str, values: list[float], edges: list[bool], before: list[float], dt: float, tol: float, streak: int
):
    """Whether the last `streak` doublings each moved the quantity (of this kind) by at most its limit:
    level k's value against before[k], level k-1's value read where the two curves agree."""
    if len(values) < streak + 1:
        return False, f"{len(values)} level(s): {streak + 1} needed"
    if any(edges[-streak:]):
        return False, "the minimum lies at the end of the converged window (the curve may fall further)"
    pairs = list(zip(before[-streak:], values[-streak:], strict=True))
    if not all(math.isfinite(v) for pair in pairs for v in pair):
        return False, "undefined at some level (e.g. not reached within the converged window)"
    for a, b in pairs:
        limit = _limit(kind, b, dt, tol)
        if abs(b - a) > limit * (1.0 + 1e-9):  # one saved step apart is within the grid's resolution
            return False, f"changed by {abs(b - a):.3g} between doublings (limit {limit:.3g})"
    return True, ""


def _limit(kind: str, value: float, dt: float, tol: float) -> float:
    """The largest change between doublings a converged quantity of this kind may show at `value`:
    tol relative, and for a time at least one saved step dt (NaN for an undefined value)."""
    if not math.isfinite(value):
        return math.nan
    return max(tol * abs(value), dt) if kind == "time" else tol * abs(value)
