"""The configs of a sweep: the base config resolved, and the config of each grid point.

Experiments are reached only through `attnflow.experiments`' public API (`load_config`,
`REGISTRY[name].Config`), imported inside the functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    from pydantic import BaseModel

    from .grid import Grid, Scalar

    #: what `sweep` takes as its config: a pydantic config (an experiment's, or any model a run_fn
    #: takes), an experiment name or TOML path, or a dict with "experiment"
    ConfigLike: TypeAlias = BaseModel | str | os.PathLike[str] | dict[str, Any]

__all__ = ["base_config", "experiment_name", "field_for", "point_config", "point_warnings", "resolve_config"]


def resolve_config(config: ConfigLike) -> BaseModel:
    """A pydantic config object; a name or TOML path, or a dict with "experiment", is loaded."""
    from pydantic import BaseModel

    if isinstance(config, BaseModel):
        return config
    if isinstance(config, (str, os.PathLike)):
        from ..experiments import load_config

        return load_config(os.fspath(config))
    if isinstance(config, dict):
        from ..experiments import REGISTRY

        name = config.get("experiment")
        if name not in REGISTRY:
            raise ValueError(f"config['experiment'] must be one of {sorted(REGISTRY)}, got {name!r}")
        return REGISTRY[name].Config.model_validate(config)
    raise TypeError(
        "config must be an experiment config (pydantic model), an experiment name, a TOML path or a dict, "
        f"got {type(config).__name__}"
    )


def field_for(Config: type[BaseModel], key: str) -> tuple[str, bool]:
    """The config field a grid key sets: (field, wrap) where wrap means a one-element list.

    `beta` sets the field `beta` when there is one, else `betas` = [value].
    """
    fields = Config.model_fields
    if key in fields:
        return key, False
    if f"{key}s" in fields:
        return f"{key}s", True
    raise ValueError(
        f"grid key {key!r} is not a field of the {getattr(Config, '__name__', 'config')} config "
        f"(fields: {', '.join(fields)})"
    )


def point_config(config: BaseModel, point: Mapping[str, Scalar]) -> BaseModel:
    """The config of one grid point, validated again (bad value -> ValueError naming the key)."""
    from pydantic import ValidationError

    Config = type(config)
    update = {}
    for key, value in point.items():
        fname, wrap = field_for(Config, key)
        update[fname] = [value] if wrap else value
    try:
        return Config.model_validate({**config.model_dump(), **update})
    except ValidationError as err:
        probs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"grid point {point}: invalid config ({probs})") from None


def point_warnings(configs: Iterable[BaseModel]) -> list[str]:
    """What may make the points' configs mislead (`attnflow.experiments.config_warnings`, e.g. t_max
    shorter than ln beta), each message once."""
    from ..experiments import config_warnings

    return list(dict.fromkeys(w for c in configs for w in config_warnings(c)))


def base_config(config: BaseModel, grid: Grid) -> dict[str, Any]:
    """The config's fields that the grid does not set: what every point shares."""
    Config = type(config)
    skip = {field_for(Config, k)[0] for k in grid}
    return {k: v for k, v in config.model_dump().items() if k not in skip}


def experiment_name(config: BaseModel) -> str:
    """The config's `experiment` field, else its class name (a config of no registered experiment)."""
    return str(getattr(config, "experiment", type(config).__name__))
