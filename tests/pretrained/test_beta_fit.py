"""beta fitted from a head's logits with the logit terms the maths has no place for as regressors:
a planted query bias is recovered (and biases beta when left out), two fixed effects (query and
rotary offset) equal an explicit dummy-variable regression, each head gets a standard error."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnflow import pretrained as P  # noqa: E402
from attnflow.pretrained.beta import bias_logits, fit_beta, unit_scores  # noqa: E402
from checkpoints import bert_state  # noqa: E402


def _planted(seed=0, r=5.0, N=14):
    """A BERT-style layer whose query bias is b_Q = 3 Q_h m (m: the tokens' mean direction), so that
    its logit u^T h_j is correlated with the score; tokens of norm exactly r."""
    sd, _ = bert_state(d=16, heads=4, layers=1, seed=seed)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 16)) + 1.5 * rng.standard_normal(16)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    W_Q = sd["encoder.layer.0.attention.self.query.weight"].double().numpy()
    sd["encoder.layer.0.attention.self.query.bias"] = torch.tensor(3.0 * r * W_Q @ X.mean(axis=0))
    return P.open_checkpoint(sd, num_heads=4), X, r


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_planted_query_bias_is_recovered_and_biases_beta_when_left_out(seed):
    ck, X, r = _planted(seed)
    (L,) = P.load_heads(ck, norm=r)
    logits = P.attention_logits(ck, 0, r * X)
    moved = []
    for h in L.heads:
        S, Z = unit_scores(h, X), bias_logits(h, r * X)
        assert list(Z) == ["query bias"]  # no key-bias term without rotary positions
        fit = fit_beta(logits[h.head], S, Z)
        # the model's logits are exactly r^2 / sqrt(d_h) s_ij + u^T h_j + (constant in j)
        assert fit.beta == pytest.approx(r * r / math.sqrt(4), rel=1e-9)
        assert fit.r2 == pytest.approx(1, abs=1e-9)
        coef, se = fit.terms["query bias"]
        assert coef == pytest.approx(1.0, abs=1e-9) and se is not None and se < 1e-6
        plain = fit_beta(logits[h.head], S)
        moved.append(abs(plain.beta / fit.beta - 1))
        assert plain.r2 < 1 - 1e-6 and plain.se is not None and plain.se > 0
    assert max(moved) > 0.05  # the bias, left out, moves beta (its logit is correlated with s)


def test_two_fixed_effects_equal_an_explicit_dummy_regression():
    """Query and offset fixed effects by alternating projections, against lstsq with dummies."""
    rng = np.random.default_rng(3)
    N, beta = 11, 2.5
    S, Z = rng.standard_normal((N, N)), rng.standard_normal((N, N))
    i, j = np.indices((N, N))
    logits = beta * S - 0.7 * Z + rng.standard_normal((N, 1)) * 3 + np.sin(i - j) * 2
    logits += 0.2 * rng.standard_normal((N, N))
    logits = np.where(j <= i, logits, -np.inf)
    fit = fit_beta(logits, S, {"z": Z}, offsets=True)
    rows = [(a, b) for a in range(1, N) for b in range(a + 1)]
    D = np.zeros((len(rows), 2 * N))  # s, z, queries 1..N-1, offsets 1..N-1
    for k, (a, b) in enumerate(rows):
        D[k, 0], D[k, 1], D[k, 1 + a] = S[a, b], Z[a, b], 1.0
        if a - b > 0:
            D[k, N + (a - b)] = 1.0  # offset 0 is the reference level
    y = np.array([logits[a, b] for a, b in rows])
    coef, rss, rank, _ = np.linalg.lstsq(D, y, rcond=None)
    assert rank == D.shape[1]
    sigma2 = rss[0] / (len(rows) - rank)
    cov = sigma2 * np.linalg.inv(D.T @ D)
    assert fit.beta == pytest.approx(coef[0], rel=1e-9)
    assert fit.se == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-6)
    assert fit.terms["z"][0] == pytest.approx(coef[1], rel=1e-9)
    assert fit.terms["z"][1] == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-6)
    assert fit.effects == "query and offset" and abs(fit.beta - beta) < 5 * fit.se


def test_a_regressor_the_fixed_effects_explain_is_dropped():
    rng = np.random.default_rng(4)
    S = rng.standard_normal((6, 6))
    per_query = np.repeat(rng.standard_normal((6, 1)), 6, axis=1)
    fit = fit_beta(2.0 * S + per_query, S, {"constant in j": per_query})
    assert fit.beta == pytest.approx(2.0) and fit.terms == {}
