"""A config turned into inputs once per run (attnflow.experiments.inputs): random weights drawn once,
every registry entry usable from a config where it exists and refused, naming its key, where not."""

from __future__ import annotations

import itertools
import math
import typing

import numpy as np
import pytest

import attnflow.attention.weights as attention_weights  # where WEIGHTS["random"] finds random_attention
import attnflow.dynamics.integrate as integrate
from attnflow.attention import WEIGHTS
from attnflow.experiments import ConfigError, load_config, run_experiment
from attnflow.experiments.inputs import integration, model_inputs
from attnflow.experiments.model import ModelConfig, drawn_attention
from attnflow.measures import DISCRETISATIONS, MEASURES

# (weights overrides, d) for every WEIGHTS family: the fixed-d ones, random in d = 2, 3, 4
WEIGHTS_CASES = [([f"weights={n}"], f.d) for n, f in WEIGHTS.items() if f.d] + [
    ([f"weights={n}", f"d={d}"], d) for n, f in WEIGHTS.items() if not f.d for d in (2, 3, 4)
]


def _exists(init: str, density: str, d: int, overrides: list[str]) -> bool:
    entry = DISCRETISATIONS[init]
    if init == "graded" and d == 3:  # the sources' symmetry: uniform rho_0 and the worked example
        return density == "uniform" and "weights=worked-example" in overrides
    return d in entry.dims and d in MEASURES[density].dims and entry.carries(density)


@pytest.mark.parametrize(
    ("weights", "init", "density"),
    list(itertools.product(WEIGHTS_CASES, DISCRETISATIONS, MEASURES)),
    ids=lambda v: "-".join(v[0]) if isinstance(v, tuple) else str(v),
)
def test_every_model_choice_works_where_it_exists_and_is_refused_elsewhere(weights, init, density):
    overrides, d = weights
    args = [*overrides, f"init={init}", f"density={density}"]
    if init in ("graded", "meanfield"):
        args.append('N="auto"')
    # init = meanfield also needs a one-dimensional top eigenspace of A (identity weights have none)
    if not _exists(init, density, d, overrides) or (init == "meanfield" and "weights=identity" in overrides):
        with pytest.raises(ConfigError) as err:
            load_config("concentration", args)
        message = str(err.value)
        assert "\n" not in message and (f"init = {init}" in message or f"density = {density}" in message)
        return
    model = model_inputs(load_config("concentration", args))
    assert model.d == d and model.attention.beta == 1.0
    assert model.rho0.init.name == init and model.rho0.density.name == density
    assert f"d = {d}" in model.description and f"as {init} tokens" in model.description
    rho0 = model.rho0.without_beta()
    nodes = rho0.nodes(64, seed=1)
    assert nodes.X.shape == (64, d)
    np.testing.assert_allclose(np.linalg.norm(nodes.X, axis=1), 1.0, atol=1e-14)
    if nodes.weights is not None:
        assert np.all(nodes.weights > 0) and nodes.weights.sum() == pytest.approx(1.0, abs=1e-14)
    if density == "vmf":  # centred on A's top eigenvector: more mass near +-u_1 than uniform tokens
        u1 = model.u1
        w = np.full(64, 1 / 64) if nodes.weights is None else nodes.weights
        uniform = math.gamma(d / 2) / (math.sqrt(math.pi) * math.gamma((d + 1) / 2))  # E|<x, u>|
        assert w @ np.abs(nodes.X @ u1) > uniform


def test_graded_nodes_per_beta_from_a_stored_search():
    """init = graded: the same density on nodes graded toward given separatrices, per beta; the
    beta-free stand-in is the quadrature."""
    from attnflow.dynamics.separatrix import SeparatrixSearch

    config = load_config("concentration", ["weights=worked-example-2d", "init=graded", 'N="auto"'])
    model = model_inputs(config)
    assert model.rho0.per_beta and model.rho0.without_beta().init.name == "quadrature"
    angles = np.array([2.23, 2.23 + np.pi])
    search = SeparatrixSearch(angles, np.stack([angles - 1e-6, angles + 1e-6], 1))
    n0 = model.rho0.graded_nodes(model.at(10.0), 4.0, 0, search)
    n1 = model.rho0.graded_nodes(model.at(10.0), 4.0, 1, search)
    assert n1.X.shape[0] > 1.9 * n0.X.shape[0] and n0.X.shape[1] == 2
    assert n0.weights is not None and n0.weights.sum() == pytest.approx(1.0, abs=1e-13)
    with pytest.raises(ValueError, match="init = graded depends on beta"):
        model.rho0.nodes(64, seed=0)


def test_unclaimed_dimensions_are_one_line_config_errors_naming_the_key():
    cases = [
        (["weights=random", "d=1"], "weights = random needs d >= 2"),
        (["weights=worked-example-2d", "d=3"], "d = 3 contradicts"),
        (["weights=worked-example-2d", "init=fibonacci"], "init = fibonacci (lattice) exists for d = 3 only"),
        (["weights=random", "d=4", "init=fibonacci"], "init = fibonacci"),
        (["init=fibonacci", "density=vmf"], "init = fibonacci carries density = uniform only"),
        (
            ["weights=random", "d=4", "init=graded", 'N="auto"'],
            "these weights have d = 4: use init = uniform or quadrature",
        ),
        (["init=graded", 'N="auto"', "density=vmf"], "init = graded in d = 3 carries density = uniform only"),
    ]
    for overrides, words in cases:
        with pytest.raises(ConfigError) as err:
            load_config("concentration", overrides)
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match="init = graded builds rho_0 per beta") as err:
        load_config("terminal", ["weights=worked-example-2d", "init=graded"])
    assert str(err.value).endswith("terminal needs init = uniform or quadrature")


def test_config_choices_and_descriptions_come_from_the_registries():
    fields = ModelConfig.model_fields
    assert typing.get_args(fields["init"].annotation) == tuple(DISCRETISATIONS)
    assert typing.get_args(fields["density"].annotation) == tuple(MEASURES)
    for name in DISCRETISATIONS:
        assert name in fields["init"].description
    for name in MEASURES:
        assert name in fields["density"].description
    for name in WEIGHTS:
        assert name in fields["weights"].description
    from attnflow.experiments.zero_temperature import ZeroTemperatureConfig

    zt = typing.get_args(ZeroTemperatureConfig.model_fields["init"].annotation)
    assert zt == tuple(n for n, e in DISCRETISATIONS.items() if not e.per_beta)
    choices = r"init: .*'uniform', 'fibonacci', 'quadrature', 'graded' or 'meanfield'"
    with pytest.raises(ConfigError, match=choices):
        load_config("concentration", ["init=gaussian"])


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("concentration-tiny", ["betas=[10, 30, 100]"]),
        ("concentration-tiny", ["betas=[10, 30]", 'N="auto"', "N_min=16", "N_max=32", "streak=1"]),
        ("terminal-tiny", []),
        ("layers-tiny", []),
        ("zero-temperature-tiny", ["N=200", "init=uniform"]),
    ],
)
def test_random_weights_are_drawn_once_per_run(name, overrides, monkeypatch):
    """weights = random: one draw, when the config is made (its needs are checked on the weights),
    whatever the betas and levels; every simulate call of the run gets the Attention of those weights
    (at its own beta)."""
    draws, arrays = [], []
    real_draw, real_simulate = attention_weights.random_attention, integrate.simulate

    def draw(*args, **kwargs):
        draws.append(args)
        return real_draw(*args, **kwargs)

    def simulate(X0, att, times, **kwargs):
        arrays.extend((a.Q, a.K, a.V) for a in (att if isinstance(att, list) else [att]))
        return real_simulate(X0, att, times, **kwargs)

    monkeypatch.setattr(attention_weights, "random_attention", draw)
    monkeypatch.setattr(integrate, "simulate", simulate)
    drawn_attention.cache_clear()  # (other tests drew these weights already)
    config = load_config(name, [*overrides, "weights=random", "weights_seed=5"])
    assert len(draws) == 1
    ds = run_experiment(config, None)
    assert len(draws) == 1
    assert ds.attrs.get("model", "weights random (seed 5").startswith("weights random (seed 5")
    if name != "zero-temperature-tiny":
        Q0, K0, V0 = arrays[0]
        for Q, K, V in arrays:
            for M, M0 in ((Q, Q0), (K, K0), (V, V0)):
                np.testing.assert_array_equal(M, M0)


def test_inputs_are_frozen_and_integration_reads_the_solver_keys():
    config = load_config("concentration-tiny", ["integrator=adaptive", "rtol=1e-5", "kernel=sdpa"])
    model, solver = model_inputs(config), integration(config)
    with pytest.raises(AttributeError):
        model.attention = None  # type: ignore[misc]
    assert solver.kwargs() == {
        "method": "adaptive",
        "dt": config.dt,
        "kernel": "sdpa",
        "dtype": "float64",
        "device": "cpu",
        "options": {"rtol": 1e-5, "atol": config.atol},
        "threads": config.threads,
        "seed": config.seed,  # the noise's (a Dynamics with noise > 0)
    }
    assert solver.label == f"adaptive Dormand-Prince 5(4), rtol=1e-05, atol={config.atol:g}"
    fixed = integration(load_config("concentration-tiny"))
    assert fixed.kwargs()["options"] is None and fixed.label == "rk4, dt=0.05"


def test_a_preset_runs_the_weights_a_user_gives_it(tmp_path):
    """concentration-tiny's quadrature nodes exist in every d (quasi-Monte Carlo for d >= 4): a user's
    d = 4 weights run through the preset as they are, each beta with a status."""
    from attnflow.experiments import run_experiment

    K = np.diag([3.0, 1.0, 0.5, 0.3])
    V = np.diag([1.0, 0.2, -0.3, -0.5]) @ np.linalg.inv(K.T).T  # A = V B^T symmetric, B = K
    np.savez(tmp_path / "my_d4.npz", Q=np.eye(4), K=K, V=V)
    config = load_config("concentration-tiny", [f"weights={tmp_path / 'my_d4.npz'}", "betas=[10]", "t_max=3"])
    ds = run_experiment(config)
    assert ds.sizes["dim"] == 4 and "d = 4" in ds.attrs["model"]
    assert set(ds.status.values.tolist()) <= {"converged", "resolved", "under-resolved"}
    assert np.all(np.isfinite(ds.w2.values))
