"""xarray Datasets as zarr stores written atomically, with the checksums of their files, verified when
read; atomic text files; temporaries left by an interrupted write.

A store at `path` is either absent, the previous complete store, or the new complete store: it is
written under a temporary name next to `path` and renamed into place only once complete. Before the
rename, the size and SHA-256 of every file of the store (metadata and chunks) go into
`path/.attnflow-checksums.json` (CHECKSUM_FILE); `read_dataset` checks them first, so a missing,
truncated or altered file is a StoreError naming it, never data read as NaN (zarr fills a missing
chunk with the fill value). xarray and zarr are imported inside the functions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from .encode import clean_attrs
from .paths import REGULAR, file_kind

# the checksums of a store's files, inside the store (zarr ignores it)
CHECKSUM_FILE = ".attnflow-checksums.json"
CHECKSUM_FORMAT = "attnflow-checksums"

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem


class Layout(TypedDict):
    """What `read_layout` reads of a store: {dim: length}, the data variables, the Dataset's attrs."""

    sizes: dict[str, int]
    variables: list[str]
    attrs: dict[str, object]


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
    ds.attrs = clean_attrs(dict(ds.attrs), "the dataset")
    for name, var in ds.variables.items():
        var.attrs = clean_attrs(dict(var.attrs), f"variable {name!r}")
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


def read_layout(path: str | os.PathLike, verify: bool = True) -> Layout:
    """The layout of a store written by `write_dataset`, from its consolidated metadata alone (no
    xarray, zarr or chunk read: what `attnflow show` prints): {"sizes": {dim: length}, "variables":
    [data variable names], "attrs": the Dataset's attrs}, in xarray's order. verify: as in
    `read_dataset`; a store without readable metadata raises StoreError naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    if verify:
        verify_dataset(path)
    where = path / ".zmetadata"
    try:
        meta = json.loads(where.read_bytes())["metadata"]
        names = [key[: -len("/.zarray")] for key in meta if key.endswith("/.zarray")]
        dims = {name: meta[f"{name}/.zattrs"]["_ARRAY_DIMENSIONS"] for name in names}
        shapes = {name: meta[f"{name}/.zarray"]["shape"] for name in names}
        attrs = dict(meta.get(".zattrs", {}))
        sizes: dict[str, int] = {}
        for name in names:
            for dim, length in zip(dims[name], shapes[name], strict=True):
                sizes.setdefault(str(dim), int(length))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise StoreError(where, f"cannot be read ({type(err).__name__}: {err})") from None
    listed = [meta[f"{n}/.zattrs"].get("coordinates", "") for n in names] + [attrs.get("coordinates", "")]
    coords = set(sizes) | {word for text in listed if isinstance(text, str) for word in text.split()}
    attrs.pop("coordinates", None)
    return {"sizes": sizes, "variables": [n for n in names if n not in coords], "attrs": attrs}


# ------------------------------------------------------------------------------------- checksums


def _fs(target: str | os.PathLike) -> tuple[AbstractFileSystem | None, str]:
    """(fsspec filesystem or None for a local path, root path) of a store."""
    text = os.fspath(target)
    if "://" not in text:
        return None, text
    import fsspec

    fs, root = fsspec.core.url_to_fs(text)
    return fs, root.rstrip("/")


def _files(fs: AbstractFileSystem | None, root: str) -> list[str]:
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


def _read_bytes(fs: AbstractFileSystem | None, root: str, rel: str) -> bytes:
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


def _not_files(root: str) -> list[tuple[str, str]]:
    """The entries of the local store `root` that are neither regular files nor folders of its own: a
    symbolic link (wherever it points: a store holds no links) or a FIFO, socket or device."""
    found = []
    for folder, dirs, names in os.walk(root):
        for name in sorted([*dirs, *names]):
            kind = file_kind(os.path.join(folder, name))
            if kind not in (REGULAR, "a folder"):
                found.append((os.path.join(folder, name), f"is {kind}, not a file the store wrote; not read"))
    return found


def _file_problem(fs: AbstractFileSystem | None, root: str, rel: str, size: int, digest: str) -> str | None:
    """What is wrong with one file of a store against its size and SHA-256, or None."""
    if rel.startswith("/") or ".." in rel.split("/"):
        return "named by the checksum record, outside the store; not read"
    if fs is None and (kind := file_kind(os.path.join(root, rel))) not in (REGULAR, "absent"):
        return f"is {kind}, where the store keeps a file"
    try:
        data = _read_bytes(fs, root, rel)
    except FileNotFoundError:
        return "missing"
    if len(data) != size:
        return f"{len(data)} bytes, written with {size} (truncated or altered)"
    if hashlib.sha256(data).hexdigest() != digest:
        return "altered (its SHA-256 differs from the one written)"
    return None


def store_fingerprint(target: str | os.PathLike) -> str:
    """The fingerprint of a zarr store as written: 16 hex digits of the SHA-256 of its checksum record
    (which covers every file of the store). The run's summaries and file record carry it."""
    fs, root = _fs(target)
    return hashlib.sha256(_read_bytes(fs, root, CHECKSUM_FILE)).hexdigest()[:16]


def dataset_problems(target: str | os.PathLike) -> list[tuple[str, str]]:
    """What is wrong with the zarr store `target` (a path or an fsspec URL) against its checksums, as
    (file, problem) pairs: [] when every file is as written. A store without checksums (written by
    attnflow 0.1.0, or by xarray directly) cannot be verified: that is a problem too; so is a local
    store holding a symbolic link, a FIFO or a device, or a folder where it keeps a file (nothing is
    read through them)."""
    fs, root = _fs(target)
    where = f"{root}/{CHECKSUM_FILE}"
    if not (os.path.isdir(root) if fs is None else fs.isdir(root)):
        return [(root, "no dataset there")]
    if fs is None and (links := _not_files(root)):
        return links
    if fs is None and (kind := file_kind(where)) not in (REGULAR, "absent"):
        return [(where, f"is {kind}, where the store keeps its checksums")]
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
    problems = [
        (f"{root}/{rel}", problem)
        for rel, (size, digest) in files.items()
        if (problem := _file_problem(fs, root, rel, size, digest)) is not None
    ]
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


def is_leftover(name: str) -> bool:
    """Whether `name` is a temporary of an interrupted write (`clean_stale` removes it)."""
    return name.startswith(".") and (".tmp-" in name or ".old-" in name)


def clean_stale(folder: str | os.PathLike) -> int:
    """Remove temporary stores/files left in `folder` by an interrupted write; returns how many. A link
    of that name is removed itself, never what it points to."""
    folder = Path(folder)
    n = 0
    if folder.is_dir():
        for p in folder.iterdir():
            if is_leftover(p.name):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                n += 1
    return n
