"""Checksums of a folder's plain files: what a reader trusts (summary.json, summary.md, the report) is
read back only as it was written.

    write_checked_text(out / "summary.json", text)   # atomic, and recorded in out/.attnflow-files.json
    text = read_checked_text(out / "summary.json")   # StoreError naming the file if it differs

The record FILES_RECORD, in the folder beside the files, holds the size and SHA-256 of each recorded
file by name; it is rewritten atomically with each file. A file that differs from its record, or that
is not recorded at all (written by hand, or by an attnflow that kept no record), is named: a reader
refuses it and `attnflow verify` reports it. A recorded file, or the record, that is a symbolic link
(wherever it points), a folder or a FIFO is named for what it is and never read. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from .paths import REGULAR, file_kind
from .stores import StoreError, atomic_write_text

__all__ = [
    "FILES_FORMAT",
    "FILES_RECORD",
    "file_problem",
    "forget_files",
    "read_checked_text",
    "record_files",
    "record_run",
    "recorded_files",
    "recorded_run",
    "write_checked_text",
]

FILES_RECORD = ".attnflow-files.json"
FILES_FORMAT = "attnflow-file-checksums"


def _digest(data: bytes) -> list:
    return [len(data), hashlib.sha256(data).hexdigest()]


def recorded_files(folder: str | os.PathLike) -> dict[str, list] | None:
    """{name: [size, sha256]} of the folder's record; {} when there is none; None when the record is
    damaged (not a record of this format)."""
    path = Path(folder) / FILES_RECORD
    if file_kind(path) not in (REGULAR, "absent"):
        return None
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    files = record.get("files") if isinstance(record, dict) and record.get("format") == FILES_FORMAT else None
    if not isinstance(files, dict) or not all(isinstance(v, list) and len(v) == 2 for v in files.values()):
        return None
    return files


def recorded_run(folder: str | os.PathLike) -> str | None:
    """The run fingerprint the folder's record carries (`record_run`), or None (no record, a damaged
    one, or one written before records carried it)."""
    path = Path(folder) / FILES_RECORD
    if recorded_files(folder) is None or not path.is_file():
        return None
    run = json.loads(path.read_bytes()).get("run")
    return run if isinstance(run, str) else None


def record_run(folder: str | os.PathLike, run: str) -> None:
    """Tie the folder's record to one run: the fingerprint of the result its files were made from."""
    _write_record(Path(folder), recorded_files(folder) or {}, run)


def _write_record(folder: Path, files: dict[str, list], run: str | None = None) -> None:
    record: dict = {"format": FILES_FORMAT, "algorithm": "sha256", "files": files}
    if (run := run or recorded_run(folder)) is not None:
        record["run"] = run
    text = json.dumps(record, indent=0, sort_keys=True)
    atomic_write_text(folder / FILES_RECORD, text)


def record_files(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """Record the size and SHA-256 of these files of `folder` (as they are now) in its record; a
    name that is absent is dropped from it."""
    folder = Path(folder)
    files = recorded_files(folder) or {}
    for name in names:
        path = folder / name
        if path.is_file():
            files[name] = _digest(path.read_bytes())
        else:
            files.pop(name, None)
    _write_record(folder, files)


def forget_files(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """Drop these names from the folder's record (the files were removed)."""
    folder = Path(folder)
    files = recorded_files(folder)
    if not files:
        return
    kept = {k: v for k, v in files.items() if k not in set(names)}
    if kept != files:
        _write_record(folder, kept)


def write_checked_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically and record its checksum in its folder's record."""
    path = atomic_write_text(path, text)
    record_files(path.parent, [path.name])
    return path


def file_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with `path` against its folder's record ("altered ...", "missing", "has no
    checksum ...", "is a symbolic link ..."), or None when it is as written."""
    problem = _not_a_file(Path(path))
    if problem is not None:
        return problem
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        data = None
    return _problem(Path(path), data)


def _not_a_file(path: Path) -> str | None:
    """Why `path` or its folder's record is not read: a symbolic link, a folder, a FIFO..., or None."""
    kind = file_kind(path)
    if kind not in (REGULAR, "absent"):
        return f"is {kind}, where attnflow keeps a file it wrote; not read (rerun to rewrite it)"
    record = path.parent / FILES_RECORD
    if (kind := file_kind(record)) not in (REGULAR, "absent"):
        return f"its checksum record {record} is {kind}; not read (rerun to rewrite it)"
    return None


def _problem(path: Path, data: bytes | None) -> str | None:
    files = recorded_files(path.parent)
    if files is None:
        return f"its checksum record {path.parent / FILES_RECORD} is damaged (not a checksum record)"
    if data is None:
        return "missing" if path.name in files else "missing (and never recorded)"
    if path.name not in files:
        return (
            f"has no checksum in {FILES_RECORD} (written by hand, or by an attnflow that kept none), so "
            "it cannot be trusted"
        )
    size, digest = files[path.name]
    if len(data) != size:
        return f"{len(data)} bytes, written with {size} (truncated or altered)"
    if hashlib.sha256(data).hexdigest() != digest:
        return "altered (its SHA-256 differs from the one written)"
    return None


def read_checked_text(path: str | os.PathLike) -> str:
    """The text of `path` (UTF-8) when it is as written (`file_problem`), else StoreError naming it."""
    problem = _not_a_file(Path(path))
    if problem is not None:
        raise StoreError(path, problem)
    data = Path(path).read_bytes()  # once: what is checked is what is returned
    problem = _problem(Path(path), data)
    if problem is not None:
        raise StoreError(path, problem)
    return data.decode("utf-8")
