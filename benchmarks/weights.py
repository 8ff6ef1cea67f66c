"""Cost of quadrature weights in the fused kernel: weighted `sdpa` against the unweighted one.

The weighted kernel takes log w_j through one extra coordinate (queries (B^T x_i, 1), keys
(x_j, log(w_j) / beta)).  The alternative, an additive float attn_mask of log w_j, is timed beside it
(built here, not in the package).  Prints a Markdown table: best and median time per evaluation over
interleaved rounds (the variants alternate, so a change of machine load hits them alike), and the
ratios to the unweighted kernel.

    python benchmarks/weights.py                    # N = 4096 and 16384, d = 3, both dtypes
    python benchmarks/weights.py --N 4096 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch
from _machine import cpu_name

import attnflow as af
from attnflow.kernels.dense import PAD_TO, tangent, velocity_sdpa


def velocity_masked(X: torch.Tensor, att: af.Attention, w: torch.Tensor) -> torch.Tensor:
    """The weighted field with log w_j as an additive float attn_mask (the alternative not taken)."""
    F = torch.nn.functional
    B = torch.tensor(att.B, dtype=X.dtype)
    V = torch.tensor(att.V, dtype=X.dtype)
    q, k, v = ((X @ B)[:, None], X[:, None], (X @ V.T)[:, None])
    d = X.shape[-1]
    if X.dtype == torch.float32 and d < PAD_TO:
        q, k, v = (F.pad(a, (0, PAD_TO - d)) for a in (q, k, v))
    mask = torch.log(w)[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=att.beta)[:, 0, :, :d]
    return tangent(X, out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--beta", type=float, default=100.0)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (each times every variant)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores, load average {load:.1f} at start")
    threads, py = torch.get_num_threads(), platform.python_version()
    print(f"- torch {torch.__version__}, {threads} intra-op threads; Python {py}")
    print(f"- d = {args.d}, beta = {args.beta:g}, one cloud of N uniform tokens, weights log-uniform over")
    print(f"  6 nats; {args.rounds} interleaved rounds\n")
    print("| N | dtype | unweighted ms (best / median) | weighted ms | weighted / unweighted | "
          "float mask ms | mask / unweighted | max |weighted - mask| |")  # fmt: skip
    print("|---:|:---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((3, args.d, args.d)) / np.sqrt(args.d)
    att = af.Attention(Q, K, V, args.beta)
    for N in args.N:
        X64 = af.sample_uniform(N, args.d, seed=1)
        w64 = np.exp(rng.uniform(-6.0, 0.0, N))
        w64 /= w64.sum()
        for dtype in (torch.float64, torch.float32):
            X = torch.as_tensor(X64, dtype=dtype)[None]
            w = torch.as_tensor(w64, dtype=dtype)[None]
            variants = {
                "unweighted": lambda X=X: velocity_sdpa(X, att),
                "weighted": lambda X=X, w=w: velocity_sdpa(X, att, weights=w),
                "mask": lambda X=X, w=w: velocity_masked(X, att, w),
            }
            for fn in variants.values():
                fn()  # warm up
            times: dict[str, list[float]] = {k: [] for k in variants}
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
            best = {k: min(v) for k, v in times.items()}
            med = {k: statistics.median(v) for k, v in times.items()}
            diff = float((variants["weighted"]() - variants["mask"]()).abs().max())
            cells = [
                N,
                str(dtype).removeprefix("torch."),
                f"{1e3 * best['unweighted']:.1f} / {1e3 * med['unweighted']:.1f}",
                f"{1e3 * best['weighted']:.1f} / {1e3 * med['weighted']:.1f}",
                f"{best['weighted'] / best['unweighted']:.2f} / {med['weighted'] / med['unweighted']:.2f}",
                f"{1e3 * best['mask']:.1f} / {1e3 * med['mask']:.1f}",
                f"{best['mask'] / best['unweighted']:.2f} / {med['mask'] / med['unweighted']:.2f}",
                f"{diff:.1e}",
            ]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
