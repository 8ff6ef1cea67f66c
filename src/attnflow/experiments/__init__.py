"""Named, reproducible experiments: a pydantic config (TOML on disk), a run -> Dataset, a summary,
figures with captions. Each experiment is one module here that ends with `EXPERIMENT = Experiment(...)`.

    from attnflow.experiments import load_config, run_experiment
    cfg = load_config("concentration", ["N=500", "betas=[10, 100]"])
    ds = run_experiment(cfg, out=Path("runs/demo"))   # result.zarr, summary.json/.md, config.toml

`BUILTIN` names the modules of the built-in experiments (one line per experiment); `register`
adds one defined elsewhere. `REGISTRY` maps a name to its `Experiment`; `PRESETS` maps a preset
name to (experiment, overrides). Importing this package loads no experiment and no pydantic: the
modules are imported on first use.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..io.lock import LockedError
from ..progress import Reporter
from . import layout
from .folder import RunFolderError
from .registry import ConfigError, Experiment

if TYPE_CHECKING:
    import xarray as xr
    from pydantic import BaseModel

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
_presets: dict[str, tuple[str, dict[str, Any]]] = {}  # PRESETS
_registered: set[str] = set()  # names added by register()
_complete = False  # whether every built-in is in _registry


def _module_experiment(module: str) -> Experiment:
    if module not in _by_module:
        exp = importlib.import_module(f".{module}", __name__).EXPERIMENT
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


def _all() -> dict[str, Experiment]:
    """REGISTRY, complete: every built-in (all imported, in BUILTIN order), then the registered ones."""
    global _complete
    if not _complete:
        for module in BUILTIN:
            exp = _module_experiment(module)
            if _registry.get(exp.name) is not exp:  # (added already when an earlier pass failed)
                _add(exp)
        _complete = True
    return _registry


def _all_presets() -> dict[str, tuple[str, dict[str, Any]]]:
    """PRESETS, complete (every built-in imported)."""
    _all()
    return _presets


def get_experiment(name: str) -> Experiment:
    """The experiment called `name` (built-in or registered); ValueError naming the known ones.

    A built-in is found by importing only its module (the name with "-" read as "_") when that fits.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be an experiment name (str), got {type(name).__name__}")
    exp = _lookup(name)
    if exp is None:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(_all())}")
    return exp


def _lookup(name: str) -> Experiment | None:
    """The experiment `name` or None, importing only its module when it is a built-in's."""
    if name in _registry:
        return _registry[name]
    module = name.replace("-", "_")
    if module in BUILTIN and _module_experiment(module).name == name:
        return _by_module[module]
    return _all().get(name)


def register(exp: Experiment) -> Experiment:
    """Add an experiment defined outside this package (a test, a user's module); returns it.

    Its name and preset names must be new. Dask workers in other processes do not see a
    registration made here: register it in a module they import too, or use threads.
    """
    if not isinstance(exp, Experiment):
        raise TypeError(f"exp must be an attnflow.experiments.Experiment, got {type(exp).__name__}")
    if _all().get(exp.name) is not exp:
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


if TYPE_CHECKING:
    REGISTRY: dict[str, Experiment]  # name -> Experiment
    PRESETS: dict[str, tuple[str, dict[str, Any]]]  # preset name -> (experiment name, overrides)


def __getattr__(name: str) -> Any:
    """REGISTRY and PRESETS import every built-in experiment on first use; the config base classes
    and to_toml need pydantic, imported here on first use too."""
    if name == "REGISTRY":
        return _all()
    if name == "PRESETS":
        return _all_presets()
    if name in ("ExperimentConfig", "SimulationConfig", "config_warnings", "to_toml"):
        return getattr(importlib.import_module(".config", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -------------------------------------------------------------------------------------- configs


def load_config(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> BaseModel:
    """The config of an experiment name, a preset name or a TOML file, with `key=value` overrides.

    Parameters
    ----------
    name_or_path : str or Path
    overrides : list of str
        TOML literals (`N=2000`, `betas=[10, 100]`, `init="fibonacci"`; a bare word is a string).

    Raises
    ------
    ConfigError
        Naming the key or file: an unknown name, missing or unreadable file, unknown key or wrong type.
    """
    from .config import build_config, parse_override, read_toml

    target = str(name_or_path)
    values: dict[str, Any]
    exp = _lookup(target)
    if exp is not None:
        values, source = {}, f"experiment {target!r}"
    elif target in _all_presets():
        name, preset = _presets[target]
        exp, values, source = _all()[name], dict(preset), f"preset {target!r}"
    elif target.endswith(".toml") or Path(target).exists():
        path = Path(target)
        if not path.is_file():
            raise ConfigError(f"config file {target}: not found (experiments: {_names()})")
        values = read_toml(path)
        exp = _lookup(str(values.get("experiment", DEFAULT_EXPERIMENT)))
        if exp is None:
            raise ConfigError(
                f"config file {target}: experiment = {values['experiment']!r} is unknown; "
                f"known: {', '.join(_all())}"
            )
        source = f"config file {target}"
    else:
        raise ConfigError(f"unknown experiment {target!r}; known: {_names()} (or a path to a .toml file)")
    name, Config = exp.name, exp.Config
    for item in overrides:
        key, value = parse_override(item)
        if key == "experiment" and value != name:
            raise ConfigError(f"--set experiment={value}: cannot change the experiment of {source}")
        if key not in Config.model_fields:
            raise ConfigError(
                f"--set {item!r}: unknown key {key!r} for experiment {name!r}; "
                f"keys: {', '.join(Config.model_fields)}"
            )
        values[key] = value
    return build_config(Config, values, source)


def _names() -> str:
    """Every experiment and preset name, for messages."""
    return ", ".join([*_all(), *_all_presets()])


def _experiment_of(config: object) -> Experiment:
    name = getattr(config, "experiment", None)
    exp = _lookup(name) if isinstance(name, str) else None
    if exp is None or not isinstance(config, exp.Config):
        raise TypeError(f"config must be an experiment config (one of {', '.join(_all())}), got {config!r}")
    return exp


def _experiment_of_dataset(ds: Any) -> Experiment:
    name = getattr(ds, "attrs", {}).get("experiment")
    if not isinstance(name, str) or not name:
        raise ValueError(
            "ds.attrs['experiment'] must name the experiment (e.g. 'concentration'); it is missing"
        )
    exp = _lookup(name)  # only this experiment's module is imported
    if exp is None:
        raise ValueError(f"no figures known for experiment {name!r}; known: {', '.join(_all())}")
    return exp


# -------------------------------------------------------------------------------------------- run


def summary_markdown(summary: Mapping[str, Any], title: str = "") -> str:
    """The headline numbers as Markdown (summary.md): the table model of `tables.summary_document`
    (a table of the scalars, one table per nested section, the warnings as a list) rendered by
    `render.to_markdown`, as `attnflow show` and the report show them."""
    from .render import to_markdown
    from .tables import summary_document

    return to_markdown(summary_document(summary, title))


def run_experiment(
    config: BaseModel,
    out: Path | str | None = None,
    progress: Reporter | bool | None = None,
    quiet: bool = False,
    overwrite: bool = False,
):
    """Run `config`'s experiment. With `out`: write out/config.toml first, resume from out/parts/,
    then write out/result.zarr (atomically), out/summary.json and out/summary.md. Returns the Dataset.

    out is checked before anything is written there: a folder holding something else than a run is
    refused, and so is a run of another experiment or other parameters unless overwrite=True, which
    replaces it. A run may add values to a list of the experiment's `part_keys` (e.g. betas), and change
    the others while no result is written (a finished result is replaced only with overwrite=True): the
    parts it shares are reused, and config.toml is rewritten only once the new result is, so the folder's
    config and result always agree. A part is reused only if it is what this run computes
    (`attnflow.experiments.parts`); summary.json and summary.md are written with their checksums
    (`attnflow.io.files`). A lock left by a process that died is taken over, with a notice (shown, and not
    stored with the result: it is about the folder, not the result). The config is validated again first
    (a copy made with `model_copy(update=...)` skipped its checks). A new run that fails before finishing
    any part leaves nothing behind in out.

    Parameters
    ----------
    progress : bool or Reporter, optional
        True for progress bars and the run's messages (tqdm's notebook bars in Jupyter, Rich on stderr
        elsewhere); a Reporter (attnflow.progress) of your own; None or False (default): silent, as is
        quiet=True. The torch threads are the config's `threads` (docs/guide.md, "Threads").

    Raises
    ------
    RunFolderError, LockedError, ConfigError
        Naming what is in out; naming the lock's holder (one process at a time writes into out); the
        config's device unavailable here (nothing is written).
    """
    from ..io.lock import check_free, folder_lock
    from ..progress import reporter_for
    from .folder import discard_unfinished, plan_folder

    exp = _experiment_of(config)
    config = _checked(exp, config)
    state = ""
    if out is not None:
        out = Path(out)
        if out.is_dir():
            check_free(out)  # a live writer first: what it writes is not what the folder holds
        plan_folder(out, config, exp, overwrite)  # before anything is written
    reporter, own = (Reporter(), False) if quiet else reporter_for(progress)
    try:
        if out is None:
            return _run(exp, config, None, reporter, "new")
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            with folder_lock(out, on_stale=reporter.notice):
                state = plan_folder(out, config, exp, overwrite)  # again: another writer may have been first
                return _run(exp, config, out, reporter, state)
        except BaseException:
            if state == "new":
                discard_unfinished(out, created)
            raise
    finally:
        if own:
            reporter.close()


def _checked(exp: Experiment, config: BaseModel) -> BaseModel:
    """config validated again by its class (ConfigError naming the key), with its device available."""
    from pydantic import ValidationError

    from .._checks import check_device, torch_build_has_gpu
    from .config import format_validation_error

    try:
        config = exp.Config.model_validate(config.model_dump())
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    device = getattr(config, "device", "cpu")
    if device != "cpu" and "torch" not in sys.modules and torch_build_has_gpu() is False:
        raise ConfigError(
            f"config: device {device!r} is not available: the installed torch is a CPU build; use "
            "device = cpu, or install a CUDA build of torch"
        )
    if device != "cpu":
        try:
            check_device(device)
        except ValueError as err:
            raise ConfigError(f"config: {err}") from None
    return config


def _run(exp: Experiment, config: BaseModel, out: Path | None, reporter: Reporter, state: str):
    """The run of `run_experiment`, its folder (if any) checked and locked."""
    from .._threads import torch_threads
    from ..io import clean_stale, json_attr, to_json
    from . import folder as _folder
    from .config import config_warnings
    from .parts import count_reused

    for message in config_warnings(config):  # printed by the reporter, and stored with the result
        reporter.warn(message)
    if out is not None:
        if state == "replace":
            _folder.remove(out)
            reporter.info(f"{out}: replaced the run that was there")
        clean_stale(out)
        clean_stale(out / layout.PARTS_DIR)
        if state != "extend":  # an extend keeps the config of the result there until the new one is written
            _folder.write_config(out, config)
    t0 = time.perf_counter()
    with count_reused() as reused, torch_threads(getattr(config, "threads", 0)):
        ds = exp.run(config, out, reporter)
    this_run = time.perf_counter() - t0
    if "provenance" in ds.attrs:  # the compute time of the reused parts was spent by earlier runs
        prov = json_attr(ds, "provenance", {})
        prov["wall_time_s"] = {
            "total": this_run + sum(reused),
            "this_run": this_run,
            "reused_parts": sum(reused),
            "n_reused_parts": len(reused),
        }
        ds.attrs["provenance"] = to_json(prov)
    if "timings" in ds.attrs:  # one wall time: the summary's is this run's, as provenance and the last line
        ds.attrs["timings"] = to_json({**json_attr(ds, "timings", {}), "total_s": this_run})
    summary = exp.summarize(ds)
    if out is not None:
        if state == "extend":
            _folder.remove(out, _folder.DRAWN)  # figures and report of the previous result
        _folder.write_result(out, ds, summary, f"attnflow run: {exp.name}")
        if state == "extend":
            _folder.write_config(out, config)
    reporter.done(f"{exp.name}: done in {this_run:.1f} s")
    return ds


# ---------------------------------------------------------------------------------------- figures


def plot_run(
    ds: xr.Dataset, outdir: str | Path, animation: bool = False, dpi: int | None = None, pdf: bool = False
) -> list[Path]:
    """Every figure of a run of ds.attrs["experiment"] as PNG in outdir; pdf=True: also as PDF (vector,
    for a paper); animation=True: also the token animation where the run kept tokens (GIF, and MP4
    where ffmpeg is found). Returns the written paths."""
    from ..plot import DPI, figure_formats

    exp = _experiment_of_dataset(ds)
    with figure_formats(*(("png", "pdf") if pdf else ("png",))):
        return list(exp.figures(ds, Path(outdir), dpi=dpi or DPI, animation=animation))


def plot_sweep(ds: xr.Dataset, outdir: str | Path, dpi: int | None = None, pdf: bool = False) -> list[Path]:
    """The figures of a sweep's Dataset (`attnflow.sweeps.open_sweep`): its experiment's
    `sweep_figures`, or the generic `attnflow.plot.plot_sweep` (also for an unknown experiment).
    PNG; pdf=True: also PDF."""
    from .. import plot

    name = ds.attrs.get("experiment")
    exp = _lookup(name) if isinstance(name, str) else None
    draw = exp.sweep_figures if exp is not None and exp.sweep_figures is not None else plot.plot_sweep
    with plot.figure_formats(*(("png", "pdf") if pdf else ("png",))):
        return list(draw(ds, Path(outdir), dpi=dpi or plot.DPI))


def write_report(ds: xr.Dataset, summary: Mapping[str, Any], figures: list[Path], outdir: str | Path) -> Path:
    """`attnflow.experiments.report.write_report` with the titles and captions of ds's experiment;
    report.md and report.html get their checksums in outdir's record (`attnflow.io.files`)."""
    from ..io import record_files
    from .report import write_report as write

    name = ds.attrs.get("experiment")
    exp = _lookup(name) if isinstance(name, str) else None
    captions = dict(exp.captions) if exp is not None else {}
    path = write(ds, summary, figures, outdir, captions=captions)
    record_files(outdir, [layout.REPORT_MD, layout.REPORT_HTML])  # what `verify` checks them against
    return path
