"""The parts of a run folder: each finished unit of work (one beta, one level, one grid point) is a
zarr store in out/parts/<name>.zarr, reused on a rerun when its fingerprint matches the request and it
passes its checksums (`cached_part`); otherwise computed and written atomically.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..progress import Reporter
from .layout import PARTS_DIR


def fingerprint(config: BaseModel, exclude: Set[str] = frozenset()) -> str:
    """Hash of the config fields that determine one part's result (grid axes excluded)."""
    from .. import __version__

    skip = {*exclude, "threads", "device"}  # where and on how many threads does not change results
    data = {k: v for k, v in config.model_dump().items() if k not in skip}
    data["attnflow_version"] = __version__
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def part_name(**coords: float) -> str:
    """File-safe name of one part, e.g. beta=1000 -> 'beta=1000'."""
    return "_".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in coords.items())


def _read_part(out: Path | None, name: str, fp: str, reporter: Reporter | None = None):
    """The finished part `name` with fingerprint fp from out/parts, or None.

    A part that fails its checksums or cannot be read is None too (it is recomputed); with a
    reporter, a warning names it.
    """
    from ..io import StoreError, read_dataset

    if out is None:
        return None
    path = Path(out) / PARTS_DIR / f"{name}.zarr"
    if not path.exists():
        return None
    try:
        ds = read_dataset(path)
    except (StoreError, OSError) as err:
        if reporter is not None:
            reporter.warn(f"part {name} is damaged ({err}); recomputing it")
        return None
    return ds if ds.attrs.get("fingerprint") == fp else None


def part_done(out: Path | None, name: str, fp: str) -> bool:
    """Whether `cached_part(out, name, fp, ...)` would read the part back instead of computing it."""
    return _read_part(out, name, fp) is not None


# the compute time (wall_s) of each part reused by the run in progress, see count_reused
_reused: ContextVar[list[float] | None] = ContextVar("attnflow_reused_parts", default=None)


@contextmanager
def count_reused() -> Iterator[list[float]]:
    """Within the block, the list of the stored compute times (s) of the parts `cached_part` reuses:
    the time earlier runs spent on this result."""
    reused: list[float] = []
    token = _reused.set(reused)
    try:
        yield reused
    finally:
        _reused.reset(token)


def cached_part(
    out: Path | None,
    name: str,
    fp: str,
    compute: Callable[[], Any],
    reporter: Reporter,
):
    """The Dataset of one finished unit of work (one beta, one grid point).

    With `out`, it is read back from `out/parts/<name>.zarr` (PARTS_DIR) when that store exists with
    the same fingerprint and passes its checksums; otherwise computed and written there atomically
    before being returned (a damaged part is recomputed, with a warning naming it).
    """
    from ..io import write_dataset

    if out is None:
        return compute()
    path = Path(out) / PARTS_DIR / f"{name}.zarr"
    ds = _read_part(out, name, fp, reporter)
    if ds is not None:
        reporter.info(f"{name}: reused from {path.parent.name}/{path.name}")
        reused = _reused.get()
        wall = ds.attrs.get("wall_s")
        if reused is not None and isinstance(wall, (int, float)):
            reused.append(float(wall))
        return ds
    t0 = time.perf_counter()
    ds = compute()
    ds.attrs["fingerprint"] = fp
    ds.attrs.setdefault("wall_s", time.perf_counter() - t0)
    write_dataset(ds, path)
    return ds
