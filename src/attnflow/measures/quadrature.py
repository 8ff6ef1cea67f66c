"""Deterministic nodes with weights for rho_0 (MATH.md, "Weighted measures"): the Fibonacci lattice
on S^2, equispaced angles on S^1, quasi-Monte Carlo nodes on S^{d-1} for d >= 4 (no lattice exists
there), the quadrature of a density on them, and nodes on S^1 graded logarithmically toward given
angles (the separatrices of the flow)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive, to_numpy
from .densities import DensityFn
from .geometry import normalize

__all__ = [
    "CIRCLE_OFFSET",
    "QUADRATURE_DIMS",
    "circle_nodes",
    "fibonacci_sphere",
    "graded_circle_quadrature",
    "graded_sphere_quadrature",
    "qmc_sphere",
    "quadrature",
]

#: the dimensions d with a lattice of quadrature nodes: equispaced angles on S^1, Fibonacci on S^2;
#: every other d >= 2 takes `qmc_sphere`
QUADRATURE_DIMS = (2, 3)

#: the fixed scrambling of `qmc_sphere`: its nodes are the same on every call and machine
QMC_SEED = 0


def qmc_sphere(N: int, d: int) -> np.ndarray:
    """N quasi-uniform points on S^{d-1}, any d >= 2: (N, d). Scrambled Halton points in (0, 1)^d
    (fixed scrambling, QMC_SEED), sent through the inverse Gaussian CDF and normalised: a Gaussian
    vector's direction is uniform on the sphere, so equal weights 1/N are a quasi-Monte Carlo rule for
    the uniform measure (error about (log N)^d / N for smooth integrands, against N^-1/2 for a cloud)."""
    from scipy.special import ndtri
    from scipy.stats import qmc

    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    U = qmc.Halton(d, scramble=True, seed=QMC_SEED).random(N)
    return normalize(ndtri(np.clip(U, 1e-300, 1.0 - 1e-16)))


def fibonacci_sphere(N: int) -> np.ndarray:
    """N quasi-uniform points on S^2 (Fibonacci lattice), even spacing about sqrt(4 pi / N).

    Parameters
    ----------
    N : int
        Points.

    Returns
    -------
    array (N, 3)
        Unit rows.
    """
    N = int(check_positive(N, "N", integer=True))
    k = np.arange(N, dtype=np.float64) + 0.5
    z = 1.0 - 2.0 * k / N
    r = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    phi = k * math.pi * (3.0 - math.sqrt(5.0))  # golden angle
    return normalize(np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1))


#: Offset of the equispaced nodes on S^1, in units of their spacing: the golden ratio's fractional
#: part. The trapezoidal rule is exact for trigonometric polynomials of degree < N at any offset; an
#: irrational one puts no node on a direction at a rational multiple of pi (the axes, u_1 = (1, 1)/sqrt 2
#: of the d = 2 worked example and its equator P_1 x = 0, where Pi is undefined) for any N. The
#: midpoint offset 1/2 would put a node on that equator whenever N = 4 mod 8 (N = 100, 200, ...).
CIRCLE_OFFSET = (math.sqrt(5.0) - 1.0) / 2.0


def circle_nodes(N: int) -> np.ndarray:
    """N equispaced points on S^1 at angles 2 pi (k + CIRCLE_OFFSET) / N, k = 0..N-1.

    With equal weights 1/N they are the trapezoidal rule: spectrally accurate for smooth integrands.

    Parameters
    ----------
    N : int
        Points.

    Returns
    -------
    array (N, 2)
        Unit rows.
    """
    N = int(check_positive(N, "N", integer=True))
    theta = 2.0 * math.pi * (np.arange(N, dtype=np.float64) + CIRCLE_OFFSET) / N
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def _density_weights(density: DensityFn, X: np.ndarray) -> np.ndarray:
    """w_i = f(x_i) / sum_j f(x_j) at the nodes X (N, d), f checked (finite, >= 0, > 0 after scaling)."""
    N = X.shape[0]
    if not callable(density):
        raise TypeError(f"density must be a callable X (N, d) -> (N,), got {type(density).__name__}")
    f = np.asarray(to_numpy(density(X)), dtype=np.float64)
    if f.shape != (N,):
        raise ValueError(f"density(X) must return shape ({N},) for X of shape {X.shape}, got {f.shape}")
    if not np.all(np.isfinite(f)) or np.any(f < 0):
        raise ValueError("density(X) must be finite and >= 0 at every node")
    total = float(f.sum())
    w = f / total if total > 0 else f
    zero = int(np.sum(w <= 0))
    if zero:
        raise ValueError(
            f"density is 0 (or underflows) at {zero} of the {N} nodes: quadrature weights must be > 0 "
            "(the weighted softmax uses log w_i). Use a density positive on the whole sphere (as "
            "Assumption 3 asks; for vmf_density, kappa <= 370), or a Monte Carlo cloud from it"
        )
    return w


def quadrature(N: int, d: int, density: DensityFn | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic quadrature of rho_0 on S^{d-1}: nodes and weights.

    Nodes: on S^1 (d = 2) N equispaced angles (`circle_nodes`); on S^2 (d = 3) the Fibonacci lattice;
    on S^{d-1}, d >= 4, quasi-Monte Carlo nodes (`qmc_sphere`: no lattice exists there). Weights:
    equal (the uniform rho_0), or, for a rho_0 with density f, w_i = f(x_i) / sum_j f(x_j). Then
    sum_i w_i g(x_i) approximates integral g drho_0 (MATH.md, "Weighted measures").

    Parameters
    ----------
    N, d : int
        Nodes and dimension.
    density : callable, optional
        f: X (N, d) -> (N,), values >= 0, known up to a constant, e.g. `vmf_density(mean, kappa)`
        (None: uniform).

    Returns
    -------
    X : array (N, d)
        The nodes.
    w : array (N,)
        The weights, w > 0, sum 1.

    Raises
    ------
    ValueError
        For d < 2 or where a weight would be 0 (the weighted kernel needs log w_i).
    """
    N = int(check_positive(N, "N", integer=True))
    d = int(check_positive(d, "d", integer=True))
    if d < 2:
        raise ValueError(f"quadrature nodes live on S^{{d-1}} with d >= 2, got d = {d}")
    X = circle_nodes(N) if d == 2 else fibonacci_sphere(N) if d == 3 else qmc_sphere(N, d)
    if density is None:
        return X, np.full(N, 1.0 / N)
    return X, _density_weights(density, X)


# ------------------------------------------------------------------------------ graded nodes on S^1

_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)


def _graded_density(
    x: np.ndarray, j: int, centres: np.ndarray, h: float, du: float, eps: float
) -> np.ndarray:
    """Nodes per radian n at the angles centres[j] + x, x (...) given as offsets from centre j (so that
    its own term, 1 / (du sqrt(eps^2 + 4 sin^2(x / 2))), keeps its accuracy for x ~ eps)."""
    n = np.full(np.shape(x), 1.0 / h)
    for i, ci in enumerate(centres):
        r = x if i == j else x + (centres[j] - ci)
        n += 1.0 / (du * np.sqrt(eps * eps + 4.0 * np.sin(r / 2.0) ** 2))
    return n


@dataclass(frozen=True)
class _Grading:
    """The node density n of `graded_circle_quadrature` over pieces of the circle, each piece given
    as offsets (lo, hi) from the origin it belongs to (own: an index into origins)."""

    centres: np.ndarray  # (k,) sorted angles in [0, 2 pi)
    origins: np.ndarray  # (max(k, 1),) the centres, or [0] without centres
    h: float
    du: float
    eps: float

    def n_of(self, x: np.ndarray, own: np.ndarray) -> np.ndarray:
        """n at offsets x (M, ...) from the origins own (M,), own non-decreasing."""
        out = np.empty(np.shape(x))
        edges = np.searchsorted(own, np.arange(self.origins.size + 1))
        for i in range(self.origins.size):
            sl = slice(edges[i], edges[i + 1])
            out[sl] = _graded_density(x[sl], i, self.centres, self.h, self.du, self.eps)
        return out

    def integral(self, lo: np.ndarray, hi: np.ndarray, own: np.ndarray) -> np.ndarray:
        """integral of n over [lo, hi] (M,) of each piece: 24-point Gauss-Legendre."""
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        return np.asarray(half * (self.n_of(mid[:, None] + half[:, None] * _GL_X, own) @ _GL_W))


def _check_grading(centres: ArrayLike, h: float, du: float, eps: float) -> _Grading:
    """The arguments of `graded_circle_quadrature`, checked, as a _Grading."""
    c = np.asarray(to_numpy(centres), dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(c)):
        raise ValueError(f"centres must be finite angles in radians, got {centres!r}")
    h = check_positive(h, "h")
    du = check_positive(du, "du")
    eps = check_positive(eps, "eps")
    if eps >= 1.0:
        raise ValueError(f"eps must be < 1 (the smallest graded scale, radians), got {eps!r}")
    cs = np.sort(np.mod(c, 2.0 * math.pi))  # the centres in angle order
    return _Grading(cs, cs if cs.size else np.zeros(1), h, du, eps)


def _pieces(g: _Grading, centres: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The circle cut into pieces (own, lo, hi), in increasing angle: each centre owns the arc to the
    midpoints of its neighbours, cut at 0.05 rad and at eps 2^k on both sides of the centre."""
    cs, eps = g.centres, g.eps
    if cs.size == 0:
        arcs = [(0, 0.0, 2.0 * math.pi)]
    else:
        gaps = np.diff(np.concatenate([cs, [cs[0] + 2.0 * math.pi]]))
        if np.min(gaps) <= 2.0 * eps:
            raise ValueError(f"centres must be more than 2 eps = {2 * eps:.3g} rad apart, got {centres!r}")
        back = np.roll(gaps, 1)
        arcs = [(i, -back[i] / 2.0, gaps[i] / 2.0) for i in range(cs.size)]
    steps = eps * 2.0 ** np.arange(math.ceil(math.log2(2.0 * math.pi / eps)))
    pieces = []  # (owner, lo, hi): offsets from the owner's origin, in increasing angle
    for i, a, b in arcs:
        cuts = np.linspace(a, b, math.ceil((b - a) / 0.05) + 1)
        if cs.size:
            cuts = np.concatenate([cuts, [0.0], -steps[steps < -a], steps[steps < b]])
        cuts = np.unique(cuts)
        pieces += [(i, lo, hi) for lo, hi in itertools.pairwise(cuts)]
    p_own, p_lo, p_hi = (np.array([p[k] for p in pieces]) for k in range(3))
    return p_own, p_lo, p_hi


def _equispaced_in_u(
    g: _Grading, p_own: np.ndarray, p_lo: np.ndarray, p_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The nodes equispaced in u(theta) = integral of n: (offset x (N,), owner (N,)), N = u(2 pi)
    rounded up to a multiple of 4; Newton on u(x) = target inside each node's piece, to rounding."""
    cum = np.concatenate([[0.0], np.cumsum(g.integral(p_lo, p_hi, p_own))])
    U = float(cum[-1])
    N = 4 * math.ceil(U / 4.0)
    target = U * (np.arange(N) + 0.5) / N
    k = np.clip(np.searchsorted(cum, target, side="right") - 1, 0, len(p_own) - 1)
    lo, hi, own = p_lo[k], p_hi[k], p_own[k]
    x = lo + (hi - lo) * (target - cum[k]) / (cum[k + 1] - cum[k])
    for _ in range(50):  # u is increasing inside a piece
        resid = cum[k] + g.integral(lo, x, own) - target
        x = np.clip(x - resid / g.n_of(x, own), lo, hi)
        if np.all(np.abs(resid) <= 1e-13 * (1.0 + U)):
            break
    return x, own


def graded_circle_quadrature(
    centres: ArrayLike,
    h: float,
    du: float,
    eps: float = 1e-11,
    density: DensityFn | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature of rho_0 on S^1 with nodes graded logarithmically toward the angles `centres`.

    Node density (nodes per radian) n(theta) = 1/h + sum_j 1 / (du sqrt(eps^2 + 4 sin^2((theta - c_j) / 2))):
    spacing about h far from every centre, about du r at a distance eps << r << h/du from c_j (equal
    steps du in log r), about eps du within eps of it.  The nodes are equispaced in u(theta) = integral
    of n (Gauss-Legendre on geometric pieces, in offsets from the nearest centre; inverted by Newton to
    rounding), N = u(2 pi) rounded up to a multiple of 4; the weights are w_i ∝ f(x_i) / n(theta_i),
    summing to 1.  This is the trapezoidal rule in the periodic variable u: spectrally accurate for
    integrands smooth in u, and a Lagrangian quadrature of the mean-field equation whose nodes leave a
    hyperbolic point at c_j one by one at times about du / (its expansion rate) apart (MATH.md,
    "Weighted measures"). Two antipodal centres and the uniform density give a set symmetric under
    x -> -x, each centre midway between two nodes.

    Parameters
    ----------
    centres : array (k,)
        Distinct angles in radians, k >= 0.
    h, du : float
        > 0.
    eps : float
        In (0, 1).
    density : callable, optional
        f: X (N, 2) -> (N,), w.r.t. the uniform law (None: uniform).

    Returns
    -------
    X : array (N, 2)
        Unit rows in increasing angle from the midpoint before the first centre.
    w : array (N,)
        The weights.
    """
    g = _check_grading(centres, h, du, eps)
    x, own = _equispaced_in_u(g, *_pieces(g, centres))
    N = x.size
    base = g.origins[own]  # angle = base + x, with the rotation written out (x ~ eps keeps its digits)
    cb, sb, cx, sx = np.cos(base), np.sin(base), np.cos(x), np.sin(x)
    X = np.stack([cb * cx - sb * sx, sb * cx + cb * sx], axis=1)
    f = np.ones(N) if density is None else np.asarray(to_numpy(density(X)), dtype=np.float64)
    if f.shape != (N,) or not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ValueError(f"density(X) must return ({N},) finite values > 0 at every node (weights are > 0)")
    w = f / g.n_of(x, own)
    return X, w / w.sum()


# ------------------------------------------------------------------------------ graded nodes on S^2

#: separatrix azimuths: the same on every ring (m,), per ring theta (K,) -> (K, m), or None
Azimuths = ArrayLike | Callable[[np.ndarray], ArrayLike] | None


def _polar_angles(h: float, du: float, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rings of `graded_sphere_quadrature` in the lower hemisphere theta <= pi / 2: offsets theta
    (K,) from the centre, their mirror images being the rings of the upper one, and each ring's share
    (K,) of the sphere's area over both halves, from n(theta) = 1/h + sum over the poles of
    1 / (du sqrt(eps^2 + r^2)), r the distance to the pole: u(theta) = integral of n is closed-form,
    the rings are equispaced in u (midpoints, an even count) and found by bisection in log theta."""

    def u(t: np.ndarray) -> np.ndarray:
        poles = np.arcsinh(t / eps) - np.arcsinh((math.pi - t) / eps) + math.asinh(math.pi / eps)
        return t / h + poles / du

    U = float(u(np.array(math.pi)))
    K = 2 * math.ceil(U / 2.0)
    target = U * (np.arange(K // 2) + 0.5) / K
    lo, hi = np.full(K // 2, math.log(eps) - 60.0), np.full(K // 2, math.log(math.pi / 2.0))
    for _ in range(120):  # u is increasing: bisection in log theta to rounding
        mid = (lo + hi) / 2.0
        below = u(np.exp(mid)) < target
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    theta = np.exp((lo + hi) / 2.0)
    n = 1.0 / h + (1.0 / np.sqrt(eps**2 + theta**2) + 1.0 / np.sqrt(eps**2 + (math.pi - theta) ** 2)) / du
    return theta, (U / K) / n * np.sin(theta) / 2.0, np.cos(theta)


def graded_sphere_quadrature(
    centre: ArrayLike,
    meridian: ArrayLike,
    h: float,
    du: float,
    eps: float = 1e-9,
    separatrix: Azimuths = None,
    eps_sep: float = 1e-4,
    density: DensityFn | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature of rho_0 on S^2 with nodes graded logarithmically toward the poles +-c and, on each
    ring about them, toward given azimuths (a separatrix through the poles; MATH.md, "The tail in
    d = 3").

    Polar angle theta from c: rings equispaced in u(theta) = integral of n, n = 1/h + sum over the
    poles of 1 / (du sqrt(eps^2 + r^2)) (spacing about h away from the poles, equal steps du in log r
    for eps << r << h / du). Azimuth phi about c, from `meridian` (phi = 0) toward c x meridian: each
    ring is a `graded_circle_quadrature` with spacing h / sin(theta) (arc length h; at most pi / 2),
    steps du in log-distance toward the ring's separatrix azimuths, down to eps_sep / sin(theta) (at
    most 1/2): the band the grading resolves holds the same mass per unit of theta on every ring,
    so the small rings near a pole, where little mass lies, are graded less deep. The rule is a
    product rule in (u, phi): the trapezoidal rule in each, accurate for integrands smooth on either
    side of the separatrix. Near a pole the rings differ only in how deep that grading goes: the
    linearised flow about a source maps a ring to a larger one.

    Parameters
    ----------
    centre : array (3,)
        The pole c (unit).
    meridian : array (3,)
        A unit vector orthogonal to c: the direction phi = 0.
    h, du : float
        > 0 (radians; log-steps).
    eps : float
        In (0, 0.1]: the smallest graded distance to a pole (radians). Offsets below about 1e-12
        lose their digits in a float64 position.
    separatrix : array (m,) or callable, optional
        Azimuths (radians) toward which every ring is graded: the same on every ring (m,), or
        separatrix(theta (K,)) -> (K, m), the azimuths of a curve at each ring's polar angle; None:
        phi = 0 and pi, the great circle through c and `meridian`.
    eps_sep : float
        In (0, 1): the smallest graded distance to a separatrix azimuth on the equator's ring
        (eps_sep / sin(theta) on the others).
    density : callable, optional
        f: X (N, 3) -> (N,), w.r.t. the uniform law (None: uniform).

    Returns
    -------
    X : array (N, 3)
        Unit rows, ring by ring in increasing theta.
    w : array (N,)
        The weights, > 0, summing to 1.
    """
    c, m = _frame(centre, meridian)
    h, du = check_positive(h, "h"), check_positive(du, "du")
    eps, eps_sep = check_positive(eps, "eps"), check_positive(eps_sep, "eps_sep")
    if eps > 0.1:
        raise ValueError(f"eps must be <= 0.1 (the smallest graded distance to a pole, radians), got {eps!r}")
    half, w_half, cos_half = _polar_angles(h, du, eps)
    theta = np.concatenate([half, (math.pi - half)[::-1]])
    w_ring = np.concatenate([w_half, w_half[::-1]])
    K = theta.size
    az = _azimuths(separatrix, theta)
    b = np.cross(c, m)
    Xs, ws = [], []
    for k in range(K):
        j = k if k < K // 2 else K - 1 - k  # the mirrored rings keep their offsets' digits
        s, cos_t = math.sin(half[j]), (cos_half[j] if k < K // 2 else -cos_half[j])
        P, wp = graded_circle_quadrature(az[k], min(h / s, math.pi / 2.0), du, min(0.5, eps_sep / s))
        Xs.append(cos_t * c + s * (P[:, :1] * m + P[:, 1:] * b))
        ws.append(w_ring[k] * wp)
    X, w = np.concatenate(Xs), np.concatenate(ws)
    if density is not None:
        w = w * _density_weights(density, X)
    return X, w / w.sum()


def _azimuths(separatrix: Azimuths, theta: np.ndarray) -> np.ndarray:
    """The separatrix azimuths of every ring, (K, m)."""
    if separatrix is None:
        separatrix = (0.0, math.pi)
    az = np.asarray(separatrix(theta) if callable(separatrix) else separatrix, dtype=np.float64)
    az = np.broadcast_to(az, (theta.size, az.size)) if az.ndim <= 1 else az
    if az.shape[0] != theta.size or not np.all(np.isfinite(az)):
        raise ValueError(f"separatrix must give finite azimuths (m,) or (K, m) for K = {theta.size} rings")
    return az


def _frame(centre: ArrayLike, meridian: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(c, m) as unit float64 3-vectors, m orthogonal to c (checked, not corrected)."""
    c = np.asarray(to_numpy(centre), dtype=np.float64).reshape(-1)
    m = np.asarray(to_numpy(meridian), dtype=np.float64).reshape(-1)
    if c.shape != (3,) or m.shape != (3,) or not (np.all(np.isfinite(c)) and np.all(np.isfinite(m))):
        raise ValueError(f"centre and meridian must be finite 3-vectors, got {centre!r} and {meridian!r}")
    if abs(np.linalg.norm(c) - 1.0) > 1e-12 or abs(np.linalg.norm(m) - 1.0) > 1e-12 or abs(c @ m) > 1e-12:
        raise ValueError("centre and meridian must be orthonormal unit vectors (|c| = |m| = 1, c.m = 0)")
    return c, m
