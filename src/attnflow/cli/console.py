"""How the command line speaks: its error messages and exit codes (one home); its Rich consoles are
`attnflow.progress.console`.

In a terminal, Rich's own width (the terminal's). Piped or redirected (not a terminal), Rich would
fold every table at 80 columns; here the width is PIPED_WIDTH instead, so a table row stays one line
and a file or `grep` sees whole rows. An explicit COLUMNS environment variable still wins.
Every command's error message starts with "attnflow: " (`fail`).
"""

from __future__ import annotations

from typing import Any

from ..progress import PIPED_WIDTH, console, is_terminal

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PIPED_WIDTH",
    "console",
    "fail",
    "is_terminal",
]

#: exit codes of every command: success; the run failed (or `check`: an assumption fails); bad
#: usage, config or input file; interrupted (rerun the same command to resume)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def fail(message: str, code: int) -> Any:
    """Print "attnflow: message" on stderr; returns the typer.Exit(code) to raise."""
    import typer

    typer.echo(f"attnflow: {message}", err=True)
    return typer.Exit(code)
