"""Named, reproducible experiments: a pydantic config (TOML on disk) and a run function -> Dataset.

    from attnflow.experiments import load_config, run_experiment
    cfg = load_config("concentration", ["N=500", "betas=[10, 100]"])
    ds = run_experiment(cfg, out=Path("runs/demo"))   # result.zarr, summary.json/.md, config.toml

`REGISTRY` maps a name to an `Experiment`; `PRESETS` maps a preset name to (experiment, overrides).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import concentration, heads, layers, resolution, terminal, zero_temperature
from ._config import ConfigError, Reporter, build_config, parse_override, to_toml

__all__ = [
    "PRESETS",
    "REGISTRY",
    "ConfigError",
    "Experiment",
    "Reporter",
    "load_config",
    "run_experiment",
    "summary_markdown",
    "to_toml",
]


@dataclass(frozen=True)
class Experiment:
    """A named experiment: its config model, run(config, out, progress) -> Dataset, summarize(ds)."""

    name: str
    description: str
    Config: type[BaseModel]
    run: Callable[..., Any]
    summarize: Callable[[Any], dict]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)


def _experiment(name: str, module: Any, Config: type[BaseModel]) -> Experiment:
    doc = (module.__doc__ or "").strip()
    first = doc.split("\n\n")[0].replace("\n", " ")
    description = first.split(": ", 1)[1] if first.startswith("`") and ": " in first else first
    return Experiment(
        name=name,
        description=description,
        Config=Config,
        run=module.run,
        summarize=module.summarize,
        presets=getattr(module, "PRESETS", {}),
    )


REGISTRY: dict[str, Experiment] = {
    "concentration": _experiment("concentration", concentration, concentration.ConcentrationConfig),
    "terminal": _experiment("terminal", terminal, terminal.TerminalConfig),
    "resolution": _experiment("resolution", resolution, resolution.ResolutionConfig),
    "zero-temperature": _experiment(
        "zero-temperature", zero_temperature, zero_temperature.ZeroTemperatureConfig
    ),
    "layers": _experiment("layers", layers, layers.LayersConfig),
    "heads": _experiment("heads", heads, heads.HeadsConfig),
}

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    preset: (name, values) for name, exp in REGISTRY.items() for preset, values in exp.presets.items()
}


def _known() -> str:
    return ", ".join([*REGISTRY, *PRESETS])


def load_config(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> BaseModel:
    """The config of an experiment name, a preset name or a TOML file, with `key=value` overrides.

    Values of overrides are TOML literals (`N=2000`, `betas=[10, 100]`, `init="fibonacci"`; a bare
    word is a string). An unknown name, missing or unreadable file, unknown key or wrong type raises
    ConfigError naming the key or file.
    """
    import tomllib

    target = str(name_or_path)
    values: dict[str, Any]
    if target in REGISTRY:
        name, values, source = target, {}, f"experiment {target!r}"
    elif target in PRESETS:
        name, preset = PRESETS[target]
        values, source = dict(preset), f"preset {target!r}"
    elif target.endswith(".toml") or Path(target).exists():
        path = Path(target)
        if not path.is_file():
            raise ConfigError(f"config file {target}: not found (experiments: {_known()})")
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"config file {target}: not valid TOML ({err})") from None
        name = values.get("experiment", "concentration")
        if name not in REGISTRY:
            raise ConfigError(
                f"config file {target}: experiment = {name!r} is unknown; known: {', '.join(REGISTRY)}"
            )
        source = f"config file {target}"
    else:
        raise ConfigError(f"unknown experiment {target!r}; known: {_known()} (or a path to a .toml file)")
    for item in overrides:
        key, value = parse_override(item)
        if key == "experiment" and value != name:
            raise ConfigError(f"--set experiment={value}: cannot change the experiment of {source}")
        values[key] = value
        source_key = "--set"
        if key not in REGISTRY[name].Config.model_fields:
            raise ConfigError(
                f"{source_key} {item!r}: unknown key {key!r} for experiment {name!r}; "
                f"keys: {', '.join(REGISTRY[name].Config.model_fields)}"
            )
    return build_config(REGISTRY[name].Config, values, source)


def _experiment_of(config: BaseModel) -> Experiment:
    name = getattr(config, "experiment", None)
    if name not in REGISTRY or not isinstance(config, REGISTRY[name].Config):
        raise TypeError(f"config must be an experiment config (one of {', '.join(REGISTRY)}), got {config!r}")
    return REGISTRY[name]


def summary_markdown(summary: dict[str, Any], title: str = "") -> str:
    """The headline numbers as Markdown: one table per nested section."""
    lines = [f"# {title or summary.get('experiment', 'attnflow run')}", ""]
    flat = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
    if flat:
        lines += ["| quantity | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in flat.items()]
        lines.append("")
    for key, value in summary.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            cols = list(dict.fromkeys(c for row in value.values() for c in row))
            lines += [f"## {key}", "", "| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            lines += [
                f"| {r} | " + " | ".join(_fmt(row.get(c)) for c in cols) + " |" for r, row in value.items()
            ]
            lines.append("")
        elif isinstance(value, dict):
            lines += [f"## {key}", "", "| | value |", "|---|---|"]
            lines += [f"| {k} | {_fmt(v)} |" for k, v in value.items()]
            lines.append("")
        elif isinstance(value, list) and value:
            lines += [f"## {key}", ""] + [f"- {v}" for v in value] + [""]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def run_experiment(
    config: BaseModel,
    out: Path | str | None = None,
    progress: Reporter | None = None,
    quiet: bool = False,
):
    """Run `config`'s experiment. With `out`: write out/config.toml first, resume from out/parts/,
    then write out/result.zarr (atomically), out/summary.json and out/summary.md. Returns the Dataset.

    progress: a Reporter (progress bars, messages); quiet=True uses a silent one instead.
    """
    from ..io import atomic_write_text, clean_stale, to_json, write_dataset

    exp = _experiment_of(config)
    reporter = Reporter() if quiet or progress is None else progress
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        clean_stale(out / "parts")
        atomic_write_text(out / "config.toml", to_toml(config))
    t0 = time.perf_counter()
    ds = exp.run(config, out, reporter)
    summary = exp.summarize(ds)
    if out is not None:
        write_dataset(ds, out / "result.zarr")
        atomic_write_text(out / "summary.json", to_json(summary, indent=2) + "\n")
        atomic_write_text(out / "summary.md", summary_markdown(summary, f"attnflow run: {exp.name}") + "\n")
    reporter.info(f"{exp.name}: done in {time.perf_counter() - t0:.1f} s")
    return ds
