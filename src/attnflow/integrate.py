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

import numpy as np

from ._checks import check_points, check_positive, check_times
from .kernels import check_attention, check_dtype, check_kernel_name, get_kernel, resolve_kernel
from .model import Attention
from .trajectory import Trajectory

METHODS = ("euler", "heun", "rk4", "adaptive")
ORDERS = {"euler": 1, "heun": 2, "rk4": 4, "adaptive": 5}
BATCH_KERNELS = ("sdpa", "blocked")  # kernels that take one beta per cloud (simulate(betas=...))
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
# Dormand-Prince continuous extension of order 4 (Hairer, Norsett, Wanner; the coefficients of
# SciPy's RK45): x(t + theta h) = x + h sum_i k_i sum_j P[i][j] theta^(j+1)
_DP_P = (
    (1.0, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432),
    (0.0, 0.0, 0.0, 0.0),
    (0.0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799),
    (0.0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072),
    (0.0, 127303824393 / 49829197408, -318862633887 / 49829197408, 701980252875 / 199316789632),
    (0.0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844),
    (0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423),
)


class _Field:
    """The velocity field with evaluation counting and, for kernel="auto", periodic re-decisions.

    betas: optional (M,) tensor of inverse temperatures, one per cloud (dense kernels only).
    """

    def __init__(self, att: Attention, kernel: str, X, betas=None):
        self.att = att
        self.betas = betas
        self.auto = kernel == "auto" and betas is None
        self.requested = kernel
        self.n_evals = 0
        self.used: dict[str, int] = {}
        if betas is not None:
            if kernel not in ("auto", *BATCH_KERNELS):
                raise ValueError(
                    f"betas= runs several temperatures in one call of a dense kernel: kernel must be "
                    f"'auto' or one of {list(BATCH_KERNELS)}, got {kernel!r}"
                )
            self._set("sdpa" if kernel == "auto" else kernel)
        else:
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
        if self.betas is not None:
            return self.fn(X, self.att, betas=self.betas)
        return self.fn(X, self.att)


def _check_betas(betas: Any, X0n) -> Any:
    """betas as a 1-D float64 array of finite values > 0 matching the batch of X0n."""
    try:
        arr = np.asarray(betas, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"betas must be a sequence of numbers, got {betas!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"betas must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"every beta in betas must be finite and > 0, got {arr.tolist()}")
    if X0n.ndim == 3 and X0n.shape[0] != arr.size:
        raise ValueError(f"X0 holds {X0n.shape[0]} clouds but betas has {arr.size} entries")
    return arr


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
    """Starting step size (Hairer, Norsett, Wanner, II.4) for the fastest cloud of the batch,
    capped by the span to integrate."""
    sc = atol + rtol * X.norm(dim=-1, keepdim=True)

    def rms(T) -> float:  # largest per-cloud RMS
        return float((T / sc).pow(2).mean(dim=(-2, -1)).sqrt().max())

    d0, d1 = rms(X), rms(k1)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    h0 = min(h0, span)
    k2 = f(X + h0 * k1)
    d2 = rms(k2 - k1) / h0
    dm = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if dm <= 1e-15 else (0.01 / dm) ** (1 / 5)
    return min(100 * h0, h1, span)


def _run_fixed(method: str, f: _Field, X, t_out, dt: float, max_steps: int, progress) -> tuple[list, int]:
    """Steps of dt, the last one before each output time shortened to land on it."""
    saved, n_steps, t = [], 0, 0.0
    t_final = float(t_out[-1])
    for t_next in t_out:
        t_next = float(t_next)
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
            if n_steps % AUTO_EVERY == 0:
                f.maybe_redecide(X)
            if progress is not None and n_steps % PROGRESS_EVERY == 0:
                progress(t, t_final)
        t = t_next
        saved.append(X.clone())
        if progress is not None:
            progress(t, t_final)
    return saved, n_steps


def _error_norm(err_vec, X, Xn, rtol: float, atol: float) -> float:
    """Largest over the clouds of a batch of the RMS of err_ik / (atol + rtol max(|x_i|, |x_i new|)).

    |x_i| is the norm of token i (1 on the sphere), not of its coordinate k: coordinates have no
    scale of their own on the sphere, and a per-coordinate scale would make the tolerance depend
    on the frame (near-zero coordinates would demand errors of atol, and the steps would change
    under rotations).  The maximum over clouds, not the RMS over the whole batch: every cloud is
    integrated at least as accurately as it would be alone.
    """
    import torch

    sc = atol + rtol * torch.maximum(X.norm(dim=-1, keepdim=True), Xn.norm(dim=-1, keepdim=True))
    err = float((err_vec / sc).pow(2).mean(dim=(-2, -1)).sqrt().max())
    return err if math.isfinite(err) else math.inf


def _dense_output(X, ks: list, h: float, theta: float):
    """Dormand-Prince 4th-order continuous extension at t + theta h, theta in (0, 1], renormalised."""
    powers = [theta**p for p in range(1, 5)]
    inc = sum(sum(P[j] * powers[j] for j in range(4)) * k for P, k in zip(_DP_P, ks, strict=True) if any(P))
    return _normalize_rows(X + h * inc)


def _run_adaptive(
    f: _Field, X, t_out, rtol: float, atol: float, max_steps: int, progress
) -> tuple[list, int, int]:
    """Dormand-Prince 5(4) from 0 to t_out[-1]; states at t_out from the continuous extension.

    The steps do not stop at the output times (which may be much closer together than the steps a
    slow phase needs); the output between two accepted steps comes from the 4th-order interpolant
    of the step, renormalised.
    """
    saved: list = []
    t_final = float(t_out[-1])
    j = 0  # next output time
    while j < len(t_out) and float(t_out[j]) <= 0.0:
        saved.append(X.clone())
        j += 1
    t, n_steps, n_rejected = 0.0, 0, 0
    h_adapt: float | None = None
    k1 = None  # first stage of the next step (FSAL)
    while j < len(t_out):
        span = t_final - t
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
        err = _error_norm(err_vec, X, Xn, rtol, atol)
        fac = 0.9 * err ** (-1 / 5) if err > 0 else 5.0
        if err > 1.0:
            n_rejected += 1
            h_adapt = h * min(1.0, max(0.2, fac))
            continue
        last = h >= span
        t_new = t_final if last else t + h
        X_new = _normalize_rows(Xn)
        _check_finite(X_new, t_new, f)
        while j < len(t_out) and (last or float(t_out[j]) < t_new):
            t_j = float(t_out[j])
            saved.append(X_new.clone() if t_j >= t_new else _dense_output(X, ks, h, (t_j - t) / h))
            j += 1
            if progress is not None:
                progress(t_j, t_final)
        while j < len(t_out) and float(t_out[j]) <= t_new:  # an output time on the step's end
            saved.append(X_new.clone())
            j += 1
        X, t, k1 = X_new, t_new, ks[-1]
        n_steps += 1
        h_adapt = h * min(5.0, max(0.2, fac))
        if n_steps % AUTO_EVERY == 0 and f.auto:
            before = f.name
            f.maybe_redecide(X)
            if f.name != before:
                k1 = None
        if progress is not None and n_steps % PROGRESS_EVERY == 0:
            progress(t, t_final)
    return saved, n_steps, n_rejected


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
    betas: Any = None,
) -> Trajectory:
    """Integrate the token dynamics dx_i/dt = P_{x_i}^perp(sum_j w_ij V x_j) from X0 at t = 0.

    X0: (N, d) or (M, N, d) unit rows (error unless normalize=True); att: Attention.
    times: non-decreasing output times >= 0 (times[0] may be > 0: X0 is the state at t = 0).
    method: "euler", "heun", "rk4" (fixed step dt, the last step before each output time shortened
    to land on it) or "adaptive" (Dormand-Prince 5(4): the RMS over tokens and coordinates of the
    local error, each token's divided by atol + rtol |x_i| with |x_i| = 1, is kept below 1, so
    rtol + atol is a tolerance on positions in the sphere's own scale, the same in every frame).
    kernel: "auto" (re-decided every AUTO_EVERY steps), "sdpa", "blocked", "zero", "truncated".
    dtype: "float64" or "float32"; progress: callable progress(t, t_final), called now and then.
    betas: optional M finite inverse temperatures integrated together, one per cloud, in one kernel
    call per stage (att.beta is then not used; kernel "auto" means "sdpa"): X0 (N, d) is shared by
    all, or (M, N, d) gives each its own cloud; x gets shape (T, M, N, d).  All clouds share the
    steps (the adaptive step is that of the hardest one), so this pays off only where one call on
    M clouds is much cheaper than M calls: small N (docs/benchmarks.md, "Several betas").
    Returns Trajectory(t=times (T,), x (T, N, d) or (T, M, N, d), info) with info = method, kernel
    (resolved), dt or rtol/atol, n_steps, n_rejected, n_evals, wall_time_s, dtype, beta (or betas).
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

    beta_arr = None if betas is None else _check_betas(betas, X0n)

    wall0 = _time.perf_counter()
    batched = X0n.ndim == 3 or beta_arr is not None
    if X0n.ndim == 2 and beta_arr is not None:
        X0n = np.broadcast_to(X0n, (len(beta_arr), *X0n.shape))
    X = torch.as_tensor(np.array(X0n if batched else X0n[None]), dtype=getattr(torch, name))
    f = _Field(att, kernel, X, None if beta_arr is None else torch.as_tensor(beta_arr, dtype=X.dtype))
    if progress is not None:
        progress(0.0, float(t_out[-1]))
    if method == "adaptive":
        saved, n_steps, n_rejected = _run_adaptive(f, X, t_out, rtol, atol, max_steps, progress)
    else:
        saved, n_steps = _run_fixed(method, f, X, t_out, dt, max_steps, progress)
        n_rejected = 0

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
        "beta": att.beta if beta_arr is None else None,
    }
    if beta_arr is not None:
        info["betas"] = beta_arr.tolist()
    if method == "adaptive":
        info.update(rtol=rtol, atol=atol)
    else:
        info["dt"] = dt
    return Trajectory(t=t_out.copy(), x=x, info=info)
