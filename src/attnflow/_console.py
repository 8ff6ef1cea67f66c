"""The consoles of the package: where output goes and how wide (`console`, `is_terminal`), and
where it runs (`in_notebook`, `has_widgets`); `attnflow.progress` gives them out.  Rich is imported
when a console is made."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (notebook, JupyterLab, VS Code, Colab): an IPython
    shell whose config has a kernel app. False in a terminal IPython, a script or a test."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has it loaded already
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # a broken or partial IPython
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def has_widgets() -> bool:
    """Whether tqdm's notebook widget can be drawn: ipywidgets is installed (`attnflow[notebook]`)."""
    return importlib.util.find_spec("ipywidgets") is not None


#: width of output that is not a terminal: wide enough that no table of attnflow folds
PIPED_WIDTH = 1000


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
