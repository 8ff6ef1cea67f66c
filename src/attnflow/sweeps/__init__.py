"""Parameter sweeps on Dask: a grid of experiment configs, one task per point, resumable.

    from attnflow.sweeps import sweep, open_sweep
    res = sweep(config, {"beta": [10, 100], "seed": [0, 1]}, store="runs/sweep")
    ds = open_sweep("runs/sweep")          # lazy Dataset over (beta, seed, ...)

A rerun of the same sweep skips the complete points; a failing point is retried `retries` times and
then reported as failed, never dropped. The store's layout is in `attnflow.sweeps.store`.

Modules: `grid` (parse, check, expand a grid; point keys), `config` (the config of a point),
`store` (layout, sweep.json, manifest, .done markers), `point` (the task run on a worker), `run`
(the client's loop: `sweep`), `progress`, `read` (`sweep_info`, `open_sweep`, `show_sweep`,
`verify_sweep`).
Dask, xarray and torch are imported inside the functions.
"""

from __future__ import annotations

from .config import point_config
from .grid import SweepError, check_grid, expand_grid, parse_grid, point_key
from .point import RunFn, run_point
from .read import open_sweep, show_sweep, summary_table, sweep_document, sweep_info, verify_sweep
from .run import SweepResult, sweep
from .store import (
    FORMAT,
    MANIFEST_FILE,
    POINTS_DIR,
    STATUSES,
    SWEEP_FILE,
    VERSION,
    WORK_DIR,
    is_sweep_store,
)

__all__ = [
    "FORMAT",
    "MANIFEST_FILE",
    "POINTS_DIR",
    "STATUSES",
    "SWEEP_FILE",
    "VERSION",
    "WORK_DIR",
    "RunFn",
    "SweepError",
    "SweepResult",
    "check_grid",
    "expand_grid",
    "is_sweep_store",
    "open_sweep",
    "parse_grid",
    "point_config",
    "point_key",
    "run_point",
    "show_sweep",
    "summary_table",
    "sweep",
    "sweep_document",
    "sweep_info",
    "verify_sweep",
]
