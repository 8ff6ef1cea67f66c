"""The sweep store: its layout, a local folder or an fsspec URL, sweep.json, the manifest, markers.

    STORE/sweep.json          the base config and the grid (written once, extended by a larger grid)
    STORE/manifest.json       per point: status, attempts, timing, worker, error, summary
                              (rewritten atomically by the client only)
    STORE/points/<key>.zarr   one Dataset per finished point, written atomically by its task
    STORE/points/<key>.done   written by the task after the store: the point is complete
    STORE/work/<key>/         finished parts of a running point (reused by a retry), then removed

Every path inside the store is relative, so a store moved elsewhere still opens. A point is complete
only with its `.done` marker and a zarr store that passes its checksums (`attnflow.io`), written for
that point (its attrs["sweep_key"]), whose attrs hold the SHA-256 of the `.done` record written with
it (RECORD_ATTR: an edited record, whose numbers `show` would print, does not pass); a zarr store
without a marker is never trusted, and a damaged one is recomputed by the next sweep. The record
also keeps the digests of the point's input files (`attnflow.experiments.parts.input_digests`): a
sweep recomputes a point whose inputs changed since. One client at a time runs a sweep on a local
store: it holds the store's lock (`attnflow.io.lock`); nothing in a local store is read or written
through a symbolic link out of it.

The JSON files are standard JSON, written by `attnflow.io.to_json`: NaN and inf are null. Read back,
a null result scalar is NaN again; grid values, which name the points, keep a non-finite float
exactly as {"float": "inf"}. Stores written with NaN/Infinity literals (attnflow 0.1.0) still open.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .grid import Grid, Scalar, SweepError, merge_grids

FORMAT = "attnflow-sweep"
VERSION = 1
SWEEP_FILE = "sweep.json"
MANIFEST_FILE = "manifest.json"
POINTS_DIR = "points"
WORK_DIR = "work"
STATUSES = ("pending", "running", "done", "failed")
# what the manifest copies from a point's .done record
RECORD_KEYS = ("started", "finished", "seconds", "worker", "torch_threads", "device", "scalars", "summary")
#: the attr of a point's zarr store holding the SHA-256 of its .done record (`record_digest`)
RECORD_ATTR = "sweep_record_sha256"
#: what a sweep writes into its store (besides hidden files: the lock, temporaries)
STORE_FILES = (SWEEP_FILE, MANIFEST_FILE, POINTS_DIR, WORK_DIR, "figures")


class Store:
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
            from ..io import atomic_write_text

            atomic_write_text(self.path(rel), text)

    def remove(self, rel: str) -> None:
        """Remove a file or folder of the store (a symbolic link itself, never what it points to)."""
        p = self.path(rel)
        if self.url:
            if self.fs.exists(p):
                self.fs.rm(p, recursive=True)
        elif Path(p).is_symlink():
            Path(p).unlink()
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


def zarr_rel(key: str) -> str:
    return f"{POINTS_DIR}/{key}.zarr"


def done_rel(key: str) -> str:
    return f"{POINTS_DIR}/{key}.done"


def work_rel(key: str) -> str:
    return f"{WORK_DIR}/{key}"


def now() -> str:
    """The time in UTC, ISO 8601 to the millisecond."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------------------------------ JSON


def read_json(st: Store, rel: str) -> Any:
    """A JSON file of the store (stores of attnflow 0.1.0 wrote NaN/Infinity literals: read too)."""
    return json.loads(st.read_text(rel))


def write_json(st: Store, rel: str, obj: object) -> None:
    """A JSON file of the store, atomically, by `attnflow.io.to_json` (NaN and inf as null)."""
    from ..io import to_json

    st.write_text(rel, to_json(obj, indent=1))


def as_read_back(obj: object) -> Any:
    """`obj` as the store's JSON gives it back: NaN and inf as None, tuples as lists."""
    from ..io import to_json

    return json.loads(to_json(obj))


def _nan_scalars(entry: dict[str, Any]) -> dict[str, Any]:
    """A point's record or manifest entry with its result scalars as numbers: JSON null is NaN.

    A NaN (or infinite) scalar is written as null; read back it is NaN, a number, so that it is
    not taken for a scalar the point lacks (one absent from "scalars").
    """
    scalars = entry.get("scalars")
    if isinstance(scalars, dict):
        entry["scalars"] = {k: math.nan if v is None else v for k, v in scalars.items()}
    return entry


def _tag(v: Scalar) -> Scalar | dict[str, str]:
    return {"float": repr(v)} if isinstance(v, float) and not math.isfinite(v) else v


def _untag(v: Scalar | dict[str, str]) -> Scalar:
    return float(v["float"]) if isinstance(v, dict) else v


def _grid_to_json(grid: dict[str, list]) -> dict[str, list]:
    """Grid values exactly in standard JSON: a non-finite float as {"float": "inf"} ("-inf", "nan").

    The point keys are made from the grid read back, so it must come back exactly: null would lose
    inf. No grid value is a dict, so the tag is unambiguous.
    """
    return {k: [_tag(v) for v in values] for k, values in grid.items()}


def _grid_from_json(grid: dict[str, list]) -> dict[str, list]:
    return {k: [_untag(v) for v in values] for k, values in grid.items()}


# ------------------------------------------------------------------------------------ sweep.json


def is_sweep_store(path: str | os.PathLike) -> bool:
    """True when `path` is a sweep store (it holds a `sweep.json` written by `sweep`), also when that
    file is damaged (not JSON): reading it then says so."""
    try:
        st = Store(path)
        if not st.exists(SWEEP_FILE):
            return False
        meta = read_json(st, SWEEP_FILE)
    except json.JSONDecodeError:
        return True
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def read_meta(st: Store) -> dict[str, Any]:
    """The store's sweep.json: format, experiment, base config, grid, creation time, provenance.

    A damaged file (not JSON, or missing its fields) is a SweepError naming it.
    """
    where = st.path(SWEEP_FILE)
    try:
        meta = read_json(st, SWEEP_FILE)
    except json.JSONDecodeError as err:
        fix = "restore it from a copy, or use a new store"
        raise SweepError("store", st.name, f"{where} is damaged (not JSON: {err}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SweepError("store", st.name, f"its {SWEEP_FILE} is not an attnflow sweep description")
    if not isinstance(meta.get("grid"), dict) or not isinstance(meta.get("config"), dict):
        raise SweepError("store", st.name, f"{where} is damaged (no grid or config); restore it from a copy")
    return {**meta, "grid": _grid_from_json(meta["grid"])}


def extend_meta(
    st: Store, experiment: str, config: dict[str, Any], grid: Grid
) -> tuple[dict[str, Any], bool]:
    """(sweep.json with its grid extended by `grid`, whether that changed it); nothing is written.

    A new store gets a new description; a store of another experiment, base config or set of grid
    keys is refused (SweepError about `store`).
    """
    cfg = as_read_back(config)
    if not st.exists(SWEEP_FILE):
        from ..io import provenance

        meta = {"format": FORMAT, "version": VERSION, "experiment": experiment, "config": cfg}
        return {**meta, "created": now(), "provenance": provenance(), "grid": grid}, True
    meta = read_meta(st)
    old = as_read_back(meta["config"])
    if meta["experiment"] != experiment or old != cfg:
        diff = sorted(k for k in set(cfg) | set(old) if cfg.get(k, "?") != old.get(k, "?"))
        raise SweepError(
            "store",
            st.name,
            f"holds a sweep of {meta['experiment']} with another base config "
            f"(differs in: {', '.join(diff) or 'experiment'}); use another store",
        )
    if (keys := list(meta["grid"])) != list(grid):
        fix = "use another store or the same grid keys in the same order"
        raise SweepError("store", st.name, f"holds a sweep over {keys}, not {list(grid)}; {fix}")
    merged = merge_grids(meta["grid"], grid)
    changed = any(len(merged[k]) != len(meta["grid"][k]) for k in merged)
    return {**meta, "grid": merged}, changed


def write_meta(st: Store, meta: dict[str, Any]) -> None:
    st.makedirs(POINTS_DIR)
    write_json(st, SWEEP_FILE, {**meta, "grid": _grid_to_json(meta["grid"])})


def links_problem(root: str | os.PathLike) -> str | None:
    """Why the local store `root` cannot be used as it is: a lock that is no regular file, or a
    symbolic link out of it in place of one of its files or points; None when there is none."""
    from ..io import link_out
    from ..io.lock import lock_file_problem

    root = Path(root)
    problem = lock_file_problem(root)
    if problem is not None:
        return problem
    names: list[tuple[str, ...]] = [(name,) for name in STORE_FILES]
    for folder in (POINTS_DIR, WORK_DIR):
        if (root / folder).is_dir() and link_out(root, folder) is None:
            names += [(folder, p.name) for p in sorted((root / folder).iterdir())]
    for name in names:
        if (err := link_out(root, *name)) is not None:
            return f"{err.path} {err.problem}"
    return None


# -------------------------------------------------------------------------- manifest and markers


def read_manifest(st: Store) -> dict[str, dict]:
    """The manifest's entries by point key ({} when absent or unreadable: it is rebuilt)."""
    if not st.exists(MANIFEST_FILE):
        return {}
    try:
        entries = read_json(st, MANIFEST_FILE).get("points", {})
    except (json.JSONDecodeError, AttributeError):
        return {}
    return {k: _nan_scalars(e) for k, e in entries.items()} if isinstance(entries, dict) else {}


def write_manifest(st: Store, entries: dict[str, dict]) -> None:
    counts = {s: sum(e["status"] == s for e in entries.values()) for s in STATUSES}
    write_json(st, MANIFEST_FILE, {"updated": now(), "counts": counts, "points": entries})


def record_digest(rec: Mapping[str, object]) -> str:
    """SHA-256 of a .done record as the store's JSON gives it back (key order and spacing aside)."""
    import hashlib

    text = json.dumps(as_read_back(rec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _raw_record(st: Store, key: str) -> dict[str, Any]:
    try:
        rec = read_json(st, done_rel(key))
    except json.JSONDecodeError:
        return {}
    return rec if isinstance(rec, dict) else {}


def read_record(st: Store, key: str) -> dict[str, Any]:
    """A point's .done record (timing, worker, scalars, summary); {} when unreadable."""
    return _nan_scalars(_raw_record(st, key))


def _zarr_attrs(st: Store, key: str) -> dict[str, Any]:
    """The attrs of a point's zarr store, from its consolidated metadata ({} when unreadable)."""
    try:
        meta = read_json(st, f"{zarr_rel(key)}/.zmetadata")
        attrs = meta["metadata"][".zattrs"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return attrs if isinstance(attrs, dict) else {}


def _outside(st: Store, key: str) -> dict | None:
    """Damage when a local point's files are symbolic links out of the store, else None."""
    from ..io import link_out

    if st.url:
        return None
    for rel in (zarr_rel(key), done_rel(key)):
        err = link_out(st.root, *rel.split("/"))
        if err is not None:
            return {"file": err.path, "problem": err.problem}
    return None


def _record_damage(st: Store, key: str, raw: dict[str, Any]) -> dict | None:
    """Damage when the point's verified zarr store and its .done record are not one point's pair."""
    attrs = _zarr_attrs(st, key)
    where = {"file": st.path(done_rel(key))}
    if attrs.get("sweep_key") not in (None, key):
        problem = f"holds point {attrs['sweep_key']} (moved or swapped)"
        return {"file": st.path(zarr_rel(key)), "problem": problem}
    if raw.get("key") != key:
        return {**where, "problem": f"is the record of point {raw.get('key')} (moved or swapped)"}
    written = attrs.get(RECORD_ATTR)
    if written is None:
        return {**where, "problem": "has no checksum in its point's store (written by an earlier attnflow)"}
    if written != record_digest(raw):
        return {**where, "problem": "altered (its SHA-256 differs from the one written with the point)"}
    return None


def check_point(st: Store, key: str) -> tuple[dict | None, dict | None]:
    """(record, damage) of a point: its .done record when it is complete (marker and zarr store, which
    passes its checksums and holds that record's checksum), else None; damage {"file", "problem"}
    when it is committed but cannot be trusted (a record that is not JSON or was altered, a store
    missing or failing its checksums, a pair of another point's, a link out of the store), else None."""
    from ..io import dataset_problems

    if (damage := _outside(st, key)) is not None:
        return None, damage
    if not st.exists(done_rel(key)):
        return None, None
    raw = _raw_record(st, key)
    if not raw:
        return None, {"file": st.path(done_rel(key)), "problem": "damaged (not a JSON record)"}
    if not st.exists(zarr_rel(key)):
        return None, {"file": st.path(zarr_rel(key)), "problem": "missing (its .done marker is there)"}
    problems = dataset_problems(st.target(zarr_rel(key)))
    if problems:
        more = f" (and {len(problems) - 1} more file(s))" if len(problems) > 1 else ""
        return None, {"file": problems[0][0], "problem": problems[0][1] + more}
    if (damage := _record_damage(st, key, raw)) is not None:
        return None, damage
    return _nan_scalars(raw), None


def complete(st: Store, key: str) -> dict | None:
    """The .done record of a complete point (its marker, and its zarr store passing its checksums),
    else None."""
    return check_point(st, key)[0]


def copy_record(entry: dict[str, Any], rec: dict[str, Any]) -> None:
    """Mark a manifest entry done with what its point's .done record says."""
    entry.update({k: rec[k] for k in RECORD_KEYS if k in rec})
    entry.update(status="done", error=None)


def current_entry(st: Store, entry: dict | None, key: str, point: dict[str, Any]) -> dict[str, Any]:
    """A copy of a point's manifest entry brought up to date with the store.

    Done with its record when the point is committed and sound (the manifest's copy of a record is
    never shown otherwise); otherwise a point the manifest calls done or running (a client that
    stopped) is pending. Failed points stay failed, with their error.
    A committed point that cannot be trusted is pending with "damaged": {"file", "problem"}.
    """
    e = dict(entry or {"status": "pending", "attempts": 0})
    e.update(point=point, path=zarr_rel(key))
    e.pop("damaged", None)
    rec, damage = check_point(st, key)
    if rec is not None:
        copy_record(e, rec)
    else:  # what a point's record said is shown only from a record that is sound
        for k in RECORD_KEYS:
            e.pop(k, None)
        if e.get("status") in ("done", "running") or damage is not None:
            e["status"] = "pending"
    if damage is not None:
        e["damaged"] = damage
    return e


def clean_temporaries(st: Store, older_than_s: float = 600.0) -> int:
    """Remove hidden temporaries in points/ left by writes that died; returns how many.

    Only local stores, and only those older than `older_than_s` (a write still under way in a
    task of another, live sweep of the same store is left alone).
    """
    folder = Path(st.path(POINTS_DIR))
    if st.url or not folder.is_dir():
        return 0
    n, t = 0, time.time()
    for p in folder.iterdir():
        if p.name.startswith(".") and t - p.stat().st_mtime > older_than_s:
            st.remove(f"{POINTS_DIR}/{p.name}")
            n += 1
    return n
