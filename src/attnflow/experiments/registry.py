"""What an experiment is: the `Experiment` record every experiment module ends with, and ConfigError;
the registry of experiments and presets.

`BUILTIN` names the modules of the built-in experiments (one line per experiment); `register`
adds one defined elsewhere. `all_experiments()` maps a name to its `Experiment`, `all_presets()` a
preset name to (experiment, overrides): they import every built-in; `get_experiment` and `lookup`
import only the module of the name asked for.

Standard library only, so that the command line and `attnflow.experiments` import it without
pydantic, NumPy or any experiment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr
    from pydantic import BaseModel

__all__ = [
    "BUILTIN",
    "DEFAULT_EXPERIMENT",
    "ConfigError",
    "Experiment",
    "all_experiments",
    "all_presets",
    "doc_summary",
    "experiment_of",
    "experiment_of_dataset",
    "get_experiment",
    "lookup",
    "register",
    "unregister",
]


class ConfigError(ValueError):
    """A config that cannot be used: unknown key, wrong type or value, unreadable file."""


@dataclass(frozen=True)
class Experiment:
    """A named experiment: everything the command line, the report and the sweeps need of it.

    Attributes
    ----------
    name : str
        What `attnflow run NAME` and `config.experiment` say (e.g. "zero-temperature").
    description : str
        One line for `attnflow list`.
    Config : type
        Its pydantic config (a subclass of `config.ExperimentConfig` with a field
        `experiment: Literal[name] = name`; every field defaulted and described).
    run : callable
        run(config, out, progress) -> xarray.Dataset: out (Path or None) is the run folder for
        resumable parts (its units of work: `units.Units`); progress a `Reporter` or None. The Dataset carries
        attrs["experiment"] = name.
    summarize : callable
        summarize(ds) -> dict: the headline numbers (JSON-able) of a result.
    figures : callable
        figures(ds, outdir, *, dpi, animation) -> list[Path]: draws the run's figures into outdir
        (PNG before PDF per figure; with animation=True also the token animation where there is one).
    captions : dict
        {file stem: (title, caption)} of those figures, used by the report.
    presets : dict
        {preset name: {config key: value}}, run as `attnflow run PRESET`.
    sweep_figures : callable or None
        sweep_figures(ds, outdir, *, dpi) -> list[Path]: the figures of a sweep's Dataset (grid keys
        as extra dims); None: the generic `attnflow.plot.plot_sweep`.
    part_keys : tuple of str
        Config fields that only choose which parts a run computes (e.g. "betas"); they are left out of
        the parts' fingerprint. A rerun into the same folder may change them and reuses the parts it
        shares; a change of any other field makes another run, refused there unless
        `run_experiment(..., overwrite=True)`.
    sweep_columns : tuple of str
        The one-element variables of a grid point's Dataset that a sweep's table shows first (e.g. a
        point's convergence status and resolution ratio); () for none in particular.
    """

    name: str
    description: str
    Config: type[BaseModel]
    run: Callable[..., xr.Dataset]  # run(config: its own Config, out, progress): see above
    summarize: Callable[[xr.Dataset], dict[str, object]]
    figures: Callable[..., list[Path]]
    captions: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    presets: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    sweep_figures: Callable[..., list[Path]] | None = None
    part_keys: tuple[str, ...] = ()
    sweep_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"Experiment name must be a non-empty string, got {self.name!r}")
        for key in ("run", "summarize", "figures"):
            if not callable(getattr(self, key)):
                raise TypeError(
                    f"Experiment {self.name!r}: {key} must be callable, got {getattr(self, key)!r}"
                )
        if self.sweep_figures is not None and not callable(self.sweep_figures):
            raise TypeError(f"Experiment {self.name!r}: sweep_figures must be callable or None")
        bad = [k for k, v in self.captions.items() if not (isinstance(v, tuple) and len(v) == 2)]
        if bad:
            raise TypeError(f"Experiment {self.name!r}: captions[{bad[0]!r}] must be a (title, caption) pair")
        fields = getattr(self.Config, "model_fields", {})
        if not isinstance(self.part_keys, tuple) or any(k not in fields for k in self.part_keys):
            raise TypeError(f"Experiment {self.name!r}: part_keys must be a tuple of config fields")
        if not isinstance(self.sweep_columns, tuple) or not all(
            isinstance(c, str) for c in self.sweep_columns
        ):
            raise TypeError(f"Experiment {self.name!r}: sweep_columns must be a tuple of variable names")
        if "experiment" not in fields:
            raise TypeError(
                f"Experiment {self.name!r}: Config must be a pydantic model with a field `experiment`"
            )


def doc_summary(doc: str | None) -> str:
    """The first paragraph of a module docstring as one line, without a leading "`name`: "."""
    first = (doc or "").strip().split("\n\n")[0].replace("\n", " ")
    return first.split(": ", 1)[1] if first.startswith("`") and ": " in first else first


# ------------------------------------------------------------------------------------ registry

BUILTIN = (
    "concentration",
    "terminal",
    "zero_temperature",
    "layers",
    "heads",
    "phase_diagram",
    "metastability",
)
#: what `attnflow run` runs without a name, and a config file without `experiment = ...`
DEFAULT_EXPERIMENT = "concentration"

_by_module: dict[str, Experiment] = {}  # built-in module -> its EXPERIMENT, as modules are imported
_registry: dict[str, Experiment] = {}  # REGISTRY: every experiment by name, once complete
_presets: dict[str, tuple[str, dict[str, object]]] = {}  # PRESETS
_registered: set[str] = set()  # names added by register()
_complete = False  # whether every built-in is in _registry


def _module_experiment(module: str) -> Experiment:
    if module not in _by_module:
        exp = importlib.import_module(f".{module}", __package__).EXPERIMENT
        if not isinstance(exp, Experiment):
            raise TypeError(f"attnflow.experiments.{module}.EXPERIMENT must be an Experiment, got {exp!r}")
        _by_module[module] = exp
    return _by_module[module]


def _add(exp: Experiment) -> None:
    clash = [p for p in exp.presets if p in _presets or p in _registry or p == exp.name]
    if exp.name in _registry or exp.name in _presets or clash:
        raise ValueError(
            f"experiment {exp.name!r}: the name {clash[0] if clash else exp.name!r} is taken; choose another"
        )
    _registry[exp.name] = exp
    _presets.update({p: (exp.name, dict(v)) for p, v in exp.presets.items()})


def all_experiments() -> dict[str, Experiment]:
    """REGISTRY, complete: every built-in (all imported, in BUILTIN order), then the registered ones."""
    global _complete
    if not _complete:
        for module in BUILTIN:
            exp = _module_experiment(module)
            if _registry.get(exp.name) is not exp:  # (added already when an earlier pass failed)
                _add(exp)
        _complete = True
    return _registry


def all_presets() -> dict[str, tuple[str, dict[str, object]]]:
    """PRESETS, complete (every built-in imported)."""
    all_experiments()
    return _presets


def get_experiment(name: str) -> Experiment:
    """The experiment called `name` (built-in or registered); ValueError naming the known ones.

    A built-in is found by importing only its module (the name with "-" read as "_") when that fits.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be an experiment name (str), got {type(name).__name__}")
    exp = lookup(name)
    if exp is None:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(all_experiments())}")
    return exp


def lookup(name: str) -> Experiment | None:
    """The experiment `name` or None, importing only its module when it is a built-in's."""
    if name in _registry:
        return _registry[name]
    module = name.replace("-", "_")
    if module in BUILTIN and _module_experiment(module).name == name:
        return _by_module[module]
    return all_experiments().get(name)


def register(exp: Experiment) -> Experiment:
    """Add an experiment defined outside this package (a test, a user's module); returns it.

    Its name and preset names must be new. Dask workers in other processes do not see a
    registration made here: register it in a module they import too, or use threads.
    """
    if not isinstance(exp, Experiment):
        raise TypeError(f"exp must be an attnflow.experiments.Experiment, got {type(exp).__name__}")
    if all_experiments().get(exp.name) is not exp:
        _add(exp)
        _registered.add(exp.name)
    return exp


def unregister(name: str) -> None:
    """Remove an experiment added by `register`, with its presets (built-ins stay)."""
    if name not in _registered:
        raise ValueError(f"{name!r} was not registered (registered: {', '.join(_registered) or 'none'})")
    _registered.discard(name)
    del _registry[name]
    for preset in [p for p, (n, _) in _presets.items() if n == name]:
        del _presets[preset]


def experiment_of(config: object) -> Experiment:
    name = getattr(config, "experiment", None)
    exp = lookup(name) if isinstance(name, str) else None
    if exp is None or not isinstance(config, exp.Config):
        raise TypeError(
            f"config must be an experiment config (one of {', '.join(all_experiments())}), got {config!r}"
        )
    return exp


def experiment_of_dataset(ds: object) -> Experiment:
    name = getattr(ds, "attrs", {}).get("experiment")
    if not isinstance(name, str) or not name:
        raise ValueError(
            "ds.attrs['experiment'] must name the experiment (e.g. 'concentration'); it is missing"
        )
    exp = lookup(name)  # only this experiment's module is imported
    if exp is None:
        raise ValueError(f"no figures known for experiment {name!r}; known: {', '.join(all_experiments())}")
    return exp
