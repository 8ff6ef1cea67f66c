import math

import numpy as np
import pytest

import attnflow as af
from attnflow.dynamics.meanfield import MeanFieldSettings, initial_separatrices, simulate_mean_field_circle
from attnflow.dynamics.separatrix import mean_field_quadrature
from attnflow.measures.densities import vmf_density

FAST = MeanFieldSettings(margin=2.0, max_passes=2)


def symmetric_attention(beta):
    """B = I and V = A symmetric: the reflection that swaps +-u_1 and fixes u_2 commutes with B and
    V, so the separatrices of the uniform measure are +-u_2 (3 pi / 4 and 7 pi / 4) at all times."""
    A = np.array([[0.25, 0.75], [0.75, 0.25]])
    return af.Attention(np.eye(2), np.eye(2), A, beta=beta)


def test_separatrices_of_the_symmetric_case_are_fixed():
    tr = simulate_mean_field_circle(symmetric_attention(6.0), np.linspace(0, 4, 9), settings=FAST)
    sep = np.mod(tr.separatrices, 2 * math.pi)
    np.testing.assert_allclose(sep[:, 0], 3 * math.pi / 4, atol=1e-9)
    np.testing.assert_allclose(sep[:, 1], 7 * math.pi / 4, atol=1e-9)
    assert tr.info["converged"] or tr.passes[-1]["moved"] < 1e-7


def test_mass_is_conserved_and_the_initial_guess_is_the_field_zero():
    att = af.worked_example(8.0, d=2)
    z = initial_separatrices(att)
    np.testing.assert_allclose(z, [3 * math.pi / 4, 7 * math.pi / 4], atol=1e-12)  # uniform rho_0
    tr = simulate_mean_field_circle(att, np.linspace(0, 3, 7), settings=FAST)
    for th, lw in tr.states:
        assert np.all(np.isfinite(th)) and np.all(np.isfinite(lw))
        # the mass is kept to the quadrature's accuracy (emission: the midpoint rule's du^2 term)
        assert abs(math.exp(np.logaddexp.reduce(lw)) - 1.0) < 1e-5
    assert np.all(tr.n_nodes > 0) and len(tr.passes) == 2


def reference_moments(att, times, N=512):
    """Trigonometric moments of rho_t from N equispaced tokens (converged at beta = 5, t <= 2: 256,
    512 and 4096 tokens give the same moments to 1e-15)."""
    th = (np.arange(N) + 0.5) * 2 * math.pi / N
    tr = af.simulate(
        np.stack([np.cos(th), np.sin(th)], 1),
        att,
        times,
        method="adaptive",
        options={"rtol": 1e-10, "atol": 1e-12},
    )
    return np.stack([tr.x[..., 0].mean(-1), tr.x[..., 1].mean(-1)], -1)


def test_agrees_with_many_equispaced_tokens_early():
    att = af.worked_example(5.0, d=2)
    times = np.array([0.0, 0.5, 1.0, 2.0])
    tr = simulate_mean_field_circle(att, times, settings=FAST)
    mom = np.array([[np.exp(lw) @ np.cos(th), np.exp(lw) @ np.sin(th)] for th, lw in tr.states])
    np.testing.assert_allclose(mom, reference_moments(att, times), atol=2e-8)


def test_a_tail_of_e_minus_200_is_carried():
    """rho_0 = von Mises-Fisher with kappa = 200 around u_1: its density at the separatrices is
    e^-200 of the peak (underflows nowhere: log-weights), and the measure keeps it (beta = 40:
    only masses below e^-(2 beta ||B|| + 40) = e^-280 could be dropped)."""
    att = af.worked_example(40.0, d=2)
    u1 = np.array([1.0, 1.0]) / math.sqrt(2)
    tr = simulate_mean_field_circle(att, [0.0, 0.5, 1.0], density=vmf_density(u1, 200.0), settings=FAST)
    for _, lw in tr.states:
        assert np.all(np.isfinite(lw))
        assert lw.min() < -200.0
        assert abs(math.exp(np.logaddexp.reduce(lw)) - 1.0) < 1e-5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"att": af.worked_example(10.0, d=3)}, "d = 2"),
        ({"att": af.worked_example(math.inf, d=2)}, "finite"),
        ({"level": -1}, "level"),
        ({"density": lambda X: np.zeros(len(X))}, "density"),
        ({"settings": {"rtol": 1e-6}}, "MeanFieldSettings"),
        ({"settings": MeanFieldSettings(rtol=-1.0)}, "rtol"),
    ],
)
def test_bad_input_is_refused(kwargs, match):
    args = {"att": af.worked_example(10.0, d=2), "times": [0.0, 1.0], **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_mean_field_circle(**args)


@pytest.mark.slow
def test_separatrices_agree_with_the_fates_of_equispaced_tokens():
    """A grading-free fate test: 4096 equispaced tokens at beta = 10 (kernel width 0.18 rad, 120
    spacings) integrated to t = 20 (rtol 1e-6: the same brackets as 1e-8, at 0.4 of its
    time); the initial angles where the final side of u_1 switches bracket
    the mean-field separatrices within one spacing (measured: 2.20740 and 5.34899 against 2.20759 and
    5.34918), and so does the graded search of dynamics.separatrix (2.2075889; with its old
    exit_angle = 0.4 it said 2.20947, 2.7 spacings off: the repelling point drifts that far)."""
    att = af.worked_example(10.0, d=2)
    N = 4096
    th = 2 * math.pi * (np.arange(N) + 0.5) / N
    X0 = np.stack([np.cos(th), np.sin(th)], -1)
    options = {"rtol": 1e-6, "atol": 1e-8}
    final = af.simulate(X0, att, np.array([0.0, 20.0]), method="adaptive", options=options).x[-1]
    side = np.sign(final @ att.spectrum().top.basis[:, 0])
    switches = np.flatnonzero(np.diff(side) != 0)
    fates = np.sort(0.5 * (th[switches] + th[switches + 1]))
    tr = simulate_mean_field_circle(att, np.linspace(0.0, 10.0, 11), settings=FAST)
    found = np.sort(np.mod(tr.separatrices[0], 2 * math.pi))
    assert fates.size == 2
    np.testing.assert_allclose(found, fates, atol=2 * math.pi / N)
    search = mean_field_quadrature(att, 20.0, 0)[2]
    np.testing.assert_allclose(np.sort(np.mod(search.angles, 2 * math.pi)), fates, atol=2 * math.pi / N)


def moments(states):
    return np.array(
        [[np.exp(lw) @ f(th) for f in (np.cos, np.sin, lambda x: np.cos(2 * x))] for th, lw in states]
    )


@pytest.mark.slow  # 16 s: three full mean-field runs (the only test of the fast set over 5 s)
def test_a_scouted_run_is_the_run_of_full_passes():
    """The scouting pass (rtol 1e-5) only centres the final pass's patches: the final states are
    those of passes at full tolerance until they agree, to well within the discretisation's own
    error (the change of a refinement level), at a fraction of the cost."""
    att = af.worked_example(20.0, d=2)
    times = np.linspace(0.0, 6.0, 13)
    full = simulate_mean_field_circle(att, times, settings=MeanFieldSettings(margin=4.0, scout_rtol=None))
    scouted = simulate_mean_field_circle(att, times, settings=MeanFieldSettings(margin=4.0))
    finer = simulate_mean_field_circle(att, times, level=1, settings=MeanFieldSettings(margin=4.0))
    assert len(full.passes) >= 2 and len(scouted.passes) == 2
    attempts = [p["steps"] + p["rejected"] for p in scouted.passes]
    assert attempts[0] < 0.5 * (full.passes[0]["steps"] + full.passes[0]["rejected"])  # the scout is cheap
    moved = np.abs(moments(scouted.states) - moments(full.states)).max()
    level = np.abs(moments(finer.states) - moments(full.states)).max()
    assert moved < 0.1 * level, (moved, level)


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_dense_states_integrated_again_are_the_saved_ones():
    """A state the `dense` callback asks for is integrated again from the snapshot of the step
    before it: the same state as one saved at that time in the pass, to the pass's tolerance."""
    att = af.worked_example(20.0, d=2)
    extra = np.array([1.23, 1.27, 3.051])
    times = np.linspace(0.0, 4.0, 9)
    tr = simulate_mean_field_circle(att, times, settings=FAST, dense=lambda t, states: extra)
    np.testing.assert_array_equal(tr.dense_t, extra)
    assert tr.passes[-1]["restarted"] > 0
    direct = simulate_mean_field_circle(att, np.union1d(times, extra), settings=FAST)
    at = [int(np.flatnonzero(np.isclose(direct.t, t))[0]) for t in extra]
    np.testing.assert_allclose(moments(tr.dense_states), moments([direct.states[i] for i in at]), atol=1e-7)
    np.testing.assert_allclose(
        moments(tr.states),
        moments([direct.states[i] for i in range(len(direct.t)) if direct.t[i] in times]),
        atol=1e-7,
    )
