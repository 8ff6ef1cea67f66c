"""Input validation shared by the public functions: clear errors that name the argument."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .model import Attention

UNIT_TOL = 1e-8  # largest accepted | |x_i| - 1 | for a token


def to_numpy(a: Any) -> np.ndarray:
    """Array-like (NumPy, list, torch tensor) -> NumPy array, without copying when possible."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # a torch tensor, without importing torch
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def check_beta(beta: Any, name: str = "beta") -> float:
    """Inverse temperature in (0, inf]; returns a float (math.inf allowed)."""
    try:
        b = float(beta)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number in (0, inf], got {beta!r}") from None
    if math.isnan(b) or b <= 0:
        raise ValueError(f"{name} must be in (0, inf], got {beta!r}")
    return b


def check_matrix(M: Any, name: str, d: int | None = None) -> np.ndarray:
    """A finite square float64 matrix, of size d x d when d is given."""
    try:
        A = to_numpy(M).astype(np.float64, copy=True)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real (d, d) array, got {type(M).__name__}") from None
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square (d, d) matrix, got shape {A.shape}")
    if A.shape[0] < 2:
        raise ValueError(f"{name} must be at least 2 x 2 (tokens live on S^(d-1), d >= 2), got {A.shape}")
    if d is not None and A.shape[0] != d:
        raise ValueError(f"{name} must be {d} x {d} to match the other matrices, got {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf")
    return A


def check_points(
    X: Any,
    name: str = "X",
    d: int | None = None,
    normalize: bool = False,
    allow_batch: bool = True,
    tol: float = UNIT_TOL,
) -> np.ndarray:
    """Tokens on the sphere: float64 array (N, d) or (M, N, d) with finite unit rows.

    Rows off the sphere by more than `tol` are an error unless `normalize=True`, in which
    case they are divided by their norm (a zero row is still an error).
    """
    try:
        A = to_numpy(X)
        A = A.astype(np.float64, copy=not (A.dtype == np.float64 and A.flags.c_contiguous))
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real array of shape (N, d), got {type(X).__name__}") from None
    ndims = (2, 3) if allow_batch else (2,)
    if A.ndim not in ndims:
        want = "(N, d) or (M, N, d)" if allow_batch else "(N, d)"
        raise ValueError(f"{name} must have shape {want}, got shape {A.shape}")
    if A.shape[-2] == 0 or (A.ndim == 3 and A.shape[0] == 0):
        raise ValueError(f"{name} is empty (shape {A.shape}): need at least one token")
    if A.shape[-1] < 2:
        raise ValueError(f"{name} must have d >= 2 columns (points of S^(d-1)), got shape {A.shape}")
    if d is not None and A.shape[-1] != d:
        raise ValueError(f"{name} has d = {A.shape[-1]} columns but the attention matrices are {d} x {d}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf")
    norms = np.linalg.norm(A, axis=-1)
    if normalize:
        if np.any(norms == 0):
            raise ValueError(f"{name} has a zero row, which cannot be normalised onto the sphere")
        A = np.ascontiguousarray(A / norms[..., None])
    else:
        dev = float(np.max(np.abs(norms - 1.0)))
        if dev > tol:
            raise ValueError(
                f"{name} must have unit rows (points of the sphere): largest | |x_i| - 1 | is {dev:.3g}; "
                "pass normalize=True to project the rows onto the sphere"
            )
    return A


def check_times(times: Any, name: str = "times") -> np.ndarray:
    """Output times: finite, non-negative, non-decreasing 1-D float64 array, at least one entry."""
    t = np.atleast_1d(to_numpy(times).astype(np.float64))
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of times, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name} contains NaN or inf")
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError(f"{name} must be non-negative and non-decreasing, got {t}")
    return t


def check_positive(x: Any, name: str, integer: bool = False) -> float:
    """A finite number > 0 (an int when integer=True)."""
    if integer:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{name} must be a positive integer, got {x!r}")
        if x <= 0:
            raise ValueError(f"{name} must be a positive integer, got {x!r}")
        return int(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v


def check_attention(att: Any, name: str = "att") -> Attention:
    """An `attnflow.Attention` (the weights Q, K, V and beta), else TypeError naming `name`."""
    from .model import Attention  # model imports this module: import on use

    if not isinstance(att, Attention):
        raise TypeError(f"{name} must be an attnflow.Attention, got {type(att).__name__}")
    return att
