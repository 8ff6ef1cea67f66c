"""The grid of a sweep: parsed from text, checked, sized, iterated into points, each point named.

A grid is {config key: [values]}, values numbers, booleans or strings (a range of integers stays a
`range`: `seed=0:1000000000` costs nothing until it is iterated); its points are the Cartesian
product in key order (the last key varies fastest). A point's key names its files in the store and
never changes for the same point. `check_grid_size` refuses a grid too large for a sweep store
before any point is made: above CONFIRM_POINTS points it needs yes=True (`--yes`), above MAX_POINTS
it is refused (the manifest holds one entry per point and is rewritten as points finish).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeAlias

from .._text import parse_literal

__all__ = [
    "CONFIRM_POINTS",
    "MAX_POINTS",
    "POINT_BYTES_FLOOR",
    "Grid",
    "Point",
    "Scalar",
    "SweepError",
    "check_grid",
    "check_grid_size",
    "expand_grid",
    "grid_size",
    "iter_grid",
    "merge_grids",
    "parse_grid",
    "point_key",
    "point_keys",
]

#: a value of a grid axis (None: the config field's default)
Scalar: TypeAlias = bool | int | float | str | None
#: a grid as its functions read it: {config key: the axis' values} (a list, or a range of integers)
Grid: TypeAlias = Mapping[str, Sequence[Scalar]]
#: one point of a grid: {config key: value}
Point: TypeAlias = dict[str, Scalar]

#: grids with more points need yes=True (`attnflow sweep --yes`)
CONFIRM_POINTS = 10_000
#: grids with more points are refused: split them into several sweeps
MAX_POINTS = 100_000
#: the least a finished point takes in a store (its zarr metadata, checksums and .done record: a
#: concentration-tiny point measured 230 kB), for the size estimate of a store that has none yet
POINT_BYTES_FLOOR = 100_000


class SweepError(ValueError):
    """Bad input to a sweep, about one argument: `argument` (its name: "grid", "store"), `value`
    (what was given) and `problem` (what is wrong and the fix). A front end that sets the argument
    by another name (a command-line option) can say it in its own words."""

    def __init__(self, argument: str, value: object, problem: str) -> None:
        super().__init__(f"{argument} {value!r}: {problem}")
        self.argument, self.value, self.problem = argument, value, problem


def _parse_values(item: str, raw: str) -> list | range:
    """`a:b[:step]` as a range of integers (not materialised), else comma-separated literals."""
    if re.fullmatch(r"-?\d+:-?\d+(:-?\d+)?", raw):
        a, b, *s = (int(x) for x in raw.split(":"))
        step = s[0] if s else 1
        if step == 0:
            raise SweepError("grid", item, "the step of a range must not be 0")
        return range(a, b, step)
    try:
        return [parse_literal(v) for v in raw.split(",") if v.strip()]
    except ValueError as err:  # a value nested too deeply
        raise SweepError("grid", item, str(err)) from None


def parse_grid(items: Iterable[str]) -> dict[str, list | range]:
    """`["beta=10,100", "seed=0:8", "N=1000:5000:2000"]` -> {"beta": [10, 100], "seed": range(0, 8), ...}.

    Each item is `key=v1,v2,...` (values read by `attnflow._text.parse_literal`: TOML literals such
    as 10, 1e3, inf, true, "x", else the bare string) or `key=a:b[:step]`, the integers
    a, a+step, ... < b (end excluded: Python's `range`, which it returns). A key given twice is an
    error.
    """
    grid: dict[str, list | range] = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise SweepError("grid", item, "expected key=v1,v2,... or key=a:b[:step], e.g. seed=0:8")
        key, raw = (s.strip() for s in item.split("=", 1))
        if not key.isidentifier():
            raise SweepError("grid", item, f"{key!r} is not a config key")
        if key in grid:
            raise SweepError("grid", item, f"key {key!r} given twice; list its values once, comma separated")
        values = _parse_values(item, raw)
        if not values:
            raise SweepError("grid", item, "no values (a range a:b needs a < b)")
        grid[key] = values
    return grid


def _scalar(v: object, key: str) -> Scalar:
    """Grid value -> plain Python scalar (NumPy scalars unwrapped); JSON-able or an error."""
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"grid[{key!r}] values must be numbers, booleans or strings, got {type(v).__name__}")


def _identity(v: object) -> str:
    """What makes two grid values the same value: 1, 1.0 and True are three values."""
    return json.dumps(v)


def check_grid(grid: object) -> dict[str, list | range]:
    """A non-empty dict {config key: non-empty list of distinct scalar values}, normalised (a range of
    integers is kept as it is: its values are distinct integers)."""
    if not isinstance(grid, dict) or not grid:
        raise TypeError(f"grid must be a non-empty dict {{key: [values]}}, got {grid!r}")
    out: dict[str, list | range] = {}
    for key, values in grid.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"grid keys must be config field names, got {key!r}")
        if isinstance(values, range):
            if not values:
                raise ValueError(f"grid[{key!r}] is empty: give at least one value")
            out[key] = values
            continue
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            values = [values]
        vals = [_scalar(v, key) for v in values]
        if not vals:
            raise ValueError(f"grid[{key!r}] is empty: give at least one value")
        seen = [_identity(v) for v in vals]
        if len(set(seen)) != len(seen):
            raise ValueError(f"grid[{key!r}] has repeated values: {vals}")
        out[key] = vals
    return out


def _length(values: Sequence[Scalar]) -> int:
    """How many values an axis holds; a range of any size (len() of a range past 2^63 overflows)."""
    if isinstance(values, range):
        span = values.stop - values.start if values.step > 0 else values.start - values.stop
        return max(0, -(-span // abs(values.step)))
    return len(values)


def grid_size(grid: Grid) -> int:
    """The number of points of the grid (the product of its axes' lengths), without making them."""
    return math.prod(_length(v) for v in grid.values())


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


def check_grid_size(grid: Grid, yes: bool = False, point_bytes: float | None = None) -> int:
    """The grid's number of points; SweepError about `grid` (its count, axes and the estimated store
    size) when it exceeds MAX_POINTS, or CONFIRM_POINTS without `yes`. point_bytes: the size of a
    finished point (default: POINT_BYTES_FLOOR, and the estimate says "at least")."""
    n = grid_size(grid)
    if n <= CONFIRM_POINTS or (yes and n <= MAX_POINTS):
        return n
    axes = " x ".join(f"{k}: {_length(v):,} values" for k, v in grid.items())
    size = f"about {_bytes(n * point_bytes)}" if point_bytes else f"at least {_bytes(n * POINT_BYTES_FLOOR)}"
    what = f"{n:,} points ({axes}), {size} in the store"
    if n > MAX_POINTS:
        problem = (
            f"{what}: a sweep takes at most {MAX_POINTS:,} points (its manifest holds one entry per point); "
            "split the grid into several sweeps"
        )
    else:
        problem = f"{what}: more than {CONFIRM_POINTS:,} points; pass yes=True (--yes) to run them"
    raise SweepError("grid", " ".join(_axis_text(k, v) for k, v in grid.items()), problem)


def _axis_text(key: str, values: Sequence[Scalar]) -> str:
    """An axis as the command line gives it: seed=0:1000000000, beta=10,100 (long lists cut)."""
    if isinstance(values, range):
        step = f":{values.step}" if values.step != 1 else ""
        return f"{key}={values.start}:{values.stop}{step}"
    shown = ",".join(_fmt(v) for v in list(values)[:5])
    return f"{key}={shown}" + (",..." if len(values) > 5 else "")


def merge_grids(old: dict[str, list], new: Grid) -> dict[str, list]:
    """`old` extended by the values of `new` it lacks; both over the same keys in the same order."""
    merged = {}
    for k in old:
        seen = {_identity(v) for v in old[k]}
        merged[k] = list(old[k]) + [v for v in new[k] if _identity(v) not in seen]
    return merged


def iter_grid(grid: Grid) -> Iterator[Point]:
    """The points of the grid one at a time, the Cartesian product in key order (the last key varies
    fastest)."""
    keys = list(grid)
    for combo in itertools.product(*(grid[k] for k in keys)):
        yield dict(zip(keys, combo, strict=True))


def expand_grid(grid: Grid) -> list[Point]:
    """All points of the grid as a list (`iter_grid`, materialised: check its size first)."""
    return list(iter_grid(grid))


def _fmt(v: Scalar) -> str:
    """A grid value in a point key: exact (the shortest text that reads back as the same float)."""
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        s = format(v, "g")
        return s if float(s) == v else repr(v)
    return str(v)


def point_key(point: Mapping[str, Scalar]) -> str:
    """Readable, file-safe name of a grid point: {"beta": 10.0, "seed": 3} -> "beta=10_seed=3".

    Characters other than letters, digits and `.+-=` become `-`; a name over 120 characters is
    shortened to a prefix plus a hash of the point.
    """
    name = "_".join(f"{k}={_fmt(v)}" for k, v in point.items())
    safe = "_".join(re.sub(r"[^A-Za-z0-9.+=-]", "-", f"{k}={_fmt(v)}") for k, v in point.items())
    if safe != name or len(safe) > 120:
        # json.dumps, not the store's encoder: the hash of existing keys must never change
        digest = hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:10]
        safe = f"{safe[:100]}_{digest}"
    return safe


def point_keys(points: Iterable[Mapping[str, Scalar]]) -> list[str]:
    """The keys of the points, distinct (two points with one name would share their files)."""
    keys = [point_key(p) for p in points]
    if len(set(keys)) != len(keys):
        raise ValueError("two grid points have the same name; use distinct values")
    return keys
