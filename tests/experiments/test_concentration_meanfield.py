"""concentration with init = meanfield: the mean-field flow with its tail kept as the ladder's levels."""

import json

import numpy as np
import pytest

from attnflow.experiments import ConfigError, load_config, run_experiment

BASE = ["init=meanfield", 'N="auto"', "weights=worked-example-2d", "zero_reference=true", "streak=1"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["N=64"], 'use N = "auto"'),
        (["weights=identity", "d=2"], "top eigenspace must be a line"),
        (["weights=worked-example"], "init"),  # d = 3: meanfield exists in d = 2 only
        (["mask=causal"], "init = meanfield"),
    ],
)
def test_refused_when_the_config_is_made(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config("concentration", [*BASE, *overrides])


@pytest.mark.slow
def test_beta_10_converges_on_the_graded_ladders_value(tmp_path):
    """beta = 10 through t = 6 (its t* = 5.56): levels 0 and 1 agree, and min W2 is the converged
    graded-node value 0.287748 +- 0.000006 (docs/experiments.md, "concentration-2d") within 2e-5."""
    config = load_config("concentration", [*BASE, "betas=[10.0]", "t_max=6.0", "dt_save=0.1"])
    ds = run_experiment(config, tmp_path)
    assert ds.status.values.tolist() == ["converged"]
    assert abs(float(ds.min_w2.values[0]) - 0.287748) < 2e-5
    assert ds.sizes["token"] == 0  # a mean-field run stores no tokens
    w2 = ds.w2.values[0]
    assert np.all(np.isfinite(w2)) and w2[0] > w2.min()
    assert np.all(np.isfinite(ds.log_energy.values))  # the tail's log-weights carried into E_beta
    solver = json.loads(ds.attrs["solver"])
    assert all(s["method"] == "meanfield" for s in solver)
    # the cost of each level is read from the results: level 1 has more nodes and takes more steps
    nodes, steps = ds.cost_nodes.values[0], ds.cost_steps.values[0]
    assert nodes[1] > nodes[0] > 0 and steps[1] >= steps[0] > 0
    assert np.all(ds.cost_rejected.values[0] >= 0) and np.all(ds.cost_evals.values[0] >= 7 * steps)
    assert all(w > 0 for w in json.loads(ds.attrs["cost_wall_s"])["10"])


@pytest.mark.slow  # two worker processes start (an interpreter and attnflow's imports each)
def test_workers_compute_the_same_result_and_a_resume_needs_none(tmp_path, monkeypatch):
    """workers = 2 computes levels 0 and 1 of every beta and the probe on two processes first: the
    result is the one of a single process, its parts are this run's (none counted as reused), and a
    run resumed from a folder with every level done starts no worker."""
    over = [*BASE, "betas=[10.0, 14.0]", "t_max=3.0"]
    one = run_experiment(load_config("concentration", over), tmp_path / "one")
    two = run_experiment(load_config("concentration", [*over, "workers=2"]), tmp_path / "two")
    for name in ("w2", "min_w2", "t_star", "cost_nodes", "cost_steps"):
        np.testing.assert_array_equal(two[name].values, one[name].values)
    wall = json.loads(two.attrs["provenance"])["wall_time_s"]
    assert wall["n_reused_parts"] == 0 and wall["total"] == wall["this_run"]
    parts = sorted(p.name for p in (tmp_path / "two" / "parts").iterdir())
    assert "beta=14_level=0_timestep.zarr" in parts and "beta=10_level=1.zarr" in parts
    from attnflow.experiments.concentration import ahead

    monkeypatch.setattr(ahead, "ProcessPoolExecutor", lambda *a, **k: pytest.fail("a worker started"))
    again = run_experiment(load_config("concentration", [*over, "workers=2"]), tmp_path / "two")
    np.testing.assert_array_equal(again.w2.values, one.w2.values)  # resumed: the same folder, no recompute


def test_workers_do_not_change_what_a_part_is():
    from attnflow.experiments.parts import fingerprint

    config = load_config("concentration", [*BASE, "betas=[10.0]"])
    assert fingerprint(config) == fingerprint(config.model_copy(update={"workers": 3}))
