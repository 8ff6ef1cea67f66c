"""The house test of each registry of docs/architecture.md ("Recipes"): every entry has all of its
parts, so that adding one is one file and one table line and a line that forgets a part fails here.
(The kernels' registry has its own contract, tests/kernels/test_contract.py.)"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import tomllib
import typing
from pathlib import Path

import numpy as np
import pytest

from attnflow.attention import WEIGHTS
from attnflow.experiments import load_config
from attnflow.experiments.model import FLOW_FIELDS, NEW_KEY, FlowConfig, ModelConfig, flow_departures
from attnflow.experiments.phase_diagram import VARY_KEYS
from attnflow.flow import Dynamics
from attnflow.measures import DISCRETISATIONS, MEASURES
from attnflow.pretrained.readers import READERS
from attnflow.science.claims import CLAIMS, Claim, ClaimData, Finding

ROOT = Path(__file__).resolve().parents[1]
DYNAMICS_KEYWORDS = set(inspect.signature(Dynamics).parameters)


# ---------------------------------------------------------------- dynamics variants (FLOW_FIELDS)


@pytest.mark.parametrize("field", FLOW_FIELDS, ids=[f.name for f in FLOW_FIELDS])
def test_a_flow_key_has_its_parts(field):
    """A description, a default of its type, the NEW_KEY mark (run folders made before it are
    reused), a Dynamics keyword where it is passed as is, and a place among the phase diagram's
    `vary` choices where it may vary."""
    assert field.description.strip(), f"flow key {field.name} has no description"
    info = FlowConfig.model_fields[field.name]
    assert info.json_schema_extra == NEW_KEY, f"flow key {field.name} lacks json_schema_extra=NEW_KEY"
    assert FlowConfig.model_validate({field.name: field.default}).model_dump()[field.name] == field.default
    if field.key.dynamics:
        assert field.name in DYNAMICS_KEYWORDS, f"{field.name} is not a keyword of Dynamics"
    assert (field.name in VARY_KEYS) == field.key.vary


def _another_value(field):
    """A value of a flow key other than its default: another choice, or a number above it."""
    choices = typing.get_args(field.type)
    if typing.get_origin(field.type) is typing.Literal:
        return next(c for c in choices if c != field.default)
    return 1.0 + (field.default or 0.0)


DEPARTING = [f for f in FLOW_FIELDS if f.key.departs and f.key.dynamics]


@pytest.mark.parametrize("field", DEPARTING, ids=[f.name for f in DEPARTING])
def test_a_departing_flow_key_departs_in_the_config_and_in_the_model(field):
    """Another value of a key marked `departs` is a departure of the config (flow_departures) and of
    its model (Dynamics.departures, whence the theorem's verdict)."""
    value = _another_value(field)
    overrides = [f"{field.name}={value}", *(["sensitivity=0.1"] if value == "localmax" else [])]
    config = load_config("phase-diagram-tiny", ["vary=none", "values=[]", *overrides])
    assert flow_departures(config) == [f"{field.name} = {value}"]
    att = WEIGHTS["identity"].build(3)
    keys = {field.name: value, **({"sensitivity": 0.1} if value == "localmax" else {})}
    assert Dynamics(att, **keys).departures() and not Dynamics(att).departures()


def test_the_phase_diagram_varies_the_flow_keys_and_the_draw_of_the_weights():
    assert VARY_KEYS == (*(f.name for f in FLOW_FIELDS if f.key.vary), "ensemble", "weights_seed")
    assert all(k in FlowConfig.model_fields for k in VARY_KEYS)


# ---------------------------------------------------------------- measures (MEASURES, DISCRETISATIONS)


@pytest.mark.parametrize("name", list(MEASURES))
def test_a_density_has_its_parts(name):
    """Its words, its parameters declared (every one but the mean direction a config key with a
    description, a default and a bound it meets) and made into ModelConfig's fields, and functions
    that give a density of mass Z at its defaults."""
    family = MEASURES[name]
    assert family.title and family.description and family.positive, f"density {name} lacks its words"
    keys = {p.name: p for p in family.keys}
    assert set(family.parameters) - set(keys) <= {"mean"}, f"density {name}: parameters without a Parameter"
    assert set(keys) <= set(family.parameters)
    for p in keys.values():
        assert p.description.strip(), f"parameter {p.name} of density {name} has no description"
        assert p.gt is None or p.default > p.gt
        field = ModelConfig.model_fields[p.name]
        assert field.default == p.default and p.description in (field.description or "")
    params = {
        **{k: p.default for k, p in keys.items()},
        **({"mean": np.eye(3)[0]} if "mean" in family.parameters else {}),
    }
    density = family.bind(3, **params)
    X = density.sample(64, seed=0)
    assert X.shape == (64, 3) and np.allclose(np.linalg.norm(X, axis=1), 1.0)
    f = density.unnormalised()(X)
    assert f.shape == (64,) and np.all(f > 0) and np.all(f <= 1.0 + 1e-12)
    assert 0 < density.normaliser() <= 1.0 + 1e-12 and density.pair_sup() > 0


@pytest.mark.parametrize("name", list(DISCRETISATIONS))
def test_a_discretisation_has_its_parts(name):
    entry = DISCRETISATIONS[name]
    assert entry.name == name and entry.summary.strip()
    assert (entry.build is None) == entry.per_beta, f"init = {name}: nodes function or per_beta"
    assert all(d in MEASURES for d in entry.densities)


# ---------------------------------------------------------------- weights families (WEIGHTS)


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_a_weights_family_has_its_parts(name):
    """A summary, a label, a dimension, its keys config keys with a description naming it, and a
    build that gives an Attention of that dimension."""
    family = WEIGHTS[name]
    assert family.name == name and family.summary.strip(), f"weights {name} has no summary"
    for key in family.keys:
        field = ModelConfig.model_fields.get(key)
        assert field is not None, f"weights {name}: key {key} is not a ModelConfig field"
        assert f"weights = {name}" in (field.description or ""), f"key {key} does not name weights = {name}"
    config = ModelConfig(weights=name)
    keys = {k: getattr(config, k) for k in family.keys}
    d = family.dimension(None)
    assert family.build(d, **keys).d == d and isinstance(family.label(**keys), str)


# ---------------------------------------------------------------- checkpoint formats (READERS)


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["pretrained"]]
    return {re.split(r"[<>=\[ ;]", s, maxsplit=1)[0] for s in specs}


@pytest.mark.parametrize("name", list(READERS))
def test_a_checkpoint_format_has_its_parts(name):
    """A description, suffixes no other format claims, folder file names of those suffixes, a
    package among the dependencies or the pretrained extra, and a module in readers/ with `read`."""
    reader = READERS[name]
    assert reader.name == name and reader.description.strip()
    assert reader.suffixes and all(s.startswith(".") and s == s.lower() for s in reader.suffixes)
    others = {s for r in READERS.values() if r is not reader for s in r.suffixes}
    assert not others & set(reader.suffixes), f"format {name} claims another format's suffix"
    assert all(n.removesuffix(".index.json").endswith(reader.suffixes) for n in reader.folder_files)
    assert reader.needs in _extras(), f"format {name} needs {reader.needs}, in no dependency list"
    spec = importlib.util.find_spec(f"attnflow.pretrained.readers.{reader.module}")
    assert spec is not None and spec.origin is not None, f"format {name}: no module {reader.module}"
    functions = {
        n.name for n in ast.parse(Path(spec.origin).read_text()).body if isinstance(n, ast.FunctionDef)
    }
    assert "read" in functions, f"format {name}: module {reader.module} has no read(path) -> Found"


# ---------------------------------------------------------------- claim rows (CLAIMS)


@pytest.mark.parametrize("key", list(CLAIMS))
def test_a_claim_has_its_parts(key):
    """Its stable key, a kind, the claim in words and a row function of ClaimData."""
    claim = CLAIMS[key]
    assert isinstance(claim, Claim) and claim.key == key and re.fullmatch(r"[a-z0-9_]+", key)
    assert claim.kind in typing.get_args(typing.get_type_hints(Claim)["kind"])
    assert claim.claim.strip(), f"claim {key} has no words"
    assert callable(claim.row), f"claim {key} has no row function"
    assert list(typing.get_type_hints(claim.row).values()) == [ClaimData, Finding]


# ---------------------------------------------------------------- the recipes themselves


def _recipes() -> dict[str, str]:
    """Each "### " recipe of docs/architecture.md's "## Recipes", title -> text."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    return {part.split("\n", 1)[0]: part for part in section.split("\n### ")[1:]}


@pytest.mark.parametrize("title", list(_recipes()))
def test_every_recipe_is_traced_by_a_test_that_exists(title):
    """A recipe names a test (`tests/<file>.py::test_name`) that adds an entry its way: the file
    exists and defines that test."""
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", _recipes()[title])
    assert named, f"recipe {title!r} names no test"
    for path, test in named:
        assert f"\ndef {test}(" in (ROOT / path).read_text(encoding="utf-8"), f"{path} has no {test}"
