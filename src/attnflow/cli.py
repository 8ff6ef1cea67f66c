"""The `attnflow` command: run named experiments, list them, show and plot results, check weights.

    attnflow run                                   # the default experiment: concentration
    attnflow run terminal --out runs/t --set N=400 --set "betas=[10, 100]"
    attnflow run my.toml                           # a config file (`attnflow list NAME --toml`)
    attnflow list                                  # experiments, presets, every parameter and default
    attnflow show runs/concentration               # headline numbers of a finished run
    attnflow plot runs/concentration               # figures, animation and report
    attnflow check Q.npy K.npy V.npy               # the theorem's assumptions for given weights

Exit codes: 0 success, 1 the run failed (or `check`: an assumption fails), 2 bad usage, config or
input file (a message, no traceback), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._console import console
from .experiments import DEFAULT_EXPERIMENT, ConfigError
from .experiments._layout import (
    FIGURES_DIR,
    PARTS_DIR,
    REPORT_MD,
    RESULT_STORE,
    SUMMARY_JSON,
    SUMMARY_MD,
)
from .pretrained_cli import heads
from .progress import RichReporter
from .sweep_cli import sweep_command

if TYPE_CHECKING:
    from pydantic import BaseModel

app = typer.Typer(
    name="attnflow",
    help=(
        "Token dynamics of deep self-attention on the sphere: run the paper's experiments, "
        "get figures, a summary table and an xarray dataset.\n\n"
        f"Start with `attnflow run` (the {DEFAULT_EXPERIMENT} experiment, a few minutes on a laptop), "
        f"then `attnflow show runs/{DEFAULT_EXPERIMENT}`. `attnflow list` shows every experiment and "
        "parameter."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_state = {"debug": False}

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"attnflow: {message}", err=True)
    return typer.Exit(code)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="show Python tracebacks of failures")] = False,
) -> None:
    _state["debug"] = debug
    _config_warnings_as_messages()


def _config_warnings_as_messages() -> None:
    """Show a ConfigWarning (a config that runs but may mislead, e.g. t_max too short for the betas)
    as one `attnflow: warning: ...` line on stderr; other warnings as Python shows them."""
    shown = warnings.showwarning
    if getattr(shown, "attnflow", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ == "ConfigWarning":
            typer.echo(f"attnflow: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    show.attnflow = True  # type: ignore[attr-defined]
    warnings.showwarning = show


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt, so a killed run cleans up like Ctrl-C and exits 130."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ------------------------------------------------------------------------------------------ run


def _default_out(target: str) -> Path:
    name = Path(target).stem if target.endswith(".toml") else target
    return Path("runs") / name


def _figures(
    ds: Any, summary: dict, out: Path, animation: bool, quiet: bool, pdf: bool = False
) -> list[Path]:
    """The experiment's figures (PDF, animation) in OUT/figures and the report; a failure only warns."""
    from contextlib import nullcontext

    from .experiments import plot_run, write_report

    paths: list[Path] = []
    what = (
        "figures" + (" (PNG and PDF)" if pdf else "") + (", animation" if animation else "") + " and report"
    )
    status = nullcontext() if quiet else console(stderr=True).status(f"drawing {what}")
    try:
        with status:
            paths = plot_run(ds, out / FIGURES_DIR, animation=animation, pdf=pdf)
            paths.append(write_report(ds, summary, paths, out))
        if animation and not quiet and not any(p.suffix == ".mp4" for p in paths):
            from .plot.tokens import FFMPEG_HINT, ffmpeg_path

            if ffmpeg_path() is None and any(p.suffix == ".gif" for p in paths):
                typer.echo(f"attnflow: no MP4 (no ffmpeg found): {FFMPEG_HINT}", err=True)
    except Exception as err:  # figures never fail a finished run
        if _state["debug"]:
            raise
        typer.echo(f"attnflow: figures incomplete ({type(err).__name__}: {err})", err=True)
    if not quiet:
        for p in paths:
            typer.echo(f"wrote {p}")
    return paths


@app.command()
def run(
    target: Annotated[
        str,
        typer.Argument(help="experiment or preset name (see `attnflow list`) or a TOML config file"),
    ] = DEFAULT_EXPERIMENT,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="DIR", help="output folder (default runs/NAME); rerun with it to resume"
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            metavar="KEY=VALUE",
            help="override a parameter: key=value, value a TOML literal; repeatable",
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no progress bars or messages (warnings stay)")
    ] = False,
    figures: Annotated[bool, typer.Option(help="draw the figures (PNG) and the report at the end")] = True,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="also write every figure as PDF (vector, for a paper)")
    ] = False,
    animation: Annotated[
        bool,
        typer.Option(
            "--animation/--no-animation", help="also write the token animation (GIF; MP4 with ffmpeg)"
        ),
    ] = False,
) -> None:
    """Run an experiment and write OUT/result.zarr, summary.json, summary.md, config.toml, figures/.

    Finished betas (grid points) are saved in OUT/parts as they complete: a run that is killed or
    fails part-way resumes from them when the same command is run again.

    Examples: `attnflow run`, `attnflow run terminal -s N=300`, `attnflow run concentration-converged`,
    `attnflow run my.toml -o runs/mine`.
    """
    from .experiments import load_config, run_experiment

    try:
        cfg = load_config(target, list(set_ or []))
    except ConfigError as err:
        raise _fail(str(err), EXIT_USAGE) from None
    out = out or _default_out(target)
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out}: exists and is not a folder", EXIT_USAGE)
    reporter = RichReporter(quiet=quiet)
    try:
        with _sigterm_as_interrupt():
            ds = run_experiment(cfg, out, progress=reporter)
    except KeyboardInterrupt:
        reporter.close()
        raise _fail(
            f"interrupted; finished parts are kept in {out / PARTS_DIR}: rerun the same command to resume",
            EXIT_INTERRUPTED,
        ) from None
    except (ConfigError, ValueError, TypeError) as err:
        reporter.close()
        if _state["debug"]:
            raise
        raise _fail(f"run failed: {err}", EXIT_FAILED) from None
    except Exception as err:
        reporter.close()
        if _state["debug"]:
            raise
        raise _fail(
            f"run failed: {type(err).__name__}: {err} (finished parts are kept in {out / PARTS_DIR}; "
            "`attnflow --debug run ...` shows the traceback)",
            EXIT_FAILED,
        ) from None
    reporter.close()
    summary = json.loads((out / SUMMARY_JSON).read_text())
    if figures:
        _figures(ds, summary, out, animation, quiet, pdf)
    if not quiet:
        typer.echo((out / SUMMARY_MD).read_text())
        typer.echo(f"results in {out}/ ({RESULT_STORE} opens with xarray.open_zarr)")


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
    from .experiments import SimulationConfig

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


@app.command("list")
def list_(
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

    from .experiments import PRESETS, REGISTRY, SimulationConfig, load_config, to_toml

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
        from .io import to_json

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


@app.command()
def show(
    directory: Annotated[Path, typer.Argument(help="output folder of `attnflow run` (or a sweep store)")],
    json_out: Annotated[
        bool, typer.Option("--json", help="print the summary, dataset layout and provenance as JSON")
    ] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="a sweep store: its table of points as CSV")] = False,
) -> None:
    """Summary of a finished run: headline numbers, dataset layout and provenance.

    In a terminal the summary is rendered; piped or redirected it is printed as Markdown.
    """
    from .sweep_cli import is_sweep_store

    if json_out and csv_out:
        raise _fail("--json and --csv: choose one", EXIT_USAGE)
    if is_sweep_store(directory):
        _show_sweep(directory, json_out, csv_out)
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
        from .io import to_json

        typer.echo(to_json(info, indent=2))
        return
    out = console()
    if out.is_terminal:
        from rich.markdown import Markdown

        out.print(Markdown(summary.read_text()))
    else:
        out.print(summary.read_text(), markup=False, highlight=False)
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
    if info["figures"]:
        out.print("figures: " + ", ".join(info["figures"]))
    if info.get("report"):
        out.print(f"report: {info['report']}")


def _run_info(directory: Path) -> dict[str, Any]:
    """What `show` prints of a finished run: summary, dataset layout, provenance, figures, report."""
    info: dict[str, Any] = {"run": str(directory)}
    summary_json = directory / SUMMARY_JSON
    info["summary"] = json.loads(summary_json.read_text()) if summary_json.exists() else None
    store = directory / RESULT_STORE
    if store.exists():
        from .io import json_attr, read_dataset

        ds = read_dataset(store, load=False)
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
    from .sweeps import show_sweep, summary_table, sweep_info

    if json_out:
        from .io import to_json

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


# ----------------------------------------------------------------------------------------- plot


@app.command()
def plot(
    directory: Annotated[Path, typer.Argument(help="output folder of `attnflow run`")],
    pdf: Annotated[
        bool, typer.Option("--pdf", help="also write every figure as PDF (vector, for a paper)")
    ] = False,
    animation: Annotated[
        bool,
        typer.Option(
            "--animation/--no-animation", help="also write the token animation (GIF; MP4 with ffmpeg)"
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """(Re)draw the figures (PNG; --pdf: also PDF), the animation (--animation) and the report of a
    finished run into DIRECTORY/figures."""
    from .io import read_dataset

    store = directory / RESULT_STORE
    if not store.exists():
        raise _fail(
            f"{directory}: no {RESULT_STORE} (run `attnflow run ... --out {directory}` first)", EXIT_USAGE
        )
    ds = read_dataset(store)
    summary_path = directory / SUMMARY_JSON
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    paths = _figures(ds, summary, directory, animation, quiet, pdf)
    if not paths:
        raise typer.Exit(EXIT_FAILED)


# ---------------------------------------------------------------------------------------- check


@app.command()
def check(
    files: Annotated[
        list[Path], typer.Argument(help="Q K V as three .npy/.npz/.txt files, or one .npz with Q, K, V")
    ],
    beta: Annotated[float, typer.Option(help="inverse temperature (for the report; inf allowed)")] = 1.0,
    x0: Annotated[
        Path | None, typer.Option("--x0", help="initial tokens (N, d) as .npy/.txt, for assumption 2")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(help="how X0 was drawn: uniform, vmf or points (assumption 3 needs a density)"),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Report the theorem's assumptions for attention weights Q, K, V (docs/math.md, "Assumptions").

    Exit code 0 when every checkable assumption holds, 1 when one fails, 2 for unreadable input.
    """
    from ._checks import check_beta, check_points
    from .io import load_matrices, read_array
    from .model import Attention

    try:
        mats = load_matrices(list(files))
        b = check_beta(beta, "--beta")
        att = Attention(mats["Q"], mats["K"], mats["V"], beta=b)
        X0 = None
        if x0 is not None:
            raw = read_array(x0, "X0")
            try:
                X0 = check_points(raw, "X0", d=att.d, normalize=True, allow_batch=False)
            except (ValueError, TypeError) as err:
                raise ValueError(f"{x0}: {err}") from None
    except (ValueError, TypeError) as err:
        raise _fail(str(err), EXIT_USAGE) from None
    from .assumptions import check_assumptions

    try:
        report = check_assumptions(att, X0=X0, kind=kind)
    except ValueError as err:
        raise _fail(f"--kind: {err}" if "kind" in str(err) else str(err), EXIT_USAGE) from None
    if json_out:
        from .io import to_json

        typer.echo(to_json(report.to_dict(), indent=2))
    else:
        typer.echo(str(report))
    raise typer.Exit(EXIT_OK if report.ok else EXIT_FAILED)


# ------------------------------------------------------------------ commands of other modules

# Both modules are light (Typer signatures); each command imports what it needs when it runs.
app.command("heads")(heads)
app.command("sweep")(sweep_command)


def main() -> None:
    """Entry point of the `attnflow` script."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - outside a command
        typer.echo("attnflow: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
