"""Named, reproducible experiments: a pydantic config (TOML on disk), a run -> Dataset, a summary,
figures with captions. Each experiment is one module here that ends with `EXPERIMENT = Experiment(...)`.

    from attnflow.experiments import load_config, run_experiment
    cfg = load_config("concentration", ["N=500", "betas=[10, 100]"])
    ds = run_experiment(cfg, out=Path("runs/demo"))   # result.zarr, summary.json/.md, config.toml

`BUILTIN` names the modules of the built-in experiments (one line per experiment); `register`
adds one defined elsewhere. `REGISTRY` maps a name to its `Experiment`; `PRESETS` maps a preset
name to (experiment, overrides). Importing this package loads no experiment and no pydantic: the
modules are imported on first use. The registry lives in `registry`, `load_config` in `load`, the
run and its figures in `run`, a run's units of work in `units`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..io.lock import LockedError
from ..progress import Reporter
from .folder import RunFolderError
from .load import load_config
from .registry import (
    BUILTIN,
    DEFAULT_EXPERIMENT,
    ConfigError,
    Experiment,
    all_experiments,
    all_presets,
    get_experiment,
    register,
    unregister,
)
from .run import plot_run, plot_sweep, run_experiment, summary_markdown, write_report

if TYPE_CHECKING:
    from .config import ExperimentConfig, SimulationConfig, config_warnings, to_toml

__all__ = [
    "BUILTIN",
    "DEFAULT_EXPERIMENT",
    "PRESETS",
    "REGISTRY",
    "ConfigError",
    "Experiment",
    "ExperimentConfig",
    "LockedError",
    "Reporter",
    "RunFolderError",
    "SimulationConfig",
    "config_warnings",
    "get_experiment",
    "load_config",
    "plot_run",
    "plot_sweep",
    "register",
    "run_experiment",
    "summary_markdown",
    "to_toml",
    "unregister",
    "write_report",
]

#: modules of the built-in experiments, in the order `attnflow list` shows them

if TYPE_CHECKING:
    REGISTRY: dict[str, Experiment]  # name -> Experiment
    PRESETS: dict[str, tuple[str, dict[str, object]]]  # preset name -> (experiment name, overrides)


def __getattr__(name: str) -> Any:
    """REGISTRY and PRESETS import every built-in experiment on first use; the config base classes
    and to_toml need pydantic, imported here on first use too."""
    if name == "REGISTRY":
        return all_experiments()
    if name == "PRESETS":
        return all_presets()
    if name in ("ExperimentConfig", "SimulationConfig", "config_warnings", "to_toml"):
        return getattr(importlib.import_module(".config", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
