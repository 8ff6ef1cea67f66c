"""Progress and messages of a run, as a small interface the experiments call.

Light on purpose (no pydantic, no NumPy): the command line subclasses `Reporter` with Rich progress
bars without importing any experiment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Reporter"]


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
