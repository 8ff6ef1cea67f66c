"""How the command line speaks: its error messages and exit codes (one home), and the one map from
an exception to the exit code and message that end a command (`Failure`, `exits`). Its Rich consoles
are `attnflow.progress.console`.

In a terminal, Rich's own width (the terminal's). Piped or redirected (not a terminal), Rich would
fold every table at 80 columns; there the width is PIPED_WIDTH instead. Text that is not a table
(`attnflow list` piped) is Markdown with lines of at most `text_width()` characters. An explicit
COLUMNS environment variable still wins. Every command's error message starts with "attnflow: "
(`fail`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._text import shown
from ..experiments.folder import RunFolderError
from ..experiments.layout import PARTS_DIR
from ..experiments.registry import ConfigError
from ..io.lock import LockedError
from ..progress import PIPED_WIDTH, console, is_terminal
from ..sweeps import SweepError

if TYPE_CHECKING:
    import typer

    from ..experiments.tables import Document

__all__ = [
    "BAD_CONFIG",
    "BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PIPED_TEXT_WIDTH",
    "PIPED_WIDTH",
    "CliOptions",
    "Failure",
    "console",
    "exits",
    "fail",
    "is_terminal",
    "options_of",
    "print_document",
    "run_failures",
    "sweep_failures",
    "sweep_usage",
    "text_width",
]

#: exit codes of every command: success; the run failed (or `check`: an assumption fails); bad
#: usage, config or input file; interrupted (rerun the same command to resume)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: the longest line of text printed when stdout is not a terminal and COLUMNS is not set
PIPED_TEXT_WIDTH = 120


@dataclass(frozen=True)
class CliOptions:
    """What the options before the command set (`attnflow --debug run ...`), kept on the Typer
    context (`ctx.obj`) for the command."""

    debug: bool = False


def options_of(ctx: typer.Context | None) -> CliOptions:
    """The CliOptions of a command's Typer context (the defaults when there are none)."""
    found = ctx.find_object(CliOptions) if ctx is not None else None
    return found if isinstance(found, CliOptions) else CliOptions()


def text_width() -> int:
    """Width of text output: the terminal's, else COLUMNS, else PIPED_TEXT_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return console().width if is_terminal() else PIPED_TEXT_WIDTH


def print_document(doc: Document, wide: bool = False, fit_piped: bool = False) -> None:
    """Print a Document of the table model on stdout: in a terminal as Rich tables that fit its
    width (wide: every table whole); piped or redirected as Markdown, with lines of at most
    `text_width()` characters when fit_piped (and not wide)."""
    from ..experiments.render import to_markdown, to_terminal

    if is_terminal():
        to_terminal(doc, console(), wide=wide)
    else:
        width = text_width() if fit_piped and not wide else None
        sys.stdout.write(to_markdown(doc, width=width))
        sys.stdout.flush()


def fail(message: str, code: int) -> typer.Exit:
    """Print "attnflow: message" on stderr; returns the typer.Exit(code) to raise."""
    import typer

    typer.echo(f"attnflow: {message}", err=True)
    return typer.Exit(code)


# ---------------------------------------------------------------------------- exit codes


@dataclass(frozen=True)
class Failure:
    """How an exception of `kinds` ends a command: exit `code` and `message(err)` on stderr."""

    kinds: tuple[type[BaseException], ...]
    code: int
    message: Callable[[Any], str]


@contextmanager
def exits(failures: Sequence[Failure], debug: bool = False) -> Iterator[None]:
    """Run the block; an exception matching one of `failures` (the first that does) ends the
    command: its message on stderr, its exit code, no traceback. debug=True (`attnflow --debug`):
    the exception is raised with its traceback instead (Ctrl-C still exits 130). Other exceptions
    pass through."""
    import typer

    try:
        yield
    except typer.Exit:
        raise
    except BaseException as err:
        failure = next((f for f in failures if isinstance(err, f.kinds)), None)
        if failure is None or (debug and failure.code != EXIT_INTERRUPTED):
            raise
        raise fail(failure.message(err), failure.code) from None


def kept(out: Path) -> str:
    """'finished parts are kept in OUT/parts; ' when there are some, else ''."""
    parts = out / PARTS_DIR
    return f"finished parts are kept in {parts}; " if parts.is_dir() and any(parts.glob("*.zarr")) else ""


def _run_failed(out: Path) -> Callable[[BaseException], str]:
    def message(err: BaseException) -> str:
        if isinstance(err, PermissionError):
            return f"run failed: cannot write {err.filename or out} (permission denied)"
        if isinstance(err, ValueError | TypeError):
            return f"run failed: {err}"
        return (
            f"run failed: {type(err).__name__}: {err} "
            f"({kept(out)}`attnflow --debug run ...` shows the traceback)"
        )

    return message


#: a config that cannot be used, an input file that cannot be read: exit 2
BAD_CONFIG = Failure((ConfigError,), EXIT_USAGE, str)
BAD_INPUT = Failure((ValueError, TypeError), EXIT_USAGE, str)


def run_failures(out: Path) -> tuple[Failure, ...]:
    """How `attnflow run ... --out OUT` ends: 130 interrupted; 2 the output folder or the config
    (nothing was run); 1 the run failed (its finished parts kept)."""
    return (
        Failure(
            (KeyboardInterrupt,),
            EXIT_INTERRUPTED,
            lambda e: f"interrupted; {kept(out)}rerun the same command to resume",
        ),
        Failure((RunFolderError,), EXIT_USAGE, lambda e: e.message("--out", "--overwrite")),
        Failure((LockedError,), EXIT_USAGE, lambda e: f"--out {e}"),
        BAD_CONFIG,
        Failure((Exception,), EXIT_FAILED, _run_failed(out)),
    )


#: the library's arguments that `attnflow sweep` sets under another name
SWEEP_OPTIONS = {"grid": "--grid", "store": "--out"}


def sweep_usage(err: BaseException) -> str:
    """A sweep's error in the command's words: the argument it names becomes the option that set it."""
    if isinstance(err, SweepError) and err.argument in SWEEP_OPTIONS:
        return f"{SWEEP_OPTIONS[err.argument]} {shown(err.value, 300)}: {err.problem}"
    return str(err)


def sweep_failures(out: str) -> tuple[Failure, ...]:
    """How `attnflow sweep ... --out OUT` ends: 130 interrupted (finished points kept); 2 bad input
    (grid, store, config); 1 the cluster could not be reached. A failed point is not an exception:
    the command reports it and exits 1."""
    return (
        Failure(
            (KeyboardInterrupt,),
            EXIT_INTERRUPTED,
            lambda e: f"interrupted; finished points are kept in {out}: rerun the same command to resume",
        ),
        Failure((ValueError, TypeError), EXIT_USAGE, sweep_usage),
        Failure(
            (OSError, TimeoutError),
            EXIT_FAILED,
            lambda e: f"could not run on the cluster: {type(e).__name__}: {e}",
        ),
    )
