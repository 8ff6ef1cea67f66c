"""The numbers of one head or layer beside the theorem's assumptions.

The verdicts (does an assumption hold, and why not) come from `attnflow.science.assumptions.check_assumptions`
alone, the same checker as `attnflow check`.  This module adds numbers of its own, never a second
verdict: the effective beta, the spectra of A and of its symmetric part S = (A + A^T)/2 (computed
from d_h x d_h pieces for a single head), and the cloud's moments for S's top eigenspace, the
projector the heads experiment uses when A is not symmetric.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_points
from ..attention import TOP_TOL, Attention, EigenSpace, attention_from_A, top_eigenspace
from ..science.assumptions import FAILS, AssumptionsDict, check_assumptions

__all__ = ["diagnose", "distinct_gap", "spectra", "symmetric_part_attention", "symmetric_top"]


class _Moments(TypedDict):
    """Assumption 2's numbers for S's top eigenspace (`_symmetric_moments`)."""

    M1: float
    M2: float
    min_P1x: float
    mean_P1x: float


class _Numbers(TypedDict):
    """The numbers of `diagnose` that need no tokens."""

    d: int
    beta: float
    norm_B: float
    beta_normB: float
    rank_B: int
    cond_B: float | None
    cond_B_range: float | None
    asymmetry: float
    eig_A_top: list[list[float]]
    mu1: float
    mu2: float | None
    gap: float
    rel_gap: float
    multiplicity: int
    top_complex: bool
    sym_eig_top: list[float]
    sym_eig_min: float
    sym_gap: float
    sym_rel_gap: float
    sym_multiplicity: int
    sym_indefinite: bool


class Diagnosis(_Numbers):
    """What `diagnose` returns (its docstring says each entry); M1 to mean_P1x only with tokens."""

    M1: NotRequired[float]
    M2: NotRequired[float]
    min_P1x: NotRequired[float]
    mean_P1x: NotRequired[float]
    assumptions: AssumptionsDict
    failures: list[str]


def symmetric_top(att: Attention) -> EigenSpace:
    """Top eigenspace of the symmetric part S = (A + A^T) / 2 of A: the P_1 that Pi uses when A is
    replaced by its symmetric part (works for singular B, e.g. a single head)."""
    A = np.asarray(att.A)
    return top_eigenspace((A + A.T) / 2, "real")


def symmetric_part_attention(att: Attention) -> Attention:
    """Attention with the same B and beta and A replaced by its symmetric part (A + A^T) / 2.

    Built as Q = I, K = B, V = S B^{-T}; B must be invertible (a whole layer, not a single head:
    use `symmetric_top` there).
    """
    A = np.asarray(att.A)
    if np.linalg.matrix_rank(att.B) < att.d:
        raise ValueError(
            f"att.B has rank {np.linalg.matrix_rank(att.B)} < d = {att.d} (a single head?): no V gives "
            "A = S with this B; use symmetric_top(att) for the projector P_1 of the symmetric part"
        )
    return attention_from_A((A + A.T) / 2, att.B, att.beta)


def spectra(att: Attention) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(singular values of B, eigenvalues of A, eigenvalues of S = (A + A^T)/2, basis of S's top
    eigenspace (d, m)); s and eigenvalues of S descending, those of A by descending real part.

    s and the eigenvalues of A are the Attention's own (`singular_values_B`, `spectrum()`), from
    r x r pieces for a head.  A head (Q padded with zero rows) has A = (V K_r^T) Q_r, and
    S = Z J Z^T with Z = [V K_r^T, Q_r^T] and J = [[0, I], [I, 0]] / 2: S's spectrum comes from
    2r x 2r matrices, the rest are exact zeros.
    """
    d = att.d
    s = np.asarray(att.singular_values_B)
    w = np.asarray(att.spectrum().eigenvalues)
    keep = np.any(att.Q != 0, axis=1)
    r = int(keep.sum())
    if r == d or r == 0:
        A = np.asarray(att.A)
        ws, Us = np.linalg.eigh((A + A.T) / 2)
        ws, Us = ws[::-1].copy(), Us[:, ::-1]
    else:
        Qr, Kr = att.Q[keep], att.K[keep]
        Qz, Rz = np.linalg.qr(np.hstack([att.V @ Kr.T, Qr.T]))
        k = Rz.shape[0]
        J = np.zeros((2 * r, 2 * r))
        J[:r, r:] = J[r:, :r] = 0.5 * np.eye(r)
        small, vs = np.linalg.eigh(Rz @ J @ Rz.T)
        ws = np.concatenate([small, np.zeros(d - k)])
        order = np.argsort(ws, kind="stable")[::-1]
        ws = ws[order]
        Us = None
        if order[0] < k and ws[0] > TOP_TOL * max(abs(ws[0]), abs(ws[-1])):
            m = distinct_gap(ws, float(np.max(np.abs(ws))))[2]
            Us = Qz @ vs[:, order[:m]]
        if Us is None:  # top eigenvalue 0: its eigenspace meets the complement of Z's range
            A = np.asarray(att.A)
            Us = np.linalg.eigh((A + A.T) / 2)[1][:, ::-1]
    w = w[np.lexsort((-w.imag, -w.real))]
    m = distinct_gap(ws, float(np.max(np.abs(ws))))[2]
    return s, w, ws, Us[:, :m]


def distinct_gap(values: np.ndarray, scale: float) -> tuple[float, float | None, int]:
    """(mu1, mu2, multiplicity) of real values, descending, grouping within TOP_TOL * scale."""
    tol = TOP_TOL * max(scale, np.finfo(float).tiny)
    mu1 = float(values[0])
    m = int(np.sum(values >= mu1 - tol))
    return mu1, (float(values[m]) if m < len(values) else None), m


def _symmetric_moments(X: np.ndarray, P: np.ndarray) -> _Moments:
    """M_1, M_2 of |P_S^perp x| / |P_S x| over unit rows X (N, d), min and mean |P_S x|; P (d, m)
    an orthonormal basis of S's top eigenspace."""
    p1 = np.linalg.norm(X @ P, axis=1)
    perp = np.sqrt(np.maximum(1.0 - p1**2, 0.0))
    with np.errstate(divide="ignore"):
        ratio = np.where(p1 > 0, perp / np.where(p1 > 0, p1, 1.0), np.inf)
    return {
        "M1": float(np.mean(ratio)),
        "M2": float(np.mean(ratio**2)),
        "min_P1x": float(p1.min()),
        "mean_P1x": float(p1.mean()),
    }


def diagnose(att: Attention, X: ArrayLike | None = None) -> Diagnosis:
    """The assumptions of one head or layer, checked by `check_assumptions`, with more numbers.

    X: optional tokens (N, d), rows normalised here (raw hidden states are fine).
    Verdicts -- "assumptions": ``check_assumptions(att, X).to_dict()``, exactly what
    `attnflow check` reports on these matrices; "failures": the reasons of the assumptions that fail.
    Numbers of its own, not verdicts: beta_normB = beta ||B||_2 (the largest logit on unit tokens);
    B: rank, cond_B (None when singular: rank < d), cond_B_range (s_1 / s_rank); A: asymmetry
    (relative Frobenius norm of the antisymmetric part), top eigenvalues (real, imag), mu1, mu2, gap
    and gap / spectral radius on real parts, whether the top eigenvalue is complex; sym: the same
    for S = (A + A^T) / 2 and whether S is indefinite; with X, M1, M2, min and mean |P_S x| for P_S
    the top eigenspace of S (assumption 2's own numbers, for A's P_1, are under "assumptions").
    Dicts of plain Python values; write them with `attnflow.io.to_json`.
    """
    d = att.d
    s, w, ws, P = spectra(att)
    rank = int(np.sum(s > s[0] * d * np.finfo(float).eps)) if s[0] > 0 else 0
    radius = float(np.max(np.abs(w)))
    mu1, mu2, mult = distinct_gap(w.real, radius)
    gap = mu1 - mu2 if mu2 is not None else 0.0
    rs = float(np.max(np.abs(ws)))
    smu1, smu2, smult = distinct_gap(ws, rs)
    sgap = smu1 - smu2 if smu2 is not None else 0.0
    numbers: _Numbers = {
        "d": d,
        "beta": att.beta,
        "norm_B": float(s[0]),
        "beta_normB": att.beta * float(s[0]),
        "rank_B": rank,
        "cond_B": float(s[0] / s[-1]) if rank == d else None,
        "cond_B_range": float(s[0] / s[rank - 1]) if rank else None,
        "asymmetry": att.spectrum().asymmetry,
        "eig_A_top": [[float(z.real), float(z.imag)] for z in w[:3]],
        "mu1": mu1,
        "mu2": mu2,
        "gap": gap,
        "rel_gap": gap / radius if radius > 0 else 0.0,
        "multiplicity": mult,
        "top_complex": bool(abs(w[0].imag) > TOP_TOL * max(radius, 1e-300)),
        "sym_eig_top": [float(v) for v in ws[:3]],
        "sym_eig_min": float(ws[-1]),
        "sym_gap": sgap,
        "sym_rel_gap": sgap / rs if rs > 0 else 0.0,
        "sym_multiplicity": smult,
        "sym_indefinite": bool(ws[0] > 0 > ws[-1]),
    }
    if X is not None:
        X = check_points(X, "X", d=d, normalize=True, allow_batch=False)
    checked = check_assumptions(att, X)
    failures = [f"{k}. {it.reason}" for k, it in enumerate(checked.items, 1) if it.status == FAILS]
    if X is None:
        return {**numbers, "assumptions": checked.to_dict(), "failures": failures}
    return {**numbers, **_symmetric_moments(X, P), "assumptions": checked.to_dict(), "failures": failures}
