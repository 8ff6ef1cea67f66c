"""Text in and out: values read from the command line and numbers written for people.

One home for both, so that `--set`, `--grid` and config files read the same literals, and every
table, title and report writes a number the same way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MAX_DEPTH", "check_depth", "format_value", "parse_literal", "shown"]

#: the longest text of a value that a message quotes (`shown`)
SHOWN = 60


def shown(v: Any, limit: int = SHOWN) -> str:
    """repr(v) for a message, cut to `limit` characters with "..." (a value may be any length)."""
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: the deepest nesting of lists and tables in a value read from text (a config value is at most a
#: list of lists)
MAX_DEPTH = 16


def check_depth(value: Any, what: str = "the value") -> Any:
    """value itself; ValueError when its lists and dicts nest deeper than MAX_DEPTH."""
    level = [value] if isinstance(value, list | dict) else []  # the containers at one depth
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


def parse_literal(raw: str) -> Any:
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


def format_value(v: Any, digits: int = 4) -> str:
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
