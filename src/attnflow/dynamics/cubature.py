"""Adaptive cubature of a vector-valued integrand over a box in R^D (D = 1, 2), vectorised.

Each cell carries a tensor-product Clenshaw-Curtis rule with n + 1 points per direction (nested: its
even-indexed points form the n/2 rule).  A cell's error estimate is, summed over the directions, the
difference between the full rule and the rule made coarse in that one direction.  That is the
error of the coarse rule, so for a resolved integrand it overestimates the error of the returned
(fine) value.  Cells with the largest error relative to the tolerance are halved along their worst
direction until the summed error is within max(rtol |I|, atol) at every component.  The integrand
is called once per round on all new nodes, so one call can vectorise over tens of thousands.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Integrand = Callable[[np.ndarray], np.ndarray]  # nodes (P, D) -> values (P, T)


def clenshaw_curtis(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clenshaw-Curtis nodes cos(k pi / n), k = 0..n, and weights on [-1, 1] (n even, >= 2)."""
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even integer >= 2, got {n}")
    theta = np.pi * np.arange(n + 1) / n
    x = np.cos(theta)
    w = np.zeros(n + 1)
    inner = theta[1:-1]
    v = np.ones(n - 1)
    for k in range(1, n // 2):
        v -= 2.0 * np.cos(2 * k * inner) / (4 * k * k - 1)
    v -= np.cos(n * inner) / (n * n - 1)
    w[0] = w[n] = 1.0 / (n * n - 1)
    w[1:-1] = 2.0 * v / n
    return x, w


@dataclass
class Cells:
    """Leaf cells: lower and upper corners (C, D), value (C, T), error per direction (C, D, T)."""

    lo: np.ndarray
    hi: np.ndarray
    value: np.ndarray
    err_dir: np.ndarray

    @property
    def err(self) -> np.ndarray:
        result: np.ndarray = self.err_dir.sum(axis=1)
        return result


@dataclass
class CubatureResult:
    """Integral (T,), its error estimate (T,), the leaf cells, nodes used, and whether it converged."""

    value: np.ndarray
    error: np.ndarray
    cells: Cells
    nodes: int
    converged: bool


def evaluate_cells(f: Integrand, lo: np.ndarray, hi: np.ndarray, n: int) -> Cells:
    """Evaluate f on the tensor Clenshaw-Curtis nodes of each cell (lo, hi: (C, D))."""
    C, D = lo.shape
    x, wf = clenshaw_curtis(n)
    _, wc = clenshaw_curtis(n // 2)
    m = n + 1
    grids = np.meshgrid(*([x] * D), indexing="ij")
    ref = np.stack([g.ravel() for g in grids], axis=1)  # (m^D, D) on [-1, 1]^D
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    nodes = mid[:, None, :] + half[:, None, :] * ref[None, :, :]
    values = np.asarray(f(nodes.reshape(-1, D)), dtype=np.float64)
    T = values.shape[1]
    F = values.reshape((C,) + (m,) * D + (T,))
    vol = np.prod(half, axis=1)[:, None]
    fine, coarse = (wf, slice(None)), (wc, slice(None, None, 2))

    value = _tensor_rule(F, [fine] * D) * vol
    err_dir = np.stack(
        [
            np.abs(value - _tensor_rule(F, [coarse if k == j else fine for k in range(D)]) * vol)
            for j in range(D)
        ],
        axis=1,
    )
    return Cells(lo, hi, value, err_dir)


def _tensor_rule(F: np.ndarray, rules: list[tuple[np.ndarray, slice]]) -> np.ndarray:
    """sum over the D node axes of F (C, m, ..., m, T) with one 1-D rule per axis -> (C, T)."""
    G = F
    for w, sl in rules:  # the first node axis is always axis 1
        G = np.einsum("cj...,j->c...", G[:, sl], w)
    return G


def _merge(a: Cells, b: Cells) -> Cells:
    return Cells(*(np.concatenate([getattr(a, k), getattr(b, k)]) for k in ("lo", "hi", "value", "err_dir")))


def _split(cells: Cells, idx: np.ndarray, tol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Halve cells idx along their worst direction; returns the children's corners."""
    score = np.max(cells.err_dir[idx] / tol, axis=2)  # (k, D)
    axis = np.argmax(score, axis=1)
    lo, hi = cells.lo[idx].copy(), cells.hi[idx].copy()
    rows = np.arange(idx.size)
    mid = (lo[rows, axis] + hi[rows, axis]) / 2
    lo2, hi1 = lo.copy(), hi.copy()
    hi1[rows, axis] = mid
    lo2[rows, axis] = mid
    return np.concatenate([lo, lo2]), np.concatenate([hi1, hi])


def refine(
    f: Integrand,
    lo: np.ndarray,
    hi: np.ndarray,
    rtol: float,
    atol: float = 0.0,
    n: int = 16,
    max_nodes: int = 1_000_000,
    start: Cells | None = None,
) -> CubatureResult:
    """Adaptive cubature of f over the union of the cells (lo, hi) (C, D), plus the already
    evaluated cells `start` (from an earlier result, to extend a domain without re-evaluating).

    Stops when the summed error estimate is <= max(rtol |I|, atol) at every component of I, or when
    the next round would pass max_nodes evaluations (then converged is False).
    """
    per_cell = (n + 1) ** lo.shape[1]
    cells = evaluate_cells(f, lo, hi, n)
    nodes = lo.shape[0] * per_cell
    if start is not None:
        cells = _merge(start, cells)
    while True:
        value = cells.value.sum(axis=0)
        err = cells.err.sum(axis=0)
        tol = np.maximum(rtol * np.abs(value), atol)
        tol = np.where(tol > 0, tol, np.finfo(float).tiny)
        if np.all(err <= tol):
            return CubatureResult(value, err, cells, nodes, True)
        # split the fewest worst cells that bring the rest's error below tol / 2 everywhere
        ratio = cells.err / tol  # (C, T)
        order = np.argsort(-np.max(ratio, axis=1), kind="stable")
        rest = err[None, :] - np.cumsum(cells.err[order], axis=0)  # error left after removing k + 1 cells
        ok = np.all(rest <= tol / 2, axis=1)
        k = int(np.argmax(ok)) + 1 if ok.any() else order.size
        if nodes + 2 * k * per_cell > max_nodes:
            return CubatureResult(value, err, cells, nodes, False)
        idx = order[:k]
        clo, chi = _split(cells, idx, tol)
        keep = np.ones(cells.lo.shape[0], dtype=bool)
        keep[idx] = False
        kept = Cells(cells.lo[keep], cells.hi[keep], cells.value[keep], cells.err_dir[keep])
        cells = _merge(kept, evaluate_cells(f, clo, chi, n))
        nodes += 2 * k * per_cell


def grid_cells(lo: float, hi: float, width: float, D: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells of side about `width` tiling the cube [lo, hi]^D: corners (C, D) each."""
    k = max(1, math.ceil((hi - lo) / width))
    edges = np.linspace(lo, hi, k + 1)
    a = np.stack(np.meshgrid(*([edges[:-1]] * D), indexing="ij"), -1).reshape(-1, D)
    b = np.stack(np.meshgrid(*([edges[1:]] * D), indexing="ij"), -1).reshape(-1, D)
    return a, b
