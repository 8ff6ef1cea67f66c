"""`zero-temperature`: the exact beta = inf flow on a large quadrature, its W2 decay rate against theory.

docs/math.md, Corollary 2: W2(rho^inf_t, Pi_# rho_0) decays exponentially. The rate fitted on the tail
of the curve is reported next to the guaranteed rate gamma/(2||B||) and the sharper prediction c*,
never instead of them. A Fibonacci lattice (even spacing) is the default quadrature of uniform
rho_0: Monte Carlo clouds miss the rare slow tokens near P_1 x = 0 and overestimate late rates.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from .._text import format_value
from ..io import json_attr
from ..plot import (
    DPI,
    TOKEN_CAPTIONS,
    fits_of,
    markevery,
    new_figure,
    positive,
    require,
    run_title,
    save,
    token_figures,
)
from ..progress import Reporter
from ._common import base_attrs, fit_or_reason, initial_cloud, time_grid, token_subset
from ._config import ExperimentConfig
from ._registry import Experiment, doc_summary

if TYPE_CHECKING:
    import xarray as xr

ZERO_TEMPERATURE_LABEL = "β = ∞ (zero temperature)"


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
    from ..wasserstein import w2_to_target
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
    w2 = w2_to_target(traj.x, PiX0).values
    lyap = np.asarray(metrics.lyapunov(traj.x, sp.top_projector))
    reporter.advance()
    fit = fit_or_reason(fit_decay_rate, times, w2, tail=tuple(config.fit_window))
    fits: dict[str, Any] = {"fit": fit}
    if "rate" in fit:
        fits.update(fitted=fit["rate"], fitted_err=fit["rate_err"])
    try:
        fits.update(reference_rates(att))
    except ValueError as err:
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


# ---------------------------------------------------------------------------------------- figures


def plot_zero_temperature(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Zero-temperature convergence: W2(rho_t, Pi_# rho_0) against t (log y) with lines of slope
    -fitted, -guaranteed (gamma / 2||B||) and -c* from attrs["fits"], each drawn through the data
    point at mid-time; a Lyapunov panel when `lyapunov` is present.

    Needs `w2` (time).  Writes zero_temperature.png / .pdf.
    """
    require(ds, ["w2"], "plot_zero_temperature", {"w2": ("time",), "lyapunov": ("time",)})
    t = np.asarray(ds["time"].values, dtype=float)
    w = positive(ds["w2"].values)
    has_lyap = "lyapunov" in ds.variables
    fig, axes = new_figure(1, 2 if has_lyap else 1, (11 if has_lyap else 6.5, 4.6))
    ax = axes[0][0]
    ax.plot(
        t,
        w,
        color="black",
        lw=2,
        marker="o",
        markevery=markevery(len(t)),
        label=r"$W_2(\rho_t, \Pi_\#\rho_0)$, exact",
    )
    fits = fits_of(ds)
    fin = np.flatnonzero(np.isfinite(w))
    if fin.size:
        k0 = int(fin[len(fin) // 2])
        for key, ls, name in (
            ("fitted", "--", "fitted"),
            ("guaranteed", ":", "guaranteed γ/(2‖B‖)"),
            ("c_star", "-.", "predicted c*"),
        ):
            rate = fits.get(key)
            if isinstance(rate, int | float) and math.isfinite(rate):
                err = (
                    f" ± {format_value(float(fits['fitted_err']))}"
                    if key == "fitted" and "fitted_err" in fits
                    else ""
                )
                ax.plot(
                    t,
                    w[k0] * np.exp(-rate * (t - t[k0])),
                    color="0.4",
                    ls=ls,
                    lw=1.5,
                    label=f"slope −{format_value(float(rate))}{err} ({name})",
                )
        ax.set_ylim(np.nanmin(w[fin]) / 3, np.nanmax(w[fin]) * 3)
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2$, chordal (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    if has_lyap:
        ax2 = axes[0][1]
        ax2.plot(
            t,
            positive(ds["lyapunov"].values),
            color="black",
            ls="-",
            marker="s",
            markevery=markevery(len(t)),
        )
        ax2.set_yscale("log", nonpositive="mask")
        ax2.set_xlabel("time t")
        ax2.set_ylabel(r"$\int |P_1^\perp x|^2\, d\rho_t$ (log scale)")
        ax2.set_title("Lyapunov functional", fontsize="medium")
        ax2.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        run_title(ds, r"Zero temperature ($\beta = \infty$): exponential convergence to $\Pi_\#\rho_0$")
    )
    return save(fig, outdir, "zero_temperature", dpi)


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """W2 against t with the three rates, then the token snapshots (and animation) when kept."""
    paths = plot_zero_temperature(ds, outdir, dpi=dpi)
    return paths + token_figures(ds, outdir, animation=animation, dpi=dpi, label=ZERO_TEMPERATURE_LABEL)


EXPERIMENT = Experiment(
    name="zero-temperature",
    description=doc_summary(__doc__),
    Config=ZeroTemperatureConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={
        "zero_temperature": (
            "Zero-temperature convergence",
            "Zero temperature: W₂ to Π#ρ₀ against t with the fitted, guaranteed and predicted rates.",
        ),
        **TOKEN_CAPTIONS,
    },
    presets=PRESETS,
)
