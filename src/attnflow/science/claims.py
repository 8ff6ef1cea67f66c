"""The claims table: each claim of the paper set against converged measurements.

One row per claim (docs/math.md, "The results to reproduce"):

    claim      what is claimed
    measured   the number that decides it (a slope, an exponent, a rate, a fraction)
    error      its uncertainty (fit error with the N-convergence error and the seed spread folded in)
    betas      the betas the row uses; `left_out` says which were left out and why
    verdict    "consistent", "inconsistent" or "not resolved"

A row only uses betas whose quantities converged in N (`attnflow.science.convergence`); with fewer than
MIN_BETAS of them it says "not resolved". A verdict needs the measured number to clear its
threshold by SIGMAS errors; otherwise the data do not decide ("not resolved"). A law "y grows like
log beta" (or "like a power of a(beta)") also needs the data to lie on it: from 4 betas on, a
quadratic term beyond SIGMAS errors (the curve bends away from the law, e.g. t* growing like beta)
makes the row "inconsistent". The table reports
what the data say: when converged data contradict a claim, the row says "inconsistent".
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

__all__ = ["MIN_BETAS", "NOT_APPLICABLE", "SIGMAS", "claims_table", "not_applicable", "verdict_counts"]

MIN_BETAS = 3  # fits over fewer converged betas decide nothing
SIGMAS = 2.0  # a verdict needs the measured number this many errors away from the threshold
CONCENTRATED = 0.5  # W2(t*) <= this fraction of W2(0): the cloud has come close to Pi_# rho_0
TERMINAL_MASS = 0.5  # mass near V's top eigenspace at t_max for the terminal phase
RATE_REL_TOL = 0.01  # the last zero-temperature window within 1 % of c*
NOT_APPLICABLE = "not applicable"  # the verdict of every row of a run the theorem does not speak about


def _row(claim: str, measured: Any, error: Any, betas: list[float], verdict: str, **extra: Any) -> dict:
    return {"claim": claim, "measured": measured, "error": error, "betas": betas, "verdict": verdict, **extra}


def _sign_verdict(value: float, err: float) -> str:
    """consistent when value > 0 by SIGMAS errors, inconsistent when < 0 by as much, else undecided."""
    if not (math.isfinite(value) and math.isfinite(err)):
        return "not resolved"
    if value - SIGMAS * err > 0:
        return "consistent"
    if value + SIGMAS * err < 0:
        return "inconsistent"
    return "not resolved"


def _usable(per_beta: dict[float, dict], key: str) -> tuple[list[float], dict[str, str]]:
    """Betas whose `key` converged, and for the others why they are left out."""
    used, left = [], {}
    for beta, rec in sorted(per_beta.items()):
        q = rec.get(key, {})
        if rec.get("status") != "converged":
            left[f"{beta:g}"] = f"status {rec.get('status')}"
        elif not q.get("converged"):
            left[f"{beta:g}"] = q.get("reason") or f"{key} not converged in N"
        elif not math.isfinite(q.get("value", math.nan)):
            left[f"{beta:g}"] = f"{key} undefined"
        else:
            used.append(beta)
    return used, left


def _sigma(q: dict, floor: float) -> float:
    parts = [q.get("error"), q.get("seed_spread"), floor]
    return math.sqrt(sum(float(p) ** 2 for p in parts if p is not None and math.isfinite(float(p))))


def _curvature(x: np.ndarray, y: np.ndarray, sigma: np.ndarray) -> tuple[float, float] | None:
    """The quadratic coefficient of a weighted fit y = a + b x + c x^2 (x centred) and its error, the
    larger of the error from `sigma` and the one from the residuals; None below 4 points."""
    if x.size < 4:
        return None
    xc = x - x.mean()
    coef, cov = np.polyfit(xc, y, 2, w=1.0 / sigma, cov="unscaled")
    err = math.sqrt(max(cov[0, 0], 0.0))
    if x.size >= 5:
        _, cov_s = np.polyfit(xc, y, 2, w=1.0 / sigma, cov=True)
        err = max(err, math.sqrt(max(cov_s[0, 0], 0.0)))
    return float(coef[0]), err


def _law_verdict(
    slope: float, slope_err: float, curv: tuple[float, float] | None, what: str
) -> tuple[str, str]:
    """A monotone law y = a + b x decided: b's sign by SIGMAS errors, and no curvature beyond SIGMAS
    errors (a convex curve in x means y grows faster than the law)."""
    verdict = _sign_verdict(slope, slope_err)
    if curv is None:
        return verdict, "4 betas are needed to test the curvature: only the sign of the slope was tested"
    c, c_err = curv
    if verdict == "consistent" and abs(c) > SIGMAS * c_err:
        faster = "faster" if (c > 0) == (slope > 0) else "slower"
        return "inconsistent", (
            f"the data curve away from the law: quadratic term {c:.3g} ± {c_err:.2g} ({what} changes "
            f"{faster} than the law)"
        )
    return verdict, ""


def _too_few(claim: str, betas: list[float], left: dict[str, str]) -> dict:
    return _row(
        claim,
        None,
        None,
        betas,
        "not resolved",
        left_out=left,
        note=f"{len(betas)} converged beta(s); {MIN_BETAS} needed",
    )


def _time_row(per_beta: dict[float, dict], key: str, label: str, dt: float) -> dict:
    from .fits import fit_t_star

    betas, left = _usable(per_beta, key)
    claim = f"{label} grows like log beta (t = a + b log beta, b > 0)"
    if len(betas) < MIN_BETAS:
        return _too_few(claim, betas, left)
    t = np.array([per_beta[b][key]["value"] for b in betas])
    sigma = np.array([_sigma(per_beta[b][key], 0.5 * dt) for b in betas])
    f = fit_t_star(betas, t, sigma=sigma)
    verdict, note = _law_verdict(f.b, f.b_err, _curvature(np.log(betas), t, sigma), "t")
    lin = np.polyfit(betas, t, 1)
    measured = {"b": f.b, "a": f.a, "r2": f.r2, "slope_in_beta": float(lin[0])}
    return _row(
        claim,
        measured,
        {"b": f.b_err, "a": f.a_err},
        betas,
        verdict,
        left_out=left,
        quantity=key,
        note=note or None,
    )


def _power_row(per_beta: dict[float, dict]) -> dict:
    from .fits import fit_min_w2, temperature_scale

    betas, left = _usable(per_beta, "min_w2")
    claim = "min_t W2 falls like a power of a(beta) = sqrt(log(beta+1)/beta) (min W2 = C a^p, p > 0)"
    if len(betas) < MIN_BETAS:
        return _too_few(claim, betas, left)
    y = np.array([per_beta[b]["min_w2"]["value"] for b in betas])
    rel = np.array(
        [
            max(_sigma(per_beta[b]["min_w2"], 0.0) / v if v > 0 else 1.0, 1e-6)
            for b, v in zip(betas, y, strict=True)
        ]
    )
    f = fit_min_w2(betas, y, sigma=rel)
    curv = _curvature(np.log(temperature_scale(np.array(betas))), np.log(y), rel)
    verdict, note = _law_verdict(f.p, f.p_err, curv, "log min W2")
    return _row(
        claim,
        {"p": f.p, "C": f.C, "r2": f.r2},
        {"p": f.p_err, "C": f.C_err},
        betas,
        verdict,
        left_out=left,
        note=note or None,
    )


def _concentration_row(per_beta: dict[float, dict]) -> dict:
    betas, left = _usable(per_beta, "min_w2")
    claim = f"before t*, rho_t comes close to Pi_# rho_0 (W2(t*) <= {CONCENTRATED:g} W2(0))"
    if not betas:
        return _row(claim, None, None, betas, "not resolved", left_out=left, note="no converged beta")
    ratios = {f"{b:g}": per_beta[b]["min_w2"]["value"] / per_beta[b]["w2_initial"] for b in betas}
    worst = max(ratios.values())
    verdict = "consistent" if worst <= CONCENTRATED else "inconsistent"
    return _row(
        claim, {"largest W2(t*)/W2(0)": worst, "per_beta": ratios}, None, betas, verdict, left_out=left
    )


def _terminal_row(per_beta: dict[float, dict]) -> dict:
    claim = (
        f"terminal phase: mass moves to V's top eigenspace (mass within eps of it >= {TERMINAL_MASS:g} "
        "at t_max, after a departure time converged in N)"
    )
    betas, left = _usable(per_beta, "t_depart")
    if not betas:
        return _row(
            claim,
            None,
            None,
            [],
            "not resolved",
            left_out=left,
            note="no beta has a departure time converged in N: with N tokens the cluster leaves "
            "once the last token near the softmax maximiser has passed (a time ~ log N)",
        )
    masses = {f"{b:g}": per_beta[b]["mass_V_final"] for b in betas}
    verdict = "consistent" if min(masses.values()) >= TERMINAL_MASS else "inconsistent"
    return _row(claim, {"mass_V at t_max": masses}, None, betas, verdict, left_out=left)


def _rate_row(zero: dict | None) -> dict:
    claim = "zero temperature: W2 decays at a rate >= gamma/(2||B||), tending to c*"
    if not zero or not zero.get("local_rates"):
        return _row(
            claim,
            None,
            None,
            [],
            "not resolved",
            note=(zero or {}).get("reason", "no N = infinity zero-temperature reference"),
        )
    rates = zero["local_rates"]
    guaranteed, c_star = zero["guaranteed"], zero["c_star"]
    last = rates[-1]
    err = float(last.get("err") or 0.0)
    above = all(r["rate"] + SIGMAS * float(r.get("err") or 0.0) >= guaranteed for r in rates)
    gaps = [abs(r["rate"] - c_star) for r in rates]
    near = gaps[-1] <= RATE_REL_TOL * c_star + SIGMAS * err
    closing = len(gaps) >= 2 and all(b < a for a, b in itertools.pairwise(gaps))
    measured = {
        "last_window": last["window"],
        "rate": last["rate"],
        "c_star": c_star,
        "guaranteed": guaranteed,
    }
    if not above:
        verdict, note = "inconsistent", f"a window's rate is below the guaranteed {guaranteed:.4g}"
    elif near:
        verdict, note = "consistent", None
    elif closing:
        verdict = "not resolved"
        note = (
            f"the rates approach c* = {c_star:.4g} window by window, but the last ({last['rate']:.4g}) is "
            "not yet within 1%: a longer t_max decides"
        )
    else:
        verdict = "inconsistent"
        note = f"the last window's rate {last['rate']:.4g} does not approach c* = {c_star:.4g}"
    return _row(claim, measured, err, [], verdict, note=note, beta="inf")


def claims_table(per_beta: dict[float, dict], dt: float, zero: dict | None = None) -> list[dict]:
    """The claims table from per-beta ladder results.

    per_beta: beta -> {"status", "t_star", "t_entry", "t_dev", "min_w2", "t_depart" (each {value, error,
    converged, reason[, seed_spread]}), "w2_initial", "mass_V_final"}; dt: the saved-time step (the
    floor of a time's error); zero: {"local_rates": [{window, rate, err}], "guaranteed", "c_star"}
    of the N = infinity zero-temperature reference, or None.
    """
    t_key = "t_star"
    betas_star, _ = _usable(per_beta, "t_star")
    betas_entry, _ = _usable(per_beta, "t_entry")
    if len(betas_star) < MIN_BETAS <= len(betas_entry):
        t_key = "t_entry"  # the argmin wanders on flat plateaus; the band entry is its converged stand-in
    label = "t*(beta)" if t_key == "t_star" else "the entry time into the near-minimal band (for t*)"
    dev = (
        "the time the finite-temperature error appears (W2 > 1.1 W2 at beta = inf: the bound's balance time)"
    )
    return [
        _time_row(per_beta, t_key, label, dt),
        _time_row(per_beta, "t_dev", dev, dt),
        _power_row(per_beta),
        _concentration_row(per_beta),
        _terminal_row(per_beta),
        _rate_row(zero),
    ]


def verdict_counts(rows: list[dict]) -> dict[str, int]:
    """How many rows have each verdict."""
    out = {"consistent": 0, "inconsistent": 0, "not resolved": 0}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def not_applicable(rows: list[dict], reason: str) -> list[dict]:
    """The rows with the verdict "not applicable" and `reason` as their note: the run's model (or
    weights) is not the theorem's, so its claims say nothing about it. The measured numbers stay, as
    observed laws."""
    return [{**r, "verdict": NOT_APPLICABLE, "note": reason} for r in rows]
