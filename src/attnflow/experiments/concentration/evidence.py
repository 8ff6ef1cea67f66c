"""What a concentration run gives the claims table (`attnflow.science.claims.ClaimData`): each
beta's quantities with honest errors, its W2 curve with its error, the zero-temperature curve and
the numbers of the weights.

The errors (`attnflow.science.uncertainty`) add the N level (the ladder's last difference), the time
step, the save grid (minima and crossings read between saved times) and, for t*, the flatness of the
minimum; with seeds, the standard error of the mean over them. The time-step error is measured once
per run by a `TimeStepProbe`: the largest beta's first level run again with tighter tolerances
(`Integration.tighter`), its changes applied to every beta (the largest beta is the stiffest).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ...science.claims import BetaData, ClaimData, ClusterCounts, ZeroData, weights_data
from ...science.convergence import QUANTITIES, curve_quantities
from ...science.curves import FORMED, locate_minimum
from ...science.uncertainty import Measured, flatness, measured, time_step_change
from .levels import ConcentrationInputs, Ladder, departure_time, located_of

if TYPE_CHECKING:
    import xarray as xr

    from .zero import ZeroInfo

__all__ = [
    "NO_DEPARTURE",
    "TimeStepProbe",
    "beta_evidence",
    "claim_data",
    "level_values",
    "no_departure",
    "time_step_probe",
]


@dataclass(frozen=True, eq=False)
class TimeStepProbe:
    """One level (beta, N) run with the run's integration and with a tighter one (`label`): its
    quantities each way (name -> value: `base`, `tight`) and the relative change of its W2 curve at
    each saved time (`curve`, (T,))."""

    beta: float
    N: int
    label: str
    base: Mapping[str, float]
    tight: Mapping[str, float]
    curve: np.ndarray

    def error(self, name: str, value: float) -> float:
        """The time-step error of quantity `name` at `value` (science.uncertainty.time_step_change);
        where the probe has no value for it, the largest change of a quantity of its kind."""
        kind = QUANTITIES[name].kind
        err = time_step_change(kind, self.base.get(name, math.nan), self.tight.get(name, math.nan), value)
        if math.isfinite(err):
            return err
        same = [
            time_step_change(kind, self.base[k], self.tight[k], value)
            for k in self.base
            if QUANTITIES[k].kind == kind and k in self.tight
        ]
        return max((e for e in same if math.isfinite(e)), default=0.0)

    def to_dict(self) -> dict[str, object]:
        """What summary.json says of the probe: where, how, and the change of each quantity."""
        changes = {
            k: abs(self.tight[k] - v)
            for k, v in self.base.items()
            if math.isfinite(v) and math.isfinite(self.tight.get(k, math.nan))
        }
        curve = self.curve[np.isfinite(self.curve)]
        return {
            "beta": self.beta,
            "N": self.N,
            "integration": self.label,
            "changes": changes,
            "curve_rel_change_max": float(curve.max()) if curve.size else None,
        }


def level_values(
    inputs: ConcentrationInputs, part: xr.Dataset, w2_zero: np.ndarray | None
) -> dict[str, float]:
    """The quantities of one level's part over its whole saved span: name -> value (QUANTITIES)."""
    w2, located = part.w2.values.mean(axis=0), located_of(part)
    q = curve_quantities(inputs.times, w2, band=inputs.band, reference=w2_zero, located=located)
    out = {name: float(getattr(q, name)) for name, spec in QUANTITIES.items() if spec.windowed}
    out["t_depart"] = departure_time(inputs.times, part.mass_A.values.mean(axis=0), located).t
    return out


def time_step_probe(
    inputs: ConcentrationInputs, base: xr.Dataset, tight: xr.Dataset, w2_zero: np.ndarray | None, label: str
) -> TimeStepProbe:
    """The probe from a level's part with the run's integration (base) and a tighter one (tight)."""
    w_base, w_tight = base.w2.values.mean(axis=0), tight.w2.values.mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(w_tight - w_base) / np.abs(w_base)
    return TimeStepProbe(
        float(base.attrs["beta"]),
        int(base.attrs["N"]),
        label,
        level_values(inputs, base, w2_zero),
        level_values(inputs, tight, w2_zero),
        np.where(np.isfinite(rel), rel, 0.0),
    )


def _seed_error(part: xr.Dataset) -> np.ndarray:
    """The standard error of the mean W2 curve over the seeds (T,) (zeros for one cloud)."""
    w = part.w2.values
    if w.shape[0] < 2:
        return np.zeros(w.shape[1])
    error: np.ndarray = w.std(axis=0, ddof=1) / math.sqrt(w.shape[0])
    return error


def beta_evidence(inputs: ConcentrationInputs, lad: Ladder, probe: TimeStepProbe | None) -> BetaData:
    """The BetaData of one ladder: its quantities with their errors, its last level's curve with its
    error (N level: the difference with the level before, NaN for one level; time step; seeds)."""
    times, final = inputs.times, lad.parts[-1]
    w2 = final.w2.values.mean(axis=0)
    seeds = _seed_error(final)
    n_err = np.full_like(w2, np.nan)
    if len(lad.parts) > 1:
        n_err = np.abs(w2 - lad.parts[-2].w2.values.mean(axis=0))
    ts_curve = probe.curve * np.abs(w2) if probe is not None else np.zeros_like(w2)
    records = lad.decision.quantities

    def ts(name: str) -> float:
        return probe.error(name, records[name]["value"]) if probe is not None else 0.0

    qs: dict[str, Measured] = {name: measured(r, ts(name)) for name, r in records.items()}
    last = lad.quantities[-1]
    inside = np.flatnonzero(times <= last.t_end + 1e-12)
    if inside.size >= 2:
        k = int(np.argmin(w2[inside]))
        qs["min_w2"] = measured(records["min_w2"], ts("min_w2"), seeds=float(seeds[inside][k]))
        minimum = locate_minimum(times[inside], w2[inside])
        flat = flatness(times[inside], w2[inside], minimum, qs["min_w2"].error)
        # the time step moves t* through W2's value near its flat minimum: the flatness term carries
        # that (min W2's error holds its time-step part); the probe's own t* change, which the flatness
        # of the probe's beta sets (2.7 at beta = 80 of concentration-2d-meanfield), is that beta's only
        own = probe is not None and lad.beta == probe.beta
        qs["t_star"] = measured(records["t_star"], ts("t_star") if own else 0.0, flat)
    mass_A, mass_V = final.mass_A.values.mean(axis=0), final.mass_V.values.mean(axis=0)
    if "t_depart" in qs and not math.isfinite(qs["t_depart"].value):
        qs["t_depart"] = replace(
            qs["t_depart"], reason=no_departure(float(np.nanmax(mass_A)), float(times[-1]))
        )
    return BetaData(
        beta=lad.beta,
        status=lad.decision.status,
        quantities=qs,
        w2=w2,
        w2_error=n_err + ts_curve + seeds,
        mass_A_max=float(np.nanmax(mass_A)),
        mass_V_final=float(mass_V[-1]),
        t_band=(float(last.t_lo), float(last.t_hi)),
        clusters=cluster_counts(final),
    )


#: the words that open the reason of a departure that does not exist (not one that failed to
#: converge): tables and `show` print that reason in its cell
NO_DEPARTURE = "no departure"


def no_departure(peak: float, t_max: float) -> str:
    """Why a beta has no departure time, short enough for a table's cell: no metastable phase (its
    mass near A's top eigenspace never reached FORMED; the claims rows give the peak), or none by
    t_max."""
    if peak < FORMED:
        return f"{NO_DEPARTURE}: no metastable phase"
    return f"{NO_DEPARTURE} by t_max = {t_max:g}"


def cluster_counts(part: xr.Dataset) -> ClusterCounts | None:
    """The last level's clusters against the linearisation: the predicted count of each seed (the
    part's attrs) and the measured metastable count (the first plateau of its `clusters` curve);
    None where nothing is predicted (or the part predates the prediction)."""
    from ...science.clusters import metastable_count

    predicted = np.asarray(json.loads(part.attrs.get("predicted_clusters", "[]")), dtype=float)
    if "clusters" not in part.variables or not np.isfinite(predicted).any():
        return None
    seen = metastable_count(part.clusters.values.T, int(part.attrs["N"]))
    measured = float(np.nanmean(seen)) if np.isfinite(seen).any() else math.nan
    return ClusterCounts(float(np.nanmean(predicted)), measured, float(np.mean(predicted == seen)))


def claim_data(
    inputs: ConcentrationInputs, betas: Sequence[BetaData], zero: xr.Dataset, zero_info: ZeroInfo
) -> ClaimData:
    """The ClaimData of a run: its saved times, betas, weights and zero-temperature curve (zero: the
    zero part, zero_info its attrs["zero"]; a part without w2_zero_error has no error bound, a model
    the theorem does not speak about has no zero-temperature curve: None)."""
    weights = weights_data(inputs.model.attention)
    if "w2_zero" not in zero.variables:
        return ClaimData(inputs.times, tuple(betas), weights, None)
    err = zero["w2_zero_error"].values if "w2_zero_error" in zero.variables else np.zeros(inputs.times.size)
    zero_data = ZeroData(
        np.asarray(zero.w2_zero.values, dtype=float),
        np.where(np.isfinite(err), err, 0.0),
        tuple(zero_info.get("local_rates") or ()),
        str(zero_info.get("kind", "")),
    )
    return ClaimData(inputs.times, tuple(betas), weights, zero_data)
