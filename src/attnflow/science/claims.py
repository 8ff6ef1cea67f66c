"""The claims table: what the theorem implies, tested one-sided, and the laws the data show, beside it.

Three kinds of rows (docs/math.md, "The results to reproduce"), each one function and one line of
CLAIMS:

- kind "theorem": what Theorem 1 and Corollary 2 imply, and only that. Verdict "consistent",
  "inconsistent" or "not resolved" ("untested (sign only)" for a sign test on too few betas). The
  tests are one-sided: data that do better than the bound (concentrate longer, closer, faster) are
  consistent with it, never "inconsistent".
- kind "heuristic" (the sharper zero-temperature rate c*) and "conjecture" (Conjecture 1, the
  terminal phase): verdict "matches", "does not match" or "not resolved".
- kind "observed": laws of the data (t*, the departure, min W2) as fits side by side with their rms.
  No verdict on the paper: "observed".

Every row (`ClaimRow`): key (stable: figures and reports find rows by it), claim, kind, measured,
error, betas (used), left_out (beta -> reason), verdict, meaning (one sentence on what the row means
for the paper), and what else it needs (threshold, fits, per-time or per-threshold results).

The rules. Numbers come from quantities converged in N, each with its honest error
(`attnflow.science.uncertainty`: N level + time step + save grid + flatness). A law is judged over at
least MIN_BETAS betas spanning at least a factor MIN_SPAN; a verdict needs the measured number
SIGMAS errors away from its threshold. E(t) = W2^beta(t) - W2^inf(t) is read against the N = infinity
zero-temperature reference.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .convergence import DEVIATIONS
from .fits import LineFit, fit_line, temperature_scale
from .uncertainty import Measured

if TYPE_CHECKING:
    from ..attention import Attention

__all__ = [
    "CLAIMS",
    "ERROR_TIMES",
    "MIN_BETAS",
    "MIN_SPAN",
    "NOT_APPLICABLE",
    "OBSERVED",
    "SIGMAS",
    "BetaData",
    "Claim",
    "ClaimData",
    "ClaimRow",
    "Envelope",
    "Finding",
    "WeightsData",
    "ZeroData",
    "bound_envelope",
    "claims_table",
    "not_applicable",
    "verdict_counts",
    "weights_data",
]

MIN_BETAS = 4  # a law is judged over at least this many betas ...
MIN_SPAN = 4.0  # ... spanning at least this factor in beta
SIGMAS = 2.0  # a verdict needs the measured number this many errors away from its threshold
MIN_FIT = 3  # an observed law is fitted from this many betas on (two points fit any line)
ERROR_TIMES = (0.5, 1.0, 2.0)  # the fixed early times at which E(t) is read
RATE_REL_TOL = 0.01  # the last zero-temperature window within 1 % of c*
MOST = 0.5  # "most of the mass": a metastable phase, and the terminal phase on V's eigenspace
C1_MAX_FACTOR = 2.0  # the envelope searches C1 up to this times ||A|| ||B^-1|| (the field's scale)
C1_STEPS = 600  # grid steps of C1 in [0, C1_max]

THEOREM_VERDICTS = ("consistent", "inconsistent", "not resolved", "untested (sign only)")
HEURISTIC_VERDICTS = ("matches", "does not match", "not resolved")
OBSERVED = "observed"
NOT_APPLICABLE = "not applicable"  # a theorem row's verdict when the weights fail its assumptions

Kind = Literal["theorem", "heuristic", "conjecture", "observed"]


# ---------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, eq=False)
class BetaData:
    """What one beta of a run gives the claims. status: its ladder's (science.convergence);
    quantities: name -> Measured (t_star, min_w2, t_dev, t_depart, ...); w2, w2_error (T,): the W2
    curve of its last level and its error (N level + time step); mass_A_max: the largest mass near
    A's top eigenspace (>= 1/2: a metastable phase; NaN: unknown); mass_V_final: the mass near V's
    top eigenspace at t_max; t_band: the near-minimal band (t_lo, t_hi) around t*."""

    beta: float
    status: str
    quantities: Mapping[str, Measured]
    w2: np.ndarray
    w2_error: np.ndarray
    mass_A_max: float = math.nan
    mass_V_final: float = math.nan
    t_band: tuple[float, float] = (math.nan, math.nan)

    @property
    def label(self) -> str:
        return f"{self.beta:g}"

    @property
    def metastable(self) -> bool:
        """Whether most of the mass came near Pi_# rho_0 at some time (unknown counts as yes)."""
        return not self.mass_A_max < MOST


@dataclass(frozen=True, eq=False)
class ZeroData:
    """The zero-temperature curve: w2, w2_error (T,), its local rates [{window, rate, err}] and its
    kind ("N = infinity reference", or the exact flow of a cloud)."""

    w2: np.ndarray
    w2_error: np.ndarray
    local_rates: Sequence[Mapping[str, Any]]
    kind: str

    @property
    def exact(self) -> bool:
        return self.kind.startswith("N = infinity")


@dataclass(frozen=True)
class WeightsData:
    """The numbers of the weights the rows use: gamma (the gap), ||B||, the guaranteed rate
    c = gamma / (2 ||B||) and the heuristic c*, delta = |B^T u_1| - u_1^T B u_1 and
    lambda = gamma / |B^T u_2| (the departure heuristic: t_depart ~ (delta / lambda) beta), and
    c1_max, the largest C1 the envelope searches (NaN where undefined, e.g. A not symmetric)."""

    gamma: float
    norm_B: float
    guaranteed: float
    c_star: float
    delta: float
    lam: float
    c1_max: float

    @property
    def departure_slope(self) -> float:
        return self.delta / self.lam if self.lam > 0 else math.nan


def weights_data(att: Attention) -> WeightsData:
    """The WeightsData of an Attention (its beta is ignored)."""
    from .assumptions import reference_rates

    rates = reference_rates(att)
    sp = att.spectrum()
    B, A = np.asarray(att.B), np.asarray(att.A)
    u1 = np.asarray(sp.top.basis)[:, 0]
    delta = float(np.linalg.norm(B.T @ u1) - u1 @ B @ u1)
    lam = math.nan
    if sp.mu2 is not None and sp.gap > 0:
        mu = np.real(np.asarray(sp.eigenvalues))
        scale = max(float(np.max(np.abs(mu))), 1e-300)
        second = np.real(np.asarray(sp.eigenvectors))[:, np.abs(mu - sp.mu2) <= 1e-9 * scale]
        lam = sp.gap / float(np.linalg.norm(B.T @ second, 2))
    sv = np.linalg.svd(B, compute_uv=False)
    speed = float(np.linalg.norm(A, 2) / sv[-1]) if sv[-1] > 0 else math.inf  # ||A|| ||B^-1||
    return WeightsData(
        gamma=float(sp.gap),
        norm_B=float(att.norm_B),
        guaranteed=_num(rates.get("guaranteed")),
        c_star=_num(rates.get("c_star")),
        delta=delta,
        lam=lam,
        c1_max=C1_MAX_FACTOR * speed if math.isfinite(speed) else math.nan,
    )


@dataclass(frozen=True, eq=False)
class ClaimData:
    """Everything the rows read: the saved times (T,), the betas, the weights' numbers, the
    zero-temperature curve (or None) and the early times at which E(t) is read."""

    times: np.ndarray
    betas: tuple[BetaData, ...]
    weights: WeightsData
    zero: ZeroData | None = None
    error_times: tuple[float, ...] = ERROR_TIMES


# --------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Finding:
    """What one row's function finds (the row's fields but its key, claim and kind)."""

    verdict: str
    meaning: str
    measured: float | None = None
    error: float | None = None
    betas: tuple[float, ...] = ()
    left_out: Mapping[str, str] = field(default_factory=dict)
    threshold: float | None = None
    note: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimRow:
    """One row of the claims table: its claim (key, kind, words) and what the data say."""

    key: str
    claim: str
    kind: Kind
    finding: Finding

    def to_dict(self) -> dict[str, Any]:
        """The row as plain JSON: key, claim, kind, measured, error, betas, left_out, verdict,
        meaning, then threshold, note and the details (non-finite numbers as None)."""
        f = self.finding
        row: dict[str, Any] = {
            "key": self.key,
            "claim": self.claim,
            "kind": self.kind,
            "measured": f.measured,
            "error": f.error,
            "betas": list(f.betas),
            "left_out": dict(f.left_out),
            "verdict": f.verdict,
            "meaning": f.meaning,
        }
        if f.threshold is not None:
            row["threshold"] = f.threshold
        if f.note:
            row["note"] = f.note
        return _plain({**row, **f.details})


@dataclass(frozen=True)
class Claim:
    """A row of the table: its stable key, kind, the claim in words, and the function that reads the
    data for it."""

    key: str
    kind: Kind
    claim: str
    row: Callable[[ClaimData], Finding]


def _plain(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | np.ndarray):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


# --------------------------------------------------------------------------------- helpers


def _usable(data: ClaimData, name: str) -> tuple[list[BetaData], dict[str, str]]:
    """The betas whose quantity `name` converged in N with a finite error, and why the others not."""
    used, left = [], {}
    for b in data.betas:
        q = b.quantities.get(name)
        if q is None:
            left[b.label] = f"{name} not measured"
        elif not q.converged:
            left[b.label] = q.reason or f"{name} not converged in N"
        elif not math.isfinite(q.value):
            left[b.label] = f"{name} undefined"
        elif not math.isfinite(q.error):
            left[b.label] = f"{name} has no error estimate (one level)"
        else:
            used.append(b)
    return used, left


def _curves(data: ClaimData) -> tuple[list[BetaData], dict[str, str]]:
    """The betas whose whole W2 curve converged in N (status converged), and why the others not."""
    used = [b for b in data.betas if b.status == "converged"]
    left = {
        b.label: f"status {b.status}: its W2 curve is not converged in N over the saved span"
        for b in data.betas
        if b.status != "converged"
    }
    return used, left


def _span_reason(betas: Sequence[float]) -> str:
    """Why these betas cannot judge a law ("" when they can)."""
    b = sorted(float(x) for x in betas)
    span = b[-1] / b[0] if b else 1.0
    if len(b) >= MIN_BETAS and span >= MIN_SPAN * (1 - 1e-12):
        return ""
    return (
        f"{len(b)} betas spanning a factor {span:.3g}: a law is judged over at least {MIN_BETAS} "
        f"spanning a factor {MIN_SPAN:g}"
    )


def _at_least(value: float, err: float, threshold: float) -> str:
    """A one-sided test of an exponent, value >= threshold > 0: inconsistent when below it by SIGMAS
    errors; consistent when not, and positive by SIGMAS errors (the quantity is seen to vanish);
    else not resolved (too uncertain to tell a vanishing quantity from one that does not)."""
    if not (math.isfinite(value) and math.isfinite(err)):
        return "not resolved"
    if value < threshold - SIGMAS * err:
        return "inconsistent"
    return "consistent" if value - SIGMAS * err > 0 else "not resolved"


def _sign(value: float, err: float) -> str:
    """consistent when value > 0 by SIGMAS errors, inconsistent when < 0 by as much, else not resolved."""
    if not (math.isfinite(value) and math.isfinite(err)):
        return "not resolved"
    if value - SIGMAS * err > 0:
        return "consistent"
    return "inconsistent" if value + SIGMAS * err < 0 else "not resolved"


def _combine(verdicts: Sequence[str]) -> str:
    """Several tests of one row: inconsistent if any is, else consistent if any is, else untested
    (sign only) if any is, else not resolved."""
    for v in ("inconsistent", "consistent", "untested (sign only)"):
        if v in verdicts:
            return v
    return "not resolved"


def _fit(x: Any, y: Any, sigma: Any, name: str) -> LineFit:
    """A weighted line through (x, y) with errors sigma (floored at 1e-300: an exact point weighs most)."""
    s = np.maximum(np.asarray(sigma, dtype=float), 1e-300)
    return fit_line(np.asarray(x, dtype=float), np.asarray(y, dtype=float), s, name)


def _line(fit: LineFit, law: str) -> dict[str, Any]:
    """A fit as the row shows it: the law in words, a (intercept), b (slope), their errors, the rms."""
    return {
        "law": law,
        "a": fit.intercept,
        "a_err": fit.intercept_err,
        "b": fit.slope,
        "b_err": fit.slope_err,
        "rms": fit.rms,
    }


def _regimes(data: ClaimData) -> dict[str, str]:
    """beta -> a flag for the betas without a metastable phase."""
    return {
        b.label: f"no metastable phase: the mass near A's top eigenspace peaks at {b.mass_A_max:.2g} < 1/2"
        for b in data.betas
        if not b.metastable
    }


def _not_resolved(why: str, what: str, **kw: Any) -> Finding:
    return Finding("not resolved", f"the data do not decide {what}: {why}", note=why, **kw)


# ----------------------------------------------------------------------------- theorem rows


def _error_at(data: ClaimData, zero: ZeroData, tau: float, curves: list[BetaData]) -> dict[str, Any]:
    """E(tau) = W2^beta - W2^inf at the saved time nearest tau for the converged curves, fitted
    |E| = K a(beta)^q (and K beta^-q_beta); the test q >= 1."""
    j = int(np.argmin(np.abs(data.times - tau)))
    t = float(data.times[j])
    used, E, S, skipped = [], [], [], {}
    for b in curves:
        e, s = float(b.w2[j] - zero.w2[j]), float(b.w2_error[j] + zero.w2_error[j])
        if not (math.isfinite(e) and math.isfinite(s)) or abs(e) <= SIGMAS * s:
            skipped[b.label] = f"E({t:g}) = {e:.2g} is within {SIGMAS:g} errors ({s:.2g}) of 0"
            continue
        used.append(b.beta)
        E.append(abs(e))
        S.append(s)
    out: dict[str, Any] = {"t": t, "betas": used, "E": E, "E_error": S, "left_out": skipped}
    why = _span_reason(used)
    if why:
        return {**out, "verdict": "not resolved", "note": why}
    rel = np.asarray(S) / np.asarray(E)
    fa = _fit(np.log(temperature_scale(np.asarray(used))), np.log(E), rel, "log a(beta)")
    fb = _fit(np.log(used), np.log(E), rel, "log beta")
    return {
        **out,
        "exponent_a": fa.slope,
        "error": fa.slope_err,
        "exponent_beta": -fb.slope,
        "exponent_beta_error": fb.slope_err,
        "rms": fa.rms,
        "verdict": _at_least(fa.slope, fa.slope_err, 1.0),
    }


def _error_vanishes(data: ClaimData) -> Finding:
    what = "how fast the finite-temperature error vanishes"
    zero = data.zero
    if zero is None or not zero.exact:
        return _not_resolved("there is no N = infinity zero-temperature reference", what)
    curves, left = _curves(data)
    times = [t for t in data.error_times if t <= float(data.times[-1])]
    per_time = [_error_at(data, zero, t, curves) for t in times]
    verdict = _combine([p["verdict"] for p in per_time])
    used = sorted({b for p in per_time for b in p["betas"]})
    for b in curves:
        if b.beta not in used:
            left[b.label] = "; ".join(p["left_out"][b.label] for p in per_time if b.label in p["left_out"])
    decided = [p for p in per_time if p["verdict"] in ("consistent", "inconsistent")]
    worst = min(decided, key=lambda p: p["exponent_a"]) if decided else None
    details = {"per_time": [{k: v for k, v in p.items() if k != "left_out"} for p in per_time]}
    if worst is None:
        why = "; ".join(f"t = {p['t']:g}: {p.get('note', 'E too uncertain')}" for p in per_time)
        return _not_resolved(why or "no early time", what, betas=tuple(used), left_out=left, details=details)
    q, err, qb = worst["exponent_a"], worst["error"], worst["exponent_beta"]
    if verdict == "inconsistent":
        meaning = (
            f"the finite-temperature error at fixed t falls more slowly than a(beta) (like a^{q:.2g} at "
            f"t = {worst['t']:g}): converged in N, this contradicts the stability estimate of Theorem 1"
        )
    else:
        pace = "faster than" if q - SIGMAS * err > 1 else "at least as fast as"
        meaning = (
            f"the finite-temperature error at fixed t falls like a(beta)^{q:.2g} (about beta^-{qb:.2g}): "
            f"{pace} the a(beta) the theorem guarantees"
        )
    return Finding(verdict, meaning, q, err, tuple(used), left, 1.0, details=details)


def _duration_at(data: ClaimData, name: str) -> dict[str, Any]:
    """t_dev(delta) of the betas where it converged, fitted t_dev = A + b log beta; the sign of b."""
    used, left = _usable(data, name)
    out: dict[str, Any] = {"delta": DEVIATIONS[name], "quantity": name, "betas": [b.beta for b in used]}
    out["left_out"] = left
    if len(used) < 2:
        return {**out, "verdict": "not resolved", "note": f"{len(used)} beta(s) with a converged {name}"}
    t = [b.quantities[name].value for b in used]
    s = [b.quantities[name].error for b in used]
    f = _fit(np.log(out["betas"]), t, s, "log beta")
    verdict = _sign(f.slope, f.slope_err)
    why = _span_reason(out["betas"])
    if why:
        verdict, out["note"] = "untested (sign only)", why
    return {
        **out,
        "t_dev": t,
        "error": s,
        "b": f.slope,
        "b_err": f.slope_err,
        "a": f.intercept,
        "rms": f.rms,
        "verdict": verdict,
    }


def _guaranteed_duration(data: ClaimData) -> Finding:
    what = "whether concentration lasts a time of order log beta"
    if data.zero is None or not data.zero.exact:
        return _not_resolved("t_dev needs the N = infinity zero-temperature reference", what)
    per = [_duration_at(data, name) for name in DEVIATIONS]
    verdict = _combine([p["verdict"] for p in per])
    used = sorted({b for p in per for b in p["betas"]})
    left = {k: v for p in per for k, v in p.pop("left_out").items() if float(k) not in used}
    fitted = [p for p in per if "b" in p]
    details: dict[str, Any] = {"per_threshold": per}
    if not fitted:
        why = "; ".join(f"{p['quantity']}: {p['note']}" for p in per)
        return _not_resolved(why, what, left_out=left, details=details)
    worst = min(fitted, key=lambda p: p["b"])
    main = next((p for p in fitted if p["quantity"] == "t_dev"), worst)
    c = data.weights.guaranteed
    implied = 1.0 / (2.0 * main["b"]) - c if main["b"] > 0 else math.nan
    details["implied_C1"] = implied
    if verdict == "consistent":
        longer = (
            f"; longer than the bound's balance time log(1/a)/(C1 + c) for any C1 >= 0 (t_dev: implied C1 "
            f"= {implied:.2g})"
            if implied < 0
            else f" (implied C1 = {implied:.2g})"
        )
        slopes = sorted(p["b"] for p in fitted)
        meaning = (
            f"concentration lasts at least a time growing like log beta (t_dev(delta) ~ b log beta, b = "
            f"{slopes[0]:.2g} to {slopes[-1]:.2g} for delta = 5 to 20 %), as the theorem guarantees{longer}"
        )
    elif verdict == "inconsistent":
        meaning = (
            "the time the finite-beta curve leaves the zero-temperature one falls with beta: converged in N, "
            "this contradicts the guaranteed concentration up to a time of order log beta"
        )
    else:
        meaning = f"only {len(used)} betas: the growth of t_dev with log beta is not tested ({verdict})"
    return Finding(verdict, meaning, worst["b"], worst["b_err"], tuple(used), left, 0.0, details=details)


@dataclass(frozen=True)
class Envelope:
    """The smallest constants of Theorem 1's bound K1 a(beta) e^{C1 t} + K2 e^{-c t} that keep every
    converged curve (`betas`; the others in `left_out`) below it: c = gamma / (2 ||B||); K2 the
    smallest with W2^inf(t) <= K2 e^{-c t} (from the N = infinity curve, with its error); C1 the
    smallest on a grid up to c1_max at which the K1 each beta needs (K1_per_beta) does not grow with
    beta (slope of log K1_beta against log beta, `growth`, at most SIGMAS errors), C1_error the
    further C1 until it falls by SIGMAS errors (at least one grid step); K1 the largest K1_beta
    there; p0 = c / (c + C1), the bound's exponent of a at its minimum. `reason`: why there are no
    constants (too few curves, no reference); C1 = NaN with no reason: no C1 up to c1_max makes K1
    uniform in beta."""

    betas: tuple[float, ...]
    left_out: Mapping[str, str]
    reason: str = ""
    c: float = math.nan
    K2: float = math.nan
    C1: float = math.nan
    C1_error: float = math.nan
    K1: float = math.nan
    c1_max: float = math.nan
    K1_per_beta: Mapping[str, float] = field(default_factory=dict)
    growth: float = math.nan
    growth_error: float = math.nan

    @property
    def p0(self) -> float:
        return self.c / (self.c + self.C1)

    def bound(self, t: np.ndarray, beta: float) -> np.ndarray:
        """The bound curve at beta on times t (T,)."""
        return self.K1 * temperature_scale(beta) * np.exp(self.C1 * t) + self.K2 * np.exp(-self.c * t)


def _needed_K1(data: ClaimData, curves: list[BetaData], K2: float, c: float, C1s: np.ndarray):
    """The K1 each curve needs at each C1 (B, G), and its error (B, G) from the curves' errors."""
    t = data.times
    floor = K2 * np.exp(-c * t)
    growth = np.exp(C1s[:, None] * t[None, :])  # (G, T)
    need, err = [], []
    for b in curves:
        a = float(temperature_scale(b.beta))
        hi, lo, mid = (
            (np.maximum(b.w2 + sgn * b.w2_error - floor, 0.0)[None, :] / (a * growth)).max(axis=1)
            for sgn in (1.0, -1.0, 0.0)
        )
        need.append(mid)
        err.append(0.5 * (hi - lo))
    return np.array(need), np.array(err)


def _growth(betas: np.ndarray, need: np.ndarray, err: np.ndarray) -> tuple[float, float]:
    """Slope of log K1_beta against log beta and its error ((0, 0) when fewer than two betas need
    any K1: nothing grows)."""
    pos = need > 0
    if pos.sum() < 2:
        return 0.0, 0.0
    rel = np.maximum(err[pos] / need[pos], 1e-12)
    f = _fit(np.log(betas[pos]), np.log(need[pos]), rel, "log beta")
    return f.slope, f.slope_err


def bound_envelope(data: ClaimData) -> Envelope:
    """The Envelope of the converged curves of `data` (see Envelope)."""
    curves, left = _curves(data)
    betas = tuple(b.beta for b in curves)
    zero, w = data.zero, data.weights
    if zero is None or not zero.exact:
        return Envelope(betas, left, "K2 needs the N = infinity zero-temperature reference")
    if not (math.isfinite(w.guaranteed) and math.isfinite(w.c1_max)):
        return Envelope(betas, left, "the guaranteed rate gamma/(2 ||B||) is undefined (A not symmetric?)")
    if _span_reason(betas):
        return Envelope(betas, left, _span_reason(betas))
    c = w.guaranteed
    K2 = float(np.max((zero.w2 + zero.w2_error) * np.exp(c * data.times)))
    C1s = np.linspace(0.0, w.c1_max, C1_STEPS + 1)
    need, err = _needed_K1(data, curves, K2, c, C1s)
    slopes = [_growth(np.array(betas), need[:, g], err[:, g]) for g in range(C1s.size)]
    uniform = [s - SIGMAS * e <= 0 for s, e in slopes]
    if not any(uniform):
        return Envelope(
            betas, left, "", c, K2, c1_max=w.c1_max, growth=slopes[-1][0], growth_error=slopes[-1][1]
        )
    g = uniform.index(True)
    clearly = [k for k in range(g, C1s.size) if slopes[k][0] + SIGMAS * slopes[k][1] <= 0]
    step = float(C1s[1] - C1s[0])
    C1_err = float(C1s[clearly[0]] - C1s[g]) if clearly else step
    return Envelope(
        betas,
        left,
        "",
        c,
        K2,
        C1=float(C1s[g]),
        C1_error=max(C1_err, step),
        K1=float(need[:, g].max()),
        c1_max=w.c1_max,
        K1_per_beta={b.label: float(need[i, g]) for i, b in enumerate(curves)},
        growth=slopes[g][0],
        growth_error=slopes[g][1],
    )


def _bound_envelope(data: ClaimData) -> Finding:
    env = bound_envelope(data)
    if env.reason:
        what = "whether the converged curves lie under one bound uniform in beta"
        return _not_resolved(env.reason, what, betas=env.betas, left_out=env.left_out)
    details = {
        "constants": {"K1": env.K1, "C1": env.C1, "K2": env.K2, "c": env.c, "p0": env.p0},
        "C1_max": env.c1_max,
        "K1_per_beta": dict(env.K1_per_beta),
        "K1_growth": {"slope": env.growth, "error": env.growth_error},
    }
    if not math.isfinite(env.C1):
        meaning = (
            "no K1 uniform in beta keeps the converged curves below the bound for any C1 <= "
            f"{env.c1_max:.3g}: the K1 each beta needs grows with beta, against Theorem 1"
        )
        return Finding(
            "inconsistent", meaning, None, None, env.betas, env.left_out, env.c1_max, details=details
        )
    meaning = (
        f"every converged curve lies below {env.K1:.3g} a(beta) e^({env.C1:.3g} t) + {env.K2:.3g} "
        f"e^(-{env.c:.3g} t), one K1 for all betas: the bound holds with constants uniform in beta"
    )
    return Finding(
        "consistent", meaning, env.C1, env.C1_error, env.betas, env.left_out, env.c1_max, details=details
    )


def _local_exponents(m: np.ndarray, s: np.ndarray, a: np.ndarray) -> list[dict[str, float]]:
    """The exponent of min W2 in a(beta) between consecutive betas, with its error."""
    out = []
    for i in range(m.size - 1):
        da = math.log(a[i + 1] / a[i])
        p = math.log(m[i + 1] / m[i]) / da
        out.append({"p": p, "error": (s[i] / m[i] + s[i + 1] / m[i + 1]) / abs(da)})
    return out


def _best_concentration(data: ClaimData) -> Finding:
    what = "how close the best concentration comes"
    used, left = _usable(data, "min_w2")
    betas = tuple(b.beta for b in used)
    env = bound_envelope(data)
    why = _span_reason(betas)
    if not why and (env.reason or not math.isfinite(env.C1)):
        why = f"p0 needs the bound envelope: {env.reason or 'no C1 makes its K1 uniform in beta'}"
    if why:
        return _not_resolved(why, what, betas=betas, left_out=left)
    m = np.array([b.quantities["min_w2"].value for b in used])
    s = np.array([b.quantities["min_w2"].error for b in used])
    a = np.asarray(temperature_scale(np.array(betas)))
    f = _fit(np.log(a), np.log(m), s / m, "log a(beta)")
    rises = [
        f"{betas[i]:g} -> {betas[i + 1]:g}"
        for i in range(m.size - 1)
        if m[i + 1] - m[i] > SIGMAS * (s[i] + s[i + 1])
    ]
    verdict = "inconsistent" if rises else _at_least(f.slope, f.slope_err, env.p0)
    details = {"local_exponents": _local_exponents(m, s, a), "rms": f.rms, "C": math.exp(f.intercept)}
    if rises:
        meaning = f"min W2 grows with beta ({', '.join(rises)}): converged in N, against Theorem 1"
    elif verdict == "inconsistent":
        meaning = (
            f"min W2 falls like a(beta)^{f.slope:.2g}, more slowly than the a^{env.p0:.2g} of the bound's "
            "minimum: converged in N, against Theorem 1's guaranteed best concentration"
        )
    elif verdict == "consistent":
        pace = "faster than" if f.slope - SIGMAS * f.slope_err > env.p0 else "as fast as"
        meaning = (
            f"min W2 falls like a(beta)^{f.slope:.2g}, {pace} the a^{env.p0:.2g} the theorem guarantees: "
            "the data come at least as close as the bound"
        )
    else:
        meaning = f"the exponent of min W2 in a(beta) is too uncertain ({f.slope:.2g} ± {f.slope_err:.2g})"
    return Finding(verdict, meaning, f.slope, f.slope_err, betas, left, env.p0, details=details)


def _late_windows(zero: ZeroData, times: np.ndarray) -> list[Mapping[str, Any]]:
    """The local rates of the windows in the second half of the saved span (at least the last)."""
    rates = list(zero.local_rates)
    half = 0.5 * float(times[0] + times[-1])
    return [r for r in rates if r["window"][0] >= half - 1e-9] or rates[-1:]


def _zero_rate_guaranteed(data: ClaimData) -> Finding:
    what = "the zero-temperature rate"
    zero, c = data.zero, data.weights.guaranteed
    if zero is None or not zero.exact or not zero.local_rates:
        why = "no N = infinity zero-temperature reference (a cloud misses the slow tokens near P_1 x = 0)"
        return _not_resolved(why, what)
    if not math.isfinite(c):
        return _not_resolved("the guaranteed rate gamma/(2 ||B||) is undefined", what)
    late = _late_windows(zero, data.times)
    worst = min(late, key=lambda r: r["rate"])
    err = _num(worst.get("err")) if worst.get("err") is not None else 0.0
    ok = all(r["rate"] + SIGMAS * (_num(r.get("err")) or 0.0) >= c for r in late)
    window = "[{:g}, {:g}]".format(*worst["window"])
    details = {"late_windows": [dict(r) for r in late], "beta": "inf"}
    if ok:
        meaning = (
            f"at zero temperature W2 decays at {worst['rate']:.4g} or faster in the late windows, at least "
            f"the guaranteed gamma/(2 ||B||) = {c:.4g} of Corollary 2"
        )
        return Finding("consistent", meaning, worst["rate"], err, (), {}, c, details=details)
    meaning = (
        f"the zero-temperature W2 decays at {worst['rate']:.4g} on {window}, below the guaranteed "
        f"{c:.4g}: against Corollary 2"
    )
    return Finding("inconsistent", meaning, worst["rate"], err, (), {}, c, details=details)


# ---------------------------------------------------------------- heuristic and conjecture rows


def _zero_rate_heuristic(data: ClaimData) -> Finding:
    zero, c_star = data.zero, data.weights.c_star
    if zero is None or not zero.exact or not zero.local_rates or not math.isfinite(c_star):
        why = "no N = infinity zero-temperature reference, or no c* (A not symmetric)"
        return Finding("not resolved", f"c* is not tested: {why}", note=why)
    rates = list(zero.local_rates)
    last = rates[-1]
    err = _num(last.get("err")) if last.get("err") is not None else 0.0
    gaps = [abs(r["rate"] - c_star) for r in rates]
    near = gaps[-1] <= RATE_REL_TOL * c_star + SIGMAS * err
    errs = [_num(r.get("err")) if r.get("err") is not None else 0.0 for r in rates]
    slack = [SIGMAS * e + 1e-9 * c_star for e in errs]  # a gap may stay put within its error
    closing = all(b <= a + s for (a, b), s in zip(itertools.pairwise(gaps), slack[1:], strict=True))
    window = "[{:g}, {:g}]".format(*last["window"])
    details = {"c_star": c_star, "windows": [dict(r) for r in rates], "beta": "inf"}
    if near and closing:
        verdict = "matches"
        meaning = (
            f"the last window's rate {last['rate']:.5g} on {window} is within 1 % of c* = {c_star:.5g}, "
            "approached window by window"
        )
    elif closing and len(gaps) >= 2:
        verdict = "not resolved"
        meaning = (
            f"the rates approach c* = {c_star:.4g} window by window, the last ({last['rate']:.4g}) not yet "
            "within 1 %: a longer t_max decides"
        )
    elif near:
        verdict = "not resolved"
        meaning = (
            f"the last rate is within 1 % of c* = {c_star:.4g}, but the late rates do not approach it "
            "steadily"
        )
    else:
        verdict = "does not match"
        meaning = f"the late rates ({last['rate']:.4g} on {window}) do not approach c* = {c_star:.4g}"
    return Finding(verdict, meaning, last["rate"], err, (), {}, c_star, details=details)


def _terminal_phase(data: ClaimData) -> Finding:
    used, left = _usable(data, "t_depart")
    for label, flag in _regimes(data).items():
        if label in left:
            left[label] = f"{flag}, so no departure"
    if not used:
        why = (
            "no beta has a departure converged in N (with N tokens the cluster leaves once the last token "
            "near the softmax maximiser has passed, after a time ~ log N)"
        )
        return Finding(
            "not resolved", f"Conjecture 1 is not tested: {why}", betas=(), left_out=left, note=why
        )
    masses = {b.label: b.mass_V_final for b in used}
    low = [k for k, m in masses.items() if not m >= MOST]
    worst = min(masses.values())
    details = {"mass_V_final": masses}
    betas = tuple(b.beta for b in used)
    if low:
        meaning = (
            f"after a converged departure, less than half the mass is near V's top eigenspace at t_max "
            f"(beta = {', '.join(low)}): the terminal phase is not seen"
        )
        return Finding("does not match", meaning, worst, None, betas, left, MOST, details=details)
    meaning = (
        "after the departure, most of the mass sits near V's top eigenspace at t_max, as Conjecture 1 says "
        f"(at least {worst:.3g})"
    )
    return Finding("matches", meaning, worst, None, betas, left, MOST, details=details)


# ---------------------------------------------------------------------------- observed rows


def _observed(data: ClaimData, name: str) -> tuple[list[BetaData], dict[str, str], dict[str, str]]:
    """The betas an observed law of `name` is fitted over, the betas left out with why, and the
    regimes (betas without a metastable phase): the converged betas with a metastable phase, or all
    converged betas when fewer than MIN_FIT have one (the regimes then flag those in the fit)."""
    used, left = _usable(data, name)
    regimes = _regimes(data)
    for b in data.betas:
        if b.label in left and b.label in regimes:
            q = b.quantities.get(name)
            undefined = q is None or not math.isfinite(q.value)
            left[b.label] = (
                f"{regimes[b.label]}, so no {name}" if undefined else f"{regimes[b.label]}; {left[b.label]}"
            )
    meta = [b for b in used if b.label not in regimes]
    if len(meta) < MIN_FIT:
        return used, left, regimes
    for b in used:
        if b.label in regimes:
            left[b.label] = regimes[b.label]
    return meta, left, regimes


def _time_fits(used: list[BetaData], name: str, symbol: str) -> dict[str, dict[str, Any]]:
    betas = np.array([b.beta for b in used])
    t = [b.quantities[name].value for b in used]
    s = [b.quantities[name].error for b in used]
    return {
        "log_beta": _line(_fit(np.log(betas), t, s, "log beta"), f"{symbol} = a + b log beta"),
        "beta": _line(_fit(betas, t, s, "beta"), f"{symbol} = a + b beta"),
    }


def _in_fit(used: list[BetaData], regimes: dict[str, str]) -> str:
    """A note on the betas without a metastable phase that a law was fitted over ("" if none)."""
    flagged = [b.label for b in used if b.label in regimes]
    if not flagged:
        return ""
    few = f"in the fit: fewer than {MIN_FIT} have one"
    verb = "has" if len(flagged) == 1 else "have"
    return f"; beta = {', '.join(flagged)} {verb} no metastable phase ({few})"


def _too_few(what: str, used: list[BetaData], left: dict[str, str], regimes: dict[str, str]) -> Finding:
    why = f"{len(used)} beta(s) to fit (at least {MIN_FIT})"
    return Finding(
        OBSERVED,
        f"no law of {what} is fitted: {why}",
        betas=tuple(b.beta for b in used),
        left_out=left,
        note=why,
        details={"regimes": regimes} if regimes else {},
    )


def _law_t_star(data: ClaimData) -> Finding:
    used, left, regimes = _observed(data, "t_star")
    if len(used) < MIN_FIT:
        return _too_few("t*", used, left, regimes)
    fits = _time_fits(used, "t_star", "t*")
    best = min(fits, key=lambda k: fits[k]["rms"])
    other = "beta" if best == "log_beta" else "log_beta"
    f, g = fits[best], fits[other]
    meaning = (
        f"observed: {f['law']} with b = {f['b']:.3g} fits with rms {f['rms']:.2g} (against {g['rms']:.2g} "
        f"for {g['law']}); the theorem bounds W2, it says nothing about the time of its minimum"
        f"{_in_fit(used, regimes)}"
    )
    bands = {b.label: list(b.t_band) for b in used}
    details = {"fits": fits, "law": f["law"], "band": bands, "regimes": regimes}
    return Finding(OBSERVED, meaning, f["b"], f["b_err"], tuple(b.beta for b in used), left, details=details)


def _law_departure(data: ClaimData) -> Finding:
    used, left, regimes = _observed(data, "t_depart")
    h = data.weights.departure_slope
    if len(used) < MIN_FIT:
        return _too_few("t_depart", used, left, regimes)
    fits = _time_fits(used, "t_depart", "t_depart")
    f, g = fits["beta"], fits["log_beta"]
    meaning = (
        f"observed: t_depart = {f['a']:.2g} + {f['b']:.3g} beta (rms {f['rms']:.2g}; {g['rms']:.2g} against "
        f"log beta), next to the heuristic slope delta/lambda = {h:.3g} of the weights (a heuristic, "
        "not the theorem)"
    )
    details = {
        "fits": fits,
        "heuristic_slope": h,
        "delta": data.weights.delta,
        "lambda": data.weights.lam,
        "regimes": regimes,
    }
    return Finding(
        OBSERVED, meaning, f["b"], f["b_err"], tuple(b.beta for b in used), left, h, details=details
    )


def _law_min_w2(data: ClaimData) -> Finding:
    used, left, regimes = _observed(data, "min_w2")
    if len(used) < MIN_FIT:
        return _too_few("min W2", used, left, regimes)
    betas = np.array([b.beta for b in used])
    m = np.array([b.quantities["min_w2"].value for b in used])
    rel = np.array([b.quantities["min_w2"].error for b in used]) / m
    fa = _fit(np.log(temperature_scale(betas)), np.log(m), rel, "log a(beta)")
    fb = _fit(np.log(betas), np.log(m), rel, "log beta")
    C = float(np.exp(np.average(np.log(betas * m), weights=1.0 / rel**2)))
    inverse = {"law": "min W2 = C / beta", "C": C, "rms": float(np.sqrt(np.mean(np.log(betas * m / C) ** 2)))}
    fits = {
        "a_power": {**_line(fa, "log min W2 = log C + p log a(beta)"), "rms": fa.rms},
        "beta_power": {**_line(fb, "log min W2 = log C - q log beta"), "rms": fb.rms},
        "inverse_beta": inverse,
    }
    meaning = (
        f"observed: min W2 ~ beta^-{-fb.slope:.3g} (rms {fb.rms:.2g} in log), ~ a(beta)^{fa.slope:.3g} (rms "
        f"{fa.rms:.2g}), beta min W2 = {C:.3g} (rms {inverse['rms']:.2g}); the theorem bounds min W2, it "
        f"does not say how fast it falls{_in_fit(used, regimes)}"
    )
    details = {
        "fits": fits,
        "beta_min_w2": {b.label: b.beta * mm for b, mm in zip(used, m, strict=True)},
        "regimes": regimes,
    }
    return Finding(OBSERVED, meaning, -fb.slope, fb.slope_err, tuple(betas.tolist()), left, details=details)


# ---------------------------------------------------------------------------------- registry

#: the rows of the claims table, in the order it lists them (one line each)
CLAIMS: dict[str, Claim] = {
    c.key: c
    for c in (
        Claim(
            "error_vanishes",
            "theorem",
            "the error E(t) = W2^beta(t) - W2^inf(t) at fixed t vanishes at "
            "least like a(beta) = sqrt(log(beta+1)/beta)",
            _error_vanishes,
        ),
        Claim(
            "guaranteed_duration",
            "theorem",
            "concentration lasts at least a time of order log beta: "
            "t_dev(delta) grows with log beta (delta = 5, 10, 20 %)",
            _guaranteed_duration,
        ),
        Claim(
            "bound_envelope",
            "theorem",
            "every converged curve lies below K1 a(beta) e^(C1 t) + K2 e^(-c t) "
            "with constants uniform in beta",
            _bound_envelope,
        ),
        Claim(
            "best_concentration",
            "theorem",
            "min_t W2 is at least as small as C a(beta)^p0, p0 = c/(c + C1) from the envelope",
            _best_concentration,
        ),
        Claim(
            "zero_rate_guaranteed",
            "theorem",
            "at zero temperature W2 decays at least at gamma/(2 ||B||) (late windows)",
            _zero_rate_guaranteed,
        ),
        Claim(
            "zero_rate_heuristic",
            "heuristic",
            "the zero-temperature rate tends to c* (the last window within 1 %)",
            _zero_rate_heuristic,
        ),
        Claim(
            "terminal_phase",
            "conjecture",
            "after the departure, the mass moves to V's top eigenspace (Conjecture 1)",
            _terminal_phase,
        ),
        Claim("law_t_star", "observed", "the argmin t* of W2 against log beta and against beta", _law_t_star),
        Claim(
            "law_departure",
            "observed",
            "the departure time against beta and log beta, beside the heuristic slope delta/lambda",
            _law_departure,
        ),
        Claim("law_min_w2", "observed", "min_t W2 against a(beta), beta^-q and C/beta", _law_min_w2),
    )
}


def claims_table(data: ClaimData) -> list[ClaimRow]:
    """Every row of CLAIMS, in order, read from `data`."""
    return [ClaimRow(c.key, c.claim, c.kind, c.row(data)) for c in CLAIMS.values()]


def verdict_counts(rows: Sequence[ClaimRow | Mapping[str, Any]]) -> dict[str, int]:
    """How many rows have each verdict."""
    out: dict[str, int] = {}
    for r in rows:
        v = r["verdict"] if isinstance(r, Mapping) else r.finding.verdict
        out[v] = out.get(v, 0) + 1
    return out


def not_applicable(rows: Sequence[Mapping[str, Any]], reason: str) -> list[dict[str, Any]]:
    """The rows (as `ClaimRow.to_dict` gives them) when the weights miss an assumption of the
    theorem: each "theorem" row's verdict is NOT_APPLICABLE with `reason` as its note (the theorem
    says nothing about these weights; its measured numbers stay, as laws of the data); the other
    kinds keep their own verdicts."""
    return [
        {**r, "verdict": NOT_APPLICABLE, "note": reason} if r.get("kind") == "theorem" else dict(r)
        for r in rows
    ]
