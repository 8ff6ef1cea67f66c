"""Reading a sweep back: its description and point statuses, the combined Dataset, a text summary.

Nothing here writes to the store: a sweep may be read while it runs. xarray and Rich are imported
inside the functions.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._text import format_value
from .grid import Scalar, expand_grid, point_keys
from .store import (
    STATUSES,
    SWEEP_FILE,
    Store,
    current_entry,
    is_sweep_store,
    read_manifest,
    read_meta,
    zarr_rel,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import xarray as xr

    from ..experiments.tables import Block, Document

__all__ = ["open_sweep", "show_sweep", "summary_table", "sweep_document", "sweep_info", "verify_sweep"]


def sweep_info(store: str | os.PathLike) -> dict[str, Any]:
    """sweep.json of a store plus its manifest entries (ordered as the grid) and point keys."""
    if not is_sweep_store(store):
        raise FileNotFoundError(f"{os.fspath(store)} is not a sweep store (no {SWEEP_FILE})")
    st = Store(store)
    meta, manifest = read_meta(st), read_manifest(st)
    points = expand_grid(meta["grid"])
    keys = point_keys(points)
    entries = {k: current_entry(st, manifest.get(k), k, p) for k, p in zip(keys, points, strict=True)}
    return {**meta, "keys": keys, "points": points, "entries": entries}


# ------------------------------------------------------------------------------------ Dataset


def _prepare_point(ds: xr.Dataset, point: dict[str, Scalar]) -> xr.Dataset:
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


def _differing_dims(opened: dict[str, xr.Dataset], grid: dict[str, list]) -> set[str]:
    """Non-grid dims whose index differs between points but whose length does not."""
    first = next(iter(opened.values()))
    differ = {
        dim
        for ds in opened.values()
        for dim, idx in ds.indexes.items()
        if dim not in grid and dim in first.indexes and not idx.equals(first.indexes[dim])
    }
    return {d for d in differ if len({ds.sizes.get(d) for ds in opened.values()}) == 1}


def _align_indexes(opened: dict[str, xr.Dataset], grid: dict[str, list]) -> dict[str, xr.Dataset]:
    """Points whose index along a non-grid dim differs (e.g. the seeded token subset) but has the same
    length: the index becomes positions 0..n-1 and its values a variable `<dim>_id` over the grid."""
    import numpy as np

    dims = sorted(_differing_dims(opened, grid))
    out = {}
    for key, ds in opened.items():
        for dim in dims:
            ids = ds[dim].values
            ds = ds.drop_vars(dim).assign_coords({dim: np.arange(ds.sizes[dim])})
            ds[f"{dim}_id"] = ((*grid, dim), ids.reshape((1,) * len(grid) + ids.shape))
        out[key] = ds
    return out


def _hole(template: xr.Dataset, point: Mapping[str, Scalar]) -> xr.Dataset:
    """A missing point: the template's variables as NaN (promoted to float) at the point's coords."""
    import numpy as np
    import xarray as xr

    hole = template.copy()
    for name in hole.data_vars:
        hole[name] = xr.full_like(hole[name], np.nan, dtype=np.float64)
    return hole.assign_coords({k: [v] for k, v in point.items()})


def _combine(pieces: list[xr.Dataset], grid: dict[str, list]) -> xr.Dataset:
    """One Dataset from the points' Datasets in grid order (the last key varies fastest)."""
    import xarray as xr

    nested: Any = pieces
    for n in reversed([len(v) for v in grid.values()][1:]):
        nested = [nested[i : i + n] for i in range(0, len(nested), n)]
    return xr.combine_nested(
        nested,
        concat_dim=list(grid),
        data_vars="all",
        coords="minimal",
        compat="override",
        join="outer",
        combine_attrs="drop",
    )


def open_sweep(store: str | os.PathLike) -> xr.Dataset:
    """The sweep's results as one lazy xarray Dataset with the grid keys as leading dimensions.

    Each complete point is opened lazily (dask arrays), after its files passed their checksums;
    missing or failed points are NaN (their variables promoted to float).

    Parameters
    ----------
    store : str or os.PathLike
        The sweep store.

    Returns
    -------
    xarray.Dataset
        attrs: "experiment", "config" (base config, JSON), "grid" (JSON), "missing" (JSON list of
        point keys), "complete" (bool). The coordinate `done` (grid dims) says which points hold
        results.

    Raises
    ------
    StoreError
        Naming the file, when a committed point fails its checksums (rerun the sweep to recompute it).
    """
    import numpy as np
    import xarray as xr

    from ..io import StoreError, to_json

    info = sweep_info(store)
    st = Store(store)
    grid, keys, points = info["grid"], info["keys"], info["points"]
    damaged = [e["damaged"] for e in info["entries"].values() if e.get("damaged")]
    if damaged:
        more = f" ({len(damaged) - 1} more point(s) too)" if len(damaged) > 1 else ""
        fix = "rerun the sweep to recompute the point"
        raise StoreError(damaged[0]["file"], f"{damaged[0]['problem']}; {fix}{more}")
    opened = {
        key: _prepare_point(xr.open_zarr(st.target(zarr_rel(key)), consolidated=None), point)
        for key, point in zip(keys, points, strict=True)
        if info["entries"][key]["status"] == "done"
    }
    if not opened:
        raise ValueError(f"sweep store {os.fspath(store)} holds no finished point yet ({len(keys)} pending)")
    opened = _align_indexes(opened, grid)
    template = next(iter(opened.values()))
    missing = [k for k in keys if k not in opened]
    pieces = [opened[k] if k in opened else _hole(template, p) for k, p in zip(keys, points, strict=True)]
    ds = _combine(pieces, grid)
    done = np.array([k in opened for k in keys]).reshape([len(v) for v in grid.values()])
    ds = ds.assign_coords(done=(list(grid), done))
    keep = {k: template.attrs[k] for k in ("experiment", "kernel", "integrator") if k in template.attrs}
    ds.attrs = {
        **keep,
        "experiment": info["experiment"],
        "config": to_json(info["config"]),
        "grid": to_json(grid),
        "sweep_keys": list(keys),
        "missing": to_json(missing),
        "complete": not missing,
    }
    return ds


# -------------------------------------------------------------------------------------- text


#: the columns of a sweep's table after the grid keys: the point's state, its attempts and seconds
POINT_COLUMNS = ("run", "attempts", "seconds")


def summary_table(store: str | os.PathLike, max_columns: int = 6) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per grid point with its values, its state (column "run": done, failed,
    pending), attempts, seconds, then its results: the one-element variables of its Dataset, those
    the experiment names first (`Experiment.sweep_columns`, e.g. concentration's status and
    resolution ratio: whether a t* is a result at all), at least `max_columns` of them."""
    return _table(sweep_info(store), max_columns)


def _first_columns(experiment: str) -> tuple[str, ...]:
    """The experiment's sweep_columns (none for an experiment attnflow does not know)."""
    from ..experiments import get_experiment

    try:
        return get_experiment(experiment).sweep_columns
    except ValueError:  # a run_fn's config, not a registered experiment
        return ()


def _table(info: dict[str, Any], max_columns: int) -> tuple[list[str], list[list[str]]]:
    seen: list[str] = []
    for e in info["entries"].values():
        for k, v in (e.get("scalars") or {}).items():
            if k not in seen and isinstance(v, int | float | str) and not isinstance(v, bool):
                seen.append(k)
    first = [c for c in _first_columns(info["experiment"]) if c in seen]
    cols = (first + [c for c in seen if c not in first])[: max(max_columns, len(first))]
    header = [*info["grid"], *POINT_COLUMNS, *cols]
    rows = []
    for e in info["entries"].values():
        s = e.get("scalars") or {}
        sec = e.get("seconds")
        rows.append(
            [format_value(v) for v in e["point"].values()]
            + [e["status"], str(e.get("attempts", 0)), f"{sec:.1f}" if sec is not None else ""]
            + [format_value(s[c]) if c in s else "" for c in cols]
        )
    return header, rows


def sweep_document(store: str | os.PathLike) -> Document:
    """A sweep store as a document of the table model (`attnflow.experiments.tables`): its counts,
    the table over the grid (`summary_table`), its failed and damaged points; drawn by `show_sweep`
    and `attnflow show` like a run's summary."""
    from ..experiments.tables import Document, Prose, Section, Table

    info = sweep_info(store)
    counts = {s: 0 for s in STATUSES}
    for e in info["entries"].values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    header, rows = _table(info, 6)
    grid_txt = ", ".join(f"{k}: {len(v)}" for k, v in info["grid"].items())
    total_s = sum(e.get("seconds") or 0.0 for e in info["entries"].values())
    head = (
        f"done {counts['done']}, failed {counts['failed']}, pending {counts['pending'] + counts['running']}; "
        f"compute {total_s:.1f} s"
    )
    blocks: list[Block] = [Prose((head,)), Table(tuple(header), tuple(tuple(r) for r in rows))]
    problems = [_problem(key, e) for key, e in info["entries"].items()]
    if any(problems):
        blocks.append(Prose(tuple(p for p in problems if p)))
    title = f"sweep of {info['experiment']}: {len(info['keys'])} points ({grid_txt})"
    return Document(title, (Section("", tuple(blocks)),))


def _problem(key: str, e: dict[str, Any]) -> str:
    """What went wrong with a point (failed, damaged), or ""."""
    if e.get("damaged"):
        dmg = e["damaged"]
        return f"DAMAGED {key}: {dmg['file']}: {dmg['problem']} (a rerun of the sweep recomputes it)"
    if e["status"] == "failed" and e.get("error"):
        last = e["error"].strip().splitlines()[-1]
        return f"FAILED {key} after {e.get('attempts', 0)} attempts: {last}"
    return ""


def show_sweep(store: str | os.PathLike, width: int = 120) -> str:
    """Text summary of a sweep store (`sweep_document`) for a terminal `width` columns wide: its table
    fitted to the width as `attnflow show` fits a run's (attnflow.experiments.render.to_terminal)."""
    import io as _io

    from rich.console import Console

    from ..experiments.render import to_terminal

    buf = _io.StringIO()
    to_terminal(
        sweep_document(store), Console(file=buf, width=width, force_terminal=False, color_system=None)
    )
    return buf.getvalue()


def verify_sweep(store: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(problems, notes) of a sweep store: its sweep.json, each committed point against its checksums
    (and its .done record against the checksum its store holds), uncommitted points, leftovers of
    unfinished points, a live lock, a lock that is no regular file and links out of the store.
    FileNotFoundError when `store` is not a sweep store; a damaged sweep.json is the one problem."""
    from ..io.lock import lock_holder
    from .grid import SweepError
    from .store import MANIFEST_FILE, WORK_DIR, check_point, done_rel, read_json

    if not is_sweep_store(store):
        raise FileNotFoundError(f"{os.fspath(store)} is not a sweep store (no {SWEEP_FILE})")
    st = Store(store)
    try:
        meta = read_meta(st)
    except SweepError as err:
        return [err.problem], []
    problems, notes = [], []
    keys = point_keys(expand_grid(meta["grid"]))
    n_done = 0
    for key in keys:
        rec, damage = check_point(st, key)
        if damage is not None:
            problems.append(f"{damage['file']}: {damage['problem']} (point {key}; a rerun recomputes it)")
        elif rec is not None:
            n_done += 1
        elif st.exists(zarr_rel(key)) and not st.exists(done_rel(key)):
            notes.append(f"{st.path(zarr_rel(key))}: not committed (no .done); a rerun recomputes it")
        if rec is not None and st.exists(f"{WORK_DIR}/{key}"):
            notes.append(f"{st.path(f'{WORK_DIR}/{key}')}: parts left by a second attempt; safe to delete")
    if st.exists(MANIFEST_FILE):
        try:
            read_json(st, MANIFEST_FILE)
        except ValueError:
            notes.append(f"{st.path(MANIFEST_FILE)}: not JSON; the next sweep rebuilds it")
    if not st.url and (holder := lock_holder(st.root)) is not None:
        from ..io.lock import describe

        notes.append(f"a sweep is running on this store: {describe(holder)}")
    if not st.url:
        from .store import links_problem

        if (problem := links_problem(st.root)) is not None:
            problems.append(problem)
    notes.append(f"{n_done} of {len(keys)} points complete and verified")
    return problems, notes
