"""The thread policy of attnflow, in one place: how many CPU threads a computation uses, in torch
and in the BLAS under NumPy and SciPy (through threadpoolctl).

    threads = 1 (the default)   one thread: fastest for N up to a few thousand tokens, and the only
                                safe choice on a machine shared with other jobs (two threads were
                                measured 10x slower at N = 1000, 1000x at N = 32, under load)
    threads = 0                 torch's own setting (all cores unless `torch.set_num_threads` said
                                otherwise): for large N on a machine of one's own
    threads = n > 0             n threads

`simulate(..., threads=)`, every experiment (its `threads` config field, so `attnflow run -s
threads=0` too) and the tasks of a sweep (with threads = 0 a task keeps the share of its host's
cores that the sweep gave it) all go through `torch_threads`, which sets the count for the duration
of the call and restores it afterwards. The BLAS gets the same count: OpenBLAS's default two
threads made a 384 x 384 `eig` 10 to 80x slower on two cores shared with other jobs (docs/benchmarks.md,
"Heads"). Documented in docs/guide.md ("Threads").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "DEFAULT_THREADS",
    "MAX_THREADS",
    "THREADS_HELP",
    "blas_threads",
    "check_threads",
    "intra_op_threads",
    "torch_threads",
]

DEFAULT_THREADS = 1
#: the most threads accepted (torch's count is a C int; no machine of ours has more cores)
MAX_THREADS = 4096
THREADS_HELP = "torch CPU threads (1: fastest for N up to a few thousand; 0: torch's default, all cores)"


def check_threads(threads: object, name: str = "threads") -> int:
    """threads as an int >= 0; TypeError or ValueError naming `name` otherwise."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"{name} must be an integer >= 0 (0: torch's default), got {threads!r}")
    if not 0 <= threads <= MAX_THREADS:
        raise ValueError(
            f"{name} must be between 0 and {MAX_THREADS} (1: one thread, 0: torch's default), got {threads}"
        )
    return threads


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run the block with n >= 1 torch intra-op threads, then restore the previous count: the kernels'
    hot paths (no BLAS change, no checks: called per block of work)."""
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


@contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Run with n >= 1 BLAS threads (under NumPy and SciPy), restored afterwards; torch is not
    imported. The checks of a config (d x d spectra) run on one: QR of 256 x 256 took 0.5 s on two
    threads of two busy cores, 0.01 s on one."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n, user_api="blas"):
        yield


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with n torch CPU threads and n BLAS threads (n = 0: leave both as they are), restored
    afterwards."""
    n = check_threads(n)
    if not n:
        yield
        return
    with intra_op_threads(n), blas_threads(n):
        yield
