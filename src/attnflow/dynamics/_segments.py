"""The segments of a run whose weights are redrawn every `period` (`Dynamics(redraw=...)`): where
each begins and ends, which output times it saves, and the state it hands to the next."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["LastSave", "Segment", "segments"]


@dataclass(frozen=True)
class Segment:
    """A stretch of constant weights: [start, end], the indices of the output times it saves."""

    k: int
    start: float
    end: float
    saves: np.ndarray


def segments(t_out: np.ndarray, period: float) -> list[Segment]:
    """The segments of weights redrawn every `period` up to t_out[-1] (inf: one segment). An output
    time on a boundary belongs to the later segment (the state there is the same)."""
    t_final = float(t_out[-1])
    n = 1 if not math.isfinite(period) else max(1, math.ceil(t_final / period - 1e-12))
    out: list[Segment] = []
    for k in range(n):
        a, b, last = k * period if k else 0.0, t_final if k == n - 1 else (k + 1) * period, k == n - 1
        saves = np.flatnonzero((t_out >= a) & ((t_out < b) | last)) if n > 1 else np.arange(len(t_out))
        out.append(Segment(k, a, b, saves))
    return out


class LastSave:
    """A segment's save: the saved array for its own output times, and the state at its end kept."""

    def __init__(self, saved: Callable[[torch.Tensor], None], n_saves: int) -> None:
        self.saved, self.n_saves, self.k = saved, n_saves, 0
        self.X: torch.Tensor | None = None

    def __call__(self, X: torch.Tensor) -> None:
        if self.k < self.n_saves:
            self.saved(X)
        self.k += 1
        self.X = X
