"""Integrators on the sphere for dx_i/dt = v(X)_i (MATH.md, "Finite temperature").

Fixed-step "euler", "heun", "rk4" and the adaptive embedded pair Dormand-Prince 5(4) ("adaptive"),
each step followed by renormalisation of the rows (a projection method: the sphere is invariant
under the field extended to R^d, so the order of the underlying Runge-Kutta method is kept).
Explicit Euler with renormalisation is exactly one transformer layer with layer normalisation:
x <- (x + h v) / |x + h v|.

The state stays a torch tensor (M, N, d) during the integration; NumPy only at the entry and exit.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable
from typing import Any

from ._checks import check_points, check_positive, check_times
from .kernels import check_attention, check_dtype, check_kernel_name, get_kernel, resolve_kernel
from .model import Attention
from .trajectory import Trajectory

METHODS = ("euler", "heun", "rk4", "adaptive")
ORDERS = {"euler": 1, "heun": 2, "rk4": 4, "adaptive": 5}
AUTO_EVERY = 50  # steps between two decisions of kernel="auto"
PROGRESS_EVERY = 100  # steps between two calls of the progress callback (also at every save time)

# Dormand-Prince 5(4) tableau (Hairer, Norsett, Wanner, Solving ODEs I, Table 5.2)
_DP_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)  # order 5 (= last row of A)
_DP_E = (  # b5 - b4, b4 the embedded 4th-order weights
    71 / 57600,
    0.0,
    -71 / 16695,
    71 / 1920,
    -17253 / 339200,
    22 / 525,
    -1 / 40,
)


class _Field:
    """The velocity field with evaluation counting and, for kernel="auto", periodic re-decisions."""

    def __init__(self, att: Attention, kernel: str, X):
        self.att = att
        self.auto = kernel == "auto"
        self.requested = kernel
        self.n_evals = 0
        self.used: dict[str, int] = {}
        self._set(resolve_kernel(kernel, att, X))

    def _set(self, name: str) -> None:
        self.name = name
        self.fn = get_kernel(name)

    def maybe_redecide(self, X) -> None:
        if self.auto:
            name = resolve_kernel("auto", self.att, X)
            if name != self.name:
                self._set(name)

    def __call__(self, X):
        self.n_evals += 1
        self.used[self.name] = self.used.get(self.name, 0) + 1
        return self.fn(X, self.att)


def _normalize_rows(X):
    return X / X.norm(dim=-1, keepdim=True)


def _check_finite(X, t: float, field: _Field) -> None:
    import torch

    if not bool(torch.isfinite(X).all()):
        raise FloatingPointError(
            f"the state became NaN or inf at t = {t:.6g} (kernel {field.name!r}, beta = {field.att.beta:g})"
        )


def _step_fixed(method: str, f: _Field, X, h: float):
    """One renormalised step of size h."""
    k1 = f(X)
    if method == "euler":
        Y = X + h * k1
    elif method == "heun":
        k2 = f(X + h * k1)
        Y = X + (h / 2) * (k1 + k2)
    else:  # rk4
        k2 = f(X + (h / 2) * k1)
        k3 = f(X + (h / 2) * k2)
        k4 = f(X + h * k3)
        Y = X + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
    return _normalize_rows(Y)


def _initial_step(f: _Field, X, k1, rtol: float, atol: float, span: float) -> float:
    """Starting step size (Hairer, Norsett, Wanner, II.4), capped by the span to integrate."""
    sc = atol + rtol * X.abs()
    d0 = float((X / sc).pow(2).mean().sqrt())
    d1 = float((k1 / sc).pow(2).mean().sqrt())
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    h0 = min(h0, span)
    k2 = f(X + h0 * k1)
    d2 = float(((k2 - k1) / sc).pow(2).mean().sqrt()) / h0
    dm = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if dm <= 1e-15 else (0.01 / dm) ** (1 / 5)
    return min(100 * h0, h1, span)


def simulate(
    X0: Any,
    att: Attention,
    times: Any,
    method: str = "rk4",
    dt: float = 1e-2,
    kernel: str = "auto",
    rtol: float = 1e-6,
    atol: float = 1e-9,
    dtype: Any = "float64",
    normalize: bool = False,
    progress: Callable[[float, float], Any] | None = None,
    max_steps: int = 10_000_000,
) -> Trajectory:
    """Integrate the token dynamics dx_i/dt = P_{x_i}^perp(sum_j w_ij V x_j) from X0 at t = 0.

    X0: (N, d) or (M, N, d) unit rows (error unless normalize=True); att: Attention.
    times: non-decreasing output times >= 0 (times[0] may be > 0: X0 is the state at t = 0).
    method: "euler", "heun", "rk4" (fixed step dt, the last step before each output time shortened
    to land on it) or "adaptive" (Dormand-Prince 5(4), error control with rtol/atol).
    kernel: "auto" (re-decided every AUTO_EVERY steps), "sdpa", "blocked", "zero", "truncated".
    dtype: "float64" or "float32"; progress: callable progress(t, t_final), called now and then.
    Returns Trajectory(t=times (T,), x (T, N, d) or (T, M, N, d), info) with info = method, kernel
    (resolved), dt or rtol/atol, n_steps, n_rejected, n_evals, wall_time_s, dtype.
    """
    import torch

    att = check_attention(att)
    X0n = check_points(X0, "X0", d=att.d, normalize=normalize)
    t_out = check_times(times)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    kernel = check_kernel_name(kernel)
    name = check_dtype(dtype)
    dt = check_positive(dt, "dt")
    rtol = check_positive(rtol, "rtol")
    atol = check_positive(atol, "atol")
    max_steps = int(check_positive(max_steps, "max_steps", integer=True))
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable progress(t, t_final) or None, got {progress!r}")

    wall0 = _time.perf_counter()
    batched = X0n.ndim == 3
    X = torch.as_tensor(X0n if batched else X0n[None], dtype=getattr(torch, name))
    f = _Field(att, kernel, X)
    t_final = float(t_out[-1])
    saved = []
    n_steps = n_rejected = 0
    t = 0.0
    h_adapt: float | None = None
    k1 = None  # first stage of the next adaptive step (FSAL)
    if progress is not None:
        progress(0.0, t_final)

    def tick(i: int) -> None:
        if i % AUTO_EVERY == 0:
            f.maybe_redecide(X)
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(t, t_final)

    for t_next in t_out:
        t_next = float(t_next)
        if method != "adaptive":
            # steps of dt from t, the last one shortened to land exactly on t_next
            t_start, span = t, t_next - t
            n_take = math.ceil(span / dt - 1e-9) if span > 0 else 0
            for i in range(n_take):
                last = i == n_take - 1
                h = span - (n_take - 1) * dt if last else dt
                if n_steps >= max_steps:
                    raise RuntimeError(f"max_steps = {max_steps} reached at t = {t:.6g} < {t_final:.6g}")
                X = _step_fixed(method, f, X, h)
                n_steps += 1
                t = t_next if last else t_start + (i + 1) * dt
                _check_finite(X, t, f)
                tick(n_steps)
            t = t_next
        else:
            while t < t_next:
                span = t_next - t
                if span <= 1e-13 * max(1.0, abs(t_next)):  # a rounding leftover, not a step
                    t = t_next
                    break
                if k1 is None:
                    k1 = f(X)
                if h_adapt is None:
                    h_adapt = _initial_step(f, X, k1, rtol, atol, span)
                h = h_adapt if h_adapt < span * (1 - 1e-10) else span
                if h <= 1e-14 * max(1.0, abs(t)):
                    raise RuntimeError(
                        f"adaptive step size underflow at t = {t:.6g} (h = {h:.3g}): too stiff "
                        f"for rtol = {rtol:g}, atol = {atol:g}"
                    )
                if n_steps + n_rejected >= max_steps:
                    raise RuntimeError(f"max_steps = {max_steps} reached at t = {t:.6g} < {t_final:.6g}")
                ks = [k1]
                for a_row in _DP_A[1:]:
                    Y = X + h * sum(a * k for a, k in zip(a_row, ks, strict=False) if a != 0.0)
                    ks.append(f(Y))
                Xn = Y  # last stage point is the 5th-order solution (FSAL)
                err_vec = h * sum(e * k for e, k in zip(_DP_E, ks, strict=True) if e != 0.0)
                sc = atol + rtol * torch.maximum(X.abs(), Xn.abs())
                err = float((err_vec / sc).pow(2).mean().sqrt())
                if not math.isfinite(err):
                    err = math.inf
                fac = 0.9 * err ** (-1 / 5) if err > 0 else 5.0
                if err <= 1.0:
                    X = _normalize_rows(Xn)
                    k1 = ks[-1]
                    t = t + h if h < span else t_next
                    n_steps += 1
                    _check_finite(X, t, f)
                    h_adapt = h * min(5.0, max(0.2, fac))
                    if n_steps % AUTO_EVERY == 0 and f.auto:
                        before = f.name
                        f.maybe_redecide(X)
                        if f.name != before:
                            k1 = None
                    if progress is not None and n_steps % PROGRESS_EVERY == 0:
                        progress(t, t_final)
                else:
                    n_rejected += 1
                    h_adapt = h * min(1.0, max(0.2, fac))
        saved.append(X.clone())
        if progress is not None:
            progress(t, t_final)

    x = torch.stack(saved).cpu().numpy()
    if not batched:
        x = x[:, 0]
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
        "beta": att.beta,
    }
    if method == "adaptive":
        info.update(rtol=rtol, atol=atol)
    else:
        info["dt"] = dt
    return Trajectory(t=t_out.copy(), x=x, info=info)
