"""Dense finite-temperature velocity kernel with the softmax fused into its sums (MATH.md, "Finite
temperature", "Weighted measures"):

    v_i = P_{x_i}^perp ( sum_j w_j exp(beta x_i^T B x_j) V x_j / sum_j w_j exp(beta x_i^T B x_j) ),

every key-query pair, as `sdpa` computes it (the two agree to about 1e-14 ||V||), but faster on the
CPU for the small d of these runs.  Two paths give the same field:

- compiled (CPU, d <= 8; compiled.py builds fused.c once per machine): per group of 8 to 24
  queries, one pass over the keys for the row maxima and one for the sums, the scores kept in
  registers and the exponential computed inline (relative error 3e-16).  Measured at 0.7 ns per
  key-query pair per core at d = 3 against 3.3 ns for torch's float64 SDPA (docs/benchmarks.md,
  "The fused kernel").  The queries are split into chunks run on torch's thread count.
- torch (no C compiler, d > 8): blocks of queries against all keys, each block's scores a matrix
  small enough to stay in cache: one product of (beta B^T y_i, 1) with (x_j, log w_j), the row
  maximum subtracted, clamped at -700 (libm's slow underflow path), exp, one product with
  (1, V x_j).

float32 input on the compiled path runs the core's float32 twin (`sums_compiled32`: 16 queries per
vector, 2.4x the float64 core's pairs per second, 0.27 ns per pair at d = 3; docs/benchmarks.md, "The
float32 fused core"): scores and exponentials in float32, their sums added in float64 every 64 keys;
the field is within about beta 1e-7 ||V|| of the float64 one on the same float32 points (rounding of
the scores; tested up to beta = 1e4; at beta = 1e6 finite).  Where a score could reach 2^21 (beta ||B||
above about 1e6) and on the torch path, float32 input is computed in float64; the result is float32.
On other devices than the CPU the kernel is `dense.field_sdpa` (CUDA's fused attention).
`field_fused` evaluates the field of the cloud X at other points Y, as `dense.field_sdpa` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .._threads import intra_op_threads as _threads
from . import compiled
from .common import batched, betas_per_cloud, finite_beta, log_weights, matrices_like, run_parallel, tangent
from .dense import field_sdpa

if TYPE_CHECKING:
    from ..attention import Attention
    from .common import Stats

LOG2E = 1.4426950408889634  # the compiled core works in base 2: 2^(log2(e) s) = e^s
MAX_D = 8  # the compiled core's largest dimension
TILE_ELEMENTS = 2**16  # scores per block of the torch path (512 KiB in float64: stays in cache)
PARALLEL_PAIRS = 2**22  # below this many key-query pairs a cloud runs on one thread
CHUNKS_PER_THREAD = 4  # query chunks per thread: a thread slowed by other jobs holds up less
BACKENDS = ("auto", "compiled", "torch")
F32_SCORE_MAX = 2.0**21  # largest base-2 score bound for the float32 twin (beta ||B|| up to about 1e6)

Sums = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def backend_for(d: int, device: torch.device | str = "cpu", backend: str = "auto") -> str:
    """The path the kernel takes in dimension d on `device`: "compiled", "torch" or "sdpa".

    backend: "auto" (compiled where compiled.core() exists and d <= MAX_D, else torch), or one of
    them forced ("compiled" where there is no compiled core is a ValueError saying why).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if torch.device(device).type != "cpu":
        return "sdpa"
    if backend == "torch":
        return "torch"
    ok = d <= MAX_D and compiled.core() is not None
    if backend == "compiled" and not ok:
        why = f"d = {d} > {MAX_D}" if d > MAX_D else compiled.status()
        raise ValueError(f"backend 'compiled' is not available ({why}): use backend='auto' or 'torch'")
    return "compiled" if ok else "torch"


def variant(d: int, device: torch.device | str = "cpu") -> str:
    """The cost model's variant of the kernels that can run the compiled core (truncated, cluster,
    fused): "compiled" where it runs in dimension d on `device`, else "torch" (costs.py)."""
    return "compiled" if backend_for(d, device) == "compiled" else "torch"


def _chunks(n: int, group: int, parts: int) -> list[tuple[int, int]]:
    """(start, stop) ranges covering 0 .. n in about `parts` pieces, each a multiple of `group`."""
    step = max(group, -(-n // (parts * group)) * group)
    return [(s, min(n, s + step)) for s in range(0, n, step)]


def sums_compiled(
    q: torch.Tensor, x: torch.Tensor, lw: torch.Tensor, vx: torch.Tensor, threads: int
) -> torch.Tensor:
    """(Z_i, N_i) = sum_j e^{s_ij - m_i} (1, v_j), s_ij = q_i . x_j + lw_j, by the compiled core:
    q (Nq, d), x (N, d), lw (N,), vx (N, d) float64 CPU tensors -> (Nq, d + 1) (shift m_i per row)."""
    core = compiled.core()
    if core is None:
        raise ValueError(f"the fused kernel's compiled core is not available ({compiled.status()})")
    Nq, d = q.shape
    group = core.group(d)
    n = -(-Nq // group) * group  # padded queries (zeros) fill the last group
    qT = torch.zeros((d, n), dtype=torch.float64)
    qT[:, :Nq] = (LOG2E * q).T
    rows = torch.cat([x, (LOG2E * lw)[:, None], vx], dim=1).contiguous()
    out = torch.empty((d + 2, n), dtype=torch.float64)  # Z_i, N_i, the shift (not needed here)
    core.sums(qT, rows, out, threads)
    return out[: d + 1, :Nq].T


def sums_torch(
    q: torch.Tensor, x: torch.Tensor, lw: torch.Tensor, vx: torch.Tensor, threads: int
) -> torch.Tensor:
    """The same sums as `sums_compiled` in torch (any dtype, the shift m_i the exact row maximum):
    blocks of about TILE_ELEMENTS scores, their queries split over `threads` threads."""
    (Nq, d), N = q.shape, x.shape[0]
    qa = torch.cat([q, torch.ones_like(q[:, :1])], dim=1)
    kT = torch.cat([x, lw[:, None]], dim=1).T.contiguous()  # (d + 1, N): scores q . x + lw in one product
    vals = torch.cat([torch.ones_like(vx[:, :1]), vx], dim=1)
    out = torch.empty((Nq, d + 1), dtype=q.dtype)
    block = max(4, TILE_ELEMENTS // N)  # measured: fewer queries per block cost more in calls

    def run(i0: int, i1: int) -> None:
        S = torch.empty((block, N), dtype=q.dtype)
        for s in range(i0, i1, block):
            Sb = S[: min(block, i1 - s)]
            torch.mm(qa[s : s + block], kT, out=Sb)
            Sb -= Sb.amax(dim=1, keepdim=True)
            Sb.clamp_(min=-700.0).exp_()  # below e^-700 nothing counts; libm's underflow path is slow
            torch.mm(Sb, vals, out=out[s : s + block])

    with _threads(1):
        run_parallel(_chunks(Nq, block, CHUNKS_PER_THREAD * threads), run, threads)
    return out


def sums_compiled32(
    q: torch.Tensor, x: torch.Tensor, lw: torch.Tensor, vx: torch.Tensor, threads: int
) -> torch.Tensor | None:
    """`sums_compiled` by the core's float32 twin (scores, exponentials and sums over blocks of 64
    keys in float32, the block sums added in float64): the same float64 arguments, rounded to
    float32 after the scaling to base 2 -> (Nq, d + 1) float64.  None where there is no float32
    twin or a score could reach F32_SCORE_MAX (the 2^x of fused.c needs |s| < 2^22)."""
    core = compiled.core()
    if core is None or not core.float32:
        return None
    Nq, d = q.shape
    bound = LOG2E * (float(q.norm(dim=1).max()) * float(x.norm(dim=1).max()) + float(lw.abs().max()))
    if not bound < F32_SCORE_MAX:
        return None
    group = core.group(d, "float32")
    n = -(-Nq // group) * group
    qT = torch.zeros((d, n), dtype=torch.float32)
    qT[:, :Nq] = (LOG2E * q).T
    rows = torch.cat([x, (LOG2E * lw)[:, None], vx], dim=1).to(torch.float32).contiguous()
    out = torch.empty((d + 2, n), dtype=torch.float64)
    core.sums32(qT, rows, out, threads)
    return out[: d + 1, :Nq].T


SUMS: dict[str, Sums] = {"compiled": sums_compiled, "torch": sums_torch}


def field_fused(
    Y: torch.Tensor,
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    backend: str = "auto",
    stats: Stats | None = None,
) -> torch.Tensor:
    """v_beta[rho](y) at the points Y for rho = sum_j w_j delta_{x_j}: (M, Nq, d) queries, (M, N, d)
    tokens -> (M, Nq, d) (also (Nq, d), (N, d) -> (Nq, d)), in Y's dtype.

    betas: optional (M,) inverse temperatures, one per cloud, in place of att.beta.  weights:
    optional (M, N) or (N,) quadrature weights w_j > 0 (None: uniform).  backend: "auto",
    "compiled" or "torch" (`backend_for`).  stats: a dict to receive "backend", the path taken, and
    "sums", the arithmetic of each cloud's sums ("float32": the core's float32 twin, else "float64").
    """
    beta = finite_beta(att, "fused", betas)
    Y3, X3 = batched(Y, "Y"), batched(X, "X")
    path = backend_for(Y3.shape[-1], Y3.device, backend)
    if stats is not None:
        stats["backend"] = path
    if path == "sdpa":
        return field_sdpa(Y, X, att, betas=betas, weights=weights)
    f64 = torch.float64
    Yd, Xd = Y3.to(f64), X3.to(f64)
    (M, Nq, _), N = Yd.shape, Xd.shape[1]
    B, V = matrices_like(att, Xd)
    per = betas_per_cloud(betas, M, Xd)
    logw = log_weights(weights, M, N, Xd)
    threads = torch.get_num_threads() if Nq * N >= PARALLEL_PAIRS else 1
    out = torch.empty_like(Yd)
    for m in range(M):
        q = Yd[m] @ B * (beta if per is None else float(per[m]))
        lw = torch.zeros(N, dtype=f64) if logw is None else logw[m]
        s = None
        if path == "compiled" and Y3.dtype == torch.float32:
            s = sums_compiled32(q, Xd[m], lw, Xd[m] @ V.T, threads)
        if stats is not None:
            stats.setdefault("sums", []).append("float64" if s is None else "float32")
        if s is None:
            s = SUMS[path](q, Xd[m], lw, Xd[m] @ V.T, threads)
        out[m] = s[:, 1:] / s[:, :1]
    out = tangent(Yd, out).to(Y3.dtype)
    return out.squeeze(0) if Y.dim() == 2 else out


def velocity_fused(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    backend: str = "auto",
    stats: Stats | None = None,
) -> torch.Tensor:
    """Tangent velocity of every token, every pair, the softmax fused with its sums: (M, N, d) ->
    (M, N, d) (also (N, d)).

    betas: optional (M,) inverse temperatures, one per cloud, in place of att.beta.  weights:
    optional (M, N) quadrature weights w_j > 0 of rho = sum_j w_j delta_{x_j} (None: uniform).
    backend, stats: as for `field_fused`.
    """
    return field_fused(X, X, att, betas=betas, weights=weights, backend=backend, stats=stats)
