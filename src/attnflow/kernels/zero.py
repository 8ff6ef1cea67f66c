"""The zero-temperature velocity field (MATH.md, "Zero temperature").

    v_inf(x) = P_x^perp A x / |B^T x|,   A = V B^T

A local field (no interaction between tokens): the beta -> inf limit of the mean-field velocity.
It does not depend on the measure, so quadrature weights change nothing: the kernel accepts them
(the kernel signature) and ignores them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .common import tangent

if TYPE_CHECKING:
    from ..attention import Attention

SINGULAR_TOL = 1e-12  # |B^T x| <= SINGULAR_TOL * ||B|| counts as B^T x = 0


def velocity_zero(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """P_x^perp A x / |B^T x| for every token: (M, N, d) -> (M, N, d) (also (N, d) -> (N, d)).

    betas: None, or (M,) all inf (this is the beta = inf field; a finite entry is a ValueError).
    weights: accepted and ignored (the field is local: the measure does not enter).
    Raises ValueError when B^T x = 0 for some token (B singular and x in the kernel of B^T).
    """
    if betas is not None and not bool(torch.isinf(torch.as_tensor(betas)).all()):
        got = torch.as_tensor(betas).tolist()
        raise ValueError(f"kernel 'zero' is the beta = inf field: betas must all be inf, got {got}")
    B = torch.tensor(att.B, dtype=X.dtype, device=X.device)
    A = torch.tensor(att.A, dtype=X.dtype, device=X.device)
    norms = torch.linalg.vector_norm(X @ B, dim=-1, keepdim=True)  # rows x^T B = (B^T x)^T
    if bool((norms <= SINGULAR_TOL * att.norm_B).any()):
        raise ValueError(
            "the zero-temperature field P_x^perp A x / |B^T x| is undefined: B^T x = 0 for some token "
            f"(B is singular, condition number {att.cond_B:.3g})"
        )
    return tangent(X, (X @ A.T) / norms)
