"""`attnflow list`: what is there to run (`attnflow show`, what a run left, is in show.py).

`list_command` is a Typer-annotated function; the CLI registers it with `app.command("list")`.
Light: it imports what it needs when it runs. It builds a `Document` of the table model
(`attnflow.experiments.tables`) and prints it (`console.print_document`): Rich tables sized to the
terminal, Markdown when piped, `--wide` for whole tables; `--json` and `--csv` for programs.
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
from .console import BAD_CONFIG, EXIT_USAGE, exits, print_document
from .console import fail as _fail
from .show import WideOption

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..experiments.tables import Document, Section, Table

__all__ = ["PARAM_COLUMNS", "list_command", "type_words"]


# ---------------------------------------------------------------------------------- types

#: the words for Python's types in `attnflow list`
_WORDS: dict[object, str] = {
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


def _bounds(metadata: typing.Iterable[object]) -> str:
    """Constraints of an annotated type in words: " > 0", " >= 1", " > 0 and <= 1.571"."""
    from .._text import format_value

    found = [
        f"{sign} {format_value(getattr(m, name))}"
        for m in metadata
        for name, sign in _BOUNDS
        if getattr(m, name, None) is not None
    ]
    return " " + " and ".join(found) if found else ""


def _default_text(value: object) -> str:
    """A default as its TOML/JSON literal ("float64", [10.0, 30.0], 0.1); None as none."""
    return "none" if value is None else json.dumps(value)


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def type_words(ann: object, metadata: typing.Iterable[object] = ()) -> str:
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
    from ..experiments.tables import Block, Prose, Section, Table

    exp = REGISTRY[name]
    blocks: list[Block] = [
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
