"""The recipe of a dynamics variant (docs/architecture.md, "Add a variant of the dynamics"): a
keyword of Dynamics becomes a config key in one table line (a field marked FlowKey), and the run's
model, its departures from the paper's flow, the fingerprint and a whole experiment follow.

The toy variant is the scores' soft cap (Dynamics(softcap=c), Gemma-2's), which FlowConfig does not
offer: a config class of this file adds it, and goes with the test."""

from __future__ import annotations

import json
from typing import Annotated

import numpy as np
from pydantic import Field, PositiveFloat

import attnflow as af
from attnflow.experiments import get_experiment, load_config
from attnflow.experiments.inputs import FLOW_KEYS, integration, model_inputs
from attnflow.experiments.model import (
    FLOW_FIELDS,
    NEW_KEY,
    FlowConfig,
    FlowKey,
    ModelConfig,
    flow_departures,
    flow_fields,
)
from attnflow.experiments.parts import fingerprint
from attnflow.experiments.phase_diagram import PhaseDiagramConfig
from attnflow.flow import Dynamics


class SoftcapConfig(PhaseDiagramConfig):
    """The phase diagram with one more flow key: the toy variant's one table line."""

    softcap: Annotated[PositiveFloat | None, FlowKey(departs=True, vary=False)] = Field(
        None, description="c of the scores' soft cap c tanh(s / c)", json_schema_extra=NEW_KEY
    )


TINY = {**load_config("phase-diagram-tiny").model_dump(), "vary": "none", "values": [], "betas": [4.0]}


def test_the_flow_keys_are_read_from_the_table():
    """FLOW_KEYS, the keys a subclass adds and flow_departures all come from the marked fields."""
    assert FLOW_KEYS == tuple(f.name for f in FLOW_FIELDS if f.key.dynamics)
    assert [f.name for f in FLOW_FIELDS] == [
        n for n in FlowConfig.model_fields if n not in ModelConfig.model_fields
    ]
    assert flow_fields(SoftcapConfig)[-1].name == "softcap" and "softcap" not in FlowConfig.model_fields
    assert flow_fields(SoftcapConfig)[-1].default is None
    config = load_config("phase-diagram-tiny", ["weights=random", "heads=2", "mask=causal", "noise=0.1"])
    assert flow_departures(config) == ["heads = 2", "mask = causal", "noise = 0.1"]
    copies = load_config("phase-diagram-tiny", ["heads=2"])  # copies of one head: one head
    assert flow_departures(copies) == []


def test_a_toy_variant_in_one_table_line_runs_end_to_end():
    """The soft cap reaches the model, departs from the paper's flow, is hashed only when set,
    integrates as Dynamics(softcap=c) does, and a phase diagram runs with it."""
    plain, capped = SoftcapConfig(**TINY), SoftcapConfig(**TINY, softcap=0.5)
    assert fingerprint(plain) == fingerprint(PhaseDiagramConfig(**TINY)) != fingerprint(capped)
    assert flow_departures(plain) == [] and flow_departures(capped) == ["softcap = 0.5"]
    model = model_inputs(capped)
    assert model.flow.softcap == 0.5 and not model.theorem()[0] and "capped" in model.description
    beta, X0 = 4.0, af.sample_uniform(12, model.d, seed=0)
    kwargs = integration(capped).kwargs()
    ours = af.simulate(X0, model.at(beta), [0.0, 1.0], **kwargs).x
    direct = af.simulate(X0, Dynamics(model.attention.with_beta(beta), softcap=0.5), [0.0, 1.0], **kwargs).x
    uncapped = af.simulate(X0, model_inputs(plain).at(beta), [0.0, 1.0], **kwargs).x
    assert np.array_equal(ours, direct) and not np.allclose(ours, uncapped)
    ds = get_experiment("phase-diagram").run(capped)
    assert "capped at 0.5" in json.dumps(ds.attrs["models"]) and ds.clusters.notnull().all()
    assert flow_fields(PhaseDiagramConfig) == FLOW_FIELDS  # the shipped table is as it was
