"""The metastability experiment: a map of departures in (cloud kind, beta, N), its branches and its
refusals (the science of the fits is in tests/science/test_metastability.py)."""

import json
import math

import numpy as np
import pytest

from attnflow.experiments import load_config, run_experiment

TINY = ["betas=[30.0, 100.0]", "Ns=[32, 64, 128]", "inits=['quadrature']"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("metastability")
    return out, run_experiment(load_config("metastability-tiny", TINY), out)


def test_departures_grow_with_n_on_the_finite_n_branch(tiny):
    """At beta = 100 the mean-field departure (0.666 beta ~ 60) is far: N tokens leave after about
    log N / lambda, so t_depart grows with N and the fitted a is positive, of order 1/lambda."""
    _, ds = tiny
    t = ds.t_depart.sel(init="quadrature", beta=100.0).values
    assert np.all(np.isfinite(t)) and np.all(np.diff(t) > 0)
    fit = json.loads(ds.attrs["fits"])["kinds"]["quadrature"]["per_beta"]["100"]["fit"]
    lam = json.loads(ds.attrs["fits"])["weights"]["lambda"]
    assert 0.3 < fit["a"] * lam < 3.0
    # every departure lies before the point's horizon and after t = 0
    assert np.all((t > 0) & (t < ds.horizon.sel(init="quadrature", beta=100.0).values))


def test_a_rerun_reuses_every_point(tiny):
    out, ds = tiny
    parts = sorted(p.name for p in (out / "parts").iterdir())
    again = run_experiment(load_config("metastability-tiny", TINY), out)
    assert sorted(p.name for p in (out / "parts").iterdir()) == parts
    np.testing.assert_array_equal(again.t_depart.values, ds.t_depart.values)


def test_summary_states_the_law_as_observed(tiny):
    out, _ = tiny
    text = (out / "summary.md").read_text()
    assert "observed laws" in text and "log N" in text


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["dt_save=1e-12"], "saved times, more than"),
        (["Ns=[1000000000]"], "saved trajectory would take"),
        (["Ns=[1]"], "at least 2"),
        (["weights=identity", "d=2"], "top eigenspace has dimension 2"),
    ],
)
def test_refused_when_the_config_is_made(overrides, match):
    with pytest.raises(ValueError, match=match):
        load_config("metastability-tiny", overrides)


def test_horizon_covers_both_predictions():
    from attnflow.experiments.metastability import metastability_inputs

    inputs = metastability_inputs(load_config("metastability-tiny", TINY))
    for beta in inputs.betas:
        for N in inputs.Ns:
            p = inputs.predictions(beta, N)
            assert inputs.horizon(beta, N) >= min(inputs.t_cap, max(p.values()))
            assert math.isclose(p["finite_N"], math.log(N) / inputs.weights.lam)


def test_one_beta_draws_every_figure(tmp_path):
    """With one beta there is no crossover fit (its numbers are None): the figures still draw, and
    the map's panels keep their titles apart (two lines each)."""
    from attnflow.experiments import plot_run

    config = load_config("metastability-tiny", ["betas=[30.0]", "Ns=[32, 64]", "inits=['quadrature']"])
    ds = run_experiment(config, tmp_path / "run")
    paths = plot_run(ds, tmp_path / "figures")
    assert sorted(p.name for p in paths) == ["branches.png", "crossover.png", "map.png"]
