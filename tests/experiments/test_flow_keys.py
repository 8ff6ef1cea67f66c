"""The model keys beyond the single head (heads, mask, normalization, layer_norm, noise, ensemble,
redraw) through the configs, the run's inputs and the concentration experiment."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.experiments import ConfigError, load_config, run_experiment
from attnflow.experiments.inputs import model_inputs
from attnflow.experiments.parts import fingerprint
from attnflow.flow import Dynamics


def test_the_default_keys_are_the_papers_flow():
    model = model_inputs(load_config("concentration-tiny"))
    assert model.flow.single is not None and model.theorem() == (True, "")
    assert model.at(10.0).__class__.__name__ == "Attention"
    assert "model" not in model.description.split(";")[-1]


def test_random_heads_are_independent_draws_and_fixed_weights_give_copies():
    model = model_inputs(load_config("phase-diagram-tiny", ["weights=random", "heads=3", "ensemble=goe"]))
    heads = model.flow.heads
    assert len(heads) == 3 and not np.allclose(heads[0].K, heads[1].K)
    assert np.array_equal(heads[0].K, model.attention.K)
    copies = model_inputs(load_config("concentration-tiny", ["heads=2", "mask=causal"]))
    assert copies.flow.H == 2 and copies.flow.identical_heads
    assert (
        copies.theorem() == (False, copies.flow.theorem_applies()[1])
        and "mask = causal" in copies.theorem()[1]
    )
    assert isinstance(copies.at(10.0), Dynamics) and copies.at(10.0).beta == 10.0


def test_redraw_gives_fresh_draws_every_period():
    model = model_inputs(load_config("phase-diagram-tiny", ["weights=random", "redraw=0.5"]))
    flow = model.flow
    assert flow.redraw is not None and flow.redraw.period == 0.5
    assert not np.allclose(flow.segment(1).heads[0].K, flow.heads[0].K)
    assert np.array_equal(
        flow.segment(1).heads[0].K,
        model_inputs(load_config("phase-diagram-tiny", ["weights=random", "redraw=0.5"]))
        .flow.segment(1)
        .heads[0]
        .K,
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["noise=0.1", "integrator=adaptive"], "noise = 0.1 needs a fixed-step integrator"),
        (["ensemble=goe"], "ensemble = goe is the law of weights = random"),
        (["redraw=1.0"], "redraw = 1 draws fresh weights; weights = worked-example-2d are not drawn"),
        (["weights=random", "heads=2"], "concentration measures against one head's A"),
        (["weights=random", "redraw=2.0"], "concentration measures against one head's A"),
        (
            ["weights=worked-example-2d", "init=graded", 'N="auto"', "mask=causal"],
            "init = graded grades rho_0",
        ),
        (["layer_norm=mid"], "layer_norm"),
        (["noise_kind=common"], "noise_kind = common needs noise > 0"),
        (["normalization=localmax"], "localmax needs sensitivity > 0"),
        (["sensitivity=0.1"], "only localmax takes one"),
        (["normalization=hardmax", "kernel=truncated"], "kernel = truncated computes one softmax head"),
        (["noise=0.1", "noise_kind=shared"], "noise_kind"),
    ],
)
def test_config_refusals_name_the_keys(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("concentration-tiny", overrides)


def test_hardmax_and_localmax_reach_the_model():
    flow = model_inputs(load_config("phase-diagram-tiny", ["normalization=localmax", "sensitivity=0.2"])).flow
    assert flow.normalization == "localmax" and flow.sensitivity == 0.2


def test_common_noise_reaches_the_model():
    flow = model_inputs(load_config("phase-diagram-tiny", ["noise=0.1", "noise_kind=common"])).flow
    assert flow.noise == 0.1 and flow.noise_kind == "common"


def test_new_keys_at_their_default_leave_the_fingerprint_as_it_was():
    """Run folders made before the keys existed are reused: at its default a new key is not hashed."""
    base = load_config("concentration-tiny")
    assert fingerprint(base) == fingerprint(
        load_config("concentration-tiny", ["mask=none", "noise=0.0", "noise_kind=independent"])
    )
    assert fingerprint(base) != fingerprint(load_config("concentration-tiny", ["mask=causal"]))
    assert fingerprint(base) != fingerprint(load_config("concentration-tiny", ["heads=2"]))


def test_concentration_of_a_causal_model_says_the_theorem_does_not_apply():
    config = load_config(
        "concentration-tiny", ["heads=2", "mask=causal", "N=24", "t_max=2.5", "dt_save=0.5", "betas=[10.0]"]
    )
    ds = run_experiment(config)
    import json

    claims = json.loads(ds.attrs["claims"])
    theorem = json.loads(ds.attrs["theorem"])
    assert theorem["applies"] is False and "mask = causal" in theorem["reason"]
    theorem_rows = [c for c in claims if c["kind"] == "theorem"]
    assert theorem_rows
    assert all(c["verdict"] == "not applicable" and "mask = causal" in c["note"] for c in theorem_rows)
    assert all(c["verdict"] != "not applicable" for c in claims if c["kind"] != "theorem")
    assert "x_zero" not in ds.variables and "w2_zero" not in ds.variables
    assert json.loads(ds.attrs["zero"])["kind"] == "not applicable"
    assert "the theorem does not apply" in ds["w2"].attrs["long_name"]
    assert np.all(np.isfinite(ds.w2.values))


def test_noisy_pre_ln_runs_report_the_spread_over_seeds():
    config = load_config(
        "concentration-tiny",
        [
            "layer_norm=pre",
            "noise=0.1",
            "N=24",
            "t_max=2.5",
            "dt_save=0.5",
            "betas=[10.0]",
            "seeds=[0, 1, 2]",
            "init=uniform",  # seeds draw random clouds
        ],
    )
    ds = run_experiment(config)
    assert "w2_seed_std" in ds.variables and float(ds.w2_seed_std.max()) > 0
    solver = __import__("json").loads(ds.attrs["solver"])[0]
    assert solver["noise"] == 0.1 and solver["layer_norm"] == "pre" and solver["seed"] == 0
    again = run_experiment(config)
    np.testing.assert_array_equal(again.w2.values, ds.w2.values)  # seeded: the same numbers


@pytest.mark.filterwarnings("ignore:t_max = :attnflow.experiments.config.ConfigWarning")  # short on purpose
def test_concentration_stores_the_interaction_energy():
    """log E_beta per beta and time, from every token of the measure: with n_keep = N the stored
    tokens (uniform quadrature weights) give it back; NaN for distinct heads."""
    from attnflow.science.energy import interaction_energy

    config = load_config(
        "concentration-tiny", ["N=24", "n_keep=24", "t_max=2.0", "dt_save=0.5", "betas=[10.0]"]
    )
    ds = run_experiment(config)
    model = model_inputs(config).at(10.0)
    x = ds.x.values[0].astype(np.float64)
    expected = interaction_energy(x / np.linalg.norm(x, axis=-1, keepdims=True), model, log=True)
    np.testing.assert_allclose(ds.log_energy.values[0], expected, rtol=1e-6)  # x is stored in float32
    assert "interaction energy" in ds.log_energy.attrs["long_name"]


def test_concentration_of_identity_weights_fills_the_predicted_clusters_row():
    """Q = K = V = I on the circle at beta = 2: k* = 2; both seeds' metastable states have 2
    clusters. The theorem's weights leave the row without betas, saying why."""
    import json

    config = load_config(
        "concentration-tiny",
        [
            "weights=identity",
            "d=2",
            "init=uniform",
            "betas=[2.0]",
            "t_max=20.0",
            "dt_save=0.5",
            "seeds=[0, 1]",
        ],
    )
    ds = run_experiment(config)
    row = {r["key"]: r for r in json.loads(ds.attrs["claims"])}["predicted_clusters"]
    assert row["betas"] == [2.0] and row["per_beta"][0]["predicted"] == 2 and row["measured"] == 1.0
    assert ds.clusters.dims == ("beta", "time") and float(ds.clusters.values[0, -1]) == 2.0


def test_times_are_located_only_where_a_saved_state_restarts_the_run():
    """The located times integrate again from a saved direction: the paper's flow and nGPT can, a
    noisy run, redrawn weights and pre-LN tokens (whose norms are not kept) cannot."""
    from attnflow.attention import worked_example
    from attnflow.experiments.common import restartable
    from attnflow.flow import Dynamics

    att = worked_example(10.0)
    assert restartable(att) and restartable(Dynamics(att, layer_norm="ngpt"))
    assert not restartable(Dynamics(att, noise=0.1))
    assert not restartable(Dynamics(att, layer_norm="pre"))
    assert not restartable(Dynamics(att, layer_norm="peri"))
