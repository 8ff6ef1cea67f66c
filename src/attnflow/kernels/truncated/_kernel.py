"""Low-temperature velocity kernel: each query sees only the keys near its row maximum.

    v_i = P_{x_i}^perp ( sum_j w_ij V x_j ),   w_ij ∝ w_j exp( beta <b_i, x_j> ),   b_i = B^T x_i

with quadrature weights w_j > 0 (uniform, w_j = 1/N, when not given; MATH.md, "Weighted measures").
Write b_i = |b_i| u_i with u_i a unit vector, c_i = max_j <u_i, x_j> and n_i the key attaining it.
The kernel keeps every key with

    beta |b_i| (<u_i, x_j> - c_i) > -(cutoff + L_i),   L_i = max(0, log(1 / (N w_{n_i}))),

and these lie within chordal distance r_i of u_i (keys are unit vectors, |u - x|^2 = 2 - 2 <u, x>):

    r_i^2 = dmin_i^2 + 2 (cutoff + L_i) / (beta |b_i|),   dmin_i = min_j |u_i - x_j| = sqrt(2 (1 - c_i)).

dmin_i and n_i come from an exact nearest-neighbour query (scipy cKDTree on the keys), so the largest
unweighted score is exact (the nearest key is always among the candidates).  Queries are grouped into
cells of nearby directions u_i (median cuts, all cells of a level at once, until a cell is narrower
than CELL_RATIO times its r_i or holds LEAF_MIN queries); a cell of radius rho around its centre z
gathers every key within rho + max r_i of z (triangle inequality) by one ball query, and cells of
equal query count and similar key count are evaluated together as one padded batch by torch's fused,
max-subtracted `scaled_dot_product_attention` (padding keys masked; the weights enter as one extra
coordinate, queries (b_i, 1), keys (x_j, log(w_j) / beta), as in the dense kernel).  No Python loop
runs over queries.

Error bound.  Let s_i = beta |b_i| c_i.  Every dropped key has w_j e^{beta <b_i, x_j>} <=
w_j e^{s_i - cutoff - L_i}, so the dropped mass is D_i <= e^{s_i - cutoff - L_i} sum_j w_j
<= e^{s_i - cutoff - L_i}, while the row sum is Z_i >= w_{n_i} e^{s_i}.  Hence D_i / Z_i <=
e^{-cutoff - L_i} / w_{n_i} <= N e^{-cutoff}: the same bound as for uniform weights (L_i = 0 there),
and the velocity before the tangent projection is off by at most 2 ||V|| N e^{-cutoff}.  A nearest key
of small weight widens the kept radius (L_i > 0: a heavier key farther away may dominate); L_i is at
most log(w_max / w_min).  The default cutoff 45 makes N e^{-cutoff} <= 1e-12 for N <= 3.4e7 tokens.
Keys inside the ball but beyond r_i are kept too, which only makes the result more accurate.

Rows with beta |b_i| so small that r_i >= 2 (high temperature, or B^T x_i = 0) keep every key; then the
kernel does dense work with extra overhead, which is why `kernel="auto"` picks a dense kernel there.
float32 inputs: the geometry is computed in float64, the scores in float32 (error about beta ||B|| 1e-7,
as for the dense kernels; on the compiled path by the fused core's float32 twin, fused.py).
Memory: O(N d) for the geometry, the keys gathered for one batch of cells (at most BLOCK_ELEMENTS /
queries-per-cell rows) and at most about BALL_CHUNK candidate indices.

On a GPU the geometry (tree, nearest neighbours, cells, ball queries) runs on the CPU in float64 and
the fused softmax calls, where the exponentials are, run on the tensors' device.

Here: the gathering of each cell's candidate keys and the evaluation of the cells.  The geometry
(kept radii, cells, balls, `cloud_geometry`) and the candidate counts live in `_geometry`; the
public names are importable from the package (`attnflow.kernels.truncated`).  The geometry, with
the candidate keys gathered for it, is kept across the stages and steps of a run while the tokens
move less than its margin (`_moves`: balls widened by MARGIN, an exact check at every state, the
same field).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..._threads import intra_op_threads as _threads
from .. import compiled
from ..cells import ranges
from ..common import batched, log_weights, matrices_like, tangent
from ..fused import F32_SCORE_MAX, LOG2E, MAX_D
from ._geometry import (
    CELL_RATIO,
    DEFAULT_CUTOFF,
    LEAF,
    LEAF_MIN,
    Chunk,
    Geometry,
    _cloud_betas,
    _settings,
    cloud_geometry,
)
from ._moves import MARGIN

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

    from ...attention import Attention
    from ..common import Stats

BLOCK_ELEMENTS = 2**23  # key-query pairs per fused call on a batch of cells
# fused calls with fewer pairs run on one thread: many small parallel regions cost more than they
# gain (measured: 5-10x slower on a busy 2-core machine); larger calls use all of torch's threads
PARALLEL_PAIRS = 2**22
PAD_RATIO = 1.25  # cells batched together differ in key count by at most this factor
BALL_CHUNK = 2**21  # about this many (cell, key) pairs per ball query call
KEPT_KEYS = 2**21  # most candidate keys kept with a geometry kept for moved states (16 MiB)


def _candidates(
    tree: cKDTree, centres: np.ndarray, radii: np.ndarray, n_keys: int, threads: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Ball query of every cell: (flat key indices, offsets) with offsets of length n_cells + 1.

    A radius >= 2 covers the whole sphere: such cells get all keys without a tree search.
    """
    everything = radii >= 2.0
    lists: list[Sequence[int]] = [()] * len(radii)  # every entry is set below
    todo = np.flatnonzero(~everything)
    if todo.size:
        found = tree.query_ball_point(centres[todo], radii[todo], workers=threads, return_sorted=False)
        for k, lst in zip(todo, found, strict=True):
            lists[k] = lst
    all_keys = range(n_keys)
    for k in np.flatnonzero(everything):
        lists[k] = all_keys
    lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    flat = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return flat, offsets


def _sdpa(
    q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor | None, beta: float
) -> torch.Tensor:
    """Softmax averages of a padded batch: q (G, L, e), keys (G, K, e), vals (G, K, d) -> (G, L, d).

    mask (G, K) True on the real keys (False on padding), or None.  Fused max-subtracted softmax.
    e = d, or d + 1 with the weights' coordinate.
    """
    F = torch.nn.functional
    m = None if mask is None else mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q[:, None], keys[:, None], vals[:, None], attn_mask=m, scale=beta)
    return out[:, 0]


def _chunks_of_cells(
    tree: cKDTree, centres: np.ndarray, radii: np.ndarray, N: int, d: int, threads: int = 1
) -> Iterator[Chunk]:
    """The cells in chunks with their candidate keys: yields (chunk, flat, offsets) (`_candidates`).

    Ball queries in chunks of cells, so the Python index lists stay bounded: key counts are estimated
    for a uniform cloud, then corrected by the counts seen so far (clusters hold more)."""
    n_cells = radii.size
    order = np.argsort(radii, kind="stable")
    est = N * np.minimum(1.0, (radii**2 / 4.0) ** ((d - 1) / 2.0)) + 1.0
    factor, start = 1.0, 0
    while start < n_cells:
        stop, acc = start, 0.0
        while stop < n_cells and (stop == start or acc + min(N, factor * est[order[stop]]) <= BALL_CHUNK):
            acc += min(N, factor * est[order[stop]])
            stop += 1
        chunk = order[start:stop]
        flat, offsets = _candidates(tree, centres[chunk], radii[chunk], N, threads)
        factor = max(factor, flat.size / est[chunk].sum())
        yield chunk, flat, offsets
        start = stop


def _keeping(geometry: Geometry, chunks: Iterable[Chunk]) -> Iterator[Chunk]:
    """The chunks of `_chunks_of_cells`, kept in geometry.chunks for the next evaluation on the same
    geometry where they hold at most KEPT_KEYS candidate keys in all."""
    got: list[Chunk] = []
    size = 0
    for chunk in chunks:
        yield chunk
        size += chunk[1].size
        if size <= KEPT_KEYS:
            got.append(chunk)
    if size <= KEPT_KEYS:
        geometry.chunks[:] = got


def _average_one(
    X: torch.Tensor,
    Bq: torch.Tensor,
    VX: torch.Tensor,
    logw: torch.Tensor | None,
    beta: float,
    geometry: Geometry,
    stats: Stats,
    threads: int,
) -> torch.Tensor:
    """Truncated softmax average sum_j w_ij V x_j for one cloud: X, Bq = X B, VX = X V^T, all (N, d);
    logw: (N,) log-weights of the keys, or None (uniform); geometry: its cells (`cloud_geometry`).
    The cells run through the fused kernel's compiled core where there is one (CPU, d <= 8), else
    through torch's fused attention."""
    N, d = X.shape
    tree, perm, starts, centres, radii = (
        geometry.tree,
        geometry.perm,
        geometry.starts,
        geometry.centres,
        geometry.radii,
    )
    stats["cells"] = stats.get("cells", 0) + radii.size
    chunks: Iterable[Chunk] = geometry.chunks or _chunks_of_cells(tree, centres, radii, N, d, threads)
    if geometry.kept and not geometry.chunks:
        chunks = _keeping(geometry, chunks)
    core = compiled.core() if X.device.type == "cpu" and d <= MAX_D else None
    if core is not None:
        return _average_compiled(core, chunks, perm, starts, X, Bq, VX, logw, beta, stats, threads)
    if logw is not None:  # one extra coordinate: (b_i, 1) . (x_j, log(w_j) / beta)
        Bq = torch.cat([Bq, torch.ones_like(Bq[:, :1])], dim=1)
        X = torch.cat([X, (logw / beta).unsqueeze(1)], dim=1)
        # and a zero one in the values: the fused kernel needs equal head dimensions (dense.py)
        VX = torch.nn.functional.pad(VX, (0, 1))
    out = torch.empty_like(VX)
    perm_t = torch.from_numpy(perm).to(X.device)
    for chunk, flat, offsets in chunks:
        _evaluate_cells(chunk, flat, offsets, perm_t, starts, X, Bq, VX, out, beta, stats, threads)
    return out[:, :d]  # without the weights' zero column


def _average_compiled(
    core: compiled.Core,
    chunks: Iterable[Chunk],
    perm: np.ndarray,
    starts: np.ndarray,
    X: torch.Tensor,
    Bq: torch.Tensor,
    VX: torch.Tensor,
    logw: torch.Tensor | None,
    beta: float,
    stats: Stats,
    threads: int,
) -> torch.Tensor:
    """`_average_one` through the compiled core: each cell's queries against its candidate keys
    (scores in base 2, fused.c), in float64, or by the float32 twin for float32 X where its
    scores stay below F32_SCORE_MAX (fused.py; stats["sums"] says which)."""
    f64 = torch.float64
    N, d = X.shape
    q = (LOG2E * beta) * Bq.to(f64)
    lw = torch.zeros(N, dtype=f64) if logw is None else LOG2E * logw.to(f64)
    rows = torch.cat([X.to(f64), lw[:, None], VX.to(f64)], dim=1)
    bound = float(q.norm(dim=1).max()) * float(X.to(f64).norm(dim=1).max()) + float(lw.abs().max())
    dtype = "float32" if X.dtype == torch.float32 and core.float32 and bound < F32_SCORE_MAX else "float64"
    stats.setdefault("sums", []).append(dtype)
    q, rows = q.to(getattr(torch, dtype)).contiguous(), rows.to(getattr(torch, dtype)).contiguous()
    out = torch.empty((N, d + 2), dtype=f64)
    group = core.group(d, dtype)
    for chunk, flat, offsets in chunks:
        sizes = starts[chunk + 1] - starts[chunk]
        qs = np.zeros(len(chunk) + 1, dtype=np.int64)
        np.cumsum(sizes, out=qs[1:])
        qidx = np.ascontiguousarray(perm[ranges(starts[chunk], sizes)], dtype=np.int64)
        kidx = np.ascontiguousarray(flat, dtype=np.int64)
        core.cells(q, qidx, qs, rows, kidx, offsets, out, threads, dtype)
        keys = np.diff(offsets)
        stats["pairs"] = stats.get("pairs", 0) + int(np.dot(keys, sizes))
        stats["keys"] = stats.get("keys", 0) + int(keys.sum())
        padded = -(-sizes // group) * group
        stats["padded_pairs"] = stats.get("padded_pairs", 0) + int(np.dot(keys, padded))
    return (out[:, 1 : d + 1] / out[:, :1]).to(X.dtype)


def _pad(flat: torch.Tensor, offsets: np.ndarray, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows flat[offsets[k]:offsets[k+1]] for k in rows as a zero-padded (G, K) index tensor and mask."""
    lens = offsets[rows + 1] - offsets[rows]
    K = int(lens.max())
    dev = flat.device
    mask = torch.arange(K, device=dev)[None, :] < torch.from_numpy(lens).to(dev)[:, None]
    idx = torch.zeros(mask.shape, dtype=torch.int64, device=dev)
    idx[mask] = torch.cat([flat[offsets[k] : offsets[k + 1]] for k in rows])
    return idx, mask


def _evaluate_cells(
    chunk: np.ndarray,
    flat: np.ndarray,
    offsets: np.ndarray,
    perm_t: torch.Tensor,
    starts: np.ndarray,
    X: torch.Tensor,
    Bq: torch.Tensor,
    VX: torch.Tensor,
    out: torch.Tensor,
    beta: float,
    stats: Stats,
    threads: int,
) -> None:
    """Evaluate the cells `chunk` (cell k's candidate keys: flat[offsets[i]:offsets[i+1]], k = chunk[i]).

    Cells of equal query count and similar key count go together through one padded fused-attention
    call of at most BLOCK_ELEMENTS key-query pairs.  Calls below PARALLEL_PAIRS run one per thread
    (a pool of `threads` workers, torch single-threaded: its kernels release the GIL); larger calls
    then run one after the other on all threads.
    """
    lens = np.diff(offsets)
    nq = starts[chunk + 1] - starts[chunk]
    stats["pairs"] = stats.get("pairs", 0) + int(np.dot(lens, nq))
    stats["keys"] = stats.get("keys", 0) + int(lens.sum())
    order = np.lexsort((lens, nq))  # by query count, then key count: little padding
    flat_t = torch.from_numpy(flat).to(X.device)
    groups: list[tuple[np.ndarray, int]] = []
    i, n = 0, len(chunk)
    while i < n:
        L0, K0 = int(nq[order[i]]), int(lens[order[i]])
        j = i + 1
        while (
            j < n
            and int(nq[order[j]]) == L0
            and int(lens[order[j]]) <= PAD_RATIO * K0
            and (j - i + 1) * L0 * int(lens[order[j]]) <= BLOCK_ELEMENTS
        ):
            j += 1
        group = order[i:j]
        groups.append((group, L0 * int(lens[group].max()) * len(group)))
        i = j
    stats["padded_pairs"] = stats.get("padded_pairs", 0) + sum(p for _, p in groups)

    def run(group: np.ndarray) -> None:
        if len(group) == 1:  # a single cell: no padding (the fused kernel never forms the score block)
            k = group[0]
            kk = flat_t[offsets[k] : offsets[k + 1]]
            qi = perm_t[starts[chunk[k]] : starts[chunk[k] + 1]]
            out[qi] = _sdpa(Bq[qi][None], X[kk][None], VX[kk][None], None, beta)[0]
        else:
            kidx, kmask = _pad(flat_t, offsets, group)
            qidx, qmask = _pad(perm_t, starts, chunk[group])
            all_keys = bool(kmask.all())
            avg = _sdpa(Bq[qidx], X[kidx], VX[kidx], None if all_keys else kmask, beta)
            out[qidx[qmask]] = avg[qmask]  # rows of different groups are disjoint

    small = [g for g, p in groups if p < PARALLEL_PAIRS]
    if threads > 1 and len(small) > 1 and X.device.type == "cpu":
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(run, small))
    else:
        for g in small:
            run(g)
    with _threads(threads):
        for g, p in groups:
            if p >= PARALLEL_PAIRS:
                run(g)


def velocity_truncated(
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
) -> torch.Tensor:
    """Tangent velocity of every token, keys within e^{-cutoff} of each row maximum only.

    X: (M, N, d) (or (N, d)) unit rows, float64 or float32; att: Attention with finite beta.
    betas: optional (M,) finite inverse temperatures, one per cloud, in place of att.beta.
    weights: optional (M, N) (or (N,)) quadrature weights w_j > 0 (None: uniform); the kept radius
    widens where a light key is nearest (module docstring), the error bound stays N e^{-cutoff}.
    cutoff: the relative error of each row sum is <= N e^{-cutoff} (default 45: <= 1e-12 for
    N <= 3.4e7).  leaf, leaf_min, ratio: cells hold at most `leaf` queries, and are cut down to
    `leaf_min` while wider than `ratio` times r_i.  margin: the cells' balls are widened by this
    fraction and their geometry is kept for later states while they moved less than it allows
    (_moves.py; the same field to the bound above); None: a new geometry every call.
    stats: a dict to fill with counts: "cells", "pairs" (key-query pairs evaluated), "keys" (keys
    gathered, once per cell), "padded_pairs", "geometry_built", "geometry_kept" (clouds).
    Returns (M, N, d) (or (N, d)) like X.  Meant for small d (up to about 6) and large beta.
    """
    cutoff, leaf, leaf_min, ratio = _settings(cutoff, leaf, leaf_min, ratio)
    stats = {} if stats is None else stats
    squeeze = X.dim() == 2
    X3 = batched(X, "X")
    M, N, _ = X3.shape
    cloud_betas = _cloud_betas(att, betas, M)
    logw = log_weights(weights, M, N, X3)
    geometries = cloud_geometry(
        X,
        att,
        betas=betas,
        weights=weights,
        stats=stats,
        cutoff=cutoff,
        leaf=leaf,
        leaf_min=leaf_min,
        ratio=ratio,
        margin=margin,
    )
    B, V = matrices_like(att, X3)
    out = torch.empty_like(X3)
    threads = torch.get_num_threads()
    with _threads(1):  # small operations: see PARALLEL_PAIRS
        for m in range(M):
            Xm = X3[m].contiguous()
            lw = None if logw is None else logw[m]
            out[m] = _average_one(Xm, Xm @ B, Xm @ V.T, lw, cloud_betas[m], geometries[m], stats, threads)
    out = tangent(X3, out)
    return out.squeeze(0) if squeeze else out
