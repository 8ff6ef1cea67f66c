"""One step of the mean-field flow on S^1 (`_flow`): what the field sees, the step, its acceptance.

The virtual nodes of the patches (`_Keys`), the right-hand side and one Dormand-Prince attempt with
its importance-weighted error norm, the bookkeeping of an accepted step (patches moved and
recentred, labels emitted, nodes merged and dropped, windows recorded in `_Record`), the states
saved from the step's continuous extension, and the error weights of the nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..steppers import DP_A, DP_B, DP_E, DP_P
from ._setup import F64, NEVER_MATTERS, TWO_PI, MeanFieldSettings, State, _Problem, _State
from .circle_field import importance
from .patch import Patch

# a state of the step: (ordinary angles (N,), patch points (k, p), window tracers (k, G)), or its first
# two parts (the error estimate)
Y = tuple[torch.Tensor, ...]


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


def _rhs(pb: _Problem, keys: _Keys, n: int) -> Callable[[Y], Y]:
    """y = (ordinary angles (N,), patch points (k, p), window tracers (k, G)) -> their speeds."""
    k, p, g = len(keys.maps), pb.grid.xi.size, pb.window.size

    def f(y: Y) -> Y:
        th, P, W = y
        virtual = torch.cat([L @ P[m] for m, L in enumerate(keys.maps)])
        v = pb.field(torch.cat([th, P.reshape(-1), W.reshape(-1)]), torch.cat([th, virtual]), keys.logw)
        return v[:n], v[n : n + k * p].reshape(k, p), v[n + k * p :].reshape(k, g)

    return f


def _combine(y: Y, h: float, ks: list[Y], coefs: Sequence[float]) -> Y:
    return tuple(
        a + h * sum(c * kk[i] for c, kk in zip(coefs, ks, strict=False) if c != 0.0) for i, a in enumerate(y)
    )


@dataclass(frozen=True)
class _Attempt:
    ks: list[Y]
    y5: Y
    err: float


def _attempt(
    pb: _Problem, st: _State, keys: _Keys, h: float, weights: tuple[torch.Tensor, torch.Tensor]
) -> _Attempt:
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
    states: list[State] = field(default_factory=list)
    n_nodes: list[int] = field(default_factory=list)
    final_zeros: np.ndarray | None = None
    # saved time -> (a copy of the state that starts the step saving it, that step's size)
    snapshots: dict[float, tuple[_State, float]] = field(default_factory=dict)
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
    pb: _Problem,
    st: _State,
    att: _Attempt,
    h: float,
    centre_of_t: Callable[[float], np.ndarray] | None,
    width: float,
    rec: _Record,
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
