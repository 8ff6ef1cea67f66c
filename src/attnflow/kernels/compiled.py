"""The compiled core of the fused kernel (fused.c): built once per machine by the system's C
compiler, kept in the cache directory (cache.py), loaded through ctypes, checked before first use.

    core()      the loaded core, or None: no C compiler, a failed build or self-check, or
                $ATTNFLOW_NO_COMPILE set to anything but "" or "0"; the fused kernel then runs its
                torch path (same field, about 2.5x slower per pair)
    status()    "compiled: PATH" or the reason there is no compiled core, for reports and benchmarks

The core holds float64 sums (`Core.sums`, `Core.cells`) and their float32 twin (`Core.sums32`,
`Core.cells(..., dtype="float32")`) for float32 input; each is checked on first use, and a twin
that fails its check (`Core.float32` False) leaves float32 input to the float64 sums.

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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .cache import cache_dir, machine_key
from .common import run_parallel

if TYPE_CHECKING:
    from typing import TypeAlias

    import torch

    Buffer: TypeAlias = np.ndarray | torch.Tensor  # a CPU array (NumPy or torch) the core reads or writes

NO_COMPILE_ENV = "ATTNFLOW_NO_COMPILE"
SOURCE = Path(__file__).with_name("fused.c")
FLAGS = ("-O3", "-ffp-contract=fast", "-shared", "-fPIC")
NATIVE = "-march=native"  # the vector width of this CPU; dropped where the compiler refuses it
BUILD_TIMEOUT_S = 120
SUFFIX = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
_VOIDP = ctypes.c_void_p
F32_CHECK = 1e-5  # the float32 twin's self-check (measured 8e-7: float32 rounding of scores up to 63)
CHUNKS_PER_THREAD = 4  # pieces of work per thread: a thread slowed by other jobs holds up less


def address(a: Buffer, name: str, shape: tuple[int, ...], dtype: str) -> int:
    """The address of `a`, a C-contiguous CPU array (NumPy or torch) of `dtype` ("float64",
    "float32", "int64") and exactly `shape`; ValueError naming it otherwise: a wrong buffer would
    crash the process."""
    if isinstance(a, np.ndarray):
        ok = bool(a.flags.c_contiguous) and a.dtype == np.dtype(dtype)
        addr = int(a.ctypes.data)
    else:
        ok = a.device.type == "cpu" and a.is_contiguous() and str(a.dtype) == f"torch.{dtype}"
        addr = int(a.data_ptr())
    if not ok or tuple(a.shape) != tuple(shape):
        raise ValueError(
            f"{name} must be a C-contiguous CPU {dtype} array of shape {shape}, "
            f"got {getattr(a, 'dtype', type(a))} of shape {tuple(a.shape)}"
        )
    return addr


def split(work: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of items 0 .. len(work) - 1 with about equal total work each."""
    n = len(work)
    if n == 0:
        return []
    cum = np.cumsum(work, dtype=float)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right")
    edges = np.unique(np.concatenate([[0], np.minimum(cuts, n), [n]]))
    return [(int(a), int(b)) for a, b in pairwise(edges) if b > a]


@dataclass(frozen=True)
class Core:
    """The loaded library: `group(d)` queries per group; `sums` (all keys for every query) and
    `cells` (each cell's queries against its own keys), the two entry points of fused.c, with their
    arguments checked and their work split over threads."""

    lib: ctypes.CDLL
    path: Path
    float32: bool = True  # the float32 twin passed its self-check (`sums32`)

    def group(self, d: int, dtype: str = "float64") -> int:
        """Queries per group in dimension d (`sums` takes a multiple of it; `sums32` of
        group(d, "float32")); 0 for an unsupported d."""
        return int((self.lib.fused_group32 if dtype == "float32" else self.lib.fused_group)(int(d)))

    def sums(self, q: Buffer, rows: Buffer, out: Buffer, threads: int = 1) -> None:
        """Z_i, N_i and the shift m_i of fused.c for the queries q (d, n) (n a multiple of `group(d)`)
        against the key rows (nk, 2 d + 1), into out (d + 2, n); float64 CPU arrays."""
        d, n = q.shape
        group = self.group(d)
        if group == 0 or n % group or rows.shape[0] < 1:
            raise ValueError(f"the compiled core takes 2 <= d <= 8, queries in groups of {group} and keys")
        nk = rows.shape[0]
        aq = address(q, "q", (d, n), "float64")
        ar = address(rows, "rows", (nk, 2 * d + 1), "float64")
        ao = address(out, "out", (d + 2, n), "float64")

        def run(g0: int, g1: int) -> None:
            i0, i1 = g0 * group, g1 * group
            self.lib.fused_sums(d, i1 - i0, n, aq + 8 * i0, nk, ar, ao + 8 * i0)

        run_parallel(split(np.ones(n // group), CHUNKS_PER_THREAD * threads), run, threads)

    def sums32(self, q: Buffer, rows: Buffer, out: Buffer, threads: int = 1) -> None:
        """`sums` by the float32 twin: q (d, n) (n a multiple of `group(d, "float32")`) and rows
        (nk, 2 d + 1) float32, out (d + 2, n) float64; |q_i . k_j + l_j| must stay below 2^21."""
        d, n = q.shape
        group = self.group(d, "float32")
        if group == 0 or n % group or rows.shape[0] < 1:
            raise ValueError(f"the compiled core takes 2 <= d <= 8, queries in groups of {group} and keys")
        nk = rows.shape[0]
        aq = address(q, "q", (d, n), "float32")
        ar = address(rows, "rows", (nk, 2 * d + 1), "float32")
        ao = address(out, "out", (d + 2, n), "float64")

        def run(g0: int, g1: int) -> None:
            i0, i1 = g0 * group, g1 * group
            self.lib.fused_sums32(d, i1 - i0, n, aq + 4 * i0, nk, ar, ao + 8 * i0)

        run_parallel(split(np.ones(n // group), CHUNKS_PER_THREAD * threads), run, threads)

    def cells(
        self,
        q: Buffer,
        qidx: np.ndarray,
        qs: np.ndarray,
        rows: Buffer,
        kidx: np.ndarray,
        ks: np.ndarray,
        out: Buffer,
        threads: int = 1,
        dtype: str = "float64",
    ) -> None:
        """fused.c's `fused_cells` for every cell c: its queries, rows qidx[qs[c]:qs[c + 1]] of q
        (nq, d), against its keys, rows kidx[ks[c]:ks[c + 1]] of `rows` (nk, 2 d + 1); results in
        the queries' rows of out (nq, d + 2).  q, rows: CPU arrays (NumPy or torch) of `dtype`
        ("float32": the float32 twin, `fused_cells32`), out float64; qidx, qs, kidx, ks: int64 NumPy
        arrays; every index is checked."""
        (nq, d), nk, n_cells = q.shape, rows.shape[0], len(qs) - 1
        bad = self.group(d) == 0 or n_cells < 1 or bool((np.diff(ks) < 1).any())
        if bad or not _cells_in_range(nq, nk, qidx, qs, kidx, ks):
            raise ValueError("cells: an unsupported d, a cell without keys or an index out of range")
        args = (
            address(q, "q", (nq, d), dtype),
            address(qidx, "qidx", (len(qidx),), "int64"),
            address(qs, "qs", (n_cells + 1,), "int64"),
            address(rows, "rows", (nk, 2 * d + 1), dtype),
            address(kidx, "kidx", (len(kidx),), "int64"),
            address(ks, "ks", (n_cells + 1,), "int64"),
            address(out, "out", (nq, d + 2), "float64"),
        )

        fn = self.lib.fused_cells32 if dtype == "float32" else self.lib.fused_cells

        def run(c0: int, c1: int) -> None:
            if fn(d, c0, c1, *args) != 0:
                raise MemoryError(f"the compiled core ran out of memory on cells {c0} .. {c1 - 1}")

        work = np.diff(qs).astype(float) * np.diff(ks)
        run_parallel(split(work, CHUNKS_PER_THREAD * threads), run, threads)

    def colmax(
        self,
        q: Buffer,
        a: Buffer,
        qidx: np.ndarray,
        qs: np.ndarray,
        rows: Buffer,
        kidx: np.ndarray,
        ks: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """fused.c's `fused_colmax` on every cell (one thread): out[j] raised to the largest
        a_i + q_i . k_j over the queries i of each cell that holds key j; q (nq, d), a (nq,), rows
        (nk, 2 d + 1) float64 CPU arrays, out (nk,) float64; the indices as in `cells`."""
        (nq, d), nk, n_cells = q.shape, rows.shape[0], len(qs) - 1
        if self.group(d) == 0 or not _cells_in_range(nq, nk, qidx, qs, kidx, ks):
            raise ValueError("colmax: an unsupported d or an index out of range")
        err = self.lib.fused_colmax(
            d,
            0,
            n_cells,
            address(q, "q", (nq, d), "float64"),
            address(a, "a", (nq,), "float64"),
            address(qidx, "qidx", (len(qidx),), "int64"),
            address(qs, "qs", (n_cells + 1,), "int64"),
            address(rows, "rows", (nk, 2 * d + 1), "float64"),
            address(kidx, "kidx", (len(kidx),), "int64"),
            address(ks, "ks", (n_cells + 1,), "int64"),
            address(out, "out", (nk,), "float64"),
        )
        if err != 0:
            raise MemoryError("the compiled core ran out of memory in colmax")


def _cells_in_range(
    nq: int, nk: int, qidx: np.ndarray, qs: np.ndarray, kidx: np.ndarray, ks: np.ndarray
) -> bool:
    """Whether the cells' offsets qs, ks (one more than the cells, non-decreasing from 0 or more,
    ending within qidx and kidx) and the indices qidx (< nq) and kidx (< nk) are all in range: a
    wrong one would read or write outside the arrays in C."""
    ok = len(qs) == len(ks) >= 1 and qs[0] >= 0 and ks[0] >= 0
    ok = ok and not bool((np.diff(qs) < 0).any() or (np.diff(ks) < 0).any())
    ok = ok and qs[-1] <= len(qidx) and ks[-1] <= len(kidx)
    for idx, size in ((qidx, nq), (kidx, nk)):
        ok = ok and (len(idx) == 0 or (int(idx.min()) >= 0 and int(idx.max()) < size))
    return bool(ok)


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
    lib.fused_group32.restype = ctypes.c_int64
    lib.fused_group32.argtypes = [ctypes.c_int]
    lib.fused_sums32.restype = ctypes.c_int
    lib.fused_sums32.argtypes = lib.fused_sums.argtypes
    lib.fused_cells.restype = ctypes.c_int
    lib.fused_cells.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, *[_VOIDP] * 7]
    lib.fused_cells32.restype = ctypes.c_int
    lib.fused_cells32.argtypes = lib.fused_cells.argtypes
    lib.fused_colmax.restype = ctypes.c_int
    lib.fused_colmax.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, *[_VOIDP] * 8]
    return Core(lib, path)


def self_check(c: Core, dtype: str = "float64") -> float:
    """Largest relative difference between the core's sums (`sums`, or `sums32` for dtype
    "float32") and NumPy's in float64 on a small seeded problem (d = 3, scores up to 60 below the
    row maximum, weights included; the float32 inputs rounded first)."""
    rng = np.random.default_rng(0)
    d, nk, n = 3, 53, c.group(3, dtype)
    q = rng.uniform(-20.0, 20.0, (d, n)).astype(dtype)
    rows = np.hstack([rng.uniform(-1, 1, (nk, d)), rng.uniform(-3, 0, (nk, 1)), rng.normal(size=(nk, d))])
    rows = rows.astype(dtype)
    out = np.empty((d + 2, n))
    (c.sums32 if dtype == "float32" else c.sums)(q, rows, out)
    q, rows = q.astype(np.float64), rows.astype(np.float64)
    s = q.T @ rows[:, :d].T + rows[:, d]  # (n, nk) base-2 scores
    shift = np.round(s.max(axis=1))
    # float32 scores may round a maximum near k + 1/2 the other way: the sums are taken at its shift
    off = 0.0 if dtype == "float64" else np.clip(out[d + 1] - shift, -1.0, 1.0)
    e = np.exp2(s - (shift + off)[:, None])
    ref = np.vstack([e.sum(1), (e @ rows[:, d + 1 :]).T])
    err = np.max(np.abs(out[: d + 1] - ref) / np.abs(ref).max(axis=1, keepdims=True))
    return float(max(err, np.abs(out[d + 1] - (shift + off)).max()))


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
    err32 = self_check(c, "float32")
    if not err32 < F32_CHECK:  # float32 input then runs the float64 sums
        return Core(c.lib, path, float32=False), f"compiled: {path} (float32 twin failed: {err32:.2g})"
    return c, f"compiled: {path}"


_disabled = threading.Event()


def core() -> Core | None:
    """The compiled core, built and checked on first use; None where there is none (`status()`) or
    inside `disabled()`."""
    return None if _disabled.is_set() else _core()[0]


@contextmanager
def disabled() -> Iterator[None]:
    """Run the block as if there were no compiled core (the kernels' torch paths): for calibrating
    and testing those paths on a machine that has one.  Process-wide, not thread-local."""
    was = _disabled.is_set()
    _disabled.set()
    try:
        yield
    finally:
        if not was:
            _disabled.clear()


def status() -> str:
    """How the fused kernel runs here: "compiled: PATH" or "not compiled: REASON"."""
    return "not compiled: switched off (compiled.disabled())" if _disabled.is_set() else _core()[1]
