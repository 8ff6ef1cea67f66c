"""The run loop of a sweep: check the input, plan against the store, submit, collect, finish.

One Dask task per grid point that is not yet complete; a failing point is resubmitted `retries`
times, then reported as failed, never dropped. Only this client writes the manifest, and it leaves
it honest whatever stops the loop (Ctrl-C included): running points go back to pending.
The config, the grid (its size first: `check_grid_size`) and the store's location are checked
before anything is written; a local store is locked for the duration of the sweep (one client at a
time), and one holding a symbolic link out of it is refused. The grid is iterated, never held as
configs: a point's config is made when its task is submitted, and at most SUBMIT_WINDOW tasks are
in flight. A committed point that fails its checksums, or whose input files changed since it was
computed, is recomputed, with a warning naming it.
Dask is imported inside the functions.
"""

from __future__ import annotations

import itertools
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ._cluster import client_for, close_cluster
from .config import base_config, experiment_name, field_for, point_config, point_warnings, resolve_config
from .grid import SweepError, check_grid, check_grid_size, iter_grid, point_keys
from .point import RunFn, run_point
from .progress import ProgressBar
from .read import open_sweep
from .store import (
    STORE_FILES,
    SWEEP_FILE,
    Store,
    clean_temporaries,
    complete,
    copy_record,
    current_entry,
    done_rel,
    extend_meta,
    links_problem,
    now,
    read_manifest,
    read_record,
    write_manifest,
    write_meta,
    zarr_rel,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import xarray as xr
    from distributed import Client, Future
    from pydantic import BaseModel

    from .config import ConfigLike
    from .grid import Scalar

__all__ = ["SweepResult", "sweep"]

MANIFEST_EVERY_S = 0.5  # the manifest is rewritten at most this often while tasks finish
SUBMIT_WINDOW = 1000  # tasks in flight at most: more are submitted as these finish


@dataclass
class SweepResult:
    """What a sweep did. `ok` when every grid point is complete; `open()` gives the Dataset."""

    store: str
    keys: list[str]
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and len(self.ran) + len(self.skipped) == len(self.keys)

    def open(self) -> xr.Dataset:
        return open_sweep(self.store)

    def __str__(self) -> str:
        s = (
            f"sweep {self.store}: {len(self.keys)} points, {len(self.ran)} run, "
            f"{len(self.skipped)} already done, {len(self.failed)} failed ({self.seconds:.1f} s)"
        )
        for key, err in self.failed.items():
            s += f"\n  FAILED {key}: {err.strip().splitlines()[-1] if err.strip() else err}"
        for w in self.warnings:
            s += f"\n  warning: {w}"
        return s


@dataclass
class _Plan:
    """The grid points against the store: the base config, the manifest (each entry has its point),
    what is left to run, the points' config warnings (each once)."""

    store: Store
    keys: list[str]
    config: BaseModel
    manifest: dict[str, dict]
    todo: list[str]
    skipped: list[str]
    damaged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Tasks:
    """The client's view of the running tasks."""

    plan: _Plan
    client: Client
    run_fn: RunFn | None
    threads: int | None
    retries: int
    result: SweepResult
    bar: ProgressBar
    futures: dict[Future, str] = field(default_factory=dict)
    last_write: float = 0.0


# ---------------------------------------------------------------------------------- before Dask


def _validate(
    config: ConfigLike, grid: object, retries: int, yes: bool
) -> tuple[BaseModel, dict[str, list | range], int]:
    """(config object, normalised grid, retries), or an error naming the bad argument; a grid above
    the size a sweep takes (without `yes`, above CONFIRM_POINTS) is refused before any point is made,
    then the config of every point is checked, one point at a time."""
    config = resolve_config(config)
    grid = check_grid(grid)
    retries = int(retries)
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    for key in grid:
        field_for(type(config), key)
    check_grid_size(grid, yes)
    point_keys(iter_grid(grid))
    for p in iter_grid(grid):
        point_config(config, p)
    return config, grid, retries


def _check_location(st: Store) -> None:
    """A local store must be a new or empty folder, or a sweep store, and writable, without links out
    of it (SweepError)."""
    if st.url:
        return
    root = Path(st.root)
    if root.exists() and not root.is_dir():
        raise SweepError("store", st.name, "exists and is not a folder")
    if root.is_dir() and (problem := links_problem(root)) is not None:
        raise SweepError("store", st.name, problem)
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SweepError("store", st.name, f"cannot be written ({existing} is not writable)")
    if not root.exists() or (root / SWEEP_FILE).exists():
        return
    other = sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and p.name not in STORE_FILES)
    if other:
        listed = ", ".join(other[:4]) + (f" and {len(other) - 4} more" if len(other) > 4 else "")
        raise SweepError(
            "store", st.name, f"is not empty and not a sweep store (it holds {listed}); use a new folder"
        )


@contextmanager
def _locked(st: Store, warnings: list[str]) -> Iterator[None]:
    """Hold the lock of a local store (a second client gets SweepError naming the holder); a lock
    taken over from a client that died adds a warning."""
    from ..io.lock import LockedError, folder_lock

    with ExitStack() as stack:
        if not st.url:
            Path(st.root).mkdir(parents=True, exist_ok=True)
            try:
                stack.enter_context(folder_lock(st.root, on_stale=warnings.append))
            except LockedError as err:
                raise SweepError("store", st.name, err.problem) from None
        yield


def _plan(st: Store, config: BaseModel, grid: dict[str, list | range], yes: bool) -> _Plan:
    """Check the store against the sweep, extend its grid, and mark each point done or pending.

    The extended grid is sized (`check_grid_size`) and every point's config validated before
    anything is written to the store.
    """
    meta, changed = extend_meta(st, experiment_name(config), base_config(config, grid), grid)
    check_grid_size(meta["grid"], yes)
    keys = point_keys(iter_grid(meta["grid"]))
    warned = point_warnings(point_config(config, p) for p in iter_grid(meta["grid"]))  # each checked
    if changed:
        write_meta(st, meta)
    old = read_manifest(st)
    clean_temporaries(st)
    plan = _Plan(st, keys, config, {}, [], [], warnings=warned)
    for key, point in zip(keys, iter_grid(meta["grid"]), strict=True):
        entry = current_entry(st, old.get(key), key, point)
        plan.manifest[key] = entry
        if entry["status"] == "done":
            stale = _stale_inputs(st, key, config, point)
            if stale is None:
                plan.skipped.append(key)
                continue
            plan.damaged.append(f"point {key}: {stale}; it is recomputed")
        elif damage := entry.pop("damaged", None):  # committed, but it cannot be trusted
            plan.damaged.append(f"{damage['file']}: {damage['problem']}; point {key} is recomputed")
        st.remove(done_rel(key))
        st.remove(zarr_rel(key))  # a store without its .done marker is never trusted
        entry.update(status="pending", attempts=0, error=None)
        plan.todo.append(key)
    plan.manifest |= {k: v for k, v in old.items() if k not in plan.manifest}  # points of no grid now
    write_manifest(st, plan.manifest)
    return plan


def _stale_inputs(st: Store, key: str, config: BaseModel, point: Mapping[str, Scalar]) -> str | None:
    """Why a complete point is not what the sweep computes now (its input files changed), or None."""
    from ..experiments.parts import input_digests

    before = read_record(st, key).get("inputs")
    now = input_digests(point_config(config, point))
    if before == now:
        return None
    changed = sorted(k for k in {*(before or {}), *now} if (before or {}).get(k) != now.get(k))
    return f"the content of its input ({', '.join(changed)}) has changed since it was computed"


# ---------------------------------------------------------------------------------- on Dask


def _submit(tasks: _Tasks, key: str) -> Future:
    """One more attempt at a point, as a Dask task."""
    st, entry = tasks.plan.store, tasks.plan.manifest[key]
    entry["attempts"] += 1
    entry.update(status="running", submitted=now())
    fut = tasks.client.submit(
        run_point,
        point_config(tasks.plan.config, entry["point"]),
        entry["point"],
        key,
        st.target("") if st.url else st.root,
        tasks.run_fn,
        tasks.threads,
        key=f"attnflow-sweep-{key}-{uuid.uuid4().hex[:8]}",
        pure=False,
    )
    tasks.futures[fut] = key
    return fut


def _error_text(fut: Future) -> str:
    """The traceback of a failed task (or why there is none)."""
    try:
        exc = fut.exception()
        tb = fut.traceback()
        return "".join(traceback.format_exception(type(exc), exc, tb)) if exc else str(fut.status)
    except Exception as err:  # e.g. a cancelled future
        return f"{type(err).__name__}: {err}"


def _failed(tasks: _Tasks, key: str, fut: Future) -> bool:
    """Record a failed attempt; True when the point gets another one."""
    entry, text = tasks.plan.manifest[key], _error_text(fut)
    entry["error"] = text[-4000:]
    if entry["attempts"] <= tasks.retries:
        return True
    entry["status"] = "failed"
    tasks.result.failed[key] = text
    tasks.bar.advance(1)
    return False


def _collect(tasks: _Tasks) -> None:
    """Wait for every task; record each result, resubmit failures, keep the manifest current."""
    from distributed import as_completed

    plan = tasks.plan
    waiting = iter(plan.todo)
    ac = as_completed([_submit(tasks, k) for k in itertools.islice(waiting, SUBMIT_WINDOW)])
    for fut in ac:
        key = tasks.futures.pop(fut, None)
        if key is not None and plan.manifest[key]["status"] != "done":
            if fut.status == "finished":
                copy_record(plan.manifest[key], fut.result())
                # a point recomputed after its worker died finds its own .done: it still ran once
                tasks.result.ran.append(key)
                tasks.bar.advance(1)
            elif _failed(tasks, key, fut):
                ac.add(_submit(tasks, key))
        for nxt in itertools.islice(waiting, max(0, SUBMIT_WINDOW - len(tasks.futures))):
            ac.add(_submit(tasks, nxt))  # the window topped up as tasks leave it
        fut.release()
        if time.monotonic() - tasks.last_write > MANIFEST_EVERY_S or not tasks.futures:
            write_manifest(plan.store, plan.manifest)
            tasks.last_write = time.monotonic()
        tasks.bar.after(len(tasks.result.failed))


def _stopped(tasks: _Tasks) -> None:
    """After an interruption: running points back to pending (or done if committed), tasks cancelled."""
    st, manifest = tasks.plan.store, tasks.plan.manifest
    for key, entry in manifest.items():
        if entry.get("status") == "running":
            rec = complete(st, key)
            if rec is None:
                entry.update(status="pending", error=None)
            else:
                copy_record(entry, rec)
    write_manifest(st, manifest)
    try:
        tasks.client.cancel(list(tasks.futures))
    except Exception:  # the client may be gone already
        pass


# ---------------------------------------------------------------------------------------- sweep


def sweep(
    config: ConfigLike,
    grid: Mapping[str, object],
    client: Client | str | None = None,
    store: str | os.PathLike = "runs/sweep",
    workers: int = 2,
    retries: int = 2,
    progress: bool | Callable[[int, int], None] | None = True,
    run_fn: RunFn | None = None,
    torch_threads: int | None = None,
    yes: bool = False,
) -> SweepResult:
    """Run an experiment at every point of `grid` as Dask tasks; results go to `store`.

    Parameters
    ----------
    config : pydantic model, str or dict
        An experiment config, an experiment name or TOML path, or a dict.
    grid : dict
        {config key: [values]}; `beta` sets `betas=[value]` when the config has `betas`.
    client : optional
        None starts a LocalCluster with `workers` processes of one thread each (closed at the end); or
        a `distributed.Client`, or a scheduler address "tcp://host:8786".
    store : str or os.PathLike
        A folder or an fsspec URL. Complete points there are skipped; a larger grid over the same keys
        and base config extends the sweep. retries: each failing point is resubmitted up to this many
        times, then marked failed.
    progress : bool or callable
        True for a progress bar (tqdm's notebook bar in Jupyter, Rich on stderr elsewhere), False or
        None for none, or a callable (done, total). run_fn: config -> xarray.Dataset (default: the
        registered experiment's `run`), a test hook.
    torch_threads : int, optional
        Torch threads per task (default: cores // workers on a local cluster; on another cluster, the
        usable cores of the task's host // the threads of all workers on that host).
    yes : bool
        Run a grid of more than CONFIRM_POINTS points (`attnflow.sweeps.grid`); without it such a grid
        is a SweepError giving its count and estimated store size. Above MAX_POINTS: refused.

    Returns
    -------
    SweepResult
        The ran, skipped and failed keys; `.ok` is False when a point failed.
    """
    config, grid, retries = _validate(config, grid, retries, yes)
    st = Store(store)
    _check_location(st)
    warnings: list[str] = []
    with _locked(st, warnings):
        plan = _plan(st, config, grid, yes)
        return _sweep(plan, client, workers, retries, progress, run_fn, torch_threads, warnings)


def _sweep(
    plan: _Plan,
    client: Client | str | None,
    workers: int,
    retries: int,
    progress: bool | Callable[[int, int], None] | None,
    run_fn: RunFn | None,
    torch_threads: int | None,
    warnings: list[str],
) -> SweepResult:
    """The sweep of its plan, on its checked, locked store."""
    result = SweepResult(store=plan.store.name, keys=plan.keys, skipped=plan.skipped)
    result.warnings = [*warnings, *plan.damaged, *plan.warnings]
    if not plan.todo:
        return result
    t0 = time.perf_counter()
    dask_client, cluster, local_threads, own_client = client_for(client, workers)
    bar = ProgressBar(progress, len(plan.todo), plan.store.name)
    # torch_threads None on another cluster: each task shares its host's cores
    tasks = _Tasks(plan, dask_client, run_fn, torch_threads or local_threads, retries, result, bar)
    finished = False
    try:
        _collect(tasks)
        finished = True
    except BaseException:  # interrupted (Ctrl-C) or a client failure: leave an honest manifest
        _stopped(tasks)
        raise
    finally:
        bar.close()
        if own_client:
            dask_client.close()
        if cluster is not None:
            close_cluster(cluster, graceful=finished)
    write_manifest(plan.store, plan.manifest)
    result.seconds = time.perf_counter() - t0
    return result
