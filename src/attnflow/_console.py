"""How the command line speaks: its Rich consoles, its error messages and exit codes (one home).

In a terminal, Rich's own width (the terminal's). Piped or redirected (not a terminal), Rich would
fold every table at 80 columns; here the width is PIPED_WIDTH instead, so a table row stays one line
and a file or `grep` sees whole rows. An explicit COLUMNS environment variable still wins.
Every command's error message starts with "attnflow: " (`fail`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

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

#: width of output that is not a terminal: wide enough that no table of attnflow folds
PIPED_WIDTH = 1000
#: exit codes of every command: success; the run failed (or `check`: an assumption fails); bad
#: usage, config or input file; interrupted (rerun the same command to resume)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def is_terminal(stderr: bool = False) -> bool:
    """Whether stdout (stderr) is a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def console(stderr: bool = False, **kwargs: Any) -> Console:
    """A Rich Console on stdout (stderr): the terminal's width in a terminal, PIPED_WIDTH columns
    when piped or redirected (unless COLUMNS is set), no colour codes in a file."""
    from rich.console import Console

    if "width" not in kwargs and not is_terminal(stderr) and not os.environ.get("COLUMNS"):
        kwargs["width"] = PIPED_WIDTH
    return Console(stderr=stderr, **kwargs)


def fail(message: str, code: int) -> Any:
    """Print "attnflow: message" on stderr; returns the typer.Exit(code) to raise."""
    import typer

    typer.echo(f"attnflow: {message}", err=True)
    return typer.Exit(code)
