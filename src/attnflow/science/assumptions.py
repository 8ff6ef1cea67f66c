"""The theorem's three assumptions, checked with their numbers, and Corollary 2's reference rates.

MATH.md "Assumptions of the theorem" and "Corollary 2".  Every check reports its numbers and a
one-sentence reason, never just pass/fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_points, check_positive, to_numpy
from .._text import format_value
from ..attention import COND_B_MAX, SYMMETRY_TOL, Attention, check_attention
from ..measures import MEASURES

# how X0 was drawn: a bare cloud (None, "points") or from a density of MEASURES
KINDS = (None, "points", *MEASURES)
OK, FAILS, NOT_CHECKABLE = "ok", "fails", "not checkable"

__all__ = ["AssumptionReport", "AssumptionResult", "check_assumptions", "reference_rates", "subspace_angle"]


@dataclass(frozen=True)
class AssumptionResult:
    """One assumption: its name, status ("ok", "fails", "not checkable"), numbers and a reason.

    short: a few words for tables, what fails or why it cannot be checked ("" when ok).
    """

    name: str
    status: str
    numbers: Mapping[str, object] = field(default_factory=dict)
    reason: str = ""
    short: str = ""


class AssumptionItem(TypedDict):
    """One assumption in `AssumptionReport.to_dict()`."""

    name: str
    status: str
    numbers: dict[str, object]
    reason: str
    short: str


class AssumptionsDict(TypedDict):
    """`AssumptionReport.to_dict()`: whether none fails, the count of each status, the items."""

    ok: bool
    counts: dict[str, int]
    items: list[AssumptionItem]


@dataclass(frozen=True)
class AssumptionReport:
    """The three assumptions of the theorem for one attention head (and one initial cloud).

    `to_dict()` gives plain Python values (inf stays inf, complex stays complex); write it as JSON
    with `attnflow.io.to_json`, which writes NaN and inf as null and a complex number as [re, im].

    Attributes
    ----------
    items : list of AssumptionResult
        One per assumption, in MATH.md's order.
    ok : bool
        True when no checkable assumption fails ("not checkable" does not count against it).
    counts : dict
        How many assumptions are "fails", "ok" and "not checkable"; `headline` says it in words.
    """

    items: list[AssumptionResult]

    @property
    def ok(self) -> bool:
        return all(it.status != FAILS for it in self.items)

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(it.status == s for it in self.items) for s in (FAILS, OK, NOT_CHECKABLE)}

    @property
    def headline(self) -> str:
        """ "all 3 ok", "NOT MET (1 fails, 2 ok)" or "1 ok, 2 not checkable (none fails)"."""
        counts = self.counts
        tally = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        if counts[FAILS]:
            return f"NOT MET ({tally})"
        if counts[NOT_CHECKABLE]:
            return f"{tally} (none fails)"
        return f"all {counts[OK]} ok"

    def __getitem__(self, i: int) -> AssumptionResult:
        return self.items[i]

    def to_dict(self) -> AssumptionsDict:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "items": [
                {
                    "name": it.name,
                    "status": it.status,
                    "numbers": dict(it.numbers),
                    "reason": it.reason,
                    "short": it.short,
                }
                for it in self.items
            ],
        }

    def __str__(self) -> str:
        lines = [f"Assumptions of the theorem: {self.headline}"]
        for k, it in enumerate(self.items, 1):
            lines.append(f"  {k}. {it.name:<30} {it.status:<14} {it.reason}")
            nums = ", ".join(f"{key}={format_value(v)}" for key, v in it.numbers.items())
            if nums:
                lines.append(f"     {nums}")
        return "\n".join(lines)


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
        "mu2": sp.mu2,
        "multiplicity": sp.multiplicity,
        "gap": sp.gap,
    }
    problems = {}
    if not cond <= COND_B_MAX:
        problems["B singular"] = f"B is singular (condition number {cond:.3g} > {COND_B_MAX:.0e})"
    if not sp.symmetric:
        problems["A not symmetric"] = (
            f"A is not symmetric (relative asymmetry {sp.asymmetry:.3g} > {SYMMETRY_TOL:.0e})"
        )
    if sp.mu2 is None or sp.gap <= 0:
        problems["no gap"] = "A has no spectral gap (a single distinct eigenvalue)"
    if problems:
        reason = "; ".join(problems.values()) + "."
        return AssumptionResult("B invertible, A symmetric, gap", FAILS, numbers, reason, ", ".join(problems))
    reason = (
        f"B is invertible (cond {cond:.3g}), A is symmetric and its top eigenvalue {sp.mu1:.4g} "
        f"(multiplicity {sp.multiplicity}) has gap {sp.gap:.4g} > 0."
    )
    return AssumptionResult("B invertible, A symmetric, gap", OK, numbers, reason)


MOMENT = "|P_1^perp x| / |P_1 x|"


def _moments(att: Attention, X0: ArrayLike | None, kind: str | None, tol: float) -> AssumptionResult:
    """Assumption 2 on the cloud X0, or on the density it was drawn from (kind a name of MEASURES).

    The theorem needs rho_0(P_1 x = 0) = 0 and a finite moment of |P_1^perp x| / |P_1 x|.
    M_p = mean (|P_1^perp x| / |P_1 x|)^p over the tokens.  A cloud taken as rho_0 has finite M_p
    as soon as no token lies on P_1 x = 0.  A bounded positive density has M_p finite exactly for
    p < m, m = dim of the top eigenspace (MATH.md): then the sample values only grow with N, and an
    infinite M_1 or M_2 never stands beside "ok".
    """
    name = "no mass where P_1 x = 0"
    if X0 is None:
        reason = (
            "No initial data X0 was given; the theorem needs rho_0(P_1 x = 0) = 0 and a finite moment "
            f"of {MOMENT}."
        )
        return AssumptionResult(name, NOT_CHECKABLE, {}, reason, "no X0")
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
    density = kind in MEASURES
    finite = {p: (p < m or m == att.d) if density else bool(top[i] > tol) for p in (1, 2)}
    numbers: dict[str, object] = {
        "min_abs_P1x": float(top[i]),
        "argmin": i,
        "M1": float(np.mean(r)),
        "M2": float(np.mean(r * r)),
        "n_tokens": X.shape[0],
        "M1_finite": finite[1],
        "M2_finite": finite[2],
    }
    proj = "orthogonal" if sp.symmetric else "spectral (Riesz, A is not symmetric)"
    if top[i] <= tol:
        reason = (
            f"token {i} lies where P_1 x = 0 (|P_1 x| = {format_value(top[i], 3)} <= {format_value(tol, 3)}, "
            f"{proj} P_1): Pi is undefined there; the theorem needs rho_0(P_1 x = 0) = 0."
        )
        return AssumptionResult(name, FAILS, numbers, reason, f"token {i} on P_1 x = 0")
    where = f"No token lies where P_1 x = 0 (smallest |P_1 x_i| = {format_value(top[i], 3)}, {proj} P_1)"
    if not density:
        reason = f"{where}: the cloud's M_1 and M_2 are finite, as the theorem needs."
        return AssumptionResult(name, OK, numbers, reason)
    numbers["moments_finite_for_p_below"] = m
    law = f"for {kind} rho_0 M_p is finite exactly for p < {m} (the top eigenspace has dimension {m})"
    infinite = [f"M_{p}" for p in (1, 2) if not finite[p]]
    if not infinite:
        reason = f"{where}; {law}: M_1 and M_2 are finite, as the theorem needs."
        return AssumptionResult(name, OK, numbers, reason)
    reason = (
        f"{where}, but {law}: {' = '.join(infinite)} = inf, and the sample values grow with N. The theorem "
        f"needs a finite moment of {MOMENT}; M_1 and M_2 cannot show one, so this is not decided."
    )
    return AssumptionResult(name, NOT_CHECKABLE, numbers, reason, f"{' = '.join(infinite)} = inf")


def _density(kind: str | None) -> AssumptionResult:
    name = "positive density"
    if kind is not None and kind in MEASURES:
        return AssumptionResult(name, OK, {"kind": kind}, MEASURES[kind].positive)
    kinds = " or ".join(f"kind={k!r}" for k in MEASURES)
    return AssumptionResult(
        name,
        NOT_CHECKABLE,
        {"kind": kind or "points"},
        f"A bare point cloud has no density; pass {kinds} when it was sampled from one.",
        "a bare cloud",
    )


def check_assumptions(
    att: Attention, X0: ArrayLike | None = None, kind: str | None = None, tol: float = 1e-12
):
    """Check the theorem's assumptions (MATH.md) for `att` and, optionally, initial tokens X0.

    For non-symmetric A the moments use the spectral projector. With kind "uniform" or "vmf", rho_0
    is that density, whose M_p is infinite for p >= dim of the top eigenspace: assumption 2 is then
    "not checkable", never "ok" beside an infinite moment. This is the one checker: `attnflow check`
    and `attnflow heads` (through `attnflow.pretrained.diagnose`) both report it.

    Parameters
    ----------
    att : Attention
        The weights.
    X0 : array (N, d) or (M, N, d), optional
        Unit rows (or None).
    kind : str, optional
        How X0 was drawn: "uniform", "vmf", "points" or None (a bare cloud).
    tol : float
        |P_1 x_i| <= tol counts as P_1 x_i = 0.

    Returns
    -------
    AssumptionReport
        Per assumption a status ("ok", "fails", "not checkable"), its numbers (cond_B, asymmetry,
        eigenvalues, mu1, mu2, multiplicity, gap; min_abs_P1x, M1, M2 and whether M_1, M_2 of rho_0
        are finite) and a one-sentence reason.
    """
    att = check_attention(att)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    tol = check_positive(tol, "tol")
    return AssumptionReport([_spectral(att), _moments(att, X0, kind, tol), _density(kind)])


def subspace_angle(U: ArrayLike, W: ArrayLike) -> float:
    """Largest principal angle (radians, in [0, pi/2]) between span(U) and span(W).

    Parameters
    ----------
    U : array (d, m)
        A basis (orthonormalised internally).
    W : array (d, k)
        A basis (orthonormalised internally).

    Returns
    -------
    float
        With m != k the largest of the min(m, k) principal angles (0 when one subspace contains the
        other).
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

    Repeated eigenvalues: |B^T u| then depends on the choice of basis u_k in the eigenspace E; we use
    the basis-free worst case max_{u in E, |u|=1} |B^T u| = ||B^T U_E|| (slowest tokens), and sum over
    eigenvalues strictly above (equal ones add 0). For simple eigenvalues this is exactly the formula
    of MATH.md. In particular a multiple top eigenvalue gives gamma / ||B^T U_1|| for the first term.

    Parameters
    ----------
    att : Attention
        The weights (its beta is not used).

    Returns
    -------
    dict
        "guaranteed": gamma / (2 ||B||), a guaranteed W2 rate. "c_star": min( gamma / |B^T u_1|,
        min_{k>=2} sum_{j<k} (mu_j - mu_k) / (2 |B^T u_k|) ), the sharper heuristic prediction;
        "terms" lists its pieces. Also the angles (radians) between A's top eigenspace and V's, by
        largest real part and by largest modulus. For non-symmetric A, no gap or a singular B the
        rates are None and "note" says why.
    """
    att = check_attention(att)
    sp = att.spectrum()
    top_basis = np.asarray(sp.top.basis)
    out: dict[str, object] = {
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
    if not att.cond_B <= COND_B_MAX:
        out["note"] = (
            f"B is singular (condition number {att.cond_B:.3g}): the zero-temperature speed 1/|B^T x| is "
            "unbounded, so Corollary 2 does not apply."
        )
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
