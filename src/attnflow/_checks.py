"""Input validation shared by the public functions: clear errors that name the argument."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

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


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """One of a few option strings."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_cloud(X: Any, name: str = "X", allow_batch: bool = False) -> np.ndarray:
    """check_points for measured clouds: float32 (or lower precision) input is accepted within 1e-5
    of unit norm and renormalised in float64 (a float32 trajectory's rows are off by about 1e-7)."""
    A = to_numpy(X)
    low = A.dtype.kind == "f" and A.dtype.itemsize < 8
    P = check_points(A, name, allow_batch=allow_batch, tol=1e-5 if low else UNIT_TOL)
    return P / np.linalg.norm(P, axis=-1, keepdims=True) if low else P


def check_stack(X: Any, name: str) -> np.ndarray:
    """Clouds with any leading axes (..., N, d), e.g. (T, N, d) or (T, M, N, d), as check_cloud."""
    A = to_numpy(X)
    if A.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d), e.g. (N, d) or (T, N, d), got {A.shape}")
    flat = A.reshape(-1, *A.shape[-2:]) if A.ndim > 3 else A
    return check_cloud(flat, name, allow_batch=True).reshape(A.shape)


#: Largest |sum_i w_i - 1| accepted for the weights of a measure (float sums of N weights 1/N are
#: off by about 1e-16 log2 N).
WEIGHT_SUM_TOL = 1e-12


def check_weights(w: Any, shape: tuple[int, ...], name: str = "weights") -> np.ndarray:
    """Weights of a measure sum_i w_i delta_{x_i}: finite, > 0, summing to 1 over the token axis.

    shape: the cloud's leading shape X.shape[:-1], e.g. (N,), (M, N) or (T, M, N). The weights have
    N entries on their last axis and broadcast against `shape` ((N,) for every cloud alike; (M, N)
    for a batch of M clouds, the same at every saved time). Returns a float64 array (no copy for
    float64 input).
    """
    n = shape[-1]
    try:
        W = to_numpy(w).astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a real array of {n} weights per cloud, got {type(w).__name__}"
        ) from None
    try:
        fits = W.ndim >= 1 and W.shape[-1] == n and np.broadcast_shapes(W.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} must have shape ({n},) or one that broadcasts against the clouds' {tuple(shape)}, "
            f"got {W.shape}"
        )
    if not np.all(np.isfinite(W)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(W <= 0):
        raise ValueError(
            f"{name} must be > 0 (a weighted measure's atoms carry positive mass), got min {W.min():.3g}; "
            "drop the points of zero weight"
        )
    off = float(np.max(np.abs(W.sum(axis=-1) - 1.0)))
    if off > WEIGHT_SUM_TOL:
        raise ValueError(
            f"{name} must sum to 1 over the tokens (a probability measure): off by {off:.3g}; "
            f"pass {name} / {name}.sum(axis=-1, keepdims=True)"
        )
    return W
