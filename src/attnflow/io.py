"""Results on disk: xarray Datasets as zarr stores written atomically, text files, provenance.

A store at `path` is either absent, the previous complete store, or the new complete store: it is
written under a temporary name next to `path` and renamed into place only once complete.
xarray and zarr are imported inside the functions, so `import attnflow.io` stays light.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np

# Libraries whose versions go into every result's provenance.
_PROVENANCE_PACKAGES = ("attnflow", "numpy", "scipy", "torch", "pot", "xarray", "zarr", "pydantic", "dask")


def _tmp_sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{uuid.uuid4().hex[:8]}")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically: a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path, "tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _clean_attrs(attrs: dict[str, Any], where: str) -> dict[str, Any]:
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


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json(obj: Any, **kwargs: Any) -> str:
    """The one JSON encoder of attnflow: standard JSON (RFC 8259), also for NumPy scalars/arrays,
    complex numbers ([re, im]) and Paths. NaN and +-inf have no JSON literal: they are written as
    null, and readers take null back as "no finite value" (NaN)."""
    return json.dumps(_nan_to_none(obj), default=_json_default, allow_nan=False, **kwargs)


def _nan_to_none(obj: Any) -> Any:
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


def json_attr(ds: Any, key: str, default: Any = None) -> Any:
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


def write_dataset(ds, path: str | os.PathLike) -> Path:
    """Write an xarray Dataset to a zarr store at `path`, atomically (temporary name, then rename).

    An existing store at `path` is replaced only after the new one is complete. attrs must be
    str/int/float/bool or lists of them (dicts are encoded as JSON). Returns `path`.
    """
    import xarray as xr

    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"ds must be an xarray.Dataset, got {type(ds).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = ds.copy(deep=False)
    ds.attrs = _clean_attrs(dict(ds.attrs), "the dataset")
    for name, var in ds.variables.items():
        var.attrs = _clean_attrs(dict(var.attrs), f"variable {name!r}")
        var.encoding = {}
    tmp = _tmp_sibling(path, "tmp")
    old = _tmp_sibling(path, "old")
    try:
        ds.to_zarr(tmp, mode="w", consolidated=True, zarr_format=2)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        for p in (tmp, old):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)
    return path


def read_dataset(path: str | os.PathLike, load: bool = True):
    """Open a zarr store written by `write_dataset`; loaded into memory (and closed) by default."""
    import xarray as xr

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    ds = xr.open_zarr(path)
    if load:
        with ds:
            ds = ds.load()
    return ds


def clean_stale(folder: str | os.PathLike) -> int:
    """Remove temporary stores/files left in `folder` by an interrupted write; returns how many."""
    folder = Path(folder)
    n = 0
    if folder.is_dir():
        for p in folder.iterdir():
            if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                n += 1
    return n


def _version(package: str) -> str | None:
    from importlib import metadata  # 0.1 s to import: only when a result is written

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance() -> dict[str, Any]:
    """Where and with what a result was computed: library versions, Python, host, CPU count, UTC time."""
    versions = {p: _version(p) for p in _PROVENANCE_PACKAGES}
    if "torch" in sys.modules:  # only report threads when torch is already loaded
        versions["torch_threads"] = sys.modules["torch"].get_num_threads()
    return {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
