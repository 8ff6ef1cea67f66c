"""How many clusters the linearised dynamics predicts, and where (docs/math.md, "Clusters predicted
by the linearisation"; Bruno, Pasqualotto, Agazzi, ICLR 2025).

Near the uniform measure on S^{d-1}, with B = b I and V = v I (b, v > 0: Q = K = V = I is b = v = 1),
the spherical harmonics of degree l are the modes of the linearised continuity equation, and the
component of degree l grows like e^{lambda_l t}, nu = (d - 2) / 2, x = beta b:

    softmax (SA):          lambda_l = v l (l + d - 2) I_{l + nu}(x) / (x I_nu(x))
    unnormalised (USA):    lambda_l = v l (l + d - 2) Gamma(d / 2) (2 / x)^nu I_{l + nu}(x) e^x / x
                           (usa_time "rescaled": without the factor e^x = e^{beta ||B||})

On the circle (d = 2) this is k^2 I_k(beta) up to a factor free of k. The metastable state has as
many clusters as the degree l* = argmax_l lambda_l has local maxima: on S^1 the k* maxima of
cos(k* theta + arg c_k*), c_k = sum_j w_j e^{-i k theta_j} the initial Fourier coefficient; on S^2
the local maxima of the degree-l* component sum_j w_j P_l*(<x, x_j>) of the initial measure
(Legendre P_l, the Gegenbauer polynomial of S^2), found on a Fibonacci grid.

    predict_clusters(model, X0=None, weights=None, modes=None) -> ClusterPrediction
    predicted_counts(model, X0, weights=None)   # (M,) per cloud, NaN where it does not speak
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_cloud, check_positive, check_weights
from ..attention import Attention
from ..flow import Dynamics, check_model

__all__ = ["ClusterPrediction", "growth_rates", "predict_clusters", "predicted_counts"]

GRID_POINTS = 20_000  # Fibonacci nodes on S^2 where the degree-l component's maxima are looked for
ISOTROPY_RTOL = 1e-12  # B and V are multiples of I within this relative (Frobenius) tolerance


@dataclass(frozen=True)
class ClusterPrediction:
    """The linearised dynamics' prediction.

    Attributes
    ----------
    modes : array (L,)
        The degrees l = 1..L.
    rates : array (L,)
        Their growth rates, per unit time.
    degree : int
        The fastest degree (k* on the circle).
    count : int or None
        The predicted number of clusters (k* on the circle; None without an initial measure on S^2).
    positions : array (count, d) or None
        The predicted clusters, unit vectors, given an initial measure (None without one).
    """

    modes: np.ndarray
    rates: np.ndarray
    degree: int
    count: int | None
    positions: np.ndarray | None


def _scalar_multiple(M: np.ndarray, name: str) -> float:
    """c where M = c I with c > 0 (ValueError otherwise)."""
    c = float(np.trace(M)) / M.shape[0]
    if c <= 0 or np.linalg.norm(M - c * np.eye(M.shape[0])) > ISOTROPY_RTOL * abs(c) * M.shape[0]:
        raise ValueError(
            f"predict_clusters needs {name} = c I with c > 0 (Q = K = V = I or multiples), got {name} = "
            f"{np.array2string(M, precision=3, max_line_width=200)}"
        )
    return c


def _isotropic(model: object) -> tuple[Attention, str, str]:
    """The one head of a model the linearisation speaks about, its normalization and usa_time."""
    model = check_model(model, "model")
    if isinstance(model, Attention):
        model = Dynamics(model)
    off = [
        why
        for why, bad in (
            (f"{model.H} heads", model.head is None),
            (f"mask = {model.mask}", model.mask != "none"),
            (f"layer_norm = {model.layer_norm}", model.layer_norm != "post"),
            (f"noise = {model.noise:g}", model.noise > 0),
            ("redrawn weights", model.redraw is not None),
            (f"normalization = {model.normalization}", model.normalization not in ("softmax", "usa")),
        )
        if bad
    ]
    if off:
        raise ValueError(
            "predict_clusters needs one head with softmax or usa attention, post-LN, no mask, no noise "
            f"and fixed weights; this model has {', '.join(off)}"
        )
    if not math.isfinite(model.beta):
        raise ValueError("predict_clusters needs a finite beta (at beta = inf every mode is neutral)")
    return model.heads[0], model.normalization, model.usa_time


def growth_rates(model: Attention | Dynamics, modes: ArrayLike) -> np.ndarray:
    """The growth rates lambda_l (per unit time) of the degrees `modes` (ints >= 1) of the
    linearisation about the uniform measure (module docstring). The model: one head with B = b I,
    V = v I (b, v > 0), softmax or usa, finite beta."""
    from scipy.special import gammaln, ive

    att, normalization, usa_time = _isotropic(model)
    x = att.beta * _scalar_multiple(att.B, "B")
    v = _scalar_multiple(att.V, "V")
    ls = np.asarray(modes, dtype=np.float64)
    d, nu = att.d, (att.d - 2) / 2
    rates = v * ls * (ls + d - 2) * ive(ls + nu, x) / x
    if normalization == "softmax":
        return np.asarray(rates / ive(nu, x))
    log_mean = gammaln(d / 2) + nu * math.log(2 / x) + (x if usa_time == "model" else 0.0)
    return np.asarray(rates * math.exp(log_mean))


def _default_modes(model: Attention | Dynamics) -> int:
    """Enough degrees to hold the fastest one: lambda_l peaks near l = sqrt(2 beta b) at large beta."""
    att = _isotropic(model)[0]
    x = att.beta * float(np.trace(att.B)) / att.d
    return math.ceil(2 * math.sqrt(2 * max(x, 1.0))) + 4


def _circle_positions(X: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """The k maxima of cos(k theta + arg c_k), c_k = sum_j w_j e^{-i k theta_j}: (k, 2)."""
    c = np.sum(w * np.exp(-1j * k * np.arctan2(X[:, 1], X[:, 0])))
    theta = (-np.angle(c) + 2 * np.pi * np.arange(k)) / k
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def _sphere_positions(X: np.ndarray, w: np.ndarray, degree: int) -> np.ndarray:
    """The local maxima on S^2 of f(x) = sum_j w_j P_l(<x, x_j>) among the nodes of a Fibonacci grid
    (neighbours: the edges of the grid's convex hull), (count, 3); accurate to the grid's spacing,
    about sqrt(4 pi / GRID_POINTS) = 0.025 rad."""
    from scipy.spatial import ConvexHull
    from scipy.special import eval_legendre

    from ..measures.quadrature import fibonacci_sphere

    G = fibonacci_sphere(GRID_POINTS)
    f = np.concatenate([eval_legendre(degree, np.clip(g @ X.T, -1, 1)) @ w for g in np.array_split(G, 20)])
    tri = ConvexHull(G).simplices
    i = np.concatenate([tri[:, 0], tri[:, 1], tri[:, 2], tri[:, 1], tri[:, 2], tri[:, 0]])
    j = np.concatenate([tri[:, 1], tri[:, 2], tri[:, 0], tri[:, 0], tri[:, 1], tri[:, 2]])
    best = np.full(len(G), -np.inf)
    np.maximum.at(best, i, f[j])  # the largest value among each node's neighbours
    return G[f > best]


def predict_clusters(
    model: Attention | Dynamics,
    X0: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    modes: int | None = None,
) -> ClusterPrediction:
    """The number and positions of the clusters predicted by the linearised dynamics.

    Parameters
    ----------
    model : Attention or Dynamics
        One head with B = b I, V = v I (b, v > 0), softmax or usa attention, finite beta.
    X0 : array (N, d), optional
        Initial tokens, d = 2 or 3, near the uniform measure.
    weights : array (N,), optional
        Their quadrature weights (None: 1/N).
    modes : int, optional
        The largest degree L to compare (None: 2 sqrt(2 beta b) + 4, past the fastest).

    Returns
    -------
    ClusterPrediction
        Its count and positions (from X0's component of the fastest degree) need X0.
    """
    L = _default_modes(model) if modes is None else int(check_positive(modes, "modes", integer=True))
    ls = np.arange(1, L + 1)
    rates = growth_rates(model, ls)
    degree = int(ls[np.argmax(rates)])
    if X0 is None:
        return ClusterPrediction(ls, rates, degree, degree if _isotropic(model)[0].d == 2 else None, None)
    X = check_cloud(X0, "X0")
    d = _isotropic(model)[0].d
    if X.shape[1] != d or d not in (2, 3):
        raise ValueError(f"X0 must be tokens (N, {d}) on S^1 or S^2 (d = 2 or 3), got shape {X.shape}")
    N = X.shape[0]
    w = np.full(N, 1.0 / N) if weights is None else check_weights(weights, N)
    P = _circle_positions(X, w, degree) if d == 2 else _sphere_positions(X, w, degree)
    return ClusterPrediction(ls, rates, degree, len(P), P)


def predicted_counts(
    model: Attention | Dynamics, X0: ArrayLike, weights: ArrayLike | None = None
) -> np.ndarray:
    """The predicted number of clusters of each cloud X0 (M, N, d) (weights (N,) or None), NaN where
    the linearisation does not speak: a model other than one head with B = b I, V = v I (softmax or
    usa, post-LN, no mask, no noise), or d >= 4 (the count of the degree's maxima is not computed)."""
    X = np.asarray(X0, dtype=np.float64)
    M, d = X.shape[0], X.shape[-1]
    try:
        bare = predict_clusters(model)
    except ValueError:
        return np.full(M, np.nan)
    if d == 2:
        return np.full(M, float(bare.degree))
    if d != 3:
        return np.full(M, np.nan)
    return np.array([float(predict_clusters(model, X[m], weights).count or np.nan) for m in range(M)])
