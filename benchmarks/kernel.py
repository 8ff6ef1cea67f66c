"""Time and peak memory of one velocity evaluation: fused SDPA, blocked softmax, naive NumPy N x N.

Prints a Markdown table (with a description of the machine first).  Peak memory is the growth of the
process's peak resident set (VmHWM, reset through /proc/self/clear_refs before each evaluation) over
the resident set just before it, so it counts torch and NumPy allocations alike (Linux only).  The
script re-executes itself with MALLOC_MMAP_THRESHOLD_ set, so that large buffers are returned to the
system when freed and each evaluation's memory shows up afresh.

    python benchmarks/kernel.py                 # N in {1024, 4096, 16384}, d in {3, 64}
    python benchmarks/kernel.py --N 1024 4096 --d 3 --dtypes float64
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch
from _machine import cpu_name, reset_peak, status_kib

import attnflow as af
from attnflow.kernels.dense import velocity_blocked, velocity_sdpa


def measure(fn, repeats_s: float = 0.5, max_repeats: int = 5) -> tuple[float, float]:
    """(best wall time per call in s, peak RSS growth in MiB) of fn(); fn already warmed up."""
    ok = reset_peak()
    base = status_kib("VmRSS")
    t0 = time.perf_counter()
    fn()
    best = time.perf_counter() - t0
    peak = (status_kib("VmHWM") - base) / 1024 if ok else float("nan")
    n = min(max_repeats, int(repeats_s / max(best, 1e-9)))
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best, max(peak, 0.0)


def naive_velocity(X: np.ndarray, B: np.ndarray, V: np.ndarray, beta: float) -> np.ndarray:
    """NumPy reference with the full N x N score matrix, max-subtracted softmax."""
    S = (X @ B) @ X.T
    S *= beta
    S -= S.max(axis=1, keepdims=True)
    np.exp(S, out=S)
    U = (S @ (X @ V.T)) / S.sum(axis=1, keepdims=True)
    return U - np.sum(X * U, axis=1, keepdims=True) * X


def machine() -> str:
    cpu = cpu_name()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"- CPU: {cpu}, {os.cpu_count()} logical cores, load average {load:.1f} at start\n"
        f"- torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; "
        f"NumPy {np.__version__}; Python {platform.python_version()}; {platform.system()}"
    )


def main(argv: list[str] | None = None) -> None:
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ and sys.platform.startswith("linux") and argv is None:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 17)}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--d", type=int, nargs="+", default=[3, 64])
    p.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    p.add_argument("--beta", type=float, default=10.0)
    p.add_argument("--naive-max-gb", type=float, default=1.5, help="skip naive when N x N exceeds this")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    print(machine())
    print(f"- beta = {args.beta:g}; time: best of up to 6 calls; memory: peak RSS growth during one call\n")
    print("| N | d | dtype | kernel | ms / eval | peak MiB | time / naive | N x N matrix MiB |")
    print("|---:|---:|:---|:---|---:|---:|---:|---:|")
    for d in args.d:
        rng = np.random.default_rng(d)
        Q, K, V = rng.standard_normal((3, d, d)) / np.sqrt(d)
        att = af.Attention(Q, K, V, args.beta)
        for N in args.N:
            X64 = af.sample_uniform(N, d, seed=0)
            for dtype in args.dtypes:
                np_dt = np.dtype(dtype)
                X = X64.astype(np_dt)
                Xt = torch.as_tensor(X)[None]
                nxn_mib = N * N * np_dt.itemsize / 2**20
                rows = []
                naive_t = None
                if N * N * np_dt.itemsize <= args.naive_max_gb * 2**30:
                    Bn, Vn = att.B.astype(np_dt), att.V.astype(np_dt)
                    naive_velocity(X[:64], Bn, Vn, args.beta)
                    naive_t, naive_m = measure(lambda X=X, Bn=Bn, Vn=Vn: naive_velocity(X, Bn, Vn, args.beta))
                    rows.append(("naive NumPy", naive_t, naive_m))
                for name, kern in (("sdpa", velocity_sdpa), ("blocked", velocity_blocked)):
                    kern(Xt[:, :64], att)
                    t, m = measure(lambda kern=kern, Xt=Xt, att=att: kern(Xt, att))
                    rows.append((name, t, m))
                for name, t, m in rows:
                    ratio = f"{t / naive_t:.2f}" if naive_t else "—"
                    cells = [N, d, dtype, name, f"{1e3 * t:.2f}", f"{m:.1f}", ratio, f"{nxn_mib:.0f}"]
                    print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
