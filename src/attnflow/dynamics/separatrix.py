"""Separatrices of the finite-temperature mean-field flow on S^1 (d = 2), and the graded quadrature that
resolves the measure near them for all times up to t_max (MATH.md, "Weighted measures").

Why.  Near a separatrix (the initial angle s whose token stays at the repelling point between the two
clusters) the flow stretches the measure like exp(lambda t).  The mass that sits at time t near the
softmax maximiser y* of a cluster comes from initial angles within about exp(-lambda t) of s, and the
cluster's velocity is a softmax average over exactly that mass.  Equispaced nodes run out there after a
time of about log(N) / lambda, and the cluster then leaves early (a finite-N effect).  Nodes graded
logarithmically toward s (`sphere.graded_circle_quadrature`) pass y* one by one at time steps about
du / lambda apart up to t ~ log(1 / eps) / lambda, provided s is known to about eps: hence the search.

How.  Each pass integrates the weighted measure on nodes graded toward the current estimates, with
`tracers` extra points (weight TRACER_WEIGHT: they move with the flow and change no field) spread
evenly over each bracket.  A point's fate is the sign of its displacement when it first leaves the
window of half-width `exit_angle` around its initial angle (+: counterclockwise).  The new bracket is
[the last point with fate -, the first with fate +] in initial angle.  The search stops when every
bracket is narrower than `tol`, or when a pass fails to halve the widest one: the integrator's own
error (the adaptive steps differ from pass to pass) puts a floor of about 1e-10 on the position of
the computed separatrix at rtol = 1e-6.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive
from ..attention import Attention, check_attention
from ..measures.densities import DensityFn
from ..measures.quadrature import graded_circle_quadrature

TRACER_WEIGHT = 1e-30  # weight of a tracer, relative to the measure's total mass 1
SAVES_PER_UNIT = 20  # saved states per unit time, where the fates are read
WINDOW = 0.3  # half-width (radians) of the window around a centre where fates are read

__all__ = [
    "SeparatrixSearch",
    "SeparatrixSettings",
    "default_brackets",
    "locate_separatrices",
    "mean_field_quadrature",
]


@dataclass(frozen=True)
class SeparatrixSearch:
    """Result of `locate_separatrices`.

    Attributes
    ----------
    angles : array (k,)
        The located initial angles (bracket midpoints, radians).
    brackets : array (k, 2)
        Their brackets.
    passes : list of dict
        One per pass (centres, brackets, widths, N, tracers, n_steps, wall_time_s, undecided = points
        between the brackets' ends still undecided at t_max).
    """

    angles: np.ndarray
    brackets: np.ndarray
    passes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def width(self) -> float:
        """The widest bracket (radians): the precision of the located separatrices."""
        return float(np.max(self.brackets[:, 1] - self.brackets[:, 0]))


def _check_2d(att: Attention) -> Attention:
    att = check_attention(att)
    if att.d != 2:
        raise ValueError(f"separatrices on S^1 need d = 2 weights, got d = {att.d}")
    if not math.isfinite(att.beta):
        raise ValueError("att.beta must be finite: at beta = inf the separatrices are P_1 x = 0 (no search)")
    return att


def kernel_width(att: Attention) -> float:
    """Narrowest angular width of the softmax, 1 / sqrt(beta ||B||) (MATH.md, "Kernel width")."""
    return 1.0 / math.sqrt(att.beta * att.norm_B)


def default_brackets(att: Attention, half_width: float | None = None) -> np.ndarray:
    """Brackets (2, 2) around the zero-temperature separatrices +-u_2 (P_1 x = 0), of half-width
    min(0.25, 5 / beta) by default: the finite-beta separatrix sits O(1 / beta) away (1.28 / beta in
    the d = 2 worked example).  Needs a one-dimensional top eigenspace of A."""
    att = _check_2d(att)
    spec = att.spectrum()
    if spec.multiplicity != 1:
        raise ValueError(
            f"default brackets need a one-dimensional top eigenspace of A, got {spec.multiplicity}"
        )
    u1 = spec.top.basis[:, 0]
    phi = math.atan2(u1[1], u1[0]) + math.pi / 2.0
    hw = min(0.25, 5.0 / att.beta) if half_width is None else check_positive(half_width, "half_width")
    return np.array([[phi - hw, phi + hw], [phi + math.pi - hw, phi + math.pi + hw]])


@dataclass(frozen=True)
class SeparatrixSettings:
    """How `locate_separatrices` searches (its algorithm is unchanged by grouping them here).

    Attributes
    ----------
    h, du, eps : float
        The grading of the measure's nodes toward the bracket midpoints
        (`sphere.graded_circle_quadrature`: spacing h far away, du in log-distance near them, down to
        eps).
    tracers : int
        Points of weight TRACER_WEIGHT spread evenly over each bracket.
    max_passes : int
        Passes at most.
    tol : float
        The bracket width (radians) at which the search stops.
    exit_angle : float
        A point's fate is the sign of its displacement when it first moves this far (radians) from its
        initial angle; it must exceed how far the repelling point itself drifts before the points near
        it part (at beta = 10 in the d = 2 worked example 0.05, 0.1, 0.25, 0.4 gave 2.2632, 2.2418,
        2.2176, 2.2095, and 0.8 and 1.2 both 2.2075889, the fates of equispaced tokens' 2.2074 +-
        0.0004).
    density : callable, optional
        rho_0's density (None: uniform).
    options, kernel
        As in `simulate` (method "adaptive").
    """

    h: float
    du: float
    eps: float = 1e-11
    tracers: int = 64
    max_passes: int = 8
    tol: float = 1e-10
    exit_angle: float = 0.8
    density: DensityFn | None = None
    options: dict[str, Any] | None = None
    kernel: str = "auto"

    def __post_init__(self) -> None:
        for name in ("tracers", "max_passes"):
            object.__setattr__(self, name, int(check_positive(getattr(self, name), name, integer=True)))
        object.__setattr__(self, "tol", check_positive(self.tol, "tol"))


@dataclass(frozen=True)
class _Fate:
    """A new bracket [lo, hi] (radians) and the number of points between its ends still undecided."""

    lo: float
    hi: float
    undecided: int


def _fate_bracket(
    theta0: np.ndarray, ang: np.ndarray, centre: float, half: float, exit_angle: float
) -> _Fate:
    """New bracket around `centre` from the saved angles ang (T, P) of points starting at theta0 (P,)."""
    d0 = np.angle(np.exp(1j * (theta0 - centre)))
    sel = np.flatnonzero(np.abs(d0) < half)
    sel = sel[np.argsort(d0[sel])]
    disp = np.angle(np.exp(1j * (ang[:, sel] - theta0[sel])))
    out = np.abs(disp) > exit_angle
    first = np.argmax(out, axis=0)
    fate = np.where(out.any(axis=0), np.sign(disp[first, np.arange(sel.size)]), 0.0)
    minus, plus = np.flatnonzero(fate < 0), np.flatnonzero(fate > 0)
    if minus.size == 0 or plus.size == 0 or minus[-1] > plus[0]:
        raise ValueError(
            f"no separatrix found within {half:.3g} rad of angle {centre:.6g}: the points there do not "
            "split into a clockwise group below and a counterclockwise group above; widen the bracket, "
            "raise t_max (fates undecided) or check that a repelling point lies there"
        )
    lo, hi = minus[-1], plus[0]
    return _Fate(centre + d0[sel[lo]], centre + d0[sel[hi]], int(hi - lo - 1))


@dataclass(frozen=True)
class _Pass:
    """One pass of the search: the new brackets (k, 2) and the pass's entry of SeparatrixSearch.passes."""

    brackets: np.ndarray
    log: dict[str, Any]


def _search_pass(
    att: Attention, br: np.ndarray, times: np.ndarray, half: float, cfg: SeparatrixSettings
) -> _Pass:
    """Nodes graded toward the brackets' midpoints and tracers over each bracket, moved by the weighted
    flow up to times[-1]; the new brackets from the points' fates."""
    from .integrate import simulate

    centres = br.mean(axis=1)
    X, w = graded_circle_quadrature(centres, cfg.h, cfg.du, cfg.eps, cfg.density)
    tr_theta = np.concatenate([np.linspace(lo, hi, cfg.tracers + 2)[1:-1] for lo, hi in br])
    theta0 = np.concatenate([np.arctan2(X[:, 1], X[:, 0]), tr_theta])
    X0 = np.stack([np.cos(theta0), np.sin(theta0)], axis=1)
    n_tr = tr_theta.size
    weights = np.concatenate([w * (1.0 - TRACER_WEIGHT * n_tr), np.full(n_tr, TRACER_WEIGHT)])
    start = time.perf_counter()
    traj = simulate(
        X0, att, times, method="adaptive", kernel=cfg.kernel, weights=weights, options=cfg.options
    )
    x = np.asarray(traj.x)
    ang = np.arctan2(x[..., 1], x[..., 0])
    fates = [_fate_bracket(theta0, ang, float(c), half, cfg.exit_angle) for c in centres]
    new = np.array([[f.lo, f.hi] for f in fates])
    log = {
        "centres": centres.tolist(),
        "brackets": new.tolist(),
        "width": float(np.max(new[:, 1] - new[:, 0])),
        "N": len(w),
        "tracers": int(tr_theta.size),
        "undecided": [f.undecided for f in fates],
        "n_steps": traj.info.get("n_steps"),
        "wall_time_s": time.perf_counter() - start,
    }
    return _Pass(new, log)


def locate_separatrices(
    att: Attention,
    brackets: ArrayLike,
    t_max: float,
    settings: SeparatrixSettings | None = None,
    **fields: Any,
) -> SeparatrixSearch:
    """Initial angles of the separatrices of the weighted mean-field flow on S^1, by bisection on fates.

    Parameters
    ----------
    att : Attention
        d = 2 weights, finite beta.
    brackets : array (k, 2)
        [lo, hi] angles (radians) each holding one separatrix.
    t_max : float
        The integration time (fates must be decided by then).
    settings : SeparatrixSettings, optional
        h and du, the grading of the nodes, have no default.
    **fields
        The settings' fields as keywords (h=..., du=..., tracers=...), which also override those of
        a given settings.

    Returns
    -------
    SeparatrixSearch
        Its width is the precision reached.
    """
    att = _check_2d(att)
    br = np.array(brackets, dtype=np.float64).reshape(-1, 2)
    if not np.all(np.isfinite(br)) or np.any(br[:, 1] <= br[:, 0]):
        raise ValueError(f"brackets must be finite [lo, hi] pairs with lo < hi (radians), got {brackets!r}")
    t_max = check_positive(t_max, "t_max")
    cfg = SeparatrixSettings(**fields) if settings is None else replace(settings, **fields)
    gaps = np.abs(np.angle(np.exp(1j * (br.mean(1)[:, None] - br.mean(1)[None, :]))))
    half = min(WINDOW, 0.5 * float(np.min(gaps + np.diag(np.full(len(br), np.inf)))))
    times = np.linspace(0.0, t_max, math.ceil(t_max * SAVES_PER_UNIT) + 1)
    passes: list[dict[str, Any]] = []
    for _ in range(cfg.max_passes):
        old_width = float(np.max(br[:, 1] - br[:, 0]))
        step = _search_pass(att, br, times, half, cfg)
        br = step.brackets
        passes.append(step.log)
        if step.log["width"] < cfg.tol or step.log["width"] > 0.5 * old_width:
            break
    return SeparatrixSearch(angles=br.mean(axis=1), brackets=br, passes=passes)


def mean_field_quadrature(
    att: Attention,
    t_max: float,
    level: int = 0,
    *,
    search: SeparatrixSearch | None = None,
    eps: float = 1e-11,
    density: DensityFn | None = None,
    **search_options: Any,
) -> tuple[np.ndarray, np.ndarray, SeparatrixSearch]:
    """Nodes and weights of rho_0 for the mean-field flow of att up to t_max.

    Spacing h = kw / 2^level far from the separatrices and du = 2 kw / 2^level in log-distance near
    them, kw = 1 / sqrt(beta ||B||) the kernel width: level 0 passes each cluster's maximiser y* about
    0.7 kw apart (0.35 du, at the d = 2 worked example's stream speed 0.25 over its expansion rate 0.7),
    level 1 twice as finely; compare two levels to show convergence.

    Parameters
    ----------
    att : Attention
        d = 2 weights, finite beta.
    t_max : float
        The integration time.
    level : int
        The refinement level, >= 0.
    search : SeparatrixSearch, optional
        A previous result to reuse (the separatrices do not depend on the level); otherwise
        `locate_separatrices` runs at level 0 from `default_brackets(att)` (override with
        brackets=...), with search_options passed on.
    eps, density
        As in `graded_circle_quadrature`.

    Returns
    -------
    X : array (N, 2)
        The nodes.
    w : array (N,)
        The weights.
    search : SeparatrixSearch
        The separatrices used.
    """
    att = _check_2d(att)
    level = int(level)
    if level < 0:
        raise ValueError(f"level must be an integer >= 0 (each level halves the spacing), got {level}")
    kw = kernel_width(att)
    if search is None:
        brackets = search_options.pop("brackets", None)
        brackets = default_brackets(att) if brackets is None else brackets
        h0, du0 = kw, min(2.0 * kw, 0.2)
        search = locate_separatrices(
            att, brackets, t_max, h=h0, du=du0, eps=eps, density=density, **search_options
        )
    elif search_options:
        raise ValueError(f"search options {sorted(search_options)} apply only without a given search")
    scale = 2.0**-level
    X, w = graded_circle_quadrature(search.angles, kw * scale, min(2.0 * kw, 0.2) * scale, eps, density)
    return X, w, search
