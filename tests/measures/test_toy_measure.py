"""The recipe of a measure (docs/architecture.md, "Add a measure"): a density family is its functions
and one DensityFamily line with its parameters declared (`Parameter`); registered, it is sampled,
carried by the discretisations, named in a run's description, made into a config key and simulated.

The toy family tilts the uniform law toward e_1: f(x) = (1 + tilt x_1) / (1 + tilt), 0 < tilt < 1,
whose first moment is E[x_1] = tilt / d."""

from __future__ import annotations

import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.inputs import InitialMeasure, describe
from attnflow.experiments.model import ModelConfig, density_keys
from attnflow.measures import DISCRETISATIONS, MEASURES, DensityFamily
from attnflow.measures.registry import ANY_D, Parameter, register, registered, unregister


def _density(d, *, tilt):
    return lambda X: (1.0 + tilt * X[:, 0]) / (1.0 + tilt)


def _sample(N, d, seed, *, tilt):
    """N points by rejection from the uniform law (accepted with probability f <= 1)."""
    rng, out = np.random.default_rng(seed), []
    while sum(len(x) for x in out) < N:
        X = af.sample_uniform(N, d, seed=rng)
        out.append(X[rng.uniform(size=N) < _density(d, tilt=tilt)(X)])
    return np.concatenate(out)[:N]


TILTED = DensityFamily(
    "tilted", "tilted", "uniform tilted toward e_1", ("tilt",), ANY_D, "1 + tilt x_1 > 0 for tilt < 1.",
    _sample, _density, lambda d, *, tilt: 1.0 / (1.0 + tilt), lambda d, *, tilt: 2.0 / (1.0 + tilt),
    keys=(Parameter("tilt", 0.5, "tilt toward e_1", gt=0),),
)  # fmt: skip


def test_a_toy_measure_in_one_table_line_runs_end_to_end():
    tilt, d = 0.6, 3
    with registered(TILTED):
        assert MEASURES["tilted"] is TILTED
        key = density_keys()["tilt"]
        assert (
            key[0] is float
            and key[1].default == 0.5
            and key[1].description == "tilt toward e_1 of density = tilted"
        )
        density = MEASURES["tilted"].bind(d, tilt=tilt)
        iid = InitialMeasure(density, DISCRETISATIONS["uniform"]).nodes(4000, seed=1)
        assert iid.weights is None and abs(iid.X[:, 0].mean() - tilt / d) < 0.04
        rho0 = InitialMeasure(density, DISCRETISATIONS["quadrature"])
        nodes = rho0.nodes(2000, seed=0)
        assert abs(nodes.weights @ nodes.X[:, 0] - tilt / d) < 0.01
        assert describe("worked-example", d, rho0).endswith("rho_0 tilted, tilt = 0.6 as quadrature tokens")
        few = rho0.nodes(200, seed=0)
        traj = af.simulate(
            few.X, af.worked_example(10.0), [0.0, 0.5], weights=few.weights, method="heun", dt=0.05
        )
        assert np.allclose(np.linalg.norm(traj.x[-1], axis=1), 1.0) and not np.allclose(traj.x[-1], few.X)
        with pytest.raises(ValueError, match="taken"):
            register(TILTED)
    assert "tilted" not in MEASURES and "tilt" not in density_keys()
    assert "tilt" not in ModelConfig.model_fields  # the config keys are those of import time


def test_the_shipped_densities_stay_and_the_config_reads_their_parameters():
    with pytest.raises(ValueError, match="not a density added by register"):
        unregister("vmf")
    kappa = MEASURES["vmf"].keys[0]
    field = ModelConfig.model_fields["kappa"]
    assert (field.default, field.description) == (kappa.default, "concentration of density = vmf")
    with pytest.raises(ValueError, match="greater than 0"):
        ModelConfig(kappa=0.0)
