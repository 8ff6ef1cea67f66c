"""The theorem's three assumptions, checked with their numbers, and Corollary 2's reference rates.

MATH.md "Assumptions of the theorem" and "Corollary 2".  Every check reports its numbers and a
one-sentence reason, never just pass/fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._checks import check_points, check_positive, to_numpy
from .model import COND_B_MAX, SYMMETRY_TOL, Attention

KINDS = (None, "points", "uniform", "vmf")
OK, FAILS, NOT_CHECKABLE = "ok", "fails", "not checkable"

__all__ = ["AssumptionReport", "AssumptionResult", "check_assumptions", "reference_rates", "subspace_angle"]


@dataclass(frozen=True)
class AssumptionResult:
    """One assumption: its name, status ("ok", "fails", "not checkable"), numbers and a reason."""

    name: str
    status: str
    numbers: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


def _jsonable(v: Any) -> Any:
    """Plain JSON values: inf -> "inf" / "-inf", NaN -> None, complex -> [re, im], arrays -> lists."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (complex, np.complexfloating)):
        return [_jsonable(float(v.real)), _jsonable(float(v.imag))]
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return v


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, (complex, np.complexfloating)):
        return f"{v.real:.4g}{v.imag:+.4g}j" if v.imag else f"{v.real:.4g}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.4g}"
    return str(v)


@dataclass(frozen=True)
class AssumptionReport:
    """The three assumptions of the theorem for one attention head (and one initial cloud).

    ok: True when no checkable assumption fails ("not checkable" does not count against it).
    items: one AssumptionResult per assumption, in MATH.md's order.
    to_dict(): JSON-able; inf is written as the string "inf" ("-inf"), NaN as None and a complex
    number as [re, im].
    """

    items: list[AssumptionResult]

    @property
    def ok(self) -> bool:
        return all(it.status != FAILS for it in self.items)

    def __getitem__(self, i: int) -> AssumptionResult:
        return self.items[i]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "items": [
                {"name": it.name, "status": it.status, "numbers": _jsonable(it.numbers), "reason": it.reason}
                for it in self.items
            ],
        }

    def __str__(self) -> str:
        lines = [f"Assumptions of the theorem: {'ok' if self.ok else 'NOT MET'}"]
        for k, it in enumerate(self.items, 1):
            lines.append(f"  {k}. {it.name:<30} {it.status:<14} {it.reason}")
            nums = ", ".join(f"{key}={_fmt(v)}" for key, v in it.numbers.items())
            if nums:
                lines.append(f"     {nums}")
        return "\n".join(lines)


def _check_attention(att: Any) -> Attention:
    if not isinstance(att, Attention):
        raise TypeError(f"att must be an attnflow.Attention, got {type(att).__name__}")
    return att


def _spectral(att: Attention) -> AssumptionResult:
    sp = att.spectrum()
    cond = att.cond_B
    eig = sp.eigenvalues
    eigenvalues = [float(v) for v in eig] if sp.symmetric else [complex(v) for v in eig]
    numbers = {
        "cond_B": cond,
        "asymmetry": sp.asymmetry,
        "eigenvalues": eigenvalues,
        "mu1": sp.mu1,
        "mu2": sp.mu2 if sp.mu2 is not None else math.nan,
        "multiplicity": sp.multiplicity,
        "gap": sp.gap,
    }
    problems = []
    if not cond <= COND_B_MAX:
        problems.append(f"B is singular (condition number {cond:.3g} > {COND_B_MAX:.0e})")
    if not sp.symmetric:
        problems.append(f"A is not symmetric (relative asymmetry {sp.asymmetry:.3g} > {SYMMETRY_TOL:.0e})")
    if sp.mu2 is None or sp.gap <= 0:
        problems.append("A has no spectral gap (a single distinct eigenvalue)")
    if problems:
        return AssumptionResult("B invertible, A symmetric, gap", FAILS, numbers, "; ".join(problems) + ".")
    reason = (
        f"B is invertible (cond {cond:.3g}), A is symmetric and its top eigenvalue {sp.mu1:.4g} "
        f"(multiplicity {sp.multiplicity}) has gap {sp.gap:.4g} > 0."
    )
    return AssumptionResult("B invertible, A symmetric, gap", OK, numbers, reason)


def _moments(att: Attention, X0: Any, kind: str | None, tol: float) -> AssumptionResult:
    name = "no mass where P_1 x = 0"
    if X0 is None:
        return AssumptionResult(name, NOT_CHECKABLE, {}, "No initial data X0 was given.")
    X = check_points(X0, "X0", d=att.d).reshape(-1, att.d)
    sp = att.spectrum()
    P = np.asarray(sp.top_projector)
    Y = X @ P.T
    top = np.linalg.norm(Y, axis=1)
    perp = np.linalg.norm(X - Y, axis=1)
    i = int(np.argmin(top))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(top > 0, perp / top, math.inf)
    m = sp.multiplicity
    numbers: dict[str, Any] = {
        "min_abs_P1x": float(top[i]),
        "argmin": i,
        "M1": float(np.mean(r)),
        "M2": float(np.mean(r * r)),
        "n_tokens": X.shape[0],
    }
    proj = "orthogonal" if sp.symmetric else "spectral (Riesz, A is not symmetric)"
    note = ""
    if kind in ("uniform", "vmf") and m < att.d:
        numbers["moments_finite_for_p_below"] = m
        note = (
            f" For {kind} rho_0 the moments M_p are finite exactly for p < {m} (the top eigenspace "
            f"has dimension {m}): the sample values grow with N for p >= {m}."
        )
    if top[i] <= tol:
        reason = f"token {i} has |P_1 x| = {top[i]:.3g} <= {tol:.3g}: Pi is undefined there ({proj} P_1)."
        return AssumptionResult(name, FAILS, numbers, reason + note)
    reason = (
        f"No token lies where P_1 x = 0 (smallest |P_1 x_i| = {top[i]:.3g}, {proj} P_1); "
        "the sample moments are finite." + note
    )
    return AssumptionResult(name, OK, numbers, reason)


def _density(kind: str | None) -> AssumptionResult:
    name = "positive density"
    if kind == "uniform":
        return AssumptionResult(name, OK, {"kind": kind}, "Uniform rho_0 has a constant positive density.")
    if kind == "vmf":
        return AssumptionResult(
            name,
            OK,
            {"kind": kind},
            "von Mises-Fisher rho_0 has a positive smooth density exp(kappa <m, x>).",
        )
    return AssumptionResult(
        name,
        NOT_CHECKABLE,
        {"kind": kind or "points"},
        "A bare point cloud has no density; pass kind='uniform' or 'vmf' when it was sampled from one.",
    )


def check_assumptions(att: Attention, X0: Any = None, kind: str | None = None, tol: float = 1e-12):
    """Check the theorem's assumptions (MATH.md) for `att` and, optionally, initial tokens X0.

    att: Attention; X0: (N, d) or (M, N, d) unit rows (or None); kind: how X0 was drawn --
    "uniform", "vmf", "points" or None (a bare cloud); tol: |P_1 x_i| <= tol counts as P_1 x_i = 0.
    Returns an AssumptionReport: per assumption a status ("ok", "fails", "not checkable"),
    its numbers (cond_B, asymmetry, eigenvalues, mu1, mu2, multiplicity, gap; min_abs_P1x, M1, M2)
    and a one-sentence reason.  For non-symmetric A the moments use the spectral projector.
    """
    att = _check_attention(att)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    tol = check_positive(tol, "tol")
    return AssumptionReport([_spectral(att), _moments(att, X0, kind, tol), _density(kind)])


def subspace_angle(U: Any, W: Any) -> float:
    """Largest principal angle (radians, in [0, pi/2]) between span(U) and span(W).

    U: (d, m), W: (d, k) bases (orthonormalised internally); with m != k this is the largest of
    the min(m, k) principal angles (0 when one subspace contains the other).
    """
    from scipy.linalg import subspace_angles

    mats = []
    for M, name in ((U, "U"), (W, "W")):
        M = to_numpy(M).astype(np.float64)
        if M.ndim == 1:
            M = M[:, None]
        if M.ndim != 2 or M.shape[1] == 0:
            raise ValueError(f"{name} must be a (d, m) basis matrix with m >= 1, got shape {M.shape}")
        if not np.all(np.isfinite(M)):
            raise ValueError(f"{name} contains NaN or inf")
        if np.linalg.matrix_rank(M) < M.shape[1]:
            raise ValueError(f"{name} must have linearly independent columns (a basis)")
        mats.append(M)
    if mats[0].shape[0] != mats[1].shape[0]:
        raise ValueError(
            f"U and W must have the same number of rows d, got {mats[0].shape} and {mats[1].shape}"
        )
    return float(np.max(subspace_angles(mats[0], mats[1])))


def reference_rates(att: Attention) -> dict[str, Any]:
    """Corollary 2's reference rates (per unit time t) for the zero-temperature flow, symmetric A.

    "guaranteed": gamma / (2 ||B||), a guaranteed W2 rate.
    "c_star": min( gamma / |B^T u_1|, min_{k>=2} sum_{j<k} (mu_j - mu_k) / (2 |B^T u_k|) ), the
    sharper heuristic prediction; "terms" lists its pieces.
    Repeated eigenvalues: |B^T u| then depends on the choice of basis u_k in the eigenspace E;
    we use the basis-free worst case max_{u in E, |u|=1} |B^T u| = ||B^T U_E|| (slowest tokens),
    and sum over eigenvalues strictly above (equal ones add 0).  For simple eigenvalues this is
    exactly the formula of MATH.md.  In particular a multiple top eigenvalue gives
    gamma / ||B^T U_1|| for the first term.
    Also the angles (radians) between A's top eigenspace and V's, by largest real part and by
    largest modulus.  For non-symmetric A or no gap the rates are None and "note" says why.
    """
    att = _check_attention(att)
    sp = att.spectrum()
    top_basis = np.asarray(sp.top.basis)
    out: dict[str, Any] = {
        "gamma": sp.gap,
        "norm_B": att.norm_B,
        "guaranteed": None,
        "c_star": None,
        "terms": [],
        "angle_A_V_real": subspace_angle(top_basis, np.asarray(sp.v_top_real.basis)),
        "angle_A_V_magnitude": subspace_angle(top_basis, np.asarray(sp.v_top_magnitude.basis)),
        "note": "",
    }
    if not sp.symmetric:
        out["note"] = (
            f"A is not symmetric (relative asymmetry {sp.asymmetry:.3g}): Corollary 2 does not apply."
        )
        return out
    if sp.mu2 is None or sp.gap <= 0:
        out["note"] = "A has a single distinct eigenvalue (no gap): every point is a fixed point."
        return out
    B = np.asarray(att.B)
    mu = np.asarray(sp.eigenvalues, dtype=np.float64)  # descending
    U = np.asarray(sp.eigenvectors)
    scale = max(float(np.max(np.abs(mu))), 1e-300)
    groups: list[list[int]] = []  # indices of (numerically) equal eigenvalues, top first
    for k in range(mu.size):
        if groups and mu[groups[-1][0]] - mu[k] <= 1e-9 * scale:
            groups[-1].append(k)
        else:
            groups.append([k])
    speed = [float(np.linalg.norm(B.T @ U[:, g], 2)) for g in groups]  # max |B^T u| over unit u in E_g
    terms = [{"eigenvalue": float(mu[groups[0][0]]), "dim": len(groups[0]), "rate": sp.gap / speed[0]}]
    for g, sg in zip(groups[1:], speed[1:], strict=True):
        mk = mu[g[0]]
        above = mu[mu > mk + 1e-9 * scale]
        terms.append({"eigenvalue": float(mk), "dim": len(g), "rate": float(np.sum(above - mk) / (2.0 * sg))})
    out["guaranteed"] = sp.gap / (2.0 * att.norm_B)
    out["c_star"] = min(t["rate"] for t in terms)
    out["terms"] = terms
    return out
