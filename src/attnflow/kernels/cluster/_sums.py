"""The two sums of one cloud of the cluster kernel (`cluster`), added to its accumulator.

`_Cloud` (one cloud in the cells' order, its plan and accumulator), the batching of cells of similar
size (`_groups`), the expanded cell pairs (`_expand`: the moments of the key cells, then the series
of the query cells) and the direct pairs (`_direct`: the compiled core, else torch's fused
attention with a sink key, `_fused`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..._threads import intra_op_threads as _threads
from .. import cells as _cells
from .. import compiled
from ..fused import F32_SCORE_MAX, LOG2E, MAX_D

if TYPE_CHECKING:
    from ..common import Stats

BLOCK_ELEMENTS = 2**22  # numbers per padded batch (32 MiB in float64)
PAD_RATIO = 1.25  # items batched together differ in size by at most this factor
# batches with less padded work than this run on one thread: many small parallel regions cost more
# than they gain on a busy machine (as in truncated/_kernel.py); larger ones use all of torch's threads
PARALLEL_WORK = 2**24


def _monomial_features(Y: torch.Tensor, table: _cells.Monomials, degree: int) -> torch.Tensor:
    """All monomials Y^a with |a| <= degree, order of `table`: (G, d, n) -> (G, n_monomials(degree), n)."""
    G, _, n = Y.shape
    out = torch.empty((G, table.count(degree), n), dtype=Y.dtype, device=Y.device)
    out[:, 0] = 1.0
    lo = 0
    for k in range(1, degree + 1):
        for first, n_in, v in table.steps[k]:
            torch.mul(out[:, lo : lo + n_in], Y[:, v : v + 1], out=out[:, first : first + n_in])
        lo = table.steps[k][0][0]
    return out


def _groups(
    size: np.ndarray, count: np.ndarray, per_item: Callable[[int, int], int], budget: int
) -> list[np.ndarray]:
    """Batches of items (cells) with similar `size` and `count`, padded work at most `budget`.

    per_item(size_max, count_max) is the padded work of one item; items are sorted by size class
    (powers of PAD_RATIO), then by count, and cut where size or count grows past PAD_RATIO times the
    batch's first or the budget is full.
    """
    cls = np.floor(np.log(np.maximum(size, 1)) / np.log(PAD_RATIO)).astype(np.int64)
    order = np.lexsort((count, cls))
    out: list[np.ndarray] = []
    i, n = 0, len(order)
    while i < n:
        c0 = max(int(count[order[i]]), 1)
        s_max, c_max = int(size[order[i]]), c0
        j = i + 1
        while j < n:
            s, c = max(s_max, int(size[order[j]])), max(c_max, int(count[order[j]]))
            if cls[order[j]] != cls[order[i]] or c > PAD_RATIO * c0 or (j - i + 1) * per_item(s, c) > budget:
                break
            s_max, c_max = s, c
            j += 1
        out.append(order[i:j])
        i = j
    return out


def _rows(starts: torch.Tensor, lens: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded index rows starts[g] + (0 .. width - 1) and their mask (< lens[g]): (G, width) each."""
    ar = torch.arange(width, device=starts.device)
    mask = ar[None, :] < lens[:, None]
    idx = torch.where(mask, starts[:, None] + ar[None, :], starts[:, None])
    return idx, mask


def _segments(offsets: torch.Tensor, items: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows offsets[k] .. offsets[k + 1] - 1 of the items k, padded to width: (G, width) and mask."""
    return _rows(offsets[items], offsets[items + 1] - offsets[items], width)


@dataclass
class _Cloud:
    """One cloud in the cells' order (float64 unless noted), the plan, and the accumulator."""

    plan: _cells.Plan
    Xp: torch.Tensor  # (N, d) tokens x_j
    bp: torch.Tensor  # (N, d) rows b_i = B^T x_i
    wp: torch.Tensor  # (N,) weights
    mp: torch.Tensor  # (N,) row maxima m_i
    beta: float
    acc: torch.Tensor  # (N, d + 1): sum_j w_j e^{s_ij - m_i} (1, x_j), built up
    threads: int
    stats: Stats

    def __post_init__(self) -> None:
        dev = self.Xp.device
        self.sizes = np.diff(self.plan.starts)
        self.starts = torch.as_tensor(self.plan.starts, device=dev)
        self.cS = torch.as_tensor(self.plan.centres, dtype=torch.float64, device=dev)
        self.bT = torch.as_tensor(self.plan.bcentres, dtype=torch.float64, device=dev)

    def tokens(self, cells: np.ndarray, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded token rows of the cells (G, width) and their mask."""
        c = torch.as_tensor(cells, device=self.Xp.device)
        return _rows(self.starts[c], self.starts[c + 1] - self.starts[c], width)

    def count(self, key: str, n: int) -> None:
        self.stats[key] = self.stats.get(key, 0) + n


def _threads_for(cl: _Cloud, work: float) -> AbstractContextManager[None]:
    return _threads(cl.threads if work >= PARALLEL_WORK else 1)


def _expand(cl: _Cloud) -> None:
    """Add the expanded cell pairs to cl.acc.

    Query cells are taken in chunks whose pairs' moments fit in about BLOCK_ELEMENTS numbers; within
    a chunk the moments are computed batched by key cell, then evaluated batched by query cell.
    """
    plan = cl.plan
    if len(plan.exp_T) == 0:
        return
    P1 = plan.table.count(plan.order + 1)
    off_T = plan.exp_by_T
    max_pairs = max(1, BLOCK_ELEMENTS // P1)
    t0 = 0
    while t0 < plan.n_cells:
        t1 = int(np.searchsorted(off_T, off_T[t0] + max_pairs, side="right")) - 1
        t1 = min(max(t1, t0 + 1), plan.n_cells)
        if off_T[t1] > off_T[t0]:
            moments, tilt_max = _moments(cl, int(off_T[t0]), int(off_T[t1]))
            _evaluate(cl, t0, t1, moments, tilt_max)
        t0 = t1


def _moments(cl: _Cloud, q0: int, q1: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Moments sum_j w_j e^{tilt_j - t} (dy_j / h)^a, |a| <= p + 1, and the tilt maxima t of the
    expanded pairs q0 .. q1 - 1, batched by key cell: (q1 - q0, P1), (q1 - q0,)."""
    plan, dev = cl.plan, cl.Xp.device
    table, p, h = plan.table, plan.order, plan.h
    d, P1 = cl.Xp.shape[1], table.count(p + 1)
    T = torch.as_tensor(plan.exp_T[q0:q1], device=dev)
    S_np = plan.exp_S[q0:q1]
    moments = torch.empty((q1 - q0, P1), dtype=torch.float64, device=dev)
    tilt_max = torch.empty(q1 - q0, dtype=torch.float64, device=dev)
    order_S = torch.as_tensor(np.argsort(S_np, kind="stable"), device=dev)
    off_S_np = np.zeros(plan.n_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(S_np, minlength=plan.n_cells), out=off_S_np[1:])
    off_S = torch.as_tensor(off_S_np, device=dev)
    key_cells = np.flatnonzero(np.diff(off_S_np) > 0)
    k_S, n_S = np.diff(off_S_np)[key_cells], cl.sizes[key_cells]
    cl.count("moment_rows", int(np.dot(n_S, k_S)))
    for g in _groups(n_S, k_S, lambda s, c: s * (P1 + c + 2 * d), BLOCK_ELEMENTS):
        n, k = int(n_S[g].max()), int(k_S[g].max())
        with _threads_for(cl, len(g) * n * k * P1):
            tok, tmask = cl.tokens(key_cells[g], n)
            cells = torch.as_tensor(key_cells[g], device=dev)
            Y = ((cl.Xp[tok] - cl.cS[cells][:, None, :]) / h).transpose(1, 2).contiguous()  # (G, d, n)
            mono = _monomial_features(Y, table, p + 1)  # (G, P1, n)
            pr, pmask = _segments(off_S, cells, k)
            pairs = order_S[pr]  # (G, k) pair indices (local)
            tilt = torch.bmm(cl.bT[T[pairs]], Y).mul_(cl.beta * h)  # (G, k, n): beta b_T . dy_j
            tilt.masked_fill_(~tmask[:, None, :], -torch.inf)
            tmax = tilt.amax(-1)  # (G, k)
            E = torch.exp_(tilt.sub_(tmax[..., None])).mul_(cl.wp[tok][:, None, :])
            M = torch.bmm(E, mono.transpose(1, 2))  # (G, k, P1)
            moments[pairs[pmask]] = M[pmask]
            tilt_max[pairs[pmask]] = tmax[pmask]
    return moments, tilt_max


def _evaluate(cl: _Cloud, t0: int, t1: int, moments: torch.Tensor, tilt_max: torch.Tensor) -> None:
    """Evaluate the series of the query cells t0 .. t1 - 1 against their expanded key cells (whose
    moments are given, local pair indices from exp_by_T[t0]), batched by query cell, into cl.acc."""
    plan, dev, f64 = cl.plan, cl.Xp.device, torch.float64
    table, p, h = plan.table, plan.order, plan.h
    d, P = cl.Xp.shape[1], table.count(p)
    coef = torch.as_tensor(table.coefficients(plan.series_coefficients), dtype=f64, device=dev)
    shift = torch.as_tensor(table.shift(p), device=dev)  # (P, d): index of a + e_l
    q0 = int(plan.exp_by_T[t0])
    S = torch.as_tensor(plan.exp_S, device=dev)[q0 : int(plan.exp_by_T[t1])]
    off_T = torch.as_tensor(plan.exp_by_T - q0, device=dev)
    query_cells = t0 + np.flatnonzero(np.diff(plan.exp_by_T[t0 : t1 + 1]) > 0)
    k_T, n_T = np.diff(plan.exp_by_T)[query_cells], cl.sizes[query_cells]
    cl.count("eval_rows", int(np.dot(n_T, k_T)))
    for g in _groups(n_T, k_T, lambda s, c: s * (P + 2 * c * (d + 2)) + c * P * (d + 2), BLOCK_ELEMENTS):
        n, k = int(n_T[g].max()), int(k_T[g].max())
        with _threads_for(cl, len(g) * n * k * P * (d + 1)):
            tok, tmask = cl.tokens(query_cells[g], n)
            cells = torch.as_tensor(query_cells[g], device=dev)
            D = ((cl.bp[tok] - cl.bT[cells][:, None, :]) * (cl.beta * h)).transpose(1, 2).contiguous()
            F = _monomial_features(D, table, p)  # (G, P, n): (beta h delta_i)^a
            pairs, pmask = _segments(off_T, cells, k)  # (G, k): a cell's pairs are a range
            G = len(g)
            Mt = moments[pairs].transpose(1, 2)  # (G, P1, k)
            c = cl.cS[S[pairs]]  # (G, k, d)
            # sum_j E_j x_j dy^a = c_S sum_j E_j dy^a + h sum_j E_j dy^(a + e_l); times the coefficients
            Mext = torch.empty((G, P, k, d + 1), dtype=f64, device=dev)
            M0 = Mt[:, :P]
            Mext[..., 0] = M0
            for v in range(d):
                Mext[..., v + 1] = torch.addcmul(Mt[:, shift[:, v]] * h, M0, c[:, None, :, v])
            Mext *= coef[None, :, None, None]
            R = torch.bmm(F.transpose(1, 2), Mext.view(G, P, k * (d + 1))).view(G, n, k, d + 1)
            arg = torch.bmm(cl.bp[tok], c.transpose(1, 2)).mul_(cl.beta)  # (G, n, k): beta b_i . c_S
            arg += tilt_max[pairs][:, None, :] - cl.mp[tok][..., None]  # <= rho: no overflow
            arg.masked_fill_(~pmask[:, None, :], -torch.inf)
            out = torch.einsum("gnk,gnkc->gnc", torch.exp_(arg), R)  # (G, n, d + 1)
            cl.acc.index_add_(0, tok[tmask], out[tmask])


def _direct_keys(
    plan: _cells.Plan, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """The query cells with direct pairs and their keys: (query_cells, K, keys_of) with K the number
    of keys of every cell and keys_of(cells) the token positions of those cells' direct key cells,
    concatenated cell after cell."""
    K = np.zeros(plan.n_cells, dtype=np.int64)
    np.add.at(K, plan.dir_T, sizes[plan.dir_S])  # keys of each query cell
    query_cells = np.flatnonzero(K > 0)

    def keys_of(cells: np.ndarray) -> np.ndarray:
        pr = _cells.ranges(plan.dir_by_T[cells], plan.dir_by_T[cells + 1] - plan.dir_by_T[cells])
        S = plan.dir_S[pr]
        return _cells.ranges(plan.starts[S], sizes[S])

    return query_cells, K, keys_of


def _direct(cl: _Cloud, Xp: torch.Tensor, bp: torch.Tensor, wp: torch.Tensor, mp: torch.Tensor) -> None:
    """Add the directly evaluated cell pairs to cl.acc, in Xp's dtype (the tokens of cl.Xp, float32
    or float64): the keys of each query cell's direct key cells, through the fused kernel's compiled
    core (in float64) where there is one, else padded through `_fused`."""
    plan, dev = cl.plan, Xp.device
    d, sizes = Xp.shape[1], cl.sizes
    query_cells, K, keys_of = _direct_keys(plan, sizes)
    n_T, K_T = sizes[query_cells], K[query_cells]
    cl.count("direct_pairs", int(np.dot(n_T, K_T)))
    if not query_cells.size:
        return
    core = compiled.core() if dev.type == "cpu" and d <= MAX_D else None
    if core is not None:
        _direct_compiled(core, cl, query_cells, K_T, keys_of(query_cells), Xp.dtype == torch.float32)
        return
    logw = torch.log(wp)
    for g in _groups(n_T, K_T, lambda s, c: s * c + 2 * c * (d + 2), BLOCK_ELEMENTS):
        cells = query_cells[g]
        n, Kmax = int(n_T[g].max()), int(K_T[g].max())
        # the keys of each query cell: the token ranges of its direct key cells, one padded row each
        flat = keys_of(cells)
        row = np.repeat(np.arange(len(cells)), K[cells])
        col = np.arange(flat.size) - np.repeat(np.cumsum(K[cells]) - K[cells], K[cells])
        keys_np = np.zeros((len(cells), Kmax), dtype=np.int64)
        keys_np[row, col] = flat
        with _threads_for(cl, len(g) * n * Kmax * (d + 1)):
            kmask = torch.as_tensor(np.arange(Kmax)[None, :] < K[cells][:, None], device=dev)
            keys = torch.as_tensor(keys_np, device=dev)
            tok, tmask = cl.tokens(cells, n)
            out = _fused(bp[tok], mp[tok], Xp[keys], logw[keys].masked_fill_(~kmask, -1e5), cl.beta)
            cl.acc.index_add_(0, tok[tmask], out[tmask].to(cl.acc.dtype))


def _direct_compiled(
    core: compiled.Core,
    cl: _Cloud,
    query_cells: np.ndarray,
    K_T: np.ndarray,
    keys: np.ndarray,
    f32: bool = False,
) -> None:
    """The direct pairs by the compiled core (fused.c, `fused_cells`): every query cell against its
    direct keys, in base 2 and float64 (f32: by the core's float32 twin, where it passed its check
    and the scores stay below F32_SCORE_MAX), its sums brought from the core's shift to m_i and
    added to cl.acc."""
    f64, d = torch.float64, cl.Xp.shape[1]
    starts, sizes = cl.plan.starts, cl.sizes
    qs = np.zeros(len(query_cells) + 1, dtype=np.int64)
    np.cumsum(sizes[query_cells], out=qs[1:])
    ks = np.zeros(len(query_cells) + 1, dtype=np.int64)
    np.cumsum(K_T, out=ks[1:])
    qidx = np.ascontiguousarray(_cells.ranges(starts[query_cells], sizes[query_cells]), dtype=np.int64)
    rows = torch.cat([cl.Xp, (LOG2E * torch.log(cl.wp))[:, None], cl.Xp], dim=1)
    q = (LOG2E * cl.beta) * cl.bp
    bound = float(q.norm(dim=1).max()) * float(cl.Xp.norm(dim=1).max()) + float(rows[:, d].abs().max())
    dtype = "float32" if f32 and core.float32 and bound < F32_SCORE_MAX else "float64"
    q, rows = q.to(getattr(torch, dtype)).contiguous(), rows.to(getattr(torch, dtype)).contiguous()
    out = torch.zeros((cl.Xp.shape[0], d + 2), dtype=f64)
    kidx = np.ascontiguousarray(keys, dtype=np.int64)
    core.cells(q, qidx, qs, rows, kidx, ks, out, cl.threads, dtype)
    tok = torch.as_tensor(qidx)
    # sum_j w_j e^{s_ij - m_i} = 2^{shift_i - log2(e) m_i} Z_i (<= 2^(1/2): the subset's maximum is <= m_i)
    scale = torch.exp2(out[tok, d + 1] - LOG2E * cl.mp[tok])
    cl.acc.index_add_(0, tok, out[tok, : d + 1] * scale[:, None])


def _fused(
    b: torch.Tensor, m: torch.Tensor, x: torch.Tensor, logw: torch.Tensor, beta: float
) -> torch.Tensor:
    """sum_j w_j e^{beta b_i . x_j - m_i} (1, x_j) for padded batches by torch's fused attention:
    b (G, n, d), m (G, n), x (G, K, d), logw (G, K) -> (G, n, d + 1).

    Queries (b_i, m_i / beta, 1), keys (x_j, 0, log(w_j) / beta) plus a sink key (0, 1, 0), values
    (1, x_j) and 0 for the sink, scale beta: the scores are s_ij + log w_j and m_i, and the fused
    max-subtracted softmax returns (Z_i, N_i) / (Z_i + 1) with Z_i = sum_j w_j e^{s_ij - m_i} <=
    sum_j w_j <= 1 (m_i is the row maximum): Z_i and N_i follow without cancellation.  Padding keys
    carry log-weight -1e5.
    """
    G, K, d = x.shape
    q = torch.cat([b, (m / beta)[..., None], torch.ones_like(m)[..., None]], -1)
    k = torch.zeros((G, K + 1, d + 2), dtype=b.dtype, device=b.device)
    k[:, 0, d] = 1.0
    k[:, 1:, :d] = x
    k[:, 1:, d + 1] = logw / beta
    # values padded with a zero column: torch's fast fused path needs q, k and v of equal width
    # (measured 4x faster than the general path at these sizes)
    v = torch.zeros((G, K + 1, d + 2), dtype=b.dtype, device=b.device)
    v[:, 1:, 0] = 1.0
    v[:, 1:, 1 : d + 1] = x
    out = torch.nn.functional.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], scale=beta)
    out = out[:, 0, :, : d + 1]
    return out / (1.0 - out[..., :1])
