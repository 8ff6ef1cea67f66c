"""`phase-diagram`: clustering against time and beta, from many independent clouds, for one model or
side by side for the values of one model key (docs/math.md, "Clusters and phase diagrams").

Every point (value of `vary`, beta) integrates `clouds` independent clouds of N tokens in one kernel
call per stage (the batch axis) and measures, at every saved time and for every cloud, the number
of clusters (tokens within angle eps joined), the mass of clustered pairs (GLPR's diagram: the
probability that two tokens are within eps), the W2 distance to the nearest measure with k atoms
(k in `atoms`; exact for k = 1, an upper bound for k >= 2) and the tokens' mean norm (1 on the
sphere; the radius of layer_norm = pre or peri, whose measures are taken on x / |x|). The figures
are heatmaps over (t, beta): the mean over the clouds and their spread (standard deviation). The
clouds are drawn once and shared by every point, and so is the noise (common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, field_validator, model_validator

from ...io import json_attr
from ...progress import Reporter
from ...science.clusters import GLPR_EPS
from ...science.energy import ENERGY_LONG_NAME
from ..common import finite_or_none, time_grid, torch_threads, unit_float64
from ..config import (
    INTEGRATOR_HELP,
    Angle,
    Betas,
    Integrator,
    SimulationConfig,
    format_validation_error,
)
from ..inputs import Integration, ModelInputs, integration, model_inputs
from ..model import FLOW_FIELDS, FlowConfig
from ..parts import part_name
from ..registry import Experiment, doc_summary
from ..units import Unit, Units
from .figures import CAPTIONS, figures

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention
    from ...flow import Dynamics

#: the model keys a phase diagram may put side by side (`vary`): the flow keys marked so (FLOW_FIELDS)
#: and the draw of weights = random
VARY_KEYS = (*(f.name for f in FLOW_FIELDS if f.key.vary), "ensemble", "weights_seed")
#: the per-cloud curves of a point, in the order the Dataset holds them
CURVES = ("clusters", "clustered_pairs", "w2_atoms", "radius", "log_energy")

if TYPE_CHECKING:
    Vary = str
else:
    Vary = Literal[("none", *VARY_KEYS)]


class PhaseDiagramConfig(SimulationConfig, FlowConfig):
    """Config of the `phase-diagram` experiment."""

    experiment: Literal["phase-diagram"] = "phase-diagram"
    integrator: Integrator = Field("rk4", description=INTEGRATOR_HELP)
    dt: PositiveFloat = Field(0.1, description="step of the fixed-step integrators (ignored by adaptive)")
    betas: Betas = Field([1.0, 2.0, 4.0, 8.0], description="inverse temperatures beta")
    N: PositiveInt = Field(32, description="tokens per cloud")
    clouds: PositiveInt = Field(64, description="independent clouds per point, in one kernel call")
    t_max: PositiveFloat = Field(20.0, description="final time")
    dt_save: PositiveFloat = Field(0.5, description="spacing of the saved (measured) times")
    eps: Angle = Field(GLPR_EPS, description="angle (radians) within which tokens are clustered")
    atoms: list[PositiveInt] = Field([1, 2], description="k of the W2 distance to the nearest k-atom measure")
    vary: Vary = Field(
        "none",
        description=f"a model key whose `values` are put side by side ({', '.join(VARY_KEYS)}), or none",
    )
    values: list[str | int | float] = Field([], description="the values of `vary`, one panel each")

    @field_validator("atoms")
    @classmethod
    def _atoms(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"atoms must be distinct numbers of atoms k >= 1, got {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _panels(self) -> Self:
        if (self.vary != "none") != bool(self.values):
            raise ValueError(
                f"vary = {self.vary!r} and values = {self.values}: give both (a key, its values) or neither"
            )
        if len(set(map(str, self.values))) != len(self.values):
            raise ValueError(f"values must be distinct, got {self.values}")
        panels(self)  # each value makes a valid config, or the error names it
        return self


def panels(config: PhaseDiagramConfig) -> list[tuple[str, PhaseDiagramConfig]]:
    """(label, config) of each panel: `vary = value` for each of `values`, or the config itself."""
    if config.vary == "none":
        return [("as configured", config)]
    out = []
    base = {**config.model_dump(), "vary": "none", "values": []}
    for i, value in enumerate(config.values):
        try:
            panel = PhaseDiagramConfig(**{**base, config.vary: value})
        except ValidationError as err:
            why = format_validation_error(err, f"values[{i}] ({config.vary} = {value!r})")
            raise ValueError(why) from None
        out.append((f"{config.vary} = {value}", panel))
    return out


PRESETS: dict[str, dict[str, object]] = {
    # seconds: the tests and `attnflow run phase-diagram-tiny`
    "phase-diagram-tiny": {
        "weights": "identity",
        "d": 4,
        "N": 12,
        "clouds": 8,
        "betas": [1.0, 4.0],
        "t_max": 4.0,
        "dt_save": 0.5,
        "atoms": [1, 2],
        "vary": "layer_norm",
        "values": ["post", "pre"],
    },
    # GLPR's and simuformer's diagram (Q = K = V = I, d = 16, clustered pairs at <x_i, x_j> >= 0.999)
    # for the four layer norms side by side (docs/experiments.md, "phase-diagram")
    "phase-diagram-layer-norms": {
        "weights": "identity",
        "d": 16,
        "N": 32,
        "clouds": 128,
        "betas": [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        "t_max": 30.0,
        "dt_save": 0.5,
        "atoms": [1, 2],
        "vary": "layer_norm",
        "values": ["post", "pre", "peri", "ngpt"],
    },
}


@dataclass(frozen=True, eq=False)
class Panel:
    """One panel of a phase diagram: its label, its value of `vary` and its model."""

    label: str
    value: str | float | None  # None: nothing varied
    model: ModelInputs


@dataclass(frozen=True, eq=False)
class PhaseInputs:
    """What every point of a phase diagram computes from, made from its config once."""

    panels: tuple[Panel, ...]
    solver: Integration
    X0: np.ndarray  # (clouds, N, d): shared by every point
    times: np.ndarray
    betas: tuple[float, ...]
    eps: float
    atoms: tuple[int, ...]
    vary: str


def phase_inputs(config: PhaseDiagramConfig) -> PhaseInputs:
    made = [(label, panel, model_inputs(panel)) for label, panel in panels(config)]
    first = made[0][2]
    seeds = np.random.SeedSequence(config.seed).generate_state(config.clouds)
    X0 = np.stack([first.rho0.nodes(config.N, int(s)).X for s in seeds])
    return PhaseInputs(
        panels=tuple(
            Panel(label, getattr(panel, config.vary) if config.vary != "none" else None, model)
            for label, panel, model in made
        ),
        solver=integration(config),
        X0=X0,
        times=time_grid(config.t_max, config.dt_save),
        betas=tuple(config.betas),
        eps=config.eps,
        atoms=tuple(config.atoms),
        vary="" if config.vary == "none" else config.vary,
    )


def measure(
    x: np.ndarray, eps: float, atoms: tuple[int, ...], model: Attention | Dynamics | None = None
) -> dict[str, np.ndarray]:
    """The per-cloud curves of states x (T, M, N, d) (rows in R^d allowed): clusters, clustered_pairs,
    radius, log_energy (T, M; log E_beta of the model, NaN without one head or model) and w2_atoms
    (T, M, k), measured on the directions x / |x|."""
    from ...science.clusters import clustered_pairs, count_clusters, nearest_atoms_w2
    from ...science.energy import log_energy_curve

    radius = np.linalg.norm(x, axis=-1).mean(axis=-1)
    u = unit_float64(x)
    return {
        "clusters": np.asarray(count_clusters(u, eps), dtype=float),
        "clustered_pairs": np.asarray(clustered_pairs(u, eps)),
        "w2_atoms": np.stack([np.asarray(nearest_atoms_w2(u, k)) for k in atoms], axis=-1),
        "radius": radius,
        "log_energy": log_energy_curve(u, model) if model is not None else np.full(radius.shape, np.nan),
    }


def _point(inputs: PhaseInputs, panel: Panel, beta: float, reporter: Reporter) -> xr.Dataset:
    """One point: every cloud at beta under the panel's model, measured."""
    import xarray as xr

    from ...dynamics.integrate import simulate

    times, solver = inputs.times, inputs.solver
    with (
        torch_threads(solver.threads),
        reporter.task(f"{panel.label}, beta = {beta:g}", total=float(times[-1])) as cb,
    ):
        traj = simulate(inputs.X0, panel.model.at(beta), times, progress=cb, **solver.kwargs())
    model = panel.model.at(beta)
    curves = measure(np.asarray(traj.x, dtype=np.float64), inputs.eps, inputs.atoms, model)
    dims = {k: ("time", "cloud", "k") if k == "w2_atoms" else ("time", "cloud") for k in CURVES}
    info = {k: v for k, v in traj.info.items() if isinstance(v, int | float | str | dict)}
    return xr.Dataset(
        {k: (dims[k], curves[k]) for k in CURVES},
        coords={"time": times, "k": list(inputs.atoms)},
        attrs={"solver": __import__("json").dumps(info, default=str), "beta": beta},
    )


def _with_energy(part: xr.Dataset) -> xr.Dataset:
    """A part written before log_energy was measured gets it as NaN (not computed then)."""
    if "log_energy" in part.variables:
        return part
    return part.assign(log_energy=(("time", "cloud"), np.full(part.clusters.shape, np.nan)))


def _name(inputs: PhaseInputs, panel: Panel, beta: float) -> str:
    varied = {inputs.vary: panel.value} if inputs.vary and panel.value is not None else {}
    return part_name(**varied, beta=beta)


def run(config: PhaseDiagramConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Every (panel, beta) point: clouds integrated together and measured; one Dataset."""
    import xarray as xr

    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inputs = phase_inputs(config)
    n_points = len(inputs.panels) * len(inputs.betas)
    units.plan(n_points, f"phase-diagram: {n_points} points of {config.clouds} clouds, N = {config.N}")
    rows, solver = [], []
    for panel in inputs.panels:
        parts = units.run_all(
            Unit(_name(inputs, panel, beta), partial(_point, inputs, panel, beta, reporter))
            for beta in inputs.betas
        )
        solver += [json_attr(part, "solver", {}) for part in parts]
        rows.append(xr.concat([_with_energy(part.drop_attrs()) for part in parts], dim="beta"))
    ds = xr.concat(rows, dim="variant").assign_coords(
        variant=[p.label for p in inputs.panels], beta=list(inputs.betas), cloud=np.arange(config.clouds)
    )
    _predictions(ds, inputs, config.N)
    units.finish(
        ds,
        kernel=config.kernel,
        integrator=inputs.solver.label,
        solver=solver,
        models={p.label: p.model.description for p in inputs.panels},
        theorem={
            p.label: dict(zip(("applies", "reason"), p.model.theorem(), strict=True)) for p in inputs.panels
        },
    )
    _long_names(ds, config.eps)
    return ds


def _predictions(ds: xr.Dataset, inputs: PhaseInputs, N: int) -> None:
    """predicted_clusters (the linearisation's count from each cloud's rho_0) and
    metastable_clusters (the first plateau of the measured count), (variant, beta, cloud)."""
    from ...science.clusters import metastable_count
    from ...science.linearisation import predicted_counts

    shape = (len(inputs.panels), len(inputs.betas), inputs.X0.shape[0])
    predicted, metastable = np.full(shape, np.nan), np.full(shape, np.nan)
    for i, panel in enumerate(inputs.panels):
        for j, beta in enumerate(inputs.betas):
            predicted[i, j] = predicted_counts(panel.model.at(beta), inputs.X0)
            metastable[i, j] = metastable_count(ds.clusters.values[i, j], N)
    dims = ("variant", "beta", "cloud")
    ds["predicted_clusters"] = (dims, predicted)
    ds["metastable_clusters"] = (dims, metastable)


def _long_names(ds: xr.Dataset, eps: float) -> None:
    long = {
        "clusters": f"number of clusters (tokens within {eps:.3g} rad joined), per cloud",
        "clustered_pairs": f"mass of the pairs i != j within {eps:.3g} rad (GLPR's clustered pairs)",
        "w2_atoms": "W2 to the nearest k-atom measure (exact for k = 1, an upper bound for k >= 2)",
        "radius": "mean token norm |x| (1 on the sphere; pre- and peri-LN: measures taken on x/|x|)",
        "log_energy": ENERGY_LONG_NAME,
        "predicted_clusters": "clusters predicted by the linearisation about the uniform measure "
        "(attnflow.predict_clusters; NaN where it does not apply)",
        "metastable_clusters": "measured clusters of the metastable state: the first count <= N/2 held "
        "over 5 saved times (NaN: none)",
    }
    for k, v in long.items():
        ds[k].attrs["long_name"] = v


def first_time(times: np.ndarray, curve: np.ndarray, level: float) -> float:
    """The first saved time at which curve (T,) reaches level (NaN: never)."""
    hit = np.flatnonzero(curve >= level)
    return float(times[hit[0]]) if hit.size else math.nan


def _prediction_row(p: xr.Dataset) -> dict[str, float | None]:
    """The linearisation's count against the metastable one at a point: means over the clouds and
    the fraction of the clouds where they agree (None where nothing was predicted)."""
    if "predicted_clusters" not in p.variables or not np.isfinite(p.predicted_clusters.values).any():
        return {}
    pred, seen = p.predicted_clusters.values, p.metastable_clusters.values
    return {
        "predicted_clusters": float(np.nanmean(pred)),
        "metastable_clusters": finite_or_none(np.nanmean(seen)) if np.isfinite(seen).any() else None,
        "prediction_agrees": float(np.mean(pred == seen)),
    }


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """Per panel and beta, at t_max: the clusters (mean and spread over the clouds), the clustered
    pairs and W2 to the nearest atom(s) (means); and the time the mean clustered pairs reach 1/2."""
    cfg = json_attr(ds, "config", {})
    times = ds.time.values
    per: dict[str, object] = {}
    for variant in ds.variant.values.tolist():
        for beta in ds.beta.values.tolist():
            p = ds.sel(variant=variant, beta=beta)
            pairs = p.clustered_pairs.values.mean(axis=1)
            spread = float(p.clusters.values[-1].std(ddof=1)) if p.sizes["cloud"] > 1 else None
            per[f"{variant}, beta = {beta:g}"] = {
                "clusters": float(p.clusters.values[-1].mean()),
                "clusters_std": spread,
                "clustered_pairs": float(pairs[-1]),
                "t_half_clustered": finite_or_none(first_time(times, pairs, 0.5)),
                **{
                    f"w2_{k}_atoms": float(p.w2_atoms.sel(k=k).values[-1].mean())
                    for k in ds.k.values.tolist()
                },
                **_prediction_row(p),
            }
    return {
        "experiment": "phase-diagram",
        "N": cfg.get("N"),
        "clouds": cfg.get("clouds"),
        "models": json_attr(ds, "models", {}),
        "at_t_max": per,
        "warnings": json_attr(ds, "warnings", []),
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }


# ---------------------------------------------------------------------------------------- figures

EXPERIMENT = Experiment(
    name="phase-diagram",
    description=doc_summary(__doc__),
    Config=PhaseDiagramConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions=CAPTIONS,
    presets=PRESETS,
    part_keys=("betas", "values"),
)
