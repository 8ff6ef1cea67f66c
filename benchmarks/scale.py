"""Speed at scale: dense and truncated kernels against the machine's exp/GEMM roofline.

Prints Markdown tables (machine description and load first):

1. roofline: exp throughput (elements/s, cache-resident blocks) and GEMM throughput (flop/s,
   2048 x 2048), float64 and float32, measured in this run;
2. dense (`sdpa`): time and peak memory of one evaluation, and its ratio to the roofline time
   N^2 / R_exp + 4 N^2 d / R_gemm (one exp and two multiply-adds per key-query pair and dimension);
3. truncated vs dense vs auto at low temperature: uniform and clustered clouds, the kept fraction,
   the fraction of pairs the truncated kernel evaluates, the speed-up, and the kernel auto picks;
4. memory of one truncated evaluation at N = 10^6 (optional, `--million`).

Times are wall-clock, best of a few calls (one call for runs over 5 s); CPU time (all threads) is
given too, since a shared machine inflates wall times.  Peak memory is the growth of the process's
peak resident set during one call (VmHWM reset through /proc/self/clear_refs; Linux only).

    python benchmarks/scale.py --quick          # a few minutes: N = 16384 and 65536, d = 3
    python benchmarks/scale.py                  # the full grid of docs/benchmarks.md (long)
    python benchmarks/scale.py --million        # also N = 10^6 truncated (about a minute)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from _machine import cpu_name, reset_peak, status_kib

import attnflow as af
from attnflow.dynamics.steppers import AUTO_EVERY
from attnflow.kernels import auto, get_kernel
from attnflow.kernels.auto import choose_kernel, kept_fraction
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.truncated import velocity_truncated


def measure(fn, budget_s: float = 3.0, max_repeats: int = 3) -> tuple[float, float, float]:
    """(best wall s, CPU s of that call, peak RSS growth MiB) of fn(); fn already warmed up."""
    ok = reset_peak()
    base = status_kib("VmRSS")
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    best, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = (status_kib("VmHWM") - base) / 1024 if ok else float("nan")
    for _ in range(min(max_repeats - 1, int(budget_s / max(best, 1e-9)))):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        t = time.perf_counter() - t0
        if t < best:
            best, cpu = t, time.process_time() - c0
    return best, cpu, max(peak, 0.0)


def machine() -> str:
    cpu = cpu_name()
    return (
        f"- CPU: {cpu}, {os.cpu_count()} logical cores; load average {load():.1f} at start\n"
        f"- torch {torch.__version__}, {torch.get_num_threads()} intra-op threads; "
        f"NumPy {np.__version__}; Python {platform.python_version()}; {platform.system()}"
    )


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def roofline(dtype: torch.dtype) -> tuple[float, float]:
    """Per-core (exp elements/s, GEMM flop/s) of this machine: one thread, CPU time, best of runs.

    CPU time rather than wall time, so that other jobs on a shared machine distort it less. The exp
    rate is the faster of torch's and NumPy's exponential (NumPy's AVX-512 exp is twice torch's on
    some machines): the best library exp the machine offers, not a bound on a kernel with its own.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        block = torch.rand(1 << 16, dtype=dtype) * -40.0  # L2-resident, arguments as in a softmax
        best_exp = min(_exp_time(torch.exp, block), _exp_time(np.exp, block.numpy()))
        A = torch.rand(1024, 1024, dtype=dtype)
        Bm = torch.rand(1024, 1024, dtype=dtype)
        torch.mm(A, Bm)
        best_mm = math.inf
        for _ in range(5):
            c0 = time.process_time()
            torch.mm(A, Bm)
            best_mm = min(best_mm, time.process_time() - c0)
    finally:
        torch.set_num_threads(threads)
    return 1.0 / best_exp, 2 * 1024**3 / best_mm


def _exp_time(exp: Callable[..., object], block: Any) -> float:
    """Best CPU seconds per element of exp(block, out=work) over 7 runs of 40 calls (1-D block)."""
    work = exp(block)
    best = math.inf
    for _ in range(7):
        c0 = time.process_time()
        for _ in range(40):
            exp(block, out=work)
        best = min(best, (time.process_time() - c0) / (40 * len(block)))
    return best


def roof_time(pairs: float, d: int, rate: tuple[float, float]) -> float:
    """Per-core roofline CPU seconds for `pairs` key-query pairs in dimension d: one exp and two
    multiply-adds per pair and dimension (scores and values)."""
    return pairs / rate[0] + 4.0 * pairs * d / rate[1]


def attention(d: int, beta: float) -> af.Attention:
    if d == 3:
        return af.worked_example(beta)
    rng = np.random.default_rng(d)
    Q, K, V = rng.standard_normal((3, d, d)) / np.sqrt(d)
    return af.Attention(Q + np.eye(d), K + np.eye(d), V, beta)


def clouds(N: int, d: int) -> dict[str, np.ndarray]:
    """uniform; clustered: two antipodal tight vMF clusters (kappa 1e6), as concentration makes them."""
    mean = np.ones(d) / np.sqrt(d)
    tight = af.sample_vmf(N, mean, 1e6, seed=1)
    tight[::2] *= -1
    return {"uniform": af.sample_uniform(N, d, seed=0), "clustered": tight}


def row(cells) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def dense_table(args, rates) -> None:
    print("\n### Dense (`sdpa`) against the roofline\n")
    print(
        f"beta = {args.dense_beta:g}, uniform cloud, M = 1.  Roofline: N^2 / R_exp + 4 N^2 d / R_gemm "
        f"CPU seconds per core; CPU / roofline is the kernel's per-core efficiency (1 = at the roofline); "
        f"wall / roofline divides the roofline by the {torch.get_num_threads()} threads.\n"
    )
    print(
        "| N | d | dtype | wall s | CPU s | peak MiB | roofline CPU s | CPU / roofline "
        "| wall / roofline | load |"
    )
    print("|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|")
    for d in args.d:
        att = attention(d, args.dense_beta)
        for N in args.N:
            X64 = af.sample_uniform(N, d, seed=0)
            for name in args.dtypes:
                dt = getattr(torch, name)
                roof = roof_time(float(N) * N, d, rates[name])
                nth = torch.get_num_threads()
                if roof / nth * args.max_ratio > args.max_seconds:
                    skipped = [N, d, name, "skipped", "", "", f"{roof:.2f}", "", "", f"{load():.1f}"]
                    print(row(skipped), flush=True)
                    continue
                Xt = torch.as_tensor(X64, dtype=dt)[None]
                velocity_sdpa(Xt[:, :256], att)
                t, c, m = measure(lambda Xt=Xt, att=att: velocity_sdpa(Xt, att))
                cells = [N, d, name, f"{t:.3f}", f"{c:.3f}", f"{m:.1f}", f"{roof:.3f}", f"{c / roof:.2f}"]
                cells.append(f"{t / (roof / nth):.2f}")
                print(row([*cells, f"{load():.1f}"]), flush=True)


def truncated_table(args, rates) -> None:
    print("\n### Truncated vs dense vs auto\n")
    print(
        "M = 1; kept: sampled fraction of pairs within e^{-45} of the row maximum; evaluated: fraction "
        "of the N^2 pairs the truncated kernel computes (with the slack of its cells); auto picks: "
        "the kernel `choose_kernel` picks; decide: one decision; auto: the picked kernel's time plus "
        "the decision amortised over the integrator's AUTO_EVERY steps between decisions.  The dense "
        "time is measured once per (N, d, dtype): it depends on neither beta nor the cloud.\n"
    )
    print(
        "| N | d | dtype | beta | cloud | kept | evaluated | auto picks | truncated s | dense s "
        "| truncated CPU s | dense CPU s | decide s | auto s | dense / truncated | same, CPU | auto / dense "
        "| truncated CPU / its roofline | load |"
    )
    print("|---:|---:|:---|---:|:---|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    dense_times: dict = {}
    for d in args.trunc_d:
        for N in args.trunc_N:
            cl = clouds(N, d)
            for beta in args.betas:
                att = attention(d, beta)
                for kind, X64 in cl.items():
                    for name in args.dtypes:
                        Xt = torch.as_tensor(X64, dtype=getattr(torch, name))[None]
                        velocity_truncated(Xt[:, :512], att)
                        stats: dict = {}
                        velocity_truncated(Xt, att, stats=stats)
                        tt, tc, _ = measure(lambda Xt=Xt, att=att: velocity_truncated(Xt, att))
                        frac = kept_fraction(Xt, att)
                        pick = choose_kernel(Xt, att)
                        dense = roof_time(float(N) * N, d, rates[name])
                        key = (N, d, name)  # the dense time depends on neither beta nor the cloud
                        if dense / torch.get_num_threads() * args.max_ratio > args.max_seconds:
                            td = dc = float("nan")
                        elif key in dense_times:
                            td, dc = dense_times[key]
                        else:
                            td, dc, _ = measure(lambda Xt=Xt, att=att: velocity_sdpa(Xt, att))
                            dense_times[key] = td, dc

                        c0 = time.perf_counter()
                        auto.decide(Xt, att, keep=False)  # a fresh decision, not a kept one
                        decide = time.perf_counter() - c0
                        # the integrator re-decides every AUTO_EVERY steps: amortised decision cost
                        if pick in ("truncated", "sdpa"):
                            tk = tt if pick == "truncated" else td
                        else:  # fused or cluster
                            tk = measure(lambda Xt=Xt, att=att, k=pick: get_kernel(k)(Xt, att))[0]
                        ta = tk + decide / AUTO_EVERY
                        ev = stats["pairs"] / N**2
                        roof_t = roof_time(stats["pairs"], d, rates[name])
                        cells = [N, d, name, f"{beta:g}", kind, f"{frac:.4f}", f"{ev:.4f}", pick]
                        cells += [
                            f"{tt:.3f}",
                            f"{td:.3f}",
                            f"{tc:.3f}",
                            f"{dc:.3f}",
                            f"{decide:.3f}",
                            f"{ta:.3f}",
                        ]
                        cells += [f"{td / tt:.1f}", f"{dc / tc:.1f}", f"{ta / td:.2f}"]
                        print(row([*cells, f"{tc / roof_t:.1f}", f"{load():.1f}"]), flush=True)


def million(args) -> None:
    N = 10**6
    print("\n### One evaluation at N = 10^6, d = 3 (float64, uniform cloud)\n")
    print("| kernel | beta | wall s | CPU s | peak MiB | note |")
    print("|:---|---:|---:|---:|---:|:---|")
    X = torch.as_tensor(af.sample_uniform(N, 3, seed=0))[None]
    for beta in (1e4,):
        att = attention(3, beta)
        velocity_truncated(X[:, :4096], att)
        t, c, m = measure(lambda att=att: velocity_truncated(X, att), max_repeats=1)
        print(
            row(["truncated", f"{beta:g}", f"{t:.1f}", f"{c:.1f}", f"{m:.0f}", "full evaluation"]), flush=True
        )
    # the dense kernel would take about an hour here: measure its memory on 8192 queries against
    # all 10^6 keys (its working set is O(N d) in the keys plus per-thread blocks)
    att = attention(3, 1e4)
    from attnflow.kernels.dense import field_sdpa

    Y = X[:, :8192].contiguous()
    t, c, m = measure(lambda: field_sdpa(Y, X, att), max_repeats=1)
    print(row(["sdpa", "1e4", f"{t:.1f}", f"{c:.1f}", f"{m:.0f}", "8192 queries x 10^6 keys (memory probe)"]))


def concentration(N: int, threads: int) -> None:
    """Wall time of the whole `concentration` experiment (six betas, defaults otherwise) at N tokens,
    with its per-beta solver counts: evaluations, rejected steps, kernels used."""
    import json

    from attnflow.experiments.concentration import ConcentrationConfig, run

    config = ConcentrationConfig(N=N, threads=threads)
    t0 = time.perf_counter()
    ds = run(config)
    wall = time.perf_counter() - t0
    timings = ds.attrs.get("timings", {})
    if isinstance(timings, str):
        timings = json.loads(timings)
    solver = ds.attrs.get("solver", [])
    if isinstance(solver, str):
        solver = json.loads(solver)
    print(f"\n### The `concentration` experiment at N = {N} (defaults: {config.integrator}, kernel auto)\n")
    print(f"total wall time {wall:.1f} s (load {load():.1f} at the end)\n")
    print("| beta | wall s | steps | evaluations | kernel evaluations |")
    print("|---:|---:|---:|---:|:---|")
    for beta, info in zip(config.betas, solver, strict=False):
        info = json.loads(info) if isinstance(info, str) else info
        evals = info.get("kernel_evals", "")
        cells = [f"{beta:g}", f"{timings.get(f'beta={beta:g}_s', float('nan')):.1f}"]
        print(row([*cells, info.get("n_steps", ""), info.get("n_evals", ""), evals]), flush=True)


def main(argv: list[str] | None = None) -> None:
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ and sys.platform.startswith("linux") and argv is None:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 17)}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, nargs="+", default=[4096, 16384, 65536, 262144])
    p.add_argument("--d", type=int, nargs="+", default=[3, 16, 64])
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float32", "float64"])
    p.add_argument("--dense-beta", type=float, default=1e4)
    p.add_argument("--betas", type=float, nargs="+", default=[1.0, 100.0, 1e4])
    p.add_argument("--trunc-N", type=int, nargs="+", default=[16384, 65536, 262144])
    p.add_argument("--trunc-d", type=int, nargs="+", default=[3, 6])
    p.add_argument("--max-seconds", type=float, default=120.0, help="skip dense runs predicted longer")
    p.add_argument("--max-ratio", type=float, default=3.0, help="predicted time = roofline x this")
    p.add_argument("--quick", action="store_true", help="N in {16384, 65536}, d = 3, betas 100 and 1e4")
    p.add_argument("--million", action="store_true", help="also one evaluation at N = 10^6")
    p.add_argument("--skip", nargs="*", default=[], choices=["dense", "truncated"])
    p.add_argument("--concentration", type=int, default=None, metavar="N", help="time the experiment")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = p.parse_args(argv)
    if args.quick:
        args.N, args.d, args.trunc_N, args.trunc_d = [16384, 65536], [3, 64], [16384, 65536], [3]
        args.betas = [100.0, 1e4]
    if args.threads:
        torch.set_num_threads(args.threads)

    print(machine())
    rates = {name: roofline(getattr(torch, name)) for name in args.dtypes}
    print("\n### Roofline of this machine (this run, per core)\n")
    print("| dtype | exp (1e9 elements/s) | GEMM (GFLOP/s) |")
    print("|:---|---:|---:|")
    for name, (r_exp, r_mm) in rates.items():
        print(row([name, f"{r_exp / 1e9:.2f}", f"{r_mm / 1e9:.1f}"]))
    if "dense" not in args.skip:
        dense_table(args, rates)
    if "truncated" not in args.skip:
        truncated_table(args, rates)
    if args.million:
        million(args)
    if args.concentration:
        concentration(args.concentration, args.threads or 0)
    print(f"\nload average {load():.1f} at the end")


if __name__ == "__main__":
    main()
