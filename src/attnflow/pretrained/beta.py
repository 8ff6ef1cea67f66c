"""The effective beta of a head measured from its attention on real tokens, by regression.

The model's logits l_ij of head h (computed as the model does: norm, biases, rotary positions,
the 1/sqrt(d_head) scale) are regressed on the bilinear score of MATH.md in the head's own frame,
s_ij = x_i^T B_h(i - j) x_j with x the unit tokens entering the layer and B_h(r) = Q_h^T R(-r) K_h
(norm folded where `heads` folds it), beside the logit terms the maths has no place for:

    l_ij = beta s_ij + sum_k c_k z^k_ij + alpha_i [+ gamma_(i - j)] + e_ij

over the pairs (i, j) the model scores (j <= i for causal models).  alpha_i is a fixed effect per
query: the softmax is blind to anything constant in j (its log Z_i, the query-only parts of the
biases), so only differences within a query identify beta; a query needs at least two keys.
gamma_r is a fixed effect per rotary offset r = i - j (rotary models: it absorbs any logit that
depends on the offset alone, e.g. b_Q^T R(-r) b_K).  The regressors z^k (`bias_logits`) are the
query-bias logit b_Q^T K_h h_j / sqrt(d_h) (rotated at its positions under RoPE), which is
correlated with the score and biases beta when left out, and under RoPE the key-bias logit
(Q_h h_i)^T R b_K / sqrt(d_h); their coefficients are 1 when the logits are exactly those of the
model.  The estimate is least squares after the fixed effects are projected out (exactly within
queries; by alternating projections with the offsets); its standard error is the ordinary one
(pairs treated as independent given the fixed effects, which they are not quite: a scale of the
noise, not a confidence statement).  R^2 is within the fixed effects: 1 when the head's logits are
exactly beta times the unit-token score plus the regressors (a pre-norm RMSNorm head), less when
token norms vary (post-norm).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from .checkpoint import Checkpoint
from .forward import TokenStates, attention_logits, head_inputs
from .heads import Head, Layer

__all__ = ["BetaFit", "bias_logits", "fit_beta", "head_fits", "unit_scores"]

#: alternating projections stop when a sweep moves the residuals by less than this (relative)
PROJECTION_TOL = 1e-13
#: a regressor the fixed effects explain to within this fraction of its norm is dropped (collinear)
COLLINEAR = 1e-9


@dataclass(frozen=True)
class BetaFit:
    """beta fitted from the logits: estimate, standard error (None with no degree of freedom left),
    R^2 within the fixed effects, the number of (query, key) pairs and of queries used; terms:
    name -> [coefficient, standard error] of each other regressor kept; effects: the fixed effects."""

    beta: float | None
    se: float | None
    r2: float | None
    pairs: int
    queries: int
    terms: dict[str, list[float | None]] = field(default_factory=dict)
    effects: str = "query"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def unit_scores(head: Head, X: np.ndarray) -> np.ndarray:
    """s_ij = x_i^T B_h(i - j) x_j for unit tokens X (N, d) in position order, (N, N)."""
    q, k = X @ head.Q.T, X @ head.K.T
    if head.rope is not None:
        pos = np.arange(X.shape[0])
        q, k = head.rope.rotate(q, pos), head.rope.rotate(k, pos)
    return q @ k.T


def bias_logits(head: Head, H: np.ndarray) -> dict[str, np.ndarray]:
    """The logit terms of head's biases on the states H (N, d) as the heads read them, (N, N) each:
    "query bias" b_Q^T K_h h_j / sqrt(d_h) when b_Q != 0, and under rotary positions "key bias"
    (Q_h h_i)^T R(j - i) b_K / sqrt(d_h) when b_K != 0 (without them it is constant in j)."""
    out: dict[str, np.ndarray] = {}
    N, scale = H.shape[0], math.sqrt(head.d_head)
    q, k = H @ head.Q.T, H @ head.K.T
    bq = np.broadcast_to(head.b_Q if head.b_Q is not None else 0.0, (N, head.d_head))
    bk = np.broadcast_to(head.b_K if head.b_K is not None else 0.0, (N, head.d_head))
    if head.rope is not None:
        pos = np.arange(N)
        q, k, bq, bk = (head.rope.rotate(a, pos) for a in (q, k, bq, bk))
    if head.b_Q is not None and np.any(head.b_Q):
        out["query bias"] = bq @ k.T / scale
    if head.rope is not None and head.b_K is not None and np.any(head.b_K):
        out["key bias"] = q @ bk.T / scale
    return out


def _demean(M: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Columns of M (n, k) with the fixed effects of `groups` (each (n,) integer labels) projected
    out: one pass for one factor, alternating projections for two."""
    M = M.copy()
    for _ in range(1 if len(groups) == 1 else 10_000):
        before = M.copy()
        for g in groups:
            counts = np.bincount(g)
            means = np.stack([np.bincount(g, weights=M[:, c]) for c in range(M.shape[1])], axis=1)
            M -= (means / np.maximum(counts, 1)[:, None])[g]
        if np.max(np.abs(M - before), initial=0.0) <= PROJECTION_TOL * max(np.max(np.abs(M)), 1e-300):
            break
    return M


def fit_beta(
    logits: np.ndarray,
    scores: np.ndarray,
    regressors: Mapping[str, np.ndarray] | None = None,
    offsets: bool = False,
) -> BetaFit:
    """Least squares of logits on scores (both (N, N)) and the other `regressors` (name -> (N, N)),
    with a fixed effect per query (row) and, with `offsets`, per offset i - j; over the finite
    logits (a causal mask writes -inf); rows with fewer than two finite entries drop."""
    pair = np.isfinite(logits)
    keep = pair.sum(axis=1) >= 2
    pair &= keep[:, None]
    n, q = int(pair.sum()), int(keep.sum())
    effects = "query and offset" if offsets else "query"
    if q == 0:
        return BetaFit(None, None, None, 0, 0, effects=effects)
    rows, cols = np.nonzero(pair)
    names = list(regressors or {})
    M = np.stack([logits[pair], scores[pair], *((regressors or {})[k][pair] for k in names)], axis=1)
    groups = [np.unique(rows, return_inverse=True)[1]]
    if offsets:
        groups.append(np.unique(rows - cols, return_inverse=True)[1])
    W = _demean(M, groups)
    y, Z = W[:, 0], W[:, 1:]
    kept = [c for c in range(Z.shape[1]) if np.linalg.norm(Z[:, c]) > COLLINEAR * np.linalg.norm(M[:, c + 1])]
    if 0 not in kept:
        return BetaFit(None, None, None, n, q, effects=effects)
    Z = Z[:, kept]
    coef, *_ = np.linalg.lstsq(Z, y, rcond=None)
    rss = float(np.sum((y - Z @ coef) ** 2))
    syy = float(y @ y)
    dof = n - q - (len(np.unique(groups[1])) - 1 if offsets else 0) - len(kept)
    cov = np.linalg.inv(Z.T @ Z) * (rss / dof) if dof > 0 else None
    se = [math.sqrt(max(float(cov[c, c]), 0.0)) if cov is not None else None for c in range(len(kept))]
    terms = {names[c - 1]: [float(coef[k]), se[k]] for k, c in enumerate(kept) if c > 0}
    r2 = 1.0 - rss / syy if syy > 0 else None
    return BetaFit(float(coef[0]), se[0], r2, n, q, terms, effects)


def head_fits(ck: Checkpoint, rec: Layer, run: TokenStates) -> list[BetaFit]:
    """beta fitted from the model's logits, per head of layer `rec` (see `beta`): the bias logits
    as regressors, a fixed effect per query and, under rotary positions, per offset."""
    S = run.states[rec.layer]
    logits, H, X = attention_logits(ck, rec.layer, S), head_inputs(ck, rec.layer, S), run.cloud(rec.layer)
    offsets = rec.rope is not None
    return [fit_beta(logits[h.head], unit_scores(h, X), bias_logits(h, H), offsets) for h in rec.heads]
