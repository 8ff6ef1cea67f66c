"""Text in and out: values read from the command line and numbers written for people.

One home for both, so that `--set`, `--grid` and config files read the same literals, and every
table, title and report writes a number the same way.
"""

from __future__ import annotations

import math
from typing import SupportsFloat, TypeAlias, TypeVar

import numpy as np

__all__ = ["JSON", "MAX_DEPTH", "check_depth", "format_value", "format_with_error", "parse_literal", "shown"]

#: a value of JSON text once parsed (`json.loads`): a string, number, bool or null, or lists and
#: objects of them
JSON: TypeAlias = "str | int | float | bool | list[JSON] | dict[str, JSON] | None"
_V = TypeVar("_V")

#: the longest text of a value that a message quotes (`shown`)
SHOWN = 60


def shown(v: object, limit: int = SHOWN) -> str:
    """repr(v) for a message, cut to `limit` characters with "..." (a value may be any length)."""
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: the deepest nesting of lists and tables in a value read from text (a config value is at most a
#: list of lists)
MAX_DEPTH = 16


def check_depth(value: _V, what: str = "the value") -> _V:
    """value itself; ValueError when its lists and dicts nest deeper than MAX_DEPTH."""
    # the containers at one depth
    level: list[list[object] | dict[object, object]] = [value] if isinstance(value, list | dict) else []
    for _ in range(MAX_DEPTH):
        if not level:
            return value
        level = [
            x for v in level for x in (v.values() if isinstance(v, dict) else v) if isinstance(x, list | dict)
        ]
    if not level:
        return value
    raise ValueError(f"{what} nests lists or tables more than {MAX_DEPTH} deep; no config value does")


def _nesting(raw: str) -> int:
    """An upper bound of the bracket depth of raw text (strings counted too)."""
    depth = deepest = 0
    for c in raw:
        depth += (c in "[{") - (c in "]}")
        deepest = max(deepest, depth)
    return deepest


def parse_literal(raw: str) -> object:
    """A TOML literal (`10`, `1e3`, `inf`, `true`, `"x"`, `[10, 100]`), else the bare string.
    ValueError for a list or table nested more than MAX_DEPTH deep."""
    import tomllib

    raw = raw.strip()
    if raw[:1] in ("[", "{") and _nesting(raw) > MAX_DEPTH:
        raise ValueError(f"the value nests lists or tables more than {MAX_DEPTH} deep; no config value does")
    try:
        return check_depth(tomllib.loads(f"v = {raw}")["v"])
    except tomllib.TOMLDecodeError:
        return raw


def format_value(v: object, digits: int = 4) -> str:
    """A value as text: floats to `digits` significant digits, inf as ∞, None as —, lists joined.

    Lists of more than 10 numbers are shortened to the first 8, an ellipsis and the last.
    """
    if v is None:
        return "—"
    if isinstance(v, bool | np.bool_):
        return "yes" if v else "no"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, complex | np.complexfloating):
        z = complex(v)
        if not z.imag:
            return format_value(z.real, digits)
        sign = "+" if z.imag >= 0 else "−"
        return f"{format_value(z.real, digits)}{sign}{format_value(abs(z.imag), digits)}j"
    if isinstance(v, float | np.floating):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "∞" if f > 0 else "−∞"
        return f"{f:.{digits}g}"
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list | tuple) and v and all(isinstance(x, str) for x in v):
        return "; ".join(v)
    if isinstance(v, list | tuple):
        items = [format_value(x, digits) for x in v]
        return "[" + ", ".join(items if len(items) <= 10 else [*items[:8], "…", items[-1]]) + "]"
    return str(v)


#: the most significant digits a value is printed with, however small its error
MAX_DIGITS = 10


def _error_decimals(err: float) -> int:
    """The decimal place of an error's last shown digit: its first significant digit, or its second
    when the first is 1 or 2 (0.0013 -> 4, 0.0004 -> 4, 0.04 -> 2, 3 -> 0, 40 -> -1)."""
    exponent = math.floor(math.log10(err))
    lead = int(round(err / 10.0**exponent, 9))
    return -exponent + (1 if lead < 3 else 0)


def format_with_error(value: SupportsFloat | None, error: SupportsFloat | None) -> tuple[str, str]:
    """(value, error) as texts whose digits match: the error to one significant digit (two when it
    starts with 1 or 2), the value to the same decimal place (0.16284, 3.9e-4 -> "0.1628", "0.0004";
    14.13, 0.05 -> "14.13", "0.05"; 5.6, 2.7 -> "6", "3"). Scientific notation for values below 1e-3
    or from 1e6 on; at most MAX_DIGITS significant digits. Without a finite positive error (None,
    NaN, 0) the value is written by format_value and the error as format_value writes it."""
    if value is None or error is None:
        return format_value(value), format_value(error)
    try:
        v, e = float(value), float(error)
    except (TypeError, ValueError):
        return format_value(value), format_value(error)
    if not (math.isfinite(v) and math.isfinite(e) and e > 0):
        return format_value(value), format_value(error)
    decimals = _error_decimals(e)
    digits_e = max(decimals + math.floor(math.log10(e)) + 1, 1)
    magnitude = math.floor(math.log10(abs(v))) if v else -decimals
    if v and (abs(v) < 1e-3 or abs(v) >= 1e6):
        sig = min(max(magnitude + decimals + 1, 1), MAX_DIGITS)
        return f"{v:.{sig - 1}e}", f"{e:.{digits_e - 1}e}"
    decimals = min(decimals, MAX_DIGITS - 1 - magnitude)
    if decimals >= 0:  # an error below the last digit kept is shown as one unit of it
        return f"{v:.{decimals}f}", f"{max(round(e, decimals), 10.0**-decimals):.{decimals}f}"
    scale = 10.0**-decimals
    return f"{round(v / scale) * scale:.0f}", f"{max(round(e / scale), 1) * scale:.0f}"
