"""The Dynamics object (attnflow.flow): what it accepts, refuses, and says of itself."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow as af
from attnflow.flow import Dynamics, Redraw, padded_head


@pytest.fixture(scope="module")
def att():
    return af.worked_example(20.0)


def test_a_bare_head_is_the_papers_flow(att):
    dyn = Dynamics(att)
    assert dyn.single is att and dyn.theorem_applies() == (True, "")
    assert dyn.H == 1 and dyn.d == 3 and dyn.beta == 20.0 and dyn.on_sphere


def test_a_dynamics_of_the_papers_flow_simulates_bit_for_bit_as_its_attention(att):
    X0 = af.sample_uniform(50, 3, seed=1)
    for method in ("rk4", "adaptive"):
        a = af.simulate(X0, Dynamics(att), [0.0, 0.5, 1.0], method=method)
        b = af.simulate(X0, att, [0.0, 0.5, 1.0], method=method)
        assert np.array_equal(a.x, b.x) and a.info == {**b.info, "wall_time_s": a.info["wall_time_s"]}
    two = af.simulate(X0, Dynamics((att, att)), [0.0, 1.0], method="rk4")  # identical averaged heads
    assert np.array_equal(two.x, af.simulate(X0, att, [0.0, 1.0], method="rk4").x)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"mask": "causal"}, "mask = causal"),
        ({"normalization": "usa"}, "normalization = usa"),
        ({"layer_norm": "pre"}, "layer_norm = pre"),
        ({"noise": 0.1}, "noise = 0.1"),
        ({"redraw": Redraw(1.0, lambda k: [af.random_attention(3, k)])}, "weights redrawn every 1"),
    ],
)
def test_the_theorem_does_not_apply_beyond_the_single_head_and_says_why(att, kw, words):
    dyn = Dynamics(att, **kw)
    applies, why = dyn.theorem_applies()
    assert not applies and words in why and dyn.single is None


def test_distinct_heads_and_output_blocks_depart(att):
    other = af.random_attention(3, 1, beta=20.0)
    assert "2 heads" in Dynamics((att, other)).theorem_applies()[1]
    assert "output blocks" in Dynamics(att, W_O=[np.eye(3)]).theorem_applies()[1]


def test_values_are_averaged_or_mixed_by_the_blocks(att):
    other = af.random_attention(3, 1, beta=20.0)
    dyn = Dynamics((att, other))
    np.testing.assert_array_equal(dyn.values[1], other.V / 2)
    head = padded_head(np.ones((1, 3)), np.ones((1, 3)), [[1.0, 2.0, 3.0]], beta=2.0)
    W = np.array([[1.0], [0.0], [-1.0]])
    blocked = Dynamics(head, W_O=[W])
    np.testing.assert_array_equal(blocked.values[0], W @ np.array([[1.0, 2.0, 3.0]]))
    assert head.V.shape == (3, 3) and np.all(head.V[1:] == 0) and head.beta == 2.0


def test_with_beta_and_same_but_beta(att):
    dyn = Dynamics((att, af.random_attention(3, 2, beta=20.0)), mask="causal")
    hot = dyn.with_beta(3.0)
    assert hot.beta == 3.0 and all(h.beta == 3.0 for h in hot.heads) and hot.mask == "causal"
    assert dyn.same_but_beta(hot) is None
    assert dyn.same_but_beta(Dynamics(dyn.heads)) == "mask"


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"mask": "future"}, "mask must be one of 'none', 'causal'"),
        ({"normalization": "sparsemax"}, "normalization must be one of"),
        ({"layer_norm": "mid"}, "layer_norm must be one of 'post', 'pre', 'peri', 'ngpt'"),
        ({"noise": -0.1}, "noise must be a finite number >= 0"),
        ({"alpha": 0.0}, "alpha must be a finite number > 0"),
        ({"W_O": [np.eye(3), np.eye(3)]}, "W_O must be None or 1 blocks"),
        ({"W_O": [np.ones((3, 4))]}, r"W_O\[0\] must be a finite \(3, d_h\) block"),
        ({"W_O": [np.ones((3, 1))]}, r"heads\[0\].V has nonzero rows beyond the d_h = 1 columns"),
    ],
)
def test_bad_arguments_are_named(att, kw, match):
    with pytest.raises(ValueError, match=match):
        Dynamics(att, **kw)


def test_heads_must_share_d_and_beta(att):
    with pytest.raises(ValueError, match="one beta"):
        Dynamics((att, att.with_beta(1.0)))
    with pytest.raises(ValueError, match="heads\\[1\\] has d = 2"):
        Dynamics((att, af.worked_example(20.0, d=2)))
    with pytest.raises(TypeError, match=r"heads must be an attnflow\.Attention"):
        Dynamics([])


def test_redraw_segments_draw_fresh_heads_at_the_models_beta(att):
    r = Redraw(0.5, lambda k: [af.random_attention(3, k)])
    dyn = Dynamics(af.random_attention(3, 0, beta=7.0), redraw=r)
    assert dyn.segment(0) is dyn
    seg = dyn.segment(2)
    assert seg.beta == 7.0 and np.array_equal(seg.heads[0].Q, af.random_attention(3, 2).Q)
    with pytest.raises(ValueError, match="redraw period must be a finite number > 0"):
        Redraw(0.0, lambda k: [])


def test_public_names():
    assert af.Dynamics is Dynamics and af.padded_head is padded_head
