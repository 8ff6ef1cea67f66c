"""Automatic kernel choice (first version: zero temperature or fused SDPA)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ..model import Attention


def choose_kernel(X: torch.Tensor, att: Attention) -> str:
    """Name of the kernel to use on the state X (M, N, d): "zero" when beta = inf, else "sdpa"."""
    return "zero" if math.isinf(att.beta) else "sdpa"
