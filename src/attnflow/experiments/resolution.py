"""`resolution`: doubling N until min W2 and t* stop changing; the N needed per beta.

docs/math.md, "Mean-field resolution": N tokens follow the mean-field equation only when their spacing is
well below the softmax resolution beta^(-1/2). For each beta, N runs through N_min, 2 N_min, ... up
to N_max and stops once `streak` consecutive doublings N -> 2N each change min_t W2 by less than `tol`
(relative) and t* by less than max(t_tol, one saved-time step): N_needed is the first N of that
streak (NaN when the ladder ends first, then `converged` is false). One agreeing doubling is not
enough: below resolution the curves barely move with N either.
"""

from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from .._text import format_value
from ..io import json_attr
from ..plot import (
    DPI,
    beta_label,
    beta_legend,
    config_value,
    log_axis_plain_ticks,
    new_figure,
    positive,
    require,
    run_title,
    save,
    series_styles,
    ticks_at,
)
from ..progress import Reporter
from ._common import (
    base_attrs,
    finite_or_none,
    initial_cloud,
    integrator_label,
    simulate_kwargs,
    time_grid,
    torch_threads,
    unit_float64,
)
from ._config import SimulationConfig, cached_part, check_betas, fingerprint, part_name
from ._registry import Experiment, doc_summary

if TYPE_CHECKING:
    import xarray as xr


class ResolutionConfig(SimulationConfig):
    """Config of the `resolution` experiment."""

    experiment: Literal["resolution"] = "resolution"
    betas: list[PositiveFloat] = Field([10.0, 30.0, 100.0], description="inverse temperatures beta")
    N_min: PositiveInt = Field(128, description="first N of the ladder")
    N_max: PositiveInt = Field(2048, description="largest N of the ladder (N doubles from N_min)")
    init: Literal["uniform", "fibonacci"] = Field(
        "fibonacci", description="initial cloud: fibonacci (even spacing, smooth in N) or uniform"
    )
    t_max: PositiveFloat = Field(10.0, description="final time")
    dt_save: PositiveFloat = Field(0.05, description="spacing of the saved times")
    tol: PositiveFloat = Field(0.05, description="relative change of min W2 accepted between N and 2N")
    t_tol: PositiveFloat = Field(0.2, description="change of t* accepted between N and 2N (time units)")
    streak: PositiveInt = Field(
        2,
        description="doublings in a row that must agree (1 is fooled: curves barely move below resolution)",
    )

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: list[float]) -> list[float]:
        return check_betas(v)

    @model_validator(mode="after")
    def _ladder(self):
        if self.N_max < 2**self.streak * self.N_min:
            raise ValueError(
                f"N_max = {self.N_max} must be at least 2^streak N_min = {2**self.streak * self.N_min} "
                f"(streak = {self.streak} doublings must agree)"
            )
        return self


PRESETS = {
    "resolution-tiny": {
        "betas": [10.0, 30.0],
        "N_min": 16,
        "N_max": 64,
        "streak": 1,
        "t_max": 3.0,
        "dt_save": 0.1,
        "integrator": "rk4",
        "dt": 0.05,
    }
}


def ladder(N_min: int, N_max: int) -> list[int]:
    """N_min, 2 N_min, 4 N_min, ... <= N_max."""
    out = [N_min]
    while out[-1] * 2 <= N_max:
        out.append(out[-1] * 2)
    return out


def _point(config: ResolutionConfig, beta: float, N: int, reporter: Reporter):
    import xarray as xr

    from ..fits import t_star
    from ..integrate import simulate
    from ..model import worked_example
    from ..wasserstein import w2_to_target
    from ..zero_temperature import project

    att = worked_example(beta)
    X0 = initial_cloud(config.init, N, att.d, config.seed)
    times = time_grid(config.t_max, config.dt_save)
    with (
        torch_threads(config.threads),
        reporter.task(f"beta = {beta:g}, N = {N}", total=float(times[-1])) as cb,
    ):
        traj = simulate(X0, att, times, progress=cb, **simulate_kwargs(config))
    ts = t_star(times, w2_to_target(unit_float64(traj.x), project(X0, att)).values)
    return xr.Dataset(
        {"min_w2": (("beta", "N"), [[ts.w2_min]]), "t_star": (("beta", "N"), [[ts.t_star]])},
        coords={"beta": [beta], "N": [N]},
        attrs={"wall_s": float(traj.info.get("wall_time_s", 0.0))},
    )


def run(config: ResolutionConfig, out: Path | None = None, progress: Reporter | None = None):
    """For each beta, double N until min W2 and t* agree within tolerance."""
    import xarray as xr

    reporter = progress or Reporter()
    start = time.perf_counter()
    Ns = ladder(config.N_min, config.N_max)
    betas = list(config.betas)
    fp = fingerprint(
        config, exclude={"betas", "N_min", "N_max", "tol", "t_tol", "streak"}
    )  # per-point inputs only
    reporter.overall(len(betas) * len(Ns), f"resolution: {len(betas)} betas, N = {Ns[0]}..{Ns[-1]}")
    min_w2 = np.full((len(betas), len(Ns)), np.nan)
    tstar = np.full_like(min_w2, np.nan)
    needed = np.full(len(betas), np.nan)
    timings: dict[str, float] = {}
    for i, beta in enumerate(betas):
        streak = 0
        for j, N in enumerate(Ns):
            t0 = time.perf_counter()
            p = cached_part(
                out,
                part_name(beta=beta, N=N),
                fp,
                partial(_point, config, beta, N, reporter),
                reporter,
            )
            timings[f"beta={beta:g}_N={N}_s"] = time.perf_counter() - t0
            min_w2[i, j], tstar[i, j] = float(p.min_w2.values.ravel()[0]), float(p.t_star.values.ravel()[0])
            reporter.advance()
            if j > 0:
                dw = abs(min_w2[i, j] - min_w2[i, j - 1]) / max(min_w2[i, j], 1e-300)
                dt = abs(tstar[i, j] - tstar[i, j - 1])
                reporter.info(
                    f"beta = {beta:g}, N = {Ns[j - 1]} -> {N}: min W2 changes {dw:.2%}, t* by {dt:.3g}"
                )
                ok = dw < config.tol and dt <= max(config.t_tol, config.dt_save)
                streak = streak + 1 if ok else 0
                if streak >= config.streak:
                    needed[i] = Ns[j - config.streak]
                    reporter.advance(len(Ns) - 1 - j)
                    break
        if math.isnan(needed[i]):
            reporter.warn(f"beta = {beta:g}: not converged up to N = {Ns[-1]} (raise N_max)")
    timings["total_s"] = time.perf_counter() - start
    ds = xr.Dataset(
        {
            "min_w2": (("beta", "N"), min_w2),
            "t_star": (("beta", "N"), tstar),
            "N_needed": (("beta",), needed),
            "converged": (("beta",), ~np.isnan(needed)),
        },
        coords={"beta": betas, "N": Ns},
    )
    ds.attrs = base_attrs(
        config, reporter, timings, kernel=config.kernel, integrator=integrator_label(config)
    )
    ds["N_needed"].attrs["long_name"] = (
        "smallest N of the ladder whose doubling changes min W2 and t* within tol"
    )
    return ds


def summarize(ds) -> dict[str, Any]:
    """N needed per beta, with N / beta^((d-1)/2) (d = 3: N / beta) to compare with MATH.md."""
    per_beta = {}
    for b in ds.beta.values.tolist():
        n = finite_or_none(ds.N_needed.sel(beta=b))
        per_beta[f"{b:g}"] = {
            "N_needed": n,
            "converged": bool(ds.converged.sel(beta=b)),
            "N_needed_over_beta": None if n is None else n / b,
        }
    return {
        "experiment": "resolution",
        "per_beta": per_beta,
        "warnings": json_attr(ds, "warnings", []),
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }


# ---------------------------------------------------------------------------------------- figures


def plot_resolution(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Mean-field resolution: min W2 and t* against N (log x), one line per beta; N_needed against
    beta with the scale beta^((d-1)/2) when present.

    Needs `min_w2`, `t_star` (beta, N).  Writes resolution.png / .pdf.
    """
    dims = {"min_w2": ("beta", "N"), "t_star": ("beta", "N"), "N_needed": ("beta",)}
    require(ds, ["min_w2", "t_star"], "plot_resolution", dims)
    Ns = np.asarray(ds["N"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles = series_styles(len(betas))
    has_needed = "N_needed" in ds.variables
    fig, axes = new_figure(1, 3 if has_needed else 2, (15 if has_needed else 10.5, 4.6))
    for ax, var, ylab in (
        (axes[0][0], "min_w2", r"$\mathrm{min}_t W_2$ (log scale)"),
        (axes[0][1], "t_star", r"$t^*$"),
    ):
        vals = ds[var].transpose("beta", "N").values
        for i, b in enumerate(betas):
            ax.plot(Ns, positive(vals[i]) if var == "min_w2" else vals[i], label=beta_label(b), **styles[i])
        ax.set_xscale("log")
        ticks_at(ax.xaxis, Ns)  # the ladder's N: 16, 32, 64 rather than 2 x 10^1
        if var == "min_w2":
            log_axis_plain_ticks(ax)
        ax.set_xlabel("number of tokens N (log scale)")
        ax.set_ylabel(ylab)
        ax.set_title(
            "closest approach to Π#ρ₀" if var == "min_w2" else "time of closest approach", fontsize="medium"
        )
        ax.grid(True, which="both", alpha=0.3)
    beta_legend(fig, axes[0][0], betas)
    if has_needed:
        ax = axes[0][2]
        need = positive(ds["N_needed"].values)
        ax.plot(
            betas, need, ls="", marker="o", ms=8, color="black", mfc="white", label="N needed (converged)"
        )
        d = ds.sizes.get("dim") or config_value(ds, "d", "dim")
        ok = np.isfinite(need) & np.isfinite(betas)
        if isinstance(d, int) and ok.any():
            ref = betas ** ((d - 1) / 2)
            c = math.exp(float(np.mean(np.log(need[ok]) - np.log(ref[ok]))))
            ax.plot(betas, c * ref, color="0.4", ls="--", label=f"{format_value(c)}·β^((d−1)/2), d = {d}")
        ax.axhline(Ns.max(), color="0.6", ls=":", lw=1.2, label=f"largest N tried ({Ns.max():g})")
        _mark_not_converged(ax, betas, ~np.isfinite(need), Ns.max())
        ax.set_xscale("log")
        ax.set_yscale("log", nonpositive="mask")
        known = need[np.isfinite(need)]
        ax.set_ylim(min(Ns.min(), known.min() if known.size else np.inf) / 1.5, Ns.max() * 3)
        fb = betas[np.isfinite(betas) & (betas > 0)]
        if fb.size:  # x limits from the betas themselves: no point has a known N when none converged
            ax.set_xlim(fb.min() / 1.4, fb.max() * 1.4)
        ticks_at(ax.xaxis, betas)
        ticks_at(ax.yaxis, [*Ns, *known])
        ax.set_xlabel("inverse temperature β (log scale)")
        ax.set_ylabel("N needed (log scale)")
        ax.set_title("tokens needed for mean-field resolution", fontsize="medium")
        ax.legend(fontsize="small")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(run_title(ds, "Mean-field resolution: results against the number of tokens N"))
    return save(fig, outdir, "resolution", dpi)


def _mark_not_converged(ax, betas: np.ndarray, nc: np.ndarray, N_max: float) -> None:
    """Betas whose ladder ended unconverged: an upward arrow at the top edge of the axes (no N is
    known, so none is drawn on the N axis), labelled once "not converged"."""
    from matplotlib.transforms import blended_transform_factory

    if not nc.any():
        return
    top = blended_transform_factory(ax.transData, ax.transAxes)  # x: beta, y: a fraction of the axes
    for i, b in enumerate(betas[nc]):
        ax.annotate(
            "",
            xy=(b, 0.97),
            xytext=(b, 0.80),
            xycoords=top,
            textcoords=top,
            arrowprops={"arrowstyle": "-|>", "color": "0.25", "lw": 1.6, "mutation_scale": 14},
        )
        ax.text(
            b, 0.76, "not\nconverged", transform=top, ha="center", va="top", fontsize="x-small", color="0.25"
        )
        if i == 0:  # a legend entry for the arrows
            ax.plot(
                [],
                [],
                ls="",
                marker="$\\uparrow$",
                ms=10,
                color="0.25",
                label=f"not converged: N needed > {N_max:g}",
            )


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """min W2, t* and N needed against N and beta (resolution.png / .pdf); no tokens to animate."""
    return plot_resolution(ds, outdir, dpi=dpi)


EXPERIMENT = Experiment(
    name="resolution",
    description=doc_summary(__doc__),
    Config=ResolutionConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={
        "resolution": (
            "Mean-field resolution",
            "Mean-field resolution: min W₂ and t* against the number of tokens N.",
        )
    },
    presets=PRESETS,
)
