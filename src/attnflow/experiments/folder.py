"""Whether a run may write into its folder, checked before anything is written there.

`plan_folder(out, config, exp, overwrite)` reads the folder and says how the run will use it: "new"
(absent or empty), "resume" (a run of the same config: its parts are reused), "extend" (the same
experiment and parameters, other `Experiment.part_keys`: values added to a list such as betas; any
change of them while the run is unfinished) or "replace" (overwrite=True on a run of another
experiment or other parameters, or on a finished run that another value of a part key would
replace). Anything else is a RunFolderError naming what is there: a file, a folder that is not
writable, a folder holding something else than a run, a symbolic link out of the folder in place of
one of the run's files (or of a part), a file where the run keeps a folder (or the reverse), a lock
file that is not a regular file. The folder is left untouched by the
check, so `overwrite` deletes nothing before every check has passed. `run_experiment` checks, then
takes the folder's lock, then checks again.

`write_config` and `write_result` write the run's own files there, inside it (`attnflow.io.inside`),
the summaries with their checksums. Standard library and `attnflow.io` only.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from ..io.lock import lock_file_problem
from ..io.paths import link_out
from ..io.stores import is_leftover
from . import layout

if TYPE_CHECKING:
    import xarray as xr
    from pydantic import BaseModel

    from .registry import Experiment

__all__ = [
    "DRAWN",
    "FOLDERS",
    "RUN_FILES",
    "RUN_KEY",
    "RunFolderError",
    "discard_unfinished",
    "identity_problems",
    "plan_folder",
    "remove",
    "write_config",
    "write_result",
]

#: the key of summary.json (and row of summary.md) holding the run fingerprint of result.zarr
RUN_KEY = "run"
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
#: the names of RUN_FILES that are folders (zarr stores are folders too); the others are files
FOLDERS = (layout.PARTS_DIR, layout.RESULT_STORE, layout.FIGURES_DIR)


class RunFolderError(ValueError):
    """The output folder `path` cannot take this run: `problem` says what is there. `overwrite_helps`:
    it holds another run, which overwrite=True (the command line's --overwrite) replaces."""

    def __init__(self, path: str | os.PathLike[str], problem: str, overwrite_helps: bool = False) -> None:
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


def _toml_values(config: BaseModel) -> dict[str, object]:
    """The config as its config.toml reads back (the form the folder's file is compared in)."""
    from .config import to_toml

    return tomllib.loads(to_toml(config, comments=False))


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_entries(out: Path) -> None:
    """RunFolderError naming the first of the run's names in `out` that it cannot use: a symbolic link
    out of the folder (the run's files, its parts), a file where a folder belongs or the reverse, a
    lock file that is not a regular file."""
    problem = lock_file_problem(out)
    if problem is not None:
        raise RunFolderError(out, problem)
    names: list[tuple[str, ...]] = [(name,) for name in RUN_FILES]
    parts = out / layout.PARTS_DIR
    if parts.is_dir() and link_out(out, layout.PARTS_DIR) is None:
        names += [(layout.PARTS_DIR, p.name) for p in sorted(parts.iterdir()) if not is_leftover(p.name)]
    for path in names:
        err = link_out(out, *path)
        if err is not None:
            raise RunFolderError(out, f"{err.path} {err.problem}")
    for name in RUN_FILES:
        p = out / name
        if p.exists() and p.is_dir() != (name in FOLDERS):
            kind, where = ("a folder", "a file") if p.is_dir() else ("a file", "a folder")
            raise RunFolderError(
                out, f"{p} is {kind}, where the run keeps {where} of that name: remove or rename it"
            )


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
    _check_entries(out)
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
        # the parts carry their fingerprints: without the broken file the run resumes from them
        raise RunFolderError(
            out,
            f"its {layout.CONFIG_FILE} cannot be read ({type(err).__name__}: {err}); delete {path} and "
            f"rerun the same command: the run resumes from the finished parts in {layout.PARTS_DIR}/ "
            "(each is reused only if it is what this run computes)",
        ) from None
    if there.get("experiment") != exp.name:
        if overwrite:
            return "replace"
        raise RunFolderError(out, f"holds a run of {there.get('experiment')!r}, not {exp.name!r}", True)
    return _compare(out, config, exp, there, overwrite)


def _compare(out: Path, config: BaseModel, exp: Experiment, there: dict[str, object], overwrite: bool) -> str:
    """`plan_folder` of a folder holding a run of `exp` whose config.toml reads `there`."""
    here = _toml_values(config)
    fixed = sorted(
        k for k in {*here, *there} if k not in {"threads", *exp.part_keys} and here.get(k) != there.get(k)
    )
    if fixed:
        if overwrite:
            return "replace"
        diff = ", ".join(f"{k} = {_show(there.get(k))} there, {_show(here.get(k))} here" for k in fixed[:4])
        raise RunFolderError(out, f"holds a {exp.name} run with other parameters ({diff})", True)
    if all(here.get(k) == there.get(k) for k in exp.part_keys):
        return "resume"
    changed = _not_extending(here, there, exp.part_keys)
    if changed and (out / layout.RESULT_STORE).exists():  # a finished result is replaced only when asked
        if overwrite:
            return "replace"
        raise RunFolderError(
            out,
            f"holds a finished {exp.name} run and {', '.join(changed[:3])} makes another run (only adding "
            "values to a list, e.g. betas, extends a finished run)",
            True,
        )
    return "extend"


def _not_extending(here: dict[str, object], there: dict[str, object], keys: tuple[str, ...]) -> list[str]:
    """The keys (as "k = old there, new here") whose change does more than add values to a list."""
    return [
        f"{k} = {_show(there.get(k))} there, {_show(here.get(k))} here"
        for k in keys
        if here.get(k) != there.get(k) and not _adds_values(here.get(k), there.get(k))
    ]


def _adds_values(new: object, old: object) -> bool:
    """Whether `new` is a list holding every value of `old` (a list, one value, or none)."""
    olds = old if isinstance(old, list) else [old] if old else []
    return isinstance(new, list) and all(v in new for v in olds)


def remove(out: Path, names: tuple[str, ...] = RUN_FILES) -> None:
    """Remove these files and folders of a run from `out` (by default all of them; other files stay),
    with their checksums. A symbolic link is removed itself, never what it points to; one out of the
    folder is refused first (OutsideFolderError), before anything is removed."""
    from ..io import forget_files

    for name in names:
        err = link_out(out, name)
        if err is not None:
            raise err
    for name in names:
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    forget_files(out, names)


def discard_unfinished(out: Path, created: bool) -> None:
    """After a new run failed: remove what it wrote unless it finished a part (kept for a resume),
    and the folder itself when the run `created` it and nothing but hidden files (its checksums'
    record) is left there."""
    parts = out / layout.PARTS_DIR
    if parts.is_dir() and any(parts.glob("*.zarr")):
        return
    remove(out)
    if created and out.is_dir() and not _names(out):
        shutil.rmtree(out)


def write_config(out: Path, config: BaseModel) -> None:
    """out/config.toml, atomically: the full config, to rerun (`attnflow run out/config.toml`)."""
    from ..io import atomic_write_text, inside
    from .config import to_toml

    atomic_write_text(inside(out, layout.CONFIG_FILE), to_toml(config))


def write_result(out: Path, ds: xr.Dataset, summary: dict[str, object], title: str) -> None:
    """out/result.zarr (atomically, with its checksums), then summary.json and summary.md (titled
    `title`) with theirs (`attnflow.io.write_checked_text`: what `show` and `verify` check them
    against). The summaries and the file record carry the run fingerprint of the store
    (`attnflow.io.store_fingerprint`): `identity_problems` ties them to this result."""
    from ..io import inside, record_run, store_fingerprint, to_json, write_checked_text, write_dataset
    from . import summary_markdown

    run = store_fingerprint(write_dataset(ds, inside(out, layout.RESULT_STORE)))
    summary = {**summary, RUN_KEY: run}
    record_run(out, run)
    write_checked_text(inside(out, layout.SUMMARY_JSON), to_json(summary, indent=2) + "\n")
    write_checked_text(inside(out, layout.SUMMARY_MD), summary_markdown(summary, title))


def identity_problems(out: Path) -> list[str]:
    """Where summary.json, summary.md or the file record of the finished run `out` carry another run
    fingerprint than its result.zarr (copied from another run), one line each; [] when they agree.
    Call it once result.zarr passed its checksums."""
    import json
    import re

    from ..io import FILES_RECORD, recorded_run, store_fingerprint
    from ..io.paths import REGULAR, file_kind

    run = store_fingerprint(out / layout.RESULT_STORE)
    problems = []
    if recorded_run(out) != run:
        problems.append(f"{out / FILES_RECORD}: {_other_run(recorded_run(out))}")
    for name in (layout.SUMMARY_JSON, layout.SUMMARY_MD):
        path = out / name
        if file_kind(path) != REGULAR:
            continue  # missing, a link, a FIFO...: named by its checksum check, never read here
        try:
            text = path.read_text(encoding="utf-8")
            if name == layout.SUMMARY_JSON:
                held = json.loads(text).get(RUN_KEY)
            else:
                held = next(iter(re.findall(rf"^\| {RUN_KEY} +\| ([0-9a-f]+) +\|", text, re.M)), None)
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            continue  # missing or unreadable: its checksum says so
        if held != run:
            problems.append(f"{path}: {_other_run(held)}")
    return problems


def _other_run(held: str | None) -> str:
    """Why a file whose run fingerprint is `held` (not result.zarr's) is not trusted, and the fix."""
    fix = "rerun the run to rewrite it (its parts are reused)"
    if held is None:
        return f"carries no run fingerprint (written by an older attnflow, or not with this result); {fix}"
    where = f"not written with the {layout.RESULT_STORE} there (copied from another run?)"
    return f"its run fingerprint is {held}, {where}; {fix}"
