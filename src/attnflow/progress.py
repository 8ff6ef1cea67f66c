"""Progress and messages of a run, and the progress bars of the API (one home for which bar where).

`Reporter` is silent (tests, library use); `RichReporter` draws Rich progress bars (the command line,
a terminal); `TqdmReporter` shows progress in Jupyter: tqdm's notebook widget where ipywidgets is
installed (`has_widgets`), plain lines otherwise (one per level, never tqdm's text bar: its redraws
would fill a notebook's stored output). `reporter_for(progress)` turns the `progress` argument of
`run_experiment` into a Reporter, `time_bar(progress, ...)` that of `simulate` into a callback, and
`open_bar` makes the one bar of a sweep: `progress=True` gives the notebook's kind in Jupyter
(`in_notebook`) and a Rich bar on stderr elsewhere; None or False, nothing; a callable is called as
before. Light on purpose: no pydantic, no NumPy; Rich and tqdm are imported when a bar is made.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID
    from tqdm.notebook import tqdm

from ._console import PIPED_WIDTH, console, has_widgets, in_notebook, is_terminal

__all__ = [
    "PIPED_WIDTH",
    "Bar",
    "Reporter",
    "RichReporter",
    "TqdmReporter",
    "console",
    "has_widgets",
    "in_notebook",
    "is_terminal",
    "open_bar",
    "reporter_for",
    "time_bar",
]


# ------------------------------------------------------------------------------------------ bars


class _Lines:
    """A bar as plain lines on stdout, for Jupyter without ipywidgets: one line when it closes (how far
    it got, in how long), and with steps=True one line per step completed (a sweep's points)."""

    def __init__(self, description: str, total: float, unit: str, steps: bool) -> None:
        self.description, self.total, self.unit, self.steps = description, total, unit, steps
        self.n, self.said = 0.0, -1.0
        self.start = time.perf_counter()

    def update(self, completed: float, total: float) -> None:
        self.n, self.total = float(completed), total
        if self.steps and int(self.n) > self.said:
            self.say()

    def say(self) -> None:
        unit = f" {self.unit}" if self.unit else ""
        elapsed = time.perf_counter() - self.start
        print(f"{self.description}: {self.n:.4g}/{self.total:.4g}{unit} in {elapsed:.1f} s", flush=True)
        self.said = self.n

    def close(self) -> None:
        if self.said != self.n:  # a step's line already says where it ended
            self.say()


class Bar:
    """One progress bar: `update(completed, total=None)`, `describe(text)`, `close()`.

    Made by `open_bar`; three kinds, by where it runs: a live Rich bar on stderr (a terminal, a
    script); in Jupyter (`notebook`, default `in_notebook()`), tqdm's notebook widget where ipywidgets
    is installed (leave=False: it disappears when closed), plain lines on stdout otherwise (`_Lines`:
    one when it closes, and one per step with steps=True).
    """

    def __init__(
        self,
        description: str,
        total: float,
        unit: str = "",
        notebook: bool | None = None,
        *,
        steps: bool = False,
        leave: bool = True,
    ) -> None:
        self.total = float(total)
        self._tqdm: tqdm | None = None
        self._rich: Progress | None = None
        self._lines: _Lines | None = None
        if not (in_notebook() if notebook is None else notebook):
            self._rich_bar(description, unit)
        elif has_widgets():
            from tqdm.notebook import tqdm

            fmt = "{desc}: {percentage:3.0f}%|{bar}| {n:.4g}/{total:.4g}" + (f" {unit}" if unit else "")
            self._tqdm = tqdm(
                total=self.total, desc=description, bar_format=fmt + " [{elapsed}<{remaining}]", leave=leave
            )
        else:
            self._lines = _Lines(description, self.total, unit, steps)

    def _rich_bar(self, description: str, unit: str) -> None:
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self._rich = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.completed:.4g}/{task.total:.4g}" + (f" {unit}" if unit else "")),
            TimeElapsedColumn(),
            console=console(stderr=True),
        )
        self._task = self._rich.add_task(description, total=self.total)
        self._rich.start()

    def update(self, completed: float, total: float | None = None) -> None:
        if total is not None:
            self.total = float(total)
        if self._tqdm is not None:
            if total is not None:
                self._tqdm.total = self.total
            self._tqdm.update(float(completed) - self._tqdm.n)
        elif self._rich is not None:
            self._rich.update(self._task, completed=float(completed), total=self.total)
        elif self._lines is not None:
            self._lines.update(completed, self.total)

    def reset(self, description: str, total: float) -> None:
        """Start again from 0 towards a new total, under a new description (one bar for tasks in turn)."""
        self.total = float(total)
        if self._tqdm is not None:
            self._tqdm.reset(total=self.total)
        elif self._rich is not None:
            self._rich.reset(self._task, total=self.total)
        elif self._lines is not None:
            self._lines.close()
            self._lines = _Lines(description, self.total, self._lines.unit, self._lines.steps)
        self.describe(description)

    def describe(self, text: str) -> None:
        if self._tqdm is not None:
            self._tqdm.set_description_str(text)
        elif self._rich is not None:
            self._rich.update(self._task, description=text)
        elif self._lines is not None:
            self._lines.description = text

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        if self._lines is not None:
            self._lines.close()
            self._lines = None


def open_bar(description: str, total: float, unit: str = "", *, steps: bool = False) -> Bar:
    """A progress bar from 0 to total: the notebook's kind in Jupyter (tqdm's widget, or plain lines
    without ipywidgets), a Rich bar on stderr elsewhere.  steps: it counts whole steps (a sweep's
    points), each worth a line where the bar is plain lines."""
    return Bar(description, total, unit, steps=steps)


@contextmanager
def time_bar(
    progress: bool | Callable[[float, float], object] | None, description: str
) -> Iterator[Callable[[float, float], object] | None]:
    """The `progress` argument of `simulate` as a callback progress(t, t_final), or None.

    None or False: None (silent). True: a bar over t in [0, t_final] (`open_bar`), closed at the end.
    A callable: itself. Anything else: TypeError.
    """
    if progress is None or progress is False:
        yield None
        return
    if progress is True:
        bar: list[Bar] = []

        def update(t: float, t_final: float) -> None:
            if not bar:
                bar.append(open_bar(description, t_final, unit="time"))
            bar[0].update(t, t_final)

        try:
            yield update
        finally:
            if bar:
                bar[0].close()
        return
    if callable(progress):
        yield progress
        return
    raise TypeError(
        "progress must be a callable progress(t, t_final), True (a progress bar) or None/False (silent), "
        f"got {progress!r}"
    )


# ------------------------------------------------------------------------------------- reporters


class Reporter:
    """Progress and messages of a run. This base class is silent and only records messages.

    The command line subclasses it with Rich progress bars. Experiments call:
    `overall(total, description)` once, `task(description, total)` as a context manager whose
    value is a `progress(t, t_final)` callback for `simulate`, `advance(n)` after each piece of
    work, `info(msg)` and `warn(msg)`. The total and the advances are in units of the work's cost
    (e.g. N^2 per level of an N ladder, so that the ETA weighs each level by its cost), not counts.
    `warnings` are about the result (they are stored with it); `notice(msg)` is about the run's
    circumstances (a lock taken over from a process that died): shown like a warning, even when
    quiet, and kept in `messages` only. `run_experiment` ends with `done(msg)`: the bars close, then
    the run's last line.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.warnings: list[str] = []

    def overall(self, total: float, description: str) -> None:
        pass

    def advance(self, n: float = 1) -> None:
        pass

    def done(self, message: str) -> None:
        """The run's last line, after its bars are closed."""
        self.info(message)

    @contextmanager
    def task(self, description: str, total: float = 1.0) -> Iterator[Callable[[float, float], None]]:
        yield lambda t, t_final: None

    def info(self, message: str) -> None:
        self.messages.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def notice(self, message: str) -> None:
        self.messages.append(message)

    def close(self) -> None:
        pass


class RichReporter(Reporter):
    """Rich progress bars (overall and one per running task, with ETA) and messages on stderr."""

    def __init__(self, quiet: bool = False) -> None:
        super().__init__()
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.quiet = quiet
        self.console = console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=quiet,
            transient=True,  # gone when the run ends: its last line says how long it took
        )
        self._overall: TaskID | None = None
        if not quiet:
            self.progress.start()

    def overall(self, total: float, description: str) -> None:
        self._overall = self.progress.add_task(description, total=total)

    def advance(self, n: float = 1) -> None:
        if self._overall is not None and n:
            self.progress.advance(self._overall, n)

    def done(self, message: str) -> None:
        self.progress.stop()
        self.info(message)

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
        self.console.print(f"attnflow: warning: {message}", markup=False, highlight=False, style="bold")

    def notice(self, message: str) -> None:
        super().notice(message)
        self.console.print(f"attnflow: {message}", markup=False, highlight=False)

    def close(self) -> None:
        self.progress.stop()


class TqdmReporter(Reporter):
    """Progress in Jupyter. With ipywidgets: two of tqdm's widgets, the overall one and one that the
    tasks take in turn (it disappears at the end; few widgets keep a saved notebook's widget state
    small), with messages and warnings printed below them (`tqdm.write`).  Without: plain lines, one
    per task when it ends (`Bar`), and the messages and warnings."""

    def __init__(self, quiet: bool = False) -> None:
        super().__init__()
        self.quiet = quiet
        self.widgets = has_widgets()
        self._overall: Bar | None = None
        self._task_bar: Bar | None = None  # the widget the tasks take in turn
        self._task_busy = False
        self._done = 0.0

    def overall(self, total: float, description: str) -> None:
        if not self.quiet and self.widgets:  # as lines, the tasks' lines are the overall progress
            self._overall = Bar(description, total, notebook=True)

    def advance(self, n: float = 1) -> None:
        self._done += n
        if self._overall is not None and n:
            self._overall.update(self._done)

    def done(self, message: str) -> None:
        self.close()
        self.info(message)

    @contextmanager
    def task(self, description: str, total: float = 1.0):
        if self.quiet:
            yield lambda t, t_final: None
            return
        if not self.widgets or self._task_busy:  # lines, or a task inside a task: a bar of its own
            bar = Bar(description, total, unit="time", notebook=True, leave=False)
            try:
                yield bar.update
            finally:
                bar.close()
            return
        if self._task_bar is None:
            self._task_bar = Bar(description, total, unit="time", notebook=True, leave=False)
        else:
            self._task_bar.reset(description, total)
        self._task_busy = True
        try:
            yield self._task_bar.update
        finally:
            self._task_busy = False

    def _print(self, message: str) -> None:
        if self.widgets:
            from tqdm.notebook import tqdm

            tqdm.write(message)
        else:
            print(message, flush=True)

    def info(self, message: str) -> None:
        super().info(message)
        if not self.quiet:
            self._print(message)

    def warn(self, message: str) -> None:
        super().warn(message)
        self._print(f"attnflow: warning: {message}")

    def notice(self, message: str) -> None:
        super().notice(message)
        self._print(f"attnflow: {message}")

    def close(self) -> None:
        for bar in (self._task_bar, self._overall):
            if bar is not None:
                bar.close()
        self._task_bar = self._overall = None


def reporter_for(progress: Reporter | bool | None) -> tuple[Reporter, bool]:
    """(the Reporter for the `progress` argument of `run_experiment`, whether it was made here and
    must be closed): a Reporter as it is; True a TqdmReporter in Jupyter, a RichReporter elsewhere;
    None or False a silent Reporter. Anything else: TypeError."""
    if isinstance(progress, Reporter):
        return progress, False
    if progress is None or progress is False:
        return Reporter(), False
    if progress is True:
        return (TqdmReporter() if in_notebook() else RichReporter()), True
    raise TypeError(
        f"progress must be True (progress bars), None or False (silent) or an attnflow.progress.Reporter, "
        f"got {progress!r}"
    )
