"""What the velocity kernels share: the tangent projection, the checks of beta and of batched
shapes, B and V as tensors, per-cloud betas and the log-weights of a weighted measure. Public names,
imported by every kernel module; torch is imported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..attention import Attention

# what a kernel called with `stats` fills in: its counts (int), timings (float seconds), "backend" (str)
# and "sums" (list of str), keys that differ from kernel to kernel
Stats = dict[str, Any]


def tangent(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """P_x^perp w = w - <x, w> x row by row, (..., d) x (..., d) -> (..., d)."""
    return W - (X * W).sum(-1, keepdim=True) * X


def finite_beta(att: Attention, kernel: str, betas: torch.Tensor | None = None) -> float:
    """att.beta, checked finite; 1.0 when per-cloud `betas` (checked finite) replace it."""
    if betas is not None:
        if not bool(torch.isfinite(torch.as_tensor(betas)).all()):
            raise ValueError(f"kernel {kernel!r} needs finite betas, got {torch.as_tensor(betas).tolist()}")
        return 1.0
    beta = float(att.beta)
    if not math.isfinite(beta):
        raise ValueError(
            f"kernel {kernel!r} needs a finite beta, got beta = inf: use kernel='zero' (or 'auto') "
            "for the zero-temperature field"
        )
    return beta


def batched(T: torch.Tensor, name: str) -> torch.Tensor:
    if T.dim() == 2:
        return T.unsqueeze(0)
    if T.dim() != 3:
        raise ValueError(f"{name} must be a tensor of shape (N, d) or (M, N, d), got {tuple(T.shape)}")
    return T


def matrices_like(att: Attention, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """B and V as tensors with the dtype and device of `like`."""
    B = torch.tensor(att.B, dtype=like.dtype, device=like.device)
    V = torch.tensor(att.V, dtype=like.dtype, device=like.device)
    return B, V


def betas_per_cloud(betas: torch.Tensor | None, M: int, like: torch.Tensor) -> torch.Tensor | None:
    """betas (M,) as a (M, 1, 1) tensor like `like`, or None."""
    if betas is None:
        return None
    betas = torch.as_tensor(betas, dtype=like.dtype, device=like.device).reshape(-1)
    if betas.shape[0] != M:
        raise ValueError(f"betas has {betas.shape[0]} entries for a batch of {M} clouds")
    return betas.view(M, 1, 1)


def log_weights(weights: torch.Tensor | None, M: int, N: int, like: torch.Tensor) -> torch.Tensor | None:
    """log w_j as an (M, N) tensor like `like` from weights (N,) or (M, N) (> 0), or None for None.

    The kernels take the weights as given (the public functions check that they are positive and sum
    to 1; a common factor changes no softmax)."""
    if weights is None:
        return None
    w = torch.as_tensor(weights, device=like.device)
    if w.dim() == 1:
        w = w.unsqueeze(0)
    if w.dim() != 2 or w.shape[-1] != N or w.shape[0] not in (1, M):
        raise ValueError(f"weights must have shape (N,) or (M, N) = ({M}, {N}), got {tuple(w.shape)}")
    return torch.log(w.to(torch.float64)).to(like.dtype).expand(M, N)


def run_parallel(chunks: list[tuple[int, int]], fn: Callable[[int, int], None], threads: int) -> None:
    """fn(start, stop) for every chunk, on a pool of `threads` threads when there are several (torch's
    kernels and ctypes calls release the GIL); in order on the calling thread otherwise."""
    if threads <= 1 or len(chunks) <= 1:
        for c in chunks:
            fn(*c)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda c: fn(*c), chunks))
