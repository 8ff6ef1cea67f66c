"""Progress of a sweep over its tasks: a bar (`attnflow.progress.open_bar`), a callable (done, total),
or nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..progress import Bar

__all__ = ["ProgressBar"]


class ProgressBar:
    """Counts finished tasks (done or failed) and shows them; `close()` stops the bar.

    progress: True for a bar (in Jupyter tqdm's notebook widget, or a line per point without
    ipywidgets; Rich on stderr elsewhere), False or None for nothing, or a callable told
    (done, total) after each finished task.
    """

    def __init__(self, progress: bool | Callable[[int, int], None] | None, total: int, name: str) -> None:
        self.total, self.done = total, 0
        self.callback: Callable[[int, int], None] | None = progress if callable(progress) else None
        self.bar: Bar | None = None
        self.name = name
        if progress and self.callback is None:
            from ..progress import open_bar

            self.bar = open_bar(f"sweep {name}", total, unit="points", steps=True)

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(self.done)

    def after(self, failed: int) -> None:
        """After each finished task: the failures in the bar's label, the callback told."""
        if self.bar is not None and failed:
            self.bar.describe(f"sweep {self.name} ({failed} failed)")
        if self.callback is not None:
            self.callback(self.done, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
