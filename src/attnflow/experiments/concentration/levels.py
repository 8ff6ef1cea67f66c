"""The units of work of `concentration`: one (beta, N) level and its times located on the solution;
and `ConcentrationInputs`, what they compute from (the zero-temperature reference is `zero`, init =
graded's search and clouds `graded`).

A level simulates rho_0 with N tokens (one cloud, or one per seed in one kernel call) at one beta and
reduces the trajectory to W2(rho_t, Pi_# rho_0) and the diagnostics; every level is a part of the
run folder, so a ladder that is interrupted, or extended to a larger N_max, resumes. With init =
graded the search is a part too: a resumed run grades its nodes from the stored separatrices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...io import to_json
from ...measures import Nodes
from ...progress import Reporter
from ...science.convergence import CurveQuantities, LadderDecision, LadderRules
from ...science.curves import Crossing
from ..common import DataVariables, restartable, token_subset, torch_threads, unit_float64
from ..inputs import InitialMeasure, Integration, ModelInputs

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention
    from ...flow import Dynamics
    from ...science.curves import Located

# Up to this N a fixed-step run integrates all betas in one kernel call per stage: 1.9x faster at
# N = 64, 1.4x at 128, no gain from N = 600 on (benchmarks/betas.py).  Adaptive runs never do: the
# clouds would share the steps of the largest beta.
BATCH_BETAS_MAX_N = 128

#: the per-seed curves of a level, in the order the Dataset holds them
CURVES = ("w2", "coupling_bound", "lyapunov", "mass_A", "mass_V", "log_energy", "clusters")


@dataclass(frozen=True, eq=False)
class ConcentrationInputs:
    """What every beta and level of a concentration run computes from, made from its config once.

    Ns: the levels of the ladder (one when N is fixed, auto = False; init = graded: the grading's own
    node counts replace them for the finite betas); seeds: the config's (empty: one cloud drawn with
    `seed`, which also draws the stored tokens); t_max: the config's (the horizon of a graded search
    and of the fits), the saved times ending at times[-1]; band: the near-minimal band of t_entry.
    """

    model: ModelInputs
    solver: Integration
    times: np.ndarray
    betas: tuple[float, ...]
    Ns: tuple[int, ...]
    auto: bool
    seeds: tuple[int, ...]
    seed: int
    n_keep: int
    eps: float
    t_max: float
    rules: LadderRules
    curve_atol: float
    curve_rtol: float
    band: float
    zero_reference: bool

    @property
    def graded(self) -> bool:
        """init = graded or meanfield: rho_0 built per beta, the ladder's levels being its own."""
        return self.model.rho0.per_beta

    @property
    def meanfield(self) -> bool:
        """init = meanfield: each level is the mean-field flow with its tail kept (no tokens)."""
        return self.model.rho0.init.name == "meanfield"

    @property
    def cloud_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.seed,)

    @property
    def rho0(self) -> InitialMeasure:
        """rho_0 of the clouds that do not depend on beta (init = graded: its quadrature stand-in)."""
        return self.model.rho0.without_beta()


@dataclass(frozen=True)
class Cloud:
    """rho_0 with N tokens: X0 (M, N, d) (M = number of seeds), weights (N,) or None, Pi(X0), kept
    token indices, and the seeds."""

    N: int
    X0: np.ndarray
    weights: np.ndarray | None
    PiX0: np.ndarray
    keep: np.ndarray
    seeds: list[int]


@dataclass(frozen=True, eq=False)
class Ladder:
    """One beta's N ladder: the parts of its levels (coarsest first), what each level's curve says,
    the verdict, the clouds by N (init = graded: its own), and its separatrix search (or None)."""

    beta: float
    parts: tuple[xr.Dataset, ...]
    quantities: tuple[CurveQuantities, ...]
    decision: LadderDecision
    clouds: Mapping[int, Cloud]
    search: xr.Dataset | None = None  # separatrix_part's

    @property
    def cloud(self) -> Cloud:
        """The cloud of the last level."""
        return self.clouds[int(self.parts[-1].attrs["N"])]


def make_cloud(inputs: ConcentrationInputs, N: int, nodes: Nodes | None = None) -> Cloud:
    """rho_0 with N tokens (one cloud per seed), or the given nodes (as init = graded builds them)."""
    from ...dynamics.zero_temperature import project

    seeds = list(inputs.cloud_seeds)
    if nodes is None:
        drawn = [inputs.rho0.nodes(N, s) for s in seeds]
        X0, w = np.stack([n.X for n in drawn]), drawn[-1].weights
    else:
        X0, w = nodes.X[None], nodes.weights
    att = inputs.model.attention
    PiX0 = np.stack([project(x, att, spectral=True) for x in X0])  # (the orthogonal one for symmetric A)
    keep = token_subset(N, inputs.n_keep, inputs.seed)
    return Cloud(N, X0, w, PiX0, keep, seeds)


class CloudCache(dict[int, Cloud]):
    """The beta-free clouds of a run by N, each made on first use and shared by every beta."""

    def __init__(self, inputs: ConcentrationInputs) -> None:
        super().__init__()
        self.inputs = inputs

    def __missing__(self, N: int) -> Cloud:
        self[N] = cloud = make_cloud(self.inputs, N)
        return cloud


@dataclass(frozen=True)
class LevelRun:
    """The trajectory of a level: x (T, M, N, d) float64 unit rows, the solver's info and the
    integration that made it (None: the run's)."""

    x: np.ndarray
    info: dict[str, object]
    solver: Integration | None = None


def _squeeze(cloud: Cloud, a: np.ndarray) -> np.ndarray:
    """A batch of one cloud as that cloud (simulate keeps (N, d) and (M, N, d) apart)."""
    return a[0] if len(cloud.seeds) == 1 else a


def simulate_level(
    inputs: ConcentrationInputs,
    beta: float,
    cloud: Cloud,
    reporter: Reporter,
    solver: Integration | None = None,
) -> LevelRun:
    """The trajectory of `cloud` at inverse temperature beta (solver: the run's, unless another is
    given, e.g. a tighter one to measure the time-step error)."""
    from ...dynamics.integrate import simulate

    times = inputs.times
    label = f"beta = {beta:g}, N = {cloud.N}"
    if solver is None:
        solver = inputs.solver
    else:
        label += f", {solver.label}"
    with torch_threads(solver.threads), reporter.task(label, total=float(times[-1])) as cb:
        traj = simulate(
            _squeeze(cloud, cloud.X0),
            inputs.model.at(beta),
            times,
            weights=cloud.weights,
            progress=cb,
            **solver.kwargs(),
        )
    x = unit_float64(traj.x)
    return LevelRun(x[:, None] if len(cloud.seeds) == 1 else x, traj.info, solver)


def batch_betas(inputs: ConcentrationInputs, N: int) -> bool:
    """Whether the betas go through one kernel call per stage (where that is measured faster)."""
    return (
        inputs.solver.method != "adaptive"
        and N <= BATCH_BETAS_MAX_N
        and len(inputs.betas) > 1
        and not inputs.seeds
    )


def simulate_betas(inputs: ConcentrationInputs, cloud: Cloud, reporter: Reporter) -> dict[float, LevelRun]:
    """ONE run of every beta of the config on `cloud`: beta -> its LevelRun. The batch is always every
    beta, in a full run and on resume alike, so that a resumed run is bit-identical."""
    from ...dynamics.integrate import simulate

    betas, times, solver = inputs.betas, inputs.times, inputs.solver
    label = f"betas {betas[0]:g}..{betas[-1]:g} together, N = {cloud.N}"
    with torch_threads(solver.threads), reporter.task(label, total=float(times[-1])) as cb:
        tr = simulate(
            cloud.X0[0],
            [inputs.model.at(b) for b in betas],
            times,
            weights=cloud.weights,
            progress=cb,
            **solver.kwargs(),
        )
    x = unit_float64(tr.x)
    return {
        b: LevelRun(x[:, i][:, None], {**tr.info, "beta": b, "betas_together": len(betas)})
        for i, b in enumerate(betas)
    }


@dataclass(eq=False)
class Simulations:
    """The trajectories of a run's levels: one `simulate` call per level, or, with `batched` (a small
    fixed-step run, `batch_betas`), one call for every beta, made on first use."""

    inputs: ConcentrationInputs
    reporter: Reporter
    batched: bool = False
    _batch: dict[float, LevelRun] = field(default_factory=dict)

    def level(self, beta: float, cloud: Cloud) -> LevelRun:
        if not self.batched:
            return simulate_level(self.inputs, beta, cloud, self.reporter)
        if not self._batch:
            self._batch.update(simulate_betas(self.inputs, cloud, self.reporter))
        return self._batch[beta]


def reduce_level(
    inputs: ConcentrationInputs, beta: float, cloud: Cloud, run: LevelRun, reference: np.ndarray | None = None
) -> xr.Dataset:
    """The per-level Dataset: W2 and diagnostics against t per seed, kept tokens of the first seed;
    attrs["located"]: its times located on the continuous solution (`located_times`; reference: the
    zero-temperature curve of t_dev, or None)."""
    import xarray as xr

    from ...science import metrics
    from ...science.clusters import count_clusters
    from ...science.linearisation import predicted_counts
    from ...transport.wasserstein import w2_to_target

    sp, w, x = inputs.model.spectrum, cloud.weights, run.x
    model = inputs.model.at(beta)
    per_seed: dict[str, list[np.ndarray]] = {k: [] for k in CURVES}
    predicted = predicted_counts(model, cloud.X0, w)
    for m in range(len(cloud.seeds)):
        xm = x[:, m]
        per_seed["w2"].append(w2_to_target(xm, cloud.PiX0[m], weights=w).values)
        per_seed["coupling_bound"].append(np.asarray(metrics.coupling_bound(xm, cloud.PiX0[m], weights=w)))
        per_seed["lyapunov"].append(np.asarray(metrics.lyapunov(xm, sp.top_projector, weights=w)))
        per_seed["mass_A"].append(np.asarray(metrics.subspace_mass(xm, sp.top.basis, inputs.eps, weights=w)))
        per_seed["mass_V"].append(
            np.asarray(metrics.subspace_mass(xm, sp.v_top_real.basis, inputs.eps, weights=w))
        )
        per_seed["log_energy"].append(_energy(xm, model, w))
        per_seed["clusters"].append(
            np.asarray(count_clusters(xm, inputs.eps, weights=w), dtype=float)
            if np.isfinite(predicted).any()
            else np.full(xm.shape[0], np.nan)  # nothing to compare with: not counted (O(N^2) pairs)
        )
    data: DataVariables = {k: (("seed", "time"), np.stack(v)) for k, v in per_seed.items()}
    data["x"] = (("time", "token", "dim"), x[:, 0, cloud.keep].astype(np.float32))
    ratio = resolution_ratio_of(inputs, beta, cloud)
    solver = {k: v for k, v in run.info.items() if isinstance(v, int | float | str | dict)}
    curves = {k: np.stack(v).mean(axis=0) for k, v in per_seed.items()}
    located = located_times(inputs, beta, cloud, run, curves["w2"], curves["mass_A"], reference)
    return xr.Dataset(
        data,
        coords={"seed": cloud.seeds, "time": inputs.times},
        attrs={
            "solver": to_json(solver),
            "N": cloud.N,
            "beta": beta,
            "resolution_ratio": ratio,
            "located": to_json({k: v.to_dict() for k, v in located.items()}),
            "predicted_clusters": to_json(predicted.tolist()),
        },
    )


def located_times(
    inputs: ConcentrationInputs,
    beta: float,
    cloud: Cloud,
    run: LevelRun,
    w2: np.ndarray,
    mass_A: np.ndarray,
    reference: np.ndarray | None,
) -> dict[str, Located]:
    """t*, the band entry, t_dev(delta) and t_depart of a level located on its continuous solution
    (`attnflow.science.located`): integrated again from the saved state before each (the level's own
    integrator), the curves the seeds' means. A model that cannot be restarted (noise, redrawn
    weights) has none: its times stay read off the save grid, with the saved step as their error."""
    from ...dynamics.integrate import simulate
    from ...science import metrics
    from ...science.convergence import DEVIATIONS
    from ...science.located import locate_times
    from ...transport.wasserstein import w2_to_target

    model = inputs.model.at(beta)
    if not restartable(model):
        return {}
    solver = run.solver or inputs.solver
    sp, w = inputs.model.spectrum, cloud.weights

    def advance(state: np.ndarray, t0: float, ts: np.ndarray) -> list[np.ndarray]:
        traj = simulate(_squeeze(cloud, state), model, np.asarray(ts) - t0, weights=w, **solver.kwargs())
        x = unit_float64(traj.x)
        return list(x[:, None] if len(cloud.seeds) == 1 else x)

    def w2_of(state: np.ndarray) -> float:
        pairs = zip(state, cloud.PiX0, strict=True)
        return float(np.mean([w2_to_target(s[None], P, weights=w).values[0] for s, P in pairs]))

    def mass_of(state: np.ndarray) -> float:
        return float(np.mean(metrics.subspace_mass(state, sp.top.basis, inputs.eps, weights=w)))

    return locate_times(
        inputs.times,
        w2,
        mass_A,
        list(run.x),
        advance,
        w2_of,
        mass_of,
        band=inputs.band,
        deviations=DEVIATIONS,
        reference=reference,
    )


def resolution_ratio_of(inputs: ConcentrationInputs, beta: float, cloud: Cloud) -> float:
    """spacing(N) sqrt(beta max_i |B^T x_i|) of the cloud (metrics.resolution_ratio); init = graded:
    with the largest gap between nodes as the spacing (2^-level kernel widths), not 2 pi / N."""
    from ...measures.geometry import spacing
    from ...science.metrics import resolution_ratio

    att = inputs.model.attention
    ratio = float(resolution_ratio(cloud.N, att.d, beta, B=att.B, X=cloud.X0))
    if inputs.graded and att.d == 2:
        theta = np.sort(np.arctan2(cloud.X0[0, :, 1], cloud.X0[0, :, 0]))
        gap = float(np.max(np.diff(theta, append=theta[0] + 2.0 * math.pi)))
        ratio *= gap / spacing(cloud.N, 2)
    elif inputs.graded:  # d = 3: the largest distance from a node to its nearest neighbour
        from scipy.spatial import cKDTree

        gap = float(np.max(cKDTree(cloud.X0[0]).query(cloud.X0[0], k=2)[0][:, 1]))
        ratio *= gap / spacing(cloud.N, 3)
    return ratio


#: pair terms x_i^T B x_j of the interaction energy one level may evaluate (about half a second): past
#: it, the energy is measured at every k-th saved time only (NaN between), k the smallest that fits
ENERGY_PAIRS = 2**27


def _energy(x: np.ndarray, model: Attention | Dynamics, weights: np.ndarray | None) -> np.ndarray:
    """log E_beta of the saved states x (T, N, d) (`science.energy`), at every k-th saved time where
    the O(N^2) sums of every one would pass ENERGY_PAIRS, NaN at the others."""
    from ...science.energy import log_energy_curve

    T, N = x.shape[0], x.shape[1]
    k = max(1, math.ceil(T * N * N / ENERGY_PAIRS))
    out = np.full(T, np.nan)
    out[::k] = log_energy_curve(x[::k], model, weights=weights)
    return out


def located_of(part: xr.Dataset) -> dict[str, dict[str, float]]:
    """The times a level's part located on its continuous solution (attrs["located"]; none in a part
    written before they were)."""
    from ...io import json_attr

    return dict(json_attr(part, "located", {}))


def departure_time(
    times: np.ndarray, mass: np.ndarray, located: Mapping[str, Mapping[str, float]] | None = None
) -> Crossing:
    """The first time after mass (T,) has reached 1/2 that it falls below it again (NaN if never: no
    metastable phase, or no departure by t_max): located on the continuous solution where the level
    did (`located["t_depart"]`, its error the root tolerance), else between saved times
    (`attnflow.science.curves.departure`) with the saved step as its error."""
    from ...science.curves import departure

    c = departure(times, mass)
    loc = (located or {}).get("t_depart")
    if loc is not None and int(loc["index"]) == c.index:
        return Crossing(float(loc["t"]), float(loc["error"]), c.index)
    return c
