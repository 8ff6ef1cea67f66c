"""The compiled core of the fused kernel (fused.c): built once per machine by the system's C
compiler, kept in the cache directory (cache.py), loaded through ctypes, checked before first use.

    core()      the loaded core, or None: no C compiler, a failed build or self-check, or
                $ATTNFLOW_NO_COMPILE set to anything but "" or "0"; the fused kernel then runs its
                torch path (same field, about 2.5x slower per pair)
    status()    "compiled: PATH" or the reason there is no compiled core, for reports and benchmarks

The compiler is $CC, else the first of cc, gcc, clang on the PATH, with -O3 -march=native (retried
without -march=native where the compiler refuses it); the build takes about a second and is keyed
by the source, the compiler and `cache.machine()`.  ctypes releases the GIL during a call, so the
kernel can run its chunks of queries on several threads.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .cache import cache_dir, machine_key

NO_COMPILE_ENV = "ATTNFLOW_NO_COMPILE"
SOURCE = Path(__file__).with_name("fused.c")
FLAGS = ("-O3", "-ffp-contract=fast", "-shared", "-fPIC")
NATIVE = "-march=native"  # the vector width of this CPU; dropped where the compiler refuses it
BUILD_TIMEOUT_S = 120
SUFFIX = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
_VOIDP = ctypes.c_void_p


@dataclass(frozen=True)
class Core:
    """The loaded library: `group(d)` queries per group, `sums(...)` the sums of fused.c."""

    lib: ctypes.CDLL
    path: Path

    def group(self, d: int) -> int:
        """Queries per group in dimension d (the query count passed to `sums` is a multiple of it);
        0 where the core does not handle d."""
        return int(self.lib.fused_group(int(d)))

    def sums(self, d: int, n: int, ldq: int, q: int, nk: int, rows: int, out: int) -> None:
        """Z_i and N_i (fused.c) for n queries at address q (layout (d, ldq) float64), nk key rows at
        `rows` ((nk, 2 d + 1)), into `out` ((d + 1, ldq)); addresses as ints (data_ptr())."""
        if self.lib.fused_sums(int(d), int(n), int(ldq), q, int(nk), rows, out) != 0:
            raise ValueError(f"the compiled fused core refused d = {d}, n = {n}, nk = {nk}")


def compiler() -> str | None:
    """The C compiler: $CC, else the first of cc, gcc, clang on the PATH; None where there is none."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc) or cc
    return next((p for p in map(shutil.which, ("cc", "gcc", "clang")) if p), None)


def _version(cc: str) -> str:
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.splitlines()[0] if done.stdout else ""


def _build(cc: str, target: Path) -> str:
    """Compile SOURCE into `target` (atomically); returns "" or the compiler's last error line."""
    target.parent.mkdir(parents=True, exist_ok=True)
    error = ""
    for native in ((NATIVE,), ()):
        fd, tmp = tempfile.mkstemp(suffix=SUFFIX, dir=target.parent)
        os.close(fd)
        try:
            done = subprocess.run(
                [cc, *FLAGS, *native, "-o", tmp, str(SOURCE)],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError) as e:
            done, error = None, str(e)
        if done is not None and done.returncode == 0:
            os.replace(tmp, target)
            return ""
        if done is not None:
            error = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        Path(tmp).unlink(missing_ok=True)
    return error


def _load(path: Path) -> Core:
    lib = ctypes.CDLL(str(path))
    lib.fused_group.restype = ctypes.c_int64
    lib.fused_group.argtypes = [ctypes.c_int]
    lib.fused_sums.restype = ctypes.c_int
    lib.fused_sums.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, _VOIDP, ctypes.c_int64]
    lib.fused_sums.argtypes += [_VOIDP, _VOIDP]
    return Core(lib, path)


def self_check(c: Core) -> float:
    """Largest relative difference between the core's sums and NumPy's on a small seeded problem
    (d = 3, scores up to 60 below the row maximum, weights included)."""
    rng = np.random.default_rng(0)
    d, nk, n = 3, 53, c.group(3)
    q = rng.uniform(-20.0, 20.0, (d, n))
    rows = np.hstack([rng.uniform(-1, 1, (nk, d)), rng.uniform(-3, 0, (nk, 1)), rng.normal(size=(nk, d))])
    out = np.empty((d + 1, n))
    c.sums(d, n, n, q.ctypes.data, nk, rows.ctypes.data, out.ctypes.data)
    s = q.T @ rows[:, :d].T + rows[:, d]  # (n, nk) base-2 scores
    e = np.exp2(s - np.round(s.max(axis=1, keepdims=True)))
    ref = np.vstack([e.sum(1), (e @ rows[:, d + 1 :]).T])
    return float(np.max(np.abs(out - ref) / np.abs(ref).max(axis=1, keepdims=True)))


def library_path(cc: str) -> Path:
    """Where the core built by compiler `cc` lives: the cache directory, keyed by the source, the
    compiler and the machine."""
    key = machine_key(SOURCE.read_text(), cc, _version(cc), *FLAGS)
    return cache_dir() / "fused" / f"fused-{key}{SUFFIX}"


@lru_cache(maxsize=1)
def _core() -> tuple[Core | None, str]:
    if os.environ.get(NO_COMPILE_ENV, "") not in ("", "0"):
        return None, f"not compiled: ${NO_COMPILE_ENV} is set"
    cc = compiler()
    if cc is None:
        return None, "not compiled: no C compiler (cc, gcc, clang or $CC) on the PATH"
    path = library_path(cc)
    c, error = None, ""
    for attempt in range(2):  # a library that does not load (a foreign or damaged file) is rebuilt once
        if attempt or not path.exists():
            error = _build(cc, path)
            if error:
                return None, f"not compiled: {Path(cc).name} failed on fused.c: {error}"
        try:
            c = _load(path)
            break
        except OSError as e:
            error = str(e)
    if c is None:
        return None, f"not compiled: the compiled core {path} does not load ({error})"
    err = self_check(c)
    if not err < 1e-13:
        return None, f"not compiled: the compiled core fails its self-check (relative error {err:.2g})"
    return c, f"compiled: {path}"


def core() -> Core | None:
    """The compiled core, built and checked on first use; None where there is none (`status()`)."""
    return _core()[0]


def status() -> str:
    """How the fused kernel runs here: "compiled: PATH" or "not compiled: REASON"."""
    return _core()[1]
