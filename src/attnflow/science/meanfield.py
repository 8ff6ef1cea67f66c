"""The concentration curves of the mean-field flow on S^1 (d = 2, N = infinity) at finite beta:
W2(rho_t, Pi_# rho_0), the masses near A's and V's top eigenspaces, the departure time.

`mean_field_circle` runs `dynamics.meanfield.simulate_mean_field_circle` (the measure with its
exponentially small masses kept as log-weights) and reduces each saved state: W2 by
`transport.circle.w2_circle_two_atoms` (Pi_# rho_0 = m_+ delta_u1 + m_- delta_-u1, m_+ the mass of
rho_0 on the side of P_1 x along u_1, integrated from rho_0's density), masses as
`metrics.subspace_mass` defines them.  The departure time is the first time after the mass near
A's top eigenspace (within eps = 0.1 rad, the concentration experiment's default) has reached 1/2
that it falls below 1/2 again (`curves.departure`, the one rule of every experiment).

Times are located on the solution (`science.located`): the flow cannot restart from a saved state
(its patches and passes), so after each pass the next one also saves its states densely inside the
brackets of t*, the band entry, t_dev and t_depart read off that pass (`located.brackets`), and the
times are located among those dense states: to 1/DENSE of a saved step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..attention import Attention
from ..dynamics.meanfield import MeanFieldSettings, MeanFieldTrajectory, simulate_mean_field_circle
from ..measures.densities import DensityFn
from ..transport.circle import CircleW2, w2_circle_two_atoms
from .curves import Located, departure
from .located import brackets, locate_times
from .metrics import angle_to_subspace


class _Where(TypedDict):
    """Where `brackets` and `locate_times` look: the options of the mean-field run."""

    band: float
    deviations: dict[str, float]
    reference: np.ndarray | None
    n: int


__all__ = ["DENSE", "MeanFieldCurves", "mean_field_circle", "plus_mass"]

#: the dense states saved in each bracket of a located time (a time then known to 1/DENSE of a step)
DENSE = 32


@dataclass(frozen=True)
class MeanFieldCurves:
    """Curves of the mean-field flow at the times t (T,).

    w2 (T,): W2(rho_t, Pi_# rho_0), chordal; w2_corrected (T,): whether both ends of the
    transport's threshold arc were treated as a smooth quadrature (`transport.circle`).
    mass_A, mass_V (T,): mass within eps of A's top eigenspace and of V's (largest real part).
    n_nodes (T,): ordinary nodes integrated.  t_depart: departure time (NaN if none by t[-1]).
    separatrices0 (k,): the separatrices at t = 0 (radians).  info: level, wall_s, passes, the
    trajectory's info.  trajectory: the states, if kept.  located: name -> Located, the times of
    `science.located` found among the last pass's dense states.
    """

    t: np.ndarray
    w2: np.ndarray
    w2_corrected: np.ndarray
    mass_A: np.ndarray
    mass_V: np.ndarray
    n_nodes: np.ndarray
    t_depart: float
    separatrices0: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    trajectory: MeanFieldTrajectory | None = None
    located: dict[str, Located] = field(default_factory=dict)


def plus_mass(att: Attention, density: DensityFn | None = None, n: int = 1 << 14) -> float:
    """m_+ = rho_0({x : P_1 x along +u_1}), by the periodic trapezoidal rule in the angle from the
    boundary direction (the kernel of P_1), where the indicator's jumps sit on cell edges."""
    sp = att.spectrum()
    u1 = sp.top.basis[:, 0]
    P = np.real(sp.top_projector)
    null = np.linalg.svd(P)[2][-1]  # P null = 0: the zero-temperature separatrix direction
    phi0 = math.atan2(null[1], null[0])
    th = phi0 + (np.arange(n) + 0.5) * 2.0 * math.pi / n
    X = np.stack([np.cos(th), np.sin(th)], -1)
    f = np.ones(n) if density is None else np.asarray(density(X), dtype=np.float64)
    side = (X @ P.T) @ u1 > 0
    return float(f[side].sum() / f.sum())


def _mass_near(theta: np.ndarray, w: np.ndarray, basis: np.ndarray, eps: float) -> float:
    X = np.stack([np.cos(theta), np.sin(theta)], -1)
    return float(w[angle_to_subspace(X, basis) <= eps].sum())


def mean_field_circle(
    att: Attention,
    times: ArrayLike,
    *,
    level: int = 0,
    density: DensityFn | None = None,
    settings: MeanFieldSettings | None = None,
    eps: float = 0.1,
    keep_states: bool = False,
    progress: Callable[[float, float], object] | None = None,
    band: float = 0.05,
    reference: np.ndarray | None = None,
) -> MeanFieldCurves:
    """The concentration curves of rho_0 (density: None for uniform, or a callable X -> f, e.g.
    `sphere.vmf_density`) under att (d = 2, finite beta, one-dimensional top eigenspace of A) at
    `times`, at refinement `level` (compare levels l, l + 1 to show convergence).  eps: the angle
    (radians) of the masses near the eigenspaces.  keep_states: keep the trajectory.  band and
    reference (T,) (the zero-temperature W2 curve, or None): those of the located times t_entry and
    t_dev."""
    from .convergence import DEVIATIONS

    if not 0.0 < eps <= math.pi / 2:
        raise ValueError(f"eps must be an angle in (0, pi/2] radians, got {eps!r}")
    start = time.perf_counter()
    sp = att.spectrum()
    u1, v1 = sp.top.basis, sp.v_top_real.basis
    atom, m_plus = math.atan2(u1[1, 0], u1[0, 0]), plus_mass(att, density)

    def w2_of(state: tuple[np.ndarray, np.ndarray]) -> CircleW2:
        return w2_circle_two_atoms(state[0], state[1], atom, m_plus)

    def mass_of(state: tuple[np.ndarray, np.ndarray], basis: np.ndarray = u1) -> float:
        theta, logw = state
        return _mass_near(theta, np.exp(logw - np.logaddexp.reduce(logw)), basis, eps)

    where: _Where = {"band": band, "deviations": DEVIATIONS, "reference": reference, "n": DENSE}

    def dense(t: np.ndarray, states: list) -> np.ndarray:
        w2 = np.array([w2_of(s).value for s in states])
        return brackets(t, w2, np.array([mass_of(s) for s in states]), **where)

    traj = simulate_mean_field_circle(
        att, times, level=level, density=density, settings=settings, progress=progress, dense=dense
    )
    results = [w2_of(s) for s in traj.states]
    w2 = np.array([r.value for r in results])
    mass_A = np.array([mass_of(s) for s in traj.states])
    located = _located(traj, w2, mass_A, lambda s: w2_of(s).value, mass_of, where)
    info = {
        "level": level,
        "wall_s": time.perf_counter() - start,
        "passes": traj.passes,
        "eps": eps,
        **traj.info,
    }
    depart = located["t_depart"].t if "t_depart" in located else departure(traj.t, mass_A).t
    return MeanFieldCurves(
        traj.t,
        w2,
        np.array([r.corrected for r in results]),
        mass_A,
        np.array([mass_of(s, v1) for s in traj.states]),
        traj.n_nodes,
        depart,
        np.mod(traj.separatrices[0], 2.0 * math.pi),
        info,
        traj if keep_states else None,
        located,
    )


def _located(traj: MeanFieldTrajectory, w2: np.ndarray, mass: np.ndarray, w2_of, mass_of, where) -> dict:
    """The located times among the last pass's dense states (a lookup: `curves.Advance`)."""
    table = {float(t): s for t, s in zip(traj.t, traj.states, strict=True)}
    table.update({float(t): s for t, s in zip(traj.dense_t, traj.dense_states, strict=True)})

    def lookup(_state: object, _t0: float, ts: np.ndarray) -> list:
        try:
            return [table[float(t)] for t in ts]
        except KeyError:
            raise LookupError("not saved densely") from None

    return locate_times(traj.t, w2, mass, traj.states, lookup, w2_of, mass_of, **where)
