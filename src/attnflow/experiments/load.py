"""`load_config`: the config of an experiment name, a preset name or a TOML file, with overrides."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .registry import DEFAULT_EXPERIMENT, ConfigError, all_experiments, all_presets, lookup

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["load_config"]


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
    values: dict[str, object]
    exp = lookup(target)
    if exp is not None:
        values, source = {}, f"experiment {target!r}"
    elif target in all_presets():
        name, preset = all_presets()[target]
        exp, values, source = all_experiments()[name], dict(preset), f"preset {target!r}"
    elif target.endswith(".toml") or Path(target).exists():
        path = Path(target)
        if not path.is_file():
            raise ConfigError(f"config file {target}: not found (experiments: {_names()})")
        values = read_toml(path)
        exp = lookup(str(values.get("experiment", DEFAULT_EXPERIMENT)))
        if exp is None:
            raise ConfigError(
                f"config file {target}: experiment = {values['experiment']!r} is unknown; "
                f"known: {', '.join(all_experiments())}"
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
    return ", ".join([*all_experiments(), *all_presets()])
