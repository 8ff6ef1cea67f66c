"""Pieces shared by the experiments: config base classes, the time grid of saved times, TOML, errors."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Self

import numpy as np
from pydantic import (
    AfterValidator,
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
from .._text import shown
from .._threads import DEFAULT_THREADS, MAX_THREADS, THREADS_HELP
from ..dynamics.integrate import METHODS
from ..kernels import registry as _kernels
from .registry import ConfigError

# The names a config accepts come from the registries (one home): kernels of finite beta with
# "auto", and the integrators. pydantic checks a Literal of them and names the allowed values.
KERNEL_CHOICES: tuple[str, ...] = ("auto", *(s.name for s in _kernels.SPECS if s.finite_only))
INTEGRATOR_CHOICES: tuple[str, ...] = ("adaptive", *(m for m in METHODS if m != "adaptive"))
if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    Kernel = str
    Integrator = str
else:
    Kernel = Literal[KERNEL_CHOICES]
    Integrator = Literal[INTEGRATOR_CHOICES]


KERNEL_HELP = f"velocity kernel: {', '.join(KERNEL_CHOICES[:-1])} or {KERNEL_CHOICES[-1]}"
INTEGRATOR_HELP = f"time integrator: {', '.join(INTEGRATOR_CHOICES[:-1])} or {INTEGRATOR_CHOICES[-1]}"


# an angle in radians defining 'near' a subspace
Angle = Annotated[float, Field(gt=0.0, le=math.pi / 2)]
#: more steps of a fixed-step integrator than this (t_max / dt) is refused when a config is made
MAX_STEPS = 1e9
#: torch CPU threads of a run (0: torch's default)
Threads = Annotated[NonNegativeInt, Field(le=MAX_THREADS)]


class ConfigWarning(UserWarning):
    """A config that runs but may not show what it is meant to (see `config_warnings`)."""


#: the largest seed: seeds are stored as 64-bit integers (coordinates, attributes)
MAX_SEED = 2**63 - 1


def _seed_range(v: int) -> int:
    if v > MAX_SEED:
        raise ValueError(f"a seed is stored as a 64-bit integer: it must be at most 2^63 - 1 = {MAX_SEED}")
    return v


#: a seed of the random draws: an integer in [0, 2^63)
Seed = Annotated[NonNegativeInt, AfterValidator(_seed_range)]


def check_time_grid(config: BaseModel) -> None:
    """dt_save > t_max is an error (fields t_max, dt_save; docs/guide.md): only t = 0 and t_max would
    be saved."""
    t_max, dt_save = getattr(config, "t_max", None), getattr(config, "dt_save", None)
    if not isinstance(t_max, float | int) or not isinstance(dt_save, float | int):
        return
    if dt_save > t_max:
        raise ValueError(
            f"dt_save = {dt_save:g} is larger than t_max = {t_max:g}: only t = 0 and t_max would be saved; "
            f"choose dt_save <= t_max (t* is resolved to dt_save: e.g. dt_save = {t_max / 40:.3g})"
        )


def config_warnings(config: BaseModel) -> list[str]:
    """What may make a valid config mislead (docs/guide.md): t_max < ln(max(betas)), since t*(beta)
    grows like log beta (docs/math.md: the early phase lasts t <~ log beta; the worked example
    measured t* = 3.3, 4.0, 4.5 at beta = 10, 30, 100, near ln beta = 2.3, 3.4, 4.6), so the run likely
    ends before the closest approach of its largest betas and reports t* = t_max.

    `load_config` issues each as a ConfigWarning once the config is valid; `run_experiment` reports
    them as the run's warnings (stored with its result)."""
    t_max, betas = getattr(config, "t_max", None), getattr(config, "betas", None)
    if not isinstance(t_max, float | int) or not isinstance(betas, list) or not betas:
        return []
    if not all(isinstance(b, float | int) for b in betas):
        return []
    b = max(betas)
    if not (math.isfinite(b) and b > 1 and t_max < math.log(b)):
        return []
    return [
        f"t_max = {t_max:g} is shorter than ln(beta) = {math.log(b):.2g} for beta = {b:g}: "
        "t*(beta) grows like log beta, so the run may end before the closest approach of its "
        f"largest betas (t* = t_max); raise t_max to at least {math.ceil(math.log(b))}"
    ]


class ExperimentConfig(BaseModel):
    """Base of every experiment config: strict types, unknown keys rejected, every number finite (no
    inf or NaN), every field defaulted.

    A config with saved times (t_max, dt_save) is checked by `check_time_grid` and
    `check_saved_arrays` when it is made.
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, validate_assignment=True, frozen=False, allow_inf_nan=False
    )

    seed: Seed = Field(0, description="seed of every random draw (initial cloud, token subset)")

    def saved_cloud(self) -> tuple[int, int]:
        """(clouds, d) of the trajectory a run keeps in memory at once: one cloud in d = SAVED_D,
        unless the experiment knows its d (`ModelConfig`: the weights') and clouds (seeds)."""
        return 1, SAVED_D

    @model_validator(mode="after")
    def _saved_memory(self) -> Self:
        check_saved_arrays(self)
        return self

    @model_validator(mode="after")
    def _time_grid(self) -> Self:
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
    threads: Threads = Field(DEFAULT_THREADS, description=THREADS_HELP)

    @model_validator(mode="after")
    def _float32_tolerance(self) -> Self:
        check_rtol_for_dtype(self.rtol, self.dtype, self.integrator)  # the library's own rule
        return self

    @model_validator(mode="after")
    def _fixed_steps(self) -> Self:
        t_max = getattr(self, "t_max", None)
        if (
            self.integrator != "adaptive"
            and isinstance(t_max, int | float)
            and not t_max / self.dt <= MAX_STEPS
        ):
            raise ValueError(
                f"dt = {self.dt:g} makes {t_max / self.dt:.3g} steps of {self.integrator} up to t_max = "
                f"{t_max:g}, more than {MAX_STEPS:.0e} (days of computing): raise dt to "
                f"{t_max / MAX_STEPS:.3g} or more, or use integrator = adaptive"
            )
        return self


def time_grid(t_max: float, dt_save: float) -> np.ndarray:
    """Saved times 0, dt_save, ..., t_max (t_max included up to rounding)."""
    n = math.floor(t_max / dt_save + 1e-9)
    t = dt_save * np.arange(n + 1)
    if t_max - t[-1] > 1e-9 * t_max:
        t = np.append(t, t_max)
    return t


def n_saved_times(t_max: float, dt_save: float) -> int:
    """len(time_grid(t_max, dt_save)), without making the grid (finite t_max, dt_save > 0: ValueError
    when t_max / dt_save is not a finite number)."""
    ratio = t_max / dt_save
    if not math.isfinite(ratio):
        raise ValueError(
            f"t_max = {t_max:g} over dt_save = {dt_save:g} is not a finite number of saved times"
        )
    n = math.floor(ratio + 1e-9)
    return n + 1 + int(t_max - dt_save * n > 1e-9 * t_max)


# the dimension of the built-in experiments' tokens (a lower bound for `heads`, whose d is the model's)
SAVED_D = 3
#: more saved times than this is refused when a config is made (t_max / dt_save), before the memory
#: check (which refuses far fewer): the number of bytes then stays within a float
MAX_SAVED_TIMES = 1e200


def check_saved_arrays(config: ExperimentConfig) -> None:
    """A config with t_max and dt_save keeps len(time grid) x clouds x N x d numbers of its trajectory:
    refuse one that would take more than the memory of this machine (ValueError naming t_max, dt_save
    and N) when the config is made, rather than a MemoryError when the run allocates it. N: the
    config's N (N_max for a ladder), else 1; clouds and d: `config.saved_cloud()`. (`simulate` checks
    again against the memory available when it runs.)"""
    from .._checks import check_saved_memory

    t_max, dt_save = getattr(config, "t_max", None), getattr(config, "dt_save", None)
    if isinstance(t_max, (int, float)) and isinstance(dt_save, (int, float)):
        if not t_max / dt_save <= MAX_SAVED_TIMES:
            raise ValueError(
                f"t_max = {t_max:g} and dt_save = {dt_save:g} make {t_max / dt_save:.3g} saved times, more "
                f"than {MAX_SAVED_TIMES:.0e}: raise dt_save or lower t_max"
            )
        n_times = n_saved_times(t_max, dt_save)
        fix = f"t_max = {t_max:g} and dt_save = {dt_save:g} make {n_times:,} saved times"
    else:  # the tokens alone
        fix, n_times = "the tokens alone", 1
    N = getattr(config, "N", None)
    if not isinstance(N, int):  # None, or "auto" (a ladder up to N_max)
        N = getattr(config, "N_max", None) or 1
    itemsize = 4 if getattr(config, "dtype", "float64") == "float32" else 8
    clouds, d = config.saved_cloud()
    shape = (clouds, int(N), d) if clouds > 1 else (int(N), d)
    fix = f"{fix}; " + ("raise dt_save, or lower t_max or N" if n_times > 1 else "lower N")
    fix += " or the number of seeds" if clouds > 1 else ""
    check_saved_memory(n_times, shape, itemsize, fix=fix, machine=True)


def check_betas(v: list[float]) -> list[float]:
    """betas: finite, > 0, no duplicates (`_checks.check_betas`); returned sorted."""
    return sorted(_checks.check_betas(v, distinct=True).tolist())


#: a config's inverse temperatures: finite, > 0, distinct, sorted (`check_betas`)
Betas = Annotated[list[PositiveFloat], AfterValidator(check_betas)]


# ----------------------------------------------------------------------------------------- errors


def _key(loc: tuple[int | str, ...]) -> str:
    """The key of an error's location: the field, then its indices (`betas[2]`); the names pydantic
    gives the branches of a union (`constrained-int`, `literal['auto']`) are left out."""
    key = str(loc[0]) if loc else ""
    return key + "".join(f"[{part}]" for part in loc[1:] if isinstance(part, int))


def _message(e: ErrorDetails) -> str:
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        return "unknown key (see `attnflow list` for the keys this experiment takes)"
    if e["type"] == "finite_number":
        return "must be a finite number (not inf or nan)"
    return msg


def _problem(errors: list[ErrorDetails], key: str) -> str:
    """The message of the errors at one key (the branches of a union in one message), with the
    value given."""
    msgs = list(dict.fromkeys(_message(e) for e in errors))
    msg = msgs[0] + "".join(f" or {m.removeprefix('Input should be ')}" for m in msgs[1:])
    e = errors[0]
    if (
        "input" in e
        and e["type"] not in ("missing", "extra_forbidden")
        and key
        and repr(e["input"]) not in msg
    ):
        msg += f" (got {shown(e['input'])})"
    return msg


def format_validation_error(err: ValidationError, source: str = "config") -> str:
    """One line per key of the config, naming it: `betas[2]: Input should be greater than 0 (got
    -1.0)`; the branches of a union in one message (`N: Input should be a valid integer or 'auto'
    (got inf)`), the items of one list with the same problem together (`Ls[0], Ls[1]: ...`); a
    whole-config check's message names its keys itself."""
    by_key: dict[str, list[ErrorDetails]] = {}
    for e in err.errors():
        by_key.setdefault(_key(e["loc"]), []).append(e)
    by_field: dict[str, dict[str, list[str]]] = {}  # field -> problem -> its keys
    for key, errors in by_key.items():
        field = key.split("[", 1)[0]
        by_field.setdefault(field, {}).setdefault(_problem(errors, key), []).append(key)
    lines = []
    for field, problems in by_field.items():
        parts = [f"{', '.join(keys)}: {problem}" if field else problem for problem, keys in problems.items()]
        lines.append(f"{source}: {'; '.join(parts)}")
    return "\n".join(lines)


def build_config(Config: type[BaseModel], values: Mapping[str, object], source: str = "config") -> BaseModel:
    """Config(**values), with pydantic's errors turned into a ConfigError that names the key; once it
    is valid, each of its `config_warnings` as a ConfigWarning."""
    try:
        config = Config(**values)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None
    except RecursionError:
        raise ConfigError(f"{source}: a value is nested too deeply to be a config value") from None
    for message in config_warnings(config):
        warnings.warn(ConfigWarning(message), stacklevel=3)
    return config


# ------------------------------------------------------------------------------------------- TOML


def _toml_value(v: object) -> str:
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


def read_toml(path: Path) -> dict[str, object]:
    """The values of a TOML config file (ConfigError naming the file when it cannot be read)."""
    import tomllib

    from .._text import check_depth

    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path}: not valid TOML ({err})") from None
    except RecursionError:
        raise ConfigError(
            f"config file {path}: a value nests lists or tables too deeply to be read"
        ) from None
    try:
        checked: dict[str, object] = check_depth(values, "a value")
        return checked
    except ValueError as err:
        raise ConfigError(f"config file {path}: {err}") from None


def parse_override(item: str) -> tuple[str, object]:
    """`key=value` -> (key, value): the value read as a TOML literal, else kept as a bare string."""
    from .._text import parse_literal

    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set N=2000 or --set betas=[10,100]")
    key, raw = (s.strip() for s in item.split("=", 1))
    if not key:
        raise ConfigError(f"--set {item!r}: the key before '=' is empty")
    try:
        return key, parse_literal(raw)
    except ValueError as err:
        raise ConfigError(f"--set {key}=...: {err}") from None
