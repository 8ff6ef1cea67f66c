"""What is wrong with a run folder or a sweep store: `verify_folder(path)`, behind `attnflow verify`.

Every zarr store is checked against the checksums written with it (`attnflow.io.dataset_problems`):
a missing, truncated or altered file is named. Problems are what makes a stored result untrustworthy
(a damaged store or file); notes are what is merely unfinished or left over (an unfinished run, an
uncommitted point, temporaries, a writer at work). Standard library and `attnflow.io` only; the
sweep part reads through `attnflow.sweeps.read.verify_sweep`.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..experiments import layout
from ..experiments.folder import RUN_FILES as _RUN_NAMES
from ..experiments.folder import identity_problems

__all__ = ["Verification", "verify_folder", "verify_run"]


@dataclass
class Verification:
    """What `verify_folder` found: `kind` ("run" or "sweep"), `problems` and `notes` (one line each)."""

    path: str
    kind: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def is_run_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder holding (pieces of) a run: its config.toml, result.zarr or parts/."""
    p = Path(path)
    return p.is_dir() and any(
        (p / n).exists() for n in (layout.CONFIG_FILE, layout.RESULT_STORE, layout.PARTS_DIR)
    )


def verify_run(out: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(problems, notes) of a run folder: config.toml readable and agreeing with result.zarr,
    result.zarr and every part against their checksums, summary.json, summary.md and the report
    against theirs, no symbolic link out of the folder and a lock that is a regular file; an
    unfinished run, temporaries and a live lock are notes."""
    from ..io import dataset_problems, is_leftover
    from ..io.lock import describe, lock_holder

    out = Path(out)
    problems = _outside(out)
    if problems:  # nothing is read through a link out of the folder
        return problems, []
    notes: list[str] = []
    rerun = "rerun the run to rewrite it"
    values = _config_values(out, problems, notes)
    result = out / layout.RESULT_STORE
    if result.exists():
        found = dataset_problems(result)
        problems += [f"{f}: {p} ({rerun})" for f, p in found]
        if not found and values is not None:
            problems += _config_disagrees(out, values)
        if not found:
            problems += identity_problems(out)
    parts = sorted((out / layout.PARTS_DIR).glob("*.zarr")) if (out / layout.PARTS_DIR).is_dir() else []
    for part in parts:
        problems += [f"{f}: {p} (a rerun recomputes this part)" for f, p in dataset_problems(part)]
    problems += _summary_problems(out, result.exists(), notes)
    if not result.exists():
        notes.append(
            f"{result}: missing: the run is unfinished ({len(parts)} part(s) done); rerun it to complete it"
        )
    for folder in (out, out / layout.PARTS_DIR):
        if folder.is_dir():
            notes += [
                f"{p}: left by an interrupted write; the next run removes it"
                for p in sorted(folder.iterdir())
                if is_leftover(p.name)
            ]
    if (holder := lock_holder(out)) is not None:
        notes.append(f"a run is writing into this folder: {describe(holder)}")
    checked = (["result.zarr"] if result.exists() else []) + ([f"{len(parts)} part(s)"] if parts else [])
    if checked:
        notes.append(f"checked against their checksums: {' and '.join(checked)}")
    return problems, notes


def _outside(out: Path) -> list[str]:
    """The run's names in `out` that are symbolic links out of it, and a lock that is no regular file."""
    from ..io import is_leftover, link_out
    from ..io.lock import lock_file_problem

    problems = [f"{out}: {p}" for p in [lock_file_problem(out)] if p]
    names: list[tuple[str, ...]] = [(name,) for name in _RUN_NAMES]
    if (out / layout.PARTS_DIR).is_dir() and link_out(out, layout.PARTS_DIR) is None:
        parts = sorted((out / layout.PARTS_DIR).iterdir())
        names += [(layout.PARTS_DIR, p.name) for p in parts if not is_leftover(p.name)]  # removed, not read
    return problems + [str(err) for err in (link_out(out, *n) for n in names) if err is not None]


def _config_values(out: Path, problems: list[str], notes: list[str]) -> dict | None:
    """config.toml's values (None when missing or unreadable: said in problems or notes)."""
    cfg = out / layout.CONFIG_FILE
    if not cfg.exists():
        notes.append(f"{cfg}: missing; the run's parameters are unknown")
        return None
    try:
        values = tomllib.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        problems.append(
            f"{cfg}: not valid TOML ({err}); delete it and rerun the same command to resume from the parts"
        )
        return None
    if not isinstance(values.get("experiment"), str):
        problems.append(f"{cfg}: names no experiment (experiment = ...)")
    return values


#: config keys that do not change a result (where and on how many threads it ran)
_NOT_RESULT_KEYS = {"threads", "device"}


def _config_disagrees(out: Path, values: dict) -> list[str]:
    """[one problem] when config.toml asks for another run than the one result.zarr holds (its
    attrs["config"], read from the verified metadata), else []."""
    from ..io import to_json

    meta = out / layout.RESULT_STORE / ".zmetadata"
    try:
        attrs = json.loads(meta.read_text(encoding="utf-8"))["metadata"][".zattrs"]
        held = json.loads(attrs["config"]) if isinstance(attrs.get("config"), str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(held, dict):
        return []
    there = json.loads(to_json(values))  # as JSON reads it: inf as null, like the result's
    keys = {*there, *held} - _NOT_RESULT_KEYS
    differ = sorted(k for k in keys if there.get(k) != held.get(k))
    if not differ:
        return []
    shown = ", ".join(f"{k} = {there.get(k)!r} there, {held.get(k)!r} in the result" for k in differ[:3])
    return [
        f"{out / layout.CONFIG_FILE}: asks for another run than {layout.RESULT_STORE} holds ({shown}); "
        "rerun with it to bring the result up to date"
    ]


def _summary_problems(out: Path, has_result: bool, notes: list[str]) -> list[str]:
    """summary.json, summary.md and the report against their checksums (and summary.json as JSON)."""
    from ..io import FILES_RECORD, file_problem
    from ..io.paths import REGULAR, file_kind

    rerun = "rerun the run to rewrite it"
    record = out / FILES_RECORD
    if (kind := file_kind(record)) not in (REGULAR, "absent"):  # never read through
        return [f"{record}: is {kind}, where attnflow keeps the checksums of its files; not read ({rerun})"]
    problems = []
    for name in (layout.SUMMARY_JSON, layout.SUMMARY_MD, layout.REPORT_MD, layout.REPORT_HTML):
        path = out / name
        if not path.exists():
            if has_result and name in (layout.SUMMARY_JSON, layout.SUMMARY_MD):
                notes.append(f"{path}: missing; {rerun}")
            continue
        problem = file_problem(path)
        fix = rerun if name.startswith("summary") else "redraw it with `attnflow plot`"
        if problem is not None:
            problems.append(f"{path}: {problem} ({fix})")
        elif name == layout.SUMMARY_JSON:
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as err:
                problems.append(f"{path}: not JSON ({err}); {rerun}")
    return problems


def verify_folder(path: str | os.PathLike) -> Verification:
    """Check a run folder or a sweep store (see the module docstring). FileNotFoundError when `path` is
    neither."""
    from .read import verify_sweep
    from .store import is_sweep_store

    text = os.fspath(path)
    if is_sweep_store(text):
        problems, notes = verify_sweep(text)
        return Verification(text, "sweep", problems, notes)
    if is_run_folder(text):
        problems, notes = verify_run(text)
        return Verification(text, "run", problems, notes)
    raise FileNotFoundError(
        f"{text}: not an attnflow run folder ({layout.CONFIG_FILE}, {layout.RESULT_STORE}, "
        f"{layout.PARTS_DIR}/) nor a sweep store (sweep.json)"
    )
