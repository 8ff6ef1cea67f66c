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
    """(problems, notes) of a run folder: config.toml readable, result.zarr and every part against
    their checksums, summary.json readable; an unfinished run, temporaries and a live lock are notes."""
    from ..io import dataset_problems
    from ..io.lock import describe, lock_holder

    out = Path(out)
    problems: list[str] = []
    notes: list[str] = []
    rerun = "rerun the run to rewrite it"
    cfg = out / layout.CONFIG_FILE
    if cfg.exists():
        try:
            values = tomllib.loads(cfg.read_text(encoding="utf-8"))
            if not isinstance(values.get("experiment"), str):
                problems.append(f"{cfg}: names no experiment (experiment = ...)")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            problems.append(f"{cfg}: not valid TOML ({err}); the run cannot be resumed from it")
    else:
        notes.append(f"{cfg}: missing; the run's parameters are unknown")
    result = out / layout.RESULT_STORE
    if result.exists():
        problems += [f"{f}: {p} ({rerun})" for f, p in dataset_problems(result)]
    parts = sorted((out / layout.PARTS_DIR).glob("*.zarr")) if (out / layout.PARTS_DIR).is_dir() else []
    for part in parts:
        problems += [f"{f}: {p} (a rerun recomputes this part)" for f, p in dataset_problems(part)]
    summary = out / layout.SUMMARY_JSON
    if summary.exists():
        try:
            json.loads(summary.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            problems.append(f"{summary}: not JSON ({err}); {rerun}")
    elif result.exists():
        notes.append(f"{summary}: missing; {rerun}")
    if not result.exists():
        notes.append(
            f"{result}: missing: the run is unfinished ({len(parts)} part(s) done); rerun it to complete it"
        )
    for folder in (out, out / layout.PARTS_DIR):
        if folder.is_dir():
            notes += [
                f"{p}: left by an interrupted write; the next run removes it"
                for p in sorted(folder.iterdir())
                if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name)
            ]
    if (holder := lock_holder(out)) is not None:
        notes.append(f"a run is writing into this folder: {describe(holder)}")
    checked = (["result.zarr"] if result.exists() else []) + ([f"{len(parts)} part(s)"] if parts else [])
    if checked:
        notes.append(f"checked against their checksums: {' and '.join(checked)}")
    return problems, notes


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
