"""Machine facts shared by the benchmark scripts: peak resident memory (Linux /proc), CPU model."""

from __future__ import annotations


def status_kib(key: str) -> int:
    """A /proc/self/status field in KiB (VmRSS, VmHWM), 0 where unavailable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (platform.processor() where that is unavailable)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"
