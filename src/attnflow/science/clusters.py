"""Clusters of tokens on the sphere, and how far a measure is from k atoms (docs/math.md, "Clusters
and phase diagrams").

    count_clusters(X, eps)         tokens within angle eps of each other are joined (connected
                                   components of the eps-graph, i.e. single linkage); the number of
                                   clusters of each cloud (those of mass >= min_mass)
    cluster_labels(X, eps)         the clusters themselves: a label per token
    clustered_pairs(X, eps)        the mass of pairs i != j within angle eps (GLPR's phase diagram:
                                   the probability that two tokens are clustered)
    metastable_count(counts, N)    the count of the metastable state: the first plateau of a count
                                   against the saved times (at most N / 2, held PLATEAU_SAVES times)
    nearest_atoms_w2(X, k)         W2 to the nearest measure with k atoms on the sphere (chordal
                                   cost): exact for k = 1, an upper bound by Lloyd's iterations from
                                   a farthest-point start for k >= 2

Every function takes clouds with any leading axes (..., N, d) (e.g. (T, M, N, d) of a trajectory)
and optional weights (N,) or broadcasting against the leading axes, and returns the leading shape.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive, check_stack, check_weights

__all__ = [
    "DENSE_MAX_N",
    "PLATEAU_SAVES",
    "cluster_labels",
    "clustered_pairs",
    "count_clusters",
    "metastable_count",
    "nearest_atoms_w2",
]

#: GLPR's angle of "clustered": <x_i, x_j> > 0.999 (Geshkovski, Letrouit, Polyanskiy, Rigollet)
GLPR_EPS = math.acos(0.999)
DENSE_MAX_N = 2048  # up to this many tokens per cloud the eps-graph comes from the Gram matrix
GRAM_ELEMENTS = 2**24  # Gram entries per chunk of clouds
PLATEAU_SAVES = 5  # a metastable count holds over this many consecutive saved times


def _angle(eps: float) -> float:
    eps = check_positive(eps, "eps")
    if eps > math.pi:
        raise ValueError(f"eps is an angle in (0, pi] radians, got {eps:g}")
    return eps


def _flat(X: ArrayLike) -> tuple[np.ndarray, tuple[int, ...]]:
    P = check_stack(X, "X")
    return P.reshape(-1, *P.shape[-2:]), P.shape[:-2]


def _weights(weights: ArrayLike | None, lead: tuple[int, ...], N: int) -> np.ndarray:
    """Weights (B, N) of the flattened clouds (uniform 1/N when None)."""
    if weights is None:
        return np.full((int(np.prod(lead, dtype=int)), N), 1.0 / N)
    w = check_weights(weights, (*lead, N))
    return np.broadcast_to(w, (*lead, N)).reshape(-1, N)


def _edges_dense(P: np.ndarray, cos_eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Edges (global indices i < j) of pairs within the angle of cos_eps, chunks of clouds at a time."""
    B, N, _ = P.shape
    step = max(1, GRAM_ELEMENTS // (N * N))
    rows, cols = [], []
    upper = np.triu(np.ones((N, N), dtype=bool), 1)
    for b0 in range(0, B, step):
        G = np.einsum("bnd,bmd->bnm", P[b0 : b0 + step], P[b0 : b0 + step])
        b, i, j = np.nonzero((G >= cos_eps) & upper)
        rows.append((b + b0) * N + i)
        cols.append((b + b0) * N + j)
    return np.concatenate(rows), np.concatenate(cols)


def _edges_tree(P: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The same edges from a KD-tree per cloud (chordal radius 2 sin(eps / 2))."""
    from scipy.spatial import cKDTree

    B, N, _ = P.shape
    r = 2 * math.sin(eps / 2) * (1 + 1e-12)
    rows, cols = [], []
    for b in range(B):
        pairs = cKDTree(P[b]).query_pairs(r, output_type="ndarray")
        rows.append(b * N + pairs[:, 0])
        cols.append(b * N + pairs[:, 1])
    return np.concatenate(rows), np.concatenate(cols)


def cluster_labels(X: ArrayLike, eps: float) -> np.ndarray:
    """Each token's cluster, 0 .. c - 1 per cloud in order of first appearance: (..., N) int.

    Tokens within angle eps (<x_i, x_j> >= cos eps) are joined, and so, transitively, are their
    clusters (single linkage). X: unit rows (..., N, d); eps in (0, pi] radians."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    eps = _angle(eps)
    P, lead = _flat(X)
    B, N, _ = P.shape
    step = max(1, GRAM_ELEMENTS // (N * N)) if N <= DENSE_MAX_N else 1
    out = np.empty((B, N), dtype=np.int64)
    for b0 in range(0, B, step):  # a chunk of clouds at a time: a tight cluster has O(N^2) edges
        chunk = P[b0 : b0 + step]
        n = chunk.shape[0]
        rows, cols = _edges_dense(chunk, math.cos(eps)) if N <= DENSE_MAX_N else _edges_tree(chunk, eps)
        graph = coo_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n * N, n * N))
        labels = connected_components(graph, directed=False)[1].reshape(n, N)
        for b in range(n):  # renumber within each cloud: 0, 1, ... in order of first appearance
            _, first, inverse = np.unique(labels[b], return_index=True, return_inverse=True)
            out[b0 + b] = np.argsort(np.argsort(first))[inverse]
    return out.reshape(*lead, N)


def count_clusters(
    X: ArrayLike, eps: float, weights: ArrayLike | None = None, min_mass: float = 0.0
) -> int | np.ndarray:
    """The number of clusters of each cloud (see `cluster_labels`) whose mass is at least min_mass.

    Parameters
    ----------
    X : array (..., N, d)
        The clouds.
    eps : float
        The clustering distance of `cluster_labels`.
    weights : array (N,) or broadcasting, optional
        The tokens' masses w_i (None: 1/N); a cluster's mass is sum_{i in c} w_i.
    min_mass : float
        In [0, 1] (0: every cluster).

    Returns
    -------
    int or int array
        An int for one cloud (N, d), else an int array of the leading shape.
    """
    if not (isinstance(min_mass, (int, float)) and 0 <= min_mass <= 1):
        raise ValueError(f"min_mass is a mass in [0, 1], got {min_mass!r}")
    labels = cluster_labels(X, eps)
    lead, N = labels.shape[:-1], labels.shape[-1]
    w = _weights(weights, lead, N)
    flat = labels.reshape(-1, N)
    counts = np.empty(flat.shape[0], dtype=int)
    for b in range(flat.shape[0]):
        masses = np.bincount(flat[b], weights=w[b])
        counts[b] = int(np.sum(masses >= min_mass * (1 - 1e-12)))
    return int(counts[0]) if not lead else counts.reshape(lead)


def clustered_pairs(X: ArrayLike, eps: float, weights: ArrayLike | None = None) -> float | np.ndarray:
    """The mass of the pairs i != j within angle eps: sum_{i != j, <x_i, x_j> >= cos eps} w_i w_j /
    sum_{i != j} w_i w_j (the fraction of clustered pairs without weights). (..., N, d) -> (...)."""
    eps = _angle(eps)
    P, lead = _flat(X)
    B, N, _ = P.shape
    w = _weights(weights, lead, N)
    out = np.empty(B)
    step = max(1, GRAM_ELEMENTS // (N * N))
    off = ~np.eye(N, dtype=bool)
    for b0 in range(0, B, step):
        G = np.einsum("bnd,bmd->bnm", P[b0 : b0 + step], P[b0 : b0 + step])
        ww = w[b0 : b0 + step, :, None] * w[b0 : b0 + step, None, :] * off
        out[b0 : b0 + step] = np.sum(ww * (G >= math.cos(eps)), axis=(1, 2)) / np.sum(ww, axis=(1, 2))
    return float(out[0]) if not lead else out.reshape(lead)


def _farthest_start(P: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """k atoms per cloud (B, k, d): the token nearest the mean direction first, then each time the
    token farthest from the atoms so far."""
    B = P.shape[0]
    mean = np.einsum("bn,bnd->bd", w, P)[:, None]
    idx = np.argmax(np.sum(P * mean, axis=-1), axis=1)
    atoms = [P[np.arange(B), idx]]
    best = np.sum(P * atoms[0][:, None], axis=-1)  # largest <x_i, a> over the atoms so far
    for _ in range(1, k):
        idx = np.argmin(best, axis=1)
        atoms.append(P[np.arange(B), idx])
        best = np.maximum(best, np.sum(P * atoms[-1][:, None], axis=-1))
    return np.stack(atoms, axis=1)


def _seeded_start(P: np.ndarray, w: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ atoms per cloud (B, k, d): each next token drawn with probability proportional to
    w_i times its squared distance to the atoms so far."""
    B, N, _ = P.shape
    rows = np.arange(B)

    def draw(p: np.ndarray) -> np.ndarray:
        c = np.cumsum(p, axis=1)
        u = rng.uniform(size=(B, 1)) * c[:, -1:]
        return np.minimum(np.sum(c < u, axis=1), N - 1)

    atoms = [P[rows, draw(w)]]
    best = np.sum(P * atoms[0][:, None], axis=-1)
    for _ in range(1, k):
        atoms.append(P[rows, draw(w * np.maximum(2 - 2 * best, 0.0) + 1e-300)])
        best = np.maximum(best, np.sum(P * atoms[-1][:, None], axis=-1))
    return np.stack(atoms, axis=1)


def _lloyd(P: np.ndarray, w: np.ndarray, atoms: np.ndarray, iterations: int) -> np.ndarray:
    """Lloyd's iterations on the sphere from `atoms` (B, k, d), each cloud until its assignment of
    tokens to atoms stops changing (then its atoms do too); the cost sum_i w_i |x_i - a_c(i)|^2 (B,)."""
    atoms = atoms.copy()
    k = atoms.shape[1]
    active = np.arange(P.shape[0])
    previous = np.full(P.shape[:2], -1)
    for _ in range(iterations):
        Pa, wa = P[active], w[active]
        nearest = np.argmax(Pa @ atoms[active].transpose(0, 2, 1), axis=-1)  # (b, N)
        moved = np.any(nearest != previous[active], axis=1)
        previous[active] = nearest
        active, nearest, Pa, wa = active[moved], nearest[moved], Pa[moved], wa[moved]
        if active.size == 0:
            break
        onehot = (nearest[..., None] == np.arange(k)) * wa[..., None]  # (b, N, k)
        sums = onehot.transpose(0, 2, 1) @ Pa  # (b, k, d)
        norms = np.linalg.norm(sums, axis=-1, keepdims=True)
        atoms[active] = np.where(norms > 0, sums / np.maximum(norms, 1e-300), atoms[active])  # empty: stays
    return np.sum(w * (2 - 2 * (P @ atoms.transpose(0, 2, 1)).max(axis=-1)), axis=-1)


def nearest_atoms_w2(
    X: ArrayLike,
    k: int,
    weights: ArrayLike | None = None,
    *,
    restarts: int = 4,
    iterations: int = 100,
    seed: int = 0,
) -> float | np.ndarray:
    """W2 (chordal) from each cloud to the nearest measure with k atoms on the sphere.

    With free masses the nearest k-atom measure sends each token to its nearest atom, so W2^2 =
    min over atoms a_1..a_k of sum_i w_i |x_i - a_c(i)|^2 = sum_i w_i (2 - 2 max_c <x_i, a_c>). k = 1:
    exact, the atom being the normalised mean, W2^2 = 2 (1 - |sum_i w_i x_i|). k >= 2: the best of
    Lloyd's iterations (each atom the normalised mean of its tokens) from a farthest-point start and
    `restarts` seeded k-means++ starts, a local optimum: an upper bound on the distance.

    Parameters
    ----------
    X : array (..., N, d)
        The clouds.
    k : int
        The number of atoms.
    weights : array (N,) or broadcasting, optional
        The tokens' masses (None: 1/N).
    restarts, iterations, seed : int
        The k-means++ starts, Lloyd's iterations at most, and their seed.

    Returns
    -------
    float or array (...)
        The distance.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (atoms), got {k!r}")
    P, lead = _flat(X)
    N = P.shape[1]
    w = _weights(weights, lead, N)
    if k == 1:
        cost = 2 * (1 - np.linalg.norm(np.einsum("bn,bnd->bd", w, P), axis=-1))
    else:
        k = min(int(k), N)
        rng = np.random.default_rng(seed)
        cost = _lloyd(P, w, _farthest_start(P, w, k), iterations)
        for _ in range(restarts):
            cost = np.minimum(cost, _lloyd(P, w, _seeded_start(P, w, k, rng), iterations))
    out = np.sqrt(np.maximum(cost, 0.0))
    return float(out[0]) if not lead else out.reshape(lead)


def metastable_count(counts: ArrayLike, N: int) -> np.ndarray:
    """The count of the metastable state of each cloud: the first value at most N / 2 (at least half
    the tokens merged) that the saved counts (T, M) hold over PLATEAU_SAVES consecutive saved times
    (NaN: no such plateau). Returns (M,)."""
    c = np.asarray(counts, dtype=np.float64)
    T, M = c.shape
    out = np.full(M, np.nan)
    for m in range(M):
        for i in range(T - PLATEAU_SAVES + 1):
            if c[i, m] <= N / 2 and np.all(c[i : i + PLATEAU_SAVES, m] == c[i, m]):
                out[m] = c[i, m]
                break
    return out
