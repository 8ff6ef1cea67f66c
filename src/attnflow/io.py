"""Files: xarray Datasets as zarr stores written atomically, text files, provenance, and matrices
read from .npy / .npz / text files (the weights and tokens given to `attnflow check`).

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
    """Open a zarr store written by `write_dataset`; loaded into memory (and closed) by default.

    Without Dask (chunks=None: lazy NumPy-backed variables until loaded), which halves the time to
    read a small result: Dask and distributed are not imported.
    """
    import xarray as xr

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    ds = xr.open_zarr(path, chunks=None)
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


# ------------------------------------------------------------------------------------- matrices

ARRAY_SUFFIXES = (".npy", ".npz", ".txt", ".csv", ".tsv", ".dat")


def _read_arrays(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a .npy or text file, or the arrays of an .npz by name; ValueError naming the file."""
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    if path.suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .npy, .npz, .txt or .csv")
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if path.suffix == ".npz":
            return dict(np.load(path, allow_pickle=False))
        return np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    except (ValueError, OSError) as err:
        raise ValueError(f"{path}: cannot read an array ({err})") from None


def read_array(path: str | os.PathLike, name: str = "array") -> np.ndarray:
    """One array from a .npy, an .npz holding one array, or a text file (.txt, .csv, .tsv, .dat).

    name: what the array is, for the message when an .npz holds several.
    """
    path = Path(path)
    data = _read_arrays(path)
    if isinstance(data, dict):
        if len(data) != 1:
            raise ValueError(f"{path}: an .npz for {name} must hold one array, found {sorted(data)}")
        data = next(iter(data.values()))
    return data


def load_matrices(files: list[Path]) -> dict[str, np.ndarray]:
    """Q, K, V from three files (see `read_array`) or from one .npz holding arrays named Q, K, V.

    Raises ValueError naming the file on an unreadable file, a missing key or a non-square matrix.
    """
    from ._checks import check_matrix

    if len(files) == 1:
        data = _read_arrays(Path(files[0]))
        if not isinstance(data, dict) or not {"Q", "K", "V"} <= set(data):
            raise ValueError(f"{files[0]}: a single file must be an .npz holding arrays named Q, K and V")
        named = [(f"{files[0]}[{k}]", k, data[k]) for k in ("Q", "K", "V")]
    elif len(files) == 3:
        named = [(str(p), k, read_array(p, k)) for p, k in zip(files, ("Q", "K", "V"), strict=True)]
    else:
        raise ValueError(
            f"give Q, K and V as three files, or one .npz holding Q, K, V (got {len(files)} files)"
        )
    out: dict[str, np.ndarray] = {}
    d = None
    for label, key, M in named:
        try:
            out[key] = check_matrix(M, key, d)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{label}: {err}") from None
        d = out[key].shape[0]
    return out
