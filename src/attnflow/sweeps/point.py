"""The task of one grid point, run on a Dask worker: run its config, write its result, commit it.

`run_point` writes `points/<key>.zarr` atomically, then the `.done` marker that commits it (its
record: timing, worker, scalars, summary, the digests of the point's input files), whose SHA-256 the
zarr store holds; a retry reuses the finished parts the experiment kept in `work/<key>/`. xarray and
torch are imported inside the functions.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import experiment_name
from .store import (
    POINTS_DIR,
    RECORD_ATTR,
    Store,
    as_read_back,
    done_rel,
    now,
    read_record,
    record_digest,
    work_rel,
    write_json,
    zarr_rel,
)

if TYPE_CHECKING:
    import xarray as xr
    from pydantic import BaseModel

    from ..experiments import Experiment
    from .grid import Scalar

__all__ = ["RunFn", "cpus", "run_point", "set_threads", "threads_on_host", "worker_device"]

RunFn = Callable[[Any], Any]  # config (a pydantic model) -> xarray.Dataset


# --------------------------------------------------------------------------------------- threads


def cpus() -> int:
    """Cores this process may use (its CPU affinity: a SLURM or container allocation), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def threads_on_host() -> int:
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


def set_threads(torch_threads: int | None) -> int:
    """torch.set_num_threads: the given number, else this host's cores shared by its worker threads."""
    import torch

    n = int(torch_threads) if torch_threads else max(1, cpus() // threads_on_host())
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def worker_device(config: BaseModel) -> BaseModel:
    """One GPU per Dask worker: a config asking for device "cuda" runs on cuda:k, k the worker's
    number (its name on a LocalCluster, else a hash of its address) modulo the GPUs of its host.
    Other configs, and hosts with one GPU or none, are returned unchanged."""
    if getattr(config, "device", None) != "cuda":
        return config
    try:
        import torch
        from distributed import get_worker

        n = torch.cuda.device_count()
        if n < 2:
            return config
        worker = get_worker()
        name = str(worker.name)
        k = int(name) if name.isdigit() else zlib.crc32(worker.address.encode())
    except (ImportError, ValueError):  # not on a worker
        return config
    return config.model_copy(update={"device": f"cuda:{k % n}"})


# ------------------------------------------------------------------------------------ the result


def _experiment(config: BaseModel) -> Experiment | None:
    """The registered experiment of the config (`REGISTRY[config.experiment]`), None if none."""
    from ..experiments import REGISTRY

    return REGISTRY.get(experiment_name(config))


def _default_run(config: BaseModel, workdir: Path | None) -> object:
    """The registered experiment's run; its finished parts are kept in `workdir` for a retry.

    Not `run_experiment`: it would also write the result, its summary and config into `workdir`
    (about a second per point, measured on a small concentration point), all thrown away.
    """
    exp = _experiment(config)
    if exp is None:
        raise ValueError(f"unknown experiment {experiment_name(config)!r}: pass run_fn to run this config")
    return exp.run(config, workdir, None)


def _scalars(ds: xr.Dataset) -> dict[str, object]:
    """The point's one-element variables (t_star, min_w2, status, ... of one beta) as numbers and
    strings."""
    out = {}
    for name, var in ds.data_vars.items():
        if var.size == 1 and var.dtype.kind in "fiubU":
            out[str(name)] = var.values.reshape(()).item()
    return out


def _summarize(config: BaseModel, ds: xr.Dataset) -> dict[str, Any] | None:
    """The experiment's own `summarize` (JSON-able), None for an unregistered experiment."""
    exp = _experiment(config)
    if exp is None or not hasattr(exp, "summarize"):
        return None
    try:
        return as_read_back(exp.summarize(ds))
    except Exception as err:  # a summary never fails a finished point
        return {"summary_error": f"{type(err).__name__}: {err}"}


def _write_local(st: Store, ds: xr.Dataset, key: str) -> bool:
    """Write points/<key>.zarr atomically; False when another attempt got there first."""
    from ..io import write_dataset

    final = Path(st.path(zarr_rel(key)))
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


def _write_url(st: Store, ds: xr.Dataset, key: str) -> bool:
    """Object stores: write under a temporary prefix (with its checksums), move, and let the .done
    marker commit it."""
    from ..io import write_checksums

    if st.exists(done_rel(key)):
        return False
    tmp = f"{POINTS_DIR}/.{key}.zarr.{uuid.uuid4().hex[:8]}"
    local = st.protocol in ("file", "local")
    opts = {"auto_mkdir": True} if local else None
    # xarray types storage_options as dict[str, str]; fsspec takes any value (auto_mkdir=True)
    ds.to_zarr(  # type: ignore[call-overload]
        st.target(tmp), mode="w", consolidated=True, zarr_format=2, storage_options=opts
    )
    write_checksums(st.target(tmp))
    if st.exists(zarr_rel(key)):
        st.remove(zarr_rel(key))
    st.fs.mv(st.path(tmp), st.path(zarr_rel(key)), recursive=True)
    return True


def _reused(st: Store, key: str, workdir: Path | None) -> dict[str, Any]:
    """The record of a point another attempt committed first; this attempt's parts are removed."""
    if workdir is not None:
        st.remove(work_rel(key))
    return {**read_record(st, key), "reused": True}


# -------------------------------------------------------------------------------------- the task


def _compute(config: BaseModel, key: str, run_fn: RunFn | None, workdir: Path | None) -> xr.Dataset:
    """The point's Dataset, run by `run_fn` or the registered experiment."""
    import xarray as xr

    ds = run_fn(config) if run_fn is not None else _default_run(config, workdir)
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"the experiment of point {key} returned {type(ds).__name__}, not an xarray.Dataset")
    return ds


def _label(ds: xr.Dataset, config: BaseModel, key: str, point: Mapping[str, Scalar]) -> xr.Dataset:
    """The Dataset with the point it belongs to in its attrs."""
    from ..io import to_json

    ds = ds.copy(deep=False)
    ds.attrs["sweep_key"] = key
    ds.attrs["sweep_point"] = to_json(point)
    ds.attrs.setdefault("experiment", experiment_name(config))
    return ds


def run_point(
    config: BaseModel,
    point: Mapping[str, Scalar],
    key: str,
    store: str,
    run_fn: RunFn | None = None,
    torch_threads: int | None = None,
) -> dict[str, Any]:
    """One sweep task (runs on a worker): run the point's config and write its result.

    Writes `points/<key>.zarr` atomically, with the SHA-256 of its record in its attrs, then
    `points/<key>.done` (JSON: timing, worker, summary, input digests). Returns that record. If the
    point is already complete (another attempt finished first), the existing record is returned and
    nothing is written.
    """
    from ..experiments.parts import input_digests

    st = Store(store)
    workdir = None if st.url else Path(st.path(work_rel(key)))
    if st.exists(done_rel(key)):
        return _reused(st, key, workdir)
    # torch is imported for the registered experiments (they use it); a custom run_fn pays for
    # the import only if torch is already loaded in this worker
    threads = set_threads(torch_threads) if run_fn is None or "torch" in sys.modules else None
    config = worker_device(config)
    started, t0 = now(), time.perf_counter()
    ds = _label(_compute(config, key, run_fn, workdir), config, key, point)
    seconds = time.perf_counter() - t0
    rec = {"key": key, "point": point, "started": started, "finished": now(), "seconds": seconds}
    rec |= {"worker": f"{socket.gethostname()}:{os.getpid()}", "torch_threads": threads}
    rec |= {"device": getattr(config, "device", None), "inputs": input_digests(config)}
    rec |= {"scalars": _scalars(ds), "summary": _summarize(config, ds)}
    ds.attrs[RECORD_ATTR] = record_digest(rec)  # of the record as its .done file gives it back
    st.makedirs(POINTS_DIR)
    wrote = (_write_url if st.url else _write_local)(st, ds, key)
    if not wrote and st.exists(done_rel(key)):
        return _reused(st, key, workdir)
    write_json(st, done_rel(key), rec)
    if workdir is not None:
        st.remove(work_rel(key))
    return rec
