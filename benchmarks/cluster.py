"""Collapsed clusters: the cluster kernel against sdpa, truncated and auto.

Prints Markdown tables (machine description and load first), one torch thread throughout so that
the ratios compare kernels rather than parallel regions:

1. (default) N = 65536, d = 3, beta = 1000, float64, two antipodal von Mises-Fisher clusters at +-u_1
   of the worked example, kappa = 1e4 and 100: wall and CPU time of sdpa, truncated, cluster and auto
   (the kernel auto picks plus its decision amortised over the integrator's AUTO_EVERY steps), the
   speed-up over sdpa and the largest error against sdpa relative to ||V||_2;
2. --seeds: several clouds (seeds) per kernel call against one call per cloud, sdpa and cluster.

The cost model's constants are measured by `python -m attnflow.kernels.calibrate` (and on the cases
of docs/benchmarks.md by `benchmarks/auto.py --fit`).

    python benchmarks/cluster.py               # about 3 minutes on a quiet 2-core machine
    python benchmarks/cluster.py --seeds       # several minutes
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from scale import load, machine, measure, row

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
    ap.add_argument("--seeds", action="store_true", help="several clouds per call")
    ap.add_argument("--seeds-N", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--M", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    if args.seeds:
        seeds(args)
    else:
        main_table(args)


if __name__ == "__main__":
    main()
