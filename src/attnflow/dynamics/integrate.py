"""Integrators on the sphere for dx_i/dt = v(X)_i (MATH.md, "Finite temperature").

Fixed-step "euler", "heun", "rk4" and the adaptive embedded pair Dormand-Prince 5(4) ("adaptive"),
each step followed by renormalisation of the rows (a projection method: the sphere is invariant
under the field extended to R^d, so the order of the underlying Runge-Kutta method is kept).
Explicit Euler with renormalisation is exactly one transformer layer with layer normalisation:
x <- (x + h v) / |x + h v|.

The state stays a torch tensor (M, N, d) on the compute device during the integration; the saved
states go into one array allocated up front (its size checked against the memory available).
This module is `simulate`'s arguments, set-up and result; the steppers and their run loops live in
`_steppers` (AUTO_EVERY and the Dormand-Prince pieces stay importable from here).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import (
    check_device,
    check_points,
    check_positive,
    check_rtol_for_dtype,
    check_saved_memory,
    check_times,
    check_weights,
)
from .._threads import DEFAULT_THREADS, check_threads, torch_threads
from ..attention import Attention
from ..kernels import batch_size, check_dtype, check_kernel_name, per_cloud, rows, unless_uniform
from ..progress import time_bar
from .arguments import OPTIONS, check_attentions, check_betas, deprecated_keywords, solver_options
from .steppers import Field, run_adaptive, run_fixed
from .trajectory import Trajectory

__all__ = ["METHODS", "OPTIONS", "ORDERS", "simulate"]

METHODS = tuple(OPTIONS)  # "euler", "heun", "rk4", "adaptive"
ORDERS = {"euler": 1, "heun": 2, "rk4": 4, "adaptive": 5}


class _Saved:
    """The saved states, written one by one into an array allocated once: NumPy on the host, or a
    torch tensor on `device` (torch output)."""

    def __init__(self, shape: tuple[int, ...], dtype, device=None):
        import torch

        if device is None:
            self.x: Any = np.empty(shape, dtype=str(dtype).removeprefix("torch."))
        else:
            self.x = torch.empty(shape, dtype=dtype, device=device)
        self.k = 0

    def __call__(self, X) -> None:
        if isinstance(self.x, np.ndarray):
            self.x[self.k] = X.detach().cpu().numpy()
        else:
            self.x[self.k].copy_(X)
        self.k += 1


def simulate(
    X0: Any,
    att: Attention | Sequence[Attention],
    times: Any,
    method: str = "rk4",
    dt: float = 1e-2,
    kernel: str = "auto",
    weights: Any = None,
    device: Any = None,
    *,
    options: Mapping[str, Any] | None = None,
    dtype: Any = "float64",
    normalize: bool = False,
    progress: bool | Callable[[float, float], Any] | None = None,
    threads: int = DEFAULT_THREADS,
    **deprecated: Any,
) -> Trajectory:
    """Integrate the token dynamics dx_i/dt = P_{x_i}^perp(sum_j w_ij V x_j) from X0 at t = 0.

    X0: (N, d) or (M, N, d) unit rows (error unless normalize=True); NumPy, list or torch tensor.
    att: an Attention, or a list of M Attention objects that differ only in beta (one per cloud,
    integrated together in one kernel call per stage: [att.with_beta(b) for b in betas]; X0 (N, d)
    is then shared by all).  All clouds share the steps (the adaptive step is that of the hardest
    one), so several betas pay off only where one call on M clouds is much cheaper than M calls:
    small N (docs/benchmarks.md, "Several betas").
    times: non-decreasing output times >= 0 (times[0] may be > 0: X0 is the state at t = 0).
    method: "euler", "heun", "rk4" (fixed step dt, the last step before each output time shortened
    to land on it) or "adaptive" (Dormand-Prince 5(4): the RMS over tokens and coordinates of the
    local error, each token's divided by atol + rtol |x_i| with |x_i| = 1, is kept below 1, so
    rtol + atol is a tolerance on positions in the sphere's own scale, the same in every frame).
    kernel: "auto" (re-decided every AUTO_EVERY steps), "sdpa", "blocked", "zero", "truncated".
    weights: (N,) or (M, N) quadrature weights w_j > 0 summing to 1 (rho = sum_j w_j delta_{x_j},
    MATH.md "Weighted measures"); they stay as they are while the tokens move (mass is carried
    along characteristics) and come back in `Trajectory.weights`.  None: uniform.
    device: where to compute: None (X0's device for a torch tensor, else the CPU), "cpu", "cuda",
    "cuda:<k>" or a torch.device; an unavailable one is a ValueError.
    options: the method's solver settings (OPTIONS): fixed steps {"max_steps"}; adaptive {"rtol"
    (1e-6), "atol" (1e-9), "max_steps" (1e7), "first_step" (automatic)}; another key is a
    ValueError.  float32 needs rtol >= 1e-5 (`_checks.check_rtol_for_dtype`).
    dtype: "float64" or "float32".
    progress: True for a progress bar over t (tqdm's notebook bar in Jupyter, Rich on stderr
    elsewhere), None or False for none, or a callable progress(t, t_final), called now and then.
    threads: torch CPU threads for this call (default 1; 0: torch's setting), restored afterwards:
    the package's one thread policy (docs/guide.md, "Threads").
    Deprecated: the flat rtol=, atol=, max_steps= (use options) and betas= (it overrides att.beta:
    pass a list of Attention objects), each with a DeprecationWarning.
    Returns Trajectory(t=times (T,), x (T, N, d), or (T, M, N, d) for a batch, weights, info): x is
    NumPy for NumPy input and a torch tensor on X0's device for torch input; a saved array larger
    than SAVE_MEMORY_FRACTION of the available memory is refused before the run (ValueError).
    info = method, kernel (resolved), dt or rtol/atol, n_steps, n_rejected, n_evals, wall_time_s,
    dtype, device, beta (or betas).
    """
    threads = check_threads(threads)
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise TypeError(
            "progress must be a callable progress(t, t_final), True (a progress bar) or None/False "
            f"(silent), got {progress!r}"
        )
    with torch_threads(threads), time_bar(progress, "simulate") as callback:
        return _simulate(
            X0,
            att,
            times,
            method,
            dt,
            kernel,
            weights,
            device,
            options=options,
            dtype=dtype,
            normalize=normalize,
            progress=callback,
            **deprecated,
        )


def _simulate(
    X0: Any,
    att: Attention | Sequence[Attention],
    times: Any,
    method: str,
    dt: float,
    kernel: str,
    weights: Any,
    device: Any,
    *,
    options: Mapping[str, Any] | None,
    dtype: Any,
    normalize: bool,
    progress: Callable[[float, float], Any] | None,
    **deprecated: Any,
) -> Trajectory:
    """`simulate` with its thread count set and `progress` a callback or None."""
    import torch

    options, old_betas = deprecated_keywords(method if method in METHODS else "rk4", options, deprecated)
    att, betas = check_attentions(att)
    is_torch = isinstance(X0, torch.Tensor)
    dev = check_device(device, X0)
    X0n = check_points(X0, "X0", d=att.d, normalize=normalize)
    if old_betas is not None:
        if betas is not None:
            raise ValueError("betas= and a list of Attention objects both set the betas: give the list only")
        betas = check_betas(old_betas, X0n).tolist()
        att = att.with_beta(betas[0])
    t_out = check_times(times)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    kernel = check_kernel_name(kernel)
    name = check_dtype(dtype)
    dt = check_positive(dt, "dt")
    opts = solver_options(method, options)
    if method == "adaptive":
        check_rtol_for_dtype(opts["rtol"], name, method)
    N = X0n.shape[-2]
    w = None if weights is None else check_weights(weights, N)
    M = batch_size(
        X0=X0n.shape[0] if X0n.ndim == 3 else None,
        att=None if betas is None else len(betas),
        weights=rows(w),
    )
    shape = (len(t_out), *((M,) if M is not None else ()), N, att.d)
    out_device = X0.device if is_torch else None
    check_saved_memory(len(t_out), shape[1:], 4 if name == "float32" else 8, out_device)

    wall0 = _time.perf_counter()
    tdtype = getattr(torch, name)
    X = torch.as_tensor(per_cloud(X0n, M, 3), dtype=tdtype, device=dev)
    w_kernel = unless_uniform(w)
    wt = None if w_kernel is None else torch.as_tensor(per_cloud(w_kernel, M, 2), dtype=tdtype, device=dev)
    if betas is not None and len(set(betas)) == 1:  # one beta for all: no per-cloud betas needed
        att, betas = att.with_beta(betas[0]), None
    bt = None if betas is None else torch.tensor(betas, dtype=tdtype, device=dev)
    f = Field(att, kernel, X, bt, wt)
    saved = _Saved((len(t_out), *X.shape), tdtype if is_torch else name, out_device)
    if progress is not None:
        progress(0.0, float(t_out[-1]))
    if method == "adaptive":
        n_steps, n_rejected = run_adaptive(
            f, X, t_out, opts["rtol"], opts["atol"], opts["max_steps"], opts["first_step"], saved, progress
        )
    else:
        n_steps = run_fixed(method, f, X, t_out, dt, opts["max_steps"], saved, progress)
        n_rejected = 0

    x = saved.x if M is not None else saved.x[:, 0]
    info: dict[str, Any] = {
        "method": method,
        "kernel": f.name,
        "kernel_requested": kernel,
        "kernel_evals": dict(f.used),
        "n_steps": n_steps,
        "n_rejected": n_rejected,
        "n_evals": f.n_evals,
        "wall_time_s": _time.perf_counter() - wall0,
        "dtype": name,
        "device": str(dev),
        "beta": att.beta if betas is None else None,
    }
    if betas is not None:
        info["betas"] = list(betas)
    if method == "adaptive":
        info.update(rtol=opts["rtol"], atol=opts["atol"])
    else:
        info["dt"] = dt
    return Trajectory(t=t_out.copy(), x=x, info=info, weights=w)
