"""`resolution`: doubling N until min W2 and t* stop changing; the N needed per beta.

MATH.md, "Mean-field resolution": N tokens follow the mean-field equation only when their spacing is
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
from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from ._common import (
    base_attrs,
    finite_or_none,
    initial_cloud,
    integrator_label,
    json_attr,
    simulate_kwargs,
    time_grid,
    torch_threads,
    unit_float64,
)
from ._config import Reporter, SimulationConfig, cached_part, check_betas, fingerprint, part_name


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

    from .. import metrics
    from ..fits import t_star
    from ..integrate import simulate
    from ..model import worked_example
    from ..zero_temperature import project

    att = worked_example(beta)
    X0 = initial_cloud(config.init, N, att.d, config.seed)
    times = time_grid(config.t_max, config.dt_save)
    with (
        torch_threads(config.threads),
        reporter.task(f"beta = {beta:g}, N = {N}", total=float(times[-1])) as cb,
    ):
        traj = simulate(X0, att, times, progress=cb, **simulate_kwargs(config))
    ts = t_star(times, metrics.w2_to_target(unit_float64(traj.x), project(X0, att)).values)
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
