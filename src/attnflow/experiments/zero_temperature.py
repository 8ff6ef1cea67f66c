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
from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator, model_validator

from .._text import format_value
from ..io import json_attr
from ..plot import (
    DPI,
    TOKEN_CAPTIONS,
    config_value,
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
from .common import base_attrs, fit_or_reason, time_grid, token_subset, warn_assumptions
from .model import ModelConfig, attention_of, describe_model, initial_measure
from .registry import Experiment, doc_summary

if TYPE_CHECKING:
    import xarray as xr

ZERO_TEMPERATURE_LABEL = "β = ∞ (zero temperature)"


class ZeroTemperatureConfig(ModelConfig):
    """Config of the `zero-temperature` experiment."""

    experiment: Literal["zero-temperature"] = "zero-temperature"
    init: Literal["uniform", "fibonacci", "quadrature"] = Field(
        "fibonacci",
        description="the token cloud shown beside the N = infinity reference: fibonacci (lattice, d = 3), "
        "uniform (i.i.d., seeded), or quadrature: the reference alone",
    )
    N: NonNegativeInt = Field(50_000, description="tokens of the cloud beside the reference (0: none)")
    reference_rtol: PositiveFloat = Field(1e-3, description="relative accuracy of the N = infinity reference")
    t_max: PositiveFloat = Field(20.0, description="final time")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times")
    rate_window: PositiveFloat = Field(4.0, description="width of the windows of the local rates")
    fit_window: list[float] = Field(
        [5.0, 15.0],
        description="[t_lo, t_hi] of the exponential fit of the main curve (next to the local rates)",
    )
    n_keep: NonNegativeInt = Field(200, description="tokens of the cloud whose positions are stored")

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
        "reference_rtol": 1e-2,
    },
}


def _reference(config: ZeroTemperatureConfig, att: Any, times: np.ndarray, reporter: Reporter) -> dict | None:
    """The N = infinity reference (W2, its error, local rates), or None with a message where the
    exact formula does not apply (and init = quadrature asked for it: an error)."""
    from ..dynamics.reference import local_rates, reference_w2

    kw: dict[str, Any] = {}
    rho0 = config.density
    if rho0 == "vmf":
        kw = {"mean": att.spectrum().top.basis[:, 0], "kappa": config.kappa}
    try:
        with reporter.task("N = infinity reference", total=1.0):
            ref = reference_w2(att, times, rho0, rtol=config.reference_rtol, **kw)
    except ValueError as err:
        if config.init == "quadrature":
            raise ValueError(f"init = quadrature needs the N = infinity reference, which {err}") from None
        reporter.warn(f"no N = infinity reference ({err}): the token cloud alone is shown")
        return None
    rates = local_rates(ref.times, ref.w2, ref.w2_err, width=config.rate_window)
    return {"w2": ref.w2, "w2_err": ref.w2_err, "local_rates": rates, "nodes": int(ref.info.get("nodes", 0))}


def _cloud(config: ZeroTemperatureConfig, att: Any, times: np.ndarray, reporter: Reporter) -> dict | None:
    """The exact flow of a token cloud of N tokens (None when N = 0 or init = quadrature)."""
    from ..dynamics.reference import local_rates
    from ..dynamics.zero_temperature import project, simulate_zero_temperature
    from ..science import metrics
    from ..transport.wasserstein import w2_to_target

    if config.init == "quadrature" or config.N == 0:
        return None
    X0, w = initial_measure(config, config.N, att, config.seed)
    keep = token_subset(config.N, config.n_keep, config.seed)
    with reporter.task(f"exact flow of {config.N} tokens", total=float(times[-1])):
        traj = simulate_zero_temperature(X0, att, times)
    w2 = w2_to_target(traj.x, project(X0, att), weights=w).values
    return {
        "w2": w2,
        "lyapunov": np.asarray(metrics.lyapunov(traj.x, att.spectrum().top_projector, weights=w)),
        "x": traj.x[:, keep].astype(np.float32),
        "local_rates": local_rates(times, w2, width=config.rate_window) if np.all(w2 > 0) else [],
        "note": traj.info.get("note", ""),
    }


def run(config: ZeroTemperatureConfig, out: Path | None = None, progress: Reporter | None = None):
    """Exact zero-temperature flow: the N = infinity reference and/or a token cloud; W2 to Pi_# rho_0,
    local rates per window next to the guaranteed rate and c*."""
    import xarray as xr

    from ..science.assumptions import reference_rates
    from ..science.fits import fit_decay_rate

    reporter = progress or Reporter()
    start = time.perf_counter()
    att = attention_of(config, math.inf)
    warn_assumptions(att, reporter)
    sp = att.spectrum()
    times = time_grid(config.t_max, config.dt_save)
    reporter.overall(2, "zero-temperature")
    ref = _reference(config, att, times, reporter)
    reporter.advance()
    cloud = _cloud(config, att, times, reporter)
    reporter.advance()
    main = ref if ref is not None else cloud
    if main is None:
        raise ValueError("nothing to compute: N = 0 and no N = infinity reference for these weights")
    rates: dict[str, Any] = {k: v for k, v in reference_rates(att).items() if isinstance(v, int | float)}
    fit = fit_or_reason(fit_decay_rate, times, main["w2"], tail=tuple(config.fit_window))
    fits: dict[str, Any] = {"fit": fit, **rates, "local_rates": main["local_rates"]}
    if "rate" in fit:
        fits.update(fitted=fit["rate"], fitted_err=fit["rate_err"])
    if cloud is not None and ref is not None:
        fits["cloud_local_rates"] = cloud["local_rates"]
    for r in main["local_rates"]:
        reporter.info(f"rate on [{r['window'][0]:g}, {r['window'][1]:g}]: {r['rate']:.5g}")
    if "c_star" in rates:
        reporter.info(
            f"predicted c* = {rates['c_star']:.5g}, guaranteed {rates.get('guaranteed', math.nan):.4g}"
        )
    data: dict[str, Any] = {"w2": (("time",), main["w2"]), "basis_A": (("dim", "k"), sp.top.basis)}
    if ref is not None:
        data["w2_err"] = (("time",), ref["w2_err"])
    if cloud is not None:
        data["w2_cloud" if ref is not None else "w2"] = (("time",), cloud["w2"])
        data["lyapunov"] = (("time",), cloud["lyapunov"])
        data["x"] = (("time", "token", "dim"), cloud["x"])
    ds = xr.Dataset(data, coords={"time": times, "dim": np.arange(att.d)})
    if "x" in ds.variables:
        ds = ds.assign_coords(token=np.arange(ds.sizes["token"]))
    kind = "N = infinity reference (adaptive cubature)" if ref is not None else f"token cloud, N = {config.N}"
    timings = {"total_s": time.perf_counter() - start}
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel="zero-temperature (exact flow)",
        integrator="exact: expm(A s) with the scalar clock ODE",
        fits=fits,
        main=kind,
        model=describe_model(config),
    )
    ds["w2"].attrs["long_name"] = f"exact W2(rho^inf_t, Pi_# rho_0), chordal cost: {kind}"
    if "w2_cloud" in ds.variables:
        ds["w2_cloud"].attrs["long_name"] = f"the same for a {config.init} cloud of N = {config.N} tokens"
    return ds


def summarize(ds) -> dict[str, Any]:
    """Local rates per window next to the guaranteed rate and c*; the fitted rate; final W2; timing."""
    fits = json_attr(ds, "fits", {})
    cfg = json_attr(ds, "config", {})
    out = {
        "experiment": cfg.get("experiment"),
        "model": ds.attrs.get("model"),
        "main": ds.attrs.get("main"),
        "local_rates": fits.get("local_rates", []),
        "rate": {k: fits.get(k) for k in ("fitted", "fitted_err", "guaranteed", "c_star")},
        "w2_final": float(ds.w2.values[-1]),
        "fit_window": [fits.get("fit", {}).get("t_lo"), fits.get("fit", {}).get("t_hi")],
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
    if fits.get("cloud_local_rates"):
        out["cloud_local_rates"] = fits["cloud_local_rates"]
    return out


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
        label=r"$W_2(\rho_t, \Pi_\#\rho_0)$, " + str(ds.attrs.get("main", "exact")),
    )
    if "w2_cloud" in ds.variables:
        ax.plot(
            t,
            positive(ds["w2_cloud"].values),
            color="0.55",
            lw=1.5,
            ls="--",
            label=f"token cloud, N = {config_value(ds, 'N')} (Monte Carlo: misses the slow tokens)",
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
