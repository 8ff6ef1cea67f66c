"""The heuristic, conjecture and observed rows of the claims table: the zero-temperature rate
against c*, Conjecture 1's terminal phase, and the laws of t*, the departure and min W2, reported as
laws beside the theorem, never as verdicts on it."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ..fits import temperature_scale
from ..uncertainty import finite
from ._records import (
    MIN_FIT,
    MOST,
    OBSERVED,
    RATE_REL_TOL,
    SIGMAS,
    BetaData,
    ClaimData,
    Finding,
    _fit,
    _line,
    _regimes,
    _usable,
)

# ---------------------------------------------------------------- heuristic and conjecture rows


def _zero_rate_heuristic(data: ClaimData) -> Finding:
    zero, c_star = data.zero, data.weights.c_star
    if zero is None or not zero.exact or not zero.local_rates or not math.isfinite(c_star):
        why = "no N = infinity zero-temperature reference, or no c* (A not symmetric)"
        return Finding("not resolved", f"c* is not tested: {why}", note=why)
    rates = list(zero.local_rates)
    last = rates[-1]
    err = finite(last.get("err")) if last.get("err") is not None else 0.0
    gaps = [abs(r["rate"] - c_star) for r in rates]
    near = gaps[-1] <= RATE_REL_TOL * c_star + SIGMAS * err
    errs = [finite(r.get("err")) if r.get("err") is not None else 0.0 for r in rates]
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
        regimes = _regimes(data)
        if data.betas and all(b.label in regimes for b in data.betas):
            why = "no beta has a metastable phase, so none departs (the terminal phase follows a departure)"
        else:
            why = (
                "no beta has a departure converged in N (with N tokens the cluster leaves once the last "
                "token near the softmax maximiser has passed, after a time ~ log N)"
            )
        return Finding(
            "not resolved", f"Conjecture 1 is not tested: {why}", betas=(), left_out=left, note=why
        )
    t_max, travel = float(data.times[-1]), data.weights.travel
    late = [b for b in used if t_max - b.quantities["t_depart"].value < travel]
    for b in late:  # departed too late for the cluster to have reached V's eigenspace by t_max
        t = b.quantities["t_depart"].value
        left[b.label] = (
            f"departed at t = {t:.3g}, {t_max - t:.3g} before t_max: a cluster moving as one token needs "
            f"{travel:.3g} to reach V's top eigenspace"
        )
    used = [b for b in used if b not in late]
    if not used:
        why = "no beta departed early enough for its cluster to reach V's top eigenspace by t_max"
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
    regimes (betas without a metastable phase). A law never mixes the two regimes: the converged
    betas with a metastable phase, or, when those are fewer than MIN_FIT and fewer than the others,
    the converged betas without one (the law of that regime, and said so)."""
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
    rest = [b for b in used if b.label in regimes]
    chosen = meta if len(meta) >= MIN_FIT or len(meta) >= len(rest) else rest
    for b in used:
        if b not in chosen:
            left[b.label] = regimes.get(b.label, "a metastable phase: not the regime of the betas fitted")
    return chosen, left, regimes


def _time_fits(used: list[BetaData], name: str, symbol: str) -> dict[str, dict[str, Any]]:
    betas = np.array([b.beta for b in used])
    t = [b.quantities[name].value for b in used]
    s = [b.quantities[name].error for b in used]
    return {
        "log_beta": _line(_fit(np.log(betas), t, s, "log beta"), f"{symbol} = a + b log beta"),
        "beta": _line(_fit(betas, t, s, "beta"), f"{symbol} = a + b beta"),
    }


def _in_fit(used: list[BetaData], regimes: dict[str, str]) -> str:
    """A note when a law was fitted over the betas without a metastable phase ("" otherwise)."""
    if not used or any(b.label not in regimes for b in used):
        return ""
    return "; every beta fitted has no metastable phase: the law of that regime, not of the metastable one"


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


def _law_predicted_clusters(data: ClaimData) -> Finding:
    """The metastable cluster count against the linearisation's, over the betas where it applies."""
    used = [b for b in data.betas if b.clusters is not None and math.isfinite(b.clusters.measured)]
    left = {
        b.label: "no metastable plateau of the count among the saved times"
        for b in data.betas
        if b.clusters is not None and b not in used
    }
    if all(b.clusters is None for b in data.betas):
        why = "the linearisation speaks of one head with B = b I and V = v I (softmax or usa) in d = 2 or 3"
        return Finding(OBSERVED, f"no cluster count is predicted: {why}", note=why)
    if not used:
        return Finding(OBSERVED, "no beta reached a metastable plateau to compare", left_out=left)
    agree = float(np.mean([b.clusters.agree for b in used if b.clusters is not None]))
    per = [{"beta": b.beta, **vars(b.clusters)} for b in used]
    meaning = (
        f"observed: the metastable state has the predicted number of clusters in {100 * agree:.0f} % of "
        f"the runs over {len(used)} beta(s) (the linearisation about the uniform measure: k* = argmax_k "
        "k^2 I_k(beta) on the circle); a heuristic beside the theorem, not about it"
    )
    return Finding(
        OBSERVED, meaning, agree, None, tuple(b.beta for b in used), left, details={"per_beta": per}
    )
