"""`attnflow list` and `attnflow show`: what is there to run, and what a run left.

`list_command` and `show_command` are Typer-annotated functions; the CLI registers them with
`app.command("list")` and `app.command("show")`. Light: each imports what it needs when it runs.
Output goes through `_console.console` (full width when piped); `--json` (and `--csv` where the
output is a table) for programs.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..experiments import DEFAULT_EXPERIMENT, ConfigError
from ..experiments.layout import (
    CONFIG_FILE,
    FIGURES_DIR,
    PARTS_DIR,
    REPORT_MD,
    RESULT_STORE,
    SUMMARY_JSON,
    SUMMARY_MD,
)
from .console import EXIT_FAILED, EXIT_USAGE, console
from .console import fail as _fail

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["damaged", "list_command", "show_command"]


def damaged(err: Exception, directory: Path) -> typer.Exit:
    """A result that fails its checksums or cannot be read: one line naming the file, exit 1."""
    fix = f"rerun `attnflow run {directory / CONFIG_FILE} --out {directory}` to rebuild it"
    return _fail(f"{err}; {fix}", EXIT_FAILED)


# ----------------------------------------------------------------------------------------- list


def _type_name(ann: Any) -> str:
    import typing

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(ann, "__name__", str(ann))


PARAM_COLUMNS = ("parameter", "type", "default", "meaning")


def _describe(Config: type[BaseModel], skip: set[str] | frozenset[str] = frozenset()) -> list[dict[str, str]]:
    """One row (PARAM_COLUMNS) per field of Config, `experiment` and the names in skip left out."""
    rows = []
    for name, f in Config.model_fields.items():
        if name == "experiment" or name in skip:
            continue
        rows.append(
            dict(
                zip(
                    PARAM_COLUMNS,
                    (name, _type_name(f.annotation), json.dumps(f.default), f.description or ""),
                    strict=True,
                )
            )
        )
    return rows


def _shared(Config: type[BaseModel]) -> list[str]:
    """The fields of Config that are the shared simulation parameters exactly (same type, default and
    meaning as in `SimulationConfig`): `attnflow list` prints those once."""
    from ..experiments import SimulationConfig

    base = SimulationConfig.model_fields
    return [
        name
        for name, f in Config.model_fields.items()
        if name in base
        and (f.annotation, f.default, f.description)
        == (base[name].annotation, base[name].default, base[name].description)
    ]


def _table(rows: list[dict[str, str]]):
    from rich.markup import escape
    from rich.table import Table

    table = Table(expand=False)
    for col in PARAM_COLUMNS:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(escape(row[c]) for c in PARAM_COLUMNS))
    return table


def list_command(
    name: Annotated[str | None, typer.Argument(help="only this experiment or preset")] = None,
    toml: Annotated[
        bool, typer.Option("--toml", help="print NAME's config as TOML (a template file)")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print experiments and parameters as JSON")
    ] = False,
    csv_out: Annotated[
        bool, typer.Option("--csv", help="print one CSV row per experiment and parameter")
    ] = False,
) -> None:
    """List experiments, presets and every parameter with its default.

    The parameters shared by the experiments (seed, kernel, integrator, tolerances, dtype, threads)
    are shown once, first; each experiment then shows its own. `attnflow list NAME` shows all of
    NAME's. `attnflow list concentration --toml > my.toml` writes a config file to edit and run.
    """
    from rich.markup import escape

    from ..experiments import PRESETS, REGISTRY, SimulationConfig, load_config, to_toml

    if toml:
        if name is None:
            raise _fail(
                "--toml needs an experiment or preset name, "
                f"e.g. `attnflow list {DEFAULT_EXPERIMENT} --toml`",
                EXIT_USAGE,
            )
        try:
            with warnings.catch_warnings():  # a template is not a run: no ConfigWarning about it
                warnings.simplefilter("ignore", UserWarning)
                typer.echo(to_toml(load_config(name)), nl=False)
        except ConfigError as err:
            raise _fail(str(err), EXIT_USAGE) from None
        return
    if json_out and csv_out:
        raise _fail("--json and --csv: choose one", EXIT_USAGE)
    if name is not None and name not in REGISTRY and name not in PRESETS:
        raise _fail(f"unknown experiment {name!r}; known: {', '.join([*REGISTRY, *PRESETS])}", EXIT_USAGE)
    names = [PRESETS[name][0] if name in PRESETS else name] if name else list(REGISTRY)
    shared = {n: _shared(REGISTRY[n].Config) for n in names}
    once = name is None  # all experiments: the shared parameters once, then each one's own
    if csv_out:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(("experiment", *PARAM_COLUMNS))
        for exp_name in names:
            for row in _describe(REGISTRY[exp_name].Config):
                writer.writerow((exp_name, *row.values()))
        return
    if json_out:
        from ..io import to_json

        doc: dict[str, Any] = {}
        if once:
            doc["shared_parameters"] = _describe(SimulationConfig)
        doc["experiments"] = {
            n: {
                "description": REGISTRY[n].description,
                "parameters": _describe(REGISTRY[n].Config, set(shared[n]) if once else set()),
                "shared_parameters": shared[n],
                "presets": REGISTRY[n].presets,
            }
            for n in names
        }
        typer.echo(to_json(doc, indent=2))
        return
    out = console()
    if once:
        out.print("Shared parameters (each experiment below says which it takes)", highlight=False)
        out.print(_table(_describe(SimulationConfig)))
        out.print()
    for exp_name in names:
        exp = REGISTRY[exp_name]
        rows = _describe(exp.Config, set(shared[exp_name]) if once else set())
        out.print(f"{exp_name}: {escape(exp.description)}", highlight=False)
        out.print(_table(rows))
        if once and shared[exp_name]:
            out.print(f"  shared parameters: {escape(', '.join(shared[exp_name]))}")
        for preset, values in exp.presets.items():
            out.print(
                f"  preset [bold]{preset}[/bold]: " + escape(", ".join(f"{k}={v}" for k, v in values.items()))
            )
        out.print()


# ----------------------------------------------------------------------------------------- show


def show_command(
    directory: Annotated[Path, typer.Argument(help="output folder of `attnflow run` (or a sweep store)")],
    json_out: Annotated[
        bool, typer.Option("--json", help="print the summary, dataset layout and provenance as JSON")
    ] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="a sweep store: its table of points as CSV")] = False,
) -> None:
    """Summary of a finished run: headline numbers, dataset layout and provenance.

    In a terminal the summary is rendered; piped or redirected it is printed as Markdown.
    """
    from .sweep import is_sweep_store

    if json_out and csv_out:
        raise _fail("--json and --csv: choose one", EXIT_USAGE)
    if is_sweep_store(directory):
        try:
            _show_sweep(directory, json_out, csv_out)
        except ValueError as err:  # a damaged sweep.json
            raise _fail(str(err), EXIT_USAGE) from None
        return
    if csv_out:
        raise _fail(f"--csv is for a sweep store; {directory} is a run (use --json)", EXIT_USAGE)
    if not directory.is_dir():
        raise _fail(f"{directory}: no such folder", EXIT_USAGE)
    summary = directory / SUMMARY_MD
    if not summary.exists():
        parts_dir = directory / PARTS_DIR
        parts = sorted(p.stem for p in parts_dir.glob("*.zarr")) if parts_dir.is_dir() else []
        if parts:
            raise _fail(
                f"{directory}: unfinished run ({len(parts)} part(s) done: {', '.join(parts)}); "
                "rerun the same `attnflow run` command to complete it",
                EXIT_FAILED,
            )
        raise _fail(f"{directory}: not an attnflow run (no {SUMMARY_MD})", EXIT_USAGE)
    info = _run_info(directory)
    if json_out:
        from ..io import to_json

        typer.echo(to_json(info, indent=2))
        return
    text = _checked_text(summary, directory)
    out = console()
    if out.is_terminal:
        from rich.markdown import Markdown

        out.print(Markdown(text))
    else:
        out.print(text, markup=False, highlight=False)
    if "dataset" in info:
        ds, prov = info["dataset"], info["provenance"]
        out.print(f"dataset {ds['path']}: " + ", ".join(f"{k}={v}" for k, v in ds["sizes"].items()))
        out.print("variables: " + ", ".join(ds["variables"]))
        versions = ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items() if v)
        out.print(
            f"computed {prov.get('time_utc')} on {prov.get('host')} "
            f"({prov.get('cpu_count')} CPUs): {versions}"
        )
        out.print(f"kernel: {info.get('kernel')}; integrator: {info.get('integrator')}")
        wall = prov.get("wall_time_s")
        if isinstance(wall, dict) and wall.get("total") is not None:
            reused = wall.get("n_reused_parts", 0)
            out.print(
                f"wall time {wall['total']:.1f} s over the runs that made it ({reused} part(s) reused); "
                f"torch threads {prov.get('torch_threads', '?')}; device {prov.get('device', '?')}"
            )
    if info["figures"]:
        out.print("figures: " + ", ".join(info["figures"]))
    if info.get("report"):
        out.print(f"report: {info['report']}")


def _checked_text(path: Path, directory: Path) -> str:
    """The text of a summary file of the run `directory` as it was written (its checksum), else the
    one-line refusal naming it (`damaged`)."""
    from ..io import StoreError, read_checked_text

    try:
        return read_checked_text(path)
    except StoreError as err:
        raise damaged(err, directory) from None


def _run_info(directory: Path) -> dict[str, Any]:
    """What `show` prints of a finished run: summary, dataset layout, provenance, figures, report."""
    info: dict[str, Any] = {"run": str(directory)}
    summary_json = directory / SUMMARY_JSON
    try:
        text = _checked_text(summary_json, directory) if summary_json.exists() else None
        info["summary"] = json.loads(text) if text is not None else None
    except ValueError as err:
        raise damaged(ValueError(f"{summary_json}: not JSON ({err})"), directory) from None
    store = directory / RESULT_STORE
    if store.exists():
        from ..io import StoreError, json_attr, read_dataset

        try:
            ds = read_dataset(store, load=False)  # its files checked against their checksums first
        except StoreError as err:
            raise damaged(err, directory) from None
        info["dataset"] = {
            "path": str(store),
            "sizes": {str(k): int(v) for k, v in ds.sizes.items()},
            "variables": [str(v) for v in ds.data_vars],
        }
        info["provenance"] = json_attr(ds, "provenance", {})
        info["kernel"], info["integrator"] = ds.attrs.get("kernel"), ds.attrs.get("integrator")
    figdir = directory / FIGURES_DIR
    info["figures"] = sorted(p.name for p in figdir.glob("*.png")) if figdir.is_dir() else []
    info["report"] = str(directory / REPORT_MD) if (directory / REPORT_MD).exists() else None
    return info


def _show_sweep(store: Path, json_out: bool, csv_out: bool) -> None:
    """`show` of a sweep store: the text summary, or its manifest as JSON, or its table as CSV."""
    from ..sweeps import show_sweep, summary_table, sweep_info

    if json_out:
        from ..io import to_json

        typer.echo(to_json(sweep_info(store), indent=2))
    elif csv_out:
        import csv

        header, rows = summary_table(store, max_columns=1000)
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    else:
        out = console()
        typer.echo(show_sweep(store, width=out.width), nl=False)
