"""The one JSON encoder of attnflow (`to_json`), the reader of JSON attrs (`json_attr`), and the
rule of what a stored attribute may be (`clean_attrs`)."""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class _HasAttrs(Protocol):
    """A Dataset, DataArray or anything with a mapping of attributes."""

    @property
    def attrs(self) -> Mapping[Hashable, object]: ...


def clean_attrs(attrs: dict[str, object], where: str) -> dict[str, object]:
    """attrs restricted to what zarr stores faithfully: str, int, float, bool and lists of them."""
    out = {}
    for key, value in attrs.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, (tuple, np.ndarray)):
            value = np.asarray(value).tolist() if isinstance(value, np.ndarray) else list(value)
        if isinstance(value, dict):
            value = to_json(value)
        ok = isinstance(value, (str, int, float, bool)) or (
            isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value)
        )
        if not ok:
            raise TypeError(
                f"attribute {key!r} of {where} is a {type(value).__name__}; store str, int, float, "
                "or lists of them (encode dicts as JSON strings)"
            )
        out[key] = value
    return out


def _json_default(obj: object) -> object:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json(obj: object, **kwargs: Any) -> str:
    """The one JSON encoder of attnflow: standard JSON (RFC 8259), also for NumPy scalars/arrays,
    complex numbers ([re, im]) and Paths. NaN and +-inf have no JSON literal: they are written as
    null, and readers take null back as "no finite value" (NaN)."""
    return json.dumps(_nan_to_none(obj), default=_json_default, allow_nan=False, **kwargs)


def _nan_to_none(obj: object) -> object:
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, complex):
        obj = [obj.real, obj.imag]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_nan_to_none(v) for v in obj.tolist()]
    return obj


def json_attr(ds: _HasAttrs, key: str, default: object = None) -> Any:
    """The attribute `key` of a Dataset (or of anything with `.attrs`), decoded from JSON.

    Missing: `default`. A non-string value is returned as stored. A string that is not JSON raises
    ValueError naming the key: attrs written by attnflow are always JSON.
    """
    raw = ds.attrs.get(key)
    if raw is None:
        return default
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"attribute {key!r} is not valid JSON: {raw[:60]!r}") from None
