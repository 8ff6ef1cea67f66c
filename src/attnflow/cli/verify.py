"""`attnflow verify DIR`: what is wrong with a run folder or a sweep store (`attnflow.sweeps.verify`).

`verify_command` is a Typer-annotated function; the CLI registers it with `app.command("verify")`.
Exit codes: 0 nothing wrong, 1 problems found (each named on a line), 2 DIR is not a run folder or
a sweep store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["verify_command"]


def verify_command(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="output folder of `attnflow run`, or a sweep store")
    ],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print the problems only")] = False,
) -> None:
    """Check a run folder or a sweep store: every stored dataset against the checksums written with
    it (a missing, truncated or altered file is named), the config, summary and sweep files.

    Exit code 0 when nothing is wrong, 1 when a problem is found, 2 when DIR is neither.
    """
    from ..sweeps.verify import verify_folder

    try:
        found = verify_folder(directory)
    except FileNotFoundError as err:
        typer.echo(f"attnflow verify: {err}", err=True)
        raise typer.Exit(2) from None
    for line in found.problems:
        typer.echo(f"problem: {line}")
    if not quiet:
        for line in found.notes:
            typer.echo(f"note: {line}")
        state = "ok" if found.ok else f"{len(found.problems)} problem(s)"
        typer.echo(f"{directory}: {found.kind} {state}")
    raise typer.Exit(0 if found.ok else 1)
