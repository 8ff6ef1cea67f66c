"""Pieces shared by the experiments: config base classes, the time grid of saved times, TOML, errors."""

from __future__ import annotations

import json
import math
import re
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import _checks
from .._checks import check_rtol_for_dtype
from .._threads import DEFAULT_THREADS, THREADS_HELP
from ..dynamics.integrate import METHODS
from ..kernels import FINITE_KERNELS
from .registry import ConfigError

# The names a config accepts come from the registries (one home): kernels of finite beta with
# "auto", and the integrators. pydantic checks a Literal of them and names the allowed values.
KERNEL_CHOICES: tuple[str, ...] = ("auto", *FINITE_KERNELS)
INTEGRATOR_CHOICES: tuple[str, ...] = ("adaptive", *(m for m in METHODS if m != "adaptive"))
if TYPE_CHECKING:
    Kernel = str
    Integrator = str
else:
    Kernel = Literal[KERNEL_CHOICES]
    Integrator = Literal[INTEGRATOR_CHOICES]


KERNEL_HELP = f"velocity kernel: {', '.join(KERNEL_CHOICES[:-1])} or {KERNEL_CHOICES[-1]}"
INTEGRATOR_HELP = f"time integrator: {', '.join(INTEGRATOR_CHOICES[:-1])} or {INTEGRATOR_CHOICES[-1]}"


# an angle in radians defining 'near' a subspace
Angle = Annotated[float, Field(gt=0.0, le=math.pi / 2)]


class ConfigWarning(UserWarning):
    """A config that runs but may not show what it is meant to (see `check_time_grid`)."""


def check_time_grid(config: BaseModel) -> None:
    """Checks at load time of a config with saved times (fields t_max, dt_save; docs/guide.md):

    - dt_save > t_max is an error: only t = 0 and t_max would be saved;
    - t_max < ln(max(betas)) is a ConfigWarning: t*(beta) grows like log beta (docs/math.md: the
      early phase lasts t <~ log beta; the worked example measured t* = 3.3, 4.0, 4.5 at beta = 10,
      30, 100, near ln beta = 2.3, 3.4, 4.6), so the run likely ends before the closest approach of
      its largest betas and reports t* = t_max.
    """
    t_max, dt_save = getattr(config, "t_max", None), getattr(config, "dt_save", None)
    if not isinstance(t_max, float | int) or not isinstance(dt_save, float | int):
        return
    if dt_save > t_max:
        raise ValueError(
            f"dt_save = {dt_save:g} is larger than t_max = {t_max:g}: only t = 0 and t_max would be saved; "
            f"choose dt_save <= t_max (t* is resolved to dt_save: e.g. dt_save = {t_max / 40:.3g})"
        )
    betas = getattr(config, "betas", None)
    if isinstance(betas, list) and betas and all(isinstance(b, float | int) for b in betas):
        b = max(betas)
        if math.isfinite(b) and b > 1 and t_max < math.log(b):
            warnings.warn(
                ConfigWarning(
                    f"t_max = {t_max:g} is shorter than ln(beta) = {math.log(b):.2g} for beta = {b:g}: "
                    "t*(beta) grows like log beta, so the run may end before the closest approach of its "
                    f"largest betas (t* = t_max); raise t_max to at least {math.ceil(math.log(b))}"
                ),
                stacklevel=2,
            )


class ExperimentConfig(BaseModel):
    """Base of every experiment config: strict types, unknown keys rejected, every field defaulted.

    A config with saved times (t_max, dt_save) is checked by `check_time_grid` when it is made.
    """

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, frozen=False)

    seed: NonNegativeInt = Field(0, description="seed of every random draw (initial cloud, token subset)")

    @model_validator(mode="after")
    def _saved_memory(self):
        check_saved_arrays(self)
        return self

    @model_validator(mode="after")
    def _time_grid(self):
        check_time_grid(self)
        return self


class DeviceConfig(ExperimentConfig):
    """The `device` key of the experiments that run the attention kernels."""

    device: str = Field("cpu", description="where the kernels run: cpu, cuda or cuda:K (a GPU)")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v != "cpu" and not re.fullmatch(r"cuda(:\d+)?", v):
            raise ValueError(f"device must be cpu, cuda or cuda:K, got {v!r}")
        return v


class SimulationConfig(DeviceConfig):
    """Fields shared by experiments that integrate the finite-temperature ODE."""

    kernel: Kernel = Field("auto", description=KERNEL_HELP)
    integrator: Integrator = Field("adaptive", description=INTEGRATOR_HELP)
    rtol: PositiveFloat = Field(1e-7, description="relative tolerance of the adaptive integrator")
    atol: PositiveFloat = Field(1e-9, description="absolute tolerance of the adaptive integrator")
    dt: PositiveFloat = Field(0.01, description="step of the fixed-step integrators (ignored by adaptive)")
    dtype: Literal["float64", "float32"] = Field(
        "float64",
        description="arithmetic of the integration: float32 is about 2x faster for large N, with a "
        "velocity error near beta * 1e-7 relative; it needs rtol >= 1e-5 (adaptive)",
    )
    threads: NonNegativeInt = Field(DEFAULT_THREADS, description=THREADS_HELP)

    @model_validator(mode="after")
    def _float32_tolerance(self):
        check_rtol_for_dtype(self.rtol, self.dtype, self.integrator)  # the library's own rule
        return self


def time_grid(t_max: float, dt_save: float) -> np.ndarray:
    """Saved times 0, dt_save, ..., t_max (t_max included up to rounding)."""
    n = math.floor(t_max / dt_save + 1e-9)
    t = dt_save * np.arange(n + 1)
    if t_max - t[-1] > 1e-9 * t_max:
        t = np.append(t, t_max)
    return t


def n_saved_times(t_max: float, dt_save: float) -> int:
    """len(time_grid(t_max, dt_save)), without making the grid."""
    n = math.floor(t_max / dt_save + 1e-9)
    return n + 1 + int(t_max - dt_save * n > 1e-9 * t_max)


# the dimension of the built-in experiments' tokens (a lower bound for `heads`, whose d is the model's)
SAVED_D = 3


def check_saved_arrays(config: BaseModel) -> None:
    """A config with t_max and dt_save keeps len(time grid) x N x d numbers of its trajectory: refuse
    one that would take more than the memory of this machine (ValueError naming t_max, dt_save and N)
    when the config is made, rather than a MemoryError when the run allocates it. N: the config's N
    (N_max for a ladder), else 1. (`simulate` checks again against the memory available when it runs.)"""
    from .._checks import check_saved_memory

    t_max, dt_save = getattr(config, "t_max", None), getattr(config, "dt_save", None)
    if not isinstance(t_max, (int, float)) or not isinstance(dt_save, (int, float)):
        return
    n_times = n_saved_times(t_max, dt_save)
    N = getattr(config, "N", None)
    if not isinstance(N, int):  # None, or "auto" (a ladder up to N_max)
        N = getattr(config, "N_max", None) or 1
    itemsize = 4 if getattr(config, "dtype", "float64") == "float32" else 8
    fix = (
        f"t_max = {t_max:g} and dt_save = {dt_save:g} make {n_times:,} saved times; raise dt_save, "
        "or lower t_max or N"
    )
    check_saved_memory(n_times, (int(N), SAVED_D), itemsize, fix=fix, machine=True)


def check_betas(v: list[float]) -> list[float]:
    """betas: finite, > 0, no duplicates (`_checks.check_betas`); returned sorted."""
    return sorted(_checks.check_betas(v, distinct=True).tolist())


# ----------------------------------------------------------------------------------------- errors


def format_validation_error(err: ValidationError, source: str = "config") -> str:
    """One line per problem, naming the key: `betas[2]: Input should be greater than 0 (got -1.0)`."""
    lines = []
    for e in err.errors():
        key = ""
        for part in e["loc"]:
            key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (see `attnflow list` for the keys this experiment takes)"
        elif "input" in e and e["type"] != "missing" and key:  # (a whole-config check names its keys)
            msg += f" (got {e['input']!r})"
        lines.append(f"{source}: {key or '<config>'}: {msg}")
    return "\n".join(lines)


def build_config(Config: type[BaseModel], values: dict[str, Any], source: str = "config") -> BaseModel:
    """Config(**values), with pydantic's errors turned into a ConfigError that names the key."""
    try:
        return Config(**values)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


# ------------------------------------------------------------------------------------------- TOML


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(config: BaseModel, comments: bool = True) -> str:
    """The config as TOML text, every field written, each preceded by its description. TOML has no
    null: an unset optional field (None) is written as a comment and reads back as unset."""
    lines = []
    fields = type(config).model_fields
    dump = config.model_dump()
    order = ["experiment", *[k for k in dump if k != "experiment"]] if "experiment" in dump else list(dump)
    for name in order:
        value = dump[name]
        desc = fields[name].description
        if comments and desc:
            lines.append(f"# {desc}")
        lines.append(f"# {name} is unset" if value is None else f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def parse_override(item: str) -> tuple[str, Any]:
    """`key=value` -> (key, value): the value read as a TOML literal, else kept as a bare string."""
    from .._text import parse_literal

    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set N=2000 or --set betas=[10,100]")
    key, raw = (s.strip() for s in item.split("=", 1))
    if not key:
        raise ConfigError(f"--set {item!r}: the key before '=' is empty")
    return key, parse_literal(raw)
