"""`attnflow list` and `attnflow show`: what is there to run, and what a run left.

`list_command` and `show_command` are Typer-annotated functions; the CLI registers them with
`app.command("list")` and `app.command("show")`. Light: each imports what it needs when it runs.
Both build a `Document` of the table model (`attnflow.experiments.tables`) and print it
(`console.print_document`): Rich tables sized to the terminal, Markdown when piped, `--wide` for
whole tables; `--json` (and `--csv` where the output is a table) for programs.
"""

from __future__ import annotations

import json
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..experiments import DEFAULT_EXPERIMENT
from ..experiments.layout import (
    CONFIG_FILE,
    FIGURES_DIR,
    PARTS_DIR,
    REPORT_MD,
    RESULT_STORE,
    SUMMARY_JSON,
    SUMMARY_MD,
)
from .console import BAD_CONFIG, EXIT_FAILED, EXIT_USAGE, Failure, exits, print_document
from .console import fail as _fail

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..experiments.tables import Document, Section, Table

__all__ = ["PARAM_COLUMNS", "damaged", "list_command", "print_summary", "show_command", "type_words"]

WideOption = Annotated[bool, typer.Option("--wide", help="every table whole, one line per row, however wide")]


def damaged(err: Exception, directory: Path) -> typer.Exit:
    """A result that fails its checksums or cannot be read: one line naming the file, exit 1."""
    fix = f"rerun `attnflow run {directory / CONFIG_FILE} --out {directory}` to rebuild it"
    return _fail(f"{err}; {fix}", EXIT_FAILED)


# ---------------------------------------------------------------------------------- types

#: the words for Python's types in `attnflow list`
_WORDS: dict[Any, str] = {
    int: "integer",
    float: "number",
    bool: "true or false",
    str: "text",
    Path: "path",
    type(None): "none",
    dict: "table",
}
_PLURALS = {"integer": "integers", "number": "numbers", "text": "texts", "path": "paths"}
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _bounds(metadata: typing.Iterable[Any]) -> str:
    """Constraints of an annotated type in words: " > 0", " >= 1", " > 0 and <= 1.571"."""
    from .._text import format_value

    found = [
        f"{sign} {format_value(getattr(m, name))}"
        for m in metadata
        for name, sign in _BOUNDS
        if getattr(m, name, None) is not None
    ]
    return " " + " and ".join(found) if found else ""


def _default_text(value: Any) -> str:
    """A default as its TOML/JSON literal ("float64", [10.0, 30.0], 0.1); None as none."""
    return "none" if value is None else json.dumps(value)


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def type_words(ann: Any, metadata: typing.Iterable[Any] = ()) -> str:
    """A config field's type in words: "integer", "number > 0 or none", "list of numbers",
    "uniform, vmf or graded"; metadata: pydantic's constraints of the field (Gt(0), ...)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return type_words(args[0], [*args[1:], *metadata])
    if origin is typing.Literal:
        return _either([str(a) for a in args])
    if origin in (typing.Union, types.UnionType):
        parts = [type_words(a) for a in args if a is not type(None)]
        return _either(parts + (["none"] if type(None) in args else []))
    if origin in (list, tuple, set, frozenset):
        inner = type_words(args[0]) if args else "value"
        head, _, rest = inner.partition(" ")
        return f"list of {_PLURALS[head]} {rest}".rstrip() if head in _PLURALS else f"list, each {inner}"
    if origin is dict:
        return "table"
    return _WORDS.get(ann, getattr(ann, "__name__", str(ann))) + _bounds(metadata)


# ----------------------------------------------------------------------------------------- list

PARAM_COLUMNS = ("parameter", "type", "default", "meaning")


def _describe(Config: type[BaseModel], skip: set[str] | frozenset[str] = frozenset()) -> list[dict[str, str]]:
    """One row (PARAM_COLUMNS) per field of Config, `experiment` and the names in skip left out."""
    return [
        dict(
            zip(
                PARAM_COLUMNS,
                (name, type_words(f.annotation, f.metadata), _default_text(f.default), f.description or ""),
                strict=True,
            )
        )
        for name, f in Config.model_fields.items()
        if name != "experiment" and name not in skip
    ]


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


def _param_table(rows: list[dict[str, str]]) -> Table:
    from ..experiments.tables import Table

    return Table(PARAM_COLUMNS, tuple(tuple(r[c] for c in PARAM_COLUMNS) for r in rows))


def _experiment_section(name: str, once: bool, shared: list[str]) -> Section:
    """One experiment in `attnflow list`: its description, parameters (without the shared ones when
    once), which shared parameters it takes, its presets."""
    from ..experiments import REGISTRY
    from ..experiments.needs import needs_of
    from ..experiments.tables import Prose, Section, Table

    exp = REGISTRY[name]
    blocks: list[Any] = [
        Prose((exp.description,)),
        _param_table(_describe(exp.Config, set(shared) if once else set())),
    ]
    if once and shared:
        blocks.append(Prose((f"shared parameters: {', '.join(shared)}",)))
    needs = needs_of(exp.Config)
    if needs:
        listed = "; ".join(f"{n.what} ({n.why})" for n in needs)
        blocks.append(Prose((f"needs of the weights, checked when a config is made: {listed}",)))
    if exp.presets:
        rows = tuple(
            (p, ", ".join(f"{k}={v}" for k, v in values.items())) for p, values in exp.presets.items()
        )
        blocks.append(Table(("preset", "values"), rows))
    return Section(name, tuple(blocks))


def list_document(names: list[str], once: bool) -> Document:
    """`attnflow list` as a Document: the shared parameters once (when once), then each experiment."""
    from ..experiments import REGISTRY, SimulationConfig
    from ..experiments.tables import Document, Prose, Section

    sections = []
    if once:
        note = Prose(("Each experiment below says which of these it takes.",))
        sections.append(Section("Shared parameters", (note, _param_table(_describe(SimulationConfig)))))
    sections += [_experiment_section(n, once, _shared(REGISTRY[n].Config)) for n in names]
    return Document("", tuple(sections))


def _list_json(names: list[str], once: bool) -> None:
    from ..experiments import REGISTRY, SimulationConfig
    from ..experiments.needs import needs_of
    from ..io import to_json

    doc: dict[str, Any] = {"shared_parameters": _describe(SimulationConfig)} if once else {}
    doc["experiments"] = {}
    for n in names:
        shared = _shared(REGISTRY[n].Config)
        doc["experiments"][n] = {
            "description": REGISTRY[n].description,
            "parameters": _describe(REGISTRY[n].Config, set(shared) if once else set()),
            "shared_parameters": shared,
            "needs": [need.name for need in needs_of(REGISTRY[n].Config)],
            "presets": REGISTRY[n].presets,
        }
    typer.echo(to_json(doc, indent=2))


def _list_csv(names: list[str]) -> None:
    import csv

    from ..experiments import REGISTRY

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(("experiment", *PARAM_COLUMNS))
    for name in names:
        for row in _describe(REGISTRY[name].Config):
            writer.writerow((name, *row.values()))


def _list_toml(name: str | None) -> None:
    from ..experiments import load_config, to_toml

    if name is None:
        raise _fail(
            f"--toml needs an experiment or preset name, e.g. `attnflow list {DEFAULT_EXPERIMENT} --toml`",
            EXIT_USAGE,
        )
    with exits([BAD_CONFIG]), warnings.catch_warnings():  # a template is not a run: no ConfigWarning
        warnings.simplefilter("ignore", UserWarning)
        typer.echo(to_toml(load_config(name)), nl=False)


def _experiment_names(name: str | None) -> list[str]:
    """The experiments `attnflow list NAME` shows: NAME's (a preset's experiment), or all."""
    from ..experiments import PRESETS, REGISTRY

    if name is None:
        return list(REGISTRY)
    if name in PRESETS:
        return [PRESETS[name][0]]
    if name in REGISTRY:
        return [name]
    raise _fail(f"unknown experiment {name!r}; known: {', '.join([*REGISTRY, *PRESETS])}", EXIT_USAGE)


def list_command(
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="only this experiment or preset")] = None,
    toml: Annotated[
        bool, typer.Option("--toml", help="print NAME's config as TOML (a template file)")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print experiments and parameters as JSON")
    ] = False,
    csv_out: Annotated[
        bool, typer.Option("--csv", help="print one CSV row per experiment and parameter")
    ] = False,
    wide: WideOption = False,
) -> None:
    """List experiments, presets and every parameter with its default.

    The parameters shared by the experiments (seed, kernel, integrator, tolerances, dtype, threads)
    are shown once, first; each experiment then shows its own. `attnflow list NAME` shows all of
    NAME's. `attnflow list concentration --toml > my.toml` writes a config file to edit and run.
    In a terminal the tables fit its width; piped, they are Markdown of at most 120 columns.
    """
    if toml:
        return _list_toml(name)
    if json_out and csv_out:
        raise _fail("--json and --csv: choose one", EXIT_USAGE)
    names = _experiment_names(name)
    if csv_out:
        return _list_csv(names)
    if json_out:
        return _list_json(names, once=name is None)
    print_document(list_document(names, once=name is None), wide=wide, fit_piped=True)
    return None


# ----------------------------------------------------------------------------------------- show


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


def _wall_rows(prov: dict[str, Any]) -> list[tuple[str, str]]:
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
