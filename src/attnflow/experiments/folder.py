"""Whether a run may write into its folder, checked before anything is written there.

`plan_folder(out, config, exp, overwrite)` reads the folder and says how the run will use it: "new"
(absent or empty), "resume" (a run of the same config: its parts are reused), "extend" (the same
experiment and parameters, other `Experiment.part_keys`, e.g. more betas) or "replace" (overwrite=True
on a run of another experiment or other parameters). Anything else is a RunFolderError naming what is
there: a file, a folder that is not writable, a folder holding something else than a run. The folder is
left untouched by the check. `run_experiment` checks, then takes the folder's lock, then checks again.

Standard library only (tomllib).
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import layout

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .registry import Experiment

__all__ = ["DRAWN", "RUN_FILES", "RunFolderError", "plan_folder", "remove"]

#: every name a run writes into its folder
RUN_FILES = (
    layout.CONFIG_FILE,
    layout.PARTS_DIR,
    layout.RESULT_STORE,
    layout.SUMMARY_JSON,
    layout.SUMMARY_MD,
    layout.FIGURES_DIR,
    layout.REPORT_MD,
    layout.REPORT_HTML,
)
#: drawn from result.zarr: stale once the result changes
DRAWN = (layout.FIGURES_DIR, layout.REPORT_MD, layout.REPORT_HTML)


class RunFolderError(ValueError):
    """The output folder `path` cannot take this run: `problem` says what is there. `overwrite_helps`:
    it holds another run, which overwrite=True (the command line's --overwrite) replaces."""

    def __init__(self, path: str | os.PathLike, problem: str, overwrite_helps: bool = False) -> None:
        self.path, self.problem, self.overwrite_helps = os.fspath(path), problem, overwrite_helps
        super().__init__(self.message("out", "overwrite=True"))

    def message(self, out: str = "out", overwrite: str = "overwrite=True") -> str:
        """The error in the words of a front end (`--out`, `--overwrite` for the command line)."""
        fix = f"; pass {overwrite} to replace it, or choose another {out}" if self.overwrite_helps else ""
        return f"{out} {self.path}: {self.problem}{fix}"


def _names(out: Path) -> set[str]:
    """What the folder holds, without hidden files: its lock, the temporaries of interrupted writes,
    a file manager's .DS_Store."""
    return {p.name for p in out.iterdir() if not p.name.startswith(".")}


def _writable(folder: Path) -> bool:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK)


def _toml_values(config: BaseModel) -> dict[str, Any]:
    """The config as its config.toml reads back (the form the folder's file is compared in)."""
    from .config import to_toml

    return tomllib.loads(to_toml(config, comments=False))


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def plan_folder(out: Path, config: BaseModel, exp: Experiment, overwrite: bool = False) -> str:
    """How a run of `config` uses the folder `out`: "new", "resume", "extend" or "replace" (module
    docstring); RunFolderError naming what is there when it cannot. Reads only."""
    if out.exists() and not out.is_dir():
        raise RunFolderError(out, "exists and is not a folder")
    if not _writable(out):
        where = out if out.exists() else "its parent folder"
        raise RunFolderError(
            out, f"cannot be written ({where} is not writable); choose a folder you can write to"
        )
    if not out.exists():
        return "new"
    names = _names(out)
    if not names:
        return "new"
    if layout.CONFIG_FILE not in names:
        if names <= set(RUN_FILES):  # pieces of a run without its config: each part carries its fingerprint
            return "resume"
        other = sorted(names - set(RUN_FILES))
        listed = ", ".join(other[:4]) + (f" and {len(other) - 4} more" if len(other) > 4 else "")
        raise RunFolderError(
            out, f"is not empty and holds no attnflow run (it holds {listed}); choose an empty or new folder"
        )
    path = out / layout.CONFIG_FILE
    try:
        there = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        if overwrite:
            return "replace"
        raise RunFolderError(
            out, f"its {layout.CONFIG_FILE} cannot be read ({type(err).__name__}: {err})", True
        ) from None
    if there.get("experiment") != exp.name:
        if overwrite:
            return "replace"
        raise RunFolderError(out, f"holds a run of {there.get('experiment')!r}, not {exp.name!r}", True)
    here = _toml_values(config)
    fixed = sorted(
        k for k in {*here, *there} if k not in {"threads", *exp.part_keys} and here.get(k) != there.get(k)
    )
    if fixed:
        if overwrite:
            return "replace"
        diff = ", ".join(f"{k} = {_show(there.get(k))} there, {_show(here.get(k))} here" for k in fixed[:4])
        raise RunFolderError(out, f"holds a {exp.name} run with other parameters ({diff})", True)
    same = all(here.get(k) == there.get(k) for k in exp.part_keys)
    return "resume" if same else "extend"


def remove(out: Path, names: tuple[str, ...] = RUN_FILES) -> None:
    """Remove these files and folders of a run from `out` (by default all of them; other files stay)."""
    for name in names:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
