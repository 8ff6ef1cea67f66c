"""`zero-temperature`: the exact beta = inf flow on a large quadrature, its W2 decay rate against theory.

MATH.md, Corollary 2: W2(rho^inf_t, Pi_# rho_0) decays exponentially. The rate fitted on the tail
of the curve is reported next to the guaranteed rate gamma/(2||B||) and the sharper prediction c*,
never instead of them. A Fibonacci lattice (even spacing) is the default quadrature of uniform
rho_0: Monte Carlo clouds miss the rare slow tokens near P_1 x = 0 and overestimate late rates.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from ._common import base_attrs, fit_or_reason, initial_cloud, json_attr, time_grid, token_subset
from ._config import ExperimentConfig, Reporter


class ZeroTemperatureConfig(ExperimentConfig):
    """Config of the `zero-temperature` experiment."""

    experiment: Literal["zero-temperature"] = "zero-temperature"
    N: PositiveInt = Field(50_000, description="number of tokens (quadrature points of rho_0)")
    init: Literal["uniform", "fibonacci"] = Field(
        "fibonacci", description="quadrature: fibonacci (quasi-uniform lattice) or uniform (i.i.d., seeded)"
    )
    t_max: PositiveFloat = Field(20.0, description="final time")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times")
    fit_window: list[float] = Field(
        [5.0, 15.0],
        description="[t_lo, t_hi] of the rate fit: past the transient, before a finite cloud's slowest "
        "tokens (or the float64 floor of W2) take over",
    )
    n_keep: NonNegativeInt = Field(200, description="tokens whose positions are stored")

    @field_validator("fit_window")
    @classmethod
    def _window(cls, v: list[float]) -> list[float]:
        if len(v) != 2 or not all(math.isfinite(x) for x in v) or not 0 <= v[0] < v[1]:
            raise ValueError(f"fit_window must be [t_lo, t_hi] with 0 <= t_lo < t_hi, got {v}")
        return v

    @model_validator(mode="after")
    def _window_in_span(self):
        if self.fit_window[1] > self.t_max:
            raise ValueError(f"fit_window {self.fit_window} ends after t_max = {self.t_max}")
        return self


PRESETS = {
    "zero-temperature-tiny": {
        "N": 500,
        "t_max": 10.0,
        "dt_save": 0.25,
        "n_keep": 16,
        "fit_window": [3.0, 8.0],
    },
}


def run(config: ZeroTemperatureConfig, out: Path | None = None, progress: Reporter | None = None):
    """Exact zero-temperature flow of the worked example; W2 to Pi_# rho_0 and the fitted rate."""
    import xarray as xr

    from .. import metrics
    from ..fits import fit_decay_rate
    from ..model import worked_example
    from ..zero_temperature import project, simulate_zero_temperature
    from .concentration import reference_rates

    reporter = progress or Reporter()
    start = time.perf_counter()
    att = worked_example(math.inf)
    sp = att.spectrum()
    X0 = initial_cloud(config.init, config.N, att.d, config.seed)
    times = time_grid(config.t_max, config.dt_save)
    keep = token_subset(config.N, config.n_keep, config.seed)
    reporter.overall(1, f"zero-temperature: N = {config.N}")
    with reporter.task("exact flow", total=float(times[-1])):
        traj = simulate_zero_temperature(X0, att, times)
    PiX0 = project(X0, att)
    w2 = metrics.w2_to_target(traj.x, PiX0).values
    lyap = np.asarray(metrics.lyapunov(traj.x, sp.top_projector))
    reporter.advance()
    fit = fit_or_reason(fit_decay_rate, times, w2, tail=tuple(config.fit_window))
    fits: dict[str, Any] = {"fit": fit}
    if "rate" in fit:
        fits.update(fitted=fit["rate"], fitted_err=fit["rate_err"])
    try:
        fits.update(reference_rates(att))
    except (ImportError, ValueError) as err:
        fits["reference_error"] = str(err)
    if "fitted" in fits and "c_star" in fits:
        reporter.info(
            f"rate: fitted {fits['fitted']:.4g} ± {fits['fitted_err']:.2g}, "
            f"predicted c* = {fits['c_star']:.4g}, "
            f"guaranteed {fits.get('guaranteed', float('nan')):.4g}"
        )
    timings = {"flow_s": float(traj.info.get("wall_time", 0.0)), "total_s": time.perf_counter() - start}
    ds = xr.Dataset(
        {
            "w2": (("time",), w2),
            "lyapunov": (("time",), lyap),
            "x": (("time", "token", "dim"), traj.x[:, keep].astype(np.float32)),
            "basis_A": (("dim", "k"), sp.top.basis),
        },
        coords={"time": times, "token": keep, "dim": np.arange(att.d)},
    )
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel="zero-temperature (exact flow)",
        integrator=f"exact: {traj.info.get('note', '')}",
        fits=fits,
    )
    ds["w2"].attrs["long_name"] = "exact W2(rho^inf_t, Pi_# rho_0), chordal cost"
    return ds


def summarize(ds) -> dict[str, Any]:
    """Fitted rate next to the guaranteed and predicted ones; final W2; timing."""
    fits = json_attr(ds, "fits", {})
    cfg = json_attr(ds, "config", {})
    return {
        "experiment": "zero-temperature",
        "N": cfg.get("N"),
        "init": cfg.get("init"),
        "rate": {k: fits.get(k) for k in ("fitted", "fitted_err", "guaranteed", "c_star")},
        "w2_final": float(ds.w2.values[-1]),
        "fit_window": [fits.get("fit", {}).get("t_lo"), fits.get("fit", {}).get("t_hi")],
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
