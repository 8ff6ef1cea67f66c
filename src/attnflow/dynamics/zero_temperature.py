"""The zero-temperature flow, solved exactly, and its limit map Pi (MATH.md "Zero temperature").

At beta = inf every token moves on its own:

    dx/dt = P_x^perp A x / |B^T x|.

Its exact solution is x(t) = y(s) / |y(s)| with y(s) = expm(A s) x_0 and one scalar clock per token,
ds/dt = 1 / |B^T x(t)|, s(0) = 0.  expm(A s) x_0 is evaluated from A's eigendecomposition in a
log-scaled form (each token's exponentials are shifted by its own largest exponent), so that
t = 1e4 and beyond neither overflows nor underflows.  For symmetric A, x(t) -> Pi(x_0) =
P_1 x_0 / |P_1 x_0| with P_1 the orthogonal projector onto A's top eigenspace.
"""

from __future__ import annotations

import copy
import time as _time
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_points, check_positive, check_times
from ..attention import COND_B_MAX, Attention, check_attention
from .trajectory import Trajectory

CHUNK = 2048  # tokens per clock-ODE solve
COND_EIG_MAX = 1e6  # eigenvector matrices worse than this make "auto" fall back to integration
METHODS = ("auto", "exact", "integrate")

__all__ = ["limit_problem", "project", "simulate_zero_temperature"]


def check_invertible_B(att: Attention) -> None:
    if not att.cond_B <= COND_B_MAX:
        raise ValueError(
            f"B = Q^T K must be invertible for the zero-temperature flow (the speed 1/|B^T x| must stay "
            f"finite): its condition number is {att.cond_B:.3g} > {COND_B_MAX:.0e}"
        )


def _eigen(A: np.ndarray, symmetric: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """A = W diag(lam) W^{-1}: eigh for symmetric A (W orthogonal), eig otherwise; and cond(W)."""
    if symmetric:
        lam, W = np.linalg.eigh((A + A.T) / 2)
        return lam, W, 1.0
    lam, W = np.linalg.eig(A)
    return lam, W, float(np.linalg.cond(W))


class ExactFlow:
    """y(s) = expm(A s) x_0 / scale for many tokens, from A = W diag(lam) W^{-1}.

    Stores the coefficients c = W^{-1} x_0 as log-magnitudes (and phases), one column per token
    (d, N): the reductions over the d terms then run across rows, which is several times faster
    than along a short last axis.  Each evaluation subtracts, per token, the largest
    Re(lam_k) s + log|c_k|, so the dominant term is O(1).
    """

    def __init__(self, X: np.ndarray, lam: np.ndarray, W: np.ndarray, symmetric: bool) -> None:
        C = X @ W if symmetric else np.linalg.solve(W, X.T).T  # c = W^{-1} x, one row per token
        with np.errstate(divide="ignore"):
            logc = np.log(np.abs(C))  # -inf where c_k = 0: that term never contributes
        self._set(logc, np.sign(C) if symmetric else np.angle(C), lam, W, symmetric)

    @classmethod
    def from_log_coefficients(
        cls, logc: np.ndarray, sign: np.ndarray, lam: np.ndarray, W: np.ndarray
    ) -> ExactFlow:
        """The flow of x_0 = W (sign * exp(logc)) for symmetric A = W diag(lam) W^T (W orthogonal).

        logc, sign: (N, d).  Coefficients given by their logarithms stay exact far below 1e-16,
        where X @ W would round them away (tokens very close to P_1 x = 0).
        """
        flow = cls.__new__(cls)
        flow._set(np.asarray(logc, dtype=np.float64), np.asarray(sign, dtype=np.float64), lam, W, True)
        return flow

    def _set(
        self, logc: np.ndarray, phase: np.ndarray, lam: np.ndarray, W: np.ndarray, symmetric: bool
    ) -> None:
        self.symmetric = symmetric
        self.W = W
        self.re = np.real(lam)
        self.im = np.imag(lam)
        self.logc = np.ascontiguousarray(logc.T)  # (d, N)
        self.phase = np.ascontiguousarray(phase.T)  # signs (symmetric) or angles, (d, N)
        self._WBt: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> ExactFlow:
        """The same flow for a subset of the tokens."""
        sub = copy.copy(self)
        sub.logc, sub.phase = self.logc[:, idx], self.phase[:, idx]
        return sub

    def difficulty(self) -> np.ndarray:
        """log of each token's largest coefficient on the top eigenvalue(s): small means a late transition."""
        top = self.re >= self.re.max() - 1e-9 * max(float(np.max(np.abs(self.re))), 1e-300)
        result: np.ndarray = np.max(self.logc[top, :], axis=0)
        return result

    def coef(self, s: np.ndarray) -> np.ndarray:
        """Scaled coefficients (d, N) of y(s) on the eigenvectors: the largest magnitude per token is 1."""
        expo = self.re[:, None] * s[None, :] + self.logc
        expo -= np.max(expo, axis=0)
        mag = np.exp(expo)
        if self.symmetric:
            result: np.ndarray = mag * self.phase
            return result
        result = mag * np.exp(1j * (self.im[:, None] * s[None, :] + self.phase))
        return result

    def y(self, s: np.ndarray) -> np.ndarray:
        """Unnormalised y(s) (N, d) for clocks s (N,), each row scaled so its largest term is 1."""
        result: np.ndarray = np.real(self.W @ self.coef(s)).T
        return result

    def clock_rate(self, s: np.ndarray, B: np.ndarray) -> np.ndarray:
        """ds/dt = |y(s)| / |B^T y(s)|, (N,); for orthogonal W, |y| = |coefficients|."""
        if self.symmetric:
            if self._WBt is None:
                self._WBt = np.ascontiguousarray((self.W.T @ B).T)  # B^T W
            e = self.coef(s)
            z = self._WBt @ e
            result: np.ndarray = np.sqrt(np.sum(e * e, axis=0) / np.sum(z * z, axis=0))
            return result
        Y = self.y(s)
        result = np.linalg.norm(Y, axis=1) / np.linalg.norm(Y @ B, axis=1)
        return result


def _unit(Y: np.ndarray) -> np.ndarray:
    result: np.ndarray = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
    return result


@dataclass(frozen=True)
class Clocks:
    """The clocks s (T, N) of N tokens at T times, with what they took: right-hand-side evaluations
    (nfev) and ODE solves (chunks)."""

    s: np.ndarray
    nfev: int
    chunks: int


def solve_clocks(flow: ExactFlow, B: np.ndarray, t: np.ndarray, rtol: float, atol: float) -> Clocks:
    """Clocks s (T, N) at the times t: ds/dt = |y(s)| / |B^T y(s)|, s(0) = 0.

    The N scalar ODEs are integrated together by DOP853 in chunks of CHUNK tokens, sorted by when
    their last transition happens (tokens near P_1 x = 0 are slow), so that a chunk's step sizes
    are set by similar tokens.
    """
    from scipy.integrate import solve_ivp

    n = flow.logc.shape[1]
    S = np.zeros((t.size, n))
    if t[-1] == 0:
        return Clocks(S, 0, 0)
    tu, inv = np.unique(t, return_inverse=True)
    order = np.argsort(flow.difficulty(), kind="stable")
    nfev = 0
    chunks = 0
    for start in range(0, n, CHUNK):
        idx = order[start : start + CHUNK]
        sub = flow.take(idx)
        sol = solve_ivp(
            lambda _t, s, sub=sub: sub.clock_rate(s, B),
            (0.0, tu[-1]),
            np.zeros(idx.size),
            method="DOP853",
            t_eval=tu,
            rtol=rtol,
            atol=atol,
        )
        if not sol.success:
            raise RuntimeError(f"the clock ODE ds/dt = 1/|B^T x| failed: {sol.message}")
        S[:, idx] = sol.y.T[inv]
        nfev += sol.nfev
        chunks += 1
    return Clocks(S, nfev, chunks)


@dataclass(frozen=True)
class _Solution:
    """The flow of N tokens at T times: states x (T, N, d), clocks s (T, N), right-hand-side
    evaluations, ODE solves, and the method used ("exact" or "integrate")."""

    x: np.ndarray
    s: np.ndarray
    nfev: int
    chunks: int
    method: str


def _integrate(X: np.ndarray, att: Attention, t: np.ndarray, rtol: float, atol: float) -> _Solution:
    """Direct integration of dx/dt = P_x^perp A x / |B^T x| and ds/dt = 1/|B^T x| (DOP853).

    The field is evaluated at x/|x|, so |x| is conserved by the ODE; saved states are renormalised.
    """
    from scipy.integrate import solve_ivp

    n, d = X.shape
    A, B = np.asarray(att.A), np.asarray(att.B)

    def rhs(_t: float, z: np.ndarray) -> np.ndarray:
        Xn = _unit(z[: n * d].reshape(n, d))
        r = np.linalg.norm(Xn @ B, axis=1)
        AX = Xn @ A.T
        v = AX - np.sum(Xn * AX, axis=1, keepdims=True) * Xn
        return np.concatenate([(v / r[:, None]).ravel(), 1.0 / r])

    out = np.empty((t.size, n, d))
    S = np.zeros((t.size, n))
    out[:] = X
    if t[-1] == 0:
        return _Solution(out, S, 0, 1, "integrate")
    tu, inv = np.unique(t, return_inverse=True)
    z0 = np.concatenate([X.ravel(), np.zeros(n)])
    sol = solve_ivp(rhs, (0.0, tu[-1]), z0, method="DOP853", t_eval=tu, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"direct integration of the zero-temperature flow failed: {sol.message}")
    Z = sol.y.T[inv]
    return _Solution(_unit(Z[:, : n * d].reshape(t.size, n, d)), Z[:, n * d :], sol.nfev, 1, "integrate")


@dataclass(frozen=True)
class _Plan:
    """How simulate_zero_temperature solves: the exact flow (None: direct integration) and why."""

    flow: ExactFlow | None
    note: str


def _plan(X: np.ndarray, att: Attention, method: str) -> _Plan:
    """The exact flow of the tokens X (N, d) unless method="integrate" or A's eigenvectors are too
    ill-conditioned ("auto" then falls back to integration with a warning, "exact" refuses)."""
    sp = att.spectrum()
    if method == "integrate":
        return _Plan(None, "direct DOP853 integration (requested)")
    lam, W, cond = _eigen(np.asarray(att.A), sp.symmetric)
    if cond <= COND_EIG_MAX:
        kind = "eigh, A symmetric" if sp.symmetric else f"complex eig, cond(W) = {cond:.3g}"
        note = f"exact solution x = expm(A s) x0 / |.| ({kind}); clocks s by DOP853"
        return _Plan(ExactFlow(X, lam, W, sp.symmetric), note)
    reason = (
        f"A's eigenvector matrix has condition number {cond:.3g} > {COND_EIG_MAX:.0e} "
        "(A is defective or nearly so): its eigendecomposition is not accurate"
    )
    if method == "exact":
        raise ValueError(f"method='exact' is unavailable: {reason}; use method='integrate'")
    warnings.warn(
        f"simulate_zero_temperature falls back to direct integration: {reason}", UserWarning, stacklevel=3
    )
    return _Plan(None, f"direct DOP853 integration (fallback): {reason}")


def _solve(plan: _Plan, X: np.ndarray, att: Attention, t: np.ndarray, rtol: float, atol: float) -> _Solution:
    """The flow of the tokens X (N, d) at the times t, as planned."""
    if plan.flow is None:
        return _integrate(X, att, t, rtol, atol)
    clocks = solve_clocks(plan.flow, np.asarray(att.B), t, rtol, atol)
    x = np.stack([_unit(plan.flow.y(s)) for s in clocks.s])
    return _Solution(x, clocks.s, clocks.nfev, clocks.chunks, "exact")


def simulate_zero_temperature(
    X0: ArrayLike,
    att: Attention,
    times: ArrayLike,
    method: str = "auto",
    rtol: float = 1e-11,
    atol: float = 1e-13,
) -> Trajectory:
    """The beta = inf flow dx/dt = P_x^perp A x / |B^T x| of every token (att.beta is ignored).

    Parameters
    ----------
    X0 : array (N, d) or (M, N, d)
        Unit rows.
    att : Attention
        B must be invertible.
    times : array (T,)
        Non-decreasing, >= 0 (the flow starts at t = 0).
    method : str
        "exact": x(t) = y(s)/|y(s)|, y(s) = expm(A s) x_0 from A's eigendecomposition (eigh for
        symmetric A, complex eig for diagonalisable non-symmetric A), with the N clocks
        ds/dt = 1/|B^T x| integrated together (DOP853, rtol/atol); "integrate": DOP853 on the ODE
        itself; "auto": exact unless A's eigenvectors are ill-conditioned (cond > 1e6, e.g. a
        defective A), where it falls back to integration with a warning.
    rtol, atol : float
        DOP853's tolerances.

    Returns
    -------
    Trajectory
        x (T, N, d) or (T, M, N, d); info["s"] holds the clocks (T, N) or (T, M, N); info["method"]
        is "exact" or "integrate" and info["note"] says why.
    """
    att = check_attention(att)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    rtol = check_positive(rtol, "rtol")
    atol = check_positive(atol, "atol")
    X = check_points(X0, "X0", d=att.d)
    t = check_times(times)
    check_invertible_B(att)
    start = _time.perf_counter()
    lead = X.shape[:-1]
    Xf = X.reshape(-1, att.d)
    plan = _plan(Xf, att, method)
    sol = _solve(plan, Xf, att, t, rtol, atol)
    sol.x[t == 0] = Xf  # exactly the initial state at t = 0
    info = {
        "method": sol.method,
        "note": plan.note,
        "s": sol.s.reshape((t.size, *lead)),
        "nfev": int(sol.nfev),
        "chunks": int(sol.chunks),
        "rtol": rtol,
        "atol": atol,
        "beta": float("inf"),
        "wall_time": _time.perf_counter() - start,
    }
    return Trajectory(t=t, x=sol.x.reshape((t.size, *X.shape)), info=info)


def limit_problem(att: Attention) -> str | None:
    """Why the limit map Pi of the zero-temperature flow does not exist for these weights, or None when
    it does: symmetric A (the orthogonal projector), or non-symmetric A whose top eigenvalues (largest
    real part) are real and not defective (the spectral projector). Cheap: A's spectrum (d x d)."""
    sp = att.spectrum()
    if sp.symmetric:
        return None
    lam = np.asarray(sp.top.eigenvalues)
    scale = max(float(np.max(np.abs(sp.eigenvalues))), 1e-300)
    if np.any(np.abs(np.imag(lam)) > 1e-9 * scale):
        shown = ", ".join(f"{complex(v):.4g}" for v in lam)
        return (
            f"A's top eigenvalues {shown} are not real, so the zero-temperature flow rotates in their "
            "invariant plane and has no limit Pi"
        )
    if not np.all(np.isfinite(sp.top_projector)):
        return "A's top eigenvalue is defective, so its spectral projector (the limit Pi) is undefined"
    return None


def project(X: ArrayLike, att: Attention, tol: float = 1e-12, spectral: bool = False) -> np.ndarray:
    """Pi(x) = P_1 x / |P_1 x| row by row: the t -> inf limit of the zero-temperature flow.

    Parameters
    ----------
    X : array (N, d) or (M, N, d)
        Unit rows.
    att : Attention
        P_1 is the orthogonal projector onto the top eigenspace of symmetric A (any multiplicity).
    tol : float
        |P_1 x_i| <= tol counts as 0.
    spectral : bool
        For non-symmetric A pass spectral=True to use the spectral (Riesz) projector, the limit when
        the top eigenvalue (largest real part) is real.

    Returns
    -------
    array
        X's shape.

    Raises
    ------
    ValueError
        Where Pi is undefined: |P_1 x_i| <= tol.
    """
    att = check_attention(att)
    Xc = check_points(X, "X", d=att.d)
    tol = check_positive(tol, "tol")
    sp = att.spectrum()
    if not sp.symmetric and not spectral:
        raise ValueError(
            f"project: A = V B^T is not symmetric (relative asymmetry {sp.asymmetry:.3g}), so the "
            "orthogonal projection onto its top eigenspace is not the limit of the flow. When A's top "
            "eigenvalue (largest real part) is real, the limit uses the spectral (Riesz) projector: "
            "call project(X, att, spectral=True)"
        )
    problem = limit_problem(att)
    if problem is not None:
        raise ValueError(f"project(spectral=True): {problem}")
    P = np.asarray(sp.top_projector)
    Y = Xc @ P.T
    nrm = np.linalg.norm(Y, axis=-1)
    k = int(np.argmin(nrm))
    if nrm.flat[k] <= tol:
        where = np.unravel_index(k, nrm.shape)
        label = f"token {where[-1]}" + (f" of cloud {where[0]}" if nrm.ndim == 2 else "")
        raise ValueError(
            f"Pi is undefined for {label}: |P_1 x| = {nrm.flat[k]:.3g} <= tol = {tol:.3g} "
            "(the token is orthogonal to A's top eigenspace)"
        )
    result: np.ndarray = Y / nrm[..., None]
    return result
