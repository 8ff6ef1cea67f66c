"""Dense finite-temperature velocity kernels (MATH.md, "Finite temperature", "Weighted measures").

    v_i = P_{x_i}^perp ( sum_j w_j exp(beta x_i^T B x_j) V x_j / sum_j w_j exp(beta x_i^T B x_j) )

with quadrature weights w_j (uniform when not given).  Two implementations with the kernel signature
`(X: Tensor (M, N, d), att, *, betas=None, weights=None) -> Tensor (M, N, d)`:

- `velocity_sdpa`: torch's fused `scaled_dot_product_attention` on 4-D tensors (M, 1, N, d), which
  subtracts the row maximum and never builds the N x N score matrix (memory O(N d)).  Weights enter
  as one extra coordinate: queries (B^T x_i, 1), keys (x_j, log(w_j) / beta), scale beta, so that
  scale * <q_i, k_j> = beta x_i^T B x_j + log w_j (measured as fast as an additive float mask of
  log w_j, or faster: docs/benchmarks.md, "Weighted kernels").
- `velocity_blocked`: explicit max-subtracted softmax over blocks of queries (memory O(N d) plus one
  block x N score matrix), log w_j added to the scores before the maximum is subtracted; a fallback
  and an independent check of the fused kernel.

`field_sdpa` / `field_blocked` evaluate the same field v_beta[rho_X] at other points Y (queries Y,
keys and values from X): the velocity kernels are the case Y = X.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .common import batched, betas_per_cloud, finite_beta, log_weights, matrices_like, tangent

if TYPE_CHECKING:
    from ..attention import Attention

BLOCK_ELEMENTS = 2**22  # scores per block in velocity_blocked (32 MiB in float64)
PAD_TO = 16  # float32 sdpa pads d up to this many columns (measured 1.45x faster at d = 3 on CPU)


def field_sdpa(
    Y: torch.Tensor,
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """v_beta[rho](y) at the points Y for rho = sum_j w_j delta_{x_j}: (M, Nq, d) queries, (M, N, d)
    tokens -> (M, Nq, d).

    Fused SDPA on (M, 1, ., d) tensors with scale = beta: q = Y B, k = X, v = X V^T, so that
    q_i . k_j = y_i^T B x_j and the values are V x_j.  betas: optional (M,) inverse temperatures,
    one per cloud, in place of att.beta (the queries of cloud m are scaled by betas[m], scale = 1).
    weights: optional (M, N) or (N,) quadrature weights w_j > 0 (None: uniform), one extra coordinate
    (q_i, 1) . (k_j, log(w_j) / scale).
    """
    beta = finite_beta(att, "sdpa", betas)
    if X.device.type != "cpu" and X.dtype == torch.float64:
        # CUDA's fused attention kernels take no float64: torch would fall back to its math path,
        # which builds the N x N matrix.  The blocked kernel computes the same field in O(N d) memory.
        return field_blocked(Y, X, att, betas=betas, weights=weights)
    squeeze = Y.dim() == 2
    Y3, X3 = batched(Y, "Y"), batched(X, "X")
    B, V = matrices_like(att, X3)
    q = Y3 @ B
    per = betas_per_cloud(betas, Y3.shape[0], q)
    if per is not None:
        q = q * per
    k, v = X3, X3 @ V.T
    logw = log_weights(weights, X3.shape[0], X3.shape[1], X3)
    if logw is not None:
        q = torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)
        k = torch.cat([k, (logw / beta).unsqueeze(-1)], dim=-1)
    q, k, v = (a.unsqueeze(1).contiguous() for a in (q, k, v))
    d = Y3.shape[-1]
    # zero columns change no score and no value.  The values get as many columns as the queries:
    # torch's fused CPU kernel needs equal head dimensions, else it falls back to a path that builds
    # the N x N matrix (measured 4.5x slower at N = 4096).  float32: the fused kernel is faster on
    # PAD_TO columns than on d
    width = max(q.shape[-1], PAD_TO if q.dtype == torch.float32 else 0)
    q, k, v = (
        torch.nn.functional.pad(a, (0, width - a.shape[-1])) if a.shape[-1] < width else a for a in (q, k, v)
    )
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=beta).squeeze(1)[..., :d]
    out = tangent(Y3, out)
    return out.squeeze(0) if squeeze else out


def field_blocked(
    Y: torch.Tensor,
    X: torch.Tensor,
    att: Attention,
    block: int | None = None,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same as `field_sdpa`, with an explicit max-subtracted softmax over blocks of queries.

    block: queries per block; default keeps one block of scores (M, block, N) near BLOCK_ELEMENTS.
    betas: optional (M,) inverse temperatures, one per cloud, in place of att.beta.
    weights: optional (M, N) or (N,) quadrature weights: log w_j is added to the scores before the
    row maximum is subtracted.
    """
    beta = finite_beta(att, "blocked", betas)
    squeeze = Y.dim() == 2
    Y3, X3 = batched(Y, "Y"), batched(X, "X")
    B, V = matrices_like(att, X3)
    per = betas_per_cloud(betas, Y3.shape[0], Y3)
    if per is not None:
        B = B * per  # (M, d, d): beta_m B
    M, Nq, _ = Y3.shape
    N = X3.shape[1]
    logw = log_weights(weights, M, N, X3)
    if logw is not None:
        logw = logw.unsqueeze(1)  # (M, 1, N)
    if block is None:
        block = max(1, BLOCK_ELEMENTS // max(1, M * N))
    Kt = X3.transpose(1, 2)  # (M, d, N)
    VX = X3 @ V.T  # (M, N, d): rows V x_j
    out = torch.empty_like(Y3)
    for s in range(0, Nq, block):
        q = Y3[:, s : s + block] @ B  # (M, b, d)
        S = torch.matmul(q, Kt).mul_(beta)  # (M, b, N) scores beta y_i^T B x_j, one buffer
        if logw is not None:
            S += logw
        S -= S.amax(dim=-1, keepdim=True)
        # weights below e^-80 (float32) / e^-700 (float64) change a row sum by at most N e^-80
        # relative; clamping keeps exp out of libm's slow underflow path
        S.clamp_(min=-80.0 if S.dtype == torch.float32 else -700.0)
        S.exp_()
        out[:, s : s + block] = (S @ VX) / S.sum(dim=-1, keepdim=True)
    out = tangent(Y3, out)
    return out.squeeze(0) if squeeze else out


def _velocity(field: Callable[..., torch.Tensor], name: str, how: str) -> Callable[..., torch.Tensor]:
    """The velocity kernel of a field function: the field of the cloud at its own tokens (Y = X)."""

    def velocity(
        X: torch.Tensor,
        att: Attention,
        *,
        betas: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return field(X, X, att, betas=betas, weights=weights)

    velocity.__name__ = velocity.__qualname__ = name
    velocity.__doc__ = f"""Tangent velocity of every token, {how}: (M, N, d) -> (M, N, d) (also (N, d)).

    betas: optional (M,) inverse temperatures, one per cloud, in place of att.beta.
    weights: optional (M, N) quadrature weights w_j > 0 of rho = sum_j w_j delta_{{x_j}} (None: uniform).
    """
    return velocity


velocity_sdpa = _velocity(field_sdpa, "velocity_sdpa", "fused SDPA")
velocity_blocked = _velocity(field_blocked, "velocity_blocked", "blocked explicit softmax")
