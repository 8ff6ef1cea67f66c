"""Integrators on the sphere for dx_i/dt = v(X)_i (MATH.md, "Finite temperature").

Fixed-step "euler", "heun", "rk4" and the adaptive embedded pair Dormand-Prince 5(4) ("adaptive"),
each step followed by renormalisation of the rows (a projection method: the sphere is invariant
under the field extended to R^d, so the order of the underlying Runge-Kutta method is kept).
Explicit Euler with renormalisation is exactly one transformer layer with layer normalisation:
x <- (x + h v) / |x + h v|.

A `Dynamics` (attnflow.flow) is integrated the same way: its tokens in R^d (layer_norm "pre",
"peri") are not renormalised; its noise (sigma > 0) makes each fixed step a drift step, a Brownian
kick and a projection (steppers.Noise; seeded by `seed`); its redrawn weights (`Redraw`) make the
run a sequence of segments of length `period`, each with the weights of its segment, the state
carried over.

The state stays a torch tensor (M, N, d) on the compute device during the integration; the saved
states go into one array allocated up front (its size checked against the memory available).
This module is `simulate`: its checked arguments (`_Clouds`, `_Numerics`; the per-concern checks live
in `arguments`), the set-up and the result; the steppers and their run loops live in `steppers`.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

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
from ..flow import Dynamics
from ..kernels import batch_size, check_dtype, check_kernel_name, per_cloud, rows, unless_uniform
from ..progress import time_bar
from ._segments import LastSave, segments
from .arguments import (
    OPTIONS,
    Temperatures,
    check_attentions,
    noise_seed,
    solver_options,
)
from .steppers import AdaptiveSettings, Field, Noise, Output, Steps, run_adaptive, run_fixed
from .trajectory import Trajectory
from .work import check_work

if TYPE_CHECKING:
    import torch

__all__ = ["METHODS", "OPTIONS", "ORDERS", "SDE_ORDERS", "simulate"]

METHODS = tuple(OPTIONS)  # "euler", "heun", "rk4", "adaptive"
ORDERS = {"euler": 1, "heun": 2, "rk4": 4, "adaptive": 5}
#: the noisy scheme (any fixed-step drift, then the kick and the projection): strong and weak orders
SDE_ORDERS = {"strong": 0.5, "weak": 1.0}
SDE_SCHEME = "step then project: the method's drift step, sigma P_y^perp dW at its end y, back to |y|"
COMMON_SCHEME = "step then turn: the method's drift step, renormalised, then the rotation expm(sigma dW)"


class _Saved:
    """The saved states, written one by one into an array allocated once: NumPy on the host, or a
    torch tensor on `device` (torch output)."""

    def __init__(
        self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | None = None
    ) -> None:
        import torch

        if device is None:
            self.x: np.ndarray | torch.Tensor = np.empty(shape, dtype=str(dtype).removeprefix("torch."))
        else:
            self.x = torch.empty(shape, dtype=dtype, device=device)
        self.k = 0

    def __call__(self, X: torch.Tensor) -> None:
        if isinstance(self.x, np.ndarray):
            self.x[self.k] = X.detach().cpu().numpy()
        else:
            self.x[self.k].copy_(X)
        self.k += 1


def simulate(
    X0: ArrayLike | torch.Tensor,
    att: Attention | Dynamics | Sequence[Attention | Dynamics],
    times: ArrayLike,
    method: str = "rk4",
    dt: float = 1e-2,
    kernel: str = "auto",
    weights: ArrayLike | None = None,
    device: str | torch.device | None = None,
    *,
    options: Mapping[str, float | str | None] | None = None,
    dtype: DTypeLike | torch.dtype = "float64",
    normalize: bool = False,
    progress: bool | Callable[[float, float], object] | None = None,
    threads: int = DEFAULT_THREADS,
    seed: int | np.random.Generator | None = None,
    force: bool = False,
) -> Trajectory:
    """Integrate the token dynamics dx_i/dt = P_{x_i}^perp(sum_j w_ij V x_j) from X0 at t = 0.

    Parameters
    ----------
    X0 : array (N, d) or (M, N, d)
        Unit rows (error unless normalize=True); NumPy, list or torch tensor.
    att : Attention, Dynamics, or a list of them
        An Attention, or a list of M Attention objects that differ only in beta (one per cloud, integrated
        together in one kernel call per stage: [att.with_beta(b) for b in betas]; X0 (N, d) is then shared
        by all).  All clouds share the steps (the adaptive step is that of the hardest one), so several
        betas pay off only where one call on M clouds is much cheaper than M calls: small N
        (docs/benchmarks.md, "Several betas").  A Dynamics (attnflow.flow: several heads, a causal mask,
        unnormalised attention, another layer norm, noise, redrawn weights), or a list of them differing
        only in beta, is integrated as docs/math.md ("Beyond the single head") defines it; a Dynamics that
        is the paper's flow is its Attention (the same run, bit for bit).  Tokens of layer_norm "pre" and
        "peri" live in R^d: x comes back unnormalised (r = |x|, the direction x/|x|).
    times : array (T,)
        Non-decreasing output times >= 0 (times[0] may be > 0: X0 is the state at t = 0).
    method, dt : str, float
        "euler", "heun", "rk4" (fixed step dt, the last step before each output time shortened to land on
        it) or "adaptive" (Dormand-Prince 5(4): the RMS over tokens and coordinates of the local error,
        each token's divided by atol + rtol |x_i| with |x_i| = 1, is kept below 1, so rtol + atol is a
        tolerance on positions in the sphere's own scale, the same in every frame).
    kernel : str
        "auto" (re-decided every AUTO_EVERY steps), "sdpa", "blocked", "zero", "truncated".
    weights : array (N,) or (M, N), optional
        Quadrature weights w_j > 0 summing to 1 (rho = sum_j w_j delta_{x_j}, MATH.md "Weighted
        measures"); they stay as they are while the tokens move (mass is carried along characteristics)
        and come back in `Trajectory.weights`.  None: uniform.
    device : optional
        Where to compute: None (X0's device for a torch tensor, else the CPU), "cpu", "cuda", "cuda:<k>"
        or a torch.device; an unavailable one is a ValueError.
    options : dict, optional
        The method's solver settings (OPTIONS): fixed steps {"max_steps"}; adaptive {"rtol" (1e-6), "atol"
        (1e-9), "max_steps" (1e7), "first_step" (automatic), "norm" ("rms" over tokens and coordinates, or
        "max": every token within the tolerance)}; another key is a ValueError. float32 needs rtol >= 1e-5
        (`_checks.check_rtol_for_dtype`).
    dtype : str
        "float64" or "float32".
    progress : bool or callable, optional
        True for a progress bar over t (tqdm's notebook bar in Jupyter, Rich on stderr elsewhere), None or
        False for none, or a callable progress(t, t_final), called now and then.
    threads : int
        Torch CPU threads for this call (default 1; 0: torch's setting), restored afterwards: the
        package's one thread policy (docs/guide.md, "Threads").
    seed : int or numpy.random.Generator, optional
        The seed of the noise of a Dynamics with noise > 0 (an int >= 0 or a NumPy Generator; None: 0):
        the same seed gives the same path. Noise needs a fixed-step method; the scheme has strong order
        1/2 and weak order 1 (SDE_ORDERS).
    force : bool
        Run even what is estimated to take more than a day on these threads (`dynamics.work`: t_final / dt
        steps of a fixed-step method, each kernel evaluation priced by the kernels' cost model); without
        it such a run is refused before its first step, with the estimate. A fixed-step run of more than
        options["max_steps"] steps is refused before its first step, force or not.

    Returns
    -------
    Trajectory
        t=times (T,), x (T, N, d), or (T, M, N, d) for a batch, weights, info: x is NumPy for NumPy input
        and a torch tensor on X0's device for torch input; a saved array larger than SAVE_MEMORY_FRACTION
        of the available memory is refused before the run (ValueError). info = method, kernel (resolved),
        dt or rtol/atol, n_steps, n_rejected, n_evals, wall_time_s, dtype, device, beta (or betas); for a
        Dynamics also model, layer_norm, noise (with seed and sde_scheme), redraw_period and segments.
    """
    threads = check_threads(threads)
    with torch_threads(threads), time_bar(progress, "simulate") as callback:
        clouds = _check_clouds(X0, att, device, normalize)
        t_out = check_times(times)
        numerics = _check_numerics(method, dt, kernel, dtype, options)
        _check_steps(t_out, numerics)
        clouds = _weighted(clouds, weights)
        noise = _noise(clouds.temps.att, numerics, seed)
        itemsize = 4 if numerics.dtype == "float32" else 8
        check_saved_memory(len(t_out), clouds.shape, itemsize, clouds.out_device)
        check_work(clouds.X0, clouds.shape, clouds.temps.att, float(t_out[-1]), numerics, force)
        return _simulate(clouds, t_out, numerics, callback, noise)


@dataclass(frozen=True)
class _Clouds:
    """simulate's initial clouds, checked: X0 (N, d) or (M, N, d) float64 unit rows, who moves them,
    where to compute (a torch.device) and where the result goes (X0's device for torch input, None:
    NumPy); their weights (N,) or (M, N) (None: uniform) and the batch size M (None: one cloud)."""

    X0: np.ndarray
    temps: Temperatures
    device: torch.device
    out_device: torch.device | None
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


def _check_clouds(
    X0: ArrayLike | torch.Tensor,
    att: Attention | Dynamics | Sequence[Attention | Dynamics],
    device: str | torch.device | None,
    normalize: bool,
) -> _Clouds:
    """X0, att (one Attention or a list) and device, checked."""
    import torch

    temps = check_attentions(att)
    dev = check_device(device, X0)
    X0n = check_points(X0, "X0", d=temps.att.d, normalize=normalize)
    out_device = X0.device if isinstance(X0, torch.Tensor) else None
    return _Clouds(X0n, temps, dev, out_device)


def _check_numerics(
    method: str,
    dt: float,
    kernel: str,
    dtype: DTypeLike | torch.dtype,
    options: Mapping[str, float | str | None] | None,
) -> _Numerics:
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


def _check_steps(times: np.ndarray, numerics: _Numerics) -> None:
    """Refuse, before integrating, a fixed-step run whose t_final / dt steps exceed options['max_steps']
    (the adaptive method's step count is known only as it runs: max_steps stops it there)."""
    if numerics.method == "adaptive":
        return
    limit, steps = numerics.options["max_steps"], float(times[-1]) / numerics.dt
    if steps > limit:
        raise ValueError(
            f"times up to t = {float(times[-1]):.6g} at dt = {numerics.dt:g} take {steps:.3g} steps, more "
            f"than options['max_steps'] = {limit}: shorten the times, take a larger dt, or raise max_steps"
        )


def _noise(
    model: Attention | Dynamics, numerics: _Numerics, seed: int | np.random.Generator | None
) -> Noise | None:
    """The noise of a Dynamics with noise > 0 (fixed steps only), seeded; None without noise."""
    seed = noise_seed(seed)
    sigma = getattr(model, "noise", 0.0)
    if not sigma:
        return None
    if numerics.method == "adaptive":
        raise ValueError(
            f"noise = {sigma:g} needs a fixed-step method (euler, heun or rk4), not 'adaptive': the noisy "
            "scheme is a step of dt, a Brownian kick and a projection"
        )
    return Noise(sigma, seed, getattr(model, "noise_kind", "independent"))


def _weighted(clouds: _Clouds, weights: ArrayLike | None) -> _Clouds:
    """The clouds with their checked weights and their common batch size."""
    w = None if weights is None else check_weights(weights, clouds.X0.shape[-2])
    M = batch_size(
        X0=clouds.X0.shape[0] if clouds.X0.ndim == 3 else None,
        att=clouds.temps.count,
        weights=rows(w),
    )
    return replace(clouds, weights=w, M=M)


def _field(clouds: _Clouds, kernel: str, X: torch.Tensor, segment: int = 0) -> Field:
    """The velocity field of the state X (M, N, d): the kernel's, with the weights and the betas as
    tensors beside X (uniform weights and one beta for all need none); with redrawn weights, that
    of the given segment."""
    import torch

    w, betas = unless_uniform(clouds.weights), clouds.temps.betas
    wt = None if w is None else torch.as_tensor(per_cloud(w, clouds.M, 2), dtype=X.dtype, device=X.device)
    bt = None if betas is None else torch.tensor(betas, dtype=X.dtype, device=X.device)
    model = clouds.temps.att
    if isinstance(model, Dynamics):
        model = model.segment(segment)
    return Field(model, kernel, X, bt, wt)


def _run(numerics: _Numerics, f: Field, X: torch.Tensor, out: Output, noise: Noise | None = None) -> Steps:
    """The run loop of the method."""
    opts = numerics.options
    if numerics.method == "adaptive":
        return run_adaptive(f, X, out, AdaptiveSettings(**opts))
    return run_fixed(numerics.method, f, X, out, numerics.dt, opts["max_steps"], noise)


@dataclass
class _Tally:
    """What the fields and run loops of every segment did, added up."""

    name: str = ""
    used: dict[str, int] | None = None
    n_evals: int = 0
    n_steps: int = 0
    n_rejected: int = 0
    segments: int = 0

    def add(self, f: Field, steps: Steps) -> None:
        self.name, self.used = f.name, {**(self.used or {})}
        for k, v in f.used.items():
            self.used[k] = self.used.get(k, 0) + v
        self.n_evals += f.n_evals
        self.n_steps += steps.n_steps
        self.n_rejected += steps.n_rejected
        self.segments += 1


def _run_segments(
    clouds: _Clouds, t_out: np.ndarray, numerics: _Numerics, X: torch.Tensor, out: Output, noise: Noise | None
) -> _Tally:
    """Every segment of the run (one without redrawn weights), the state carried from one to the next."""
    model = clouds.temps.att
    redraw = model.redraw if isinstance(model, Dynamics) else None
    tally = _Tally()
    for seg in segments(t_out, redraw.period if redraw is not None else math.inf):
        times = t_out[seg.saves]
        if seg.end > float(times[-1]) if len(times) else True:
            times = np.append(times, seg.end)  # the segment's end: its state starts the next
        save = LastSave(out.save, len(seg.saves))
        f = _field(clouds, numerics.kernel, X, seg.k)
        steps = _run(numerics, f, X, Output(times, save, out.progress, seg.start), noise)
        tally.add(f, steps)
        assert save.X is not None  # the segment saved the state at its end
        X = save.X
    return tally


def _info(
    numerics: _Numerics, clouds: _Clouds, f: _Tally, wall_time_s: float, noise: Noise | None
) -> dict[str, Any]:
    """Trajectory.info: what was run and what it took."""
    temps = clouds.temps
    info: dict[str, Any] = {
        "method": numerics.method,
        "kernel": f.name,
        "kernel_requested": numerics.kernel,
        "kernel_evals": dict(f.used or {}),
        "n_steps": f.n_steps,
        "n_rejected": f.n_rejected,
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
    if isinstance(temps.att, Dynamics):
        info.update(_model_info(temps.att, f, noise))
    return info


def _model_info(model: Dynamics, f: _Tally, noise: Noise | None) -> dict[str, Any]:
    """What Trajectory.info says of a Dynamics beyond the single head."""
    info: dict[str, Any] = {"model": model.describe(), "layer_norm": model.layer_norm, "noise": model.noise}
    if noise is not None:
        scheme = SDE_SCHEME if noise.kind == "independent" else COMMON_SCHEME
        info.update(seed=noise.seed, noise_kind=noise.kind, sde_scheme=scheme, sde_orders=dict(SDE_ORDERS))
    if model.normalization == "usa":
        info["usa_time"] = model.usa_time
        info["log_time_scale"] = model.log_time_scale()
    if model.redraw is not None:
        info.update(redraw_period=model.redraw.period, segments=f.segments)
    return info


def _simulate(
    clouds: _Clouds,
    t_out: np.ndarray,
    numerics: _Numerics,
    progress: Callable[[float, float], object] | None,
    noise: Noise | None = None,
) -> Trajectory:
    """The run of checked arguments: state, field and saved array set up, the run loops, the result."""
    import torch

    wall0 = _time.perf_counter()
    tdtype = getattr(torch, numerics.dtype)
    X = torch.as_tensor(per_cloud(clouds.X0, clouds.M, 3), dtype=tdtype, device=clouds.device)
    clouds = replace(clouds, temps=clouds.temps.collapsed())
    saved = _Saved((len(t_out), *X.shape), tdtype, clouds.out_device)
    out = Output(t_out, saved, progress)
    out.report(0.0)
    tally = _run_segments(clouds, t_out, numerics, X, out, noise)
    x = saved.x if clouds.M is not None else saved.x[:, 0]
    info = _info(numerics, clouds, tally, _time.perf_counter() - wall0, noise)
    return Trajectory(t=t_out.copy(), x=x, info=info, weights=clouds.weights)
