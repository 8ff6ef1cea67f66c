"""The parts of a run folder: each finished unit of work (one beta, one level, one grid point) is a
zarr store in out/parts/<name>.zarr, reused on a rerun only when it is what the run would compute
(`cached_part`); otherwise computed and written atomically.

A part is reused when, all at once: it passes its checksums; its fingerprint is the request's (the
config's fields that decide it, the attnflow version and the content of every input file the config
names: `input_digests`); it was written under the name it is read by (attrs["part"]: a part moved or
swapped onto another's name is not reused); and the coordinates in its name (beta=10_N=128) are the
ones its data records. Any other part found there is recomputed, with a warning naming it and why.
A part that is a symbolic link out of the run folder is refused (OutsideFolderError).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Set
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, SupportsFloat

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..progress import Reporter
from .layout import PARTS_DIR

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "INPUT_KEYS",
    "Fingerprint",
    "cached_part",
    "count_reused",
    "fingerprint",
    "input_digests",
    "part_done",
    "part_name",
]

#: config keys that may name an input file (or folder) whose content decides the result
INPUT_KEYS = ("weights", "checkpoint")


class Fingerprint(str):
    """A part's fingerprint (16 hex digits), and `inputs`: {config key: SHA-256 of the content of the
    file it names}, which the fingerprint covers (kept with each part, so that a warning can say
    which input changed)."""

    inputs: dict[str, str]

    def __new__(cls, value: str, inputs: Mapping[str, str] | None = None) -> Fingerprint:
        fp = super().__new__(cls, value)
        fp.inputs = dict(inputs or {})
        return fp


def _input_files(key: str, value: object) -> list[Path]:
    """The files whose content the config value `key = value` makes an input ([] when it names none:
    a built-in weights name, an unknown value that the experiment refuses itself)."""
    if not isinstance(value, str) or not value:
        return []
    if key == "checkpoint":
        from ..pretrained.readers import CheckpointError, checkpoint_files
        from ..pretrained.sources import resolve_checkpoint

        try:
            return checkpoint_files(Path(resolve_checkpoint(value)))
        except (CheckpointError, ValueError, OSError):
            return []  # the experiment says what is wrong with it when it opens it
    path = Path(value)
    return [path] if path.is_file() else []


def input_digests(config: BaseModel) -> dict[str, str]:
    """{config key: SHA-256 of its input's content} for the INPUT_KEYS of `config` that name files
    (weights .npz: the arrays; a checkpoint: every file it is read from); keys naming none are left
    out."""
    from ..io.arrays import content_digest

    digests = {}
    for key in INPUT_KEYS:
        files = _input_files(key, getattr(config, key, None))
        if len(files) == 1:
            digests[key] = content_digest(files[0])
        elif files:
            h = hashlib.sha256()
            for f in files:
                h.update(f"{f.name}\0{content_digest(f)}\0".encode())
            digests[key] = h.hexdigest()
    return digests


def fingerprint(
    config: BaseModel, exclude: Set[str] = frozenset(), inputs: Mapping[str, str] | None = None
) -> Fingerprint:
    """Hash of what decides one part's result: the config's fields (the grid axes in `exclude` left
    out, and where and on how many threads and processes it runs), the attnflow version, and the
    content of its input files: `input_digests(config)`, updated by `inputs` ({name: digest} of
    inputs the experiment reads itself)."""
    from .. import __version__

    skip = {*exclude, "threads", "device", "workers"}  # where and how parallel: not what it computes
    fields = type(config).model_fields
    data = {
        k: v
        for k, v in config.model_dump().items()
        if k not in skip and not _new_key_at_default(fields.get(k), v)
    }
    data["attnflow_version"] = __version__
    digests = {**input_digests(config), **(inputs or {})}
    if digests:  # (without inputs, the fingerprint of a config is what it always was)
        data["input_digests"] = digests
    text = json.dumps(data, sort_keys=True, default=str)
    return Fingerprint(hashlib.sha256(text.encode()).hexdigest()[:16], digests)


def _new_key_at_default(field: FieldInfo | None, value: object) -> bool:
    """A key added after 0.1 (json_schema_extra {"fingerprint": "when-set"}) at its default: left out
    of the fingerprint, so that parts computed before the key existed are still this run's."""
    extra = getattr(field, "json_schema_extra", None)
    return (
        field is not None
        and isinstance(extra, dict)
        and extra.get("fingerprint") == "when-set"
        and value == field.default
    )


def _value(v: float | str) -> str:
    """A coordinate in a part's name: exact (the shortest text that reads back as the same float)."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return repr(v)
        s = format(v, "g")
        return s if float(s) == v else repr(v)
    return str(v)


def part_name(**coords: float | str) -> str:
    """File-safe name of one part, e.g. beta=1000, N=256 -> 'beta=1000_N=256' (values exact: two
    betas never share a name; a word, e.g. a cloud kind, as it is)."""
    return "_".join(f"{k}={_value(v)}" for k, v in coords.items())


def _name_coords(name: str) -> dict[str, str]:
    """The coordinates a part's name states: 'beta=10_N=128_separatrix' -> {beta: '10', N: '128'}."""
    return dict(token.split("=", 1) for token in name.split("_") if "=" in token)


def _recorded(ds: xr.Dataset, key: str) -> object:
    """The value of coordinate `key` that the part's data records (attrs, or a one-value coordinate),
    else None."""
    if key in ds.attrs:
        return ds.attrs[key]
    if key in ds.coords and ds.coords[key].size == 1:
        return ds.coords[key].values.reshape(()).item()
    return None


def _same(text: str, value: object) -> bool:
    try:
        if isinstance(value, SupportsFloat | str):  # (else float(value) fails)
            return float(text) == float(value)
    except (TypeError, ValueError):
        pass
    return text == str(value)


def _mismatch(ds: xr.Dataset, name: str, fp: str) -> str | None:
    """Why the stored part `ds` is not the part `name` with fingerprint fp, or None when it is."""
    stored = ds.attrs.get("part")
    if stored != name:
        if stored is None:
            return "it does not record its name (written by an earlier attnflow)"
        return f"it holds the part {stored} (moved or swapped onto this name)"
    for key, text in _name_coords(name).items():
        value = _recorded(ds, key)
        if value is not None and not _same(text, value):
            return f"its data records {key} = {value}, its name {key} = {text}"
    if ds.attrs.get("fingerprint") != fp:
        return _changed_inputs(ds, fp)
    return None


def _changed_inputs(ds: xr.Dataset, fp: str) -> str:
    """Why two fingerprints differ, as far as the stored part tells: which input file changed."""
    try:
        before = json.loads(ds.attrs.get("inputs", "{}"))
    except ValueError:
        before = {}
    now = getattr(fp, "inputs", None)
    if isinstance(now, dict) and isinstance(before, dict):
        changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
        if changed:
            return f"the content of its input ({', '.join(changed)}) has changed since it was computed"
    return "it was computed from other inputs (its fingerprint differs from this run's)"


def _read_part(out: Path | None, name: str, fp: str, reporter: Reporter | None = None) -> xr.Dataset | None:
    """The finished part `name` with fingerprint fp from out/parts, or None.

    A part that fails its checksums, cannot be read, or is not what the request computes
    (`_mismatch`) is None too (it is recomputed); with a reporter, a warning names it and says why.
    OutsideFolderError when the part is a symbolic link out of the run folder.
    """
    from ..io import StoreError, inside, read_dataset

    if out is None:
        return None
    path = inside(out, PARTS_DIR, f"{name}.zarr")
    if not path.exists():
        return None
    try:
        ds: xr.Dataset = read_dataset(path)
    except (StoreError, OSError) as err:
        if reporter is not None:
            reporter.warn(f"part {name} is damaged ({err}); recomputing it")
        return None
    why = _mismatch(ds, name, fp)
    if why is not None:
        if reporter is not None:
            reporter.warn(f"part {name} is not what this run computes: {why}; recomputing it")
        return None
    return ds


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
    compute: Callable[[], xr.Dataset],
    reporter: Reporter,
) -> xr.Dataset:
    """The Dataset of one finished unit of work (one beta, one grid point).

    With `out`, it is read back from `out/parts/<name>.zarr` (PARTS_DIR) when that store is what this
    request computes (the module docstring) and passes its checksums; otherwise computed and written
    there atomically, with its name, fingerprint and input digests, before being returned (a part
    found there and not reused is named in a warning).
    """
    from ..io import inside, to_json, write_dataset

    if out is None:
        return compute()
    path = inside(out, PARTS_DIR, f"{name}.zarr")
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
    ds.attrs["part"] = name
    ds.attrs["fingerprint"] = str(fp)
    ds.attrs["inputs"] = to_json(getattr(fp, "inputs", {}))
    ds.attrs.setdefault("wall_s", time.perf_counter() - t0)
    write_dataset(ds, path)
    return ds
