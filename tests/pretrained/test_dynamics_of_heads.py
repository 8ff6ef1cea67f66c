"""A Dynamics built from the heads of a checkpoint (V_h d_h x d, W_O^h d x d_h blocks): the field of
the blocks is that of the heads' folded V = W_O W_V summed, and a causal pre-norm model builds."""

from __future__ import annotations

import numpy as np

import attnflow as af
from attnflow.flow import Dynamics, padded_head
from attnflow.pretrained import load_heads
from checkpoints import write_checkpoint


def test_a_layers_heads_make_a_dynamics(tmp_path):
    write_checkpoint(tmp_path / "bert", d=8, heads=2, layers=1)
    layer = load_heads(tmp_path / "bert", norm=2.0)[0]
    heads = [padded_head(h.Q, h.K, h.W_V, h.beta) for h in layer.heads]
    blocks = Dynamics(heads, W_O=[h.W_O for h in layer.heads], mask="causal", layer_norm="pre")
    folded = Dynamics(
        [h.attention for h in layer.heads], W_O=[np.eye(8)] * 2, mask="causal", layer_norm="pre"
    )
    X = af.sample_uniform(20, 8, seed=1)
    np.testing.assert_allclose(af.velocity(X, blocks), af.velocity(X, folded), rtol=0, atol=1e-12)
    # the reference: the heads' softmax means of (W_O^h W_V^h) x_j over j <= i, summed
    ref = np.zeros_like(X)
    for h in layer.heads:
        S = h.beta * X @ h.B_at(0) @ X.T
        for i in range(len(X)):
            e = np.exp(S[i, : i + 1] - S[i, : i + 1].max())
            ref[i] += e @ (X[: i + 1] @ (h.W_O @ h.W_V).T) / e.sum()
    np.testing.assert_allclose(af.velocity(X, blocks), ref, rtol=0, atol=1e-12)
    assert blocks.theorem_applies()[0] is False and blocks.H == 2
