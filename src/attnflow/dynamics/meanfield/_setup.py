"""The mean-field flow on S^1: its settings, its result, and the set-up of one run (`_flow`).

MeanFieldSettings and MeanFieldTrajectory (the public records), the checks of the inputs, the frozen
problem of one run (`_Problem`: field, grading, rho_0's log-density), the first guesses of the
separatrices (`initial_separatrices`) and the initial state of a pass (`_State`: ordinary nodes and
patches, rho_0 graded toward the separatrices).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..._checks import check_positive, to_numpy
from ...attention import Attention, check_attention
from ...measures.densities import DensityFn
from .circle_field import CircleField
from .patch import Grid, Patch
from .tail import LabelFamily, arc_family

F64 = torch.float64
TWO_PI = 2.0 * math.pi
NEVER_MATTERS = 40.0  # see MeanFieldSettings: dropped masses weigh at most e^-40 in any softmax

State = tuple[np.ndarray, np.ndarray]  # a saved measure: angles (N_t,), log-weights (N_t,)


@dataclass(frozen=True)
class MeanFieldSettings:
    """Numerical settings of `simulate_mean_field_circle` (angles in radians, times in time units).

    rtol, atol: the local error tolerance of every node that matters (atol + rtol on angles).
    patch_width: emission offset of the patches from pass 2 on; first_width: in pass 1, where the
    centre (the repelling zero of the field) lags the separatrix by up to ~0.07 at beta = 20.
    patch_points: Lobatto points per patch.  floor: virtual nodes down to this many kernel widths.
    window, window_points: half-width and tracers of the separatrix windows.
    merge_tol, merge_gap: merge two neighbours when (m_a m_b / (m_a + m_b)^2) (gap / kw)^2 <
    merge_tol and gap < merge_gap kw.  importance_cut: nodes at least this important meet rtol fully;
    less important ones in proportion, but never more loosely than rtol / importance_floor;
    recomputed every importance_every steps (nodes emitted since count as fully important) and
    spread over the angle a node moves in a step (a node about to enter a cluster's attention
    already counts).
    Nodes and patches whose mass is below e^{-2 beta ||B|| - NEVER_MATTERS} times the heaviest node's
    are dropped: no query can give them a softmax share above e^-NEVER_MATTERS.
    scout_rtol: where set (and max_passes > 1), the first pass is a scout at this rtol (atol in
    proportion) that only places the separatrices; the second pass, centred on them, is the final
    one, run to the last output without margin (the scout's separatrix is good to far less than a
    patch width, and the centre matters only to the smoothness of the emitted labels).  None: every
    pass at rtol, until two consecutive ones differ by less than pass_tol in every saved
    angle-moment (see `MeanFieldTrajectory.moments`), at most max_passes.  margin: time integrated
    past the last output so that the backward solve has settled there (None: 12 / lambda_0,
    lambda_0 the zero-temperature expansion rate at the separatrix).  max_steps: per pass.
    """

    rtol: float = 1e-8
    atol: float = 1e-10
    patch_width: float = 0.05
    first_width: float = 0.2
    patch_points: int = 17
    floor: float = 0.01
    window: float = 0.4
    window_points: int = 64
    merge_tol: float = 1e-16
    merge_gap: float = 1e-3
    importance_cut: float = 1e-3
    importance_floor: float = 1e-8
    importance_every: int = 1
    max_passes: int = 3
    pass_tol: float = 1e-9
    scout_rtol: float | None = 1e-5
    margin: float | None = None
    max_steps: int = 1_000_000


@dataclass(frozen=True)
class MeanFieldTrajectory:
    """The mean-field measure at the requested times, as weighted points.

    t (T,); states: T pairs (angles (N_t,), log-weights (N_t,)) of rho_t = sum exp(logw) delta
    (total mass 1 up to the quadrature error; the virtual nodes of the patches included); n_nodes
    (T,): ordinary nodes integrated at t.  separatrix_t (S,), separatrices (S, k): the separatrices
    of the last pass at its step times (solved backward).  passes: per pass, a dict (steps,
    rejected, evals, wall_s, separatrix0, moved: largest state change from the pass before).
    info: level, h, du, kernel width, settings, beta, converged (passes agreed to pass_tol).
    dense_t (D,), dense_states: the last pass's states at the extra times its `dense` asked for
    (the step's continuous extension, as every saved state), to locate times between saved ones.
    """

    t: np.ndarray
    states: list[State]
    n_nodes: np.ndarray
    separatrix_t: np.ndarray
    separatrices: np.ndarray
    passes: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    dense_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dense_states: list[State] = field(default_factory=list)

    def moments(self) -> np.ndarray:
        """(T, 4): sum w cos theta, sum w sin theta, sum w cos 2 theta, sum w sin 2 theta."""
        out = np.empty((len(self.t), 4))
        for k, (th, lw) in enumerate(self.states):
            w = np.exp(lw)
            out[k] = [w @ np.cos(th), w @ np.sin(th), w @ np.cos(2 * th), w @ np.sin(2 * th)]
        return out


# ------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class _Problem:
    """The frozen inputs of one run: weights, field, grading, rho_0's log-density, settings."""

    att: Attention
    field: CircleField
    kw: float
    h: float
    du: float
    logf: Callable[[np.ndarray], np.ndarray]
    settings: MeanFieldSettings
    grid: Grid
    window: np.ndarray  # tracer offsets of a separatrix window
    lam0: float
    level: int


def _check_2d_attention(model: object) -> Attention:
    att = check_attention(model)
    if att.d != 2:
        raise ValueError(f"simulate_mean_field_circle needs d = 2 weights, got d = {att.d}")
    if not math.isfinite(att.beta):
        raise ValueError(
            "att.beta must be finite: at beta = inf use simulate_zero_temperature / reference_w2"
        )
    if att.spectrum().multiplicity != 1:
        raise ValueError(
            f"simulate_mean_field_circle needs a one-dimensional top eigenspace of A, got "
            f"{att.spectrum().multiplicity} (A is a multiple of the identity: no separatrix)"
        )
    return att


def _log_density(density: object) -> Callable[[np.ndarray], np.ndarray]:
    """angles -> log f from density (None: uniform; else a callable X (N, 2) -> f (N,) > 0)."""
    if density is None:
        return lambda th: np.zeros(np.shape(th))
    if not callable(density):
        raise TypeError(f"density must be None (uniform) or a callable X (N, 2) -> (N,), got {density!r}")

    def logf(th: np.ndarray) -> np.ndarray:
        th = np.asarray(th, dtype=np.float64)
        f = np.asarray(to_numpy(density(np.stack([np.cos(th), np.sin(th)], -1))), dtype=np.float64)
        if f.shape != th.shape or not np.all(np.isfinite(f)) or np.any(f <= 0):
            raise ValueError(
                "density(X) must return finite values > 0 at every angle (log-weights need log f)"
            )
        return np.log(f)

    return logf


def _problem(att: Attention, level: int, density: DensityFn | None, settings: MeanFieldSettings) -> _Problem:
    kw = 1.0 / math.sqrt(att.beta * att.norm_B)
    scale = 2.0**-level
    sp = att.spectrum()
    u2 = np.real(sp.eigenvectors[:, 1])
    lam0 = abs(sp.gap) / float(np.linalg.norm(att.B.T @ (u2 / np.linalg.norm(u2))))
    s = settings
    return _Problem(
        att,
        CircleField(att),
        kw,
        kw * scale,
        min(2.0 * kw, 0.2) * scale,
        _log_density(density),
        s,
        Grid.of(s.patch_points),
        np.linspace(-s.window, s.window, s.window_points),
        lam0,
        level,
    )


def initial_separatrices(att: Attention, density: DensityFn | None = None, n: int = 4096) -> np.ndarray:
    """The repelling zeros (k,) of the field of rho_0 near the zero-temperature separatrices (the
    directions where P_1 x = 0): Newton on the field of n equispaced nodes weighted by f."""
    att = _check_2d_attention(att)
    sp = att.spectrum()
    u2 = np.real(sp.eigenvectors[:, 1])
    z = math.atan2(u2[1], u2[0]) + np.array([0.0, math.pi])
    th = (np.arange(n) + 0.5) * TWO_PI / n
    logw = _log_density(density)(th)
    fld = CircleField(att)
    theta, lw = torch.tensor(th, dtype=F64), torch.tensor(logw - np.logaddexp.reduce(logw), dtype=F64)
    e = 1e-6
    for _ in range(30):
        v = fld(torch.tensor(np.concatenate([z, z + e, z - e]), dtype=F64), theta, lw).numpy()
        slope = (v[2:4] - v[4:6]) / (2 * e)
        step = np.clip(-v[:2] / np.where(slope > 0, slope, np.inf), -0.05, 0.05)
        z = z + step
        if np.max(np.abs(step)) < 1e-15:
            break
    return np.mod(z, TWO_PI)


def _check_settings(settings: object) -> MeanFieldSettings:
    if settings is None:
        return MeanFieldSettings()
    if not isinstance(settings, MeanFieldSettings):
        raise TypeError(
            f"settings must be a MeanFieldSettings (or None for the defaults), got {type(settings).__name__}"
        )
    for name in ("rtol", "atol", "patch_width", "first_width", "floor", "window", "merge_tol", "merge_gap"):
        check_positive(getattr(settings, name), f"settings.{name}")
    for name in ("patch_points", "window_points", "max_passes", "max_steps"):
        check_positive(getattr(settings, name), f"settings.{name}", integer=True)
    if settings.window_points < 8 or settings.patch_points < 5:
        raise ValueError("settings.window_points must be >= 8 and settings.patch_points >= 5")
    return settings


# ------------------------------------------------------------------ state
@dataclass
class _State:
    """The measure of one pass at time t: ordinary nodes, patches, window centres."""

    theta: torch.Tensor
    logw: torch.Tensor
    patches: list[Patch]
    windows: np.ndarray
    t: float = 0.0
    weights: torch.Tensor | None = None  # error weights of the ordinary nodes (None: recompute)
    weights_age: int = 0
    patch_weights: torch.Tensor | None = None
    reach: float = 0.0  # how far (radians) a node moved in the last step, at most


def _initial_state(pb: _Problem, centres: np.ndarray, width: float) -> _State:
    """rho_0 graded toward `centres` (sorted angles): ordinary nodes with offsets >= width from
    every centre, a patch below; log-weights normalised to total mass 1."""
    cs = np.sort(np.mod(np.asarray(centres, dtype=np.float64), TWO_PI))
    gaps = np.diff(np.concatenate([cs, [cs[0] + TWO_PI]]))
    arcs = [arc_family(float(g), pb.h, pb.du) for g in gaps]
    k = len(cs)
    th, lw = [], []
    for j, fam in enumerate(arcs):
        keep = np.flatnonzero(fam.sig >= math.log(width))
        for s, c in ((1, cs[j]), (-1, cs[j] + gaps[j])):
            pos = c + s * np.exp(fam.sig[keep])
            th.append(pos)
            lw.append(pb.logf(pos) + fam.sig[keep] + np.log(fam.dsig[keep]))
    families: list[dict[int, LabelFamily]] = [{-1: arcs[(j - 1) % k], 1: arcs[j]} for j in range(k)]
    patches = [Patch.start(float(cs[j]), width, families[j], pb.logf, pb.grid) for j in range(k)]
    theta, logw = np.concatenate(th), np.concatenate(lw)
    keys = [p.keys(pb.grid, pb.settings.floor * pb.kw)[1] for p in patches]
    logz = float(np.logaddexp.reduce(np.concatenate([logw, *keys])))
    for p in patches:
        p.ell = p.ell - logz
    return _State(torch.tensor(theta, dtype=F64), torch.tensor(logw - logz, dtype=F64), patches, cs.copy())
