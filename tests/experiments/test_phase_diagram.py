"""The phase-diagram experiment: a grid of beta and of one model key, many clouds per point."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnflow.experiments import ConfigError, load_config, plot_run, run_experiment
from attnflow.experiments.phase_diagram import phase_inputs
from attnflow.flow import Dynamics
from attnflow.science.clusters import clustered_pairs, count_clusters, nearest_atoms_w2
from attnflow.science.energy import interaction_energy


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("pd") / "run"
    ds = run_experiment(load_config("phase-diagram-tiny"), out=out)
    return out, ds


def test_the_tiny_preset_runs_with_its_figures(tiny, tmp_path):
    out, ds = tiny
    assert dict(ds.sizes) == {"variant": 2, "beta": 2, "time": 9, "cloud": 8, "k": 2}
    assert list(ds.variant.values) == ["layer_norm = post", "layer_norm = pre"]
    paths = plot_run(ds, tmp_path)
    assert sorted(p.name for p in paths) == ["atoms.png", "clusters.png", "energy.png", "pairs.png"]
    summary = json.loads((out / "summary.json").read_text())
    row = summary["at_t_max"]["layer_norm = post, beta = 4"]
    assert row["clusters"] == pytest.approx(
        float(ds.clusters.sel(variant="layer_norm = post", beta=4.0)[-1].mean())
    )
    theorem = json.loads(ds.attrs["theorem"])
    assert theorem["layer_norm = pre"]["applies"] is False


def test_a_point_is_the_clouds_simulated_together_and_measured(tiny):
    """Recompute one point by hand: simulate the clouds with the panel's model, measure each."""
    from attnflow.dynamics.integrate import simulate

    _, ds = tiny
    config = load_config("phase-diagram-tiny")
    inputs = phase_inputs(config)
    panel = inputs.panels[1]
    model = panel.model.at(4.0)
    assert isinstance(model, Dynamics) and model.layer_norm == "pre"
    tr = simulate(inputs.X0, model, inputs.times, **inputs.solver.kwargs())
    u = tr.x / np.linalg.norm(tr.x, axis=-1, keepdims=True)
    point = ds.sel(variant="layer_norm = pre", beta=4.0)
    np.testing.assert_array_equal(point.clusters.values, count_clusters(u, inputs.eps))
    np.testing.assert_allclose(point.clustered_pairs.values, clustered_pairs(u, inputs.eps), rtol=1e-12)
    np.testing.assert_allclose(point.w2_atoms.sel(k=2).values, nearest_atoms_w2(u, 2), rtol=1e-12)
    np.testing.assert_allclose(point.radius.values, np.linalg.norm(tr.x, axis=-1).mean(-1), rtol=1e-12)
    assert float(point.radius.values[-1].min()) > 1.5  # pre-LN tokens grow in R^d
    np.testing.assert_allclose(point.log_energy.values, interaction_energy(u, model, log=True), rtol=1e-12)


def test_a_rerun_reuses_every_point(tiny):
    out, ds = tiny
    again = run_experiment(load_config("phase-diagram-tiny"), out=out)
    assert json.loads(again.attrs["provenance"])["wall_time_s"]["n_reused_parts"] == 4
    np.testing.assert_array_equal(again.clusters.values, ds.clusters.values)


def test_identity_weights_collapse_to_one_cluster():
    """Q = K = V = I, post-LN, small beta: every cloud ends in one cluster (GLPR's single-cluster
    regime), its W2 to the nearest atom near 0."""
    config = load_config(
        "phase-diagram-tiny",
        ["vary=none", "values=[]", "betas=[1.0]", "t_max=30.0", "dt_save=5.0", "clouds=6"],
    )
    ds = run_experiment(config)
    assert np.all(ds.clusters.values[0, 0, -1] == 1)
    assert float(ds.w2_atoms.sel(k=1).values[0, 0, -1].max()) < 1e-3
    assert np.all(ds.clustered_pairs.values[0, 0, -1] == 1.0)
    # the softmax flow with Q = K = V = I climbs its interaction energy (a gradient flow of E_beta)
    assert np.min(np.diff(ds.log_energy.values[0, 0], axis=0)) > -1e-9


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["vary=noise", "values=[-1.0]"], r"values\[0\] \(noise = -1\.0\)"),
        (["vary=noise", "values=[]"], "give both"),
        (["vary=mask", 'values=["none", "none"]'], "values must be distinct"),
        (["vary=noise", "values=[0.1]", "integrator=adaptive"], "needs a fixed-step integrator"),
        (["vary=bogus", "values=[1]"], "vary"),
    ],
)
def test_bad_panels_are_refused_naming_the_value(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("phase-diagram-tiny", overrides)


def test_hardmax_localmax_and_common_noise_panels():
    """Q = K = V = I: under hardmax every token is its own maximiser (<x_i, x_i> = 1 > <x_i, x_j>) and
    nothing moves; localmax with a sensitivity past every gap (2) averages all tokens and collapses
    each cloud like the softmax at beta = 0; common noise turns each cloud without changing a count."""
    base = ["betas=[1.0]", "t_max=10.0", "dt_save=5.0", "clouds=3", "layer_norm=post"]
    ds = run_experiment(
        load_config("phase-diagram-tiny", [*base, "vary=normalization", 'values=["hardmax"]'])
    )
    assert np.all(ds.clusters.values[0, 0] == 12)
    localmax = ["vary=none", "values=[]", "normalization=localmax", "sensitivity=3.0"]
    ds = run_experiment(load_config("phase-diagram-tiny", [*base, *localmax]))
    assert np.all(ds.clusters.values[0, 0, -1] == 1)
    quiet, noisy = (
        run_experiment(load_config("phase-diagram-tiny", [*base, "vary=none", "values=[]", *extra]))
        for extra in ([], ["noise=0.5", "noise_kind=common"])
    )
    np.testing.assert_array_equal(quiet.clusters.values, noisy.clusters.values)


def test_the_circle_diagram_sets_the_prediction_beside_the_count(tmp_path):
    from attnflow.experiments.phase_diagram import summarize
    from attnflow.science.linearisation import predict_clusters

    config = load_config(
        "phase-diagram-tiny",
        [
            "vary=none",
            "values=[]",
            "d=2",
            "N=64",
            "clouds=2",
            "betas=[2.0, 8.0]",
            "t_max=20.0",
            "dt_save=1.0",
        ],
    )
    ds = run_experiment(config)
    model = phase_inputs(config).panels[0].model
    for beta, k in ((2.0, 2), (8.0, 4)):
        assert predict_clusters(model.at(beta)).degree == k
        np.testing.assert_array_equal(ds.predicted_clusters.sel(beta=beta).values, [[k, k]])
    row = summarize(ds)["at_t_max"]["as configured, beta = 8"]
    seen = ds.metastable_clusters.sel(beta=8.0).values
    assert row["predicted_clusters"] == 4 and row["prediction_agrees"] == float(np.mean(seen == 4))
    assert "predicted.png" in [p.name for p in plot_run(ds, tmp_path)]
