"""The GPU: one velocity evaluation per kernel on CUDA, and a short `concentration` run on cuda and cpu.

Prints Markdown tables for docs/benchmarks.md (GPU, CPU and versions first):

1. kernels: d = 3, worked example, beta = 1000; uniform clouds and two antipodal von Mises-Fisher
   clusters (benchmarks/cluster.py's `clusters`, kappa = 1e4 by default); N = 2^14 .. 2^20; float32
   and float64 on `cuda`: `sdpa`, `cluster` and `truncated`, wall time of one evaluation (best of a
   few, after a warm-up, synchronised), peak GPU memory, and the largest error
   max_i |v_i - v_i(ref)| / ||V||_2 against the float64 `sdpa` field on the CPU (all CPU threads) up
   to N = --cpu-max-N, against the float64 `sdpa` field on cuda above;
2. experiment: a short `concentration` run (attnflow.experiments, its `device` key; N = 4096,
   beta = 100 and 1000, t_max = 3 by default; any experiment, preset such as
   `concentration-converged`, or TOML file with --exp-config / --exp-set) on cuda and on the CPU back
   to back: wall times and the largest differences of the W2 curves and the kept tokens' positions.

A kernel or run that fails (out of memory, no CUDA path, any error) gets a row saying so; the rest
still runs.
Without CUDA the script prints one line and exits 0.

    python benchmarks/gpu.py                                    # the full grid (minutes)
    python benchmarks/gpu.py --N 16384 65536 --dtype float64    # a quick look
    python benchmarks/gpu.py --skip-experiment
    python benchmarks/gpu.py --N 131072 --exp-config concentration-converged --exp-set "betas=[1000]"

The d = 3 ladder on nodes graded toward each beta's sources and separatrix (docs/math.md, "Graded
nodes on S^2"; levels 0 and 1 have about 15,800 and 62,500 nodes at beta = 10, 33,600 and 134,000
at 30, 110,000 and 440,000 at 100):

    python benchmarks/gpu.py --skip-kernels --exp-devices cuda --dtype float64 \
        --exp-config concentration --exp-set init=graded 'N="auto"' streak=1 "betas=[10, 30, 100]" \
        t_max=10 N_max=500000
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from _machine import cpu_name
from cluster import clusters

import attnflow as af
from attnflow.kernels.cluster import velocity_cluster
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.truncated import velocity_truncated

KERNELS = {"sdpa": velocity_sdpa, "cluster": velocity_cluster, "truncated": velocity_truncated}


def row(cells) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def machine() -> str:
    p = torch.cuda.get_device_properties(0)
    return (
        f"- GPU: {torch.cuda.get_device_name(0)}, {p.total_memory / 2**30:.0f} GiB, "
        f"{torch.cuda.device_count()} visible; CUDA {torch.version.cuda}\n"
        f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads\n"
        f"- torch {torch.__version__}; NumPy {np.__version__}; Python {platform.python_version()}; "
        f"{platform.system()}"
    )


def state(kind: str, N: int, kappa: float) -> np.ndarray:
    """The cloud: "uniform" on S^2 or "clusters" (two antipodal vMF clusters of width kappa)."""
    return af.sample_uniform(N, 3, seed=0) if kind == "uniform" else clusters(N, kappa)


def timed(fn, budget_s: float, repeats: int = 3) -> tuple[float, torch.Tensor]:
    """(best wall s, result) of fn() on the GPU, synchronised; repeats only while within budget_s."""
    best, out = float("inf"), None
    for k in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        if (k + 2) * best > budget_s:
            break
    assert out is not None
    return best, out


def failure(err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [""])[0]
    return f"failed: {type(err).__name__}: {first[:80]}"


def kernel_table(args) -> None:
    att = af.worked_example(args.beta)
    scale = float(np.linalg.norm(att.V, 2))
    print(
        f"\n### Kernels on the GPU: d = 3, beta = {args.beta:g}, worked example\n\n"
        "One velocity evaluation, wall time (best of up to 3, synchronised, after a warm-up); peak: "
        "GPU memory allocated during the call; error: max_i |v_i - v_i(ref)| / ||V||_2, ref the "
        f"float64 `sdpa` field on the CPU up to N = {args.cpu_max_N}, on cuda above.  Clusters: two "
        f"antipodal vMF clusters, kappa = {args.kappa:g}.\n"
    )
    print("| state | N | dtype | kernel | wall s | sdpa / kernel | peak GiB | error | ref |")
    print("|:---|---:|:---|:---|---:|---:|---:|---:|:---|")
    warm = torch.as_tensor(af.sample_uniform(1024, 3, seed=1), device="cuda")[None]
    for dt in args.dtype:
        for fn in KERNELS.values():  # CUDA contexts, cuBLAS handles, kernel caches
            fn(warm.to(getattr(torch, dt)), att)
    for kind in args.state:
        for N in args.N:
            X0 = torch.as_tensor(state(kind, N, args.kappa))[None]
            if N <= args.cpu_max_N:
                ref_name, ref = "cpu", velocity_sdpa(X0, att)
            else:
                ref_name, ref = "cuda", velocity_sdpa(X0.to("cuda"), att).cpu()
            for dt in args.dtype:
                X = X0.to("cuda", getattr(torch, dt))
                times: dict[str, float] = {}
                for name in args.kernel:
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    try:
                        wall, v = timed(lambda fn=KERNELS[name], X=X: fn(X, att), args.budget)
                    except Exception as err:  # a row saying why, and on to the next
                        print(row([kind, N, dt, name, failure(err), "", "", "", ""]), flush=True)
                        torch.cuda.empty_cache()
                        continue
                    peak = (torch.cuda.max_memory_allocated() - base) / 2**30
                    times[name] = wall
                    err = float((v.cpu().double() - ref).abs().max()) / scale
                    speedup = times["sdpa"] / wall if "sdpa" in times else float("nan")
                    cells = [kind, N, dt, name, f"{wall:.4f}", f"{speedup:.1f}", f"{peak:.2f}"]
                    print(row([*cells, f"{err:.1e}", ref_name]), flush=True)
                    del v
                del X
                torch.cuda.empty_cache()


def experiment_table(args) -> None:
    from attnflow.experiments import load_config, run_experiment

    overrides = args.exp_set
    print(
        f"\n### `{args.exp_config}` on cuda and on the CPU ({', '.join(overrides)})\n\n"
        "The same config but `device`, run back to back; W2: largest difference of the W2 curves; x: "
        "largest difference of the kept tokens' coordinates (unit vectors).\n"
    )
    print("| dtype | cuda s | cpu s | cpu / cuda | max abs W2 difference | max abs x difference |")
    print("|:---|---:|---:|---:|---:|---:|")
    for dt in args.dtype:
        runs = {"cuda": ("not run", None), "cpu": ("not run", None)}
        for device in args.exp_devices:
            extra = [f"device={device}", f"dtype={dt}"] + (["rtol=1e-5"] if dt == "float32" else [])
            cfg = load_config(args.exp_config, [*overrides, *extra])
            t0 = time.perf_counter()
            try:
                ds = run_experiment(cfg, quiet=True)
            except Exception as err:  # a row saying why, and on to the next
                runs[device] = (failure(err), None)
                continue
            runs[device] = (time.perf_counter() - t0, ds)
        (tg, dg), (tc, dc) = runs["cuda"], runs["cpu"]
        if dg is not None and dc is None:  # the GPU's run alone: its W2 minima per beta
            mins = ", ".join(f"{float(b):g}: {float(dg.w2.sel(beta=b).min()):.6f}" for b in dg.beta.values)
            print(row([dt, f"{tg:.1f}", tc, "", f"min W2 {mins}", ""]), flush=True)
            continue
        if dg is None or dc is None:
            print(row([dt, tg if dg is None else f"{tg:.1f}", tc if dc is None else f"{tc:.1f}", "", "", ""]))
            continue
        dw2 = float(np.nanmax(np.abs(dg.w2.values - dc.w2.values)))
        dx = float(np.max(np.abs(dg.x.values - dc.x.values)))
        print(row([dt, f"{tg:.1f}", f"{tc:.1f}", f"{tc / tg:.1f}", f"{dw2:.1e}", f"{dx:.1e}"]), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[2**k for k in range(14, 21)])
    ap.add_argument("--dtype", nargs="+", choices=["float32", "float64"], default=["float32", "float64"])
    ap.add_argument("--state", nargs="+", choices=["uniform", "clusters"], default=["uniform", "clusters"])
    ap.add_argument("--kernel", nargs="+", choices=list(KERNELS), default=list(KERNELS))
    ap.add_argument("--beta", type=float, default=1000.0)
    ap.add_argument("--kappa", type=float, default=1e4, help="width of the two clusters")
    ap.add_argument("--cpu-max-N", type=int, default=65536, help="largest N checked against the CPU")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds per kernel and row for repeats")
    ap.add_argument("--skip-experiment", action="store_true")
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument(
        "--exp-devices",
        nargs="+",
        choices=["cuda", "cpu"],
        default=["cuda", "cpu"],
        help="where the experiment runs (cuda alone for runs the CPU cannot finish)",
    )
    ap.add_argument("--exp-config", default="concentration", help="experiment, preset or TOML file")
    ap.add_argument(
        "--exp-set",
        nargs="*",
        default=["N=4096", "betas=[100, 1000]", "t_max=3", "zero_reference=false"],
        help="KEY=VALUE overrides of the experiment's config (TOML literals)",
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU here (torch.cuda.is_available() is False): nothing measured.")
        return 0
    print(machine())
    if not args.skip_kernels:
        kernel_table(args)
    if not args.skip_experiment:
        experiment_table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
