"""The cost of one evaluation of a Dynamics beyond the single head, against the single-head kernels.

For each N and kernel, in one run (ratios within a run: the machine is shared): one softmax head
(the single-head kernel), H heads of the model path against H times one head, the causal mask against
the unmasked kernel, and unnormalised attention against softmax. Prints a Markdown table of
milliseconds per evaluation (median of repeats) and the ratios.

    python benchmarks/variants.py             # d = 3 and 8, N = 1024 ... 16384, a few minutes
    python benchmarks/variants.py --quick     # N = 512, a smoke test
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from _machine import cpu_name

import attnflow as af
from attnflow.flow import Dynamics
from attnflow.kernels import compiled, get_kernel
from attnflow.kernels.variants import velocity_model

H = 4


def per_eval(fn, repeats: int) -> float:
    """Median seconds of fn() over `repeats` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def heads(d: int) -> list[af.Attention]:
    return [af.random_attention(d, h, beta=10.0, symmetric=False) for h in range(H)]


def row(N: int, d: int, kernel: str, repeats: int) -> list[str]:
    hs = heads(d)
    X = torch.as_tensor(af.sample_uniform(N, d, seed=0))
    one = get_kernel(kernel)
    single = per_eval(lambda: one(X, hs[0]), repeats)
    multi = per_eval(lambda: velocity_model(X, Dynamics(hs), impl=kernel), repeats)
    causal = per_eval(lambda: velocity_model(X, Dynamics(hs[0], mask="causal"), impl=kernel), repeats)
    cells = [N, d, kernel, f"{single * 1e3:.3g}", f"{multi * 1e3:.3g}", f"{multi / (H * single):.2f}"]
    cells += [f"{causal * 1e3:.3g}", f"{causal / single:.2f}"]
    if kernel == "sdpa":
        cells += ["—", "—"]
    else:
        usa = per_eval(
            lambda: velocity_model(X, Dynamics(hs[0], normalization="usa", usa_time="rescaled"), impl=kernel),
            repeats,
        )
        cells += [f"{usa * 1e3:.3g}", f"{usa / single:.2f}"]
    return [str(c) for c in cells]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 512 only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = (512,) if args.quick else (1024, 4096, 16384)
    print(f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores; load {os.getloadavg()[0]:.1f} at start")
    print(f"- torch {torch.__version__}, {args.threads} thread(s); Python {platform.python_version()}")
    print(f"- fused: {compiled.status()}; H = {H} heads (random, beta = 10), float64\n")
    columns = [
        "N",
        "d",
        "kernel",
        "1 head (ms)",
        "H heads (ms)",
        "/ (H x 1 head)",
        "causal (ms)",
        "/ unmasked",
    ]
    print("| " + " | ".join([*columns, "usa (ms)", "/ softmax"]) + " |")
    print("|" + "---|" * 10)
    for d in (3, 8):
        for N in sizes:
            repeats = max(3, int(2e8 // (N * N * d)))
            for kernel in ("fused", "sdpa", "blocked"):
                print("| " + " | ".join(row(N, d, kernel, min(repeats, 20))) + " |", flush=True)
    print(f"\n- load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
