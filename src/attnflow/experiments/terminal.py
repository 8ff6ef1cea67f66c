"""`terminal`: mass near the top eigenspaces of A and of V against t (docs/math.md, Conjecture 1).

For finite beta and large t a tight cluster moves like one token, dz/dt = P_z^perp V z, so mass
leaves A's top eigenspace for V's. The worked example separates the two: u_1 = (1, 0, 1)/sqrt 2 for
A, (3, 0, 1)/sqrt 10 for V. Reported per beta: the terminal-phase time, when the mass near V's top
eigenspace (largest real part) first reaches `threshold`; V's top eigenspace by largest modulus too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from ..io import json_attr, to_json
from ..measures import Nodes
from ..plot import (
    DPI,
    TOKEN_CAPTIONS,
    token_figures,
)
from ..plot.mass import MASS_CAPTION, plot_mass
from ..progress import Reporter
from .common import (
    DataVariables,
    finite_or_none,
    time_grid,
    token_subset,
    torch_threads,
    unit_float64,
    warn_assumptions,
)
from .config import Angle, Betas, SimulationConfig
from .inputs import Integration, ModelInputs, integration, model_inputs
from .model import FlowConfig
from .parts import part_name
from .registry import Experiment, doc_summary
from .units import Unit, Units

if TYPE_CHECKING:
    import xarray as xr


class TerminalConfig(SimulationConfig, FlowConfig):
    """Config of the `terminal` experiment."""

    experiment: Literal["terminal"] = "terminal"
    one_head: ClassVar[bool] = True  # the eigenspaces of one head's A and V
    betas: Betas = Field([10.0, 30.0, 100.0], description="inverse temperatures beta")
    N: PositiveInt = Field(500, description="number of tokens")
    t_max: PositiveFloat = Field(20.0, description="final time (long: the terminal phase comes last)")
    dt_save: PositiveFloat = Field(0.1, description="spacing of the saved times")
    eps: Angle = Field(0.1, description="angle (radians) defining 'near' an eigenspace")
    threshold: PositiveFloat = Field(0.5, description="terminal time: first t with mass_V >= threshold")
    n_keep: NonNegativeInt = Field(200, description="tokens whose positions are stored")

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


@dataclass(frozen=True, eq=False)
class TerminalInputs:
    """What every beta of a terminal run shares, made from its config once (`terminal_inputs`)."""

    model: ModelInputs
    solver: Integration
    nodes: Nodes
    times: np.ndarray
    keep: np.ndarray  # indices of the tokens whose positions are stored
    eps: float
    threshold: float

    @property
    def spaces(self) -> dict[str, np.ndarray]:
        """The eigenspaces whose mass is followed: name -> orthonormal basis (d, m)."""
        sp = self.model.spectrum
        return {
            "mass_A": sp.top.basis,
            "mass_V": sp.v_top_real.basis,
            "mass_V_magnitude": sp.v_top_magnitude.basis,
        }


def terminal_inputs(config: TerminalConfig) -> TerminalInputs:
    model = model_inputs(config)
    return TerminalInputs(
        model,
        integration(config),
        model.rho0.nodes(config.N, config.seed),
        time_grid(config.t_max, config.dt_save),
        token_subset(config.N, config.n_keep, config.seed),
        config.eps,
        config.threshold,
    )


def _beta_part(inputs: TerminalInputs, beta: float, reporter: Reporter) -> xr.Dataset:
    import xarray as xr

    from ..dynamics.integrate import simulate
    from ..science import metrics
    from ..science.fits import terminal_time

    times, w, solver = inputs.times, inputs.nodes.weights, inputs.solver
    with torch_threads(solver.threads), reporter.task(f"beta = {beta:g}", total=float(times[-1])) as cb:
        att = inputs.model.at(beta)
        traj = simulate(inputs.nodes.X, att, times, weights=w, progress=cb, **solver.kwargs())
    Xt = unit_float64(traj.x)
    masses = {
        name: np.asarray(metrics.subspace_mass(Xt, basis, inputs.eps, weights=w))
        for name, basis in inputs.spaces.items()
    }
    tt = terminal_time(times, masses["mass_V"], inputs.threshold)
    data: DataVariables = {k: (("beta", "time"), v[None]) for k, v in masses.items()}
    data["terminal_time"] = (("beta",), [tt.t])
    data["x"] = (("beta", "time", "token", "dim"), Xt[:, inputs.keep].astype(np.float32)[None])
    info = {k: v for k, v in traj.info.items() if isinstance(v, (int, float, str, dict))}
    return xr.Dataset(
        data,
        coords={"beta": [beta], "time": times},
        attrs={"solver": to_json(info), "terminal_note": tt.reason},
    )


#: what the mass variables measure, for their long names
_WHICH = {
    "mass_A": "A's top",
    "mass_V": "V's top (largest real part)",
    "mass_V_magnitude": "V's top (largest modulus)",
}


def run(config: TerminalConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Simulate every beta for long times; mass fractions near A's and V's top eigenspaces."""
    import xarray as xr

    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = terminal_inputs(config)
    warn_assumptions(inputs.model.attention, reporter)
    units.plan(len(config.betas), f"terminal: {len(config.betas)} betas, N = {config.N}")
    parts, notes = [], {}
    for beta in config.betas:
        compute = partial(_beta_part, inputs, beta, reporter)
        part = units.run(Unit(part_name(beta=beta), compute, timing=f"beta={beta:g}_s"))
        notes[f"{beta:g}"] = part.attrs.get("terminal_note", "")
        parts.append(part)
        reporter.info(f"beta = {beta:g}: terminal time {float(part.terminal_time[0]):.3g}")
    sp = inputs.model.spectrum
    ds = xr.concat([p.drop_attrs() for p in parts], dim="beta")
    ds["basis_A"] = (("dim", "k"), sp.top.basis)
    ds["basis_V"] = (("dim", "kv"), sp.v_top_real.basis)
    ds = ds.assign_coords(dim=np.arange(inputs.model.d), token=inputs.keep)
    units.finish(
        ds,
        kernel=config.kernel,
        integrator=inputs.solver.label,
        solver=[json_attr(p, "solver", {}) for p in parts],
        terminal_notes=notes,
        model=inputs.model.description,
        theorem=dict(zip(("applies", "reason"), inputs.model.theorem(), strict=True)),
        eigenvalues_V_top_real=[str(v) for v in np.atleast_1d(sp.v_top_real.eigenvalues)],
        eigenvalues_V_top_magnitude=[str(v) for v in np.atleast_1d(sp.v_top_magnitude.eigenvalues)],
    )
    for name, which in _WHICH.items():
        ds[name].attrs["long_name"] = f"mass within {config.eps:g} rad of {which} eigenspace"
    return ds


def summarize(ds: xr.Dataset) -> dict[str, object]:
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


# ---------------------------------------------------------------------------------------- figures


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """The masses against t, then the token snapshots (terminal time among them) and animation."""
    paths = plot_mass(ds, outdir, dpi=dpi)
    return paths + token_figures(ds, outdir, animation=animation, dpi=dpi, mark="terminal_time")


EXPERIMENT = Experiment(
    name="terminal",
    description=doc_summary(__doc__),
    Config=TerminalConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={"mass": MASS_CAPTION, **TOKEN_CAPTIONS},
    presets=PRESETS,
    part_keys=("betas",),
)
