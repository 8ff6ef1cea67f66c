"""Soft-capped scores (Gemma-2's attention logit soft-capping) as a Dynamics option: the field
against a dense NumPy reference, the kernels that cannot cap refused, and a capped head of a
checkpoint simulated through it equal to its attention sublayer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics, padded_head


def dense_capped_field(X, att, cap, causal=False):
    S = att.beta * X @ att.B @ X.T
    S = cap * np.tanh(S / cap)
    if causal:
        S = np.where(np.tril(np.ones(S.shape, bool)), S, -np.inf)
    W = np.exp(S - S.max(axis=1, keepdims=True))
    m = (W / W.sum(axis=1, keepdims=True)) @ X @ att.V.T
    return m - np.sum(m * X, axis=1, keepdims=True) * X


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("cap", [0.5, 3.0])
def test_a_capped_head_matches_the_dense_reference(cap, causal):
    rng = np.random.default_rng(1)
    att = af.Attention(
        rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), rng.standard_normal((4, 4)), 5.0
    )
    X = af.sample_uniform(30, 4, seed=2)
    dyn = Dynamics(att, softcap=cap, mask="causal" if causal else "none")
    ref = dense_capped_field(X, att, cap, causal)
    for kernel in ("auto", "blocked"):
        np.testing.assert_allclose(af.velocity(X, dyn, kernel=kernel), ref, rtol=0, atol=1e-12)
    uncapped = af.velocity(X, Dynamics(att, mask="causal" if causal else "none"), kernel="blocked")
    assert np.max(np.abs(uncapped - ref)) > 1e-3  # the cap changes the field
    assert "soft-capped" in " ".join(dyn.departures()) and not dyn.theorem_applies()[0]
    for kernel in ("fused", "sdpa"):
        with pytest.raises(ValueError, match="cannot cap"):
            af.velocity(X, dyn, kernel=kernel)


def test_a_large_cap_is_no_cap_and_a_bad_cap_is_refused():
    rng = np.random.default_rng(3)
    att = af.Attention(np.eye(3), np.diag([3.0, 1.0, 1 / 3]), rng.standard_normal((3, 3)), 2.0)
    X = af.sample_uniform(12, 3, seed=4)
    np.testing.assert_allclose(
        af.velocity(X, Dynamics(att, softcap=1e9, mask="causal")),
        af.velocity(X, Dynamics(att, mask="causal")),
        rtol=0,
        atol=1e-12,
    )
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="softcap"):
            Dynamics(att, softcap=bad)


def test_a_checkpoints_capped_heads_simulate_through_the_option(tmp_path):
    """A BERT layer's heads with a cap: the Dynamics field (output blocks, pre-LN: the mixed output
    itself) equals the capped attention sublayer on tokens of norm r, divided by r."""
    pytest.importorskip("safetensors")
    from attnflow.pretrained import Layer, attention_output, load_heads
    from checkpoints import write_checkpoint

    write_checkpoint(tmp_path, d=8, heads=2, layers=1, bias=False)
    r, cap = 2.5, 1.5
    (L,) = load_heads(tmp_path, norm=r)
    L = dataclasses.replace(L, heads=tuple(dataclasses.replace(h, softcap=cap) for h in L.heads))
    assert isinstance(L, Layer)
    heads = [padded_head(h.Q, h.K, h.W_V, h.beta) for h in L.heads]
    dyn = Dynamics(heads, W_O=[h.W_O for h in L.heads], layer_norm="pre", softcap=cap)
    X = af.sample_uniform(10, 8, seed=5)
    field = af.velocity(X, dyn)
    np.testing.assert_allclose(field, (attention_output(L, r * X) - L.output_bias) / r, rtol=0, atol=1e-12)
