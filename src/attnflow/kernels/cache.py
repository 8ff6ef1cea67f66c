"""What the kernels learn about the machine they run on, kept between processes: the compiled core
of the fused kernel and the calibrated cost constants, in a user cache directory.

    ATTNFLOW_CACHE_DIR set     that directory (tests and sandboxes point it at a temporary one)
    otherwise                  the user cache directory of platformdirs, ~/.cache/attnflow on Linux

Files are keyed by `machine()`: the CPU model, its instruction-set flags, the number of logical
cores, the operating system and the torch version, so that a home directory shared by several
machines (or torch upgrades) never hands one machine's results to another.  Writes are atomic (a
temporary file renamed into place), so concurrent processes never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import lru_cache
from pathlib import Path

CACHE_ENV = "ATTNFLOW_CACHE_DIR"


def cache_dir() -> Path:
    """The cache directory (not created here): $ATTNFLOW_CACHE_DIR, else the user cache directory."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser()
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # platformdirs is a dependency; a bare environment still gets the XDG path
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return Path(base) / "attnflow"
    return Path(user_cache_dir("attnflow", appauthor=False))


def _cpuinfo(field: str) -> str:
    """A field of the first processor in /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@lru_cache(maxsize=1)
def machine() -> dict[str, str]:
    """What identifies this machine for the cache: cpu, flags (their hash), cores, system, torch."""
    import torch

    flags = _cpuinfo("flags") or _cpuinfo("Features")
    return {
        "cpu": _cpuinfo("model name") or platform.processor() or platform.machine(),
        "flags": hashlib.sha256(flags.encode()).hexdigest()[:12],
        "cores": str(os.cpu_count()),
        "system": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
    }


@lru_cache(maxsize=16)
def machine_key(*extra: str) -> str:
    """A short hex key of `machine()` and any further strings (a source text, compiler flags); kept
    (every kernel="auto" decision asks for it, through costs.active)."""
    text = json.dumps([machine(), *extra], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
