"""Velocity kernels, one signature (everyone codes to it):

    fn(X: Tensor (M, N, d), att: Attention, *, betas: Tensor (M,) | None = None,
       weights: Tensor (M, N) | None = None) -> Tensor (M, N, d)

all tensors on X's device and dtype.  Each returns the tangent-projected velocity of every token
(MATH.md, "Finite temperature" and "Weighted measures"),

    v_i = P_{x_i}^perp ( sum_j w_j exp(beta x_i^T B x_j) V x_j / sum_j w_j exp(beta x_i^T B x_j) ),

betas: one inverse temperature per cloud in place of att.beta (None: att.beta for all);
weights: the quadrature weights w_j > 0 of rho = sum_j w_j delta_{x_j}, each row summing to 1
(None: uniform, w_j = 1/N).  A kernel that cannot honour an argument raises ValueError naming it.
Kernels may take further keyword arguments of their own after these (truncated: cutoff, ...).

    "fused"      every pair, softmax fused with its sums (compiled core, or torch) (fused.py)
    "sdpa"       fused torch scaled_dot_product_attention, memory O(N d)       (dense.py)
    "blocked"    explicit max-subtracted softmax over blocks of queries         (dense.py)
    "zero"       zero-temperature field P_x^perp A x / |B^T x| (weights ignored) (zero.py)
    "truncated"  low-temperature kernel, keys near the row maximum only          (truncated/)
    "cluster"    collapsed clusters: certified series between cells of tokens    (cluster/, cells.py)
    "auto"       chosen per state by `auto.choose_kernel`

(the table is registry.table(): a test keeps the two equal).
A `Dynamics` beyond the single head (several heads, a causal mask, unnormalised attention, another
layer norm: attnflow.flow) is computed by "fused", "blocked" or "sdpa" with their model paths
(variants.py; `kernel_function(name, model)`), and "auto" picks among them (`variants.choose`); a
Dynamics that is the paper's flow is its one Attention, for every kernel.

A new kernel is one module plus one `KernelSpec` in registry.SPECS (its function, whether it
refuses beta = inf, its cost model for "auto"), or `registry.register(spec)` at run time.  This
module imports nothing heavy: the kernels (and torch) load on first use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, cast

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .._checks import check_device, check_points, check_weights
from ..flow import Dynamics, check_model
from . import registry
from .registry import CostModel, KernelSpec

if TYPE_CHECKING:
    import torch

    from ..attention import Attention

    Model = Attention | Dynamics

Kernel = Callable[..., "torch.Tensor"]


class _Kernels(Mapping[str, KernelSpec]):
    """name -> KernelSpec of every registered kernel, read live from the registry (registry.py): the
    one list of kernel names.  Kept as a view for code written against the former table."""

    def __getitem__(self, name: str) -> KernelSpec:
        if name not in registry.names():
            raise KeyError(name)
        return registry.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())

    def __repr__(self) -> str:
        return f"KERNELS({list(self)})"


KERNELS: Mapping[str, KernelSpec] = _Kernels()
DTYPES = ("float64", "float32")


def check_kernel_name(kernel: object) -> str:
    """A registered kernel name (KERNELS) or "auto"."""
    if not isinstance(kernel, str) or (kernel != "auto" and kernel not in registry.names()):
        raise ValueError(f"kernel must be one of {['auto', *registry.names()]}, got {kernel!r}")
    return kernel


def check_dtype(dtype: DTypeLike | torch.dtype) -> str:
    """ "float64" or "float32" from a string, a NumPy or a torch dtype."""
    name = str(dtype).removeprefix("torch.")
    if name in ("double", "float"):
        name = {"double": "float64", "float": "float32"}[name]
    if name not in DTYPES:
        try:
            name = np.dtype(cast("DTypeLike", dtype)).name  # a torch dtype is a TypeError here
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
    return registry.get(name).load()


def plain(model: Model) -> Model:
    """The model's one Attention when it is the paper's flow (`Dynamics.single`), else the model."""
    if isinstance(model, Dynamics) and model.single is not None:
        return model.single
    return model


def kernel_function(name: str, model: Model) -> Kernel:
    """The kernel `name` (resolved, not "auto") for `model`: the registered function for an
    Attention, its model path (variants.velocity_model) for a Dynamics beyond the single head."""
    if not isinstance(model, Dynamics):
        return get_kernel(name)
    from functools import partial

    from . import variants

    why = variants.unsupported(name, model)
    if why:
        raise ValueError(why)
    return partial(variants.velocity_model, impl=name)


def resolve_kernel(
    kernel: str, att: Model, X: torch.Tensor | None = None, weights: torch.Tensor | None = None
) -> str:
    """Concrete kernel name for `kernel` on state X: "auto" asks auto.choose_kernel (with the
    quadrature weights (N,) or (M, N) of X's tokens, None: uniform); for a Dynamics beyond the single
    head, variants.choose.

    A finite-temperature kernel with beta = inf is an error.
    """
    kernel = check_kernel_name(kernel)
    if isinstance(att, Dynamics):
        from . import variants

        if math.isinf(att.beta):
            raise ValueError(
                "a Dynamics beyond the single head needs a finite beta: there is no zero-temperature "
                f"flow of a model with {', '.join(att.departures())}"
            )
        name = variants.choose(att, X) if kernel == "auto" else kernel
        why = variants.unsupported(name, att)
        if why:
            raise ValueError(why)
        return name
    if kernel == "auto":
        from .auto import choose_kernel

        kernel = choose_kernel(X, att) if weights is None else choose_kernel(X, att, weights)
    if registry.get(kernel).finite_only and math.isinf(att.beta):
        raise ValueError(
            f"kernel {kernel!r} is a finite-temperature kernel but beta = inf: "
            "use kernel='zero' or 'auto' for the zero-temperature field"
        )
    return kernel


def batch_size(**shapes: int | None) -> int | None:
    """The common batch size M of the named arguments (None: not batched); ValueError on a mismatch."""
    given = {k: v for k, v in shapes.items() if v is not None}
    if len(set(given.values())) > 1:
        raise ValueError(
            "the batch sizes do not match: "
            + ", ".join(f"{k} has {v}" for k, v in given.items())
            + " (one entry per cloud each)"
        )
    return next(iter(given.values()), None)


def rows(w: np.ndarray | None) -> int | None:
    """The batch size M of weights (M, N); None for (N,) or None."""
    return w.shape[0] if w is not None and w.ndim == 2 else None


def per_cloud(a: np.ndarray, M: int | None, ndim: int) -> np.ndarray:
    """An array with its batch axis (`ndim` dimensions) as it is; a shared one repeated M times (once
    when M is None)."""
    return a if a.ndim == ndim else np.repeat(a[None], M or 1, axis=0)


def unless_uniform(w: np.ndarray | None) -> np.ndarray | None:
    """Checked weights, or None when they are exactly uniform: the kernels' unweighted path gives the
    same field without the extra work."""
    return None if w is None or bool(np.all(w == w.flat[0])) else w


def velocity(
    X: ArrayLike | torch.Tensor,
    att: Model,
    kernel: str = "auto",
    dtype: DTypeLike | torch.dtype = "float64",
    weights: ArrayLike | None = None,
    device: str | torch.device | None = None,
    normalize: bool = False,
) -> np.ndarray | torch.Tensor:
    """Velocity v_i = P_{x_i}^perp(sum_j w_ij V x_j) of every token (MATH.md, "Finite temperature").

    Parameters
    ----------
    X : array (N, d) or (M, N, d)
        Unit rows (NumPy array, list or torch tensor); rows off the sphere are an error unless
        normalize=True.
    att : Attention or Dynamics
        A Dynamics (attnflow.flow: several heads, a causal mask, unnormalised attention, another
        layer norm) gives its field (docs/math.md, "Beyond the single head"): for layer_norm "pre" and
        "peri" the field in R^d at x, a function of x / |x| (rows of X need not be unit there).
    kernel : str
        "auto" or a name of KERNELS.
    dtype : str
        "float64" (default) or "float32" for the computation and the result.
    weights : array (N,) or (M, N), optional
        Quadrature weights w_j > 0 summing to 1 of rho = sum_j w_j delta_{x_j} (MATH.md, "Weighted
        measures"); None: uniform. X (N, d) with weights (M, N) is one cloud under M measures.
    device : optional
        Where to compute: None (X's device for a torch tensor, else the CPU), "cpu", "cuda",
        "cuda:<k>" or a torch.device; an unavailable one is a ValueError.

    Returns
    -------
    array
        The batch's shape: NumPy for NumPy (or list) input, a torch tensor on X's own device for torch
        input.
    """
    import torch

    att = plain(check_model(att))
    dev = check_device(device, X)
    in_space = isinstance(att, Dynamics) and not att.on_sphere  # pre, peri: a field of x / |x|
    Xn = check_points(X, "X", d=att.d, normalize=normalize or in_space)
    name = check_dtype(dtype)
    kernel = check_kernel_name(kernel)
    N = Xn.shape[-2]
    w = None if weights is None else check_weights(weights, N)
    M = batch_size(X=Xn.shape[0] if Xn.ndim == 3 else None, weights=rows(w))
    w = unless_uniform(w)
    X3 = torch.as_tensor(per_cloud(Xn, M, 3), dtype=getattr(torch, name), device=dev)
    wt = None if w is None else torch.as_tensor(per_cloud(w, M, 2), dtype=X3.dtype, device=dev)
    kernel = resolve_kernel(kernel, att, X3, wt)
    out = kernel_function(kernel, att)(X3, att, weights=wt)
    if not bool(torch.isfinite(out).all()):
        raise FloatingPointError(f"kernel {kernel!r} returned NaN or inf (beta = {att.beta:g}, dtype {name})")
    if M is None:
        out = out[0]
    return out.to(X.device) if isinstance(X, torch.Tensor) else out.cpu().numpy()


__all__ = [
    "DTYPES",
    "KERNELS",
    "CostModel",
    "KernelSpec",
    "check_dtype",
    "check_kernel_name",
    "get_kernel",
    "kernel_function",
    "plain",
    "resolve_kernel",
    "velocity",
]
