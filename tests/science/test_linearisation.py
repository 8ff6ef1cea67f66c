"""The clusters predicted by the linearisation about the uniform measure (docs/math.md, "Clusters
predicted by the linearisation"), tested against an independent quadrature of the Bessel functions,
the growth of one mode in a simulation, and the metastable states of N-token runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.polynomial import legendre

import attnflow as af
from attnflow.flow import Dynamics
from attnflow.science.clusters import cluster_labels
from attnflow.science.linearisation import growth_rates

EPS_CLUSTER = 0.05  # rad: tokens this close are one cluster


def identity(d: int, beta: float) -> af.Attention:
    return af.Attention(np.eye(d), np.eye(d), np.eye(d), beta)


def scaled_bessel(k: np.ndarray, beta: float) -> np.ndarray:
    """I_k(beta) e^{-beta} = (1 / 2 pi) int_0^{2 pi} e^{beta (cos t - 1)} cos(k t) dt by the
    trapezoidal rule (exact to rounding for this periodic entire integrand with 8192 nodes)."""
    t = 2 * np.pi * np.arange(8192) / 8192
    return np.mean(np.exp(beta * (np.cos(t) - 1))[None, :] * np.cos(np.outer(k, t)), axis=1)


def angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip(np.sum(a * b, axis=-1), -1, 1))


@pytest.mark.parametrize("beta", np.geomspace(1, 1000, 31))
def test_fastest_mode_on_the_circle_is_argmax_k2_Ik(beta):
    pred = af.predict_clusters(identity(2, beta))
    k = pred.modes
    reference = k**2 * scaled_bessel(k, beta)
    assert pred.degree == k[np.argmax(reference)]
    assert pred.degree < k[-1]  # the default modes reach past the fastest
    assert pred.count == pred.degree and pred.positions is None
    assert np.allclose(pred.rates, reference / (beta * scaled_bessel(np.array([0]), beta)), rtol=1e-9)


def lattice(N: int, eps: float, amplitudes: dict[int, tuple[float, float]]) -> np.ndarray:
    """N equispaced tokens on S^1 displaced by eps sum_k (a_k / k) cos(k theta + phi_k): the density's
    mode k then has amplitude eps a_k and phase phi_k; every other mode below N is zero."""
    th = 2 * np.pi * np.arange(N) / N
    th = th + eps * sum(a / k * np.cos(k * th + phi) for k, (a, phi) in amplitudes.items())
    return np.stack([np.cos(th), np.sin(th)], axis=-1)


def mode(X: np.ndarray, k: int, w=None) -> complex:
    w = np.full(X.shape[-2], 1 / X.shape[-2]) if w is None else w
    return complex(np.sum(w * np.exp(-1j * k * np.arctan2(X[..., 1], X[..., 0])), axis=-1))


@pytest.mark.parametrize(
    ("model", "k"),
    [
        (identity(2, 5.0), 3),
        (Dynamics(identity(2, 5.0), normalization="usa", usa_time="rescaled"), 2),
        (af.Attention(2 * np.eye(2), np.eye(2), 0.5 * np.eye(2), 3.0), 4),  # b = 2, v = 0.5
        (Dynamics(identity(2, 2.0), normalization="usa"), 2),  # the model's time: e^beta faster
    ],
)
def test_one_mode_grows_at_its_predicted_rate(model, k):
    X0 = lattice(512, 1e-7, {k: (1.0, 0.3)})
    t = 2.0
    tr = af.simulate(X0, model, [0.0, t], method="adaptive", options={"rtol": 1e-11, "atol": 1e-13})
    measured = math.log(abs(mode(tr.x[-1], k)) / abs(mode(X0, k))) / t
    assert measured == pytest.approx(float(growth_rates(model, [k])[0]), rel=1e-4)


def clusters(X: np.ndarray, w=None) -> np.ndarray:
    """The centres of the clusters of X (count, d), unit vectors."""
    w = np.full(len(X), 1 / len(X)) if w is None else w
    labels = cluster_labels(X, EPS_CLUSTER)
    C = np.stack([np.sum(w[labels == c, None] * X[labels == c], axis=0) for c in np.unique(labels)])
    return C / np.linalg.norm(C, axis=1, keepdims=True)


def matched(P: np.ndarray, C: np.ndarray) -> float:
    """The largest angle from a predicted position to its nearest cluster centre."""
    return float(max(angle(p, C).min() for p in P))


def test_n_tokens_on_the_circle_form_the_predicted_clusters():
    """400 tokens, every mode k = 1..12 seeded with the same amplitude 1e-6 and random phases: at
    beta = 2, 5, 8 the fastest mode (k* = 2, 3, 4) wins, and the metastable state at t = 30 has k*
    clusters at the maxima of its initial phase."""
    rng = np.random.default_rng(0)
    X0 = lattice(400, 1e-6, {k: (1.0, rng.uniform(0, 2 * np.pi)) for k in range(1, 13)})
    betas = [2.0, 5.0, 8.0]
    tr = af.simulate(X0, [identity(2, b) for b in betas], [0.0, 30.0], method="adaptive",
                     options={"rtol": 1e-10, "atol": 1e-12})  # fmt: skip
    for m, beta in enumerate(betas):
        pred = af.predict_clusters(identity(2, beta), X0)
        C = clusters(tr.x[-1, m])
        assert pred.count == len(C) == [2, 3, 4][m]
        assert matched(pred.positions, C) < 0.1


def product_quadrature(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre in z times 2n equispaced longitudes on S^2: (2 n^2, 3) nodes and weights that
    integrate every spherical harmonic of degree < 2n exactly (so its low modes are zero)."""
    z, wz = legendre.leggauss(n)
    phi = np.pi * np.arange(2 * n) / n
    Z, PHI = np.meshgrid(z, phi, indexing="ij")
    s = np.sqrt(1 - Z**2)
    X = np.stack([s * np.cos(PHI), s * np.sin(PHI), Z], axis=-1).reshape(-1, 3)
    return X, np.repeat(wz / (4 * n), 2 * n)


def perturbed_sphere(X: np.ndarray, eps: float, degrees: range, rng) -> np.ndarray:
    """X moved by eps grad g, g = sum_l g_l / (l (l + 1)), g_l = sum_r c_r P_l(<x, a_r>) (three random
    axes a_r): the density's degree-l component is then eps g_l, of comparable size for every l."""
    G = np.zeros_like(X)
    for deg in degrees:
        dP = legendre.legder(np.eye(deg + 1)[deg])
        for _ in range(3):
            a = rng.normal(size=3)
            a /= np.linalg.norm(a)
            t = X @ a
            c = rng.normal() * math.sqrt(2 * deg + 1) / (deg * (deg + 1))
            G += c * legendre.legval(t, dP)[:, None] * (a - t[:, None] * X)
    Y = X + eps * G
    return Y / np.linalg.norm(Y, axis=1, keepdims=True)


def test_a_measure_on_s2_forms_the_predicted_clusters():
    """d = 3, beta = 3: the fastest degree is l* = 2 (24 % ahead of l = 3). A 512-node quadrature
    measure with every degree 1..6 seeded at 1e-6 forms 2 clusters by t = 40, at the two maxima of
    its initial degree-2 component (+-its top axis)."""
    X, w = product_quadrature(16)
    X0 = perturbed_sphere(X, 1e-6, range(1, 7), np.random.default_rng(1))
    att = identity(3, 3.0)
    pred = af.predict_clusters(att, X0, weights=w)
    tr = af.simulate(
        X0, att, [0.0, 40.0], method="adaptive", weights=w, options={"rtol": 1e-10, "atol": 1e-12}
    )
    C = clusters(tr.x[-1], w)
    assert pred.degree == 2 and pred.count == len(C) == 2
    assert matched(pred.positions, C) < 0.1


@pytest.mark.parametrize(
    "model", [identity(3, 4.0), Dynamics(identity(3, 4.0), normalization="usa", usa_time="rescaled")]
)
def test_one_degree_on_s2_grows_at_its_predicted_rate(model):
    X, w = product_quadrature(12)
    a = np.array([0.6, 0.0, 0.8])
    t0 = X @ a
    X0 = X + 1e-7 * (1.5 * t0)[:, None] * (a - t0[:, None] * X)  # eps grad of P_2(<x, a>) / 6
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    t = 2.0
    tr = af.simulate(
        X0, model, [0.0, t], method="adaptive", weights=w, options={"rtol": 1e-11, "atol": 1e-13}
    )
    amp = [float(np.sum(w * legendre.legval(Y @ a, [0, 0, 1]))) for Y in (X0, tr.x[-1])]
    assert math.log(amp[1] / amp[0]) / t == pytest.approx(float(growth_rates(model, [2])[0]), rel=1e-4)


@pytest.mark.parametrize(
    ("model", "X0", "match"),
    [
        (af.Attention(np.diag([1.0, 2.0]), np.eye(2), np.eye(2), 2.0), None, "B = c I"),
        (af.Attention(np.eye(2), np.eye(2), -np.eye(2), 2.0), None, "V = c I"),
        (Dynamics(identity(2, 2.0), mask="causal"), None, "mask = causal"),
        (identity(2, math.inf), None, "finite beta"),
        (identity(4, 2.0), af.sample_uniform(10, 4, seed=0), "d = 2 or 3"),
    ],
)
def test_models_outside_the_linearisation_are_refused(model, X0, match):
    with pytest.raises(ValueError, match=match):
        af.predict_clusters(model, X0)
