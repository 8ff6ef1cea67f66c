"""`attnflow sweep` and the sweep part of `attnflow show`: command-line front of `attnflow.sweeps`.

`sweep_command` is a Typer-annotated function; the CLI registers it with `app.command("sweep")`.
Exit codes: 0 every point done, 1 a point failed (or the cluster could not be reached),
2 bad usage/config/grid, 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..sweeps import is_sweep_store, parse_grid, show_sweep
from ..sweeps.grid import CONFIRM_POINTS, check_grid, check_grid_size
from .console import EXIT_FAILED, EXIT_USAGE, Failure, exits, sweep_failures, sweep_usage
from .console import fail as _fail
from .options import PdfOption, SetOption

__all__ = ["is_sweep_store", "show_sweep", "sweep_command"]


def _figures(store: str, quiet: bool, pdf: bool = False) -> None:
    """The sweep's figures by its experiment (`attnflow.experiments.plot_sweep`) into STORE/figures
    (PNG; pdf: also PDF)."""
    if "://" in store:
        return
    from ..experiments import plot_sweep
    from ..sweeps import open_sweep

    try:
        paths = plot_sweep(open_sweep(store), Path(store) / "figures", pdf=pdf)
    except Exception as err:  # figures never fail a finished sweep
        typer.echo(f"attnflow: sweep figures skipped ({type(err).__name__}: {err})", err=True)
        return
    if not quiet:
        for p in paths:
            typer.echo(f"figure: {p}")


def sweep_command(
    config: Annotated[
        str,
        typer.Argument(
            metavar="NAME", help="experiment or preset name (e.g. concentration) or a TOML config file"
        ),
    ],
    grid: Annotated[
        list[str],
        typer.Option(
            "--grid",
            "-g",
            metavar="KEY=VALUES",
            help="a grid axis: key=v1,v2,... or key=a:b[:step] (integers a..b-1); repeat for more axes",
        ),
    ],
    scheduler: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="address of a running Dask scheduler (tcp://host:8786); default: a local cluster",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=1, metavar="INTEGER", help="workers of the local cluster")
    ] = 2,
    out: Annotated[
        str, typer.Option("--out", "-o", metavar="STORE", help="sweep store: a folder or an fsspec URL")
    ] = "runs/sweep",
    retries: Annotated[
        int,
        typer.Option(min=0, metavar="INTEGER", help="resubmissions of a failing point before it is failed"),
    ] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar, no summary table")] = False,
    set_: SetOption = None,
    figures: Annotated[bool, typer.Option(help="draw the sweep figures (PNG) into OUT/figures")] = True,
    pdf: PdfOption = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help=f"run a grid of more than {CONFIRM_POINTS:,} points")
    ] = False,
) -> None:
    """Run an experiment over a parameter grid on Dask; rerun the same command to resume.

    A large grid needs --yes, and one too large for a store is refused: the message gives its count
    of points and its estimated store size.
    """
    import warnings

    from ..experiments import load_config
    from ..experiments.config import ConfigWarning
    from ..sweeps import sweep

    with exits([Failure((ValueError, TypeError, FileNotFoundError), EXIT_USAGE, sweep_usage)]):
        axes = parse_grid(grid or [])
        if not axes:
            raise _fail("give at least one --grid key=values", EXIT_USAGE)
        check_grid_size(check_grid(axes), yes)  # before the config: a refusal loads nothing heavy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigWarning)  # the sweep's result says those of its points
            cfg = load_config(config, list(set_ or []))
    with exits(sweep_failures(out)):
        result = sweep(
            cfg,
            axes,
            client=scheduler,
            store=out,
            workers=workers,
            retries=retries,
            progress=not quiet,
            yes=yes,
        )
    _report(result, out, quiet)
    if figures:
        _figures(out, quiet, pdf)
    if not result.ok:
        raise _fail(f"{len(result.failed)} point(s) failed; see `attnflow show {out}`", EXIT_FAILED)


def _report(result, out: str, quiet: bool) -> None:
    """The sweep's result and table (quiet: only its warnings, on stderr)."""
    if quiet:
        for w in result.warnings:
            typer.echo(f"attnflow sweep: warning: {w}", err=True)
        return
    from ..sweeps import sweep_document
    from .console import print_document

    typer.echo(str(result))  # with its warnings (damaged points recomputed, a lock taken over)
    print_document(sweep_document(out))
