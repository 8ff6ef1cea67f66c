"""The two branches of the metastable time, fitted to a run's map (attnflow.science.metastability):

1. where a beta's departure has stopped growing with N (the two largest N of a deterministic cloud
   kind agree), it is the mean-field departure t_mf(beta), measured (random clouds fluctuate like
   N^-1/2, and two seed means may agree by chance while still on the finite-N branch);
2. the mean-field branch t_mf(beta) for every beta: the heuristic (delta / lambda) beta + c with c
   fitted to those measurements, or, with `mean_field = "path"`, a line through the converged
   departures of a `concentration` run (`read_mean_field`);
3. per cloud kind and beta, the finite-N branch t_depart = a log N + b, fitted to the points below
   t_mf(beta) by more than `branch_gap` (only points where every cloud departed), a beside 1/lambda;
4. the crossover N*(beta), where a log N* + b = t_mf(beta), with its error; and per cloud kind one
   fit over every beta's finite-N points (the pooled branch: a and b shared), for the practitioner's
   law min(a log N + b, t_mf(beta)).

`branch_fits` returns all of it as JSON-able records (the run's attrs["fits"]; `BranchFits`: as read
back, NaN as None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ...science.claims import WeightsData
from ...science.metastability import (
    MeanFieldBranch,
    crossover,
    fit_log_n,
    heuristic_branch,
    mean_field_departure,
    measured_branch,
    on_finite_n_branch,
)

if TYPE_CHECKING:
    import xarray as xr


class LogNFitRecord(TypedDict, total=False):
    """A fit of a log N + b as read back (`LogNFit.to_dict`), or why there is none (`error`)."""

    a: float
    a_err: float | None
    b: float
    b_err: float | None
    rms: float
    n: int
    Ns: list[int]
    error: str


class CrossoverRecord(TypedDict, total=False):
    """A crossover N* as read back (`Crossover.to_dict`) and where it lies."""

    N_star: float | None
    log_N_star: float | None
    log_N_star_err: float | None
    reason: str
    where: str


class BetaFitRecord(TypedDict, total=False):
    """The finite-N fit of one kind and beta as read back (`_beta_fit`)."""

    N_fitted: list[int]
    t_mf: float | None
    t_mf_error: float | None
    t_mf_measured: bool
    error: str
    fit: LogNFitRecord
    a_lambda: float | None
    crossover: CrossoverRecord


class KindFits(TypedDict, total=False):
    """One cloud kind's fits: per beta and pooled over the betas."""

    per_beta: dict[str, BetaFitRecord]
    pooled: LogNFitRecord


class MeanFieldRecord(TypedDict, total=False):
    """The mean-field branch as read back (`MeanFieldBranch.to_dict`)."""

    slope: float | None
    slope_err: float | None
    intercept: float | None
    intercept_err: float | None
    rms: float | None
    betas: list[float]
    source: str


#: the weights' numbers of the fits (a TypedDict by call: `lambda` is a keyword)
WeightsRecord = TypedDict(
    "WeightsRecord",
    {"delta": float, "lambda": float, "one_over_lambda": float | None, "heuristic_slope": float},
    total=False,
)


class BranchFits(TypedDict, total=False):
    """A run's attrs["fits"] as read back (`branch_fits`)."""

    weights: WeightsRecord
    rules: dict[str, float]
    mean_field: MeanFieldRecord
    measured_mean_field: dict[str, dict[str, float]]
    kinds: dict[str, KindFits]


@dataclass(frozen=True)
class BranchRules:
    """dt: the save grid's step; tol: the relative change below which a departure has stopped
    growing with N (never less than dt); gap: how far below t_mf a point must lie to be fitted on the
    finite-N branch; deterministic: the cloud kinds whose map measures the mean-field departure."""

    dt: float
    tol: float
    gap: float
    deterministic: tuple[str, ...]


@dataclass(frozen=True)
class MeanFieldRun:
    """Converged mean-field departures read from a concentration run: betas, values, errors and
    where they come from (the path, in words)."""

    betas: tuple[float, ...]
    values: tuple[float, ...]
    errors: tuple[float, ...]
    source: str


def result_store(path: str) -> Path:
    """The result.zarr of a run folder, or the store itself; ValueError naming `mean_field`."""
    from ..layout import RESULT_STORE

    p = Path(path)
    store = p / RESULT_STORE if (p / RESULT_STORE).is_dir() else p
    if not store.is_dir():
        raise ValueError(
            f"mean_field = {path!r}: no run there (neither a run folder with {RESULT_STORE} nor a zarr "
            "store); give the folder of a finished concentration run"
        )
    return store


def read_mean_field(path: str) -> MeanFieldRun:
    """The converged departures (t_depart_converged, finite t_depart) of a concentration run; a
    ValueError naming `mean_field` when it is not a concentration run or none converged."""
    from ...io import StoreError, read_dataset

    try:
        ds = read_dataset(result_store(path))
    except (StoreError, OSError) as err:
        raise ValueError(f"mean_field = {path!r}: cannot read its result ({err})") from None
    if ds.attrs.get("experiment") != "concentration" or "t_depart" not in ds.variables:
        raise ValueError(
            f"mean_field = {path!r}: not a concentration run with departures (its experiment is "
            f"{ds.attrs.get('experiment')!r}); give a concentration run, e.g. of concentration-2d"
        )
    t = np.asarray(ds["t_depart"].values, dtype=float)
    ok = np.isfinite(t)
    if "t_depart_converged" in ds.variables:
        ok &= np.asarray(ds["t_depart_converged"].values, dtype=bool)
    if not ok.any():
        raise ValueError(f"mean_field = {path!r}: no beta of that run has a departure converged in N")
    errors = np.full(t.shape, math.nan)
    if "t_depart_error" in ds.variables:
        errors = np.asarray(ds["t_depart_error"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    return MeanFieldRun(
        tuple(betas[ok].tolist()),
        tuple(t[ok].tolist()),
        tuple(errors[ok].tolist()),
        f"the converged departures of the concentration run {path}",
    )


def _measured(ds: xr.Dataset, rules: BranchRules) -> dict[float, tuple[float, float]]:
    """beta -> the mean-field departure (value, error) where the map of a deterministic kind
    measures it (the smallest error where several do)."""
    Ns = np.asarray(ds["N"].values)
    out: dict[float, tuple[float, float]] = {}
    for kind in [k for k in ds["init"].values.tolist() if k in rules.deterministic]:
        for beta in ds["beta"].values.tolist():
            p = ds.sel(init=kind, beta=beta)
            full = np.asarray(p["departed"].values) == 1
            t = np.where(full, p["t_depart"].values, np.nan)
            got = mean_field_departure(Ns, t, p["t_depart_error"].values, rules.dt, rules.tol)
            if got is not None and (float(beta) not in out or got[1] < out[float(beta)][1]):
                out[float(beta)] = got
    return out


def mean_field_branch(
    ds: xr.Dataset, rules: BranchRules, weights: WeightsData, run: MeanFieldRun | None
) -> tuple[MeanFieldBranch, dict[float, tuple[float, float]]]:
    """The mean-field branch (from `run` when given, else the heuristic slope with its intercept
    fitted to the map's own measurements) and those measurements."""
    measured = _measured(ds, rules)
    slope = weights.departure_slope
    if run is not None:
        return measured_branch(run.betas, run.values, run.errors, slope, run.source), measured
    betas = list(measured)
    values = [v for v, _ in measured.values()]
    errors = [e for _, e in measured.values()]
    return heuristic_branch(slope, betas, values, errors), measured


def _beta_fit(
    ds: xr.Dataset, kind: str, beta: float, t_mf: tuple[float, float], rules: BranchRules, lam: float
) -> tuple[dict[str, object], list[int]]:
    """The finite-N fit of one kind and beta, its crossover, and which N it used (also returned)."""
    p = ds.sel(init=kind, beta=beta)
    Ns = np.asarray(ds["N"].values)
    full = np.asarray(p["departed"].values) == 1
    t = np.where(full, p["t_depart"].values, np.nan)
    use = on_finite_n_branch(t, t_mf[0], rules.gap)
    used: list[int] = Ns[use].tolist()
    out: dict[str, object] = {"N_fitted": used, "t_mf": t_mf[0], "t_mf_error": t_mf[1]}
    if np.unique(Ns[use]).size < 2:
        out["error"] = f"{int(use.sum())} point(s) on the finite-N branch (needs 2): " + (
            "no cluster departed" if not np.isfinite(t).any() else "the mean-field departure comes first"
        )
        return out, used
    fit = fit_log_n(Ns[use], t[use], p["t_depart_error"].values[use])
    out["fit"] = fit.to_dict()
    out["a_lambda"] = fit.a * lam if math.isfinite(lam) else math.nan
    cross = crossover(fit, t_mf[0], t_mf[1])
    out["crossover"] = {**cross.to_dict(), "where": _where(cross.N_star, Ns)}
    return out, used


def _where(N_star: float, Ns: np.ndarray) -> str:
    if not math.isfinite(N_star):
        return "unknown" if math.isnan(N_star) else "beyond the map"
    if N_star < Ns.min():
        return "below the map"
    return "inside the map" if N_star <= Ns.max() else "beyond the map"


def _pooled(ds: xr.Dataset, kind: str, fitted: dict[str, list[int]]) -> dict[str, object]:
    """One fit of a log N + b over every beta's finite-N points of a kind (`fitted`: beta -> the N
    its own fit used)."""
    Ns: list[int] = []
    t: list[float] = []
    e: list[float] = []
    for beta in ds["beta"].values.tolist():
        used = fitted[f"{beta:g}"]
        p = ds.sel(init=kind, beta=beta, N=used)
        Ns += used
        t += p["t_depart"].values.tolist()
        e += p["t_depart_error"].values.tolist()
    if len(set(Ns)) < 2:
        return {"error": f"{len(Ns)} finite-N point(s) over all betas: no pooled fit"}
    return fit_log_n(Ns, t, e).to_dict()


def branch_fits(
    ds: xr.Dataset, rules: BranchRules, weights: WeightsData, run: MeanFieldRun | None
) -> dict[str, object]:
    """Everything the summary and the figures read of the branches (module docstring), JSON-able."""
    branch, measured = mean_field_branch(ds, rules, weights, run)
    kinds: dict[str, object] = {}
    for kind in ds["init"].values.tolist():
        per_beta: dict[str, dict[str, object]] = {}
        fitted: dict[str, list[int]] = {}
        for beta in ds["beta"].values.tolist():
            t_mf = measured.get(float(beta)) or branch.at(float(beta))
            fit, Ns_fitted = _beta_fit(ds, kind, float(beta), t_mf, rules, weights.lam)
            fit["t_mf_measured"] = float(beta) in measured
            per_beta[f"{beta:g}"] = fit
            fitted[f"{beta:g}"] = Ns_fitted
        kinds[kind] = {"per_beta": per_beta, "pooled": _pooled(ds, kind, fitted)}
    return {
        "weights": {
            "delta": weights.delta,
            "lambda": weights.lam,
            "one_over_lambda": 1.0 / weights.lam if weights.lam > 0 else math.nan,
            "heuristic_slope": weights.departure_slope,
        },
        "rules": {"dt": rules.dt, "tol": rules.tol, "gap": rules.gap},
        "mean_field": branch.to_dict(),
        "measured_mean_field": {f"{b:g}": {"t_mf": v, "error": e} for b, (v, e) in measured.items()},
        "kinds": kinds,
    }
