"""`terminal`: mass near the top eigenspaces of A and of V against t (docs/math.md, Conjecture 1).

For finite beta and large t a tight cluster moves like one token, dz/dt = P_z^perp V z, so mass
leaves A's top eigenspace for V's. The worked example separates the two: u_1 = (1, 0, 1)/sqrt 2 for
A, (3, 0, 1)/sqrt 10 for V. Reported per beta: the terminal-phase time, when the mass near V's top
eigenspace (largest real part) first reaches `threshold`; V's top eigenspace by largest modulus too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator

from .._text import format_value
from ..io import json_attr, to_json
from ..measures import Nodes
from ..plot import (
    DPI,
    TOKEN_CAPTIONS,
    beta_legend,
    config_value,
    markevery,
    new_figure,
    positive,
    require,
    run_title,
    save,
    series_styles,
    token_figures,
)
from ..plot.style import ZERO_TEMPERATURE_STYLE, beta_line, beta_status
from ..progress import Reporter
from .common import (
    base_attrs,
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
from .parts import cached_part, fingerprint, part_name
from .registry import Experiment, doc_summary

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


def _beta_part(inputs: TerminalInputs, beta: float, reporter: Reporter):
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
    data: dict[str, Any] = {k: (("beta", "time"), v[None]) for k, v in masses.items()}
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


def run(config: TerminalConfig, out: Path | None = None, progress: Reporter | None = None):
    """Simulate every beta for long times; mass fractions near A's and V's top eigenspaces."""
    import xarray as xr

    reporter = progress or Reporter()
    start = time.perf_counter()
    inputs = terminal_inputs(config)
    warn_assumptions(inputs.model.attention, reporter)
    fp = fingerprint(config, exclude=set(EXPERIMENT.part_keys))
    reporter.overall(len(config.betas), f"terminal: {len(config.betas)} betas, N = {config.N}")
    parts, timings, notes = [], {}, {}
    for beta in config.betas:
        t0 = time.perf_counter()
        compute = partial(_beta_part, inputs, beta, reporter)
        part = cached_part(out, part_name(beta=beta), fp, compute, reporter)
        timings[f"beta={beta:g}_s"] = time.perf_counter() - t0
        notes[f"{beta:g}"] = part.attrs.get("terminal_note", "")
        parts.append(part)
        reporter.advance()
        reporter.info(f"beta = {beta:g}: terminal time {float(part.terminal_time[0]):.3g}")
    sp = inputs.model.spectrum
    ds = xr.concat([p.drop_attrs() for p in parts], dim="beta")
    ds["basis_A"] = (("dim", "k"), sp.top.basis)
    ds["basis_V"] = (("dim", "kv"), sp.v_top_real.basis)
    ds = ds.assign_coords(dim=np.arange(inputs.model.d), token=inputs.keep)
    timings["total_s"] = time.perf_counter() - start
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
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


# ---------------------------------------------------------------------------------------- figures

#: caption of `plot_mass` (also drawn by the concentration experiment)
MASS_CAPTION = (
    "Mass near the top eigenspaces",
    "Fraction of tokens within ε of the top eigenspaces of A and of V against t.",
)


def plot_mass(ds: xr.Dataset, outdir: str | Path, dpi: int = DPI) -> list[Path]:
    """Mass fractions near the top eigenspaces of A and V against t, one line per beta; a Lyapunov
    panel (log y) when `lyapunov` is present; terminal times marked when `terminal_time` is.

    Needs `mass_A`, `mass_V` (beta, time); uses `mass_V_magnitude`, `lyapunov` (beta, time),
    `terminal_time` (beta).  Writes mass.png and mass.pdf.
    """
    dims = {v: ("beta", "time") for v in ("mass_A", "mass_V", "mass_V_magnitude", "lyapunov")}
    require(ds, ["mass_A", "mass_V"], "plot_mass", dims)
    t = np.asarray(ds["time"].values, dtype=float)
    betas = np.asarray(ds["beta"].values, dtype=float)
    styles, status = series_styles(len(betas)), beta_status(ds)
    eps = config_value(ds, "eps", "epsilon")
    within = f"within ε = {format_value(eps)}" if isinstance(eps, int | float) else "within ε"
    panels = [
        ("mass_A", f"mass {within} of A's top eigenspace"),
        ("mass_V", f"mass {within} of V's top eigenspace (largest Re)"),
    ]
    if "mass_V_magnitude" in ds.variables:
        panels.append(("mass_V_magnitude", f"mass {within} of V's top eigenspace (largest |λ|)"))
    if "lyapunov" in ds.variables:
        panels.append(("lyapunov", r"Lyapunov functional $\int |P_1^\perp x|^2\, d\rho_t$"))
    fig, axes = new_figure(1, len(panels), (4.3 * len(panels) + 0.8, 4.4))
    tt = np.asarray(ds["terminal_time"].values, dtype=float) if "terminal_time" in ds.variables else None
    for ax, (var, subtitle) in zip(axes[0], panels, strict=True):
        vals = ds[var].transpose("beta", "time").values
        for i, b in enumerate(betas):
            y = positive(vals[i]) if var == "lyapunov" else vals[i]
            label, style = beta_line(float(b), styles[i], str(status[i]))
            ax.plot(t, y, label=label, markevery=markevery(len(t)), **style)
            if tt is not None and var != "lyapunov" and np.isfinite(tt[i]):
                ax.axvline(tt[i], color=styles[i]["color"], ls=styles[i]["linestyle"], lw=0.9, alpha=0.8)
        if var == "lyapunov" and "lyapunov_zero" in ds.variables and ds["lyapunov_zero"].dims == ("time",):
            ax.plot(
                t,
                positive(ds["lyapunov_zero"].values),
                label="β = ∞ (zero temperature)",
                **ZERO_TEMPERATURE_STYLE,
            )
        ax.set_xlabel("time t")
        if var == "lyapunov":
            ax.set_yscale("log", nonpositive="mask")
            ax.set_ylabel(r"$\int |P_1^\perp x|^2\, d\rho_t$ (log scale)")
        else:
            ax.set_ylim(-0.03, 1.03)
            ax.set_ylabel("fraction of tokens")
        ax.set_title(subtitle, fontsize="medium")
        ax.grid(True, alpha=0.3)
    beta_legend(fig, axes[0][0], betas)
    what = "Mass near the top eigenspaces of A and V"
    if tt is not None:
        what += " (vertical lines: terminal times)"
    fig.suptitle(run_title(ds, what))
    return save(fig, outdir, "mass", dpi)


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
