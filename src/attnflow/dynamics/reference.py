"""The zero-temperature flow at N = infinity: W2(rho_t, Pi_# rho_0) by adaptive quadrature.

MATH.md, "The zero-temperature flow at N = infinity".  For symmetric A with a one-dimensional top
eigenspace (eigenvector u_1) the flow keeps each hemisphere, so sending each to its atom is optimal:

    W2^2(rho_t, Pi_# rho_0) = integral 2 (1 - |<u_1, Phi_t(x)>|) drho_0(x).

Coordinates.  In A's eigenbasis (mu_1 > mu_2 >= ..., u_k) write x = c / |c| with
c = (1, sigma_2 e^{v_2}, ..., sigma_d e^{v_d}): v_k = log |c_k / c_1| in R, one sign branch sigma per
orthant (x and -x give the same integrand).  Under the flow v_k moves linearly in the clock s,
v_k(s) = v_k - (mu_1 - mu_k) s, and the slow tokens near P_1 x = 0 are the large v: the boundary
layer at the equator becomes a front that travels across an unbounded box at a finite speed, with
O(1) width.  The uniform measure on S^{d-1} has density exp(sum_k v_k) / (1 + sum_k e^{2 v_k})^{d/2}
in v (gnomonic projection, then logarithms).  Each node's clock solves ds/dt = 1/|B^T x| through
the exact flow of `zero_temperature` (expm(A s) from A's eigendecomposition), from its
coefficients in log form, so a token e^{-60} from the equator is as exact as any other.  The
integrand 2 (1 - cos) is evaluated as 2 sin^2 / (1 + cos): relative accuracy where W2 is tiny.

The v-box [-L, L]^{d-1} is covered by an adaptive Clenshaw-Curtis cubature (`_cubature`); outside it
the integrand is at most 2 sup(f(x) + f(-x)) and the uniform measure of the outside is at most
2 (d - 1) arctan(e^{-L}) per branch, which bounds the truncation error.  d = 2 and d = 3 only.
"""

from __future__ import annotations

import itertools
import math
import time as _time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive, check_times, to_numpy
from ..attention import Attention, check_attention
from ..measures import MEASURES
from ..measures.densities import DensityFn as Density
from ..measures.geometry import sphere_area
from .cubature import CubatureResult, grid_cells, refine
from .zero_temperature import ExactFlow, check_invertible_B, solve_clocks

DIMS = (2, 3)  # sphere dimensions d the reference supports (a (d-1)-dimensional cubature)
CELL_WIDTH = {2: 4.0, 3: 8.0}  # side of the starting cells in v
RULE_N = {2: 16, 3: 8}  # Clenshaw-Curtis rule per direction: n + 1 points, error from the n/2 rule
TAIL_SHARE = 0.1  # the box is grown until its truncation bound is below TAIL_SHARE * rtol * W2^2
L_STEP = 4.0  # the box grows by at least this much each time
START_W2SQ = 1e-2  # the first box assumes W2^2 >= START_W2SQ; it grows once the values are known


__all__ = ["ReferenceW2", "reference_problem", "reference_w2"]


@dataclass(frozen=True)
class ReferenceW2:
    """W2(rho_t, Pi_# rho_0) at N = infinity on the given times, with its error.

    times (T,); w2, w2_err (T,): the distance and a bound-like error estimate (absolute);
    w2sq, w2sq_err (T,): the same for W2^2.  info: how it was computed -- "nodes" (cubature
    nodes, each one token per sign branch), "cells", "L" (half-width of the v-box), "converged",
    "error_parts" (quadrature, truncation, clock: each (T,) for W2^2), "mass" (integral of the
    density, 1 up to the quadrature error), "rho0", "clock_rtol", "wall_time" (s).
    """

    times: np.ndarray
    w2: np.ndarray
    w2_err: np.ndarray
    w2sq: np.ndarray
    w2sq_err: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


def _spectral_data(att: Attention) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of A, descending, and orthonormal eigenvectors (columns); checks what is supported."""
    d = att.d
    if d not in DIMS:
        raise ValueError(
            f"reference_w2 supports d = 2 and d = 3 (a {d - 1}-dimensional quadrature would be needed for "
            f"d = {d}); for d = {d} use simulate_zero_temperature on a large cloud"
        )
    sp = att.spectrum()
    if not sp.symmetric:
        raise ValueError(
            f"reference_w2 needs symmetric A = V B^T (relative asymmetry {sp.asymmetry:.3g}): only then does "
            "the flow keep each hemisphere and the integral formula for W2 hold"
        )
    if sp.multiplicity != 1:
        raise ValueError(
            f"reference_w2 needs a one-dimensional top eigenspace of A (here dimension {sp.multiplicity}): "
            "only then is Pi_# rho_0 the two atoms +-u_1 and W2 an integral over rho_0"
        )
    check_invertible_B(att)
    lam, U = np.linalg.eigh((np.asarray(att.A) + np.asarray(att.A).T) / 2)
    return lam[::-1].copy(), U[:, ::-1].copy()


def reference_problem(att: Attention) -> str | None:
    """Why `reference_w2` cannot compute W2 at N = infinity for these weights (d, A's symmetry and
    top eigenspace, B), or None when it can. Cheap: A's spectrum (d x d)."""
    try:
        _spectral_data(att)
    except ValueError as err:
        return str(err)
    return None


@dataclass(frozen=True)
class _Rho0:
    """rho_0 as reference_w2 integrates it: its density f w.r.t. the uniform probability on the sphere,
    the sup of f(x) + f(-x) (None: unknown, then taken over the nodes), and a label."""

    f: Density
    sup: float | None
    label: str


@dataclass
class _Tally:
    """What the integrand has seen so far: clock evaluations, tokens, the largest clock s and the
    largest f(x) + f(-x) at a node."""

    nfev: int = 0
    tokens: int = 0
    s_max: float = 0.0
    fsym_max: float = 0.0


def _density(rho0: str | Density, d: int, mean: ArrayLike | None, kappa: float | None) -> _Rho0:
    """rho0 = a name of MEASURES ("uniform", "vmf", with mean and kappa) or a callable density f(X)
    (w.r.t. the uniform probability), checked."""
    if callable(rho0):
        user = rho0

        def f_user(X: np.ndarray) -> np.ndarray:
            v = np.asarray(user(X), dtype=np.float64).reshape(-1)
            if v.shape != (X.shape[0],) or not np.all(np.isfinite(v)) or np.any(v < 0):
                raise ValueError(
                    "rho0 (a density) must return finite values >= 0, one per row of its (P, d) argument"
                )
            return v

        return _Rho0(f_user, None, getattr(rho0, "__name__", "density"))
    if rho0 not in MEASURES:
        names = ", ".join(repr(n) for n in MEASURES)
        raise ValueError(f"rho0 must be one of {names} or a callable density f(X), got {rho0!r}")
    family = MEASURES[rho0]
    given: dict[str, Any] = {"mean": mean, "kappa": kappa}  # the family's keywords
    params = {p: given[p] for p in family.parameters}
    if any(v is None for v in params.values()):
        raise ValueError(f"rho0={rho0!r} needs mean (a (d,) vector) and kappa (>= 0)")
    if "mean" in params and mean is not None:
        m = to_numpy(mean).astype(np.float64).ravel()
        if m.size != d or not np.all(np.isfinite(m)) or np.linalg.norm(m) == 0:
            raise ValueError(f"mean must be a finite non-zero vector with d = {d} entries, got {mean!r}")
    rho = family.bind(d, **params)
    label = ", ".join(f"{p}={float(v):g}" for p, v in params.items() if p != "mean")
    return _Rho0(rho.normalised(), rho.pair_sup(), f"{rho0}({label})" if label else rho0)


def _integrand(
    att: Attention,
    lam: np.ndarray,
    U: np.ndarray,
    f: Density,
    t: np.ndarray,
    clock_rtol: float,
    stats: _Tally,
) -> Callable[[np.ndarray], np.ndarray]:
    """v (P, d-1) -> (P, T + 1): 2 (1 - |<u_1, Phi_t(x)>|) (f(x) + f(-x)) times the uniform density in v,
    summed over the sign branches; the last column integrates the density itself (the mass)."""
    d = att.d
    B = np.asarray(att.B)
    branches = np.array(list(itertools.product((1.0, -1.0), repeat=d - 1)))
    area = sphere_area(d)

    def g(v: np.ndarray) -> np.ndarray:
        P = v.shape[0]
        logc1 = -0.5 * np.logaddexp.reduce(np.concatenate([np.zeros((P, 1)), 2.0 * v], axis=1), axis=1)
        logc = np.concatenate([logc1[:, None], v + logc1[:, None]], axis=1)  # (P, d)
        weight = np.exp(np.sum(v, axis=1) + d * logc1) / area
        nb = branches.shape[0]
        sign = np.concatenate([np.ones((nb, 1)), branches], axis=1)  # (nb, d)
        sign = np.repeat(sign, P, axis=0)
        logc = np.tile(logc, (nb, 1))
        X = (sign * np.exp(logc)) @ U.T  # initial tokens, (nb P, d)
        fsym = f(X) + f(-X)
        stats.fsym_max = max(stats.fsym_max, float(np.max(fsym, initial=0.0)))
        flow = ExactFlow.from_log_coefficients(logc, sign, lam, U)
        clocks = solve_clocks(flow, B, t, clock_rtol, clock_rtol * 1e-2)
        S = clocks.s
        stats.nfev += clocks.nfev
        stats.tokens += X.shape[0]
        stats.s_max = max(stats.s_max, float(S.max(initial=0.0)))
        out = np.empty((X.shape[0], t.size + 1))
        for k in range(t.size):
            e = flow.coef(S[k])  # (d, nb P), largest magnitude 1 per token
            norm2 = np.sum(e * e, axis=0)
            cos = np.abs(e[0]) / np.sqrt(norm2)
            out[:, k] = 2.0 * (np.sum(e[1:] * e[1:], axis=0) / norm2) / (1.0 + cos)
        out[:, t.size] = 1.0
        out *= (fsym * np.tile(weight, nb))[:, None]
        result: np.ndarray = out.reshape(nb, P, t.size + 1).sum(axis=0)
        return result

    return g


def _tail_coefficient(d: int, sup: float) -> float:
    """K with truncation error <= K arctan(e^{-L}) <= K e^{-L}: 2 sup(f(x) + f(-x)) times the
    measure outside the v-box, 2 (d - 1) arctan(e^{-L}) per branch, over all 2^{d-1} branches."""
    return float(2.0 * sup * 2 ** (d - 1) * 2 * (d - 1) / sphere_area(d))


def _box_for(d: int, sup: float, bound: float) -> float:
    """Half-width L of the v-box whose truncation error is at most `bound`."""
    return max(math.log(_tail_coefficient(d, sup) / bound), 1.0)


def _frame(L_old: float, L: float, width: float, D: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells covering [-L, L]^D minus [-L_old, L_old]^D: two slabs per direction, each tiled."""
    los, his = [], []
    for k in range(D):
        for side in (-1.0, 1.0):
            lo = np.full(D, -L)
            hi = np.full(D, L)
            lo[:k] = -L_old  # directions before k: inside the old box (those slabs are done)
            hi[:k] = L_old
            lo[k], hi[k] = (L_old, L) if side > 0 else (-L, -L_old)
            n = np.maximum(1, np.ceil((hi - lo) / width)).astype(int)
            edges = [np.linspace(lo[j], hi[j], n[j] + 1) for j in range(D)]
            lo_g = np.stack(np.meshgrid(*[e[:-1] for e in edges], indexing="ij"), -1).reshape(-1, D)
            hi_g = np.stack(np.meshgrid(*[e[1:] for e in edges], indexing="ij"), -1).reshape(-1, D)
            los.append(lo_g)
            his.append(hi_g)
    return np.concatenate(los), np.concatenate(his)


@dataclass(frozen=True)
class _Cubature:
    """reference_w2's settings: relative tolerance on W2^2, the most nodes, the box half-width L in v
    (None: grown until its truncation bound is small enough)."""

    rtol: float
    max_nodes: int
    L: float | None


@dataclass(frozen=True)
class _Integral:
    """The cubature on the v-box [-L, L]^(d-1): its result, L, rho_0's mass, W2^2 (T,), the box's
    truncation bound on W2^2 and the sup of f(x) + f(-x) it used."""

    res: CubatureResult
    L: float
    mass: float
    w2sq: np.ndarray
    tail: float
    sup: float


def _integral(res: CubatureResult, d: int, rho: _Rho0, L: float, stats: _Tally) -> _Integral:
    """W2^2 and its truncation bound from a cubature result on the box [-L, L]^(d-1)."""
    mass = float(res.value[-1])
    if not mass > 0:
        raise ValueError(f"rho0 integrates to {mass:.3g} over the sphere: a density must have mass > 0")
    sup = rho.sup if rho.sup is not None else stats.fsym_max
    tail = _tail_coefficient(d, sup) * math.atan(math.exp(-L)) / mass
    return _Integral(res, L, mass, res.value[:-1] / mass, tail, sup)


def _integrate_box(
    g: Callable[[np.ndarray], np.ndarray], d: int, rho: _Rho0, cfg: _Cubature, stats: _Tally
) -> _Integral:
    """The adaptive cubature of g on the v-box, grown (when cfg.L is None) by frames until its
    truncation bound is below TAIL_SHARE * rtol * min W2^2 or the nodes run out."""
    width, n, D = CELL_WIDTH[d], RULE_N[d], d - 1
    if cfg.L is None:
        L_box = _box_for(d, rho.sup if rho.sup is not None else 2.0, TAIL_SHARE * cfg.rtol * START_W2SQ)
    else:
        L_box = cfg.L
    lo, hi = grid_cells(-L_box, L_box, width, D)
    res = refine(g, lo, hi, cfg.rtol, n=n, max_nodes=cfg.max_nodes)
    while True:
        now = _integral(res, d, rho, L_box, stats)
        floor = TAIL_SHARE * cfg.rtol * float(np.min(now.w2sq))
        if cfg.L is not None or not res.converged or floor <= 0 or now.tail <= floor:
            return now
        target = max(L_box + L_STEP, _box_for(d, now.sup, floor * now.mass) + 1.0)
        lo, hi = _frame(L_box, target, width, D)
        if res.nodes + lo.shape[0] * (n + 1) ** D > cfg.max_nodes:
            return now
        L_box = target
        used = res.nodes
        res = refine(g, lo, hi, cfg.rtol, n=n, max_nodes=cfg.max_nodes - used, start=res.cells)
        res = CubatureResult(res.value, res.error, res.cells, res.nodes + used, res.converged)


def _warn(box: _Integral, d: int, rho: _Rho0, cfg: _Cubature, converged: bool) -> None:
    """Warnings for a cubature short of its tolerance and for a known density whose mass is off."""
    if not converged:
        warnings.warn(
            f"reference_w2 did not reach rtol = {cfg.rtol:g} within max_nodes = {cfg.max_nodes} (nodes "
            f"used: {box.res.nodes}); its error estimate w2_err says how far to trust it. Raise max_nodes "
            "or rtol.",
            UserWarning,
            stacklevel=3,
        )
    mass_tail = _tail_coefficient(d, box.sup) / 2.0 * math.atan(math.exp(-box.L))  # h <= 2 is not in it
    off = abs(box.mass - 1.0) > 10.0 * max(cfg.rtol, float(box.res.error[-1])) + mass_tail
    if rho.sup is not None and off:
        warnings.warn(
            f"reference_w2: rho0 = {rho.label} integrates to {box.mass:.6g} instead of 1 on the quadrature: "
            "the cubature missed part of it (a very concentrated density?); lower rtol",
            UserWarning,
            stacklevel=3,
        )


@dataclass(frozen=True)
class _Errors:
    """The error of W2^2 (T,) in its parts: the cubature's (the mass's error enters through the
    division), the box truncation bound, and the clocks' 2 |mu_1 - mu_d| delta_s W2^2; and their sum."""

    quadrature: np.ndarray
    truncation: np.ndarray
    clock: np.ndarray

    @property
    def total(self) -> np.ndarray:
        result: np.ndarray = self.quadrature + self.truncation + self.clock
        return result


def _errors(box: _Integral, lam: np.ndarray, clock_rtol: float, stats: _Tally) -> _Errors:
    quad = (box.res.error[:-1] + box.w2sq * box.res.error[-1]) / box.mass
    dtol = clock_rtol * max(stats.s_max, 1.0) + clock_rtol * 1e-2
    clock = 2.0 * float(lam[0] - lam[-1]) * dtol * box.w2sq
    return _Errors(quad, np.full_like(box.w2sq, box.tail), clock)


def _converged(box: _Integral, cfg: _Cubature) -> bool:
    """The cubature met rtol, and a grown box its truncation target."""
    grown_enough = cfg.L is not None or box.tail <= TAIL_SHARE * cfg.rtol * float(np.min(box.w2sq))
    return box.res.converged and grown_enough


def reference_w2(
    att: Attention,
    times: ArrayLike,
    rho0: str | Density = "uniform",
    *,
    mean: ArrayLike | None = None,
    kappa: float | None = None,
    rtol: float = 1e-6,
    L: float | None = None,
    clock_rtol: float = 1e-10,
    max_nodes: int = 400_000,
) -> ReferenceW2:
    """W2(rho_t, Pi_# rho_0) of the zero-temperature flow at N = infinity (att.beta is ignored).

    att: symmetric A = V B^T with a one-dimensional top eigenspace, invertible B, d = 2 or 3.
    times: (T,) non-decreasing, >= 0.  rho0: "uniform", "vmf" (with mean (d,) and kappa >= 0), or a
    callable f(X) -> (P,), a density w.r.t. the uniform probability on the sphere (it need not be
    normalised: the result is divided by its integral, info["mass"]).
    rtol: relative tolerance of the cubature on W2^2 at every time.  L: half-width of the box in the
    log coordinates v (None: grown until the truncation bound is below TAIL_SHARE * rtol * W2^2 at
    every time).  clock_rtol: tolerance of each node's clock ODE.  max_nodes: cubature nodes at most
    (the result says converged=False, and its error estimate stays honest, when they run out).
    Returns a ReferenceW2; w2_err bounds |error| under the stated estimates: the cubature's
    (coarse-rule) error, the box truncation bound (a bound for "uniform" and "vmf"; for a callable,
    sup f is taken over the nodes), and 2 |mu_1 - mu_d| delta_s W2^2 for the clocks (delta_s their
    estimated error, clock_rtol times the largest clock, plus the absolute tolerance).
    """
    att = check_attention(att)
    lam, U = _spectral_data(att)
    t = check_times(times)
    rtol = check_positive(rtol, "rtol")
    clock_rtol = check_positive(clock_rtol, "clock_rtol")
    max_nodes = int(check_positive(max_nodes, "max_nodes", integer=True))
    rho = _density(rho0, att.d, mean, kappa)
    cfg = _Cubature(rtol, max_nodes, None if L is None else check_positive(L, "L"))
    start = _time.perf_counter()
    stats = _Tally()
    box = _integrate_box(_integrand(att, lam, U, rho.f, t, clock_rtol, stats), att.d, rho, cfg, stats)
    converged = _converged(box, cfg)
    _warn(box, att.d, rho, cfg, converged)
    err = _errors(box, lam, clock_rtol, stats)
    w2sq_err = err.total
    w2 = np.sqrt(np.maximum(box.w2sq, 0.0))
    w2_err = w2 - np.sqrt(np.maximum(box.w2sq - w2sq_err, 0.0))  # the larger side of sqrt's bracket
    info = {
        "rho0": rho.label,
        "nodes": int(box.res.nodes),
        "tokens": int(stats.tokens),
        "cells": int(box.res.cells.lo.shape[0]),
        "L": float(box.L),
        "converged": bool(converged),
        "rtol": rtol,
        "clock_rtol": clock_rtol,
        "clock_nfev": int(stats.nfev),
        "mass": box.mass,
        "error_parts": {"quadrature": err.quadrature, "truncation": err.truncation, "clock": err.clock},
        "wall_time": _time.perf_counter() - start,
    }
    return ReferenceW2(times=t, w2=w2, w2_err=w2_err, w2sq=box.w2sq, w2sq_err=w2sq_err, info=info)
