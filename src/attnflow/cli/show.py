"""`attnflow show`: what a run (or a sweep store) left, and the one-line refusal of a damaged result.

`show_command` is a Typer-annotated function; the CLI registers it with `app.command("show")`.
Light: it imports what it needs when it runs. It builds a `Document` of the table model
(`attnflow.experiments.tables`) and prints it (`console.print_document`): Rich tables sized to the
terminal, Markdown when piped, `--wide` for whole tables; `--json` (and `--csv` for a sweep store)
for programs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..experiments.layout import (
    CONFIG_FILE,
    FIGURES_DIR,
    PARTS_DIR,
    REPORT_MD,
    RESULT_STORE,
    SUMMARY_JSON,
    SUMMARY_MD,
)
from .console import EXIT_FAILED, EXIT_USAGE, Failure, exits, print_document
from .console import fail as _fail

if TYPE_CHECKING:
    from ..experiments.tables import Document, Section

__all__ = ["WideOption", "damaged", "print_summary", "show_command"]

WideOption = Annotated[bool, typer.Option("--wide", help="every table whole, one line per row, however wide")]


def damaged(err: Exception, directory: Path) -> typer.Exit:
    """A result that fails its checksums or cannot be read: one line naming the file, exit 1."""
    fix = f"rerun `attnflow run {directory / CONFIG_FILE} --out {directory}` to rebuild it"
    return _fail(f"{err}; {fix}", EXIT_FAILED)


def print_summary(summary: dict[str, Any], title: str, wide: bool = False) -> None:
    """A run's summary as `attnflow show` prints it (the rows of summary.md)."""
    from ..experiments.tables import summary_document

    print_document(summary_document(summary, title), wide=wide)


def show_command(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="output folder of `attnflow run` (or a sweep store)")
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="print the summary, dataset layout and provenance as JSON")
    ] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="a sweep store: its table of points as CSV")] = False,
    wide: WideOption = False,
) -> None:
    """Summary of a finished run: headline numbers, dataset layout and provenance.

    In a terminal the tables fit its width (--wide: whole); piped or redirected they are printed as
    Markdown, the rows of summary.md.
    """
    from .sweep import is_sweep_store

    if json_out and csv_out:
        raise _fail("--json and --csv: choose one", EXIT_USAGE)
    if is_sweep_store(directory):
        with exits([Failure((ValueError,), EXIT_USAGE, str)]):  # a damaged sweep.json
            _show_sweep(directory, json_out, csv_out, wide)
        return
    if csv_out:
        raise _fail(f"--csv is for a sweep store; {directory} is a run (use --json)", EXIT_USAGE)
    _check_finished(directory)
    info = _run_info(directory)
    if json_out:
        from ..io import to_json

        typer.echo(to_json(info, indent=2))
    else:
        print_document(show_document(info, directory), wide=wide)


def _check_finished(directory: Path) -> None:
    """Exit with a message unless `directory` holds a finished run (2: not a run; 1: unfinished)."""
    if not directory.is_dir():
        raise _fail(f"{directory}: no such folder", EXIT_USAGE)
    if (directory / SUMMARY_MD).exists():
        _checked_text(directory / SUMMARY_MD, directory)  # a summary altered since it was written: refused
        return
    parts_dir = directory / PARTS_DIR
    parts = sorted(p.stem for p in parts_dir.glob("*.zarr")) if parts_dir.is_dir() else []
    if parts:
        raise _fail(
            f"{directory}: unfinished run ({len(parts)} part(s) done: {', '.join(parts)}); "
            "rerun the same `attnflow run` command to complete it",
            EXIT_FAILED,
        )
    raise _fail(f"{directory}: not an attnflow run (no {SUMMARY_MD})", EXIT_USAGE)


def show_document(info: dict[str, Any], directory: Path) -> Document:
    """`attnflow show` of a run as a Document: its summary (the rows of summary.md; summary.md as
    written where there is no summary.json), then where its result lies and how it was made."""
    from ..experiments.tables import Document, Prose, Section, summary_document

    summary = info.get("summary")
    if isinstance(summary, dict):
        name = summary.get("experiment") or "run"
        doc = summary_document(summary, f"attnflow run: {name}")
    else:
        doc = Document("", (Section("", (Prose((_checked_text(directory / SUMMARY_MD, directory),)),)),))
    return Document(doc.title, (*doc.sections, _result_section(info)))


def _result_section(info: dict[str, Any]) -> Section:
    """Where the result lies (dataset, figures, report) and how it was made (provenance)."""
    from ..experiments.tables import Section, Table

    rows: list[tuple[str, str]] = []
    if "dataset" in info:
        ds, prov = info["dataset"], info["provenance"]
        versions = ", ".join(f"{k} {v}" for k, v in prov.get("versions", {}).items() if v)
        rows += [
            ("dataset", ds["path"]),
            ("sizes", ", ".join(f"{k}={v}" for k, v in ds["sizes"].items())),
            ("variables", ", ".join(ds["variables"])),
            ("computed", f"{prov.get('time_utc')} on {prov.get('host')} ({prov.get('cpu_count')} CPUs)"),
            ("versions", versions),
            ("kernel", str(info.get("kernel"))),
            ("integrator", str(info.get("integrator"))),
            *_wall_rows(prov),
        ]
    if info["figures"]:
        rows.append(("figures", ", ".join(info["figures"])))
    if info.get("report"):
        rows.append(("report", info["report"]))
    return Section("Result", (Table(("quantity", "value"), tuple(rows)),) if rows else ())


def _wall_rows(prov: Mapping[str, object]) -> list[tuple[str, str]]:
    wall = prov.get("wall_time_s")
    if not (isinstance(wall, dict) and wall.get("total") is not None):
        return []
    reused = wall.get("n_reused_parts", 0)
    return [
        ("wall time", f"{wall['total']:.1f} s over the runs that made it ({reused} part(s) reused)"),
        ("torch threads", str(prov.get("torch_threads", "?"))),
        ("device", str(prov.get("device", "?"))),
    ]


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
        from types import SimpleNamespace

        from ..io import StoreError, json_attr, read_layout

        try:  # its files checked against their checksums first; its metadata only (no xarray)
            layout = read_layout(store)
        except StoreError as err:
            raise damaged(err, directory) from None
        from ..experiments.folder import identity_problems

        for problem in identity_problems(directory)[:1]:  # summaries of another run: refused
            raise damaged(ValueError(problem), directory)
        info["dataset"] = {"path": str(store), "sizes": layout["sizes"], "variables": layout["variables"]}
        attrs = layout["attrs"]
        info["provenance"] = json_attr(SimpleNamespace(attrs=attrs), "provenance", {})
        info["kernel"], info["integrator"] = attrs.get("kernel"), attrs.get("integrator")
    figdir = directory / FIGURES_DIR
    info["figures"] = sorted(p.name for p in figdir.glob("*.png")) if figdir.is_dir() else []
    info["report"] = str(directory / REPORT_MD) if (directory / REPORT_MD).exists() else None
    return info


def _show_sweep(store: Path, json_out: bool, csv_out: bool, wide: bool = False) -> None:
    """`show` of a sweep store: the text summary, or its manifest as JSON, or its table as CSV."""
    from ..sweeps import summary_table, sweep_info

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
        from ..sweeps import sweep_document

        print_document(sweep_document(store), wide=wide)
