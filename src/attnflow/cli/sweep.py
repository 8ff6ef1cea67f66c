"""`attnflow sweep` and the sweep part of `attnflow show`: command-line front of `attnflow.sweeps`.

`sweep_command` is a Typer-annotated function; the CLI registers it with `app.command("sweep")`.
Exit codes: 0 every point done, 1 a point failed (or the cluster could not be reached),
2 bad usage/config/grid, 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..sweeps import SweepError, is_sweep_store, parse_grid, show_sweep
from ..sweeps.grid import CONFIRM_POINTS, check_grid, check_grid_size
from .console import fail as _fail
from .options import SetOption

__all__ = ["is_sweep_store", "show_sweep", "sweep_command"]

# the library's arguments that this command sets under another name
_OPTIONS = {"grid": "--grid", "store": "--out"}


def _usage(err: Exception) -> str:
    """A library error in this command's words: the argument it names becomes the option that set it."""
    if isinstance(err, SweepError) and err.argument in _OPTIONS:
        return f"{_OPTIONS[err.argument]} {err.value!r}: {err.problem}"
    return str(err)


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
    config: Annotated[str, typer.Argument(help="experiment name (e.g. concentration) or a TOML config file")],
    grid: Annotated[
        list[str],
        typer.Option(
            "--grid",
            "-g",
            help="a grid axis: key=v1,v2,... or key=a:b[:step] (integers a..b-1); repeat for more axes",
        ),
    ],
    scheduler: Annotated[
        str | None,
        typer.Option(help="address of a running Dask scheduler (tcp://host:8786); default: a local cluster"),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="workers of the local cluster")] = 2,
    out: Annotated[
        str, typer.Option("--out", "-o", help="sweep store: a folder or an fsspec URL")
    ] = "runs/sweep",
    retries: Annotated[
        int, typer.Option(min=0, help="resubmissions of a failing point before it is failed")
    ] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar, no summary table")] = False,
    set_: SetOption = None,
    figures: Annotated[bool, typer.Option(help="draw the sweep figures (PNG) into OUT/figures")] = True,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="also write the sweep figures as PDF (vector, for a paper)")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help=f"run a grid of more than {CONFIRM_POINTS:,} points")
    ] = False,
) -> None:
    """Run an experiment over a parameter grid on Dask; rerun the same command to resume.

    A large grid needs --yes, and one too large for a store is refused: the message gives its count
    of points and its estimated store size.
    """
    from ..sweeps import sweep

    try:
        axes = parse_grid(grid or [])
        if not axes:
            raise ValueError("give at least one --grid key=values")
        check_grid_size(check_grid(axes), yes)  # before the config: nothing heavy is loaded for a refusal
        from ..experiments import load_config

        cfg = load_config(config, list(set_ or []))
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise _fail(_usage(err), 2) from None
    try:
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
    except KeyboardInterrupt:
        raise _fail(
            f"interrupted; finished points are kept in {out}: rerun the same command to resume", 130
        ) from None
    except (ValueError, TypeError) as err:
        raise _fail(_usage(err), 2) from None
    except (OSError, TimeoutError) as err:
        raise _fail(f"could not run on the cluster: {type(err).__name__}: {err}", 1) from None
    if not quiet:
        from .console import console

        typer.echo(str(result))  # with its warnings (damaged points recomputed, a lock taken over)
        typer.echo(show_sweep(out, width=console().width), nl=False)
    else:
        for w in result.warnings:
            typer.echo(f"attnflow sweep: warning: {w}", err=True)
    if figures:
        _figures(out, quiet, pdf)
    if not result.ok:
        raise _fail(f"{len(result.failed)} point(s) failed; see `attnflow show {out}`", 1)
