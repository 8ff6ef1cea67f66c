"""`zero-temperature`: the exact beta = inf flow on a large quadrature, its W2 decay rate against theory.

docs/math.md, Corollary 2: W2(rho^inf_t, Pi_# rho_0) decays exponentially. The rate fitted on the tail
of the curve is reported next to the guaranteed rate gamma/(2||B||) and the sharper prediction c*,
never instead of them. A Fibonacci lattice (even spacing) is the default quadrature of uniform
rho_0: Monte Carlo clouds miss the rare slow tokens near P_1 x = 0 and overestimate late rates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Required, Self, TypedDict

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator, model_validator

from .._text import format_value, format_with_error
from ..io import json_attr
from ..measures import DISCRETISATIONS
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
from .common import DataVariables, fit_or_reason, time_grid, token_subset, warn_assumptions
from .inputs import ModelInputs, model_inputs
from .model import ModelConfig, init_choice
from .needs import INVERTIBLE_B, LIMIT, REFERENCE, Need
from .registry import Experiment, doc_summary
from .units import Unit, Units

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.axes import Axes

    from ..dynamics.rates import LocalRate


class Curves(TypedDict, total=False):
    """The curves of the reference or of the cloud: w2 (T,), and w2_err, lyapunov, x, local_rates."""

    w2: Required[np.ndarray]
    w2_err: np.ndarray
    lyapunov: np.ndarray
    x: np.ndarray
    local_rates: Required[list[LocalRate]]


ZERO_TEMPERATURE_LABEL = "β = ∞ (zero temperature)"

#: the discretisations of the cloud beside the reference: those that do not depend on beta
CLOUD_INITS = tuple(name for name, entry in DISCRETISATIONS.items() if not entry.per_beta)
if TYPE_CHECKING:
    CloudInit = str
else:
    CloudInit = Literal[CLOUD_INITS]
CLOUD_INIT_HELP = (
    "the token cloud shown beside the N = infinity reference: "
    + ", ".join(init_choice(n) for n in CLOUD_INITS if n != "quadrature")
    + ", or quadrature: the reference alone"
)


class ZeroTemperatureConfig(ModelConfig):
    """Config of the `zero-temperature` experiment."""

    experiment: Literal["zero-temperature"] = "zero-temperature"
    needs: ClassVar[tuple[Need, ...]] = (INVERTIBLE_B, LIMIT, REFERENCE)
    init: CloudInit = Field("fibonacci", description=CLOUD_INIT_HELP)
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
    def _window_in_span(self) -> Self:
        if self.fit_window[1] > self.t_max:
            raise ValueError(f"fit_window {self.fit_window} ends after t_max = {self.t_max}")
        k = self.rate_window / self.dt_save
        if round(k) < 1 or abs(k - round(k)) > 1e-9 * k or self.rate_window > self.t_max:
            near = self.dt_save * max(1, min(round(k), math.floor(self.t_max / self.dt_save + 1e-9)))
            raise ValueError(
                f"rate_window = {self.rate_window:g} must be a multiple of dt_save = {self.dt_save:g}, at "
                f"most t_max = {self.t_max:g} (the windows' ends are saved times): e.g. rate_window = "
                f"{near:g}"
            )
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


@dataclass(frozen=True, eq=False)
class ZeroTemperatureInputs:
    """What a zero-temperature run computes from, made from its config once."""

    model: ModelInputs
    times: np.ndarray
    N: int  # tokens of the cloud beside the reference (0: none)
    seed: int
    n_keep: int
    reference_rtol: float
    rate_window: float
    fit_window: tuple[float, float]

    @property
    def reference_only(self) -> bool:
        """init = quadrature: the N = infinity reference stands for the quadrature, no cloud."""
        return self.model.rho0.init.name == "quadrature"


def zero_temperature_inputs(config: ZeroTemperatureConfig) -> ZeroTemperatureInputs:
    return ZeroTemperatureInputs(
        model_inputs(config),
        time_grid(config.t_max, config.dt_save),
        config.N,
        config.seed,
        config.n_keep,
        config.reference_rtol,
        config.rate_window,
        (config.fit_window[0], config.fit_window[1]),
    )


def _reference_part(inputs: ZeroTemperatureInputs, reporter: Reporter) -> xr.Dataset:
    """The N = infinity reference: w2 and its error w2_err (time); where the exact formula does not
    apply, no variables and attrs["missing"] saying why (init = quadrature, which needs it: an error)."""
    import xarray as xr

    from ..dynamics.reference import reference_w2

    density = inputs.model.rho0.density
    try:
        with reporter.task("N = infinity reference", total=1.0):
            ref = reference_w2(
                inputs.model.head_at(math.inf),
                inputs.times,
                density.name,
                rtol=inputs.reference_rtol,
                **density.params,
            )
    except ValueError as err:
        if inputs.reference_only:
            raise ValueError(f"init = quadrature needs the N = infinity reference, which {err}") from None
        return xr.Dataset(attrs={"missing": str(err)})
    return xr.Dataset(
        {"w2": (("time",), ref.w2), "w2_err": (("time",), ref.w2_err)},
        coords={"time": ref.times},
        attrs={"nodes": int(ref.info.get("nodes", 0))},
    )


def _reference(inputs: ZeroTemperatureInputs, part: xr.Dataset, reporter: Reporter) -> Curves | None:
    """The reference's curves (w2, w2_err, local_rates) from its part, or None with a warning where
    there is none."""
    from ..dynamics.rates import local_rates

    if "missing" in part.attrs:
        reporter.warn(f"no N = infinity reference ({part.attrs['missing']}): the token cloud alone is shown")
        return None
    times, w2, w2_err = part["time"].values, part["w2"].values, part["w2_err"].values
    rates = local_rates(times, w2, w2_err, width=inputs.rate_window)
    return {"w2": w2, "w2_err": w2_err, "local_rates": rates}


def _cloud_part(inputs: ZeroTemperatureInputs, reporter: Reporter) -> xr.Dataset:
    """The exact flow of a token cloud of N tokens: w2 to Pi_# rho_0 and the Lyapunov functional
    (time), the positions x (time, token, dim) of n_keep tokens (float32)."""
    import xarray as xr

    from ..dynamics.zero_temperature import project, simulate_zero_temperature
    from ..science import metrics
    from ..transport.wasserstein import w2_to_target

    att, times = inputs.model.head_at(math.inf), inputs.times
    nodes = inputs.model.rho0.nodes(inputs.N, inputs.seed)
    keep = token_subset(inputs.N, inputs.n_keep, inputs.seed)
    with reporter.task(f"exact flow of {inputs.N} tokens", total=float(times[-1])):
        traj = simulate_zero_temperature(nodes.X, att, times)
    w = nodes.weights
    w2 = w2_to_target(traj.x, project(nodes.X, att, spectral=True), weights=w).values
    lyapunov = np.asarray(metrics.lyapunov(traj.x, att.spectrum().top_projector, weights=w))
    data = {
        "w2": (("time",), w2),
        "lyapunov": (("time",), lyapunov),
        "x": (("time", "token", "dim"), traj.x[:, keep].astype(np.float32)),
    }
    return xr.Dataset(data, attrs={"note": traj.info.get("note", "")})


def _cloud(inputs: ZeroTemperatureInputs, part: xr.Dataset) -> Curves:
    """The cloud's curves (w2, lyapunov, x, local_rates) from its part."""
    from ..dynamics.rates import local_rates

    w2 = part["w2"].values
    return {
        "w2": w2,
        "lyapunov": part["lyapunov"].values,
        "x": part["x"].values,
        "local_rates": local_rates(inputs.times, w2, width=inputs.rate_window) if np.all(w2 > 0) else [],
    }


def _fits(
    inputs: ZeroTemperatureInputs, main: Curves, cloud: Curves | None, reporter: Reporter
) -> dict[str, object]:
    """The rate fitted on the main curve next to the guaranteed rate and c*, and the local rates."""
    from ..science.assumptions import reference_rates
    from ..science.fits import fit_decay_rate

    rates = {
        k: v for k, v in reference_rates(inputs.model.head_at(math.inf)).items() if isinstance(v, int | float)
    }
    fit = fit_or_reason(fit_decay_rate, inputs.times, main["w2"], tail=inputs.fit_window)
    fits: dict[str, object] = {"fit": fit, **rates, "local_rates": main["local_rates"]}
    if "rate" in fit:
        fits.update(fitted=fit["rate"], fitted_err=fit["rate_err"])
    if cloud is not None and cloud is not main:
        fits["cloud_local_rates"] = cloud["local_rates"]
    for r in main["local_rates"]:
        reporter.info(f"rate on [{r['window'][0]:g}, {r['window'][1]:g}]: {r['rate']:.5g}")
    if "c_star" in rates:
        reporter.info(
            f"predicted c* = {rates['c_star']:.5g}, guaranteed {rates.get('guaranteed', math.nan):.4g}"
        )
    return fits


def _dataset(inputs: ZeroTemperatureInputs, ref: Curves | None, cloud: Curves | None) -> xr.Dataset:
    """The curves: w2 (the reference's, else the cloud's), w2_err, w2_cloud, lyapunov, x."""
    import xarray as xr

    main = ref if ref is not None else cloud
    assert main is not None
    data: DataVariables = {
        "w2": (("time",), main["w2"]),
        "basis_A": (("dim", "k"), inputs.model.spectrum.top.basis),
    }
    if ref is not None:
        data["w2_err"] = (("time",), ref["w2_err"])
    if cloud is not None:
        data["w2_cloud" if ref is not None else "w2"] = (("time",), cloud["w2"])
        data["lyapunov"] = (("time",), cloud["lyapunov"])
        data["x"] = (("time", "token", "dim"), cloud["x"])
    ds = xr.Dataset(data, coords={"time": inputs.times, "dim": np.arange(inputs.model.d)})
    if "x" in ds.variables:
        ds = ds.assign_coords(token=np.arange(ds.sizes["token"]))
    return ds


def run(
    config: ZeroTemperatureConfig, out: Path | None = None, progress: Reporter | None = None
) -> xr.Dataset:
    """Exact zero-temperature flow: the N = infinity reference and/or a token cloud; W2 to Pi_# rho_0,
    local rates per window next to the guaranteed rate and c*. With `out`, the reference and the
    cloud are parts of the run folder (a rerun resumes from them)."""
    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = zero_temperature_inputs(config)
    warn_assumptions(inputs.model.attention, reporter)
    with_cloud = not inputs.reference_only and inputs.N > 0
    units.plan(2, "zero-temperature")
    ref = _reference(
        inputs, units.run(Unit("reference", partial(_reference_part, inputs, reporter))), reporter
    )
    cloud = None
    if with_cloud:
        cloud = _cloud(inputs, units.run(Unit("cloud", partial(_cloud_part, inputs, reporter))))
    else:
        reporter.advance()
    main = ref if ref is not None else cloud
    if main is None:
        raise ValueError("nothing to compute: N = 0 and no N = infinity reference for these weights")
    fits = _fits(inputs, main, cloud, reporter)
    ds = _dataset(inputs, ref, cloud)
    kind = "N = infinity reference (adaptive cubature)" if ref is not None else f"token cloud, N = {config.N}"
    units.finish(
        ds,
        kernel="zero-temperature (exact flow)",
        integrator="exact: expm(A s) with the scalar clock ODE",
        fits=fits,
        main=kind,
        model=inputs.model.description,
    )
    ds["w2"].attrs["long_name"] = f"exact W2(rho^inf_t, Pi_# rho_0), chordal cost: {kind}"
    if "w2_cloud" in ds.variables:
        ds["w2_cloud"].attrs["long_name"] = f"the same for a {config.init} cloud of N = {config.N} tokens"
    return ds


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """Local rates per window next to the guaranteed rate and c*; the fitted rate; final W2; timing."""
    fits = json_attr(ds, "fits", {})
    cfg = json_attr(ds, "config", {})
    out: dict[str, object] = {
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


#: the rate lines of `plot_zero_temperature`: attrs["fits"] key, line style, name
RATE_LINES = (
    ("fitted", "--", "fitted"),
    ("guaranteed", ":", "guaranteed γ/(2‖B‖)"),
    ("c_star", "-.", "predicted c*"),
)


def _rate_lines(ax: Axes, t: np.ndarray, w: np.ndarray, fits: Mapping[str, object]) -> None:
    """Lines of slope -rate (log y) for each rate of RATE_LINES in fits, through the data point at
    mid-time; the y range kept to the data's."""
    fin = np.flatnonzero(np.isfinite(w))
    if not fin.size:
        return
    k0 = int(fin[len(fin) // 2])
    for key, ls, name in RATE_LINES:
        rate = fits.get(key)
        if not (isinstance(rate, int | float) and math.isfinite(rate)):
            continue
        err = fits.get("fitted_err")
        if key == "fitted" and isinstance(err, int | float):
            value, error = format_with_error(float(rate), float(err))
            shown = f"{value} ± {error}"  # the digits its error supports
        else:
            shown = format_value(float(rate))
        label = f"slope −{shown} ({name})"
        ax.plot(t, w[k0] * np.exp(-rate * (t - t[k0])), color="0.4", ls=ls, lw=1.5, label=label)
    ax.set_ylim(np.nanmin(w[fin]) / 3, np.nanmax(w[fin]) * 3)


def _lyapunov_panel(ax: Axes, t: np.ndarray, lyapunov: np.ndarray) -> None:
    ax.plot(t, positive(lyapunov), color="black", ls="-", marker="s", markevery=markevery(len(t)))
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$\int |P_1^\perp x|^2\, d\rho_t$ (log scale)")
    ax.set_title("Lyapunov functional", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)


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
    main = r"$W_2(\rho_t, \Pi_\#\rho_0)$, " + str(ds.attrs.get("main", "exact"))
    ax.plot(t, w, color="black", lw=2, marker="o", markevery=markevery(len(t)), label=main)
    if "w2_cloud" in ds.variables:
        ax.plot(
            t,
            positive(ds["w2_cloud"].values),
            color="0.55",
            lw=1.5,
            ls="--",
            label=f"token cloud, N = {config_value(ds, 'N')} (Monte Carlo: misses the slow tokens)",
        )
    _rate_lines(ax, t, w, fits_of(ds))
    ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("time t")
    ax.set_ylabel(r"$W_2$, chordal (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    if has_lyap:
        _lyapunov_panel(axes[0][1], t, ds["lyapunov"].values)
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
