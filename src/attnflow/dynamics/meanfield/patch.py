"""The Eulerian patch: the measure near one separatrix as a log-density, not as nodes.

Why.  Near a separatrix the flow stretches the measure like exp(Lambda(t)); the mass that reaches a
cluster's maximiser y* at time t left offsets of about exp(-Lambda(t)) (e^-4677 at beta = 1e4).  Nodes
labelled by their initial angle would need the separatrix to that precision.  The density near a
repelling point is smooth and flat instead (it decays like e^-Lambda along the separatrix, with
O(1) slope), so it is kept as a function: ell = log rho at the p Chebyshev-Lobatto points of the
patch [lo, hi], moved each step by the step map of those points (their images X_j, computed with
the nodes) and ell(X_j) = ell(x_j) - log dX/dx (mass conservation in 1-D; dX/dx by spectral
differentiation), then interpolated back to the Lobatto points of the new patch.  Nothing here needs
the separatrix itself: the patch's ends are characteristics, so a separatrix inside stays inside.

Keys.  The field sees the patch through a continuation of the label families of `tail` ("virtual"
nodes): label i of side s = +-1 at centre + s exp(sigma_i + Lambda_s), weight rho(position) x offset
x dsigma_i (the same midpoint rule in u as the nodes outside, so the two join without a seam), down
to offsets of `floor`; the labels below are one node (their family sum, at its centroid).
Emission.  When a label's offset reaches the patch width it leaves as an ordinary node with that
weight; Lambda_s is reset each step so that the edge of the first label still inside maps to the
image of the patch's end: the emitted cells tile the image exactly (no mass is lost or counted
twice).  A centre off the separatrix by eps bends the emitted family by about eps lambda h /
(width du) per step: the centre comes from the previous pass (`meanfield`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .chebyshev import barycentric_matrix, barycentric_weights, chebyshev_coefficients, differentiation_matrix
from .tail import LabelFamily

__all__ = ["Grid", "Patch"]

RESOLVED = 1e-9  # largest accepted |last Chebyshev coefficients| / |linear ones| of the step map
SETTLED = 1e-12  # below this the patch may widen again (by WIDEN per step)
WIDEN = 1.05


@dataclass(frozen=True)
class Grid:
    """The Lobatto points xi (p,), their barycentric weights and differentiation matrix."""

    xi: np.ndarray
    weights: np.ndarray
    D: np.ndarray

    @classmethod
    def of(cls, p: int) -> Grid:
        from .chebyshev import lobatto, lobatto_weights

        xi = lobatto(p)
        return cls(xi, lobatto_weights(p), differentiation_matrix(xi))


@dataclass
class Patch:
    """One separatrix's patch (mutable, owned by one pass of `meanfield`).

    centre: the estimate of the separatrix (radians); lo, hi: the patch; ell (p,): log-density at
    its Lobatto points; width: emission threshold (offset from centre); families: the label
    families of sides -1 and +1; stretch[s]: Lambda_s; next_label[s]: first label still inside.
    """

    centre: float
    lo: float
    hi: float
    ell: np.ndarray
    width: float
    families: dict[int, LabelFamily]
    stretch: dict[int, float]
    next_label: dict[int, int]
    alive: bool = True  # False once its mass can no longer matter (then it has no keys, emits nothing)

    @classmethod
    def start(
        cls,
        centre: float,
        width: float,
        families: dict[int, LabelFamily],
        logf: Callable[[np.ndarray], np.ndarray],
        grid: Grid,
    ) -> Patch:
        """The patch of rho_0 (log-density logf: angles -> log f) at t = 0: every label with offset
        below `width` on either side."""
        nxt = {s: fam.first_below(math.log(width)) for s, fam in families.items()}
        edge = {
            s: math.exp(float(fam.sigma(nxt[s]) + 0.5 * fam.dsigma(nxt[s]))) for s, fam in families.items()
        }
        patch = cls(
            centre, centre - edge[-1], centre + edge[1], np.zeros(0), width, families, {-1: 0.0, 1: 0.0}, nxt
        )
        patch.ell = np.asarray(logf(patch.points(grid)), dtype=np.float64)
        return patch

    def points(self, grid: Grid) -> np.ndarray:
        return 0.5 * (self.lo + self.hi) + 0.5 * (self.hi - self.lo) * grid.xi

    def to_xi(self, y: np.ndarray) -> np.ndarray:
        return (2.0 * np.asarray(y) - self.lo - self.hi) / (self.hi - self.lo)

    def log_density(self, grid: Grid, y: np.ndarray) -> np.ndarray:
        result: np.ndarray = barycentric_matrix(grid.xi, grid.weights, self.to_xi(y)) @ self.ell
        return result

    def _labels(self, s: int, floor: float) -> np.ndarray:
        fam = self.families[s]
        return np.arange(
            self.next_label[s], max(self.next_label[s], fam.first_below(math.log(floor) - self.stretch[s]))
        )

    def keys(self, grid: Grid, floor: float) -> tuple[np.ndarray, np.ndarray]:
        """Positions and log-weights of the virtual nodes (offsets >= floor) and, last, of the one
        node that stands for the labels below (none once the patch is retired)."""
        if not self.alive:
            return np.zeros(0), np.zeros(0)
        pos, logw, lump_mass, lump_moment = [], [], [], []
        for s, fam in self.families.items():
            idx = self._labels(s, floor)
            sig = fam.sigma(idx) + self.stretch[s]
            y = self.centre + s * np.exp(sig)
            pos.append(y)
            logw.append(self.log_density(grid, y) + sig + np.log(fam.dsigma(idx)))
            m, mom = self._family_sum(s, int(idx[-1]) + 1 if idx.size else self.next_label[s])
            lump_mass.append(m)
            lump_moment.append(s * mom)
        rho_c = float(self.log_density(grid, np.array([self.centre]))[0])
        mass = float(np.sum(lump_mass))
        centroid = self.centre + (float(np.sum(lump_moment)) / mass if mass > 0 else 0.0)
        pos.append(np.array([centroid]))
        logw.append(np.array([rho_c + math.log(mass) if mass > 0 else -np.inf]))
        return np.concatenate(pos), np.concatenate(logw)

    def _family_sum(self, s: int, first: int) -> tuple[float, float]:
        """sum_{i >= first} r_i dsigma_i and sum r_i^2 dsigma_i (r_i = exp(sigma_i + Lambda_s)),
        the stored labels one by one and the arithmetic rest in closed form."""
        fam, lam = self.families[s], self.stretch[s]
        stored = np.arange(first, fam.n_stored)
        r = np.exp(fam.sigma(stored) + lam)
        m1, m2 = float(np.sum(r * fam.dsigma(stored))), float(np.sum(r * r * fam.dsigma(stored)))
        start = max(first, fam.n_stored)
        r0, q = math.exp(float(fam.sigma(start)) + lam), math.exp(-fam.du)
        return m1 + r0 * fam.du / (1.0 - q), m2 + r0 * r0 * fam.du / (1.0 - q * q)

    def resolution(self, grid: Grid, X: np.ndarray) -> float:
        if not self.alive:
            return 0.0
        return self._resolution(grid, X)

    def _resolution(self, grid: Grid, X: np.ndarray) -> float:
        """|trailing / leading Chebyshev coefficients| of the step's displacement X - x (inf where
        the interpolated map folds): above RESOLVED the patch is too wide for the step map."""
        disp = X - self.points(grid)
        if np.any(1.0 + grid.D @ disp / (0.5 * (self.hi - self.lo)) <= 0.0):
            return math.inf
        c = chebyshev_coefficients(disp)
        return float(np.max(np.abs(c[-4:])) / max(float(np.max(np.abs(c[1:3]))), 1e-300))

    def _emit(
        self, grid: Grid, dens: Callable[[np.ndarray], np.ndarray], group: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Labels whose offset reached the width leave, with weight density x offset x dsigma; with
        group > 1, as one node per `group` consecutive labels (summed weight, at their centroid; the
        rest waits for the next step): the midpoint rule with step group x du."""
        out_pos, out_logw = [], []
        for s, fam in self.families.items():
            i0, i1 = self.next_label[s], fam.first_below(math.log(self.width) - self.stretch[s])
            i1 = i0 + (i1 - i0) // group * group
            if i1 > i0:
                idx = np.arange(i0, i1)
                sig = fam.sigma(idx) + self.stretch[s]
                y = self.centre + s * np.exp(sig)
                lw = dens(y) + sig + np.log(fam.dsigma(idx))
                if group > 1:
                    y, lw = y.reshape(-1, group), lw.reshape(-1, group)
                    top = lw.max(1, keepdims=True)
                    rel = np.exp(lw - top)
                    y, lw = (rel * y).sum(1) / rel.sum(1), top[:, 0] + np.log(rel.sum(1))
                out_pos.append(y)
                out_logw.append(lw)
                self.next_label[s] = i1
        edge = {
            s: math.exp(
                float(f.sigma(self.next_label[s]) + 0.5 * f.dsigma(self.next_label[s])) + self.stretch[s]
            )
            for s, f in self.families.items()
        }
        self.lo, self.hi = self.centre - edge[-1], self.centre + edge[1]
        if not out_pos:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(out_pos), np.concatenate(out_logw)

    def dissolve(self, grid: Grid, floor: float) -> tuple[np.ndarray, np.ndarray]:
        """Retire the patch: its keys (virtual nodes down to offset `floor`, one node for the rest)
        become ordinary nodes.  For a patch that has stopped stretching: it no longer holds a
        repelling point."""
        pos, logw = self.keys(grid, floor)
        self.alive = False
        return pos, logw

    def shrink(self, grid: Grid, width: float) -> tuple[np.ndarray, np.ndarray]:
        """Narrow the patch to `width` now: the labels beyond leave with the current density."""
        old = (grid.xi.copy(), self.lo, self.hi, self.ell.copy())
        self.width = width

        def dens(y: np.ndarray) -> np.ndarray:
            xi = (2.0 * np.asarray(y) - old[1] - old[2]) / (old[2] - old[1])
            values: np.ndarray = barycentric_matrix(old[0], grid.weights, xi) @ old[3]
            return values

        out = self._emit(grid, dens)
        self.ell = dens(self.points(grid))
        return out

    def advance(
        self, grid: Grid, X: np.ndarray, centre: float, max_width: float, group: int = 1, floor: float = 1e-12
    ) -> tuple[np.ndarray, np.ndarray]:
        """Move the patch by the step map X (images of its Lobatto points), recentre it, emit the
        labels whose offset reached the width (`group` labels per node, see `_emit`).  Returns the
        emitted (angles, log-weights)."""
        if not self.alive:
            self.lo, self.hi = float(X[0]), float(X[-1])
            self.centre = float(np.clip(centre, X[0], X[-1]))
            return np.zeros(0), np.zeros(0)
        if X[-1] - X[0] <= self.hi - self.lo or np.any(np.diff(X) <= 0):
            return self.dissolve(grid, floor)
        half = 0.5 * (self.hi - self.lo)
        ell = self.ell - np.log(np.maximum(1.0 + grid.D @ (X - self.points(grid)) / half, 1e-300))
        if self.resolution(grid, X) < SETTLED:
            self.width = min(self.width * WIDEN, max_width)
        self.centre = float(np.clip(centre, X[0] + 0.25 * (X[-1] - X[0]), X[-1] - 0.25 * (X[-1] - X[0])))
        for s, end in ((-1, X[0]), (1, X[-1])):
            fam, i = self.families[s], self.next_label[s]
            self.stretch[s] = math.log(s * (end - self.centre)) - float(fam.sigma(i) + 0.5 * fam.dsigma(i))
        bw = barycentric_weights(X)

        def dens(y: np.ndarray) -> np.ndarray:
            values: np.ndarray = barycentric_matrix(X, bw, np.asarray(y)) @ ell
            return values

        out = self._emit(grid, dens)
        self.ell = dens(self.points(grid))
        return out
