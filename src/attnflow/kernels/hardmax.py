"""The hardmax and localmax means of one head (docs/math.md, "Hardmax and localmax tokens"):

    C_i = { j : s_ij >= max_k s_ik - r_i },   s_ij = theta_i^T B theta_j     (j <= i with a causal mask)
    m_i = sum_{j in C_i} w_j V theta_j / sum_{j in C_i} w_j

hardmax: r_i = TIE_RTOL max(1, |max_k s_ik|) (float32: 64 of its epsilons, 7.6e-6, in place of
TIE_RTOL), so that scores equal to rounding tie and share the weight in proportion to w_j (the
beta -> inf limit of the softmax of N tokens); localmax: r_i = r, the alignment sensitivity
(Cimetiere, Chiri, Gharesifard 2025). No beta: the scores are x^T B y.
"""

from __future__ import annotations

import torch

TIE_RTOL = 1e-12  # hardmax: scores within this (relative to max(1, |max|)) of a row's maximum tie
BLOCK_ELEMENTS = 2**22  # scores per block of queries (all clouds)


def max_mean(
    theta: torch.Tensor,
    B: torch.Tensor,
    values: torch.Tensor,
    logw: torch.Tensor | None,
    causal: bool,
    sensitivity: float | None,
) -> torch.Tensor:
    """m_i of the module docstring for every cloud: theta (M, N, d) unit rows, B (d, d), values
    (M, N, d) the rows V theta_j, logw (M, N) or None (uniform), sensitivity r >= 0 (None: hardmax)
    -> (M, N, d)."""
    M, N, _ = theta.shape
    tie = max(TIE_RTOL, 64 * torch.finfo(theta.dtype).eps)
    q = theta @ B
    w = None if logw is None else torch.exp(logw)
    out = torch.empty_like(values)
    block = max(1, BLOCK_ELEMENTS // max(1, M * N))
    for s in range(0, N, block):
        e = min(N, s + block)
        S = q[:, s:e] @ theta.transpose(1, 2)  # (M, b, N)
        if causal:
            later = (
                torch.arange(N, device=theta.device)[None, :]
                > torch.arange(s, e, device=theta.device)[:, None]
            )
            S.masked_fill_(later, -torch.inf)
        top = S.amax(dim=-1, keepdim=True)
        r = tie * top.abs().clamp_min(1.0) if sensitivity is None else sensitivity
        C = (S >= top - r).to(values.dtype)
        if w is not None:
            C = C * w[:, None, :]
        out[:, s:e] = (C @ values) / C.sum(dim=-1, keepdim=True)
    return out
