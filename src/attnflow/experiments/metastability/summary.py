"""The summary of a metastability run (summary.json, summary.md, `attnflow show`): the practitioner's
law in words, the weights' numbers, the mean-field branch, per cloud kind the pooled and per-beta
finite-N fits with their crossovers, and the map of departures. Read from the Dataset and its
attrs["fits"] (`branches.branch_fits`); shaped for the table model (`experiments.tables`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, SupportsFloat, cast

import numpy as np

from ...io import json_attr
from .readings import STATUSES

if TYPE_CHECKING:
    import xarray as xr

    from .branches import BetaFitRecord, BranchFits, LogNFitRecord


def _measured(value: SupportsFloat | None, error: SupportsFloat | None) -> dict[str, float] | None:
    v = float(value) if value is not None else math.nan
    if not math.isfinite(v):
        return None
    e = float(error) if error is not None else math.nan
    return {"value": v, "error": e} if math.isfinite(e) else {"value": v}


def _num(x: SupportsFloat | str | None) -> float | None:
    if x is None:  # (float(None) fails)
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _beta_row(entry: BetaFitRecord) -> dict[str, object]:
    """One row of a kind's per-beta table."""
    row: dict[str, object] = {"t_mf": _measured(entry.get("t_mf"), entry.get("t_mf_error"))}
    row["t_mf from"] = "measured" if entry.get("t_mf_measured") else "branch"
    fit = entry.get("fit")
    if fit is None:
        row["note"] = entry.get("error", "")
        return row
    row["a"] = _measured(fit["a"], fit["a_err"])
    row["a lambda"] = _num(entry.get("a_lambda"))
    row["b"] = _measured(fit["b"], fit["b_err"])
    row["rms"] = _num(fit["rms"])
    row["N fitted"] = f"{min(fit['Ns'])}…{max(fit['Ns'])} ({fit['n']})"
    cross = entry.get("crossover", {})
    log_n, err = _num(cross.get("log_N_star")), _num(cross.get("log_N_star_err"))
    if log_n is not None:
        row["log10 N*"] = _measured(log_n / math.log(10), (err or math.nan) / math.log(10))
        row["N*"] = cross.get("where", "")
    else:
        row["N*"] = cross.get("reason", "")
    return row


def _pooled_row(fit: LogNFitRecord, lam: float) -> dict[str, object]:
    if "error" in fit:
        return {"note": fit["error"]}
    return {
        "a": _measured(fit["a"], fit["a_err"]),
        "a lambda": _num(fit["a"] * lam) if math.isfinite(lam) else None,
        "b": _measured(fit["b"], fit["b_err"]),
        "rms": _num(fit["rms"]),
        "points": fit["n"],
    }


def _map(ds: xr.Dataset, kind: str) -> dict[str, dict[str, object]]:
    """beta -> {N = n: departure (± error)} for one kind; a point without departure: its statuses."""
    p = ds.sel(init=kind)
    rows: dict[str, dict[str, object]] = {}
    for beta in ds["beta"].values.tolist():
        row: dict[str, object] = {}
        for N in ds["N"].values.tolist():
            q = p.sel(beta=beta, N=N)
            value = _measured(q["t_depart"].values, q["t_depart_error"].values)
            if value is None:
                statuses = sorted({s for s in q["status"].values.tolist() if s})
                row[f"N = {N}"] = ", ".join(statuses)
            elif "error" not in value:  # one departed cloud of several: the seeds' spread is unknown
                departed = int(np.sum(q["status"].values == "departed"))
                row[f"N = {N}"] = f"{value['value']:.3g} ({departed} of {q.sizes['seed']} clouds departed)"
            else:
                row[f"N = {N}"] = value
        rows[f"{beta:g}"] = row
    return rows


def _number(v: SupportsFloat | None) -> float:
    """A fit's value as a float: NaN where JSON left None."""
    return math.nan if v is None else float(v)


def _law(fits: BranchFits) -> list[str]:
    """The practitioner's law in words, per cloud kind with a pooled fit."""
    mf = fits.get("mean_field", {})
    slope, c, c_err = _number(mf.get("slope")), _number(mf.get("intercept")), _number(mf.get("intercept_err"))
    c_text = f"{c:+.2f}" if math.isfinite(c) and math.isfinite(c_err) else "+ c (c not measured)"
    lines = []
    for kind, entry in fits.get("kinds", {}).items():
        pooled = entry.get("pooled", {})
        if "error" in pooled:
            lines.append(f"{kind} clouds: no finite-N branch fitted ({pooled['error']}).")
            continue
        lines.append(
            f"{kind} clouds: with N tokens at inverse temperature beta, concentration lasts about "
            f"min({pooled['a']:.3g} log N {pooled['b']:+.3g}, {slope:.3g} beta {c_text}) "
            f"(observed laws, fitted: finite-N rms {pooled['rms']:.2g}; a lambda = "
            f"{pooled['a'] * fits['weights']['lambda']:.3g}, 1 if a = 1/lambda)."
        )
    return lines


def summary(ds: xr.Dataset) -> dict[str, object]:
    fits = cast("BranchFits", json_attr(ds, "fits", {}))
    w = fits.get("weights", {})
    lam = float(w.get("lambda", math.nan))
    mf = fits.get("mean_field", {})
    out: dict[str, object] = {
        "experiment": "metastability",
        "betas": [float(b) for b in ds["beta"].values],
        "Ns": [int(n) for n in ds["N"].values],
        "seeds": int(ds.sizes["seed"]),
        "law": _law(fits),
        "weights": {
            "delta": _num(w.get("delta")),
            "lambda": _num(lam),
            "1/lambda": _num(w.get("one_over_lambda")),
            "delta/lambda (heuristic slope of t_mf)": _num(w.get("heuristic_slope")),
        },
        "mean_field": {
            "slope": _measured(mf.get("slope"), mf.get("slope_err") or None),
            "intercept": _measured(mf.get("intercept"), mf.get("intercept_err")),
            "rms": _num(mf.get("rms")),
            "measured at beta": list(mf.get("betas", [])),
            "source": mf.get("source", ""),
        },
    }
    for kind, entry in fits.get("kinds", {}).items():
        seeded = bool(ds["seeded"].sel(init=kind)) if "seeded" in ds.variables else False
        clouds = f"random: {ds.sizes['seed']} seeds per point, their mean" if seeded else "deterministic"
        out[kind] = {
            "clouds": clouds,
            **{f"pooled {k}": v for k, v in _pooled_row(entry["pooled"], lam).items()},
            "per_beta": {b: _beta_row(e) for b, e in entry["per_beta"].items()},
        }
        out[f"t_depart ({kind})"] = {
            "cells": "the mean over the clouds ± its error (seeds, save grid, time step)"
            if seeded
            else "the departure ± its error (save grid, time step)",
            "per_beta": _map(ds, kind),
        }
    probe = json_attr(ds, "time_step", {})
    if probe.get("errors"):
        out["time_step"] = {
            "probe": f"init = {probe['init']}, N = {probe['N']}, {probe['solver']}",
            "per_beta": {b: {"change of t_depart": _num(e)} for b, e in probe["errors"].items()},
        }
    out["statuses"] = [f"{k}: {v}." for k, v in STATUSES.items()]
    ratio = np.asarray(ds["resolution_ratio"].values, dtype=float)
    out["resolution_ratio_range"] = [float(np.nanmin(ratio)), float(np.nanmax(ratio))]
    out["warnings"] = json_attr(ds, "warnings", [])
    out["wall_time_s"] = json_attr(ds, "timings", {}).get("total_s")
    return out
