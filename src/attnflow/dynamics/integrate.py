"""Integrators on the sphere for dx_i/dt = v(X)_i (MATH.md, "Finite temperature").

Fixed-step "euler", "heun", "rk4" and the adaptive embedded pair Dormand-Prince 5(4) ("adaptive"),
each step followed by renormalisation of the rows (a projection method: the sphere is invariant
under the field extended to R^d, so the order of the underlying Runge-Kutta method is kept).
Explicit Euler with renormalisation is exactly one transformer layer with layer normalisation:
x <- (x + h v) / |x + h v|.

The state stays a torch tensor (M, N, d) on the compute device during the integration; the saved
states go into one array allocated up front (its size checked against the memory available).
This module is `simulate`: its checked arguments (`_Clouds`, `_Numerics`; the per-concern checks live
in `arguments`), the set-up and the result; the steppers and their run loops live in `steppers`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
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
from .arguments import (
    OPTIONS,
    Temperatures,
    check_attentions,
    deprecated_betas,
    deprecated_options,
    solver_options,
)
from .steppers import AdaptiveSettings, Field, Output, Steps, run_adaptive, run_fixed
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
    (1e-6), "atol" (1e-9), "max_steps" (1e7), "first_step" (automatic), "norm" ("rms" over tokens
    and coordinates, or "max": every token within the tolerance)}; another key is a ValueError.
    float32 needs rtol >= 1e-5 (`_checks.check_rtol_for_dtype`).
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
    with torch_threads(threads), time_bar(progress, "simulate") as callback:
        options = deprecated_options(method if method in METHODS else "rk4", options, deprecated)
        clouds = _check_clouds(X0, att, device, normalize, deprecated.get("betas"))
        t_out = check_times(times)
        numerics = _check_numerics(method, dt, kernel, dtype, options)
        clouds = _weighted(clouds, weights)
        itemsize = 4 if numerics.dtype == "float32" else 8
        check_saved_memory(len(t_out), clouds.shape, itemsize, clouds.out_device)
        return _simulate(clouds, t_out, numerics, callback)


@dataclass(frozen=True)
class _Clouds:
    """simulate's initial clouds, checked: X0 (N, d) or (M, N, d) float64 unit rows, who moves them,
    where to compute (a torch.device) and where the result goes (X0's device for torch input, None:
    NumPy); their weights (N,) or (M, N) (None: uniform) and the batch size M (None: one cloud)."""

    X0: np.ndarray
    temps: Temperatures
    device: Any
    out_device: Any
    weights: np.ndarray | None = None
    M: int | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one saved state: (N, d) or (M, N, d)."""
        return (*((self.M,) if self.M is not None else ()), self.X0.shape[-2], self.temps.att.d)


@dataclass(frozen=True)
class _Numerics:
    """How to integrate: the method, the kernel ("auto" or a name), the dtype's name, the fixed step
    dt and the method's solver options (`arguments.solver_options`)."""

    method: str
    kernel: str
    dtype: str
    dt: float
    options: dict[str, Any]


def _check_clouds(X0: Any, att: Any, device: Any, normalize: bool, old_betas: Any) -> _Clouds:
    """X0, att (one Attention or a list), device and the deprecated betas=, checked."""
    import torch

    temps = check_attentions(att)
    dev = check_device(device, X0)
    X0n = check_points(X0, "X0", d=temps.att.d, normalize=normalize)
    temps = deprecated_betas(temps, old_betas, X0n)
    out_device = X0.device if isinstance(X0, torch.Tensor) else None
    return _Clouds(X0n, temps, dev, out_device)


def _check_numerics(method: Any, dt: Any, kernel: Any, dtype: Any, options: Any) -> _Numerics:
    """method, kernel, dtype, dt and options checked, in that order; float32 needs a loose rtol."""
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    kernel = check_kernel_name(kernel)
    name = check_dtype(dtype)
    dt = check_positive(dt, "dt")
    opts = solver_options(method, options)
    if method == "adaptive":
        check_rtol_for_dtype(opts["rtol"], name, method)
    return _Numerics(method, kernel, name, dt, opts)


def _weighted(clouds: _Clouds, weights: Any) -> _Clouds:
    """The clouds with their checked weights and their common batch size."""
    w = None if weights is None else check_weights(weights, clouds.X0.shape[-2])
    M = batch_size(
        X0=clouds.X0.shape[0] if clouds.X0.ndim == 3 else None,
        att=clouds.temps.count,
        weights=rows(w),
    )
    return replace(clouds, weights=w, M=M)


def _field(clouds: _Clouds, kernel: str, X) -> Field:
    """The velocity field of the state X (M, N, d): the kernel's, with the weights and the betas as
    tensors beside X (uniform weights and one beta for all need none)."""
    import torch

    w, betas = unless_uniform(clouds.weights), clouds.temps.betas
    like = {"dtype": X.dtype, "device": X.device}
    wt = None if w is None else torch.as_tensor(per_cloud(w, clouds.M, 2), **like)
    bt = None if betas is None else torch.tensor(betas, **like)
    return Field(clouds.temps.att, kernel, X, bt, wt)


def _run(numerics: _Numerics, f: Field, X, out: Output) -> Steps:
    """The run loop of the method."""
    opts = numerics.options
    if numerics.method == "adaptive":
        return run_adaptive(f, X, out, AdaptiveSettings(**opts))
    return run_fixed(numerics.method, f, X, out, numerics.dt, opts["max_steps"])


def _info(numerics: _Numerics, clouds: _Clouds, f: Field, steps: Steps, wall_time_s: float) -> dict:
    """Trajectory.info: what was run and what it took."""
    temps = clouds.temps
    info: dict[str, Any] = {
        "method": numerics.method,
        "kernel": f.name,
        "kernel_requested": numerics.kernel,
        "kernel_evals": dict(f.used),
        "n_steps": steps.n_steps,
        "n_rejected": steps.n_rejected,
        "n_evals": f.n_evals,
        "wall_time_s": wall_time_s,
        "dtype": numerics.dtype,
        "device": str(clouds.device),
        "beta": temps.att.beta if temps.betas is None else None,
    }
    if temps.betas is not None:
        info["betas"] = list(temps.betas)
    if numerics.method == "adaptive":
        info.update(rtol=numerics.options["rtol"], atol=numerics.options["atol"])
        if numerics.options["norm"] != "rms":
            info["norm"] = numerics.options["norm"]
    else:
        info["dt"] = numerics.dt
    return info


def _simulate(
    clouds: _Clouds, t_out: np.ndarray, numerics: _Numerics, progress: Callable[[float, float], Any] | None
) -> Trajectory:
    """The run of checked arguments: state, field and saved array set up, one run loop, the result."""
    import torch

    wall0 = _time.perf_counter()
    tdtype = getattr(torch, numerics.dtype)
    X = torch.as_tensor(per_cloud(clouds.X0, clouds.M, 3), dtype=tdtype, device=clouds.device)
    clouds = replace(clouds, temps=clouds.temps.collapsed())
    f = _field(clouds, numerics.kernel, X)
    is_torch = clouds.out_device is not None
    saved = _Saved((len(t_out), *X.shape), tdtype if is_torch else numerics.dtype, clouds.out_device)
    out = Output(t_out, saved, progress)
    out.report(0.0)
    steps = _run(numerics, f, X, out)
    x = saved.x if clouds.M is not None else saved.x[:, 0]
    info = _info(numerics, clouds, f, steps, _time.perf_counter() - wall0)
    return Trajectory(t=t_out.copy(), x=x, info=info, weights=clouds.weights)
