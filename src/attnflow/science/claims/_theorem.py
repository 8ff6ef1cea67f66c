"""The theorem's rows of the claims table, each one-sided: the finite-temperature error vanishes at
least like a(beta), concentration lasts at least a time of order log beta, every converged curve lies
under one bound envelope (`bound_envelope`), the best concentration is at least as good as the
bound's, and the zero-temperature rate is at least the guaranteed one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..convergence import DEVIATIONS
from ..fits import temperature_scale
from ..uncertainty import finite
from ._records import (
    C1_STEPS,
    SIGMAS,
    BetaData,
    ClaimData,
    Finding,
    ZeroData,
    _at_least,
    _combine,
    _curves,
    _decided_by,
    _fit,
    _not_resolved,
    _sign,
    _span_reason,
    _usable,
)

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
    note = _decided_by([f"t = {p['t']:g}" for p in per_time], [p["verdict"] for p in per_time])
    return Finding(verdict, meaning, q, err, tuple(used), left, 1.0, note=note, details=details)


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
    note = _decided_by([p["quantity"] for p in per], [p["verdict"] for p in per])
    return Finding(
        verdict, meaning, worst["b"], worst["b_err"], tuple(used), left, 0.0, note=note, details=details
    )


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
    # the bound is about beta -> infinity: the verdict rests on the exponent between the two largest
    # betas, not on a line through all of them (local exponents that differ are not one power law)
    local = _local_exponents(m, s, a)
    p, p_err = local[-1]["p"], local[-1]["error"]
    verdict = "inconsistent" if rises else _at_least(p, p_err, env.p0)
    details = {"local_exponents": local, "fit": f.slope, "fit_error": f.slope_err, "rms": f.rms}
    span = f"between beta = {betas[-2]:g} and {betas[-1]:g}"
    scatter = ", ".join(f"{e['p']:.2g}" for e in local)
    law = f" (local exponents from the smallest betas up: {scatter})" if len(local) > 1 else ""
    if rises:
        meaning = f"min W2 grows with beta ({', '.join(rises)}): converged in N, against Theorem 1"
    elif verdict == "inconsistent":
        meaning = (
            f"{span} min W2 falls like a(beta)^{p:.2g}, more slowly than the a^{env.p0:.2g} of the bound's "
            f"minimum{law}: converged in N, against Theorem 1's guaranteed best concentration"
        )
    elif verdict == "consistent":
        pace = "faster than" if p - SIGMAS * p_err > env.p0 else "as fast as"
        meaning = (
            f"{span} min W2 falls like a(beta)^{p:.2g}, {pace} the a^{env.p0:.2g} the theorem guarantees"
            f"{law}: the data come at least as close as the bound"
        )
    else:
        meaning = f"{span} the exponent of min W2 in a(beta) is too uncertain ({p:.2g} ± {p_err:.2g}){law}"
    return Finding(verdict, meaning, p, p_err, betas, left, env.p0, details=details)


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
    err = finite(worst.get("err")) if worst.get("err") is not None else 0.0
    ok = all(r["rate"] + SIGMAS * (finite(r.get("err")) or 0.0) >= c for r in late)
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
