"""Parameter sweeps on Dask: a grid of experiment configs, one task per point, resumable.

A sweep store is a folder (or an fsspec URL) laid out as

    STORE/sweep.json          the base config and the grid (written once, extended by a larger grid)
    STORE/manifest.json       per point: status, attempts, timing, worker, error, summary
                              (rewritten atomically by the client only)
    STORE/points/<key>.zarr   one Dataset per finished point, written atomically by its task
    STORE/points/<key>.done   written by the task after the store: the point is complete
    STORE/work/<key>/         finished parts of a running point (reused by a retry), then removed

Every path inside the store is relative, so a store moved elsewhere still opens. A rerun of the same
sweep skips the complete points; a failing point is retried `retries` times and then reported as
failed, never dropped. `open_sweep` combines the points lazily into one Dataset along the grid axes.
Dask, xarray and torch are imported inside the functions.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import math
import os
import re
import socket
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

FORMAT = "attnflow-sweep"
VERSION = 1
SWEEP_FILE = "sweep.json"
MANIFEST_FILE = "manifest.json"
POINTS_DIR = "points"
STATUSES = ("pending", "running", "done", "failed")

RunFn = Callable[[Any], Any]  # config -> xarray.Dataset


# ------------------------------------------------------------------------------------------ grid


def parse_grid_value(raw: str) -> Any:
    """One grid value from text: a TOML literal (10, 1e3, inf, true, "x"), else the bare string."""
    import tomllib

    raw = raw.strip()
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_grid(items: Iterable[str]) -> dict[str, list]:
    """`["beta=10,100", "seed=0:8", "N=1000:5000:2000"]` -> {"beta": [10, 100], "seed": [0..7], ...}.

    Each item is `key=v1,v2,...` (values read as TOML literals) or `key=a:b[:step]`, the integers
    a, a+step, ... < b (end excluded, as Python's range). A key given twice is an error.
    """
    grid: dict[str, list] = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise ValueError(f"--grid {item!r}: expected key=v1,v2,... or key=a:b[:step], e.g. seed=0:8")
        key, raw = (s.strip() for s in item.split("=", 1))
        if not key.isidentifier():
            raise ValueError(f"--grid {item!r}: {key!r} is not a config key")
        if key in grid:
            raise ValueError(
                f"--grid {item!r}: key {key!r} given twice; list its values once, comma separated"
            )
        if re.fullmatch(r"-?\d+:-?\d+(:-?\d+)?", raw):
            a, b, *s = (int(x) for x in raw.split(":"))
            step = s[0] if s else 1
            if step == 0:
                raise ValueError(f"--grid {item!r}: the step of a range must not be 0")
            values: list = list(range(a, b, step))
        else:
            values = [parse_grid_value(v) for v in raw.split(",") if v.strip()]
        if not values:
            raise ValueError(f"--grid {item!r}: no values (a range a:b needs a < b)")
        grid[key] = values
    return grid


def _scalar(v: Any, key: str) -> Any:
    """Grid value -> plain Python scalar (NumPy scalars unwrapped); JSON-able or an error."""
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"grid[{key!r}] values must be numbers, booleans or strings, got {type(v).__name__}")


def check_grid(grid: Any) -> dict[str, list]:
    """A non-empty dict {config key: non-empty list of distinct scalar values}, normalised."""
    if not isinstance(grid, dict) or not grid:
        raise TypeError(f"grid must be a non-empty dict {{key: [values]}}, got {grid!r}")
    out: dict[str, list] = {}
    for key, values in grid.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"grid keys must be config field names, got {key!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            values = [values]
        vals = [_scalar(v, key) for v in values]
        if not vals:
            raise ValueError(f"grid[{key!r}] is empty: give at least one value")
        seen = [json.dumps(v) for v in vals]
        if len(set(seen)) != len(seen):
            raise ValueError(f"grid[{key!r}] has repeated values: {vals}")
        out[key] = vals
    return out


def expand_grid(grid: dict[str, list]) -> list[dict[str, Any]]:
    """All points of the grid, the Cartesian product in key order (the last key varies fastest)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        s = format(v, "g")
        return s if float(s) == v else repr(v)
    return str(v)


def point_key(point: dict[str, Any]) -> str:
    """Readable, file-safe name of a grid point: {"beta": 10.0, "seed": 3} -> "beta=10_seed=3".

    Characters other than letters, digits and `.+-=` become `-`; a name over 120 characters is
    shortened to a prefix plus a hash of the point.
    """
    name = "_".join(f"{k}={_fmt(v)}" for k, v in point.items())
    safe = "_".join(re.sub(r"[^A-Za-z0-9.+=-]", "-", f"{k}={_fmt(v)}") for k, v in point.items())
    if safe != name or len(safe) > 120:
        digest = hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:10]
        safe = f"{safe[:100]}_{digest}"
    return safe


# ----------------------------------------------------------------------------------------- store


class _Store:
    """A sweep store on a local path (pathlib, atomic renames) or an fsspec URL."""

    def __init__(self, store: str | os.PathLike) -> None:
        text = os.fspath(store)
        if not text:
            raise ValueError("store must be a folder path or an fsspec URL, got an empty string")
        self.url = "://" in text
        if self.url:
            import fsspec

            self.fs, self.root = fsspec.core.url_to_fs(text)
            self.root = self.root.rstrip("/")
            self.protocol = text.split("://", 1)[0]
        else:
            self.fs = None
            self.root = str(Path(text).expanduser().absolute())
        self.name = text

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.url else str(Path(self.root) / rel)

    def target(self, rel: str) -> str:
        """What xarray opens: a local path, or a URL."""
        return f"{self.protocol}://{self.path(rel)}" if self.url else self.path(rel)

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel)) if self.url else Path(self.path(rel)).exists()

    def read_text(self, rel: str) -> str:
        if self.url:
            return self.fs.cat_file(self.path(rel)).decode()
        return Path(self.path(rel)).read_text(encoding="utf-8")

    def write_text(self, rel: str, text: str) -> None:
        """Atomic: local temp file + rename; a single-object put on an object store."""
        if self.url:
            self.fs.makedirs(self.path(rel).rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(self.path(rel), text.encode())
        else:
            from .io import atomic_write_text

            atomic_write_text(self.path(rel), text)

    def remove(self, rel: str) -> None:
        p = self.path(rel)
        if self.url:
            if self.fs.exists(p):
                self.fs.rm(p, recursive=True)
        elif Path(p).is_dir():
            import shutil

            shutil.rmtree(p, ignore_errors=True)
        elif Path(p).exists():
            Path(p).unlink()

    def makedirs(self, rel: str) -> None:
        if self.url:
            self.fs.makedirs(self.path(rel), exist_ok=True)
        else:
            Path(self.path(rel)).mkdir(parents=True, exist_ok=True)


def _zarr_rel(key: str) -> str:
    return f"{POINTS_DIR}/{key}.zarr"


def _done_rel(key: str) -> str:
    return f"{POINTS_DIR}/{key}.done"


def is_sweep_store(path: str | os.PathLike) -> bool:
    """True when `path` is a sweep store (it holds a `sweep.json` written by `sweep`)."""
    try:
        st = _Store(path)
        return st.exists(SWEEP_FILE) and json.loads(st.read_text(SWEEP_FILE)).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def _json(obj: Any, indent: int | None = 1) -> str:
    """JSON with inf/nan kept (Python's json reads them back) and NumPy scalars unwrapped."""

    def default(o: Any) -> Any:
        if hasattr(o, "item"):
            return o.item()
        if hasattr(o, "tolist"):
            return o.tolist()
        return str(o)

    return json.dumps(obj, indent=indent, default=default)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------------------------- configs


def _resolve_config(config: Any) -> Any:
    """A pydantic config object; a name or TOML path, or a dict with "experiment", is loaded."""
    from pydantic import BaseModel

    if isinstance(config, BaseModel):
        return config
    if isinstance(config, (str, os.PathLike)):
        from .experiments import load_config

        return load_config(os.fspath(config))
    if isinstance(config, dict):
        from .experiments import REGISTRY

        name = config.get("experiment")
        if name not in REGISTRY:
            raise ValueError(f"config['experiment'] must be one of {sorted(REGISTRY)}, got {name!r}")
        return REGISTRY[name].Config.model_validate(config)
    raise TypeError(
        "config must be an experiment config (pydantic model), an experiment name, a TOML path or a dict, "
        f"got {type(config).__name__}"
    )


def _field_for(Config: type[BaseModel], key: str) -> tuple[str, bool]:
    """The config field a grid key sets: (field, wrap) where wrap means a one-element list.

    `beta` sets the field `beta` when there is one, else `betas` = [value].
    """
    fields = Config.model_fields
    if key in fields:
        return key, False
    if f"{key}s" in fields:
        return f"{key}s", True
    raise ValueError(
        f"grid key {key!r} is not a field of the {getattr(Config, '__name__', 'config')} config "
        f"(fields: {', '.join(fields)})"
    )


def point_config(config: Any, point: dict[str, Any]) -> Any:
    """The config of one grid point, validated again (bad value -> ValueError naming the key)."""
    from pydantic import ValidationError

    Config = type(config)
    update = {}
    for key, value in point.items():
        fname, wrap = _field_for(Config, key)
        update[fname] = [value] if wrap else value
    try:
        return Config.model_validate({**config.model_dump(), **update})
    except ValidationError as err:
        probs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"grid point {point}: invalid config ({probs})") from None


def _config_dict(config: Any, grid: dict[str, list]) -> dict[str, Any]:
    Config = type(config)
    skip = {_field_for(Config, k)[0] for k in grid}
    return {k: v for k, v in config.model_dump().items() if k not in skip}


# ------------------------------------------------------------------------------------------ task


def _default_run(config: Any, workdir: Path | None = None) -> Any:
    """The registered experiment's run; its finished parts are kept in `workdir` for a retry."""
    from .experiments import REGISTRY

    name = getattr(config, "experiment", None)
    if name not in REGISTRY:
        raise ValueError(f"unknown experiment {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name].run(config, workdir, None)


def _scalars(ds: Any) -> dict[str, Any]:
    """The point's one-element numeric variables (t_star, min_w2, ... of one beta) as numbers."""
    out = {}
    for name, var in ds.data_vars.items():
        if var.size == 1 and var.dtype.kind in "fiub":
            out[str(name)] = var.values.reshape(()).item()
    return out


def _summarize(config: Any, ds: Any) -> dict[str, Any] | None:
    """The experiment's own `summarize` (JSON-able), None for an unregistered experiment."""
    try:
        from .experiments import REGISTRY

        name = getattr(config, "experiment", None)
        exp = REGISTRY.get(name) if isinstance(name, str) else None
    except ImportError:
        exp = None
    if exp is None or not hasattr(exp, "summarize"):
        return None
    try:
        return json.loads(_json(exp.summarize(ds), None))
    except Exception as err:  # a summary never fails a finished point
        return {"summary_error": f"{type(err).__name__}: {err}"}


def _cpus() -> int:
    """Cores this process may use (its CPU affinity: a SLURM or container allocation), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _threads_on_host() -> int:
    """Threads of all the Dask workers on this task's host (1 outside a worker or on error)."""
    import inspect

    try:
        from distributed import get_client, get_worker

        host = get_worker().address.split("://")[-1].rsplit(":", 1)[0]
        client = get_client()
        kw = {"n_workers": -1} if "n_workers" in inspect.signature(client.scheduler_info).parameters else {}
        workers = client.scheduler_info(**kw).get("workers", {}).values()
        return max(1, sum(int(w.get("nthreads", 1)) for w in workers if w.get("host") == host))
    except Exception:  # not on a worker, or the scheduler is unreachable: assume alone
        return 1


def _set_threads(torch_threads: int | None) -> int:
    """torch.set_num_threads: the given number, else this host's cores shared by its worker threads."""
    import torch

    n = int(torch_threads) if torch_threads else max(1, _cpus() // _threads_on_host())
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def _write_point_local(st: _Store, ds: Any, key: str) -> bool:
    """Write points/<key>.zarr atomically; False when another attempt got there first."""
    from .io import write_dataset

    final = Path(st.path(_zarr_rel(key)))
    if final.exists():
        return False
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}")
    write_dataset(ds, tmp)  # complete under a private name ...
    try:
        os.rename(tmp, final)  # ... then in place in one step; fails if `final` appeared meanwhile
        return True
    except OSError:
        st.remove(os.path.relpath(tmp, st.root))
        if final.exists():
            return False
        raise


def _write_point_url(st: _Store, ds: Any, key: str) -> bool:
    """Object stores: write under a temporary prefix, move, and let the .done marker commit it."""
    if st.exists(_done_rel(key)):
        return False
    tmp = f"{POINTS_DIR}/.{key}.zarr.{uuid.uuid4().hex[:8]}"
    local = st.protocol in ("file", "local")
    opts = {"auto_mkdir": True} if local else None
    ds.to_zarr(st.target(tmp), mode="w", consolidated=True, zarr_format=2, storage_options=opts)
    if st.exists(_zarr_rel(key)):
        st.remove(_zarr_rel(key))
    st.fs.mv(st.path(tmp), st.path(_zarr_rel(key)), recursive=True)
    return True


def run_point(
    config: Any,
    point: dict[str, Any],
    key: str,
    store: str,
    run_fn: RunFn | None = None,
    torch_threads: int | None = None,
) -> dict[str, Any]:
    """One sweep task (runs on a worker): run the point's config and write its result.

    Writes `points/<key>.zarr` atomically, then `points/<key>.done` (JSON: timing, worker, summary).
    Returns that record. If the point is already complete (another attempt finished first), the
    existing record is returned and nothing is written.
    """
    import xarray as xr

    st = _Store(store)
    if st.exists(_done_rel(key)):
        rec = json.loads(st.read_text(_done_rel(key)))
        rec["reused"] = True
        return rec
    # torch is imported for the registered experiments (they use it); a custom run_fn pays for
    # the import only if torch is already loaded in this worker
    threads = _set_threads(torch_threads) if run_fn is None or "torch" in sys.modules else None
    started, t0 = _now(), time.perf_counter()
    workdir = None if st.url else Path(st.path(f"work/{key}"))
    ds = run_fn(config) if run_fn is not None else _default_run(config, workdir)
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"the experiment of point {key} returned {type(ds).__name__}, not an xarray.Dataset")
    seconds = time.perf_counter() - t0
    ds = ds.copy(deep=False)
    ds.attrs["sweep_key"] = key
    ds.attrs["sweep_point"] = _json(point, None)
    ds.attrs.setdefault("experiment", str(getattr(config, "experiment", "")))
    summary, scalars = _summarize(config, ds), _scalars(ds)
    st.makedirs(POINTS_DIR)
    wrote = (_write_point_url if st.url else _write_point_local)(st, ds, key)
    rec = {
        "key": key,
        "point": point,
        "started": started,
        "finished": _now(),
        "seconds": seconds,
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "torch_threads": threads,
        "scalars": scalars,
        "summary": summary,
    }
    if wrote or not st.exists(_done_rel(key)):
        st.write_text(_done_rel(key), _json(rec))
        if workdir is not None:
            st.remove(f"work/{key}")
    else:
        rec = json.loads(st.read_text(_done_rel(key)))
        rec["reused"] = True
    return rec


# ----------------------------------------------------------------------------------------- sweep


@dataclass
class SweepResult:
    """What a sweep did. `ok` when every grid point is complete; `open()` gives the Dataset."""

    store: str
    keys: list[str]
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and len(self.ran) + len(self.skipped) == len(self.keys)

    def open(self) -> Any:
        return open_sweep(self.store)

    def __str__(self) -> str:
        s = (
            f"sweep {self.store}: {len(self.keys)} points, {len(self.ran)} run, "
            f"{len(self.skipped)} already done, {len(self.failed)} failed ({self.seconds:.1f} s)"
        )
        for key, err in self.failed.items():
            s += f"\n  FAILED {key}: {err.strip().splitlines()[-1] if err.strip() else err}"
        return s


def _merge_grids(old: dict[str, list], new: dict[str, list]) -> dict[str, list]:
    if list(old) != list(new):
        raise ValueError(
            f"the store holds a sweep over {list(old)}, not {list(new)}: use another store (--out) "
            "or the same grid keys in the same order"
        )
    merged = {}
    for k in old:
        seen = {json.dumps(v) for v in old[k]}
        merged[k] = list(old[k]) + [v for v in new[k] if json.dumps(v) not in seen]
    return merged


def _init_store(st: _Store, config: Any, grid: dict[str, list]) -> dict[str, list]:
    """Create or check sweep.json; returns the grid to run (the stored grid extended by `grid`)."""
    cfg = json.loads(_json(_config_dict(config, grid)))
    experiment = str(getattr(config, "experiment", type(config).__name__))
    if st.exists(SWEEP_FILE):
        meta = json.loads(st.read_text(SWEEP_FILE))
        if meta.get("format") != FORMAT:
            raise ValueError(f"store {st.name}: {SWEEP_FILE} is not an attnflow sweep description")
        if meta["experiment"] != experiment or meta["config"] != cfg:
            diff = sorted(
                k for k in set(cfg) | set(meta["config"]) if cfg.get(k, "?") != meta["config"].get(k, "?")
            )
            raise ValueError(
                f"store {st.name} holds a sweep of {meta['experiment']} with another base config "
                f"(differs in: {', '.join(diff) or 'experiment'}); use another store (--out)"
            )
        grid = _merge_grids(meta["grid"], grid)
        if grid == meta["grid"]:
            return grid
    else:
        from .io import provenance

        meta = {"format": FORMAT, "version": VERSION, "experiment": experiment, "config": cfg}
        meta["created"] = _now()
        meta["provenance"] = provenance()
    meta["grid"] = grid
    st.makedirs(POINTS_DIR)
    st.write_text(SWEEP_FILE, _json(meta))
    return grid


def _read_manifest(st: _Store) -> dict[str, dict]:
    if not st.exists(MANIFEST_FILE):
        return {}
    try:
        return json.loads(st.read_text(MANIFEST_FILE)).get("points", {})
    except (json.JSONDecodeError, AttributeError):
        return {}


def _write_manifest(st: _Store, entries: dict[str, dict]) -> None:
    counts = {s: sum(e["status"] == s for e in entries.values()) for s in STATUSES}
    st.write_text(MANIFEST_FILE, _json({"updated": _now(), "counts": counts, "points": entries}))


# what the manifest copies from a point's .done record
_RECORD_KEYS = ("started", "finished", "seconds", "worker", "torch_threads", "scalars", "summary")


def _complete(st: _Store, key: str) -> dict | None:
    """The .done record of a complete point, else None (a stray half-written store is removed)."""
    if st.exists(_done_rel(key)) and st.exists(_zarr_rel(key)):
        try:
            return json.loads(st.read_text(_done_rel(key)))
        except json.JSONDecodeError:
            return {}
    return None


def _clean_temporaries(st: _Store, older_than_s: float = 600.0) -> int:
    """Remove hidden temporaries in points/ left by writes that died; returns how many.

    Only local stores, and only those older than `older_than_s` (a write still under way in a
    task of another, live sweep of the same store is left alone).
    """
    folder = Path(st.path(POINTS_DIR))
    if st.url or not folder.is_dir():
        return 0
    n, now = 0, time.time()
    for p in folder.iterdir():
        if p.name.startswith(".") and now - p.stat().st_mtime > older_than_s:
            st.remove(f"{POINTS_DIR}/{p.name}")
            n += 1
    return n


def _client_for(client: Any, workers: int) -> tuple[Any, Any, int | None, bool]:
    """(client, cluster we own or None, torch threads per task on a local cluster, client is ours)."""
    from distributed import Client, LocalCluster

    if client is None:
        workers = int(workers)
        if workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers}")
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        return Client(cluster), cluster, max(1, _cpus() // workers), True
    if isinstance(client, str):
        return Client(client), None, None, True
    if not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, a scheduler address or None, got {client!r}")
    return client, None, None, False


def sweep(
    config: Any,
    grid: dict[str, list],
    client: Any = None,
    store: str | os.PathLike = "runs/sweep",
    workers: int = 2,
    retries: int = 2,
    progress: bool | Callable[[int, int], None] = True,
    run_fn: RunFn | None = None,
    torch_threads: int | None = None,
) -> SweepResult:
    """Run an experiment at every point of `grid` as Dask tasks; results go to `store`.

    config: an experiment config (pydantic model), an experiment name or TOML path, or a dict.
    grid: {config key: [values]}; `beta` sets `betas=[value]` when the config has `betas`.
    client: None starts a LocalCluster with `workers` processes of one thread each (closed at the
        end); or a `distributed.Client`, or a scheduler address "tcp://host:8786".
    store: a folder or an fsspec URL. Complete points there are skipped; a larger grid over the same
        keys and base config extends the sweep.
    retries: each failing point is resubmitted up to this many times, then marked failed.
    progress: True for a Rich progress bar, False for none, or a callable (done, total).
    run_fn: config -> xarray.Dataset (default: the registered experiment's `run`), a test hook.
    torch_threads: torch threads per task (default: cores // workers on a local cluster; on another
        cluster, the usable cores of the task's host // the threads of all workers on that host).
    Returns a SweepResult (ran, skipped, failed keys); `.ok` is False when a point failed.
    """
    from distributed import as_completed

    config = _resolve_config(config)
    grid = check_grid(grid)
    retries = int(retries)
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    key: str | None  # a grid key, then a finished future's point (None: not ours)
    for key in grid:
        _field_for(type(config), key)
    st = _Store(store)
    grid = _init_store(st, config, grid)
    points = expand_grid(grid)
    keys = [point_key(p) for p in points]
    if len(set(keys)) != len(keys):
        raise ValueError("two grid points have the same name; use distinct values")
    configs = {k: point_config(config, p) for k, p in zip(keys, points, strict=True)}

    manifest = _read_manifest(st)
    _clean_temporaries(st)
    result = SweepResult(store=st.name, keys=keys)
    todo = []
    for key, point in zip(keys, points, strict=True):
        entry = manifest.get(key) or {"attempts": 0}
        entry.update(point=point, path=_zarr_rel(key))
        rec = _complete(st, key)
        if rec is not None:
            entry.update({k: rec[k] for k in _RECORD_KEYS if k in rec})
            entry.update(status="done", error=None)
            result.skipped.append(key)
        else:
            if st.exists(_zarr_rel(key)):  # a store without its .done marker: never trusted
                st.remove(_zarr_rel(key))
            entry.update(status="pending", attempts=0, error=None)
            todo.append(key)
        manifest[key] = entry
    manifest = {k: manifest[k] for k in keys} | {k: v for k, v in manifest.items() if k not in keys}
    _write_manifest(st, manifest)
    if not todo:
        return result

    t0 = time.perf_counter()
    client, cluster, local_threads, own_client = _client_for(client, workers)
    threads = torch_threads or local_threads  # None: each task shares its host's cores
    bar = _progress_bar(progress, len(todo), st.name)
    futures: dict[Any, str] = {}
    last_write = 0.0

    def submit(key: str) -> Any:
        manifest[key]["attempts"] += 1
        manifest[key].update(status="running", submitted=_now())
        fut = client.submit(
            run_point,
            configs[key],
            manifest[key]["point"],
            key,
            st.target("") if st.url else st.root,
            run_fn,
            threads,
            key=f"attnflow-sweep-{key}-{uuid.uuid4().hex[:8]}",
            pure=False,
        )
        futures[fut] = key
        return fut

    try:
        ac = as_completed([submit(k) for k in todo])
        for fut in ac:
            key = futures.pop(fut, None)
            if key is None or manifest[key]["status"] == "done":
                continue
            entry = manifest[key]
            if fut.status == "finished":
                rec = fut.result()
                entry.update({k: rec[k] for k in _RECORD_KEYS if k in rec})
                entry.update(status="done", error=None)
                # a point recomputed after its worker died finds its own .done: it still ran once
                result.ran.append(key)
                bar.advance(1)
            else:
                try:
                    exc = fut.exception()
                    tb = fut.traceback()
                    text = "".join(traceback.format_exception(type(exc), exc, tb)) if exc else fut.status
                except Exception as err:  # e.g. a cancelled future
                    text = f"{type(err).__name__}: {err}"
                entry["error"] = text[-4000:]
                if entry["attempts"] <= retries:
                    ac.add(submit(key))
                else:
                    entry["status"] = "failed"
                    result.failed[key] = text
                    bar.advance(1)
            fut.release()
            if time.monotonic() - last_write > 0.5 or not futures:
                _write_manifest(st, manifest)
                last_write = time.monotonic()
            bar.after(len(result.ran), len(result.failed))
    except BaseException:  # interrupted (Ctrl-C) or a client failure: leave an honest manifest
        for entry_key, entry in manifest.items():
            if entry.get("status") == "running":
                rec = _complete(st, entry_key)
                entry.update(status="pending" if rec is None else "done", error=None)
        _write_manifest(st, manifest)
        try:
            client.cancel(list(futures))
        except Exception:  # the client may be gone already
            pass
        raise
    finally:
        bar.close()
        if own_client:
            client.close()
        if cluster is not None:
            cluster.close()
    _write_manifest(st, manifest)
    result.seconds = time.perf_counter() - t0
    return result


class _Bar:
    """Progress over tasks: a Rich bar, a callable (done, total), or nothing."""

    def __init__(self, progress: Any, total: int, name: str) -> None:
        self.total, self.done, self.callback, self.rich = total, 0, None, None
        if callable(progress):
            self.callback = progress
        elif progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.rich = Progress(
                TextColumn("[bold]sweep[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self.task = self.rich.add_task(name, total=total)
            self.rich.start()

    def advance(self, n: int) -> None:
        self.done += n
        if self.rich is not None:
            self.rich.advance(self.task, n)

    def after(self, ran: int, failed: int) -> None:
        if self.rich is not None and failed:
            self.rich.update(self.task, description=f"({failed} failed)")
        if self.callback is not None:
            self.callback(self.done, self.total)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()


def _progress_bar(progress: Any, total: int, name: str) -> _Bar:
    return _Bar(progress, total, name)


# ------------------------------------------------------------------------------------------ read


def sweep_info(store: str | os.PathLike) -> dict[str, Any]:
    """sweep.json of a store plus its manifest entries (ordered as the grid) and point keys."""
    st = _Store(store)
    if not is_sweep_store(store):
        raise FileNotFoundError(f"{os.fspath(store)} is not a sweep store (no {SWEEP_FILE})")
    meta = json.loads(st.read_text(SWEEP_FILE))
    manifest = _read_manifest(st)
    points = expand_grid(meta["grid"])
    keys = [point_key(p) for p in points]
    entries = {}
    for key, point in zip(keys, points, strict=True):
        e = dict(manifest.get(key) or {"status": "pending", "attempts": 0})
        e["point"] = point
        rec = _complete(st, key)
        if rec is not None:
            e["status"] = "done"
            e.update({k: rec[k] for k in _RECORD_KEYS if k in rec})
        elif e.get("status") in ("done", "running"):
            e["status"] = "pending"
        entries[key] = e
    return {**meta, "keys": keys, "points": points, "entries": entries}


def _prepare_point(ds: Any, point: dict[str, Any]) -> Any:
    """A point's Dataset with every grid key as a new leading dimension of length one."""
    for key in point:
        if key in ds.dims:
            if ds.sizes[key] != 1:
                raise ValueError(
                    f"grid key {key!r} is also a dimension of length {ds.sizes[key]} of the results; "
                    "sweep over it with one value per point"
                )
            ds = ds.squeeze(key, drop=True)
        elif key in ds.coords:
            ds = ds.drop_vars(key)
    ds = ds.expand_dims({k: [v] for k, v in reversed(point.items())})
    return ds.transpose(*point, ...)


def _align_indexes(opened: dict[str, Any], grid: dict[str, list]) -> dict[str, Any]:
    """Points whose index along a non-grid dim differs (e.g. the seeded token subset) but has the same
    length: the index becomes positions 0..n-1 and its values a variable `<dim>_id` over the grid."""
    import numpy as np

    first = next(iter(opened.values()))
    varying = set()
    for ds in opened.values():
        for dim, idx in ds.indexes.items():
            if dim in grid or dim not in first.indexes:
                continue
            if not idx.equals(first.indexes[dim]):
                varying.add(dim)
    sizes_ok = {d for d in varying if len({ds.sizes.get(d) for ds in opened.values()}) == 1}
    if not sizes_ok:
        return opened
    out = {}
    for key, ds in opened.items():
        for dim in sorted(sizes_ok):
            ids = ds[dim].values
            ds = ds.drop_vars(dim).assign_coords({dim: np.arange(ds.sizes[dim])})
            ds[f"{dim}_id"] = ((*grid, dim), ids.reshape((1,) * len(grid) + ids.shape))
        out[key] = ds
    return out


def open_sweep(store: str | os.PathLike) -> Any:
    """The sweep's results as one lazy xarray Dataset with the grid keys as leading dimensions.

    Each complete point is opened lazily (dask arrays); missing or failed points are NaN (their
    variables promoted to float). attrs: "experiment", "config" (base config, JSON), "grid" (JSON),
    "missing" (JSON list of point keys), "complete" (bool). The coordinate `done` (grid dims) says
    which points hold results.
    """
    import numpy as np
    import xarray as xr

    info = sweep_info(store)
    st = _Store(store)
    grid, keys, points = info["grid"], info["keys"], info["points"]
    opened, missing = {}, []
    for key, point in zip(keys, points, strict=True):
        if info["entries"][key]["status"] == "done":
            ds = xr.open_zarr(st.target(_zarr_rel(key)), consolidated=None)
            opened[key] = _prepare_point(ds, point)
        else:
            missing.append(key)
    if not opened:
        raise ValueError(f"sweep store {os.fspath(store)} holds no finished point yet ({len(keys)} pending)")
    opened = _align_indexes(opened, grid)
    template = next(iter(opened.values()))
    pieces = []
    for key, point in zip(keys, points, strict=True):
        if key in opened:
            pieces.append(opened[key])
        else:
            hole = template.copy()
            for name in hole.data_vars:
                hole[name] = xr.full_like(hole[name], np.nan, dtype=np.float64)
            pieces.append(hole.assign_coords({k: [v] for k, v in point.items()}))
    shape = [len(v) for v in grid.values()]
    nested: Any = pieces
    for n in reversed(shape[1:]):
        nested = [nested[i : i + n] for i in range(0, len(nested), n)]
    ds = xr.combine_nested(
        nested,
        concat_dim=list(grid),
        data_vars="all",
        coords="minimal",
        compat="override",
        join="outer",
        combine_attrs="drop",
    )
    done = np.array([k in opened for k in keys]).reshape(shape)
    ds = ds.assign_coords(done=(list(grid), done))
    keep = {k: template.attrs[k] for k in ("experiment", "kernel", "integrator") if k in template.attrs}
    ds.attrs = {
        **keep,
        "experiment": info["experiment"],
        "config": _json(info["config"], None),
        "grid": _json(grid, None),
        "sweep_keys": list(keys),
        "missing": _json(missing, None),
        "complete": not missing,
    }
    return ds


# ------------------------------------------------------------------------------------------ show


def _num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def summary_table(store: str | os.PathLike, max_columns: int = 6) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per grid point with its values, status, attempts, seconds and the
    first `max_columns` one-element variables of its Dataset (t_star, min_w2, ...)."""
    info = sweep_info(store)
    cols: list[str] = []
    for e in info["entries"].values():
        for k, v in (e.get("scalars") or {}).items():
            if k not in cols and isinstance(v, (int, float)) and not isinstance(v, bool):
                cols.append(k)
    cols = cols[:max_columns]
    header = [*info["grid"], "status", "attempts", "seconds", *cols]
    rows = []
    for e in info["entries"].values():
        s = e.get("scalars") or {}
        sec = e.get("seconds")
        rows.append(
            [_num(v) for v in e["point"].values()]
            + [e["status"], str(e.get("attempts", 0)), f"{sec:.1f}" if sec is not None else ""]
            + [_num(s[c]) if c in s else "" for c in cols]
        )
    return header, rows


def show_sweep(store: str | os.PathLike, width: int = 120) -> str:
    """Text summary of a sweep store: counts, then a table over the grid, then failures."""
    import io as _io

    from rich.console import Console
    from rich.table import Table

    info = sweep_info(store)
    counts = {s: 0 for s in STATUSES}
    for e in info["entries"].values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    header, rows = summary_table(store)
    table = Table(title=None, show_lines=False)
    for h in header:
        table.add_column(h, justify="left" if h == "status" else "right")
    for r in rows:
        table.add_row(*r)
    buf = _io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None)
    grid_txt = ", ".join(f"{k}: {len(v)}" for k, v in info["grid"].items())
    total_s = sum(e.get("seconds") or 0.0 for e in info["entries"].values())
    con.print(f"sweep of {info['experiment']}: {len(info['keys'])} points ({grid_txt})")
    con.print(
        f"done {counts['done']}, failed {counts['failed']}, pending {counts['pending'] + counts['running']}; "
        f"compute {total_s:.1f} s"
    )
    con.print(table)
    for key, e in info["entries"].items():
        if e["status"] == "failed" and e.get("error"):
            last = e["error"].strip().splitlines()[-1]
            con.print(f"FAILED {key} after {e.get('attempts', 0)} attempts: {last}")
    return buf.getvalue()
