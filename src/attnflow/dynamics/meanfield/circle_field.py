"""The finite-temperature field on S^1 (d = 2) of a measure given by angles and log-weights.

    dphi/dt = <e_perp(phi), sum_j p_j V x_j>,   p_j = softmax_j( beta x(phi)^T B x_j + log w_j )

with x(theta) = (cos theta, sin theta) and e_perp(phi) = (-sin phi, cos phi): the tangential
component of MATH.md's velocity, as an angular speed.  The weights enter as log w_j only, never as
w_j, so masses far below float64's range (e^-4677 at beta = 1e4) are exact: torch's fused
`scaled_dot_product_attention` with queries (beta B^T x(phi), 1), keys (x_j, log w_j) and scale 1
(MATH.md, "Weighted measures": one extra coordinate; float64 keeps log w_j to 1e-16 relative).
Also `importance`: how much each node can matter to the dynamics (used by the error control of
`meanfield`).  Torch float64 tensors in and out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from ...attention import Attention

__all__ = ["CircleField", "importance", "log_row_sums", "sparse_field"]


class CircleField:
    """The field of att (d = 2, finite beta) on angles: `field(phi, theta, logw)` -> (M,)."""

    def __init__(self, att: Attention, backend: str = "auto"):
        from ...kernels.fused import backend_for

        self.beta = float(att.beta)
        self.B = torch.tensor(att.B, dtype=torch.float64)
        self.V = torch.tensor(att.V, dtype=torch.float64)
        self.n_evals = 0
        self.backend = backend_for(2, "cpu", backend)  # "compiled" (the fused C core) or "torch"

    def scores_parts(
        self, phi: torch.Tensor, theta: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries beta x(phi)^T B (M, 2), keys x(theta) (N, 2) and values V x(theta) (N, 2)."""
        xq = torch.stack([torch.cos(phi), torch.sin(phi)], -1)
        xk = torch.stack([torch.cos(theta), torch.sin(theta)], -1)
        return self.beta * (xq @ self.B), xk, xk @ self.V.T

    def __call__(self, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor) -> torch.Tensor:
        """Angular speed (M,) at the query angles phi (M,) of sum_j exp(logw_j) delta_{theta_j}:
        from the keys near each query's row maximum where there are many query-key pairs
        (COMPILED_SPARSE_MIN_PAIRS on the compiled core, each block of queries against its kept keys;
        SPARSE_MIN_PAIRS in torch, `sparse_field`) and the plan keeps at most SPARSE_MAX_KEPT of the
        key blocks, densely otherwise."""
        self.n_evals += 1
        cells = _compiled_cells(self, phi, theta, logw)
        if cells is not None:
            s = torch.from_numpy(_cells_sums(self, theta, logw, cells))
            return (-torch.sin(phi) * s[:, 1] + torch.cos(phi) * s[:, 2]) / s[:, 0]
        if self.backend == "torch" and len(phi) * len(theta) >= SPARSE_MIN_PAIRS:
            plan = _plan(self, phi, theta, logw)
            if float(plan.keep.double().mean()) <= SPARSE_MAX_KEPT:
                return _sparse(self, phi, plan)
        return self.dense(phi, theta, logw)

    def dense(self, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor) -> torch.Tensor:
        """The field by a fused dense kernel (every key for every query): the compiled core of
        `kernels.fused` where it exists (3x torch's fused attention at beta = 1000), else torch's."""
        q, k, v = self.scores_parts(phi, theta)
        if self.backend == "compiled":
            from ...kernels.fused import PARALLEL_PAIRS, sums_compiled

            threads = torch.get_num_threads() if len(phi) * len(theta) >= PARALLEL_PAIRS else 1
            s = sums_compiled(q.contiguous(), k.contiguous(), logw.contiguous(), v.contiguous(), threads)
            return (-torch.sin(phi) * s[:, 1] + torch.cos(phi) * s[:, 2]) / s[:, 0]
        q = torch.cat([q, torch.ones_like(phi)[:, None]], -1)
        k = torch.cat([k, logw[:, None]], -1)
        v = torch.nn.functional.pad(v, (0, 1))  # the fused CPU kernel needs equal head dimensions
        out = torch.nn.functional.scaled_dot_product_attention(
            q[None, None], k[None, None], v[None, None], scale=1.0
        )[0, 0]
        return -torch.sin(phi) * out[:, 0] + torch.cos(phi) * out[:, 1]


def importance(
    field: CircleField,
    theta: torch.Tensor,
    logw: torch.Tensor,
    rounds: int = 2,
    block: int = 2048,
    queries: int | None = None,
) -> torch.Tensor:
    """How much node j can matter, I_j in [0, 1]: its mass relative to the heaviest node, raised to
    max_i I_i p_ij (the share of j in the softmax of any node i that matters), `rounds` times.
    queries: only the first `queries` nodes attend (the others, e.g. a patch's virtual nodes, are
    keys only); None: all.

    A node of mass e^-30 that no heavy node attends to (the thin stream that runs from a separatrix
    toward a cluster from the far side) gets I ~ e^-30; the same mass near a cluster's maximiser y*,
    where the cluster's softmax sits, gets I ~ 1.  Explicit softmax over blocks of `block` queries,
    or the sparse path of the field (the same kept keys) from SPARSE_MIN_PAIRS pairs on.
    """
    n = len(theta) if queries is None else queries
    base = torch.exp(logw - logw.max())
    cells = _compiled_cells(field, theta[:n], theta, logw)
    if cells is not None:
        return _importance_compiled(field, theta, logw, base, rounds, cells)
    imp = base.clone()
    plan = _plan(field, theta[:n], theta, logw) if n * len(theta) >= SPARSE_MIN_PAIRS else None
    if plan is not None and float(plan.keep.double().mean()) > SPARSE_MAX_KEPT:
        plan = None
    q, k, _ = field.scores_parts(theta[:n], theta)
    for _ in range(rounds):
        if plan is not None:  # one plan for every round: it does not depend on the importances
            imp = torch.maximum(base, _column_max(field, theta, imp, n, plan))
            continue
        new = base.clone()
        for s in range(0, n, block):
            P = torch.softmax(q[s : s + block] @ k.T + logw[None, :], dim=-1)
            new = torch.maximum(new, (imp[s : min(s + block, n), None] * P).amax(0))
        imp = new
    return imp


KEY_BLOCK = 32  # keys per block of the sparse path (sorted by angle)
QUERY_BLOCK = 64  # queries per block of the sparse path (sorted by the direction of B^T x)
CUTOFF = 45.0  # a dropped key's score is below the row maximum by more than this
SPARSE_MIN_PAIRS = 400_000  # below this many (query, key) pairs the dense fused kernel is faster
COMPILED_SPARSE_MIN_PAIRS = 4_000_000  # ... and the compiled dense core than its sparse path
SPARSE_MAX_ELEMENTS = 1 << 23  # gathered scores per chunk of query blocks (64 MiB in float64)
SPARSE_MAX_KEPT = 0.25  # above this fraction of kept key blocks (a wide kernel: small beta) dense is faster


def _pad(x: torch.Tensor, n: int, value: float) -> torch.Tensor:
    return torch.cat([x, x.new_full((n - len(x), *x.shape[1:]), value)]) if n > len(x) else x


@dataclass(frozen=True)
class _Plan:
    """Keys sorted by angle in blocks, and which key blocks each query keeps."""

    ang: torch.Tensor  # (n_blocks, KEY_BLOCK) key angles in [0, 2 pi), padding repeats the last
    lw: torch.Tensor  # (n_blocks, KEY_BLOCK) log-weights, padding -inf
    index: torch.Tensor  # (n_blocks + 1, KEY_BLOCK) original key index, -1 for padding
    psi: torch.Tensor  # (M,) direction of B^T x(phi)
    keep: torch.Tensor  # (M, n_blocks)


def _plan(fld: CircleField, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor) -> _Plan:
    """Keys sorted by angle in blocks of KEY_BLOCK; for query i with b_i = B^T x_i = |b_i| (cos psi_i,
    sin psi_i) the scores are beta |b_i| cos(theta_j - psi_i) + log w_j, bounded above on a block by
    its largest log-weight and the largest cosine over its angles.  A block is kept when that bound
    reaches the largest score of any block's heaviest key minus CUTOFF."""
    two_pi = 2.0 * math.pi
    order = torch.argsort(torch.remainder(theta, two_pi))
    n_blocks = -(-len(theta) // KEY_BLOCK)
    size = n_blocks * KEY_BLOCK
    ang = _pad(torch.remainder(theta[order], two_pi), size, float("nan")).reshape(n_blocks, KEY_BLOCK)
    lw = _pad(logw[order], size, -math.inf).reshape(n_blocks, KEY_BLOCK)
    ang = torch.where(torch.isnan(ang), ang.nan_to_num(0.0).amax(1, keepdim=True), ang)
    index = torch.cat([_pad(order, size, -1).reshape(n_blocks, KEY_BLOCK), torch.full((1, KEY_BLOCK), -1)])
    top_lw, top_at = lw.max(1)
    top_ang = ang.gather(1, top_at[:, None])[:, 0]
    q, _, _ = fld.scores_parts(phi, phi[:0])
    r, psi = q.norm(dim=1), torch.remainder(torch.atan2(q[:, 1], q[:, 0]), two_pi)
    lo, hi, d = ang[:, 0], ang[:, -1], psi[:, None]
    inside = (d >= lo[None]) & (d <= hi[None])
    maxcos = torch.where(
        inside, torch.ones_like(d * lo), torch.maximum(torch.cos(lo[None] - d), torch.cos(hi[None] - d))
    )
    best = (r[:, None] * torch.cos(top_ang[None] - d) + top_lw[None]).amax(1, keepdim=True)
    return _Plan(ang, lw, index, psi, r[:, None] * maxcos + top_lw[None] >= best - CUTOFF)


def _chunks(
    fld: CircleField, phi: torch.Tensor, plan: _Plan
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(query indices (c, QB) with -1 padding, key indices (c, K) with -1 padding, softmax p (c, QB,
    K), values V x_j (c, K, 2)) over chunks of query blocks.  Queries are sorted by psi in blocks
    of QUERY_BLOCK sharing the union of their kept key blocks; blocks are taken in order of that
    union's size, in chunks of sizes within a factor 2, each padded to its widest only."""
    m, n_blocks = len(phi), plan.keep.shape[1]
    n_qb = -(-m // QUERY_BLOCK)
    qidx = _pad(torch.argsort(plan.psi), n_qb * QUERY_BLOCK, -1).reshape(n_qb, QUERY_BLOCK)
    kq = _pad(plan.keep[qidx.reshape(-1).clamp(min=0)], n_qb * QUERY_BLOCK, False).reshape(
        n_qb, QUERY_BLOCK, n_blocks
    )
    kq = (kq & (qidx >= 0)[..., None]).any(1)
    count = kq.sum(1)
    by_count = torch.argsort(count)
    kept_first = torch.argsort((~kq).to(torch.int8), dim=1, stable=True)
    ang_x = torch.cat([plan.ang, plan.ang[:1]])
    lw_x = torch.cat([plan.lw, torch.full_like(plan.lw[:1], -math.inf)])
    s = 0
    while s < n_qb:
        lo_w = max(1, int(count[by_count[s]]))
        end = int(torch.searchsorted(count[by_count], 2 * lo_w, right=True))
        chunk = by_count[
            s : s + max(1, min(end - s, SPARSE_MAX_ELEMENTS // (QUERY_BLOCK * 2 * lo_w * KEY_BLOCK)))
        ]
        width = max(1, int(count[chunk].max()))
        blocks = kept_first[chunk, :width]
        blocks = torch.where(kq[chunk].gather(1, blocks), blocks, torch.full_like(blocks, n_blocks))
        qi = qidx[chunk]
        qv, xk, vk = fld.scores_parts(phi[qi.clamp(min=0)].reshape(-1), ang_x[blocks].reshape(-1))
        scores = qv.reshape(len(chunk), QUERY_BLOCK, 2) @ xk.reshape(len(chunk), -1, 2).transpose(1, 2)
        p = torch.softmax(scores + lw_x[blocks].reshape(len(chunk), 1, -1), dim=-1)
        yield qi, plan.index[blocks].reshape(len(chunk), -1), p, vk.reshape(len(chunk), -1, 2)
        s += len(chunk)


def sparse_field(
    fld: CircleField, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor
) -> torch.Tensor:
    """The same field as `CircleField.dense`, from the keys near each query's row maximum only
    (`_plan`, `_chunks`).  Every dropped key weighs at most e^-CUTOFF times the row maximum, so the
    field is exact to N e^-CUTOFF relative (3e-16 at N = 1e4)."""
    return _sparse(fld, phi, _plan(fld, phi, theta, logw))


def _sparse(fld: CircleField, phi: torch.Tensor, plan: _Plan) -> torch.Tensor:
    out = torch.empty(len(phi), 2, dtype=phi.dtype)
    for qi, _, p, vk in _chunks(fld, phi, plan):
        ok = qi.reshape(-1) >= 0
        out[qi.reshape(-1)[ok]] = (p @ vk).reshape(-1, 2)[ok]
    return -torch.sin(phi) * out[:, 0] + torch.cos(phi) * out[:, 1]


def _max_cos(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The largest cos(delta) over angle differences delta in [low, high] (elementwise)."""
    half = 0.5 * (high - low)
    gap = np.abs(np.remainder(0.5 * (high + low) + math.pi, 2.0 * math.pi) - math.pi) - half
    return np.where((gap <= 0.0) | (half >= math.pi), 1.0, np.cos(np.clip(gap, 0.0, math.pi)))


@dataclass(frozen=True)
class _Cells:
    """The compiled sparse field's plan: queries sorted by psi (`order`) in blocks qs, each with its
    kept keys kidx[ks[c]:ks[c + 1]] (original indices); `kept`, the fraction of key blocks kept;
    `q`, the queries."""

    order: np.ndarray
    qs: np.ndarray
    kidx: np.ndarray
    ks: np.ndarray
    kept: float
    q: torch.Tensor  # (M, 2) the queries beta B^T x(phi), which the sums take too


def _cell_plan(fld: CircleField, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor) -> _Cells:
    """`_plan`'s bound per block of QUERY_BLOCK queries (sorted by psi) instead of per query: a key
    block is kept for a query block where the largest score + log-weight it can give any of the
    block's queries, r cos(theta - psi) + log w over their ranges of r, psi and its keys' angles,
    reaches the least, over those queries, of the score of some block's heaviest key, minus CUTOFF.
    Every dropped key weighs less than e^-CUTOFF times its query's row maximum, as in `_plan`."""
    two_pi = 2.0 * math.pi
    th = np.remainder(theta.numpy(), two_pi)
    korder = np.argsort(th, kind="stable")
    n, n_blocks = len(th), -(-len(th) // KEY_BLOCK)
    starts = np.arange(n_blocks) * KEY_BLOCK
    ths, lws = th[korder], logw.numpy()[korder]
    lo, hi = ths[starts], ths[np.minimum(starts + KEY_BLOCK, n) - 1]
    padded = np.full(n_blocks * KEY_BLOCK, -math.inf)
    padded[:n] = lws
    top_at = starts + padded.reshape(n_blocks, KEY_BLOCK).argmax(1)
    top_lw, top_ang = lws[top_at], ths[top_at]
    queries = fld.scores_parts(phi, phi[:0])[0]
    q = queries.numpy()
    r, psi = np.hypot(q[:, 0], q[:, 1]), np.remainder(np.arctan2(q[:, 1], q[:, 0]), two_pi)
    order = np.argsort(psi, kind="stable")
    m = len(psi)
    qs = np.minimum(np.arange(-(-m // QUERY_BLOCK) + 1) * QUERY_BLOCK, m).astype(np.int64)
    ps, rs = psi[order], r[order]
    a1, a2 = ps[qs[:-1]][:, None], ps[qs[1:] - 1][:, None]
    r_lo, r_hi = np.minimum.reduceat(rs, qs[:-1])[:, None], np.maximum.reduceat(rs, qs[:-1])[:, None]
    up = _max_cos(lo[None] - a2, hi[None] - a1)  # (query blocks, key blocks)
    down = -_max_cos(top_ang[None] - a2 + math.pi, top_ang[None] - a1 + math.pi)  # least cosine
    upper = np.where(up >= 0.0, r_hi, r_lo) * up + top_lw[None]
    lower = (np.where(down >= 0.0, r_lo, r_hi) * down + top_lw[None]).max(1, keepdims=True)
    kept = upper >= lower - CUTOFF
    qb, kb = np.nonzero(kept)
    keys = np.full(n_blocks * KEY_BLOCK, -1, dtype=np.int64)
    keys[:n] = korder
    index = keys.reshape(n_blocks, KEY_BLOCK)[kb]  # (kept pairs, KEY_BLOCK), -1 for padding
    valid = index >= 0
    per_block = np.bincount(qb, weights=valid.sum(1), minlength=len(qs) - 1)  # kept keys per query block
    ks = np.concatenate([[0], np.cumsum(per_block)]).astype(np.int64)
    return _Cells(order.astype(np.int64), qs, index[valid], ks, float(kept.mean()), queries)


def _compiled_cells(
    fld: CircleField, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor
) -> _Cells | None:
    """The plan of the compiled sparse path where it applies: the compiled core, at least
    COMPILED_SPARSE_MIN_PAIRS query-key pairs, at most SPARSE_MAX_KEPT of the key blocks kept."""
    if fld.backend != "compiled" or len(phi) * len(theta) < COMPILED_SPARSE_MIN_PAIRS:
        return None
    cells = _cell_plan(fld, phi, theta, logw)
    return cells if cells.kept <= SPARSE_MAX_KEPT else None


def _key_rows(fld: CircleField, theta: torch.Tensor, logw: torch.Tensor) -> torch.Tensor:
    """(N, 5) the compiled core's key rows: x_j, log2(e) log w_j, V x_j."""
    from ...kernels.fused import LOG2E

    _, xk, vk = fld.scores_parts(theta[:0], theta)
    return torch.cat([xk, (LOG2E * logw)[:, None], vk], dim=1).contiguous()


def _cells_sums(
    fld: CircleField, theta: torch.Tensor, logw: torch.Tensor, plan: _Cells, rows: torch.Tensor | None = None
) -> np.ndarray:
    """(M, 4): Z_i, N_i (2) and the shift m_i of fused.c (base 2) of each of the plan's queries
    against its kept keys, by the compiled core's cells; rows: `_key_rows`, where already made."""
    from ...kernels import compiled
    from ...kernels.fused import LOG2E, PARALLEL_PAIRS

    core = compiled.core()
    assert core is not None, "the compiled backend without a compiled core"
    rows = _key_rows(fld, theta, logw) if rows is None else rows
    out = np.empty((len(plan.q), 4))
    threads = torch.get_num_threads() if len(plan.kidx) * QUERY_BLOCK >= PARALLEL_PAIRS else 1
    core.cells((LOG2E * plan.q).contiguous(), plan.order, plan.qs, rows, plan.kidx, plan.ks, out, threads)
    return out


def log_row_sums(
    fld: CircleField, phi: torch.Tensor, theta: torch.Tensor, logw: torch.Tensor
) -> torch.Tensor:
    """log sum_j exp(beta x(phi_i)^T B x(theta_j) + logw_j) for each query angle (M,): the log of the
    field's softmax normalisers (the interaction energy's row sums), by the field's sparse compiled
    path where it applies (every dropped key below e^-CUTOFF of its row's maximum), else densely
    in blocks of queries."""
    cells = _compiled_cells(fld, phi, theta, logw)
    if cells is not None:
        out = _cells_sums(fld, theta, logw, cells)
        return torch.from_numpy((out[:, 3] + np.log2(out[:, 0])) * math.log(2.0))
    q, xk, _ = fld.scores_parts(phi, theta)
    rows = max(1, SPARSE_MAX_ELEMENTS // len(theta))
    return torch.cat(
        [torch.logsumexp(q[i : i + rows] @ xk.T + logw, dim=1) for i in range(0, len(phi), rows)]
    )


def _importance_compiled(
    fld: CircleField, theta: torch.Tensor, logw: torch.Tensor, base: torch.Tensor, rounds: int, cells: _Cells
) -> torch.Tensor:
    """`importance` by the compiled core on the cells of `_cell_plan` (queries the first n nodes):
    each query's softmax normaliser from its kept keys (`_cells_sums`), then every round
    max_i imp_i p_ij = 2^(l_j + max_i (log2 imp_i - log2 Z_i - m_i + q_i . x_j)) (`Core.colmax`),
    in the core's base-2 units."""
    from ...kernels import compiled
    from ...kernels.fused import LOG2E

    core = compiled.core()
    assert core is not None, "the compiled backend without a compiled core"
    n = len(cells.q)
    rows = _key_rows(fld, theta, logw)
    sums = _cells_sums(fld, theta, logw, cells, rows)
    shift = np.log2(sums[:, 0]) + sums[:, 3]  # log2 of each query's normaliser
    q2, l2 = (LOG2E * cells.q).contiguous(), rows[:, 2].numpy()
    imp = base.numpy().copy()
    for _ in range(rounds):
        with np.errstate(divide="ignore"):
            a = np.log2(imp[:n]) - shift
        top = np.full(len(theta), -np.inf)
        core.colmax(q2, a, cells.order, cells.qs, rows, cells.kidx, cells.ks, top)
        imp = np.maximum(base.numpy(), np.exp2(top + l2))
    return torch.from_numpy(imp)


def _column_max(
    fld: CircleField, theta: torch.Tensor, imp: torch.Tensor, n: int, plan: _Plan
) -> torch.Tensor:
    """max_i imp_i p_ij, queries the first n nodes, keys all, by their `plan` (sparse: the dropped
    p_ij are < e^-CUTOFF)."""
    out = torch.zeros_like(imp)
    for qi, ki, p, _ in _chunks(fld, theta[:n], plan):
        w = torch.where(qi >= 0, imp[qi.clamp(min=0)], torch.zeros_like(qi, dtype=imp.dtype))
        col = (w[..., None] * p).amax(1)  # (c, K)
        ok = ki >= 0
        out.scatter_reduce_(0, ki[ok], col[ok], reduce="amax")
    return out
