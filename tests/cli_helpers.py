"""What the command-line tests share: a runner and a tiny run's arguments (the finished tiny run is
the `finished` fixture of conftest.py)."""

from __future__ import annotations

from typer.testing import CliRunner

from attnflow.cli import app

runner = CliRunner()
TINY = ["concentration-tiny", "--set", "N=24", "--set", "t_max=3.0", "--set", "n_keep=6"]


def invoke(*args: str):
    return runner.invoke(app, list(args))
