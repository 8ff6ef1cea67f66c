"""Files: xarray Datasets as zarr stores written atomically and verified when read, text files,
provenance, and matrices read from .npy / .npz / text files (the weights and tokens given to
`attnflow check`).

A store at `path` is either absent, the previous complete store, or the new complete store: it is
written under a temporary name next to `path` and renamed into place only once complete. Before the
rename, the size and SHA-256 of every file of the store (metadata and chunks) go into
`path/.attnflow-checksums.json` (CHECKSUM_FILE); `read_dataset` checks them first, so a missing,
truncated or altered file is a StoreError naming it, never data read as NaN (zarr fills a missing
chunk with the fill value).
xarray and zarr are imported inside the functions, so `import attnflow.io` stays light.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
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
# the checksums of a store's files, inside the store (zarr ignores it)
CHECKSUM_FILE = ".attnflow-checksums.json"
CHECKSUM_FORMAT = "attnflow-checksums"


class StoreError(ValueError):
    """A stored Dataset that is damaged, or that cannot be verified: `path` names the file at fault,
    `problem` says what is wrong with it."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        super().__init__(f"{os.fspath(path)}: {problem}")
        self.path, self.problem = os.fspath(path), problem


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

    An existing store at `path` is replaced only after the new one is complete, with the checksums of
    its files (`write_checksums`). attrs must be str/int/float/bool or lists of them (dicts are
    encoded as JSON). Returns `path`.
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
        write_checksums(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        for p in (tmp, old):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)
    return path


def read_dataset(path: str | os.PathLike, load: bool = True, verify: bool = True):
    """Open a zarr store written by `write_dataset`; loaded into memory (and closed) by default.

    verify: check the store's files against their checksums first (`verify_dataset`); a store that
    fails, or that xarray cannot read, raises StoreError naming the file.  Without Dask (chunks=None:
    lazy NumPy-backed variables until loaded), which halves the time to read a small result: Dask
    and distributed are not imported.
    """
    import xarray as xr

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    if verify:
        verify_dataset(path)
    try:
        ds = xr.open_zarr(path, chunks=None)
        if load:
            with ds:
                ds = ds.load()
    except Exception as err:  # zarr's and blosc's errors name no file: name it
        raise StoreError(path, f"cannot be read ({type(err).__name__}: {err})") from None
    return ds


# ------------------------------------------------------------------------------------- checksums


def _fs(target: str | os.PathLike) -> tuple[Any, str]:
    """(fsspec filesystem or None for a local path, root path) of a store."""
    text = os.fspath(target)
    if "://" not in text:
        return None, text
    import fsspec

    fs, root = fsspec.core.url_to_fs(text)
    return fs, root.rstrip("/")


def _files(fs: Any, root: str) -> list[str]:
    """Every file of the store but its checksums, as sorted relative POSIX paths."""
    if fs is None:
        rels = [
            os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            for d, _, names in os.walk(root)
            for f in names
        ]
    else:
        rels = [p[len(root) + 1 :] for p in fs.find(root)]
    return sorted(r for r in rels if r != CHECKSUM_FILE)


def _read_bytes(fs: Any, root: str, rel: str) -> bytes:
    if fs is None:
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    return fs.cat_file(f"{root}/{rel}")


def write_checksums(target: str | os.PathLike) -> None:
    """Record the size and SHA-256 of every file of the zarr store `target` (a path or an fsspec URL)
    in its CHECKSUM_FILE. `write_dataset` calls it before the store is renamed into place."""
    fs, root = _fs(target)
    files = {}
    for rel in _files(fs, root):
        data = _read_bytes(fs, root, rel)
        files[rel] = [len(data), hashlib.sha256(data).hexdigest()]
    text = json.dumps({"format": CHECKSUM_FORMAT, "algorithm": "sha256", "files": files}, indent=0)
    if fs is not None:
        fs.pipe_file(f"{root}/{CHECKSUM_FILE}", text.encode())
        return
    with open(os.path.join(root, CHECKSUM_FILE), "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def dataset_problems(target: str | os.PathLike) -> list[tuple[str, str]]:
    """What is wrong with the zarr store `target` (a path or an fsspec URL) against its checksums, as
    (file, problem) pairs: [] when every file is as written. A store without checksums (written by
    attnflow 0.1.0, or by xarray directly) cannot be verified: that is a problem too."""
    fs, root = _fs(target)
    where = f"{root}/{CHECKSUM_FILE}"
    if not (os.path.isdir(root) if fs is None else fs.isdir(root)):
        return [(root, "no dataset there")]
    try:
        record = json.loads(_read_bytes(fs, root, CHECKSUM_FILE))
        files = record["files"] if record.get("format") == CHECKSUM_FORMAT else None
        if not isinstance(files, dict) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) for v in files.values()
        ):
            raise ValueError
    except FileNotFoundError:
        why = "written by attnflow 0.1.0, by xarray directly, or copied without it"
        return [(where, f"missing: the store has no checksums ({why}), so it cannot be verified")]
    except (ValueError, KeyError, AttributeError, TypeError, UnicodeDecodeError):
        return [(where, "not a valid checksum record (truncated or overwritten)")]
    problems = []
    for rel, (size, digest) in files.items():
        try:
            data = _read_bytes(fs, root, rel)
        except FileNotFoundError:
            problems.append((f"{root}/{rel}", "missing"))
            continue
        if len(data) != size:
            problems.append(
                (f"{root}/{rel}", f"{len(data)} bytes, written with {size} (truncated or altered)")
            )
        elif hashlib.sha256(data).hexdigest() != digest:
            problems.append((f"{root}/{rel}", "altered (its SHA-256 differs from the one written)"))
    problems += [
        (f"{root}/{rel}", "not part of the store as written") for rel in _files(fs, root) if rel not in files
    ]
    return problems


def verify_dataset(target: str | os.PathLike) -> None:
    """Raise StoreError naming the first damaged file of the zarr store `target` (see `dataset_problems`)."""
    problems = dataset_problems(target)
    if problems:
        path, problem = problems[0]
        more = f" (and {len(problems) - 1} more file(s))" if len(problems) > 1 else ""
        raise StoreError(path, problem + more)


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


def provenance(torch_threads: int | None = None, device: str | None = None) -> dict[str, Any]:
    """Where and with what a result was computed: library versions, Python, host, CPU count, UTC time.

    torch_threads: the torch CPU threads the computation used (default: torch's current setting,
    when torch is loaded); device: where it computed ("cpu", "cuda:0"), recorded when given.
    """
    versions: dict[str, Any] = {p: _version(p) for p in _PROVENANCE_PACKAGES}
    if torch_threads is None and "torch" in sys.modules:  # only report threads when torch is loaded
        torch_threads = sys.modules["torch"].get_num_threads()
    if torch_threads is not None:
        versions["torch_threads"] = int(torch_threads)
    out = {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    if torch_threads is not None:
        out["torch_threads"] = int(torch_threads)
    if device is not None:
        out["device"] = device
    return out


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
