"""The sources and the separatrix of the finite-temperature mean-field flow on S^2 (d = 3), located by
the fates of tracers, and the quadrature of rho_0 graded toward them (MATH.md, "The tail in d = 3").

Where.  For symmetric A with eigenvalues mu_1 > mu_2 > mu_3 the zero-temperature flow has attractors
+-u_1, saddles +-u_2 and sources +-u_3; the separatrix between the basins of +-u_1 is the great
circle u_1^perp.  At finite beta the sources move by O(1 / beta) (0.2 rad at beta = 10 in the d = 3
worked example) and the separatrix bends.  This module needs the symmetry that pins them down: the
reflection R = I - 2 u_2 u_2^T commutes with B and V and rho_0 is invariant under R and x -> -x (the
worked example, uniform rho_0).  Then the plane of u_1 and u_3 is invariant at every beta and time, the
sources +-c lie on its great circle, the saddles stay at +-u_2, and in polar coordinates about c
(azimuth 0 toward u_2) the separatrix is phi = +-phi_s(theta) mod pi, phi_s(pi / 2) = 0.

How.  Each pass integrates rho_0 on nodes graded toward the current estimate
(`graded_sphere_quadrature`) with tracers of weight TRACER_WEIGHT: along the invariant circle across
the source's bracket, and across the separatrix's bracket on a few rings.  A point's fate is the sign
of <u_1, x> when |<u_1, x>| first exceeds EXIT (0 if it never does by t_max); each bracket shrinks to
[the last point of fate -, the first of fate +].  Between the located rings phi_s is interpolated in
log theta (constant below the first: near the source the flow is self-similar in log theta).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..attention import Attention, check_attention
from ..measures.densities import DensityFn
from ..measures.quadrature import graded_sphere_quadrature
from .separatrix import TRACER_WEIGHT, kernel_width

EXIT = 0.6  # |<u_1, x>| at which a point's fate is read
RINGS = np.geomspace(1e-3, 1.4, 12)  # the polar angles (radians from c) where phi_s is located
SYMMETRY_TOL = 1e-10
SEARCH_DU, SEARCH_EPS_SEP = 0.5, 1e-2  # the search's grading (sphere_quadrature)

__all__ = [
    "SourceSearch",
    "SourceSettings",
    "locate_sources",
    "sources_problem",
    "sphere_quadrature",
    "symmetric_frame",
]


@dataclass(frozen=True)
class SourceSearch:
    """Result of `locate_sources`: the source c, its frame, and the separatrix azimuth per ring.

    Attributes
    ----------
    alpha, alpha_bracket : float, array (2,)
        c = cos(alpha) u_3 + sin(alpha) u_1 (radians), and the bracket it was located in.
    u1, u2, u3 : array (3,)
        A's eigenvectors (u_2 the meridian phi = 0).
    theta : array (J,)
        Polar angles about c of the rings where the separatrix was located.
    brackets : array (J, 2)
        The separatrix azimuth phi_s's bracket on each ring (radians).
    passes : list of dict
        One per pass (N, tracers, widths, undecided, n_steps, wall_time_s).
    """

    alpha: float
    alpha_bracket: np.ndarray
    u1: np.ndarray
    u2: np.ndarray
    u3: np.ndarray
    theta: np.ndarray
    brackets: np.ndarray
    passes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def centre(self) -> np.ndarray:
        return math.cos(self.alpha) * self.u3 + math.sin(self.alpha) * self.u1

    @property
    def width(self) -> float:
        """The widest bracket (radians), source and separatrix: the precision reached."""
        return float(max(np.ptp(self.alpha_bracket), np.max(np.ptp(self.brackets, axis=1))))

    def separatrix(self, theta: np.ndarray) -> np.ndarray:
        """The separatrix azimuths (K, 2) on rings at polar angles theta (K,) in (0, pi): phi_s and
        pi - phi_s below the equator, their images under x -> -x above it."""
        theta = np.asarray(theta, dtype=np.float64)
        low = np.minimum(theta, math.pi - theta)
        mid = self.brackets.mean(axis=1)
        logt = np.log(np.concatenate([self.theta, [math.pi / 2.0]]))
        phi = np.interp(np.log(np.maximum(low, self.theta[0])), logt, np.concatenate([mid, [0.0]]))
        phi = np.where(theta <= math.pi / 2.0, phi, -phi)
        return np.stack([phi, math.pi - phi], axis=1)


def symmetric_frame(att: Attention, density: DensityFn | None) -> tuple[np.ndarray, ...]:
    """(u_1, u_2, u_3) of A, checked: d = 3, finite beta, A symmetric with distinct eigenvalues, B and
    V commuting with R = I - 2 u_2 u_2^T, rho_0 invariant under R and x -> -x."""
    att = check_attention(att)
    if att.d != 3 or not math.isfinite(att.beta):
        raise ValueError(f"the sources of the flow on S^2 need d = 3 weights at finite beta, got d = {att.d}")
    A = att.A
    if not np.allclose(A, A.T, atol=SYMMETRY_TOL * max(1.0, np.abs(A).max())):
        raise ValueError("locating the sources needs symmetric A = V B^T (its eigenvectors span the frame)")
    mu, U = np.linalg.eigh(A)
    if np.min(np.diff(mu)) <= 1e-9 * max(1.0, np.abs(mu).max()):
        raise ValueError(f"locating the sources needs three distinct eigenvalues of A, got {mu[::-1]}")
    u3, u2, u1 = U[:, 0], U[:, 1], U[:, 2]
    if np.cross(u3, u2) @ u1 < 0:  # azimuths about u_3 increase toward +u_1
        u2 = -u2
    R = np.eye(3) - 2.0 * np.outer(u2, u2)
    for name, M in (("B", att.B), ("V", att.V)):
        if np.abs(R @ M @ R - M).max() > SYMMETRY_TOL * max(1.0, np.abs(M).max()):
            raise ValueError(
                f"locating the sources needs {name} symmetric under the reflection through u_2^perp "
                "(as in the worked example): without it the sources leave the plane of u_1 and u_3"
            )
    if density is not None:
        X = np.random.default_rng(0).standard_normal((64, 3))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        f = np.asarray(density(X), dtype=np.float64)
        if not (np.allclose(density(X @ R), f) and np.allclose(density(-X), f)):
            raise ValueError("locating the sources needs rho_0 invariant under x -> -x and the reflection R")
    return u1, u2, u3


def sources_problem(att: Attention) -> str | None:
    """None where `locate_sources` can run on att's weights (any beta), else why not; None for d != 3."""
    if att.d != 3:
        return None
    try:
        symmetric_frame(att.with_beta(1.0) if not math.isfinite(att.beta) else att, None)
    except ValueError as err:
        return str(err).replace("locating the sources needs ", "no ")
    return None


def _fates(x: np.ndarray, u1: np.ndarray) -> np.ndarray:
    """Fates (P,) of points from their saved states x (T, P, 3): the sign of <u_1, x> when |<u_1, x>|
    first exceeds EXIT, 0 if it never does."""
    p = x @ u1
    out = np.abs(p) > EXIT
    first = np.argmax(out, axis=0)
    return np.where(out.any(axis=0), np.sign(p[first, np.arange(p.shape[1])]), 0.0)


def _shrink(points: np.ndarray, fate: np.ndarray, lo: float, hi: float) -> tuple[float, float, int]:
    """The new bracket from points (P,) increasing from lo to hi (both included) with fates (P,) going
    from - to +, and the number of points between its ends still undecided.  Where every decided fate
    is the same, the split lies beyond the bracket (this pass's discretisation moved it): the bracket
    steps out by its width on that side."""
    minus, plus = np.flatnonzero(fate < 0), np.flatnonzero(fate > 0)
    if minus.size and plus.size and minus[-1] > plus[0]:
        raise ValueError(
            f"the tracers in [{lo:.6g}, {hi:.6g}] rad do not split into fate -u_1 below and +u_1 above: "
            "raise t_max (fates undecided) or refine the grading"
        )
    if plus.size == 0:
        return hi, hi + (hi - lo), 0
    if minus.size == 0:
        return lo - (hi - lo), lo, 0
    i, j = minus[-1], plus[0]
    return float(points[i]), float(points[j]), int(j - i - 1)


@dataclass(frozen=True)
class SourceSettings:
    """How `locate_sources` searches: the grading of the measure's nodes (h, du, eps, eps_sep as in
    `graded_sphere_quadrature`), tracers per bracket, passes at most, the bracket width (radians) at
    which it stops, rho_0's density, and `simulate`'s options, kernel and device (method "adaptive")."""

    h: float
    du: float
    eps: float = 1e-6
    eps_sep: float = 1e-4
    tracers: int = 16
    max_passes: int = 6
    tol: float = 1e-6
    density: DensityFn | None = None
    options: dict[str, Any] | None = None
    kernel: str = "auto"
    device: str | None = None


def _pass(
    att: Attention, s: SourceSearch, t_max: float, cfg: SourceSettings
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One pass: the measure graded toward s's source and separatrix, tracers across every bracket;
    the new source bracket (2,), ring brackets (J, 2) and the pass's log."""
    from .integrate import simulate

    c, m = s.centre, s.u2
    b = np.cross(c, m)
    X, w = graded_sphere_quadrature(c, m, cfg.h, cfg.du, cfg.eps, s.separatrix, cfg.eps_sep, cfg.density)
    k = cfg.tracers
    a = np.linspace(s.alpha_bracket[0], s.alpha_bracket[1], k)
    along = np.cos(a)[:, None] * s.u3 + np.sin(a)[:, None] * s.u1
    # a ring is searched once the source is known to a quarter of its radius
    on = np.flatnonzero(s.theta > 4.0 * np.ptp(s.alpha_bracket))
    br = s.brackets[on]
    ph = br[:, :1] + np.ptp(br, axis=1)[:, None] * np.linspace(0.0, 1.0, k)
    th = s.theta[on, None]
    rings = np.cos(th)[..., None] * c + np.sin(th)[..., None] * (
        np.cos(ph)[..., None] * m + np.sin(ph)[..., None] * b
    )
    tr = np.concatenate([along, rings.reshape(-1, 3)])
    weights = np.concatenate([w * (1.0 - TRACER_WEIGHT * len(tr)), np.full(len(tr), TRACER_WEIGHT)])
    times = np.linspace(0.0, t_max, math.ceil(20 * t_max) + 1)
    start = time.perf_counter()
    traj = simulate(np.concatenate([X, tr]), att, times, method="adaptive", kernel=cfg.kernel,
                    weights=weights, options=cfg.options, device=cfg.device)  # fmt: skip
    fate = _fates(np.asarray(traj.x)[:, len(X) :], s.u1)
    lo, hi, und = _shrink(a, fate[:k], *s.alpha_bracket)
    ring_br = s.brackets.copy()
    undecided = [und]
    for i, j in enumerate(on):
        r_lo, r_hi, r_und = _shrink(ph[i], fate[k * (i + 1) : k * (i + 2)], *br[i])
        ring_br[j] = (r_lo, r_hi)
        undecided.append(r_und)
    log = {
        "N": len(w),
        "tracers": len(tr),
        "alpha_bracket": [lo, hi],
        "rings_searched": int(on.size),
        "width": float(max(hi - lo, np.max(np.ptp(ring_br, axis=1)))),
        "undecided": undecided,
        "n_steps": traj.info.get("n_steps"),
        "wall_time_s": time.perf_counter() - start,
    }
    return np.array([lo, hi]), ring_br, log


def _rewiden(s: SourceSearch, alpha: np.ndarray, rings: np.ndarray, searched: int) -> np.ndarray:
    """The rings' brackets about the new centre: those searched (the last `searched`) widened by how far
    the centre moved, seen from each ring (radians of azimuth); the others as they were."""
    pad = 2.0 * abs(float(np.mean(alpha)) - s.alpha) / np.sin(s.theta)
    on = np.arange(s.theta.size) >= s.theta.size - searched
    return np.where(on[:, None], rings + np.stack([-pad, pad], axis=1), rings)


def locate_sources(
    att: Attention, t_max: float, settings: SourceSettings | None = None, **fields: Any
) -> SourceSearch:
    """The source c of the finite-beta mean-field flow on S^2 nearest u_3 and the separatrix through it,
    by bisection on fates (the module's docstring says how and for which weights).

    Parameters
    ----------
    att : Attention
        d = 3 weights at finite beta, with the reflection symmetry (ValueError otherwise).
    t_max : float
        The integration time: the tracers' fates must be decided by then.
    settings : SourceSettings, optional
        h and du have no default; `fields` (h=..., du=..., tracers=...) override its fields.

    Returns
    -------
    SourceSearch
        Its width is the precision reached.
    """
    from dataclasses import replace

    cfg = SourceSettings(**fields) if settings is None else replace(settings, **fields)
    u1, u2, u3 = symmetric_frame(att, cfg.density)
    if not (math.isfinite(t_max) and t_max > 0):
        raise ValueError(f"t_max must be > 0, got {t_max!r}")
    half = min(0.6, 6.0 / att.beta)
    rings = np.tile([-0.4, 0.4], (RINGS.size, 1))
    s = SourceSearch(0.0, np.array([-half, half]), u1, u2, u3, RINGS.copy(), rings)
    passes: list[dict[str, Any]] = []
    for _ in range(cfg.max_passes):
        alpha, rings, log = _pass(att, s, t_max, cfg)
        passes.append(log)
        rings = _rewiden(s, alpha, rings, log["rings_searched"])
        s = SourceSearch(float(np.mean(alpha)), alpha, u1, u2, u3, s.theta, rings, passes)
        if log["width"] < cfg.tol:
            break
    return s


def sphere_quadrature(
    att: Attention,
    t_max: float,
    level: int = 0,
    *,
    search: SourceSearch | None = None,
    eps: float = 1e-6,
    eps_sep: float = 1e-3,
    density: DensityFn | None = None,
    **search_options: Any,
) -> tuple[np.ndarray, np.ndarray, SourceSearch]:
    """Nodes and weights of rho_0 for the mean-field flow of att on S^2 up to t_max, graded toward its
    sources and separatrix: spacing h = kw / 2^level away from them and du = min(2 kw, 0.3) / 2^level
    in log-distance near them (kw = 1 / sqrt(beta ||B||), as `separatrix.mean_field_quadrature` on
    S^1); compare two levels to show convergence.

    Parameters
    ----------
    att : Attention
        d = 3 weights at finite beta with the symmetry `locate_sources` needs.
    t_max : float
        The integration time.
    level : int
        The refinement level, >= 0.
    search : SourceSearch, optional
        A previous result (the sources do not depend on the level); otherwise `locate_sources` runs on
        nodes of spacing kw, log-steps SEARCH_DU and separatrix depth SEARCH_EPS_SEP (coarser than level
        0: the fates of its tracers need the flow, not the tail), with search_options passed on.
    eps, eps_sep, density
        As in `graded_sphere_quadrature`.

    Returns
    -------
    X : array (N, 3), w : array (N,), search : SourceSearch
    """
    att = check_attention(att)
    level = int(level)
    if level < 0:
        raise ValueError(f"level must be an integer >= 0 (each level halves the spacing), got {level}")
    if not math.isfinite(att.beta):
        raise ValueError("sphere_quadrature grades toward the sources of a finite beta; got beta = inf")
    kw = kernel_width(att)
    h0, du0 = kw, min(2.0 * kw, 0.3)
    if search is None:
        options = {"h": h0, "du": SEARCH_DU, "eps": eps, "eps_sep": SEARCH_EPS_SEP, **search_options}
        search = locate_sources(att, t_max, density=density, **options)
    elif search_options:
        raise ValueError(f"search options {sorted(search_options)} apply only without a given search")
    scale = 2.0**-level
    X, w = graded_sphere_quadrature(
        search.centre, search.u2, h0 * scale, du0 * scale, eps, search.separatrix, eps_sep, density
    )
    return X, w, search
