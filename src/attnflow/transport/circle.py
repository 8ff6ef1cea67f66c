"""W2 on S^1 from a quadrature measure to two antipodal atoms, to the quadrature's own accuracy.

A quadrature measure rho = sum_i exp(logw_i) delta_{theta_i} (log-weights: masses may be far below
float64's range) stands for a measure with a smooth density.  Its W2 to m_+ delta_u + m_- delta_{-u}
(Pi_# rho_0 for a one-dimensional top eigenspace) is, with alpha the angle to u and chordal cost,

    W2^2 = integral 2 (1 + cos alpha) drho - 4 integral_{|alpha| < a} cos alpha drho,   rho(|alpha| < a) = m_+

(MATH.md, "Distances and diagnostics": send the arc around u to u, the rest to -u).  The few-atoms
path of `atoms` computes this exactly for the points, splitting the one node at the threshold:
exact for point masses, but for a quadrature that split is an O(w h) error (w the node's weight,
h the spacing: 3e-6 in W2 for the d = 2 worked example's graded nodes at level 0).  Here the two
ends of the arc, +-a, are treated as the midpoint rule in the node label with a jump: the partial
cell is integrated on the degree-7 interpolant through the 8 nearest nodes (angles and weights as
functions of their label) and the midpoint rule's Euler-Maclaurin term f'/24 is subtracted at the
joint.  This is used only where those 8 nodes form a smooth family (weights within a factor 20 and
second differences of log spacing and log weight below 0.2); elsewhere (a cluster or a lone node at
the threshold: there the point masses are the measure) the split-node value is returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["CircleW2", "w2_circle_two_atoms"]

STENCIL = 8
_GL_X, _GL_W = np.polynomial.legendre.leggauss(12)


@dataclass(frozen=True)
class CircleW2:
    """value: W2; corrected: whether both arc ends were treated as a smooth quadrature (else the
    split-node value of the points, exact for point masses); threshold: the half-angle a."""

    value: float
    corrected: bool
    threshold: float


def _lagrange(us: np.ndarray, ys: np.ndarray, u: np.ndarray) -> np.ndarray:
    out = np.zeros_like(u)
    for a in range(len(us)):
        la = np.ones_like(u)
        for b in range(len(us)):
            if b != a:
                la = la * (u - us[b]) / (us[a] - us[b])
        out += la * ys[a]
    return out


def _lagrange_at(ys: list[float], u: float) -> float:
    """The Lagrange interpolant through (k, ys[k]), k = 0 .. len(ys) - 1, at one u: `_lagrange` on
    plain floats (the Newton and slope steps call it one point at a time, where NumPy's per-call
    overhead is most of the cost)."""
    n, out = len(ys), 0.0
    for a in range(n):
        la = 1.0
        for b in range(n):
            if b != a:
                la *= (u - b) / (a - b)
        out += la * ys[a]
    return out


def _stencil(alpha: np.ndarray, w: np.ndarray, end: float) -> tuple[int, bool]:
    """First index of the STENCIL nodes around `end`, and whether they form a smooth family."""
    n = int(np.searchsorted(alpha, end))
    lo = max(0, min(n - STENCIL // 2, len(alpha) - STENCIL))
    al, ww = alpha[lo : lo + STENCIL], w[lo : lo + STENCIL]
    if len(al) < STENCIL or ww.max() > 20.0 * ww.min() or np.any(np.diff(al) <= 0):
        return lo, False
    smooth = np.all(np.abs(np.diff(np.log(np.diff(al)), 2)) < 0.2) and np.all(
        np.abs(np.diff(np.log(ww), 2)) < 0.2
    )
    return lo, bool(smooth)


class _NotSmooth(Exception):
    """The stencil at an end is not a smooth family after all (the split-node value is used)."""


def _end_terms(alpha: np.ndarray, w: np.ndarray, end: float, inside_below: bool) -> tuple[float, float]:
    """Corrections to (mass, integral of cos alpha) of the nodes strictly inside the arc, at one end."""
    lo, _ = _stencil(alpha, w, end)
    us = np.arange(STENCIL, dtype=np.float64)
    al, ww = alpha[lo : lo + STENCIL], w[lo : lo + STENCIL]
    u = float(np.interp(end, al, us))
    al_f, ww_f = al.tolist(), ww.tolist()
    for _ in range(50):  # the label u* where alpha(u*) = end
        e = 1e-6
        f = _lagrange_at(al_f, u) - end
        df = (_lagrange_at(al_f, u + e) - _lagrange_at(al_f, u - e)) / (2 * e)
        if not (df > 0.0 and math.isfinite(f)):
            raise _NotSmooth
        u -= f / df
        if abs(f / df) < 1e-14:
            break
    n = int(np.searchsorted(alpha, end)) - lo  # first node beyond `end` in the stencil
    joint = n - 0.5
    out = []
    for h in (np.ones_like, np.cos):
        mid, half = 0.5 * (joint + u), 0.5 * (u - joint)
        uq = mid + half * _GL_X
        part = half * float(np.dot(_GL_W, _lagrange(us, ww, uq) * h(_lagrange(us, al, uq))))
        e = 1e-4
        hf = math.cos if h is np.cos else (lambda _x: 1.0)
        fp, fm = (_lagrange_at(ww_f, joint + d) * hf(_lagrange_at(al_f, joint + d)) for d in (e, -e))
        slope = (fp - fm) / (2 * e)
        # sum over labels below the joint = integral - slope / 24 at the joint (midpoint rule)
        out.append(part + slope / 24.0 if inside_below else -part - slope / 24.0)
    return out[0], out[1]


def _mass_and_moment(alpha: np.ndarray, w: np.ndarray, a: float) -> tuple[float, float]:
    inside = np.abs(alpha) < a
    m, g = float(w[inside].sum()), float(np.dot(w[inside], np.cos(alpha[inside])))
    for end, below in ((a, True), (-a, False)):
        dm, dg = _end_terms(alpha, w, end, below)
        m, g = m + dm, g + dg
    return m, g


def _split_node(alpha: np.ndarray, w: np.ndarray, m_plus: float) -> CircleW2:
    order = np.argsort(-np.cos(alpha))
    a, ww = alpha[order], w[order]
    to_plus = np.clip(m_plus - (np.cumsum(ww) - ww), 0.0, ww)
    sq = np.sum(to_plus * 4.0 * np.sin(a / 2.0) ** 2 + (ww - to_plus) * 4.0 * np.cos(a / 2.0) ** 2)
    k = min(int(np.searchsorted(np.cumsum(ww), m_plus)), len(a) - 1)
    return CircleW2(math.sqrt(max(float(sq), 0.0)), False, float(abs(a[k])))


def _corrected(alpha: np.ndarray, w: np.ndarray, m_plus: float, simple: CircleW2) -> CircleW2:
    """The arc's half-angle a by the secant method on the corrected mass, then W2 from it."""
    a = simple.threshold
    if not (0.0 < a < math.pi) or not (_stencil(alpha, w, a)[1] and _stencil(alpha, w, -a)[1]):
        return simple
    base = float(np.dot(w, 2.0 * (1.0 + np.cos(alpha))))
    a0, a1 = a, a * (1.0 + 1e-6) + 1e-9
    s0, s1 = _mass_and_moment(alpha, w, a0)[0], _mass_and_moment(alpha, w, a1)[0]
    for _ in range(50):  # secant on rho(|alpha| < a) = m_plus
        if s1 == s0:
            break
        a0, a1, s0 = a1, a1 - (s1 - m_plus) * (a1 - a0) / (s1 - s0), s1
        s1 = _mass_and_moment(alpha, w, a1)[0]
        if abs(s1 - m_plus) < 1e-15:
            break
    m, g = _mass_and_moment(alpha, w, a1)
    if abs(m - m_plus) > 1e-12 or not (_stencil(alpha, w, a1)[1] and _stencil(alpha, w, -a1)[1]):
        return simple
    return CircleW2(math.sqrt(max(base - 4.0 * g, 0.0)), True, float(a1))


def w2_circle_two_atoms(theta, logw, atom: float, m_plus: float) -> CircleW2:
    """W2 (chordal) from sum_i exp(logw_i) delta_{theta_i} (normalised here) to m_plus delta_u +
    (1 - m_plus) delta_{-u}, u at angle `atom` (radians).  theta, logw: (N,) with N >= 1."""
    theta, logw = np.asarray(theta, dtype=np.float64).ravel(), np.asarray(logw, dtype=np.float64).ravel()
    if theta.shape != logw.shape or theta.size == 0 or not np.all(np.isfinite(theta)):
        raise ValueError(
            f"theta and logw must be finite (N,) arrays of one shape, got {theta.shape} and {logw.shape}"
        )
    if not 0.0 <= m_plus <= 1.0:
        raise ValueError(f"m_plus must be in [0, 1] (the mass sent to the atom at `atom`), got {m_plus!r}")
    w = np.exp(logw - np.logaddexp.reduce(logw))
    alpha = np.angle(np.exp(1j * (theta - atom)))
    order = np.argsort(alpha)
    alpha, w = alpha[order], w[order]
    simple = _split_node(alpha, w, m_plus)
    try:
        return _corrected(alpha, w, m_plus, simple)
    except _NotSmooth:
        return simple
