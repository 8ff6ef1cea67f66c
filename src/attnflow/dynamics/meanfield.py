"""The mean-field flow on S^1 (d = 2) at finite beta, with exponentially small masses kept exactly.

MATH.md, "Why concentration lasts longer than guaranteed": a cluster is held by the thin stream of
mass that leaves the separatrices, and departs once that stream's mass near its maximiser has
fallen below e^{-beta delta}.  A discretisation must carry masses down to e^{-beta delta - margin}
(e^-4677 at beta = 1e4) where they matter.  This module does it with three kinds of parts:

- ordinary nodes (angles, log-weights): rho_0's graded quadrature (`tail`), then every label that
  left a patch; integrated by Dormand-Prince 5(4) with the field of `circle_field`;
- one Eulerian patch per separatrix (`patch`): the log-density near the repelling point, moved by
  the step map of its Lobatto points, seen by the field through virtual nodes, emitting labels as
  they leave;
- a window of tracers around each separatrix (queries only), whose step maps give the separatrix
  itself by integrating backward in time (stable backward, unstable forward).

Passes.  Pass 1 centres each patch on the repelling zero of the field; the separatrix solved
backward from its step maps centres the next pass, and so on until the saved states stop moving
(`MeanFieldSettings.pass_tol`) or `max_passes` is reached.  The centre matters only to the
smoothness of the emitted family (see `patch`), never to the mass bookkeeping.

Error control.  The local error of each node is weighted by its importance (`circle_field.importance`:
its mass, raised to the softmax share it gets from any node that matters), floored at
`importance_cut`: the thin streams that run from a separatrix toward a cluster from the far side
cross sharp switches of attention (steps of 1e-3 for nodes of mass e^-30 that nothing attends to)
and would otherwise set the step for everything.  Nodes that have fallen into a cluster are merged
when merging moves the field by less than `merge_tol` (second moment of the pair in kernel widths).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._checks import check_positive, check_times, to_numpy
from .._threads import DEFAULT_THREADS, check_threads, torch_threads
from ..attention import Attention, check_attention
from .chebyshev import local_lagrange
from .circle_field import CircleField, importance
from .patch import Grid, Patch
from .steppers import DP_A, DP_B, DP_E, DP_P
from .tail import LabelFamily, arc_family

__all__ = ["MeanFieldSettings", "MeanFieldTrajectory", "simulate_mean_field_circle"]

F64 = torch.float64
TWO_PI = 2.0 * math.pi
NEVER_MATTERS = 40.0  # see MeanFieldSettings: dropped masses weigh at most e^-40 in any softmax


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
    max_passes, pass_tol: passes until two consecutive ones differ by less than pass_tol in every
    saved angle-moment (see `MeanFieldTrajectory.moments`).  margin: time integrated past the last
    output so that the backward solve has settled there (None: 12 / lambda_0, lambda_0 the
    zero-temperature expansion rate at the separatrix).  max_steps: per pass.
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
    """

    t: np.ndarray
    states: list[tuple[np.ndarray, np.ndarray]]
    n_nodes: np.ndarray
    separatrix_t: np.ndarray
    separatrices: np.ndarray
    passes: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

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


def _check_2d_attention(att: Any) -> Attention:
    att = check_attention(att)
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


def _log_density(density: Any) -> Callable[[np.ndarray], np.ndarray]:
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


def _problem(att: Attention, level: int, density: Any, settings: MeanFieldSettings) -> _Problem:
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


def initial_separatrices(att: Attention, density: Any = None, n: int = 4096) -> np.ndarray:
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


@dataclass(frozen=True)
class _Keys:
    """What the field sees during one step besides the ordinary nodes: per patch the virtual nodes'
    log-weights and the matrix that moves them with the patch's Lobatto points."""

    logw: torch.Tensor  # ordinary then virtual log-weights, (N + M,)
    maps: list[torch.Tensor]  # per patch (M_p, p)
    virtual_logw: list[np.ndarray]


def _keys(pb: _Problem, st: _State) -> _Keys:
    from .chebyshev import barycentric_matrix

    maps, vlw = [], []
    for p in st.patches:
        pos, lw = p.keys(pb.grid, pb.settings.floor * pb.kw)
        maps.append(torch.tensor(barycentric_matrix(pb.grid.xi, pb.grid.weights, p.to_xi(pos)), dtype=F64))
        vlw.append(lw)
    return _Keys(torch.cat([st.logw, torch.tensor(np.concatenate(vlw), dtype=F64)]), maps, vlw)


def _rhs(pb: _Problem, keys: _Keys, n: int) -> Callable[[tuple], tuple]:
    """y = (ordinary angles (N,), patch points (k, p), window tracers (k, G)) -> their speeds."""
    k, p, g = len(keys.maps), pb.grid.xi.size, pb.window.size

    def f(y: tuple) -> tuple:
        th, P, W = y
        virtual = torch.cat([L @ P[m] for m, L in enumerate(keys.maps)])
        v = pb.field(torch.cat([th, P.reshape(-1), W.reshape(-1)]), torch.cat([th, virtual]), keys.logw)
        return v[:n], v[n : n + k * p].reshape(k, p), v[n + k * p :].reshape(k, g)

    return f


def _combine(y: tuple, h: float, ks: list, coefs) -> tuple:
    return tuple(
        a + h * sum(c * kk[i] for c, kk in zip(coefs, ks, strict=False) if c != 0.0) for i, a in enumerate(y)
    )


@dataclass(frozen=True)
class _Attempt:
    ks: list
    y5: tuple
    err: float


def _attempt(pb: _Problem, st: _State, keys: _Keys, h: float, weights: tuple) -> _Attempt:
    """One Dormand-Prince step of size h: the stages, the 5th-order state and the error norm
    (importance-weighted RMS over the ordinary nodes, max over the patch points, each patch
    weighted by its own importance)."""
    weight, patch_weight = weights
    k = len(st.patches)
    y0 = (
        st.theta,
        torch.tensor(np.stack([p.points(pb.grid) for p in st.patches]), dtype=F64),
        torch.tensor(st.windows[:, None] + pb.window[None, :], dtype=F64),
    )
    f = _rhs(pb, keys, len(st.theta))
    ks = [f(y0)]
    for row in DP_A[1:]:
        ks.append(f(_combine(y0, h, ks, row)))
    y5 = _combine(y0, h, ks, DP_B)
    err = _combine(tuple(torch.zeros_like(a) for a in y0[:2]), h, [kk[:2] for kk in ks], DP_E)
    sc = pb.settings.atol + pb.settings.rtol
    nodes = 0.0
    if len(st.theta):
        nodes = float(torch.sqrt(((weight * err[0] / sc) ** 2).sum() / (weight**2).sum()))
    patches = float((patch_weight[:, None] * err[1].abs() / sc).max()) if k else 0.0
    return _Attempt(ks, y5, max(nodes, patches))


def _merge(st: _State, kw: float, s: MeanFieldSettings) -> int:
    """Merge runs of neighbours (in angle) whose merge moves the field by less than merge_tol:
    summed mass (logsumexp), mass-weighted mean angle; a merged node keeps the largest error
    weight of its run.  Returns the number of nodes merged away."""
    if len(st.theta) < 2:
        return 0
    ang, lw = np.mod(st.theta.numpy(), TWO_PI), st.logw.numpy()
    order = np.argsort(ang)
    a, lw = ang[order], lw[order]
    gap = np.diff(a)
    pair = np.exp(lw[:-1] + lw[1:] - 2.0 * np.logaddexp(lw[:-1], lw[1:]))
    join = (gap < s.merge_gap * kw) & (pair * (gap / kw) ** 2 < s.merge_tol)
    if not join.any():
        return 0
    first = np.concatenate([[True], ~join])
    gid = np.cumsum(first) - 1
    top = np.full(gid[-1] + 1, -np.inf)
    np.maximum.at(top, gid, lw)
    rel = np.exp(lw - top[gid])
    mass = np.bincount(gid, weights=rel)
    base = a[first]
    st.theta = torch.tensor(base + np.bincount(gid, weights=rel * (a - base[gid])) / mass, dtype=F64)
    st.logw = torch.tensor(top + np.log(mass), dtype=F64)
    if st.weights is not None and len(st.weights) == len(order):
        w = np.zeros(len(base))
        np.maximum.at(w, gid, st.weights.numpy()[order])
        st.weights = torch.tensor(w, dtype=F64)
    else:
        st.weights = None
    return int(len(a) - len(base))


def _drop_negligible(pb: _Problem, st: _State, rec: _Record) -> None:
    """Drop the nodes, and retire the patches, whose mass no softmax can weigh above e^-NEVER_MATTERS:
    below the heaviest node's by more than 2 beta ||B|| + NEVER_MATTERS in log."""
    if not len(st.logw):
        return
    cut = float(st.logw.max()) - 2.0 * pb.att.beta * pb.att.norm_B - NEVER_MATTERS
    keep = st.logw >= cut
    if not bool(keep.all()):
        rec.counts["dropped"] = rec.counts.get("dropped", 0) + int((~keep).sum())
        st.theta, st.logw = st.theta[keep], st.logw[keep]
        if st.weights is not None and len(st.weights) == len(keep):
            st.weights = st.weights[keep]
        else:
            st.weights = None
    for p in st.patches:
        if p.alive and float(np.max(p.ell)) + math.log(p.hi - p.lo) < cut:
            p.alive = False
            rec.counts["retired"] = rec.counts.get("retired", 0) + 1


def _repelling_zero(Y: np.ndarray, v: np.ndarray, near: float) -> float | None:
    """The zero of v (sampled at increasing Y) where it changes from - to +, nearest to `near`
    (linear interpolation), or None."""
    i = np.flatnonzero((v[:-1] < 0) & (v[1:] >= 0))
    if i.size == 0:
        return None
    z = Y[i] - v[i] * (Y[i + 1] - Y[i]) / (v[i + 1] - v[i])
    return float(z[np.argmin(np.abs(z - near))])


@dataclass
class _Record:
    """What one pass keeps: step times, window maps, saved states, counts."""

    t: list[float] = field(default_factory=list)
    window_start: list[np.ndarray] = field(default_factory=list)
    window_end: list[np.ndarray] = field(default_factory=list)
    centres: list[np.ndarray] = field(default_factory=list)
    widths: list[np.ndarray] = field(default_factory=list)
    states: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    n_nodes: list[int] = field(default_factory=list)
    final_zeros: np.ndarray | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict(steps=0, rejected=0, emitted=0, merged=0))


def _save(pb: _Problem, st: _State, keys: _Keys, att: _Attempt, h: float, tau: float, rec: _Record) -> None:
    """The state at t + tau h from the step's continuous extension (Dormand-Prince, order 4)."""
    powers = [tau**q for q in range(1, 5)]
    coef = [sum(c * powers[j] for j, c in enumerate(row)) for row in DP_P]
    th = st.theta + h * sum(c * kk[0] for c, kk in zip(coef, att.ks, strict=True) if c != 0.0)
    P0 = torch.tensor(np.stack([p.points(pb.grid) for p in st.patches]), dtype=F64)
    P = P0 + h * sum(c * kk[1] for c, kk in zip(coef, att.ks, strict=True) if c != 0.0)
    virtual = [(L @ P[m]).numpy() for m, L in enumerate(keys.maps)]
    rec.states.append(
        (np.concatenate([th.numpy(), *virtual]), np.concatenate([st.logw.numpy(), *keys.virtual_logw]))
    )
    rec.n_nodes.append(len(st.theta))


def _group(pb: _Problem, p: Patch, X: np.ndarray, h: float) -> int:
    """Labels per emitted node: 1, unless the patch stretches so fast (a front of the field: after a
    departure, lambda ~ 4 beta) that consecutive labels would leave closer than a kernel width
    apart in time-of-flight, kw / ||V||, downstream."""
    if not p.alive or X[-1] - X[0] <= p.hi - p.lo:
        return 1
    lam = math.log((X[-1] - X[0]) / (p.hi - p.lo)) / h
    return max(1, int(pb.kw * lam / (float(np.linalg.norm(pb.att.V, 2)) * pb.du)))


def _advance(
    pb: _Problem, st: _State, att: _Attempt, h: float, centre_of_t, width: float, rec: _Record
) -> None:
    """Accept a step: new windows (pass 1: the repelling zeros), patches moved and recentred,
    labels emitted, merges."""
    t_new = st.t + h
    X, WY, Wv = (a.numpy() for a in (att.y5[1], att.y5[2], att.ks[6][2]))
    mid = pb.window.size // 2
    zeros = np.array(
        [
            z if (z := _repelling_zero(WY[m], Wv[m], WY[m][mid])) is not None else WY[m][mid]
            for m in range(len(WY))
        ]
    )
    centres = zeros if centre_of_t is None else np.asarray(centre_of_t(t_new), dtype=np.float64)
    rec.t.append(st.t)
    st.reach = float(att.y5[0].sub(st.theta).abs().max()) if len(st.theta) else 0.0
    rec.window_start.append(st.windows.copy())
    rec.window_end.append(WY.copy())
    new_th, new_lw = [att.y5[0]], [st.logw]
    for m, p in enumerate(st.patches):
        pos, lw = p.advance(
            pb.grid, X[m], float(centres[m]), width, _group(pb, p, X[m], h), pb.settings.floor * pb.kw
        )
        new_th.append(torch.tensor(pos, dtype=F64))
        new_lw.append(torch.tensor(lw, dtype=F64))
        rec.counts["emitted"] += len(pos)
    st.theta, st.logw = torch.cat(new_th), torch.cat(new_lw)
    if st.weights is not None and len(st.weights) < len(st.theta):
        st.weights = torch.cat([st.weights, torch.ones(len(st.theta) - len(st.weights), dtype=F64)])
    rec.counts["merged"] += _merge(st, pb.kw, pb.settings)
    st.weights_age += 1
    _drop_negligible(pb, st, rec)
    rec.centres.append(np.array([p.centre for p in st.patches]))
    rec.widths.append(np.array([p.width for p in st.patches]))
    st.windows, st.t = np.array(centres, dtype=np.float64), t_new
    rec.final_zeros = zeros


def _save_now(pb: _Problem, st: _State, keys: _Keys, rec: _Record) -> None:
    virtual = [
        (L @ torch.tensor(p.points(pb.grid), dtype=F64)).numpy()
        for p, L in zip(st.patches, keys.maps, strict=True)
    ]
    rec.states.append(
        (np.concatenate([st.theta.numpy(), *virtual]), np.concatenate([st.logw.numpy(), *keys.virtual_logw]))
    )
    rec.n_nodes.append(len(st.theta))


def _narrow_unresolved(pb: _Problem, st: _State, att: _Attempt, rec: _Record) -> bool:
    """Narrow (by 4) every patch whose step map the Lobatto points do not resolve (a sharp front
    of the field inside it, as after a cluster's departure); the labels beyond leave now.  True
    if any patch was narrowed: the step is then retried."""
    from .patch import RESOLVED

    X = att.y5[1].numpy()
    narrowed = False
    for m, p in enumerate(st.patches):
        if p.resolution(pb.grid, X[m]) > RESOLVED and p.width > pb.settings.floor * pb.kw:
            pos, lw = p.shrink(pb.grid, p.width / 4.0)
            st.theta = torch.cat([st.theta, torch.tensor(pos, dtype=F64)])
            st.logw = torch.cat([st.logw, torch.tensor(lw, dtype=F64)])
            rec.counts["emitted"] += len(pos)
            rec.counts["narrowed"] = rec.counts.get("narrowed", 0) + 1
            narrowed = True
    return narrowed


def _spread(theta: torch.Tensor, imp: torch.Tensor, reach: float) -> torch.Tensor:
    """imp_j raised to the largest imp_k with |theta_k - theta_j| <~ reach (bins of reach on the
    circle, the max over a bin and its two neighbours)."""
    n_bins = max(3, int(TWO_PI / max(reach, 1e-12)))
    b = (torch.remainder(theta, TWO_PI) / TWO_PI * n_bins).long().clamp(max=n_bins - 1)
    top = torch.zeros(n_bins, dtype=imp.dtype).scatter_reduce(0, b, imp, reduce="amax")
    near = torch.maximum(top, torch.maximum(top.roll(1), top.roll(-1)))
    return torch.maximum(imp, near[b])


def _error_weights(pb: _Problem, st: _State, keys: _Keys) -> tuple[torch.Tensor, torch.Tensor]:
    """Error weights min(1, importance / importance_cut), floored, of the ordinary nodes (N,) and of
    each patch (k,: the largest over its virtual nodes); recomputed every importance_every steps,
    the nodes emitted since padded with 1."""
    s = pb.settings
    n = len(st.theta)
    if st.weights is None or st.weights_age >= s.importance_every or len(st.weights) > n:
        virtual = [
            L @ torch.tensor(p.points(pb.grid), dtype=F64) for p, L in zip(st.patches, keys.maps, strict=True)
        ]
        imp = importance(pb.field, torch.cat([st.theta, *virtual]), keys.logw, queries=n)
        imp = torch.clamp(
            _spread(torch.cat([st.theta, *virtual]), imp, st.reach + pb.kw) / s.importance_cut,
            min=s.importance_floor,
            max=1.0,
        )
        sizes = [len(v) for v in virtual]
        parts = torch.split(imp[n:], sizes) if sizes else []
        st.patch_weights = torch.tensor(
            [float(q.max()) if len(q) else s.importance_floor for q in parts], dtype=F64
        )
        st.weights, st.weights_age = imp[:n], 0
    if len(st.weights) < n:
        st.weights = torch.cat([st.weights, torch.ones(n - len(st.weights), dtype=F64)])
    assert st.patch_weights is not None
    return st.weights, st.patch_weights


def _run_pass(
    pb: _Problem, centres: np.ndarray, t_out: np.ndarray, t_run: float, centre_of_t, width: float, progress
) -> _Record:
    """One forward pass from t = 0 to t_run, saving the states at t_out."""
    st, rec = _initial_state(pb, centres, width), _Record()
    keys, j, h = _keys(pb, st), 0, min(1e-2, t_run)
    while j < len(t_out) and t_out[j] <= 0.0:
        _save_now(pb, st, keys, rec)
        j += 1
    while st.t < t_run * (1.0 - 1e-12):
        if rec.counts["steps"] + rec.counts["rejected"] >= pb.settings.max_steps:
            raise RuntimeError(f"max_steps = {pb.settings.max_steps} reached at t = {st.t:.6g} < {t_run:.6g}")
        h = min(h, t_run - st.t)
        att = _attempt(pb, st, keys, h, _error_weights(pb, st, keys))
        if _narrow_unresolved(pb, st, att, rec):
            keys = _keys(pb, st)
            continue
        fac = 0.9 * att.err**-0.2 if att.err > 0 else 5.0
        if att.err > 1.0 or not math.isfinite(att.err):
            rec.counts["rejected"] += 1
            h *= min(1.0, max(0.2, fac)) if math.isfinite(att.err) else 0.2
            if h < 1e-12 * max(1.0, st.t):
                raise RuntimeError(f"step size underflow at t = {st.t:.6g} (h = {h:.3g})")
            continue
        while j < len(t_out) and t_out[j] <= st.t + h * (1.0 + 1e-12):
            _save(pb, st, keys, att, h, (t_out[j] - st.t) / h, rec)
            j += 1
        _advance(pb, st, att, h, centre_of_t, width, rec)
        keys = _keys(pb, st)
        rec.counts["steps"] += 1
        h *= min(5.0, max(0.2, fac))
        if progress is not None:
            progress(min(st.t, float(t_out[-1])), float(t_out[-1]))
    rec.t.append(st.t)
    return rec


def _backward(pb: _Problem, rec: _Record) -> np.ndarray:
    """The separatrices (n + 1, k) at the pass's step times, solved backward from the repelling
    zeros at its end through the windows' step maps (x + D_n(x) = target, D_n by 6-point local
    Lagrange on the window's tracers; the solve contracts errors like exp(-Lambda))."""
    assert rec.final_zeros is not None
    n, k = len(rec.window_start), len(rec.final_zeros)
    sep = np.empty((n + 1, k))
    sep[n] = rec.final_zeros
    dx = float(pb.window[1] - pb.window[0])
    for m in range(n - 1, -1, -1):
        for c in range(k):
            start = rec.window_start[m][c] + pb.window[0]
            disp = rec.window_end[m][c] - (rec.window_start[m][c] + pb.window)
            target = sep[m + 1, c]
            target += TWO_PI * round((rec.window_end[m][c][pb.window.size // 2] - target) / TWO_PI)
            lo, hi = start, start + dx * (pb.window.size - 1)
            x = min(max(target, lo), hi)
            for _ in range(50):
                step = (x + local_lagrange(start, dx, disp, x) - target) / (
                    1.0
                    + (local_lagrange(start, dx, disp, x + 1e-7) - local_lagrange(start, dx, disp, x - 1e-7))
                    / 2e-7
                )
                x = min(max(x - step, lo), hi)
                if abs(step) < 1e-15:
                    break
            sep[m, c] = x
    return sep


def _moved(a: list, b: list) -> float:
    """Largest change of the trigonometric moments between two lists of saved states."""

    def mom(states):
        return np.array([[np.exp(lw) @ f(th) for f in (np.cos, np.sin)] for th, lw in states])

    return float(np.max(np.abs(mom(a) - mom(b)))) if a and b else math.inf


def _check_settings(settings: Any) -> MeanFieldSettings:
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


def simulate_mean_field_circle(
    att: Attention,
    times: Any,
    *,
    level: int = 0,
    density: Any = None,
    settings: MeanFieldSettings | None = None,
    centres: Any = None,
    progress: Callable[[float, float], Any] | None = None,
    threads: int = DEFAULT_THREADS,
) -> MeanFieldTrajectory:
    """The mean-field measure rho_t of rho_0 under att (d = 2, finite beta) at `times`.

    level: refinement (each level halves the spacing h = kw / 2^level away from the separatrices and
    the log-offset step du = min(2 kw, 0.2) / 2^level near them, kw = 1 / sqrt(beta ||B||), and so
    the spacing of the stream that leaves them).  density: rho_0's density w.r.t. the uniform law,
    a callable X (N, 2) -> (N,) > 0 (e.g. `sphere.vmf_density(mean, kappa)`), None: uniform.
    settings: MeanFieldSettings.  centres: first guesses of the separatrices at t = 0 (None: the
    repelling zeros of rho_0's field, `initial_separatrices`).  progress: progress(t, t_final).
    threads: torch CPU threads (the package's policy, `_threads`: 1 by default, 0 torch's own).
    Returns a MeanFieldTrajectory; `info["converged"]` says whether the passes agreed.
    """
    with torch_threads(check_threads(threads)):
        return _simulate(att, times, level, density, settings, centres, progress)


def _simulate(att, times, level, density, settings, centres, progress) -> MeanFieldTrajectory:
    att = _check_2d_attention(att)
    s = _check_settings(settings)
    if isinstance(level, bool) or not isinstance(level, int | np.integer) or level < 0:
        raise ValueError(f"level must be an integer >= 0 (each level halves the spacing), got {level!r}")
    t_out = check_times(times)
    if t_out[-1] <= 0:
        raise ValueError(f"times must reach beyond 0, got the last time {t_out[-1]!r}")
    pb = _problem(att, int(level), density, s)
    margin = 12.0 / pb.lam0 if s.margin is None else check_positive(s.margin, "settings.margin")
    c0 = (
        initial_separatrices(att, density)
        if centres is None
        else np.asarray(centres, dtype=np.float64).reshape(-1)
    )
    passes: list[dict[str, Any]] = []
    previous: list[tuple[np.ndarray, np.ndarray]] = []
    rec, sep, centre_of_t = None, None, None
    for k in range(s.max_passes):
        wall = _time.perf_counter()
        rec = _run_pass(
            pb,
            c0,
            t_out,
            float(t_out[-1] + margin),
            centre_of_t,
            s.first_width if k == 0 else s.patch_width,
            progress,
        )
        sep = _backward(pb, rec)
        moved = _moved(previous, rec.states)
        passes.append(
            dict(
                rec.counts,
                evals=0,
                wall_s=_time.perf_counter() - wall,
                separatrix0=sep[0].tolist(),
                moved=moved,
            )
        )
        if moved < s.pass_tol:
            break
        previous, c0, centre_of_t = rec.states, sep[0], _spline(np.asarray(rec.t), sep)
    assert rec is not None and sep is not None
    info = dict(
        level=int(level),
        h=pb.h,
        du=pb.du,
        kernel_width=pb.kw,
        beta=float(att.beta),
        lambda0=pb.lam0,
        margin=margin,
        converged=passes[-1]["moved"] < s.pass_tol,
        settings=s.__dict__.copy(),
        field_evals=pb.field.n_evals,
    )
    return MeanFieldTrajectory(
        t_out.copy(), rec.states, np.asarray(rec.n_nodes), np.asarray(rec.t), sep, passes, info
    )


def _spline(t: np.ndarray, sep: np.ndarray) -> Callable[[float], np.ndarray]:
    from scipy.interpolate import CubicSpline

    keep = np.concatenate([np.diff(t) > 0, [True]])
    return CubicSpline(t[keep], sep[keep], axis=0)
