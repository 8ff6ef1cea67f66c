"""What the tests that kill or interrupt a run share: waiting for an observable event (a file on disk,
a manifest entry, a lock) instead of a fixed time, and gates that hold work back until the test lets
it go, so that what is finished when the test strikes is known at any load of the machine.

Standard library only: the toy sweep's workers and the gated command line's subprocess import it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: a guard against a hang, not a timing: an awaited event that never comes fails the test after this
HANG_S = 600.0
POLL_S = 0.02


def wait_for(
    condition: Callable[[], bool],
    what: str,
    proc: subprocess.Popen | None = None,
    timeout: float = HANG_S,
) -> None:
    """Return once condition() holds. AssertionError naming `what` when the process `proc` ends
    without it, or when it has not come after `timeout` seconds (a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None and not condition():
            raise AssertionError(f"the process ended (exit code {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:g} s")
        time.sleep(POLL_S)


class GateStopped(RuntimeError):
    """A run held at a gate was told to stop (`Gate.stop`), or never told anything (a hang)."""


class Gate:
    """Lets `free` callers through at once and holds the others until the test opens it (`open`) or
    stops them (`stop`: they raise GateStopped). Its state is files in `folder`: slots claimed
    atomically (O_EXCL), so it works across threads and processes, Dask workers included."""

    def __init__(self, folder: str | os.PathLike, name: str = "gate", free: int = 0) -> None:
        self.folder, self.name, self.free = Path(folder), name, free

    def _flag(self, what: str) -> Path:
        return self.folder / f"{self.name}-{what}"

    def enter(self) -> None:
        """Pass if a free slot is left, else wait until the gate is opened (or stopped: raise)."""
        for slot in range(self.free):
            try:
                os.close(os.open(self._flag(f"slot{slot}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return
            except FileExistsError:
                continue
        deadline = time.monotonic() + HANG_S
        while not self._flag("open").exists():
            if self._flag("stop").exists() or time.monotonic() > deadline:
                raise GateStopped(f"{self.name}: stopped by the test")
            time.sleep(POLL_S)

    def open(self) -> None:
        self._flag("open").touch()

    def stop(self) -> None:
        self._flag("stop").touch()


GATED_CLI = """
import sys
sys.path.insert(0, {tests!r})
import attnflow.dynamics.integrate as integrate
from events import Gate

gate, real = Gate({folder!r}, free={free}), integrate.simulate


def gated(*args, **kwargs):
    gate.enter()
    return real(*args, **kwargs)


integrate.simulate = gated
from attnflow.cli import main

sys.argv = ["attnflow", *sys.argv[1:]]
main()
"""


def gated_cli(folder: Path, free: int) -> tuple[list[str], Gate]:
    """The `attnflow` command (append its arguments) in a fresh Python where the first `free`
    simulations run and every later one waits at a gate (files in `folder`) until the test opens or
    stops it; and that gate. A test can then act on a run that is certainly not finished."""
    script = folder / "gated_attnflow.py"
    script.write_text(GATED_CLI.format(tests=str(Path(__file__).parent), folder=str(folder), free=free))
    return [sys.executable, str(script)], Gate(folder, free=free)
