"""Clusters (union of tokens within angle eps) and W2 to the nearest k-atom measure."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import attnflow as af
from attnflow.science import clusters
from attnflow.science.clusters import cluster_labels, clustered_pairs, count_clusters, nearest_atoms_w2


def blobs(centres: np.ndarray, n: int, spread: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.repeat(centres, n, axis=0) + spread * rng.standard_normal((len(centres) * n, centres.shape[1]))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def circle(theta) -> np.ndarray:
    theta = np.asarray(theta, dtype=float)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def test_separate_blobs_are_counted():
    centres = np.eye(5)[:4]
    X = blobs(centres, 20, 1e-3)
    assert count_clusters(X, 0.05) == 4
    assert count_clusters(X, 1e-6) == len(X)  # no pair that close: every token alone
    assert count_clusters(X, math.pi) == 1
    labels = cluster_labels(X, 0.05)
    assert labels[0] == 0 and set(labels) == {0, 1, 2, 3}
    np.testing.assert_array_equal(labels, np.repeat(np.arange(4), 20))


def test_single_linkage_joins_chains():
    """Tokens along an arc, eps / 2 apart: one cluster although the ends are far apart."""
    X = circle(np.arange(40) * 0.01)
    assert count_clusters(X, 0.02) == 1
    assert count_clusters(X, 0.009) == 40


def test_the_tree_path_is_the_dense_path(monkeypatch):
    X = np.stack([af.sample_uniform(300, 3, seed=s) for s in range(3)])
    dense = cluster_labels(X, 0.1)
    monkeypatch.setattr(clusters, "DENSE_MAX_N", 10)
    np.testing.assert_array_equal(cluster_labels(X, 0.1), dense)


def test_weighted_counts_and_batches():
    X = blobs(np.eye(3), 10, 1e-4)
    w = np.concatenate([np.full(10, 0.9 / 10), np.full(10, 0.08 / 10), np.full(10, 0.02 / 10)])
    assert count_clusters(X, 0.01, w, min_mass=0.05) == 2
    assert count_clusters(X, 0.01, w) == 3
    stack = np.stack([X, af.sample_uniform(30, 3, seed=1)])[None].repeat(4, axis=0)  # (T, M, N, d)
    counts = count_clusters(stack, 0.01)
    assert counts.shape == (4, 2) and np.all(counts[:, 0] == 3) and np.all(counts[:, 1] == 30)


def test_clustered_pairs_is_the_brute_force_fraction():
    X = af.sample_uniform(50, 3, seed=2)
    w = np.random.default_rng(1).uniform(1, 2, 50)
    w /= w.sum()
    close = (X @ X.T >= math.cos(0.6)) & ~np.eye(50, dtype=bool)
    ww = np.outer(w, w) * ~np.eye(50, dtype=bool)
    assert clustered_pairs(X, 0.6, w) == pytest.approx(np.sum(ww * close) / np.sum(ww), rel=1e-12)
    assert clustered_pairs(X, 0.6) == pytest.approx(close.sum() / (50 * 49), rel=1e-12)


def test_one_atom_is_exact():
    """W2 to the nearest Dirac: the atom is the normalised mean; against a scan of atoms on S^1 and
    attnflow's W2 to that atom."""
    X = circle(np.random.default_rng(3).uniform(-1.0, 2.0, 80))
    w = np.random.default_rng(4).uniform(1, 2, 80)
    w /= w.sum()
    got = nearest_atoms_w2(X, 1, w)
    scan = circle(np.linspace(-np.pi, np.pi, 20001))
    costs = (w[None] * np.sum((X[None] - scan[:, None]) ** 2, axis=-1)).sum(axis=1)
    assert got == pytest.approx(math.sqrt(costs.min()), rel=1e-6) and got <= math.sqrt(costs.min()) + 1e-12
    a = np.sum(w[:, None] * X, axis=0)
    a /= np.linalg.norm(a)
    assert got == pytest.approx(
        af.w2_to_target(X, np.repeat(a[None], 80, axis=0), weights=w).values, rel=1e-12
    )


def test_k_atoms_is_an_upper_bound_close_to_the_optimum():
    """Three arcs on S^1: Lloyd's atoms against the best pair and triple of a grid of atoms."""
    rng = np.random.default_rng(5)
    theta = np.concatenate([rng.normal(0.0, 0.1, 30), rng.normal(2.0, 0.15, 20), rng.normal(4.0, 0.1, 10)])
    X = circle(theta)
    for k, n in ((2, 120), (3, 60)):
        grid = circle(np.linspace(-np.pi, np.pi, n, endpoint=False))
        gain = X @ grid.T  # (N, n)
        combos = np.array(list(itertools.combinations(range(n), k)))
        best = np.min(np.mean(2 - 2 * gain[:, combos].max(axis=2), axis=0))
        got = nearest_atoms_w2(X, k)
        assert got**2 <= best + 1e-9  # no worse than the best atoms of the grid
        assert got**2 >= best - 2 * (2 * math.pi / n) ** 2  # ... which are within a grid step of the optimum
    assert nearest_atoms_w2(X, 60) == pytest.approx(0.0, abs=1e-7)  # an atom per token


def test_bad_arguments():
    X = af.sample_uniform(5, 3, seed=1)
    with pytest.raises(ValueError, match="eps is an angle"):
        count_clusters(X, 4.0)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        nearest_atoms_w2(X, 0)
    with pytest.raises(ValueError, match="min_mass is a mass"):
        count_clusters(X, 0.1, min_mass=2)


def test_the_first_plateau_is_the_metastable_count():
    from attnflow.science.clusters import PLATEAU_SAVES, metastable_count

    assert PLATEAU_SAVES == 5
    counts = np.array(
        [
            [
                40,
                40,
                40,
                40,
                40,
                40,
                30,
                12,
                4,
                4,
                4,
                4,
                4,
                3,
                3,
                3,
                3,
                3,
                3,
                3,
            ],  # N = 40 held first: not <= N/2
            [40, 20, 20, 20, 20, 9, 9, 9, 9, 9, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],  # 20 = N/2 held four times
            [40, 30, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2],  # no plateau
        ]
    ).T
    np.testing.assert_array_equal(metastable_count(counts, 40), [4.0, 9.0, np.nan])
