"""The interaction energy of a measure (docs/math.md, "The interaction energy"):

    E_beta(rho) = (1 / 2 beta) int int exp(beta x^T B y) drho(x) drho(y)

for rho = sum_i w_i delta_{x_i} (tokens: w_i = 1/N; quadrature and mean-field measures: their
weights). Where the dynamics is a gradient flow of it (one head with V = B symmetric, softmax or
unnormalised: Q = K = V = I, say) it never decreases along a run, and its plateaus in time are the
metastable states. It reaches e^{beta ||B||}: `log=True` gives log E_beta, computed in the log
domain (a log-sum-exp over the pairs) at any beta.

    interaction_energy(X, model, weights=None, log=False)   # (...,) over the leading axes of X
    log_energy_curve(X, model, weights=None)                 # log E_beta, NaN where undefined
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_stack, check_weights
from ..attention import Attention
from ..flow import Dynamics, check_model

__all__ = ["ENERGY_LONG_NAME", "interaction_energy", "log_energy_curve"]

#: what the experiments' variable log_energy holds
ENERGY_LONG_NAME = (
    "log of the interaction energy E_beta = (1 / 2 beta) int int exp(beta x^T B y) drho drho (on x/|x|; "
    "NaN where the model has no one head)"
)

PAIR_ELEMENTS = 2**22  # pair scores held at once (32 MiB)


def _head(model: object) -> Attention:
    """The one head of a model (an Attention, or a Dynamics with one head), finite beta."""
    model = check_model(model, "model")
    head = model if isinstance(model, Attention) else model.head
    if head is None:
        raise ValueError(
            f"interaction_energy needs one head (one B); this model has {model.H} distinct heads"  # type: ignore[union-attr]
        )
    if not math.isfinite(head.beta):
        raise ValueError("interaction_energy needs a finite beta (E_beta has no limit at beta = inf)")
    return head


def _log_pair_sums(P: np.ndarray, logw: np.ndarray, S: np.ndarray) -> np.ndarray:
    """log sum_ij exp(x_i^T S x_j + log w_i + log w_j) of each cloud of P (C, N, d), rows in blocks."""
    C, N, _ = P.shape
    rows = max(1, PAIR_ELEMENTS // (C * N))
    Q = P @ S  # rows of x_i^T S
    parts = []
    for i0 in range(0, N, rows):
        scores = np.matmul(Q[:, i0 : i0 + rows], P.transpose(0, 2, 1))
        scores += logw[:, i0 : i0 + rows, None] + logw[:, None, :]
        top = scores.max(axis=(1, 2))
        scores -= top[:, None, None]
        np.exp(scores, out=scores)  # in place: one pass less than scipy's logsumexp, no copies
        parts.append(top + np.log(scores.sum(axis=(1, 2))))
    stacked = np.stack(parts, axis=1)
    top = stacked.max(axis=1)
    return top + np.log(np.exp(stacked - top[:, None]).sum(axis=1))


def _log_weights(
    weights: ArrayLike | None, log_weights: ArrayLike | None, lead: tuple[int, ...], N: int
) -> np.ndarray:
    """log w (C, N) of the flattened clouds: from weights, from log_weights (normalised here: a
    mean-field measure's tail masses pass float64's range), or uniform."""
    from scipy.special import logsumexp

    C = int(np.prod(lead, dtype=int))
    if weights is not None and log_weights is not None:
        raise ValueError("give weights or log_weights, not both")
    if weights is not None:
        w = check_weights(weights, (*lead, N))
        return np.log(np.broadcast_to(w, (*lead, N)).reshape(C, N))
    if log_weights is None:
        return np.full((C, N), -math.log(N))
    lw = np.broadcast_to(np.asarray(log_weights, dtype=np.float64), (*lead, N)).reshape(C, N)
    if not np.all(np.isfinite(lw)):
        raise ValueError("log_weights must be finite (log of positive masses)")
    return np.asarray(lw - logsumexp(lw, axis=1, keepdims=True))


def interaction_energy(
    X: ArrayLike,
    model: Attention | Dynamics,
    weights: ArrayLike | None = None,
    log: bool = False,
    *,
    log_weights: ArrayLike | None = None,
) -> np.ndarray | float:
    """E_beta(rho) (or log E_beta with log=True) of each cloud of X, unit rows.

    Parameters
    ----------
    X : array (..., N, d)
        The clouds, unit rows.
    model : Attention or Dynamics
        An Attention, or a Dynamics with one head (its beta and B).
    weights : array (N,) or broadcasting, optional
        Against X's leading axes, positive and summing to 1 (None: 1/N).
    log : bool
        Return log E_beta. Without it, E_beta past float64's range is inf: use log=True there.
    log_weights : array, optional
        The weights' logs instead (any normalisation: masses below float64's smallest number kept).

    Returns
    -------
    array (...) or float
        X's leading shape (a float for one cloud).
    """
    att = _head(model)
    P = check_stack(X, "X")
    lead, (N, d) = P.shape[:-2], P.shape[-2:]
    if d != att.d:
        raise ValueError(f"X has tokens in R^{d}, the model acts on R^{att.d}")
    flat = P.reshape(-1, N, d)
    logw = _log_weights(weights, log_weights, lead, N)
    step = max(1, PAIR_ELEMENTS // (N * N))
    S = att.beta * att.B
    out = np.concatenate(
        [_log_pair_sums(flat[c : c + step], logw[c : c + step], S) for c in range(0, len(flat), step)]
    )
    out = (out - math.log(2 * att.beta)).reshape(lead)
    if not log:
        with np.errstate(over="ignore"):
            out = np.exp(out)
    return float(out) if out.ndim == 0 else out


def log_energy_curve(
    X: ArrayLike,
    model: Attention | Dynamics,
    weights: ArrayLike | None = None,
    *,
    log_weights: ArrayLike | None = None,
) -> np.ndarray:
    """log E_beta of each cloud of X (..., N, d) taken on the directions x / |x| (the experiments'
    `log_energy`), NaN where E_beta is not defined for the model (several heads, beta = inf)."""
    P = np.asarray(X, dtype=np.float64)
    try:
        _head(model)
    except ValueError:
        return np.full(P.shape[:-2], np.nan)
    U = P / np.linalg.norm(P, axis=-1, keepdims=True)
    out = interaction_energy(U, model, weights, log=True, log_weights=log_weights)
    return np.asarray(out).reshape(P.shape[:-2])
