"""Progress and messages of a run, as a small interface the experiments call.

`Reporter` is silent (tests, library use); `RichReporter` draws Rich progress bars (the command
line). Light on purpose: no pydantic, no NumPy, and Rich is imported when a RichReporter is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Reporter", "RichReporter"]


class Reporter:
    """Progress and messages of a run. This base class is silent and only records messages.

    The command line subclasses it with Rich progress bars. Experiments call:
    `overall(total, description)` once, `task(description, total)` as a context manager whose
    value is a `progress(t, t_final)` callback for `simulate`, `advance()` after each unit of
    work, `info(msg)` and `warn(msg)`.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.warnings: list[str] = []

    def overall(self, total: int, description: str) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    @contextmanager
    def task(self, description: str, total: float = 1.0) -> Iterator[Callable[[float, float], None]]:
        yield lambda t, t_final: None

    def info(self, message: str) -> None:
        self.messages.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def close(self) -> None:
        pass


class RichReporter(Reporter):
    """Rich progress bars (overall and one per running task, with ETA) and messages on stderr."""

    def __init__(self, quiet: bool = False) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.quiet = quiet
        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=quiet,
            transient=False,
        )
        self._overall: Any = None
        if not quiet:
            self.progress.start()

    def overall(self, total: int, description: str) -> None:
        self._overall = self.progress.add_task(description, total=total)

    def advance(self, n: int = 1) -> None:
        if self._overall is not None and n:
            self.progress.advance(self._overall, n)

    @contextmanager
    def task(self, description: str, total: float = 1.0):
        tid = self.progress.add_task(f"  {description}", total=total)
        final = [float(total)]

        def update(t: float, t_final: float) -> None:
            final[0] = float(t_final)
            self.progress.update(tid, completed=float(t), total=final[0])

        try:
            yield update
            self.progress.update(tid, completed=final[0])
        finally:
            self.progress.remove_task(tid)

    def info(self, message: str) -> None:
        super().info(message)
        if not self.quiet:
            self.console.print(message, markup=False, highlight=False)

    def warn(self, message: str) -> None:
        super().warn(message)
        self.console.print(f"warning: {message}", markup=False, highlight=False, style="bold")

    def close(self) -> None:
        self.progress.stop()
