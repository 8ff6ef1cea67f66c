"""The fused kernel against the roofline of this machine (float64, float32), and against sdpa and blocked.

Roofline (per core, measured in this run, CPU time, one thread): N^2 / R_exp + 4 N^2 d / R_gemm
seconds for one evaluation (one exponential and two multiply-adds per key-query pair and dimension;
R_exp: torch.exp on cache-resident blocks, R_gemm: 1024 x 1024 float64 products).  Every kernel is
timed on one torch thread, the best CPU time of --repeats calls, the kernels interleaved; "roofline
/ kernel" is the fraction of the roofline reached (1 = at the roofline); the error (against
sdpa) is max_i |v_i - v_i(sdpa)| / ||V||_2.

--dtypes float32: float32 points, the float32 roofline (R_exp, R_gemm in float32), the kernels on
float32 input (sdpa in float32, the fused kernel's float32 twin, its torch path) and, for
comparison, the float64 core on the same points; the error is against float64 sdpa on the same
(rounded) points.

    python benchmarks/fused.py                        # N = 8192, d = 3, beta = 1000
    python benchmarks/fused.py --N 4096 8192 32768 --d 3 6 8 --betas 10 1000
    python benchmarks/fused.py --dtypes float64 float32 --betas 10 1000 --no-blocked
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scale import attention, load, machine, roof_time, roofline, row

import attnflow as af
from attnflow.kernels import compiled
from attnflow.kernels.dense import velocity_blocked, velocity_sdpa
from attnflow.kernels.fused import velocity_fused

TAIL = ["roofline / kernel", "error", "load"]


def kernels(dtype: str = "float64", blocked: bool = True) -> dict:
    out = {"sdpa": velocity_sdpa}
    if blocked:
        out["blocked"] = velocity_blocked
    if compiled.core() is not None:
        out["fused (compiled)"] = lambda X, att: velocity_fused(X, att, backend="compiled")
        if dtype == "float32":
            out["fused (float64 core)"] = lambda X, att: velocity_fused(X.double(), att, backend="compiled")
    out["fused (torch path)"] = lambda X, att: velocity_fused(X, att, backend="torch")
    return out


def cpu_best(fns: dict, X, att, repeats: int) -> tuple[dict, dict]:
    """Best CPU seconds of each function, interleaved, and its last result."""
    best, results = {}, {}
    names = list(fns)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            c0 = time.process_time()
            results[name] = fns[name](X, att)
            best[name] = min(best.get(name, np.inf), time.process_time() - c0)
    return best, results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[8192])
    ap.add_argument("--d", type=int, nargs="+", default=[3])
    ap.add_argument("--betas", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtypes", nargs="+", default=["float64"], choices=["float64", "float32"])
    ap.add_argument("--no-blocked", action="store_true", help="leave out the (slow) blocked kernel")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    print(f"- fused kernel: {compiled.status()}")
    for name in args.dtypes:
        dtype = getattr(torch, name)
        rate = roofline(dtype)
        print(f"- {name} roofline per core: exp {rate[0] / 1e9:.2f} 1e9/s, GEMM {rate[1] / 1e9:.1f} GFLOP/s")
        print()
        print(row(["N", "d", "beta", "dtype", "kernel", "CPU s", "ns / pair", "roofline s", *TAIL]))
        print("|---:|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|")
        fns = kernels(name, not args.no_blocked)
        for d in args.d:
            for beta in args.betas:
                att = attention(d, beta)
                scale = float(np.linalg.norm(att.V, 2))
                for N in args.N:
                    X = torch.as_tensor(af.sample_uniform(N, d, seed=0), dtype=dtype)[None]
                    cpu_best(fns, X[:, :256], att, 1)  # warm up (and build the compiled core)
                    best, res = cpu_best(fns, X, att, args.repeats)
                    ref = res["sdpa"].double() if name == "float64" else velocity_sdpa(X.double(), att)
                    roof = roof_time(float(N) * N, d, rate)
                    for kname, t in best.items():
                        err = float((res[kname].double() - ref).abs().max()) / scale
                        cells = [N, d, f"{beta:g}", name, kname, f"{t:.4f}", f"{t / N / N * 1e9:.3f}"]
                        tail = [f"{roof:.4f}", f"{roof / t:.2f}", f"{err:.1e}", f"{load():.1f}"]
                        print(row(cells + tail), flush=True)
        print()


if __name__ == "__main__":
    main()
