"""The linearisation's cluster count beside the measured one (docs/experiments.md, "phase-diagram";
docs/math.md, "Clusters predicted by the linearisation").

    predicted_counts(model, X0)        (M,) the count `attnflow.predict_clusters` predicts for each
                                       cloud (NaN where the linearisation does not speak: a model
                                       other than one head with B = b I, V = v I; d >= 4)
    metastable_counts(clusters, N)     (M,) the measured count of the metastable state: the first
                                       plateau of the count among the saved times
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: a plateau holds the count over this many consecutive saved times
PLATEAU_SAVES = 5


def predicted_counts(model: Any, X0: np.ndarray) -> np.ndarray:
    """The predicted number of clusters of each cloud X0 (M, N, d) under model (NaN: not predicted)."""
    from ...science.linearisation import predict_clusters

    M, _, d = X0.shape
    try:
        bare = predict_clusters(model)
    except ValueError:
        return np.full(M, np.nan)
    if d == 2:
        return np.full(M, float(bare.degree))
    if d != 3:
        return np.full(M, np.nan)
    return np.array([float(predict_clusters(model, X0[m]).count or np.nan) for m in range(M)])


def metastable_counts(clusters: np.ndarray, N: int) -> np.ndarray:
    """The first count at most N / 2 (at least half the tokens merged) that the saved counts
    (T, M) hold over PLATEAU_SAVES consecutive saved times, per cloud (NaN: no such plateau)."""
    T, M = clusters.shape
    out = np.full(M, np.nan)
    for m in range(M):
        c = clusters[:, m]
        for i in range(T - PLATEAU_SAVES + 1):
            window = c[i : i + PLATEAU_SAVES]
            if c[i] <= N / 2 and np.all(window == c[i]):
                out[m] = c[i]
                break
    return out
