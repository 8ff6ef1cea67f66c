"""The effective beta of a head measured from its attention on real tokens, by regression.

The model's logits l_ij of head h (computed as the model does: norm, biases, rotary positions,
the 1/sqrt(d_head) scale) are regressed on the bilinear score of MATH.md in the head's own frame,
s_ij = x_i^T B_h(i - j) x_j with x the unit tokens entering the layer and B_h(r) = Q_h^T R(-r) K_h
(norm folded where `heads` folds it):

    l_ij = beta s_ij + alpha_i + e_ij,      over the pairs (i, j) the model scores

with a fixed effect alpha_i per query: the softmax is blind to anything constant in j (its log Z_i,
terms of the query bias constant in j), so only differences within a query identify beta.  For a
causal model the pairs are j <= i only, and a query needs at least two keys.  The slope is the
within-query least-squares estimate; its standard error is the ordinary one (pairs treated as
independent given the fixed effects, which they are not quite: it is a scale of the noise, not a
confidence statement).  R^2 is within queries: 1 when the head's logits are exactly beta times the
unit-token score (a pre-norm RMSNorm head without biases), less when token norms vary (post-norm)
or a bias adds a key-dependent logit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .heads import Head

__all__ = ["BetaFit", "fit_beta", "unit_scores"]


@dataclass(frozen=True)
class BetaFit:
    """beta fitted from the logits: estimate, standard error (None with no degree of freedom left),
    within-query R^2, the number of (query, key) pairs and of queries used."""

    beta: float | None
    se: float | None
    r2: float | None
    pairs: int
    queries: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unit_scores(head: Head, X: np.ndarray) -> np.ndarray:
    """s_ij = x_i^T B_h(i - j) x_j for unit tokens X (N, d) in position order, (N, N)."""
    q, k = X @ head.Q.T, X @ head.K.T
    if head.rope is not None:
        pos = np.arange(X.shape[0])
        q, k = head.rope.rotate(q, pos), head.rope.rotate(k, pos)
    return q @ k.T


def fit_beta(logits: np.ndarray, scores: np.ndarray) -> BetaFit:
    """Least squares of logits on scores (both (N, N)) with a fixed effect per query (row), over
    the finite logits (a causal mask writes -inf); rows with fewer than two finite entries drop."""
    pair = np.isfinite(logits)
    keep = pair.sum(axis=1) >= 2
    pair &= keep[:, None]
    n, q = int(pair.sum()), int(keep.sum())
    if q == 0:
        return BetaFit(None, None, None, 0, 0)
    count = pair.sum(axis=1, keepdims=True).clip(min=1)
    y = np.where(pair, logits, 0.0)
    s = np.where(pair, scores, 0.0)
    y = np.where(pair, y - y.sum(axis=1, keepdims=True) / count, 0.0)
    s = np.where(pair, s - s.sum(axis=1, keepdims=True) / count, 0.0)
    sxx, sxy, syy = float(np.sum(s * s)), float(np.sum(s * y)), float(np.sum(y * y))
    if sxx <= 0:
        return BetaFit(None, None, None, n, q)
    beta = sxy / sxx
    rss = max(syy - beta * sxy, 0.0)
    dof = n - q - 1
    se = math.sqrt(rss / dof / sxx) if dof > 0 else None
    return BetaFit(beta, se, 1.0 - rss / syy if syy > 0 else None, n, q)
