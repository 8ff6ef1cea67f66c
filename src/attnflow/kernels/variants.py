"""The velocity of a `Dynamics` beyond the single head (docs/math.md, "Beyond the single head"):

    s_ij^h = beta theta_i^T B_h theta_j + log w_j          (j <= i only, mask = "causal")
             (beta theta_i^T B_h theta_j -> c tanh(beta theta_i^T B_h theta_j / c) with softcap = c)
    m_i^h  = sum_j e^{s_ij^h} V_h theta_j / sum_j e^{s_ij^h}          (normalization = "softmax")
           = sum_j e^{s_ij^h} V_h theta_j = (softmax mean) Z_i^h     (normalization = "usa")
           = the w-weighted mean of V_h theta_j over the j whose x_i^T B_h x_j is within r of the row's
             maximum (normalization = "hardmax": ties only; "localmax": r = sensitivity; hardmax.py)
    m_i    = sum_h W_O^h m_i^h   (the heads' `values`: V_h / H averaged, W_O^h V_h with blocks)
    field  = P^perp m (post), m (pre), m / |m| (peri), alpha P^perp m / |m| (ngpt)

with theta_i = x_i / |x_i| (the tokens themselves on the sphere) and w_j = 1/N without weights.
Every head computes the max-shifted softmax mean and its log-partition function log Z_i^h = (row
maximum) + log(sum of the shifted exponentials): unnormalised attention is the softmax mean times
exp(log Z_i^h - log N), in the log domain (usa_time = "rescaled" subtracts beta max_h ||B_h|| too).
A row whose factor passes float64's range is a FloatingPointError that says so.

Three implementations, the shipped kernels whose KernelSpec has dynamics=True (registry.py), with
the kernel signature `(X, dyn, *, betas, weights) -> (M, N, d)`:

- "fused": per cloud and head, the fused kernel's compiled core (CPU, d <= 8; for causal rows the
  keys before each chunk of queries by the core, the chunk's own triangle in torch, merged in the
  log domain), else the torch path of "blocked".
- "blocked": torch, every cloud of the batch in one product per block of queries and head; causal
  blocks read only the keys up to their last query.
- "sdpa": torch's scaled_dot_product_attention with the heads as its head axis (one call for every
  cloud and head), causal through its is_causal; softmax only (it gives no partition function).
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

import torch

from .._threads import intra_op_threads as _threads
from . import compiled, registry
from .common import batched, betas_per_cloud, log_weights, tangent

if TYPE_CHECKING:
    from ..flow import Dynamics

IMPLEMENTATIONS = tuple(s.name for s in registry.SPECS if s.dynamics)  # fused, sdpa, blocked
BLOCK_ELEMENTS = 2**22  # scores per block of queries (all clouds) in the torch path (32 MiB)
CHUNK = 256  # queries per chunk of the compiled causal path: the triangle of each chunk is torch's
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
MAX_LOG = 700.0  # e^709 overflows float64: an unnormalised factor beyond e^MAX_LOG is refused
MIN_COMPILED_N = 128  # fewer tokens per cloud: the per-cloud calls of the core cost more than they save
PARALLEL_PAIRS = 2**22  # below this many key-query pairs a cloud's core call runs on one thread


def unsupported(name: str, dyn: Dynamics) -> str | None:
    """Why kernel `name` cannot compute `dyn` (None: it can)."""
    if name not in IMPLEMENTATIONS:
        return (
            f"kernel {name!r} computes one softmax head on the sphere; this model has "
            f"{', '.join(dyn.departures())}: use kernel 'auto', 'fused', 'blocked' or 'sdpa'"
        )
    if name in ("sdpa", "fused") and dyn.softcap is not None:
        return f"kernel {name!r} cannot cap the scores (softcap): use kernel 'auto' or 'blocked'"
    if name == "sdpa" and dyn.normalization == "usa":
        return (
            "kernel 'sdpa' cannot compute normalization = 'usa' (torch's SDPA returns no partition "
            "function): use kernel 'auto', 'fused' or 'blocked'"
        )
    return None


def choose(dyn: Dynamics, X: torch.Tensor | None) -> str:
    """The kernel for `dyn` on the state X (M, N, d): "fused" on the CPU where its compiled core runs
    and clouds are large (N >= MIN_COMPILED_N), else "sdpa" (softmax) or "blocked" (usa, softcap)."""
    from .fused import backend_for

    if dyn.softcap is not None:
        return "blocked"
    N = 0 if X is None else X.shape[-2]
    device = "cpu" if X is None else X.device
    if N >= MIN_COMPILED_N and backend_for(dyn.d, device) == "compiled":
        return "fused"
    return "blocked" if dyn.normalization == "usa" else "sdpa"


def velocity_model(
    X: torch.Tensor,
    dyn: Dynamics,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    impl: str = "fused",
) -> torch.Tensor:
    """The field of `dyn` at the states X (M, N, d) (also (N, d)): see the module docstring.

    betas: optional (M,) inverse temperatures, one per cloud, in place of dyn.beta. weights:
    optional (M, N) or (N,) quadrature weights w_j > 0 (None: uniform). impl: "fused", "blocked"
    or "sdpa". Returns X's shape, dtype and device.
    """
    why = unsupported(impl, dyn)
    if why:
        raise ValueError(why)
    X3 = batched(X, "X")
    theta = X3 if dyn.on_sphere else X3 / X3.norm(dim=-1, keepdim=True)
    m = mixed_output(theta, dyn, betas=betas, weights=weights, impl=impl)
    out = layer_norm_field(theta, m, dyn)
    return out.squeeze(0) if X.dim() == 2 else out


def layer_norm_field(theta: torch.Tensor, m: torch.Tensor, dyn: Dynamics) -> torch.Tensor:
    """The field of each layer norm from the mixed output m (M, N, d) at the directions theta: post
    P^perp m, pre m, peri m / |m|, ngpt alpha P^perp m / |m| (m / |m| = 0 where m = 0)."""
    if dyn.layer_norm == "pre":
        return m
    if dyn.layer_norm in ("peri", "ngpt"):
        m = m / m.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(m.dtype).tiny)
    if dyn.layer_norm == "peri":
        return m
    v = tangent(theta, m)
    return dyn.alpha * v if dyn.layer_norm == "ngpt" else v


def _scales(dyn: Dynamics, betas: torch.Tensor | None, M: int, like: torch.Tensor) -> torch.Tensor:
    """beta of each cloud as an (M, 1, 1) tensor (finite: ValueError otherwise)."""
    per = betas_per_cloud(betas, M, like)
    if per is None:
        if not math.isfinite(dyn.beta):
            raise ValueError(
                "a Dynamics beyond the single head needs a finite beta (its zero-temperature limit is "
                "not computed), got beta = inf"
            )
        return torch.full((M, 1, 1), float(dyn.beta), dtype=like.dtype, device=like.device)
    if not bool(torch.isfinite(per).all()):
        raise ValueError(
            f"a Dynamics beyond the single head needs finite betas, got {per.flatten().tolist()}"
        )
    return per


def mixed_output(
    theta: torch.Tensor,
    dyn: Dynamics,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    impl: str = "fused",
) -> torch.Tensor:
    """m_i = sum_h W_O^h m_i^h at the unit directions theta (M, N, d), before any layer norm."""
    M, N, _ = theta.shape
    logw = log_weights(weights, M, N, theta)
    causal = dyn.mask == "causal"
    if dyn.normalization in ("hardmax", "localmax"):
        return _max_heads(theta, dyn, logw, causal)
    beta = _scales(dyn, betas, M, theta)
    if impl == "sdpa" and not (theta.device.type != "cpu" and theta.dtype == torch.float64):
        return _sdpa_heads(theta, dyn, beta, logw, causal)
    usa = dyn.normalization == "usa"
    if usa:  # the log of what divides the unnormalised sums: N (w_j = 1/N), and the rescaling
        shift = beta.view(M, 1) * dyn.log_time_scale(1.0) + (math.log(N) if logw is None else 0.0)
    out = torch.zeros_like(theta)
    for att, V in zip(dyn.heads, dyn.values, strict=True):
        B_h = torch.tensor(att.B, dtype=theta.dtype, device=theta.device)
        V_h = torch.tensor(V, dtype=theta.dtype, device=theta.device)
        q = (theta @ B_h) * beta
        path = "fused" if impl == "fused" else "torch"
        mean, logZ = head_sums(q, theta, logw, theta @ V_h.T, causal, path, dyn.softcap)
        if usa:
            mean = mean * _usa_factor(logZ - shift, dyn)
        out += mean
    return out


def _max_heads(theta: torch.Tensor, dyn: Dynamics, logw: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """sum_h W_O^h m_i^h with hardmax or localmax means (hardmax.max_mean): no beta."""
    from .hardmax import max_mean

    r = dyn.sensitivity if dyn.normalization == "localmax" else None
    out = torch.zeros_like(theta)
    for att, V in zip(dyn.heads, dyn.values, strict=True):
        B_h = torch.tensor(att.B, dtype=theta.dtype, device=theta.device)
        V_h = torch.tensor(V, dtype=theta.dtype, device=theta.device)
        out += max_mean(theta, B_h, theta @ V_h.T, logw, causal, r)
    return out


def _usa_factor(log_factor: torch.Tensor, dyn: Dynamics) -> torch.Tensor:
    """exp(log Z_i - log N [- beta ||B||]) (M, N, 1); FloatingPointError beyond float64's range."""
    top = float(log_factor.max())
    if top > MAX_LOG:
        raise FloatingPointError(
            f"normalization = 'usa' at beta = {dyn.beta:g}: a row's partition function reaches e^{top:.4g}, "
            "beyond float64's range (its speed grows like e^(beta ||B||)); use usa_time = 'rescaled' "
            "(time in units of e^(-beta max_h ||B_h||)) or a smaller beta"
        )
    return torch.exp(log_factor).unsqueeze(-1)


def head_sums(
    q: torch.Tensor,
    k: torch.Tensor,
    logw: torch.Tensor | None,
    v: torch.Tensor,
    causal: bool,
    path: str = "torch",
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax means and log-partition functions of one head for every cloud: scores s_ij = q_i . k_j
    + logw_j (natural units: beta is in q), q, k, v (M, N, d), logw (M, N) or None -> (mean (M, N, d),
    log Z (M, N)). path: "fused" (the compiled core per cloud where it runs, else torch) or "torch".
    softcap: c with q_i . k_j -> c tanh(q_i . k_j / c) before logw is added (torch path only)."""
    M, N, _ = q.shape
    if path == "fused" and _compiled_ok(q) and softcap is None:
        f64 = torch.float64
        means, logZs = [], []
        lw0 = torch.zeros(N, dtype=f64)
        for m in range(M):
            lw = lw0 if logw is None else logw[m].to(f64)
            mean, logZ = _sums_compiled(q[m].to(f64), k[m].to(f64), lw, v[m].to(f64), causal)
            means.append(mean)
            logZs.append(logZ)
        return torch.stack(means).to(q.dtype), torch.stack(logZs).to(q.dtype)
    return _sums_torch(q, k, logw, v, causal, softcap)


def _compiled_ok(q: torch.Tensor) -> bool:
    from .fused import backend_for

    return backend_for(q.shape[-1], q.device) == "compiled"


def _sums_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    logw: torch.Tensor | None,
    v: torch.Tensor,
    causal: bool,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`head_sums` in torch: blocks of queries (every cloud at once) against their keys."""
    M, N, _ = q.shape
    block = max(1, BLOCK_ELEMENTS // max(1, M * N))
    kT = k.transpose(1, 2)
    mean = torch.empty_like(v)
    logZ = torch.empty(q.shape[:2], dtype=q.dtype, device=q.device)
    for s in range(0, N, block):
        e = min(N, s + block)
        stop = e if causal else N
        S = torch.matmul(q[:, s:e], kT[:, :, :stop])  # (M, b, stop)
        if softcap is not None:
            S = softcap * torch.tanh(S / softcap)
        if logw is not None:
            S += logw[:, None, :stop]
        later = None
        if causal:  # within the block, key j > query i is masked
            later = torch.ones(e - s, e - s, dtype=torch.bool, device=q.device).triu(1)
            S[:, :, s:e].masked_fill_(later, -math.inf)
        top = S.amax(dim=-1, keepdim=True)
        S -= top
        S.clamp_(min=-700.0).exp_()  # below e^-700 nothing counts; libm's underflow path is slow
        if later is not None:
            S[:, :, s:e].masked_fill_(later, 0.0)
        Z = S.sum(dim=-1, keepdim=True)
        mean[:, s:e] = (S @ v[:, :stop]) / Z
        logZ[:, s:e] = (top + torch.log(Z)).squeeze(-1)
    return mean, logZ


def _core_sums(
    q: torch.Tensor, rows: torch.Tensor, threads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The compiled core's sums for queries q (n, d) (base-2 units) against `rows` (nk, 2 d + 1):
    (Z (n,), numerators (n, d), base-2 shift (n,))."""
    core = compiled.core()
    assert core is not None  # (checked by the caller)
    n, d = q.shape
    group = core.group(d)
    padded = -(-n // group) * group
    qT = torch.zeros((d, padded), dtype=torch.float64)
    qT[:, :n] = q.T
    out = torch.empty((d + 2, padded), dtype=torch.float64)
    core.sums(qT, rows, out, threads)
    return out[0, :n], out[1 : d + 1, :n].T, out[d + 1, :n]


def _sums_compiled(
    q: torch.Tensor, k: torch.Tensor, lw: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`head_sums` of one cloud by the compiled core: q, k, v (N, d), lw (N,) float64 CPU."""
    N, _ = q.shape
    threads = torch.get_num_threads() if N * N >= PARALLEL_PAIRS else 1
    rows = torch.cat([k, (LOG2E * lw)[:, None], v], dim=1).contiguous()
    q2 = LOG2E * q
    with _threads(1):
        if not causal:
            Z, num, shift = _core_sums(q2, rows, threads)
            return num / Z[:, None], torch.log(Z) + LN2 * shift
        means, logZs = [], []
        for i0 in range(0, N, CHUNK):
            i1 = min(N, i0 + CHUNK)
            mean, logZ = _triangle(q[i0:i1], k[i0:i1], lw[i0:i1], v[i0:i1])
            if i0 > 0:
                Z, num, shift = _core_sums(q2[i0:i1], rows[:i0], threads)
                mean, logZ = _merge(mean, logZ, num / Z[:, None], torch.log(Z) + LN2 * shift)
            means.append(mean)
            logZs.append(logZ)
    return torch.cat(means), torch.cat(logZs)


def _triangle(
    q: torch.Tensor, k: torch.Tensor, lw: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk of queries against its own keys, key j <= query i: (mean (n, d), log Z (n,))."""
    mean, logZ = _sums_torch(q[None], k[None], lw[None], v[None], causal=True)
    return mean[0], logZ[0]


def _merge(
    mean_a: torch.Tensor, logZ_a: torch.Tensor, mean_b: torch.Tensor, logZ_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax mean and log-partition of two disjoint sets of keys from those of each."""
    top = torch.maximum(logZ_a, logZ_b)
    wa, wb = torch.exp(logZ_a - top), torch.exp(logZ_b - top)
    Z = wa + wb
    mean = (wa[:, None] * mean_a + wb[:, None] * mean_b) / Z[:, None]
    return mean, top + torch.log(Z)


# the heads' B_h and value maps stacked, per Dynamics (which does not change once made), dtype and device
_Stacks = dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]]
_stacks: weakref.WeakKeyDictionary[Dynamics, _Stacks] = weakref.WeakKeyDictionary()


def _head_stacks(dyn: Dynamics, dt: torch.dtype, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B_h, W_O^h V_h or V_h / H) of every head, (H, d, d) each: made once, not at every evaluation
    (twelve 384 x 384 heads of a real layer cost more to stack than a small cloud's attention)."""
    per = _stacks.setdefault(dyn, {})
    if (dt, dev) not in per:
        Bs = torch.stack([torch.tensor(a.B, dtype=dt, device=dev) for a in dyn.heads])
        Vs = torch.stack([torch.tensor(V, dtype=dt, device=dev) for V in dyn.values])
        per[(dt, dev)] = (Bs, Vs)
    return per[(dt, dev)]


def _sdpa_heads(
    theta: torch.Tensor, dyn: Dynamics, beta: torch.Tensor, logw: torch.Tensor | None, causal: bool
) -> torch.Tensor:
    """sum_h W_O^h m_i^h (softmax) by one call of torch's SDPA with the heads as its head axis."""
    M, N, d = theta.shape
    Bs, Vs = _head_stacks(dyn, theta.dtype, theta.device)
    q = torch.einsum("mnd,hde->mhne", theta, Bs) * beta.view(M, 1, 1, 1)
    v = torch.einsum("mnd,hed->mhne", theta, Vs)  # rows V_h theta_j
    k = theta.unsqueeze(1)
    if logw is not None:  # one extra coordinate: (q_i, 1) . (k_j, log w_j)
        q = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)
        k = torch.cat([k, logw[:, None, :, None]], dim=-1)
    width = q.shape[-1]  # the values as wide as the queries: torch's fused CPU kernel needs it
    v = torch.nn.functional.pad(v, (0, width - d)) if width > d else v
    k = k.expand(M, dyn.H, N, width).contiguous()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(q.contiguous(), k, v.contiguous(), is_causal=causal, scale=1.0)
    return out[..., :d].sum(dim=1)
