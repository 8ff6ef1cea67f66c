"""The steppers of `attnflow.dynamics.integrate.simulate`: the field they call, one renormalised step, and the
two run loops (MATH.md, "Finite temperature").

- `run_fixed`: "euler", "heun", "rk4" with step dt, the last step before each output time
  shortened to land on it.
- `run_adaptive`: Dormand-Prince 5(4) with error control (`AdaptiveSettings`); the states at the
  output times come from its 4th-order continuous extension (`dense_output`).

Each step is followed by renormalisation of the rows (a projection method; `Field.retract`: for a
Dynamics whose tokens live in R^d, layer_norm "pre" or "peri", nothing).  With `Noise` (a Dynamics
with noise sigma > 0, fixed steps only) each step is the method's drift step, then a Brownian kick
sigma P_y^perp dW in the tangent space at the drift's end y, then the projection back to |y| (the
sphere, or the sphere of radius |y| in R^d): for dx = v dt + sigma P_x^perp o dW (Stratonovich) this
step-then-project scheme has strong order 1/2 and weak order 1. Common noise (one W on so(d) per
cloud) turns the renormalised drift step by the rotation expm(sigma dW).  `Field` is the velocity kernel with
evaluation counting and the periodic re-decision of kernel="auto".  The state is a torch
tensor (M, N, d); an `Output` says where the states go (`save(X)` for each output time) and whom to
tell (`progress(t, t_final)`, now and then); a run loop returns its `Steps`.  `simulate`
(integrate.py) checks the arguments, sets up the state and the saved array, and calls one run loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..kernels import kernel_function, resolve_kernel

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..attention import Attention
    from ..flow import Dynamics

AUTO_EVERY = 50  # steps between two decisions of kernel="auto"
PROGRESS_EVERY = 100  # steps between two calls of the progress callback (also at every save time)

# Dormand-Prince 5(4) tableau (Hairer, Norsett, Wanner, Solving ODEs I, Table 5.2)
DP_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)  # order 5 (= last row of A)
DP_E = (  # b5 - b4, b4 the embedded 4th-order weights
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
DP_P = (
    (1.0, -8048581381 / 2820520608, 8663915743 / 2820520608, -12715105075 / 11282082432),
    (0.0, 0.0, 0.0, 0.0),
    (0.0, 131558114200 / 32700410799, -68118460800 / 10900136933, 87487479700 / 32700410799),
    (0.0, -1754552775 / 470086768, 14199869525 / 1410260304, -10690763975 / 1880347072),
    (0.0, 127303824393 / 49829197408, -318862633887 / 49829197408, 701980252875 / 199316789632),
    (0.0, -282668133 / 205662961, 2019193451 / 616988883, -1453857185 / 822651844),
    (0.0, 40617522 / 29380423, -110615467 / 29380423, 69997945 / 29380423),
)


@dataclass(frozen=True)
class Output:
    """Where a run loop delivers: the output times (T,) (non-decreasing, >= start), save(X) called
    once per output time in order, progress(t, t_final) or None, and the time `start` of the state
    the loop starts from (0, or where a segment of redrawn weights begins)."""

    times: np.ndarray
    save: Callable[[torch.Tensor], None]
    progress: Callable[[float, float], object] | None = None
    start: float = 0.0

    @property
    def t_final(self) -> float:
        return float(self.times[-1])

    def report(self, t: float) -> None:
        """Tell `progress` that the run has reached time t."""
        if self.progress is not None:
            self.progress(t, self.t_final)


@dataclass(frozen=True)
class AdaptiveSettings:
    """Dormand-Prince's settings (simulate's options for method "adaptive"): tolerances, the most
    attempted steps, the first step (None: the Hairer-Norsett-Wanner starting-step rule) and the
    norm over the tokens of their local errors ("rms" or "max", `_error_norm`)."""

    rtol: float
    atol: float
    max_steps: int
    first_step: float | None = None
    norm: str = "rms"


@dataclass(frozen=True)
class Steps:
    """What a run loop did: accepted steps and rejected attempts (0 for the fixed-step methods)."""

    n_steps: int
    n_rejected: int = 0


class Field:
    """The velocity field with evaluation counting and, for kernel="auto", periodic re-decisions.

    att: an Attention, or a Dynamics beyond the single head (its kernels: kernels.kernel_function).
    betas: optional (M,) tensor of inverse temperatures, one per cloud, in place of att.beta (the
    automatic choice then plans for the smallest, where the most keys matter).
    weights: optional (M, N) tensor of quadrature weights (None: uniform).
    """

    def __init__(
        self,
        att: Attention | Dynamics,
        kernel: str,
        X: torch.Tensor,
        betas: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
    ) -> None:
        self.att = att
        self.betas = betas
        self.weights = weights
        self.auto = kernel == "auto"
        self.requested = kernel
        self.n_evals = 0
        self.used: dict[str, int] = {}
        # the Attention whose beta the automatic choice plans for
        self._plan = att if betas is None else att.with_beta(float(betas.min()))
        self._set(resolve_kernel(kernel, self._plan, X, weights))

    def _set(self, name: str) -> None:
        self.name = name
        self.fn = kernel_function(name, self.att)

    @property
    def on_sphere(self) -> bool:
        """Whether the state lives on the sphere (else in R^d: layer_norm "pre" or "peri")."""
        return bool(getattr(self.att, "on_sphere", True))

    def retract(self, Y: torch.Tensor) -> torch.Tensor:
        """The state after a step: rows renormalised on the sphere, as they are in R^d."""
        return _normalize_rows(Y) if self.on_sphere else Y

    def maybe_redecide(self, X: torch.Tensor) -> bool:
        """Re-decide kernel="auto" for the state X; whether the kernel changed."""
        if self.auto:
            name = resolve_kernel("auto", self._plan, X, self.weights)
            if name != self.name:
                self._set(name)
                return True
        return False

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        self.n_evals += 1
        self.used[self.name] = self.used.get(self.name, 0) + 1
        return self.fn(X, self.att, betas=self.betas, weights=self.weights)


def _normalize_rows(X: torch.Tensor) -> torch.Tensor:
    Y: torch.Tensor = X / X.norm(dim=-1, keepdim=True)
    return Y


class Noise:
    """The Brownian kicks of the noise, sigma > 0 and a seeded CPU generator (the increments are drawn
    in float64 on the CPU, so a seed gives the same path on any device). kind "independent":
    dx = v dt + sigma P_x^perp o dW, one W per token; "common": dx = v dt + sigma o dW x, one W on
    so(d) per cloud (entries above the diagonal independent Brownian motions)."""

    def __init__(self, sigma: float, seed: int, kind: str = "independent") -> None:
        import torch

        self.sigma = float(sigma)
        self.seed = int(seed)
        self.kind = kind
        self.generator = torch.Generator().manual_seed(self.seed)

    def step(self, Y: torch.Tensor, h: float, on_sphere: bool) -> torch.Tensor:
        """The drift step's end Y (M, N, d) kicked by the noise over a step h and projected back."""
        return self._rotate(Y, h, on_sphere) if self.kind == "common" else self._kick(Y, h, on_sphere)

    def _kick(self, Y: torch.Tensor, h: float, on_sphere: bool) -> torch.Tensor:
        """Y kicked by sigma P^perp dW (dW ~ N(0, h I)) in the tangent space at Y / |Y| and projected
        back to |Y| (to the sphere when on_sphere)."""
        import torch

        dW = torch.randn(Y.shape, generator=self.generator, dtype=torch.float64).to(Y) * math.sqrt(h)
        r = Y.norm(dim=-1, keepdim=True)
        theta = Y / r
        kick = self.sigma * (dW - (theta * dW).sum(-1, keepdim=True) * theta)
        Z = _normalize_rows(theta + (kick if on_sphere else kick / r))
        return Z if on_sphere else r * Z

    def _rotate(self, Y: torch.Tensor, h: float, on_sphere: bool) -> torch.Tensor:
        """Y (renormalised on the sphere) turned by R = expm(sigma dW), dW (M, d, d) skew with N(0, h)
        entries above the diagonal: exactly a rotation, one per cloud."""
        import torch

        M, d = Y.shape[0], Y.shape[-1]
        G = torch.randn((M, d, d), generator=self.generator, dtype=torch.float64).triu(1) * math.sqrt(h)
        R = torch.linalg.matrix_exp(self.sigma * (G - G.transpose(-1, -2))).to(Y)
        Z = _normalize_rows(Y) if on_sphere else Y
        turned: torch.Tensor = Z @ R.transpose(-1, -2)
        return turned


def _check_finite(X: torch.Tensor, t: float, field: Field) -> None:
    import torch

    if not bool(torch.isfinite(X).all()):
        raise FloatingPointError(
            f"the state became NaN or inf at t = {t:.6g} (kernel {field.name!r}, beta = {field.att.beta:g})"
        )


def _step_fixed(method: str, f: Field, X: torch.Tensor, h: float, noise: Noise | None = None) -> torch.Tensor:
    """One renormalised step of size h (with noise: its kick, then the projection)."""
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
    return f.retract(Y) if noise is None else noise.step(Y, h, f.on_sphere)


def _initial_step(
    f: Field, X: torch.Tensor, k1: torch.Tensor, rtol: float, atol: float, span: float
) -> float:
    """Starting step size (Hairer, Norsett, Wanner, II.4) for the fastest cloud of the batch,
    capped by the span to integrate."""
    sc = atol + rtol * X.norm(dim=-1, keepdim=True)

    def rms(T: torch.Tensor) -> float:  # largest per-cloud RMS
        return float((T / sc).pow(2).mean(dim=(-2, -1)).sqrt().max())

    d0, d1 = rms(X), rms(k1)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    h0 = min(h0, span)
    k2 = f(X + h0 * k1)
    d2 = rms(k2 - k1) / h0
    dm = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if dm <= 1e-15 else (0.01 / dm) ** (1 / 5)
    return min(100 * h0, h1, span)


def run_fixed(
    method: str, f: Field, X: torch.Tensor, out: Output, dt: float, max_steps: int, noise: Noise | None = None
) -> Steps:
    """Steps of dt from out.start, the last one before each output time shortened to land on it."""
    n_steps, t = 0, out.start
    for t_next in out.times:
        t_next = float(t_next)
        t_start, span = t, t_next - t
        n_take = math.ceil(span / dt - 1e-9) if span > 0 else 0
        for i in range(n_take):
            last = i == n_take - 1
            h = span - (n_take - 1) * dt if last else dt
            if n_steps >= max_steps:
                raise RuntimeError(f"max_steps = {max_steps} reached at t = {t:.6g} < {out.t_final:.6g}")
            X = _step_fixed(method, f, X, h, noise)
            n_steps += 1
            t = t_next if last else t_start + (i + 1) * dt
            _check_finite(X, t, f)
            if n_steps % AUTO_EVERY == 0:
                f.maybe_redecide(X)
            if n_steps % PROGRESS_EVERY == 0:
                out.report(t)
        t = t_next
        out.save(X)
        out.report(t)
    return Steps(n_steps)


def _error_norm(
    err_vec: torch.Tensor, X: torch.Tensor, Xn: torch.Tensor, rtol: float, atol: float, norm: str = "rms"
) -> float:
    """Largest over the clouds of a batch of the RMS of err_ik / (atol + rtol max(|x_i|, |x_i new|))
    over tokens i and coordinates k (norm "rms"), or of its largest per-token RMS over k (norm "max").

    |x_i| is the norm of token i (1 on the sphere), not of its coordinate k: coordinates have no
    scale of their own on the sphere, and a per-coordinate scale would make the tolerance depend
    on the frame (near-zero coordinates would demand errors of atol, and the steps would change
    under rotations).  The maximum over clouds, not the RMS over the whole batch: every cloud is
    integrated at least as accurately as it would be alone.  "max" holds every token to the
    tolerance (tokens with equal errors give both norms the same value); with "rms" one token's error
    may reach sqrt(N) times it, which matters where a few tokens decide what is measured (the last
    tokens near a separatrix, which hold a cluster: docs/experiments.md, "metastability").
    """
    import torch

    sc = atol + rtol * torch.maximum(X.norm(dim=-1, keepdim=True), Xn.norm(dim=-1, keepdim=True))
    if norm == "max":
        err = float((err_vec / sc).pow(2).mean(dim=-1).amax(dim=-1).sqrt().max())
    else:
        err = float((err_vec / sc).pow(2).mean(dim=(-2, -1)).sqrt().max())
    return err if math.isfinite(err) else math.inf


def dense_output(
    X: torch.Tensor,
    ks: list[torch.Tensor],
    h: float,
    theta: float,
    retract: Callable[[torch.Tensor], torch.Tensor] = _normalize_rows,
) -> torch.Tensor:
    """Dormand-Prince 4th-order continuous extension at t + theta h, theta in (0, 1], retracted
    (renormalised on the sphere)."""
    powers = [theta**p for p in range(1, 5)]
    inc = sum(sum(P[j] * powers[j] for j in range(4)) * k for P, k in zip(DP_P, ks, strict=True) if any(P))
    return retract(X + h * inc)


def _check_step(h: float, t: float, attempts: int, opts: AdaptiveSettings, t_final: float) -> None:
    """Refuse a step size that underflows and an attempt past max_steps."""
    if h <= 1e-14 * max(1.0, abs(t)):
        raise RuntimeError(
            f"adaptive step size underflow at t = {t:.6g} (h = {h:.3g}): too stiff "
            f"for rtol = {opts.rtol:g}, atol = {opts.atol:g}"
        )
    if attempts >= opts.max_steps:
        raise RuntimeError(f"max_steps = {opts.max_steps} reached at t = {t:.6g} < {t_final:.6g}")


@dataclass(frozen=True)
class _Attempt:
    """A tried Dormand-Prince step: its seven stages k_1 ... k_7, the 5th-order solution X5
    (unnormalised; the point of the last stage, so k_7 is the next step's k_1) and the error norm."""

    ks: list[torch.Tensor]
    X5: torch.Tensor
    err: float


def _dp_attempt(f: Field, X: torch.Tensor, k1: torch.Tensor, h: float, opts: AdaptiveSettings) -> _Attempt:
    """One Dormand-Prince 5(4) step of size h from X, whose first stage k1 = f(X) is known."""
    ks = [k1]
    for a_row in DP_A[1:]:
        Y = X + h * sum(a * k for a, k in zip(a_row, ks, strict=False) if a != 0.0)
        ks.append(f(Y))
    err_vec = h * cast("torch.Tensor", sum(e * k for e, k in zip(DP_E, ks, strict=True) if e != 0.0))
    return _Attempt(ks, Y, _error_norm(err_vec, X, Y, opts.rtol, opts.atol, opts.norm))


@dataclass(frozen=True)
class _Step:
    """An accepted step of size h from (t, X) to (t_new, X_new) (renormalised), with its stages;
    last: it ends the run."""

    t: float
    h: float
    t_new: float
    last: bool
    X: torch.Tensor
    X_new: torch.Tensor
    ks: list[torch.Tensor]


def _save_outputs(out: Output, j: int, step: _Step, retract: Callable[[torch.Tensor], torch.Tensor]) -> int:
    """Save the output times from index j on that the step covers (the last step: all that remain),
    by dense output inside it and X_new at its end.  Returns the next index."""
    while j < len(out.times) and (step.last or float(out.times[j]) < step.t_new):
        t_j = float(out.times[j])
        inside = t_j < step.t_new
        theta = (t_j - step.t) / step.h
        out.save(dense_output(step.X, step.ks, step.h, theta, retract) if inside else step.X_new)
        j += 1
        out.report(t_j)
    while j < len(out.times) and float(out.times[j]) <= step.t_new:  # an output time on the step's end
        out.save(step.X_new)
        j += 1
    return j


def run_adaptive(f: Field, X: torch.Tensor, out: Output, opts: AdaptiveSettings) -> Steps:
    """Dormand-Prince 5(4) from 0 to the last output time; states at the output times from the
    continuous extension.

    The steps do not stop at the output times (which may be much closer together than the steps a
    slow phase needs); the output between two accepted steps comes from the 4th-order interpolant
    of the step, renormalised.
    """
    t_final, n_out = out.t_final, len(out.times)
    j = 0  # next output time
    while j < n_out and float(out.times[j]) <= out.start:
        out.save(X)
        j += 1
    t, n_steps, n_rejected = out.start, 0, 0
    h_adapt = opts.first_step
    k1: torch.Tensor | None = None  # first stage of the next step (FSAL)
    while j < n_out:
        span = t_final - t
        if k1 is None:
            k1 = f(X)
        if h_adapt is None:
            h_adapt = _initial_step(f, X, k1, opts.rtol, opts.atol, span)
        h = h_adapt if h_adapt < span * (1 - 1e-10) else span
        _check_step(h, t, n_steps + n_rejected, opts, t_final)
        trial = _dp_attempt(f, X, k1, h, opts)
        fac = 0.9 * trial.err ** (-1 / 5) if trial.err > 0 else 5.0
        if trial.err > 1.0:
            n_rejected += 1
            h_adapt = h * min(1.0, max(0.2, fac))
            continue
        last = h >= span
        step = _Step(t, h, t_final if last else t + h, last, X, f.retract(trial.X5), trial.ks)
        _check_finite(step.X_new, step.t_new, f)
        j = _save_outputs(out, j, step, f.retract)
        X, t, k1 = step.X_new, step.t_new, trial.ks[-1]
        n_steps += 1
        h_adapt = h * min(5.0, max(0.2, fac))
        if n_steps % AUTO_EVERY == 0 and f.maybe_redecide(X):
            k1 = None  # the new kernel's field, not the old one's
        if n_steps % PROGRESS_EVERY == 0:
            out.report(t)
    return Steps(n_steps, n_rejected)
