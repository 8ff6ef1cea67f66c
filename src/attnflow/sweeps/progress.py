"""Progress of a sweep over its tasks: a Rich bar, a callable (done, total), or nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """Counts finished tasks (done or failed) and shows them; `close()` stops a Rich bar."""

    def __init__(self, progress: bool | Callable[[int, int], None], total: int, name: str) -> None:
        self.total, self.done = total, 0
        self.callback: Callable[[int, int], None] | None = progress if callable(progress) else None
        self.rich: Any = None
        if progress and self.callback is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.rich = Progress(
                TextColumn("[bold]sweep[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self.task = self.rich.add_task(name, total=total)
            self.rich.start()

    def advance(self, n: int) -> None:
        self.done += n
        if self.rich is not None:
            self.rich.advance(self.task, n)

    def after(self, failed: int) -> None:
        """After each finished task: the failures in the bar's label, the callback told."""
        if self.rich is not None and failed:
            self.rich.update(self.task, description=f"({failed} failed)")
        if self.callback is not None:
            self.callback(self.done, self.total)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()
