"""The geometry of the truncated kernel (`_kernel`): cells of queries and the balls of keys they need.

The kept radius r_i of each row, the cells of nearby directions u_i (median cuts), each cell's
centre and ball radius (`Geometry`, made per cloud by `cloud_geometry` and kept for the kernel,
reuse.py), the checked settings, and what the kernel would cost (`candidate_counts`, the ball
counts without an exponential, and `sampled_counts`, their estimate from a sampled plan, for
`kernel="auto"`, whose trees on the keys are kept for the kernel too, `trees`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np
import torch

from ..._checks import check_positive
from .. import reuse
from ..common import batched, finite_beta, log_weights
from . import _moves
from ._moves import MARGIN

if TYPE_CHECKING:
    from typing import Unpack

    from scipy.spatial import cKDTree

    from ...attention import Attention
    from ..common import Stats

DEFAULT_CUTOFF = 45.0  # N e^{-45} <= 1e-12 for N <= 3.4e7
LEAF = 256  # most queries per cell
LEAF_MIN = 32  # cells are not cut below this many queries
CELL_RATIO = 0.5  # cells are cut while their radius exceeds this times the kept radius r_i
_SLACK = 1e-9  # relative widening of the radii: rounding never drops the nearest key

Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]  # cells (indices), their flat candidate keys, offsets


def workers() -> int:
    """SciPy's tree queries get torch's intra-op thread count, the run's thread policy (_threads.py):
    `workers=-1` started a pool of every core at each query, threads a one-thread run had not asked
    for, and 0.7 ms per truncated call at N = 4096 on a quiet machine (more under load;
    docs/benchmarks.md, "Choosing the kernel")."""
    return torch.get_num_threads()


def kept_radius(dmin: np.ndarray, bnorm: np.ndarray, beta: float, cutoff: float | np.ndarray) -> np.ndarray:
    """Chordal radius r_i around u_i that holds every key with beta |b_i| (<u_i, x_j> - c_i) > -cutoff.

    dmin (n,): distance from u_i to its nearest key; bnorm (n,): |b_i|; cutoff: a float or (n,) per
    row (cutoff + L_i with weights).  Returns (n,) radii; inf where b_i = 0 (all keys tie).
    """
    with np.errstate(divide="ignore"):
        r2 = dmin * dmin + 2.0 * cutoff / (beta * bnorm)
    r: np.ndarray = np.sqrt(r2) * (1.0 + _SLACK) + _SLACK
    return r


def _cells(
    u: np.ndarray, r: np.ndarray, leaf: int, leaf_min: int, ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """Group the directions u (n, d) by median cuts along each group's widest coordinate.

    A group is cut in two while it has more than `leaf` rows, or more than `leaf_min` rows and a
    radius (around its centroid) above `ratio` times the smallest kept radius r_i of its rows.  All
    groups of one level are cut together (one sort).  Returns (perm, starts): group k holds the rows
    perm[starts[k]:starts[k + 1]].
    """
    n = u.shape[0]
    done_perm, done_sizes = [], []
    perm = np.arange(n)
    sizes = np.array([n])
    while perm.size:
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        seg = np.repeat(np.arange(sizes.size), sizes)
        P = u[perm]
        cut = sizes > leaf
        test = ~cut & (sizes > leaf_min)  # groups whose radius decides
        if test.any():
            rows = test[seg]
            Pt, st = P[rows], np.concatenate([[0], np.cumsum(sizes[test])[:-1]])
            segt = np.repeat(np.arange(st.size), sizes[test])
            centre = np.add.reduceat(Pt, st, axis=0) / sizes[test][:, None]
            rho = np.maximum.reduceat(np.linalg.norm(Pt - centre[segt], axis=1), st)
            cut[test] = rho > ratio * np.minimum.reduceat(r[perm[rows]], st)
        keep = ~cut[seg]
        done_perm.append(perm[keep])
        done_sizes.append(sizes[~cut])
        if not cut.any():
            break
        perm, P, sizes = perm[~keep], P[~keep], sizes[cut]
        seg = np.repeat(np.arange(sizes.size), sizes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        extent = np.maximum.reduceat(P, starts, axis=0) - np.minimum.reduceat(P, starts, axis=0)
        coord = P[np.arange(P.shape[0]), np.argmax(extent, axis=1)[seg]]  # in [-1, 1]
        perm = perm[np.argsort(seg * 4.0 + coord)]
        sizes = np.stack([sizes // 2, sizes - sizes // 2], axis=1).ravel()
    perm = np.concatenate(done_perm)
    starts = np.zeros(sum(s.size for s in done_sizes) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(done_sizes), out=starts[1:])
    return perm, starts


def _geometry(
    Xn: np.ndarray,
    b: np.ndarray,
    beta: float,
    cutoff: float,
    leaf: int,
    leaf_min: int,
    ratio: float,
    logw: np.ndarray | None = None,
    queries: np.ndarray | None = None,
    tree: cKDTree | None = None,
    margin: float = 0.0,
) -> tuple[cKDTree, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float | np.ndarray]:
    """Cells of queries and their ball radii for keys Xn (N, d) and b (n, d) rows b_i = B^T x_i of
    the queries x_i: `queries` (n, d), by default every key (n = N).

    logw: (N,) log-weights of the keys, or None (uniform): each row's cutoff is widened by
    L_i = max(0, -log(N w_{n_i})), n_i its nearest key (module docstring, "Error bound").
    tree: the cKDTree on Xn when made already (`trees`).  margin: each ball radius is widened by
    this fraction, so that the geometry still holds for moved states (`holds`).
    Returns (tree on the keys, perm, starts, centres (n_cells, d), radii (n_cells,), nearest (n,),
    row cutoffs (n,) or a float): cell k holds the queries perm[starts[k]:starts[k + 1]] and needs
    every key within radii[k] of centres[k]; n_i = nearest[i]; cutoff + L_i the row cutoffs.
    """
    d = Xn.shape[1]
    bnorm = np.linalg.norm(b, axis=1)
    u = b / np.where(bnorm > 0, bnorm, 1.0)[:, None]
    fallback = Xn if queries is None else queries
    u[bnorm == 0] = fallback[bnorm == 0]  # any unit vector: these rows keep every key anyway
    tree = _tree(Xn) if tree is None else tree
    dmin, nearest = tree.query(u, k=1, workers=workers())
    row_cutoff: float | np.ndarray = cutoff
    if logw is not None:  # L_i = max(0, -log(N w_{n_i}))
        row_cutoff = cutoff + np.maximum(0.0, -(math.log(Xn.shape[0]) + logw[nearest]))
    r = kept_radius(dmin, bnorm, beta, row_cutoff)

    perm, starts = _cells(u, np.minimum(r, 2.0), leaf, leaf_min, ratio)
    sizes = np.diff(starts)
    n_cells = sizes.size
    which = np.repeat(np.arange(n_cells), sizes)
    centres = np.zeros((n_cells, d))
    np.add.at(centres, which, u[perm])
    centres /= sizes[:, None]
    rho = np.zeros(n_cells)
    np.maximum.at(rho, which, np.linalg.norm(u[perm] - centres[which], axis=1))
    rmax = np.zeros(n_cells)
    np.maximum.at(rmax, which, r[perm])
    return tree, perm, starts, centres, (rho + rmax) * (1.0 + margin), nearest, row_cutoff


_TREES = ("trees",)  # the reuse key of the trees on a tensor's keys


def _tree(Xn: np.ndarray) -> cKDTree:
    """The cKDTree on the keys Xn (N, d) that the kernel queries."""
    from scipy.spatial import cKDTree

    return cKDTree(Xn, leafsize=16, balanced_tree=False, compact_nodes=False)


def trees(X: torch.Tensor) -> list[cKDTree]:
    """The cKDTree on the keys of each cloud of X (M, N, d), kept for the next call on the same,
    unmodified tensor (reuse.py): a sampled plan makes them, the kernel's plan then takes them."""
    found = kept_trees(X)
    if found is None:
        found = [_tree(_numpy64(Xm)) for Xm in batched(X, "X")]
        reuse.put((X,), _TREES, found)
    return found


def kept_trees(X: object) -> list[cKDTree] | None:
    """The trees of `trees` kept for this very tensor X (unmodified since), else None."""
    return cast("list[cKDTree] | None", reuse.get((X,), _TREES)) if isinstance(X, torch.Tensor) else None


def _numpy64(T: torch.Tensor) -> np.ndarray:
    return T.detach().to("cpu", torch.float64).numpy()


def _settings(cutoff: float, leaf: int, leaf_min: int, ratio: float) -> tuple[float, int, int, float]:
    """The kernel's settings, checked: cutoff > 0, leaf >= 1, leaf_min in [1, leaf], ratio > 0."""
    cutoff = check_positive(cutoff, "cutoff")
    leaf = int(check_positive(leaf, "leaf", integer=True))
    leaf_min = min(leaf, int(check_positive(leaf_min, "leaf_min", integer=True)))
    return cutoff, leaf, leaf_min, check_positive(ratio, "ratio")


@dataclass(frozen=True)
class Geometry:
    """One cloud's cells of queries (`_geometry`): cell k holds the queries perm[starts[k]:starts[k + 1]]
    and needs every key within radii[k] of centres[k]; tree: the cKDTree on the keys (its data: the
    keys as they were).  For `holds`: nearest (N,), each query's nearest key then; cutoffs, its row
    cutoff cutoff + L_i (a float for uniform weights); logw, the keys' log-weights (None: uniform);
    beta; chunks: the cells' candidate keys as the kernel gathered them (_kernel.py), kept with a
    geometry kept for moved states (kept = True): the same balls give the same keys."""

    tree: cKDTree
    perm: np.ndarray
    starts: np.ndarray
    centres: np.ndarray
    radii: np.ndarray
    nearest: np.ndarray | None = None
    cutoffs: float | np.ndarray | None = None
    logw: np.ndarray | None = None
    beta: float = math.nan
    chunks: list[Chunk] = field(default_factory=list, compare=False)  # the kernel's ball queries, when kept
    kept: bool = False  # kept for moved states: the kernel keeps its ball queries in `chunks`


def holds(g: Geometry, Xn: np.ndarray, B: np.ndarray, beta: float, logw: np.ndarray | None) -> bool:
    """Whether the geometry g, made for the keys g.tree.data, still gives every query of the moved
    cloud Xn (N, d) every key the kernel must keep (module docstring of _moves, "Why the
    check suffices"): for each cell k with radii[k] < 2,

        max_{i in k} (|u'_i - z_k| + r'_i) + delta <= radii[k],
        r'_i^2 = |u'_i - x'_{n_i}|^2 + 2 (cutoff + L_i) / (beta |b'_i|),   delta = max_j |x'_j - x_j|,

    u'_i, b'_i of the moved tokens x', n_i the query's nearest key when g was made.  O(N d)."""
    if g.nearest is None or g.beta != beta or Xn.shape != g.tree.data.shape:
        return False
    if logw is None or g.logw is None:
        if logw is not g.logw:
            return False
    elif not np.array_equal(logw, g.logw):
        return False
    delta = float(np.sqrt(np.max(np.sum((Xn - g.tree.data) ** 2, axis=1))))
    b = Xn @ B
    bnorm = np.linalg.norm(b, axis=1)
    u = b / np.where(bnorm > 0, bnorm, 1.0)[:, None]
    assert g.cutoffs is not None  # made with its nearest keys (`_geometry`)
    r = kept_radius(np.linalg.norm(u - Xn[g.nearest], axis=1), bnorm, beta, g.cutoffs)
    sizes = np.diff(g.starts)
    which = np.repeat(np.arange(sizes.size), sizes)
    need = np.linalg.norm(u[g.perm] - g.centres[which], axis=1) + r[g.perm]
    worst = np.maximum.reduceat(need, g.starts[:-1]) + delta
    return bool(np.all((worst <= g.radii) | (g.radii >= 2.0)))


def cloud_geometry(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    cutoff: float = DEFAULT_CUTOFF,
    leaf: int = LEAF,
    leaf_min: int = LEAF_MIN,
    ratio: float = CELL_RATIO,
    margin: float | None = MARGIN,
    stats: Stats | None = None,
) -> list[Geometry]:
    """The geometry of every cloud of X (M, N, d) (or (N, d)), as `velocity_truncated` makes it (in
    float64 whatever X's dtype); kept for the next call on the same, unmodified tensors (reuse.py):
    `kernel="auto"` prices the kernel by it and the kernel then takes it.  margin: ball radii widened
    by this fraction and the geometry kept for moved states while `holds` (_moves.py);
    None: neither (a new geometry at every call).  stats: a dict to count "geometry_built" and
    "geometry_kept" clouds."""
    cutoff, leaf, leaf_min, ratio = _settings(cutoff, leaf, leaf_min, ratio)
    if margin is not None and not (isinstance(margin, (int, float)) and 0 <= margin < math.inf):
        raise ValueError(f"margin must be a finite number >= 0 or None, got {margin!r}")
    X3 = batched(X, "X")
    M, N, d = X3.shape
    cloud_betas = _cloud_betas(att, betas, M)
    tensors = tuple(t if isinstance(t, torch.Tensor) else None for t in (X, weights, betas))
    key = ("truncated", att.B.tobytes(), tuple(cloud_betas), cutoff, leaf, leaf_min, ratio, margin)
    cacheable = all(t is None or isinstance(t, torch.Tensor) for t in (weights, betas))
    found = cast("list[Geometry] | None", reuse.get(tensors, key) if cacheable else None)
    if found is not None:
        return found
    logw = log_weights(weights, M, N, X3.to(torch.float64))
    B = np.asarray(att.B, dtype=float)
    kept = kept_trees(X)
    moved = None if margin is None else cast("list[Geometry] | None", _moves.get((*key, M, N, d)))
    out: list[Geometry] = []
    counts = {"geometry_built": 0, "geometry_kept": 0}
    for m in range(M):
        Xn = _numpy64(X3[m])
        lw = None if logw is None else _numpy64(logw[m])
        if moved is not None and holds(moved[m], Xn, B, cloud_betas[m], lw):
            out.append(moved[m])
            counts["geometry_kept"] += 1
            continue
        tree = None if kept is None else kept[m]
        parts = _geometry(
            Xn, Xn @ B, cloud_betas[m], cutoff, leaf, leaf_min, ratio, lw, tree=tree, margin=margin or 0.0
        )
        tree, perm, starts, centres, radii, nearest, cutoffs = parts
        g = Geometry(
            tree, perm, starts, centres, radii, nearest, cutoffs, lw, cloud_betas[m], kept=margin is not None
        )
        out.append(g)
        counts["geometry_built"] += 1
    if margin is not None:
        _moves.put((*key, M, N, d), out)
    if cacheable:
        reuse.put(tensors, key, out)
    if stats is not None:
        for k, v in counts.items():
            stats[k] = stats.get(k, 0) + v
    return out


class Options(TypedDict, total=False):
    """The keyword arguments of `cloud_geometry` that `candidate_counts` passes on."""

    betas: torch.Tensor | None
    weights: torch.Tensor | None
    cutoff: float
    leaf: int
    leaf_min: int
    ratio: float
    margin: float | None
    stats: Stats | None


def candidate_counts(X: torch.Tensor, att: Attention, **kwargs: Unpack[Options]) -> dict[str, int]:
    """What `velocity_truncated` would do on X (M, N, d), summed over the clouds: "pairs" (key-query
    pairs, before padding; M N^2 for a dense kernel), "keys" (candidate keys gathered, once per
    cell), "cells".  Costs the kernel's geometry (tree, nearest neighbours, cells; kept for the kernel,
    `cloud_geometry`) and the ball counts, without an exponential.  kwargs: betas, weights and the
    settings of `velocity_truncated`."""
    pairs = keys = cells = 0
    for g in cloud_geometry(X, att, **kwargs):
        counts = _ball_counts(g)
        pairs += int(np.dot(counts, np.diff(g.starts)))
        keys += int(counts.sum())
        cells += g.radii.size
    return {"pairs": pairs, "keys": keys, "cells": cells}


def _ball_counts(g: Geometry) -> np.ndarray:
    """The number of keys in each cell's ball (every key where the radius covers the sphere)."""
    counts = np.full(g.radii.size, g.tree.n, dtype=np.int64)
    small = g.radii < 2.0
    if small.any():
        counts[small] = g.tree.query_ball_point(
            g.centres[small], g.radii[small], workers=workers(), return_length=True
        )
    return counts


def sample_size(N: int) -> int:
    """The queries of `sampled_counts` for N tokens: N / 16 within [1024, 4096] (at most N)."""
    return min(N, max(1024, min(4096, N // 16)))


def sampled_counts(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    n: int | None = None,
    seed: int = 0,
    cutoff: float = DEFAULT_CUTOFF,
    leaf: int = LEAF,
    leaf_min: int = LEAF_MIN,
    ratio: float = CELL_RATIO,
    margin: float | None = MARGIN,
) -> dict[str, float]:
    """`candidate_counts` estimated from the plan of n queries (default `sample_size(N)`) drawn with
    `seed` (each standing for N / n) against every key: their kept radii exactly, cells of them cut
    at leaf n / N and leaf_min n / N rows, and each cell's ball counted among all N keys; pairs
    scaled by N / n.  On the benchmark's states (N = 8192 to 65536, beta = 30 to 1e4;
    benchmarks/sampled_plan.py) it took 0.15 to 0.62 of the plan's time (median 0.24), and the
    predicted cost came within 0.76 to 1.09 of the plan's (the pairs 0.03 to 3.2: they are off
    where they are few, and then cost less than the tokens).  The trees on the keys are kept for the
    kernel (`trees`); its plan it makes itself, when picked.  margin: the kernel's (`cloud_geometry`)."""
    cutoff, leaf, leaf_min, ratio = _settings(cutoff, leaf, leaf_min, ratio)
    X3 = batched(X, "X")
    M, N, _ = X3.shape
    cloud_betas = _cloud_betas(att, betas, M)
    logw = log_weights(weights, M, N, X3.to(torch.float64))
    B = np.asarray(att.B, dtype=float)
    n = sample_size(N) if n is None else min(N, int(check_positive(n, "n", integer=True)))
    scale = n / N
    rng = np.random.default_rng(seed)
    kd: list[cKDTree | None] = trees(X) if isinstance(X, torch.Tensor) else [None] * M
    pairs = keys = cells = 0.0
    for m in range(M):
        Xn = _numpy64(X3[m])
        lw = None if logw is None else _numpy64(logw[m])
        xq = Xn[np.sort(rng.choice(N, size=n, replace=False))]
        g = Geometry(
            *_geometry(
                Xn,
                xq @ B,
                cloud_betas[m],
                cutoff,
                max(1, round(leaf * scale)),
                max(1, round(leaf_min * scale)),
                ratio,
                lw,
                queries=xq,
                tree=kd[m],
                margin=margin or 0.0,
            )
        )
        counts = _ball_counts(g)
        pairs += float(np.dot(counts, np.diff(g.starts))) / scale
        keys += float(counts.sum())
        cells += g.radii.size
    return {"pairs": pairs, "keys": keys, "cells": cells}


def candidate_pairs(X: torch.Tensor, att: Attention, **kwargs: Unpack[Options]) -> int:
    """Number of key-query pairs `velocity_truncated` would evaluate on X (M, N, d), summed over the
    M clouds (before padding): `candidate_counts(X, att, **kwargs)["pairs"]`."""
    return candidate_counts(X, att, **kwargs)["pairs"]


def _cloud_betas(att: Attention, betas: torch.Tensor | None, M: int) -> list[float]:
    """The inverse temperature of each of the M clouds: betas (M,) when given, else att.beta (finite)."""
    finite_beta(att, "truncated", betas)
    if betas is None:
        return [float(att.beta)] * M
    values = torch.as_tensor(betas).reshape(-1).tolist()
    if len(values) != M:
        raise ValueError(f"betas has {len(values)} entries for a batch of {M} clouds")
    return [float(b) for b in values]
