"""The random-matrix ensembles of weights = random, and the draws of several heads and segments."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnflow as af
from attnflow.attention import ENSEMBLES, WEIGHTS, ensemble_attention


def test_gaussian_and_gpt2_entries_have_their_variance():
    d = 64
    g = ensemble_attention(d, 1, "gaussian")
    for M in (g.Q, g.K, g.V):
        assert np.var(M) == pytest.approx(1 / d, rel=0.05) and abs(np.mean(M)) < 0.01
    gpt = ensemble_attention(d, 1, "gpt2-init")
    assert np.std(gpt.V) == pytest.approx(0.02, rel=0.05)


def test_goe_is_symmetric_with_the_semicircle_edge():
    d = 200
    att = ensemble_attention(d, 2, "goe")
    np.testing.assert_array_equal(att.Q, np.eye(d))
    np.testing.assert_array_equal(att.K, att.K.T)
    np.testing.assert_array_equal(att.V, att.V.T)
    off = att.K[np.triu_indices(d, 1)]
    assert np.var(off) == pytest.approx(1 / d, rel=0.05)
    assert np.var(np.diag(att.K)) == pytest.approx(2 / d, rel=0.25)
    assert np.linalg.eigvalsh(att.K).max() == pytest.approx(2.0, abs=0.15)  # the semicircle's edge 2


def test_conditioned_is_random_attention_and_bad_names_are_refused():
    np.testing.assert_array_equal(ensemble_attention(4, 3, "conditioned").V, af.random_attention(4, 3).V)
    with pytest.raises(ValueError, match="ensemble must be one of 'conditioned', 'gaussian'"):
        ensemble_attention(3, 0, "wishart")


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_draws_are_seeded_and_independent(ensemble):
    family = WEIGHTS["random"]
    keys = {"weights_seed": 5, "symmetric": True, "ensemble": ensemble}
    first = family.head(4, keys)
    np.testing.assert_array_equal(first.K, family.head(4, keys).K)  # the same seed, the same draw
    np.testing.assert_array_equal(first.K, family.build(4, **keys).K)  # draw (0, 0) is the family's
    others = [family.head(4, keys, h, k) for h, k in ((1, 0), (0, 1), (2, 3))]
    for other in others:
        assert not np.allclose(other.K, first.K)
    np.testing.assert_array_equal(others[2].V, family.head(4, keys, 2, 3).V)


def test_fixed_families_give_the_same_head_for_every_draw():
    family = WEIGHTS["worked-example"]
    assert not family.drawn
    np.testing.assert_array_equal(family.head(3, {}, 2, 5).V, af.worked_example(1.0).V)
    identity = WEIGHTS["identity"].head(16, {})
    np.testing.assert_array_equal(identity.A, np.eye(16))
    assert math.isclose(identity.norm_B, 1.0)
