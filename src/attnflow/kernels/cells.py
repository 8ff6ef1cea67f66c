"""Geometry of the cluster kernel (cluster/_kernel.py): the series, the cells, which cell pairs count and how.

Everything here is NumPy float64 on the CPU and computes no exponential of a key-query pair: it is
also what `kernel="auto"` runs to predict the cluster kernel's cost (`plan(...).counts()`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from . import costs as _costs

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

LEAF_MIN = 32  # cells are not cut below this many tokens
LEAF_MAX = 4096  # nor left above it (bounds the padded batches)
_SLACK = 1e-9  # relative widening of radii: rounding never drops a kept key
COUNTS = (  # the work counts of Plan.counts
    "tokens",
    "cells",
    "expanded_pairs",
    "moment_rows",
    "eval_rows",
    "direct_pairs",
    "direct_keys",
    "direct_cell_pairs",
    "kept_pairs",
    "order",
)
TOL_SHARE = 0.24  # tol_e = tol_d = TOL_SHARE tol: 2 (tol_e + tol_d) / ((1 - tol_e)(1 - tol_d)) <= tol


# ---------------------------------------------------------------- series


def series_error(rho: float, order: int) -> float:
    """Relative error bound of the Chebyshev interpolant of e^z on [-rho, rho], degree `order`:
    rho^{p+1} e^{2 rho} / (2^p (p+1)!)."""
    if rho <= 0:
        return 0.0
    p = order
    return math.exp((p + 1) * math.log(rho) + 2 * rho - p * math.log(2.0) - math.lgamma(p + 2))


@lru_cache(maxsize=64)
def series(order: int, tol_e: float) -> tuple[float, tuple[float, ...]]:
    """(rho_max, c): the largest rho with series_error(rho, order) <= tol_e (bisection) and the
    power-series coefficients c_0..c_p (in z) of the interpolant of e^z at the Chebyshev points of
    [-rho_max, rho_max]."""
    lo, hi = 0.0, 1.0
    while series_error(hi, order) <= tol_e:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if series_error(mid, order) <= tol_e else (lo, mid)
    rho = lo
    cheb = np.polynomial.chebyshev
    t = np.cos(np.pi * (np.arange(order + 1) + 0.5) / (order + 1))  # Chebyshev points of [-1, 1]
    a = cheb.cheb2poly(cheb.chebfit(t, np.exp(rho * t), order))  # power series in t = z / rho
    c = a / rho ** np.arange(order + 1)
    return rho, tuple(float(x) for x in c)


# ---------------------------------------------------------------- monomials


class Monomials:
    """Monomials y^a in d variables, graded order, up to a degree; within a degree, ordered by the
    largest variable they contain.

    So the monomials of degree k containing variables up to v only are the first C(k + v, v) of that
    degree, and those of degree k whose largest variable is v are y_v times the first C(k - 1 + v, v)
    of degree k - 1: `steps[k]` lists (first output index, number of inputs, v) for v = 0 .. d - 1.
    """

    def __init__(self, d: int, degree: int):
        self.d = d
        self.steps: dict[int, list[tuple[int, int, int]]] = {}
        lo, hi = 0, 1  # the previous degree's monomials are flat[lo:hi]
        flat = [np.zeros(d, dtype=np.int64)]
        for k in range(1, degree + 1):
            steps: list[tuple[int, int, int]] = []
            block: list[np.ndarray] = []
            for v in range(d):
                n_in = math.comb(k - 1 + v, v)
                steps.append((hi + len(block), n_in, v))
                for e in flat[lo : lo + n_in]:
                    f = e.copy()
                    f[v] += 1
                    block.append(f)
            self.steps[k] = steps
            flat.extend(block)
            lo, hi = hi, hi + len(block)
        self.exponents = np.array(flat)  # (n, d)
        self.index = {tuple(e): i for i, e in enumerate(self.exponents.tolist())}

    def count(self, degree: int) -> int:
        return math.comb(degree + self.d, self.d)

    def coefficients(self, c: Sequence[float]) -> np.ndarray:
        """c_|a| |a|! / a! for every monomial of degree <= len(c) - 1."""
        p = len(c) - 1
        e = self.exponents[: self.count(p)]
        k = e.sum(1)
        lf = np.array([math.lgamma(x + 1) for x in range(p + 1)])
        out: np.ndarray = np.asarray(c)[k] * np.exp(lf[k] - lf[e].sum(1))
        return out

    def shift(self, degree: int) -> np.ndarray:
        """(count(degree), d): index of a + e_l for every a of degree <= `degree` and variable l."""
        e = self.exponents[: self.count(degree)]
        out = np.empty((len(e), self.d), dtype=np.int64)
        for i, a in enumerate(e.tolist()):
            for v in range(self.d):
                b = list(a)
                b[v] += 1
                out[i, v] = self.index[tuple(b)]
        return out


@lru_cache(maxsize=32)
def monomials(d: int, degree: int) -> Monomials:
    return Monomials(d, degree)


# ---------------------------------------------------------------- cells


def ranges(first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of arange(first[k], first[k] + lens[k]) over k."""
    return np.repeat(first - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))


def boxes(P: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints and half-widths of the bounding boxes of P[first[k]:last[k]] (non-empty ranges in
    increasing, non-overlapping order): (n, d) each."""
    idx = np.empty(2 * len(first), dtype=np.int64)
    idx[0::2], idx[1::2] = first, last
    Pp = np.vstack([P, P[-1:]])  # reduceat needs every index < len: one padding row
    hi = np.maximum.reduceat(Pp, idx, axis=0)[0::2]
    lo = np.minimum.reduceat(Pp, idx, axis=0)[0::2]
    return 0.5 * (hi + lo), 0.5 * (hi - lo)


def radii(P: np.ndarray, starts: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """max |p - centres[k]| over the segment P[starts[k]:starts[k + 1]], for every k."""
    D = P - np.repeat(centres, np.diff(starts), axis=0)
    out: np.ndarray = np.maximum.reduceat(np.sqrt(np.einsum("ij,ij->i", D, D)), starts[:-1])
    return out


def z_bound(hb: np.ndarray, hx: np.ndarray) -> np.ndarray:
    """Bound on |delta . dy| for delta in a query cell's box of b_i and dy in a key cell's box of x_j
    (half-widths hb, hx around the box midpoints), elementwise over rows: sum_l hb_l hx_l."""
    out: np.ndarray = np.einsum("ij,ij->i", hb, hx)
    return out


def split_cells(
    tree: cKDTree, X: np.ndarray, b: np.ndarray, beta: float, rho_max: float, leaf_min: int, leaf_max: int
) -> tuple[np.ndarray, np.ndarray]:
    """Cells from the nodes of `tree` (a scipy cKDTree on X: sliding-midpoint cuts of the widest
    coordinate), top down: a node is cut while it holds more than leaf_max tokens, or more than
    leaf_min and beta z_bound > rho_max for itself as query and key cell (b: rows B^T x_i).  Tree
    leaves above leaf_max tokens (duplicate points) are cut into consecutive pieces.
    Returns (perm, starts): cell k holds the tokens perm[starts[k]:starts[k + 1]].
    """
    perm = tree.indices
    d = X.shape[1]
    Xb = np.hstack([X, b])[perm]
    frontier = [tree.tree]
    first: list[np.ndarray] = []
    last: list[np.ndarray] = []
    while frontier:
        st = np.fromiter((n.start_idx for n in frontier), dtype=np.int64, count=len(frontier))
        o = np.argsort(st)
        frontier, st = [frontier[k] for k in o], st[o]
        en = np.fromiter((n.end_idx for n in frontier), dtype=np.int64, count=len(frontier))
        _, half = boxes(Xb, st, en)
        leaf = np.fromiter((n.lesser is None for n in frontier), dtype=bool, count=len(frontier))
        sizes = en - st
        wide = beta * z_bound(half[:, d:], half[:, :d]) > rho_max
        cut = ~leaf & ((sizes > leaf_max) | ((sizes > leaf_min) & wide))
        first.append(st[~cut])
        last.append(en[~cut])
        frontier = [c for n, k in zip(frontier, cut, strict=True) if k for c in (n.lesser, n.greater)]
    st, en = np.concatenate(first), np.concatenate(last)
    o = np.argsort(st)
    st, en = st[o], en[o]
    pieces = np.maximum(1, -(-(en - st) // leaf_max))  # oversized leaves: consecutive pieces
    st = np.repeat(st, pieces) + ranges(np.zeros_like(pieces), pieces) * leaf_max
    return perm, np.append(st, X.shape[0])


# ---------------------------------------------------------------- the plan


@dataclass
class Plan:
    """Cells and cell pairs of one cloud.  Positions refer to the permuted order X[perm]."""

    perm: np.ndarray  # (N,)
    starts: np.ndarray  # (n_cells + 1,)
    centres: np.ndarray  # (n_cells, d): c_S, midpoint of the cell's box of x_j
    bcentres: np.ndarray  # (n_cells, d): b_T, midpoint of the cell's box of b_i = B^T x_i
    row_max: np.ndarray  # (N,) m_i = max_j beta b_i . x_j, original order
    h: float  # scale of the series variables
    order: int
    table: Monomials
    series_coefficients: tuple[float, ...]
    exp_T: np.ndarray  # expanded pairs (query cell, key cell), sorted by T then S
    exp_S: np.ndarray
    exp_by_T: np.ndarray  # (n_cells + 1,) offsets of each query cell's expanded pairs
    dir_T: np.ndarray  # directly evaluated pairs, sorted by T then S
    dir_S: np.ndarray
    dir_by_T: np.ndarray  # (n_cells + 1,) offsets of each query cell's direct pairs

    @property
    def n_cells(self) -> int:
        return len(self.starts) - 1

    def counts(self) -> dict[str, int]:
        """Work counts of the evaluation (what the cost model of auto.py prices)."""
        sizes = np.diff(self.starts)
        direct_pairs = int(np.dot(sizes[self.dir_T], sizes[self.dir_S]))
        return {
            "tokens": int(self.starts[-1]),
            "cells": self.n_cells,
            "expanded_pairs": len(self.exp_T),
            "moment_rows": int(sizes[self.exp_S].sum()),
            "eval_rows": int(sizes[self.exp_T].sum()),
            "direct_pairs": direct_pairs,
            "direct_keys": int(sizes[self.dir_S].sum()),  # keys gathered, once per query cell
            "direct_cell_pairs": len(self.dir_T),
            "kept_pairs": direct_pairs + int(np.dot(sizes[self.exp_T], sizes[self.exp_S])),
            "order": self.order if len(self.exp_T) else 0,  # series order p in use
        }


def _offsets(keys: np.ndarray, n: int) -> np.ndarray:
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=off[1:])
    return off


@dataclass(frozen=True)
class _Rows:
    """Per token, original order: b_i = B^T x_i, the lifted keys and queries, the tree on the lifted
    keys, the exact row maxima m_i and the kept radii r_keep (module docstring of cluster/_kernel.py)."""

    b: np.ndarray  # (N, d)
    Xa: np.ndarray  # (N, d + 1) keys lifted to one sphere of radius R
    ua: np.ndarray  # (N, d + 1) queries b_i / |b_i| lifted (0 where b_i = 0)
    R2: float  # R^2 = max |x_j|^2
    tree: object  # scipy cKDTree on Xa
    row_max: np.ndarray  # (N,)
    r_keep: np.ndarray  # (N,)


def _rows(X: np.ndarray, w: np.ndarray, B: np.ndarray, beta: float, tol_d: float, threads: int) -> _Rows:
    """Nearest lifted key of every query (the row maximum) and its kept radius."""
    from scipy.spatial import cKDTree

    b = X @ B  # rows b_i = B^T x_i
    bnorm = np.linalg.norm(b, axis=1)
    u = b / np.where(bnorm > 0, bnorm, 1.0)[:, None]
    u[bnorm == 0] = 0.0  # these rows keep every key (reach inf)
    # keys lifted to one sphere: x~_j = (x_j, sqrt(R^2 - |x_j|^2)), R = max |x_j|, queries u~_i = (u_i, 0):
    # |u~_i - x~_j|^2 = 1 + R^2 - 2 <u_i, x_j>, so the nearest lifted key maximises the score even for
    # the off-sphere states of a Runge-Kutta stage (R = 1 and no lift on the sphere)
    norm2 = np.einsum("ij,ij->i", X, X)
    R2 = float(norm2.max())
    Xa = np.hstack([X, np.sqrt(np.maximum(R2 - norm2, 0.0))[:, None]])
    ua = np.hstack([u, np.zeros((len(u), 1))])
    tree = cKDTree(Xa, leafsize=16, balanced_tree=False, compact_nodes=False)
    dmin, jstar = tree.query(ua, k=1, workers=threads)
    row_max = beta * np.einsum("ij,ij->i", b, X[jstar])
    cutoff = np.log(1.0 / (w[jstar] * tol_d))
    with np.errstate(divide="ignore"):
        r_keep = np.sqrt(dmin * dmin + 2.0 * cutoff / (beta * bnorm)) * (1 + _SLACK) + _SLACK
    return _Rows(b, Xa, ua, R2, tree, row_max, r_keep)


@dataclass(frozen=True)
class _Cells:
    """The cells' geometry: sizes, boxes of x_j (centres, half-widths hx) and of b_i (bcentres, hb),
    the lifted keys' centres and radii, the query directions' centres and reaches R_T."""

    sizes: np.ndarray
    centres: np.ndarray
    hx: np.ndarray
    bcentres: np.ndarray
    hb: np.ndarray
    acentres: np.ndarray
    r: np.ndarray
    ucentres: np.ndarray
    reach: np.ndarray


def _cell_geometry(X: np.ndarray, rows: _Rows, perm: np.ndarray, starts: np.ndarray) -> _Cells:
    sizes = np.diff(starts)
    Xp, up, Xap = X[perm], rows.ua[perm], rows.Xa[perm]
    centres, hx = boxes(Xp, starts[:-1], starts[1:])
    bcentres, hb = boxes(rows.b[perm], starts[:-1], starts[1:])
    acentres, _ = boxes(Xap, starts[:-1], starts[1:])
    r = radii(Xap, starts, acentres)  # of the lifted keys
    ucentres = np.add.reduceat(up, starts[:-1], axis=0) / sizes[:, None]
    reach = radii(up, starts, ucentres) + np.maximum.reduceat(rows.r_keep[perm], starts[:-1])  # R_T
    r, hx, hb = (a * (1 + _SLACK) + _SLACK for a in (r, hx, hb))
    return _Cells(sizes, centres, hx, bcentres, hb, acentres, r, ucentres, reach)


RADIUS_CLASSES = 4  # key cells are searched in this many classes of radius (powers of 4 apart)


def _cell_pairs(c: _Cells, R2: float, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(T, S): the cell pairs with a key of S possibly kept for a query of T, |u~_T - c~_S| <= R_T + r~_S.

    Key cells are searched by classes of radius r~_S (each class in its own tree, with its largest
    radius), so that a few wide cells do not widen every query cell's search."""
    from scipy.spatial import cKDTree

    n_cells = len(c.sizes)
    rmax = float(c.r.max())
    everything = c.reach + rmax >= 1.0 + math.sqrt(R2)  # the ball holds every lifted key
    Ts = [np.repeat(np.flatnonzero(everything), n_cells)]
    Ss = [np.tile(np.arange(n_cells), int(everything.sum()))]
    todo = np.flatnonzero(~everything)
    level = np.minimum(
        np.floor(np.log(np.maximum(rmax / np.maximum(c.r, 1e-300), 1.0)) / np.log(4.0)), RADIUS_CLASSES - 1
    )
    for cls in np.unique(level) if todo.size else []:
        members = np.flatnonzero(level == cls)
        found = cKDTree(c.acentres[members]).query_ball_point(
            c.ucentres[todo], c.reach[todo] + float(c.r[members].max()), workers=threads, return_sorted=False
        )
        lens = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
        Ts.append(np.repeat(todo, lens))
        Ss.append(members[np.fromiter(chain.from_iterable(found), dtype=np.int64, count=int(lens.sum()))])
    T, S = np.concatenate(Ts), np.concatenate(Ss)
    ok = np.linalg.norm(c.ucentres[T] - c.acentres[S], axis=1) <= c.reach[T] + c.r[S]
    return T[ok], S[ok]


def _expand(
    c: _Cells, T: np.ndarray, S: np.ndarray, beta: float, order: int, tol_e: float, costs: dict[str, float]
) -> tuple[np.ndarray, int]:
    """Which cell pairs (T, S) are expanded (their series holds and costs less than their direct sums),
    and the lowest series order whose radius covers the expanded pairs (the cells come in halvings:
    it may be below `order`)."""
    d = c.centres.shape[1]
    rho_max = series(order, tol_e)[0]
    P, P1 = math.comb(order + d, d), math.comb(order + 1 + d, d)
    nT, nS = c.sizes[T].astype(float), c.sizes[S].astype(float)
    valid = beta * z_bound(c.hb[T], c.hx[S]) <= rho_max
    series_cost = costs["series"] * (P1 * nS + P * (d + 1) * nT) + costs["expanded_pair"]
    direct_cost = (
        costs["direct_pair"] * nT * nS + costs.get("direct_key", 0.0) * nS + costs["direct_cell_pair"]
    )
    expand = valid & (series_cost < direct_cost)
    rho_used = float(beta * z_bound(c.hb[T[expand]], c.hx[S[expand]]).max()) if expand.any() else 0.0
    used = next((q for q in range(1, order) if series(q, tol_e)[0] >= rho_used), order)
    return expand, used


def plan(
    X: np.ndarray,
    w: np.ndarray,
    B: np.ndarray,
    beta: float,
    tol: float,
    order: int,
    leaf_min: int = LEAF_MIN,
    leaf_max: int = LEAF_MAX,
    threads: int = 1,
    costs: dict[str, float] | None = None,
) -> Plan:
    """Cells, row maxima and the cell pairs of the cloud X (N, d) with weights w (N,) (module
    docstring of cluster/_kernel.py for the bound).  costs: seconds per "direct_pair" (key-query pair),
    "direct_key" (key gathered per query cell), "direct_cell_pair", "series" (row, monomial and
    output of the moments and the evaluation) and "expanded_pair" (default: the compiled cluster
    kernel's shipped constants, costs.defaults()): a cell pair is expanded where its series is valid and
    cheaper than its direct sums.
    """
    if costs is None:
        costs = _costs.defaults()["cluster"]["compiled"]
    tol_e = TOL_SHARE * tol
    rows = _rows(X, w, B, beta, TOL_SHARE * tol, threads)
    perm, starts = split_cells(rows.tree, X, rows.b, beta, series(order, tol_e)[0], leaf_min, leaf_max)
    c = _cell_geometry(X, rows, perm, starts)
    T, S = _cell_pairs(c, rows.R2, threads)
    expand, order = _expand(c, T, S, beta, order, tol_e, costs)
    o = np.lexsort((S, T))
    T, S, expand = T[o], S[o], expand[o]
    eT, eS, dT, dS = T[expand], S[expand], T[~expand], S[~expand]
    rho_max, coef = series(order, tol_e)
    n_cells = len(starts) - 1
    return Plan(
        perm=perm,
        starts=starts,
        centres=c.centres,
        bcentres=c.bcentres,
        row_max=rows.row_max,
        h=math.sqrt(rho_max / (beta * max(float(np.linalg.norm(B, 2)), 1e-300))),
        order=order,
        table=monomials(X.shape[1], order + 1),
        series_coefficients=coef,
        exp_T=eT,
        exp_S=eS,
        exp_by_T=_offsets(eT, n_cells),
        dir_T=dT,
        dir_S=dS,
        dir_by_T=_offsets(dT, n_cells),
    )
