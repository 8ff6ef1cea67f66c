"""The unit of work of `metastability`: one point (cloud kind, beta, N) integrated only as far as its
clusters' departure, and `MetastabilityInputs`, what every point computes from.

A point holds one cloud (a deterministic discretisation: equispaced nodes) or one per seed (random
clouds, batched in one kernel call: the batch axis of `simulate`). It is integrated in chunks of
saved times; after each chunk the mass near each atom +-u_1 of Pi_# rho_0 is read, and the point
stops once every cloud's clusters have departed (or a cloud reached V's top eigenspace without ever
concentrating: no metastable phase), or at its horizon: `margin` times the larger of the two
branches' predictions, log N / lambda (finite N) and (delta / lambda) beta (mean field).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...io import to_json
from ...progress import Reporter
from ...science.claims import WeightsData
from ..common import restartable, torch_threads, unit_float64
from ..inputs import InitialMeasure, Integration, ModelInputs, SimulateKeywords

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention
    from ...flow import Dynamics
    from ...science.curves import Located

#: a cluster has departed when the mass near its atom falls below this fraction of the atom's mass
#: after it had formed (reached `science.curves.FORMED`): the `concentration` experiment's departure,
#: per atom
LEVEL = 0.5
#: the atoms of Pi_# rho_0 (a one-dimensional top eigenspace): +u_1 and -u_1
ATOMS = ("+u1", "-u1")


@dataclass(frozen=True, eq=False)
class MetastabilityInputs:
    """What every point of a metastability run computes from, made from its config once.

    clouds: cloud kind (a DISCRETISATIONS name) -> rho_0 as those tokens; seeds: the random clouds of
    a seeded kind (a deterministic kind has one cloud); weights: delta, lambda of the weights; eps:
    the angle of 'near an atom'; dt_save: the saved times' spacing; margin, t_cap: a point's horizon
    (`horizon`); chunk: the time integrated between two looks at the clusters.
    """

    model: ModelInputs
    solver: Integration
    clouds: Mapping[str, InitialMeasure]
    betas: tuple[float, ...]
    Ns: tuple[int, ...]
    seeds: tuple[int, ...]
    weights: WeightsData
    eps: float
    dt_save: float
    margin: float
    t_cap: float
    chunk: float

    @property
    def u1(self) -> np.ndarray:
        return self.model.u1

    @property
    def side(self) -> np.ndarray:
        """P_1^T u_1 (d,): the sign of <side, x> = <u_1, P_1 x> says which atom Pi sends x to."""
        side: np.ndarray = np.asarray(self.model.spectrum.top_projector).T @ self.u1
        return side

    def predictions(self, beta: float, N: int) -> dict[str, float]:
        """The two branches' departure times at (beta, N): log N / lambda and (delta / lambda) beta."""
        lam = self.weights.lam
        return {"finite_N": math.log(N) / lam, "mean_field": self.weights.departure_slope * beta}

    def horizon(self, beta: float, N: int) -> float:
        """How far a point is integrated at most: margin times the larger prediction (at least one
        chunk), capped by t_cap; on the save grid (a whole number of dt_save, rounded up)."""
        t = min(self.t_cap, self.margin * max(max(self.predictions(beta, N).values()), self.chunk))
        return self.dt_save * math.ceil(t / self.dt_save - 1e-9)


@dataclass(frozen=True)
class PointClouds:
    """The clouds of one point: X0 (M, N, d), weights (N,) or None (equal), the mass of each atom
    +-u_1 of Pi_# rho_0 per cloud (M, 2), and the seed of each cloud (a deterministic kind's one
    cloud: the first seed, which does not change it)."""

    X0: np.ndarray
    weights: np.ndarray | None
    atom_mass: np.ndarray
    seeds: tuple[int, ...]


def point_clouds(inputs: MetastabilityInputs, kind: str, N: int) -> PointClouds:
    """rho_0 as N tokens of `kind`: one cloud per seed where the kind is random, else one."""
    rho0 = inputs.clouds[kind]
    seeds = tuple(inputs.seeds) if rho0.init.seeded else inputs.seeds[:1]
    nodes = [rho0.nodes(N, s) for s in seeds]
    X0 = np.stack([n.X for n in nodes])
    w = nodes[0].weights
    c = X0 @ inputs.side
    share = np.full(N, 1.0 / N) if w is None else np.asarray(w)
    atom_mass = np.stack([(share * (c > 0)).sum(-1), (share * (c < 0)).sum(-1)], axis=-1)
    return PointClouds(X0, w, atom_mass, seeds)


def atom_fractions(x: np.ndarray, u1: np.ndarray, eps: float, clouds: PointClouds) -> np.ndarray:
    """The mass within eps of each atom +-u_1 over that atom's mass in Pi_# rho_0: x (T, M, N, d) ->
    (T, M, 2); an atom without mass gives NaN."""
    c = x @ u1
    share = np.full(x.shape[-2], 1.0 / x.shape[-2]) if clouds.weights is None else clouds.weights
    cos = math.cos(eps)
    near = np.stack([(c > cos) @ share, (c < -cos) @ share], axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(clouds.atom_mass > 0, near / clouds.atom_mass, np.nan)


@dataclass
class _Followed:
    """A point's saved readings so far: times (T,), atom fractions (T, M, 2), mass near V's top
    eigenspace (T, M), the state at the last time, the solver's infos (one per chunk) and the
    departures located so far ((cloud, atom) -> Located)."""

    times: list[float]
    fractions: list[np.ndarray]
    mass_V: list[np.ndarray]
    X: np.ndarray
    infos: list[dict[str, object]] = field(default_factory=list)
    located: dict[tuple[int, int], Located] = field(default_factory=dict)

    def located_array(self, M: int) -> np.ndarray:
        """(M, 2, 2): per cloud and atom the located departure and its error (NaN where none)."""
        out = np.full((M, len(ATOMS), 2), np.nan)
        for (m, a), loc in self.located.items():
            out[m, a] = loc.t, loc.error
        return out

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.asarray(self.times), np.concatenate(self.fractions), np.concatenate(self.mass_V)


def cloud_done(times: np.ndarray, fractions: np.ndarray, mass_V: np.ndarray) -> bool:
    """Whether one cloud needs no more time: a cluster has departed (the mass near an atom fell back
    below LEVEL after it had formed), or no atom's cluster ever formed (FORMED) and most of the mass
    is near V's top eigenspace (the terminal phase came without a metastable phase). fractions
    (T, 2), mass_V (T,)."""
    from ...science.curves import FORMED, departure

    for a in range(fractions.shape[1]):
        f = fractions[:, a]
        if np.all(np.isfinite(f)) and math.isfinite(departure(times, f, LEVEL).t):
            return True
    never = not np.any(np.nan_to_num(fractions, nan=0.0) >= FORMED)
    return never and bool(mass_V[-1] >= LEVEL)


def simulate_kwargs(solver: Integration) -> SimulateKeywords:
    """The keywords of `simulate` for a point: the run's integrator, the adaptive one holding every
    token to its tolerance (norm "max": with the RMS over tokens one token may err sqrt(N) times
    more, and the last few tokens near a separatrix decide when a cluster leaves)."""
    kw = solver.kwargs()
    if kw["options"] is not None:
        kw["options"] = {**kw["options"], "norm": "max"}
    return kw


def _chunk(
    inputs: MetastabilityInputs,
    solver: Integration,
    att: Attention | Dynamics,
    clouds: PointClouds,
    run: _Followed,
    k: tuple[int, int],
    progress: Callable[[float], None],
) -> None:
    """Integrate from saved index k[0] to k[1] and append the readings to `run`; progress(t) now and
    then."""
    from ...dynamics.integrate import simulate
    from ...science import metrics

    rel = inputs.dt_save * np.arange(1, k[1] - k[0] + 1, dtype=np.float64)
    t0 = inputs.dt_save * k[0]
    single = run.X.shape[0] == 1
    traj = simulate(
        run.X[0] if single else run.X,
        att,
        rel,
        weights=clouds.weights,
        progress=lambda t, _: progress(t0 + t),
        **simulate_kwargs(solver),
    )
    x = unit_float64(traj.x)
    x = x[:, None] if single else x
    states = [run.X, *x]  # at saved indices k[0] .. k[1]
    run.times.extend((t0 + rel).tolist())
    run.fractions.append(atom_fractions(x, inputs.u1, inputs.eps, clouds))
    basis = inputs.model.spectrum.v_top_real.basis
    run.mass_V.append(np.asarray(metrics.subspace_mass(x, basis, inputs.eps, weights=clouds.weights)))
    run.X = x[-1]
    run.infos.append({k: v for k, v in traj.info.items() if isinstance(v, int | float | str | dict)})
    _locate_departures(inputs, solver, att, clouds, run, states, k[0])


def _locate_departures(
    inputs: MetastabilityInputs,
    solver: Integration,
    att: Attention | Dynamics,
    clouds: PointClouds,
    run: _Followed,
    states: list[np.ndarray],
    first: int,
) -> None:
    """Locate on the continuous solution (`science.curves.zoom_crossing`) every departure first seen
    in the chunk whose states (saved indices first, first + 1, ...) are given: cloud m alone,
    integrated again from the saved state before the departure. A model that cannot restart (noise,
    redrawn weights) locates none: its departures stay read off the saved samples."""
    from ...dynamics.integrate import simulate
    from ...science.curves import ZOOM_RTOL, departure, zoom_crossing

    if not restartable(att):
        return
    t, f, _ = run.arrays()
    share = (
        np.full(clouds.X0.shape[1], 1.0 / clouds.X0.shape[1]) if clouds.weights is None else clouds.weights
    )
    cos, sign = math.cos(inputs.eps), (1.0, -1.0)
    for m in range(f.shape[1]):
        for a in range(len(ATOMS)):
            c = departure(t, f[:, m, a], LEVEL)
            if (
                (m, a) in run.located
                or not first < c.index < first + len(states)
                or not clouds.atom_mass[m, a] > 0
            ):
                continue

            def fraction_gap(X: np.ndarray, _t: float, m: int = m, a: int = a) -> float:
                near = (sign[a] * (X @ inputs.u1) > cos) @ share
                return LEVEL - float(near) / float(clouds.atom_mass[m, a])

            def advance(X: np.ndarray, t0: float, ts: np.ndarray) -> list[np.ndarray]:
                tr = simulate(X, att, np.asarray(ts) - t0, weights=clouds.weights, **simulate_kwargs(solver))
                return list(unit_float64(tr.x))

            j, state = c.index, states[c.index - 1 - first][m]
            tol = ZOOM_RTOL * inputs.dt_save
            run.located[(m, a)] = zoom_crossing(
                advance, fraction_gap, float(t[j - 1]), state, float(t[j]), j, tol
            )


def follow_point(
    inputs: MetastabilityInputs, solver: Integration, beta: float, clouds: PointClouds, reporter: Reporter
) -> _Followed:
    """Integrate the clouds at beta with `solver` chunk by chunk until every one is done
    (`cloud_done`) or the horizon is reached."""
    from ...science import metrics

    N = clouds.X0.shape[1]
    horizon = inputs.horizon(beta, N)
    last = round(horizon / inputs.dt_save)
    step = max(1, round(inputs.chunk / inputs.dt_save))
    M = clouds.X0.shape[0]
    basis = inputs.model.spectrum.v_top_real.basis
    run = _Followed(
        [0.0],
        [atom_fractions(clouds.X0[None], inputs.u1, inputs.eps, clouds)],
        [np.asarray(metrics.subspace_mass(clouds.X0[None], basis, inputs.eps, weights=clouds.weights))],
        clouds.X0,
    )
    att = inputs.model.at(beta)
    label = f"beta = {beta:g}, N = {N}" + (f", {M} clouds" if M > 1 else "")
    if solver is not inputs.solver:
        label += f", {solver.label}"
    k = 0
    with torch_threads(solver.threads), reporter.task(label, total=horizon) as cb:
        while k < last:
            nxt = min(k + step, last)
            _chunk(inputs, solver, att, clouds, run, (k, nxt), lambda t: cb(t, horizon))
            k = nxt
            t, f, mv = run.arrays()
            if all(cloud_done(t, f[:, m], mv[:, m]) for m in range(M)):
                break
    return run


def point_part(
    inputs: MetastabilityInputs,
    kind: str,
    beta: float,
    N: int,
    reporter: Reporter,
    solver: Integration | None = None,
) -> xr.Dataset:
    """The Dataset of one point: per cloud (seed) and atom the mass fraction against t, the mass near
    V's top eigenspace; attrs: the point's coordinates, horizon, the predictions, the resolution
    ratio and the solver's infos. solver: the run's, unless another is given (the time-step probe's
    tighter one)."""
    import xarray as xr

    from ...science.metrics import resolution_ratio

    start = time.perf_counter()
    clouds = point_clouds(inputs, kind, N)
    run = follow_point(inputs, solver or inputs.solver, beta, clouds, reporter)
    t, f, mv = run.arrays()
    att = inputs.model.attention
    ratio = float(resolution_ratio(N, att.d, beta, B=att.B, X=clouds.X0[0]))
    seeds = list(clouds.seeds)
    return xr.Dataset(
        {
            "fraction": (("time", "seed", "atom"), f),
            "mass_V": (("time", "seed"), mv),
            "atom_mass": (("seed", "atom"), clouds.atom_mass),
            "located": (("seed", "atom", "estimate"), run.located_array(len(seeds))),
        },
        coords={"time": t, "seed": seeds, "atom": list(ATOMS), "estimate": ["t", "error"]},
        attrs={
            "init": kind,
            "beta": beta,
            "N": N,
            "horizon": inputs.horizon(beta, N),
            "predictions": to_json(inputs.predictions(beta, N)),
            "resolution_ratio": ratio,
            "solver": to_json(run.infos),
            "wall_s": time.perf_counter() - start,
        },
    )
