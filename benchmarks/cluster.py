"""Collapsed clusters: the cluster kernel against sdpa, truncated and auto; auto's cost constants.

Prints Markdown tables (machine description and load first), one torch thread throughout so that
the ratios compare kernels rather than parallel regions:

1. (default) N = 65536, d = 3, beta = 1000, float64, two antipodal von Mises-Fisher clusters at +-u_1
   of the worked example, kappa = 1e4 and 100: wall and CPU time of sdpa, truncated, cluster and auto
   (the kernel auto picks plus its decision amortised over the integrator's AUTO_EVERY steps), the
   speed-up over sdpa and the largest error against sdpa relative to ||V||_2;
2. --calibrate: the constants of auto.py's cost model, measured on this machine;
3. --seeds: several clouds (seeds) per kernel call against one call per cloud, sdpa and cluster.

    python benchmarks/cluster.py               # about 3 minutes on a quiet 2-core machine
    python benchmarks/cluster.py --calibrate   # a few minutes
    python benchmarks/cluster.py --seeds       # several minutes
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from scale import attention, load, machine, measure, row

import attnflow as af
from attnflow.dynamics.steppers import AUTO_EVERY
from attnflow.kernels import auto
from attnflow.kernels.cluster import velocity_cluster
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.truncated import velocity_truncated

KERNELS = {"sdpa": velocity_sdpa, "truncated": velocity_truncated, "cluster": velocity_cluster}


def clusters(N: int, kappa: float, seed: int = 1, d: int = 3) -> np.ndarray:
    """Two antipodal vMF clusters of N / 2 tokens at +-u_1 of the worked example (d = 3)."""
    u1 = np.array([1.0, 0.0, 1.0]) / math.sqrt(2.0) if d == 3 else np.ones(d) / math.sqrt(d)
    X = af.sample_vmf(N, u1, kappa, seed=seed)
    X[::2] *= -1
    return X


def cpu(fn) -> float:
    c0 = time.process_time()
    fn()
    return time.process_time() - c0


def main_table(args) -> None:
    att = af.worked_example(args.beta)
    scale = float(np.linalg.norm(att.V, 2))
    print(
        f"\n### Collapsed clusters: N = {args.N}, d = 3, beta = {args.beta:g}, float64, one thread\n\n"
        "Two antipodal vMF clusters at +-u_1 (worked example).  Time: best of a few calls (one for "
        "calls over 5 s); auto: the kernel it picks plus one decision / AUTO_EVERY "
        f"({AUTO_EVERY}); error: max_i |v_i - v_i(sdpa)| / ||V||_2.\n"
    )
    print("| kappa | kernel | wall s | CPU s | sdpa / kernel (wall) | same, CPU | error vs sdpa | load |")
    print("|---:|:---|---:|---:|---:|---:|---:|---:|")
    for kappa in args.kappa:
        X = torch.as_tensor(clusters(args.N, kappa))[None]
        velocity_cluster(X[:, :512], att)  # warm up: imports, caches
        velocity_truncated(X[:, :512], att)
        results, fields = {}, {}
        for name, fn in KERNELS.items():
            fields[name] = fn(X, att)
            results[name] = measure(lambda fn=fn, X=X: fn(X, att), budget_s=5.0)[:2]
        c0, t0 = time.process_time(), time.perf_counter()
        pick = auto.choose_kernel(X, att)
        decide = (time.perf_counter() - t0, time.process_time() - c0)
        results["auto"] = tuple(r + dec / AUTO_EVERY for r, dec in zip(results[pick], decide, strict=True))
        fields["auto"] = fields[pick]
        ref = results["sdpa"]
        for name, (wall, c) in results.items():
            err = float((fields[name] - fields["sdpa"]).abs().max()) / scale
            label = f"auto ({pick}; decision {decide[0]:.2f} s)" if name == "auto" else name
            cells = [f"{kappa:g}", label, f"{wall:.3f}", f"{c:.3f}", f"{ref[0] / wall:.1f}"]
            print(row([*cells, f"{ref[1] / c:.1f}", f"{err:.1e}", f"{load():.1f}"]), flush=True)


def cpu_min(fn, repeats: int = 2) -> float:
    return min(cpu(fn) for _ in range(repeats))


def nnls(rows: list, times: list) -> np.ndarray:
    """Non-negative least squares in relative terms: each state weighs by its own time."""
    from scipy.optimize import nnls as solve

    t = np.array(times, float)
    return solve(np.array(rows, float) / t[:, None], np.ones_like(t))[0]


def calibrate(args) -> None:
    """Measure the constants of auto.py (CPU seconds, one thread), by non-negative least squares."""
    print("\n### Cost-model constants (CPU seconds, one thread)\n")
    for dt in ("float64", "float32"):
        per_pair = {}
        for d in (3, 6):
            a = attention(d, args.beta)
            X = torch.as_tensor(af.sample_uniform(8192, d, seed=0), dtype=getattr(torch, dt))[None]
            velocity_sdpa(X[:, :256], a)
            per_pair[d] = cpu_min(lambda X=X, a=a: velocity_sdpa(X, a), 3) / 8192**2
        b = (per_pair[6] - per_pair[3]) / 3
        print(f"- SDPA[{dt}] = ({per_pair[3] - 3 * b:.2e}, {b:.2e})  # per pair: a + b d")
    N = args.calibrate_N
    states = [
        ("uniform", 1e3, af.sample_uniform(N, 3, seed=0)),
        ("uniform", 1e4, af.sample_uniform(N, 3, seed=0)),
        ("clusters kappa 100", 1e3, clusters(N, 100.0)),
        ("clusters kappa 1e4", 1e3, clusters(N, 1e4)),
        ("clusters kappa 1e6", 1e4, clusters(N, 1e6)),
    ]
    for dt in ("float64", "float32"):
        rows, times = [], []
        for _, beta, X0 in states:
            a = af.worked_example(beta)
            X = torch.as_tensor(X0, dtype=getattr(torch, dt))[None]
            velocity_truncated(X[:, :512], a)
            stats: dict = {}
            times.append(cpu_min(lambda X=X, a=a, stats=stats: velocity_truncated(X, a, stats=stats)))
            rows.append([N, stats["pairs"] / 2])
        c = nnls(rows, times)
        print(f"- TRUNCATED[{dt}] = ({c[0]:.2e}, {c[1]:.2e})  # per token, per evaluated pair")
    plan_rows, plan_t, dir_rows, dir_t, exp_rows, exp_t = [], [], [], [], [], []
    for _, beta, X0 in states:
        a = af.worked_example(beta)
        X = torch.as_tensor(X0)[None]
        velocity_cluster(X[:, :512], a)
        for _ in range(2):
            st: dict = {}
            velocity_cluster(X, a, stats=st)
            p = st["order"]
            series_rows = math.comb(p + 4, 3) * st["moment_rows"] + math.comb(p + 3, 3) * 4 * st["eval_rows"]
            plan_rows.append([st["tokens"], st["expanded_pairs"] + st["direct_cell_pairs"]])
            plan_t.append(st["plan_s"])
            dir_rows.append([st["direct_pairs"], st["direct_cell_pairs"]])
            dir_t.append(st["direct_s"])
            exp_rows.append([series_rows, st["expanded_pairs"]])
            exp_t.append(st["expand_s"])
    token, cell_pair = nnls(plan_rows, plan_t)
    direct_pair, direct_cell_pair = nnls(dir_rows, dir_t)
    series, expanded_pair = nnls(exp_rows, exp_t)
    print("- CLUSTER = {")
    for key, value in (
        ("token", token),
        ("cell_pair", cell_pair),
        ("direct_pair", direct_pair),
        ("direct_cell_pair", direct_cell_pair),
        ("series", series),
        ("expanded_pair", expanded_pair),
    ):
        print(f'    "{key}": {value:.2e},')
    print("  }")
    print(f"\n(N = {N}; states: " + "; ".join(f"{n} at beta {b:g}" for n, b, _ in states) + ")")


def seeds(args) -> None:
    """Several clouds per kernel call (M seeds) against one call per cloud."""
    print("\n### Several clouds per call (d = 3, beta = 1000, float64, one thread)\n")
    print("| kernel | state | N | M | one call on M clouds, s | M calls, s | speed-up | load |")
    print("|:---|:---|---:|---:|---:|---:|---:|---:|")
    att = af.worked_example(args.beta)
    for N in args.seeds_N:
        for kappa in (1e4,):
            X = torch.as_tensor(np.stack([clusters(N, kappa, seed=s) for s in range(args.M)]))
            for name in ("cluster", "sdpa"):
                fn = KERNELS[name]
                fn(X[:, :256], att)
                together = cpu_min(lambda fn=fn, X=X: fn(X, att))
                alone = cpu_min(lambda fn=fn, X=X: [fn(X[m : m + 1], att) for m in range(args.M)])
                cells = [name, f"clusters kappa {kappa:g}", N, args.M, f"{together:.3f}", f"{alone:.3f}"]
                print(row([*cells, f"{alone / together:.2f}", f"{load():.1f}"]), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=65536)
    ap.add_argument("--beta", type=float, default=1000.0)
    ap.add_argument("--kappa", type=float, nargs="+", default=[1e4, 100.0])
    ap.add_argument("--calibrate", action="store_true", help="measure auto.py's constants")
    ap.add_argument("--calibrate-N", type=int, default=32768)
    ap.add_argument("--seeds", action="store_true", help="several clouds per call")
    ap.add_argument("--seeds-N", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--M", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    if args.calibrate:
        calibrate(args)
    elif args.seeds:
        seeds(args)
    else:
        main_table(args)


if __name__ == "__main__":
    main()
