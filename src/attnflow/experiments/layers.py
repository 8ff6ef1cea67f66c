"""`layers`: an L-layer transformer against the ODE, error against L (first-order convergence).

One layer is an explicit Euler step followed by layer normalisation, x_i <- (x_i + h v_i)/|x_i + h v_i|
with h = T/L (docs/math.md). Its error at time T, max_i |x_i^L - x_i(T)|, is measured against a fine
adaptive reference of the ODE; the fitted slope of log error against log h is the order (1 expected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from .._text import format_value, format_with_error
from .._threads import DEFAULT_THREADS, THREADS_HELP
from ..io import json_attr
from ..measures import Nodes
from ..plot import DPI, fits_of, new_figure, plain_log_ticks, positive, require, run_title, save, ticks_at
from ..progress import Reporter
from .common import torch_threads
from .config import KERNEL_HELP, DeviceConfig, Kernel, Threads
from .inputs import model_inputs
from .model import ModelConfig
from .parts import part_name
from .registry import Experiment, doc_summary
from .units import Unit, Units

if TYPE_CHECKING:
    import xarray as xr

    from ..attention import Attention


#: the smallest depth T: the Euler error h T (about T^2 / L) must stand above float64's round-off for
#: an order to be fitted (T = 1e-12 fitted order -1, the round-off's), and the adaptive reference's
#: first step underflows at T = 1e-50
MIN_DEPTH = 1e-3


class LayersConfig(ModelConfig, DeviceConfig):
    """Config of the `layers` experiment."""

    experiment: Literal["layers"] = "layers"
    beta: PositiveFloat = Field(10.0, description="inverse temperature (finite)")
    N: PositiveInt = Field(128, description="number of tokens")
    T: float = Field(
        2.0,
        ge=MIN_DEPTH,
        description=f"depth in time units: L layers of step h = T/L (at least {MIN_DEPTH:g}: below, the "
        "layers' error is round-off)",
    )
    Ls: list[PositiveInt] = Field([4, 8, 16, 32, 64, 128, 256, 512], description="numbers of layers L")
    fit_min_L: PositiveInt = Field(
        16, description="the order is fitted on L >= fit_min_L (asymptotic regime)"
    )
    kernel: Kernel = Field("auto", description=KERNEL_HELP)
    reference_rtol: PositiveFloat = Field(1e-11, description="rtol of the adaptive reference solution")
    threads: Threads = Field(DEFAULT_THREADS, description=THREADS_HELP)

    @field_validator("beta")
    @classmethod
    def _beta(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("beta must be finite")
        return v

    @field_validator("Ls")
    @classmethod
    def _Ls(cls, v: list[int]) -> list[int]:
        if len(v) < 2 or len(set(v)) != len(v):
            raise ValueError(f"Ls needs at least 2 distinct numbers of layers, got {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _fit_points(self) -> Self:
        if sum(L >= self.fit_min_L for L in self.Ls) < 2:
            raise ValueError(f"fit_min_L = {self.fit_min_L} leaves fewer than 2 of Ls = {self.Ls} to fit")
        return self


PRESETS = {
    "layers-tiny": {"N": 24, "Ls": [4, 8, 16, 32, 64], "T": 1.0, "reference_rtol": 1e-9, "fit_min_L": 8}
}


def transformer(
    X0: np.ndarray,
    att: Attention,
    L: int,
    T: float,
    kernel: str = "auto",
    weights: np.ndarray | None = None,
    device: str | None = None,
) -> np.ndarray:
    """L layers x <- (x + h v(x)) / |x + h v(x)|, h = T/L: the tokens after the last layer (N, d).
    weights: those of a weighted measure (the softmax weighs token j by w_j), or None."""
    from ..kernels import velocity

    h = T / L
    X = np.array(X0, dtype=np.float64)
    for _ in range(L):
        Y = X + h * velocity(X, att, kernel=kernel, weights=weights, device=device)
        X = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    return X


@dataclass(frozen=True, eq=False)
class LayersInputs:
    """What a layers run computes from, made from its config once (`layers_inputs`)."""

    att: Attention  # at the run's beta
    nodes: Nodes
    T: float
    Ls: tuple[int, ...]
    kernel: str
    device: str
    threads: int
    reference_rtol: float


def layers_inputs(config: LayersConfig) -> LayersInputs:
    model = model_inputs(config)
    return LayersInputs(
        model.head_at(config.beta),
        model.rho0.nodes(config.N, config.seed),
        config.T,
        tuple(config.Ls),
        config.kernel,
        config.device,
        config.threads,
        config.reference_rtol,
    )


def _reference_part(inputs: LayersInputs, reporter: Reporter) -> xr.Dataset:
    """The ODE at time T by the adaptive integrator at reference_rtol: the tokens x_T (token, dim),
    and its wall time in attrs["reference_s"]."""
    import xarray as xr

    from ..dynamics.integrate import simulate

    with torch_threads(inputs.threads), reporter.task("ODE reference", total=inputs.T) as cb:
        ref = simulate(
            inputs.nodes.X,
            inputs.att,
            [inputs.T],
            method="adaptive",
            options={"rtol": inputs.reference_rtol, "atol": 1e-13},
            kernel=inputs.kernel,
            weights=inputs.nodes.weights,
            device=inputs.device,
            progress=cb,
        )
    return xr.Dataset(
        {"x_T": (("token", "dim"), ref.x[-1])}, attrs={"reference_s": float(ref.info.get("wall_time_s", 0.0))}
    )


def _depth_part(inputs: LayersInputs, L: int, X_T: np.ndarray, reporter: Reporter) -> xr.Dataset:
    """The error of L layers at depth T, max_i |x_i^L - x_i(T)| against the reference X_T (N, d)."""
    import xarray as xr

    with torch_threads(inputs.threads), reporter.task(f"L = {L}", total=1.0):
        XL = transformer(
            inputs.nodes.X, inputs.att, L, inputs.T, inputs.kernel, inputs.nodes.weights, inputs.device
        )
    return xr.Dataset({"error": ((), float(np.max(np.linalg.norm(XL - X_T, axis=-1))))}, attrs={"L": L})


def fit_order(h: np.ndarray, errors: np.ndarray, use: np.ndarray) -> dict[str, float | str]:
    """The slope of log error against log h over the steps `use` (bool (L,)): order, its standard
    error, prefactor, r2; {"error": why} when an error is exactly 0."""
    from scipy.stats import linregress

    if not np.all(errors[use] > 0):
        return {"error": "an error is exactly 0: no order can be fitted"}
    lr = linregress(np.log(h[use]), np.log(errors[use]))
    return {
        "order": float(lr.slope),
        "order_err": float(lr.stderr),
        "prefactor": float(math.exp(lr.intercept)),
        "r2": float(lr.rvalue**2),
    }


def run(config: LayersConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Error of the L-layer transformer at depth T against the ODE, for every L; fitted order. With
    `out`, the reference and each L are parts of the run folder (a rerun resumes from them)."""
    import xarray as xr

    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = layers_inputs(config)
    units.plan(len(config.Ls) + 1, f"layers: {len(config.Ls)} depths, N = {config.N}")
    ref = units.run(Unit("reference", partial(_reference_part, inputs, reporter)))
    X_T = ref["x_T"].values
    errors = []
    for L in inputs.Ls:
        part = units.run(Unit(part_name(L=L), partial(_depth_part, inputs, L, X_T, reporter)))
        errors.append(float(part["error"]))
        reporter.info(f"L = {L}: max_i |x_i^L - x_i(T)| = {errors[-1]:.3g}")
    errors_a = np.asarray(errors)
    h = config.T / np.asarray(config.Ls, dtype=float)
    fits = fit_order(h, errors_a, np.asarray(config.Ls) >= config.fit_min_L)
    if "order" in fits:
        fits["fit_min_L"] = config.fit_min_L
    units.timings["reference_s"] = float(ref.attrs["reference_s"])
    ds = xr.Dataset({"error": (("L",), errors_a), "h": (("L",), h)}, coords={"L": np.asarray(config.Ls)})
    units.finish(
        ds,
        kernel=config.kernel,
        integrator=f"explicit Euler + layer normalisation; reference adaptive rtol={config.reference_rtol:g}",
        fits=fits,
    )
    ds["error"].attrs["long_name"] = "max_i |x_i^L - x_i(T)| against the adaptive ODE reference"
    ds["h"].attrs["long_name"] = "step h = T/L"
    return ds


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """Fitted order and the error at each depth."""
    fits = json_attr(ds, "fits", {})
    return {
        "experiment": "layers",
        "order": fits.get("order"),
        "order_err": fits.get("order_err"),
        "errors": {
            f"L={int(L)}": {"h": float(h), "error": float(e)}
            for L, h, e in zip(ds.L.values, ds.h.values, ds.error.values, strict=True)
        },
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }


# ---------------------------------------------------------------------------------------- figures


def plot_layers(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Transformer layers as Euler steps: error against the step h = T/L (log-log) with the fitted
    order from attrs["fits"]["order"] drawn through the smallest-h point.

    Needs `error` (L) and `h` (L).  Writes layers.png / .pdf.
    """
    require(ds, ["error", "h"], "plot_layers", {"error": ("L",), "h": ("L",)})
    h = np.asarray(ds["h"].values, dtype=float)
    e = positive(ds["error"].values)
    fig, axes = new_figure(1, 1, (6.5, 4.6))
    ax = axes[0][0]
    ax.plot(
        h,
        e,
        ls="-",
        marker="o",
        color="black",
        mfc="white",
        ms=7,
        label=r"$\mathrm{max}_i\, |x_i^L - x_i(T)|$",
    )
    fits = fits_of(ds)
    order = fits.get("order")
    ok = np.flatnonzero(np.isfinite(e) & np.isfinite(h) & (h > 0))
    if isinstance(order, int | float) and ok.size:
        k = ok[np.argmin(h[ok])]
        hh = np.geomspace(h[ok].min(), h[ok].max(), 50)
        err = fits.get("order_err")
        shown = (
            " ± ".join(format_with_error(float(order), float(err)))
            if err is not None
            else format_value(order)
        )
        lab = f"fitted order {shown}"  # to the digits its error supports
        ax.plot(hh, e[k] * (hh / h[k]) ** order, color="0.45", ls="--", label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log", nonpositive="mask")
    plain_log_ticks(ax.yaxis)
    ticks_at(ax.xaxis, h)  # the steps themselves: no crowded minor labels
    ax.margins(x=0.08)  # room for the "L = ..." labels at both ends
    ax.set_xlabel("step h = T / L (log scale)")
    ax.set_ylabel("error against a fine ODE reference (log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    for hk, ek, Lk in zip(h, e, np.asarray(ds["L"].values), strict=True):
        if np.isfinite(ek):
            ax.annotate(
                f"L = {Lk}", (hk, ek), textcoords="offset points", xytext=(6, -10), fontsize="x-small"
            )
    fig.suptitle(run_title(ds, "Layers as explicit Euler steps with renormalisation"))
    return save(fig, outdir, "layers", dpi)


# ---------------------------------------------------------------------------------------------
# pretrained heads

HEADS_DIMS = ("head", "time")
# the whole layer: thick black, drawn under the heads so that equal curves stay visible
WHOLE_LAYER_STYLE = {"color": "black", "linestyle": "-", "marker": "o", "lw": 3.2, "ms": 7, "zorder": 1.5}


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """The error against the step h (layers.png / .pdf); there are no tokens to animate."""
    return plot_layers(ds, outdir, dpi=dpi)


EXPERIMENT = Experiment(
    name="layers",
    description=doc_summary(__doc__),
    Config=LayersConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={
        "layers": (
            "Layers as Euler steps",
            "Error of the L-layer transformer (Euler with renormalisation) against the step h = T/L.",
        )
    },
    presets=PRESETS,
)
