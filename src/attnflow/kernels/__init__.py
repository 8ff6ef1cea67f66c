"""Velocity kernels: one signature `(X: Tensor (M, N, d), att: Attention) -> Tensor (M, N, d)`.

Each returns the tangent-projected velocity P_x^perp(sum_j w_ij V x_j) of every token (MATH.md).

    "sdpa"       fused torch scaled_dot_product_attention, memory O(N d)       (dense.py)
    "blocked"    explicit max-subtracted softmax over blocks of queries         (dense.py)
    "zero"       zero-temperature field P_x^perp A x / |B^T x|                  (zero.py)
    "truncated"  low-temperature kernel, keys near the row maximum only        (truncated.py)
    "cluster"    collapsed clusters: certified series between cells of tokens  (cluster.py, cells.py)
    "auto"       chosen per state by `auto.choose_kernel`

This module imports nothing heavy: the kernels (and torch) load on first use.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import check_points

if TYPE_CHECKING:
    import torch

    from ..model import Attention

Kernel = Callable[["torch.Tensor", "Attention"], "torch.Tensor"]

# name -> (module, function), loaded lazily by get_kernel
KERNELS: dict[str, tuple[str, str]] = {
    "sdpa": ("dense", "velocity_sdpa"),
    "blocked": ("dense", "velocity_blocked"),
    "zero": ("zero", "velocity_zero"),
    "truncated": ("truncated", "velocity_truncated"),
    "cluster": ("cluster", "velocity_cluster"),
}
FINITE_KERNELS = ("sdpa", "blocked", "truncated", "cluster")
DTYPES = ("float64", "float32")


def check_kernel_name(kernel: Any) -> str:
    """A kernel name from KERNELS or "auto"."""
    if not isinstance(kernel, str) or (kernel != "auto" and kernel not in KERNELS):
        raise ValueError(f"kernel must be one of {['auto', *KERNELS]}, got {kernel!r}")
    return kernel


def check_dtype(dtype: Any) -> str:
    """ "float64" or "float32" from a string, a NumPy or a torch dtype."""
    name = str(dtype).removeprefix("torch.")
    if name in ("double", "float"):
        name = {"double": "float64", "float": "float32"}[name]
    if name not in DTYPES:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name not in DTYPES:
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    return name


def get_kernel(name: str) -> Kernel:
    """The kernel function registered under `name` (not "auto": resolve it first)."""
    check_kernel_name(name)
    if name == "auto":
        raise ValueError("kernel 'auto' is resolved per state: call resolve_kernel(kernel, att, X) first")
    module, func = KERNELS[name]
    try:
        mod = importlib.import_module(f".{module}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{module}":
            raise
        raise NotImplementedError(
            f"kernel {name!r} is not available in this version of attnflow "
            f"(module attnflow.kernels.{module} is missing); use 'sdpa' or 'blocked'"
        ) from None
    return getattr(mod, func)


def resolve_kernel(kernel: str, att: Attention, X: torch.Tensor | None = None) -> str:
    """Concrete kernel name for `kernel` on state X: "auto" asks auto.choose_kernel.

    A finite-temperature kernel with beta = inf is an error.
    """
    kernel = check_kernel_name(kernel)
    if kernel == "auto":
        from .auto import choose_kernel

        kernel = choose_kernel(X, att)
    if kernel in FINITE_KERNELS and math.isinf(att.beta):
        raise ValueError(
            f"kernel {kernel!r} is a finite-temperature kernel but beta = inf: "
            "use kernel='zero' or 'auto' for the zero-temperature field"
        )
    return kernel


def check_attention(att: Any) -> Attention:
    from ..model import Attention

    if not isinstance(att, Attention):
        raise TypeError(f"att must be an attnflow.Attention, got {type(att).__name__}")
    return att


def velocity(X: Any, att: Attention, kernel: str = "auto", dtype: Any = "float64", normalize: bool = False):
    """Velocity v_i = P_{x_i}^perp(sum_j w_ij V x_j) of every token (MATH.md, "Finite temperature").

    X: (N, d) or (M, N, d) unit rows (NumPy array, list or torch tensor); rows off the sphere are an
    error unless normalize=True.  kernel: "auto" or a name of KERNELS.
    dtype: "float64" (default) or "float32" for the computation and the result.
    Returns an array of X's shape: NumPy for NumPy input, a torch tensor on X's device for torch input.
    """
    import torch

    att = check_attention(att)
    is_torch = isinstance(X, torch.Tensor)
    device = X.device if is_torch else torch.device("cpu")
    Xn = check_points(X, "X", d=att.d, normalize=normalize)
    name = check_dtype(dtype)
    kernel = check_kernel_name(kernel)
    Xt = torch.as_tensor(Xn, dtype=getattr(torch, name), device=device)
    X3 = Xt if Xt.dim() == 3 else Xt.unsqueeze(0)
    kernel = resolve_kernel(kernel, att, X3)
    out = get_kernel(kernel)(X3, att)
    if not bool(torch.isfinite(out).all()):
        raise FloatingPointError(f"kernel {kernel!r} returned NaN or inf (beta = {att.beta:g}, dtype {name})")
    out = out.reshape(Xt.shape)
    return out if is_torch else out.cpu().numpy()


__all__ = [
    "DTYPES",
    "KERNELS",
    "check_dtype",
    "check_kernel_name",
    "get_kernel",
    "resolve_kernel",
    "velocity",
]
