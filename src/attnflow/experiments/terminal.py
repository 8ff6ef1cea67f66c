"""`terminal`: mass near the top eigenspaces of A and of V against t (MATH.md, Conjecture 1).

For finite beta and large t a tight cluster moves like one token, dz/dt = P_z^perp V z, so mass
leaves A's top eigenspace for V's. The worked example separates the two: u_1 = (1, 0, 1)/sqrt 2 for
A, (3, 0, 1)/sqrt 10 for V. Reported per beta: the terminal-phase time, when the mass near V's top
eigenspace (largest real part) first reaches `threshold`; V's top eigenspace by largest modulus too.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from ._common import (
    base_attrs,
    finite_or_none,
    initial_cloud,
    integrator_label,
    json_attr,
    simulate_kwargs,
    time_grid,
    token_subset,
    torch_threads,
    unit_float64,
)
from ._config import Angle, Reporter, SimulationConfig, cached_part, check_betas, fingerprint, part_name


class TerminalConfig(SimulationConfig):
    """Config of the `terminal` experiment."""

    experiment: Literal["terminal"] = "terminal"
    betas: list[PositiveFloat] = Field([10.0, 30.0, 100.0], description="inverse temperatures beta")
    N: PositiveInt = Field(500, description="number of tokens")
    init: Literal["uniform", "fibonacci"] = Field(
        "uniform", description="initial cloud: uniform or fibonacci"
    )
    t_max: PositiveFloat = Field(20.0, description="final time (long: the terminal phase comes last)")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times")
    eps: Angle = Field(0.1, description="angle (radians) defining 'near' an eigenspace")
    threshold: PositiveFloat = Field(0.5, description="terminal time: first t with mass_V >= threshold")
    n_keep: NonNegativeInt = Field(200, description="tokens whose positions are stored")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: list[float]) -> list[float]:
        return check_betas(v)

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, v: float) -> float:
        if v > 1:
            raise ValueError(f"threshold is a mass fraction in (0, 1], got {v}")
        return v


PRESETS = {
    "terminal-tiny": {
        "betas": [10.0, 30.0],
        "N": 48,
        "t_max": 8.0,
        "dt_save": 0.4,
        "n_keep": 12,
        "integrator": "rk4",
        "dt": 0.05,
    },
}


def _beta_part(config: TerminalConfig, beta: float, X0, times, keep, spaces, reporter: Reporter):
    import xarray as xr

    from .. import metrics
    from ..fits import terminal_time
    from ..integrate import simulate
    from ..model import worked_example

    with torch_threads(config.threads), reporter.task(f"beta = {beta:g}", total=float(times[-1])) as cb:
        traj = simulate(X0, worked_example(beta), times, progress=cb, **simulate_kwargs(config))
    Xt = unit_float64(traj.x)
    masses = {name: np.asarray(metrics.subspace_mass(Xt, spaces[name], config.eps)) for name in spaces}
    tt = terminal_time(times, masses["mass_V"], config.threshold)
    data: dict[str, Any] = {k: (("beta", "time"), v[None]) for k, v in masses.items()}
    data["terminal_time"] = (("beta",), [tt.t])
    data["x"] = (("beta", "time", "token", "dim"), Xt[:, keep].astype(np.float32)[None])
    from ..io import to_json

    info = {k: v for k, v in traj.info.items() if isinstance(v, (int, float, str, dict))}
    return xr.Dataset(
        data,
        coords={"beta": [beta], "time": times},
        attrs={"solver": to_json(info), "terminal_note": tt.reason},
    )


def run(config: TerminalConfig, out: Path | None = None, progress: Reporter | None = None):
    """Simulate every beta for long times; mass fractions near A's and V's top eigenspaces."""
    import xarray as xr

    from ..model import worked_example

    reporter = progress or Reporter()
    start = time.perf_counter()
    att = worked_example(1.0)
    sp = att.spectrum()
    X0 = initial_cloud(config.init, config.N, att.d, config.seed)
    times = time_grid(config.t_max, config.dt_save)
    keep = token_subset(config.N, config.n_keep, config.seed)
    spaces = {
        "mass_A": sp.top.basis,
        "mass_V": sp.v_top_real.basis,
        "mass_V_magnitude": sp.v_top_magnitude.basis,
    }
    fp = fingerprint(config, exclude={"betas"})
    reporter.overall(len(config.betas), f"terminal: {len(config.betas)} betas, N = {config.N}")
    parts, timings, notes = [], {}, {}
    for beta in config.betas:
        t0 = time.perf_counter()
        part = cached_part(
            out,
            part_name(beta=beta),
            fp,
            partial(_beta_part, config, beta, X0, times, keep, spaces, reporter),
            reporter,
        )
        timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
        notes[f"{beta:g}"] = part.attrs.get("terminal_note", "")
        parts.append(part)
        reporter.advance()
        reporter.info(f"beta = {beta:g}: terminal time {float(part.terminal_time[0]):.3g}")
    ds = xr.concat([p.drop_attrs() for p in parts], dim="beta")
    ds["basis_A"] = (("dim", "k"), sp.top.basis)
    ds["basis_V"] = (("dim", "kv"), sp.v_top_real.basis)
    ds = ds.assign_coords(dim=np.arange(att.d), token=keep)
    timings["total_s"] = time.perf_counter() - start
    solver = [json_attr(p, "solver", {}) for p in parts]
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel=config.kernel,
        integrator=integrator_label(config),
        solver=solver,
        terminal_notes=notes,
        eigenvalues_V_top_real=[str(v) for v in np.atleast_1d(sp.v_top_real.eigenvalues)],
        eigenvalues_V_top_magnitude=[str(v) for v in np.atleast_1d(sp.v_top_magnitude.eigenvalues)],
    )
    for name in spaces:
        which = {"mass_A": "A's top", "mass_V": "V's top (largest real part)"}.get(
            name, "V's top (largest modulus)"
        )
        ds[name].attrs["long_name"] = f"fraction of tokens within {config.eps:g} rad of {which} eigenspace"
    return ds


def summarize(ds) -> dict[str, Any]:
    """Terminal time and final masses per beta."""
    cfg = json_attr(ds, "config", {})
    per_beta = {
        f"{b:g}": {
            "terminal_time": finite_or_none(ds.terminal_time.sel(beta=b)),
            "mass_A_final": float(ds.mass_A.sel(beta=b).values[-1]),
            "mass_V_final": float(ds.mass_V.sel(beta=b).values[-1]),
            "mass_A_max": float(ds.mass_A.sel(beta=b).max()),
        }
        for b in ds.beta.values.tolist()
    }
    return {
        "experiment": "terminal",
        "N": cfg.get("N"),
        "threshold": cfg.get("threshold"),
        "per_beta": per_beta,
        "warnings": json_attr(ds, "warnings", []),
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
