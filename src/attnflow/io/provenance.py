"""Where and with what a result was computed (`provenance`)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys

from .._text import JSON

# Libraries whose versions go into every result's provenance.
_PROVENANCE_PACKAGES = ("attnflow", "numpy", "scipy", "torch", "pot", "xarray", "zarr", "pydantic", "dask")


def _version(package: str) -> str | None:
    from importlib import metadata  # 0.1 s to import: only when a result is written

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def provenance(torch_threads: int | None = None, device: str | None = None) -> dict[str, JSON]:
    """Where and with what a result was computed: library versions, Python, host, CPU count, UTC time.

    torch_threads: the torch CPU threads the computation used (default: torch's current setting,
    when torch is loaded); device: where it computed ("cpu", "cuda:0"), recorded when given.
    """
    versions: dict[str, JSON] = {p: _version(p) for p in _PROVENANCE_PACKAGES}
    if torch_threads is None and "torch" in sys.modules:  # only report threads when torch is loaded
        torch_threads = sys.modules["torch"].get_num_threads()
    if torch_threads is not None:
        versions["torch_threads"] = int(torch_threads)
    out: dict[str, JSON] = {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    if torch_threads is not None:
        out["torch_threads"] = int(torch_threads)
    if device is not None:
        out["device"] = device
    return out
