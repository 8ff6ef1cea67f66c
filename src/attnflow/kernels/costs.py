"""The kernels' cost constants, one home: CPU seconds per unit of work (one thread), used by
`auto.choose_kernel` to predict each kernel's time on a state and by the cluster kernel to choose,
cell pair by cell pair, between its series and its direct sums (`cells.plan`).

Each kernel's cost model (its terms, formula, variants and shipped constants) is part of its
KernelSpec (registry.py; the formulas in pricing.py); `defaults()` gathers the shipped constants of
the registered kernels (`DEFAULTS`, `TERMS` and `VARIANTS` are views of it, kept for existing code).
The shipped constants were fitted by `python -m attnflow.kernels.calibrate` (non-negative least
squares relative to each time, CPU seconds, one thread) on the machine registry.py describes;
`active()` returns the constants calibrated on the present machine where the user cache holds them
(cache.py: a file per machine and torch version), else the defaults.  A cache file that cannot be
read, has another format, belongs to another machine or misses a constant of a kernel it names is
ignored with a warning; a kernel it does not name (registered after the calibration) keeps its
defaults.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

from .cache import cache_dir, machine, machine_key

Costs = dict[str, dict[str, dict[str, float]]]  # kernel -> variant -> term -> CPU seconds

FORMAT = 1
# kernel -> (terms, shipped constants by variant) of every registered cost model: set by registry.py
# (which imports this module, never the reverse) whenever the kernels change
_models: dict[str, tuple[tuple[str, ...], Mapping[str, Mapping[str, float]]]] = {}
_defaults: list[Costs] = [{}]


def set_models(models: Mapping[str, tuple[tuple[str, ...], Mapping[str, Mapping[str, float]]]]) -> None:
    """The registered cost models (registry.py calls this); `defaults()` becomes a new object."""
    _models.clear()
    _models.update(models)
    _defaults[0] = {k: {v: dict(t) for v, t in shipped.items()} for k, (_, shipped) in _models.items()}


def defaults() -> Costs:
    """The shipped constants of every kernel with a cost model (the same object until a kernel is
    registered or removed)."""
    return _defaults[0]


def __getattr__(name: str) -> Costs | dict[str, tuple[str, ...]]:
    """DEFAULTS, TERMS and VARIANTS: views of the registered cost models."""
    if name == "DEFAULTS":
        return defaults()
    if name == "TERMS":
        return {k: terms for k, (terms, _) in _models.items()}
    if name == "VARIANTS":
        return {k: tuple(shipped) for k, (_, shipped) in _models.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check(costs: object, where: str = "costs") -> Costs:
    """The constants as floats, every term of every variant of every registered cost model present,
    finite and >= 0; ValueError naming the first one that is not."""
    out: Costs = {}
    for kernel, (terms, shipped) in _models.items():
        out[kernel] = {}
        for variant in shipped:
            given = costs.get(kernel, {}).get(variant) if isinstance(costs, dict) else None
            if not isinstance(given, dict):
                raise ValueError(f"{where}: no constants for {kernel!r} ({variant})")
            values = {}
            for term in terms:
                v = given.get(term)
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"{where}: {kernel}.{variant}.{term} must be a number >= 0, got {v!r}")
                values[term] = float(v)
            out[kernel][variant] = values
    return out


def cache_path() -> Path:
    """The calibration file of this machine and torch version in the user cache."""
    return cache_dir() / f"costs-{machine_key()}.json"


def read(path: Path) -> Costs:
    """The constants of a calibration file; ValueError saying why it cannot be used."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a calibration file of format {FORMAT}")
    if data.get("machine") != machine():
        raise ValueError(f"{path} was calibrated on another machine or torch version ({data.get('machine')})")
    given = data.get("costs")
    if isinstance(given, dict):  # a kernel registered after the calibration keeps its defaults
        given = {**defaults(), **given}
    return check(given, str(path))


def write(costs: Costs, fit: Mapping[str, object] | None = None, path: Path | None = None) -> Path:
    """Store calibrated constants (checked) with this machine's description; returns the file."""
    path = cache_path() if path is None else Path(path)
    record = {
        "format": FORMAT,
        "machine": machine(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "costs": check(costs),
        "fit": fit or {},
    }
    from ..io import atomic_write_text

    return atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


_loaded: dict[tuple[str, int, int, int], Costs] = {}  # the last key: the registered models' identity


def active() -> Costs:
    """The constants in use: this machine's calibration file when it is valid, else `defaults()`
    (with a warning, once per file state, for a file that exists but cannot be used)."""
    path = cache_path()
    try:
        st = path.stat()
    except OSError:
        return defaults()
    key = (str(path), st.st_mtime_ns, st.st_size, id(defaults()))
    if key not in _loaded:
        try:
            _loaded[key] = read(path)
        except ValueError as e:
            warnings.warn(f"attnflow: ignoring the kernels' calibration file: {e}", stacklevel=2)
            _loaded[key] = defaults()
    return _loaded[key]


def source() -> str:
    """Where `active()` takes its constants from: the calibration file's path, or "defaults"."""
    return str(cache_path()) if active() is not defaults() else "defaults"
