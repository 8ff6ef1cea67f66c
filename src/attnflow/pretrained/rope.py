"""Rotary positions (RoPE) as rotations of a head's query and key coordinates.

Hugging Face's layout ("rotate half"): in a head of width d_h, the first `dim` coordinates are
rotated in the planes (k, k + dim/2), k < dim/2, by the angle p theta_k at position p, with
theta_k = base^(-2k/dim); the others are left alone.  R(p) is that rotation (d_h x d_h).  Since
R(p)^T R(q) = R(q - p), a query at position i and a key at position j give the logit
q_i^T R(j - i) k_j: for the offset r = i - j (how far back the key is), the bilinear form of
MATH.md is B_h(r) = Q_h^T R(-r) K_h.  r = 0 gives the position-free B_h = Q_h^T K_h.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .checkpoint import Checkpoint

__all__ = ["RoPE", "layer_rope"]


@dataclass(frozen=True)
class RoPE:
    """Rotary positions of one model: base, rotated coordinates per head, head width."""

    base: float
    dim: int
    d_head: int

    def __post_init__(self) -> None:
        if self.dim % 2 or not 0 < self.dim <= self.d_head or not self.base > 1:
            raise ValueError(
                f"rotary positions need an even dim in (0, d_head = {self.d_head}] and base > 1, "
                f"got dim = {self.dim}, base = {self.base}"
            )

    @property
    def theta(self) -> np.ndarray:
        """Frequencies theta_k = base^(-2k/dim), (dim/2,)."""
        return self.base ** (-np.arange(0, self.dim, 2, dtype=np.float64) / self.dim)

    def matrix(self, p: float) -> np.ndarray:
        """R(p), (d_head, d_head): rotation by p theta_k in the planes (k, k + dim/2)."""
        half = self.dim // 2
        c, s = np.cos(p * self.theta), np.sin(p * self.theta)
        R = np.eye(self.d_head)
        k = np.arange(half)
        R[k, k], R[k + half, k + half] = c, c
        R[k, k + half], R[k + half, k] = -s, s
        return R

    def rotate(self, X: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Queries or keys (..., N, d_head) at `positions` (N,) rotated as the model does."""
        half = self.dim // 2
        ang = np.asarray(positions, dtype=np.float64)[:, None] * self.theta  # (N, half)
        c, s = np.cos(ang), np.sin(ang)
        a, b = X[..., :half], X[..., half : self.dim]
        return np.concatenate([a * c - b * s, b * c + a * s, X[..., self.dim :]], axis=-1)


def layer_rope(ck: Checkpoint) -> RoPE | None:
    """The checkpoint's rotary positions (config rope_theta, rope_dim or partial_rotary_factor)."""
    if ck.arch.positions != "rope":
        return None
    dim = ck.config.get("rope_dim") or int(ck.d_head * float(ck.config.get("partial_rotary_factor", 1.0)))
    return RoPE(float(ck.config.get("rope_theta", 10000.0)), int(dim), ck.d_head)
