"""The result of a simulation: states at the requested times, with how they were computed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Trajectory:
    """States saved at the requested times.

    Attributes
    ----------
    t : array (T,)
        Times.
    x : array (T, N, d) or (T, M, N, d)
        For a batch of M clouds; x[k] is the state at t[k] (a NumPy array, or a torch tensor when the
        run started from one).
    info : dict
        How it was computed (method, kernel, step counts, evaluations, wall time, notes).
    weights : array (N,) or (M, N), or None
        The quadrature weights of the measure sum_j w_j delta_{x_j(t)}, the same at every time (mass
        moves along characteristics); None: uniform.
    """

    t: np.ndarray
    x: Any  # np.ndarray, or torch.Tensor for torch input: Any, so that NumPy callers index it as an array
    info: dict[str, Any] = field(default_factory=dict)
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.t)

    def at(self, time: float) -> np.ndarray:
        """The saved state whose time is closest to `time`."""
        result: np.ndarray = self.x[int(np.argmin(np.abs(self.t - time)))]
        return result
