"""Running an experiment and drawing its figures: `run_experiment` (the run folder checked, locked,
its parts reused, the result and summaries written), `summary_markdown`, `plot_run`, `plot_sweep`,
`write_report`. Re-exported by `attnflow.experiments`."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import Reporter
from . import layout
from .registry import ConfigError, Experiment, experiment_of, experiment_of_dataset, lookup

if TYPE_CHECKING:
    import xarray as xr
    from pydantic import BaseModel

__all__ = ["plot_run", "plot_sweep", "run_experiment", "summary_markdown", "write_report"]


def summary_markdown(summary: Mapping[str, object], title: str = "") -> str:
    """The headline numbers as Markdown (summary.md): the table model of `tables.summary_document`
    (a table of the scalars, one table per nested section, the warnings as a list) rendered by
    `render.to_markdown`, as `attnflow show` and the report show them."""
    from .render import to_markdown
    from .tables import summary_document

    return to_markdown(summary_document(summary, title))


def run_experiment(
    config: BaseModel,
    out: Path | str | None = None,
    progress: Reporter | bool | None = None,
    quiet: bool = False,
    overwrite: bool = False,
) -> xr.Dataset:
    """Run `config`'s experiment. With `out`: write out/config.toml first, resume from out/parts/,
    then write out/result.zarr (atomically), out/summary.json and out/summary.md. Returns the Dataset.

    out is checked before anything is written there: a folder holding something else than a run is
    refused, and so is a run of another experiment or other parameters unless overwrite=True, which
    replaces it. A run may add values to a list of the experiment's `part_keys` (e.g. betas), and change
    the others while no result is written (a finished result is replaced only with overwrite=True): the
    parts it shares are reused, and config.toml is rewritten only once the new result is, so the folder's
    config and result always agree. A part is reused only if it is what this run computes
    (`attnflow.experiments.parts`); summary.json and summary.md are written with their checksums
    (`attnflow.io.files`). A lock left by a process that died is taken over, with a notice (shown, and not
    stored with the result: it is about the folder, not the result). The config is validated again first
    (a copy made with `model_copy(update=...)` skipped its checks). A new run that fails before finishing
    any part leaves nothing behind in out.

    Parameters
    ----------
    progress : bool or Reporter, optional
        True for progress bars and the run's messages (tqdm's notebook bars in Jupyter, Rich on stderr
        elsewhere); a Reporter (attnflow.progress) of your own; None or False (default): silent, as is
        quiet=True. The torch threads are the config's `threads` (docs/guide.md, "Threads").

    Raises
    ------
    RunFolderError, LockedError, ConfigError
        Naming what is in out; naming the lock's holder (one process at a time writes into out); the
        config's device unavailable here (nothing is written).
    """
    from ..io.lock import check_free, folder_lock
    from ..progress import reporter_for
    from .folder import discard_unfinished, plan_folder

    exp = experiment_of(config)
    config = _checked(exp, config)
    state = ""
    if out is not None:
        out = Path(out)
        if out.is_dir():
            check_free(out)  # a live writer first: what it writes is not what the folder holds
        plan_folder(out, config, exp, overwrite)  # before anything is written
    reporter, own = (Reporter(), False) if quiet else reporter_for(progress)
    try:
        if out is None:
            return _run(exp, config, None, reporter, "new")
        created = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            with folder_lock(out, on_stale=reporter.notice):
                state = plan_folder(out, config, exp, overwrite)  # again: another writer may have been first
                return _run(exp, config, out, reporter, state)
        except BaseException:
            if state == "new":
                discard_unfinished(out, created)
            raise
    finally:
        if own:
            reporter.close()


def _checked(exp: Experiment, config: BaseModel) -> BaseModel:
    """config validated again by its class (ConfigError naming the key), with its device available."""
    from pydantic import ValidationError

    from .._checks import check_device, torch_build_has_gpu
    from .config import format_validation_error

    try:
        config = exp.Config.model_validate(config.model_dump())
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None
    device = getattr(config, "device", "cpu")
    if device != "cpu" and "torch" not in sys.modules and torch_build_has_gpu() is False:
        raise ConfigError(
            f"config: device {device!r} is not available: the installed torch is a CPU build; use "
            "device = cpu, or install a CUDA build of torch"
        )
    if device != "cpu":
        try:
            check_device(device)
        except ValueError as err:
            raise ConfigError(f"config: {err}") from None
    return config


def _run(exp: Experiment, config: BaseModel, out: Path | None, reporter: Reporter, state: str) -> xr.Dataset:
    """The run of `run_experiment`, its folder (if any) checked and locked."""
    from .._threads import torch_threads
    from ..io import clean_stale, json_attr, to_json
    from . import folder as _folder
    from .config import config_warnings
    from .parts import count_reused

    for message in config_warnings(config):  # printed by the reporter, and stored with the result
        reporter.warn(message)
    if out is not None:
        if state == "replace":
            _folder.remove(out)
            reporter.info(f"{out}: replaced the run that was there")
        clean_stale(out)
        clean_stale(out / layout.PARTS_DIR)
        if state != "extend":  # an extend keeps the config of the result there until the new one is written
            _folder.write_config(out, config)
    t0 = time.perf_counter()
    with count_reused() as reused, torch_threads(getattr(config, "threads", 0)):
        ds = exp.run(config, out, reporter)
    this_run = time.perf_counter() - t0
    if "provenance" in ds.attrs:  # the compute time of the reused parts was spent by earlier runs
        prov = json_attr(ds, "provenance", {})
        prov["wall_time_s"] = {
            "total": this_run + sum(reused),
            "this_run": this_run,
            "reused_parts": sum(reused),
            "n_reused_parts": len(reused),
        }
        ds.attrs["provenance"] = to_json(prov)
    if "timings" in ds.attrs:  # one wall time: the summary's is this run's, as provenance and the last line
        ds.attrs["timings"] = to_json({**json_attr(ds, "timings", {}), "total_s": this_run})
    summary = exp.summarize(ds)
    if out is not None:
        if state == "extend":
            _folder.remove(out, _folder.DRAWN)  # figures and report of the previous result
        _folder.write_result(out, ds, summary, f"attnflow run: {exp.name}")
        if state == "extend":
            _folder.write_config(out, config)
    reporter.done(f"{exp.name}: done in {this_run:.1f} s")
    return ds


# ---------------------------------------------------------------------------------------- figures


def plot_run(
    ds: xr.Dataset, outdir: str | Path, animation: bool = False, dpi: int | None = None, pdf: bool = False
) -> list[Path]:
    """Every figure of a run of ds.attrs["experiment"] as PNG in outdir; pdf=True: also as PDF (vector,
    for a paper); animation=True: also the token animation where the run kept tokens (GIF, and MP4
    where ffmpeg is found). Returns the written paths."""
    from ..plot import DPI, figure_formats

    exp = experiment_of_dataset(ds)
    with figure_formats(*(("png", "pdf") if pdf else ("png",))):
        return list(exp.figures(ds, Path(outdir), dpi=dpi or DPI, animation=animation))


def plot_sweep(ds: xr.Dataset, outdir: str | Path, dpi: int | None = None, pdf: bool = False) -> list[Path]:
    """The figures of a sweep's Dataset (`attnflow.sweeps.open_sweep`): its experiment's
    `sweep_figures`, or the generic `attnflow.plot.plot_sweep` (also for an unknown experiment).
    PNG; pdf=True: also PDF."""
    from .. import plot

    name = ds.attrs.get("experiment")
    exp = lookup(name) if isinstance(name, str) else None
    draw = exp.sweep_figures if exp is not None and exp.sweep_figures is not None else plot.plot_sweep
    with plot.figure_formats(*(("png", "pdf") if pdf else ("png",))):
        return list(draw(ds, Path(outdir), dpi=dpi or plot.DPI))


def write_report(
    ds: xr.Dataset, summary: Mapping[str, object], figures: list[Path], outdir: str | Path
) -> Path:
    """`attnflow.experiments.report.write_report` with the titles and captions of ds's experiment;
    report.md and report.html get their checksums in outdir's record (`attnflow.io.files`)."""
    from ..io import record_files
    from .report import write_report as write

    name = ds.attrs.get("experiment")
    exp = lookup(name) if isinstance(name, str) else None
    captions = dict(exp.captions) if exp is not None else {}
    path = write(ds, summary, figures, outdir, captions=captions)
    record_files(outdir, [layout.REPORT_MD, layout.REPORT_HTML])  # what `verify` checks them against
    return path
