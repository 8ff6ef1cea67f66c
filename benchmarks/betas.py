"""Several betas in one kernel call (`simulate(X0, [att.with_beta(b) for b in betas], times)`)
against one run per beta.

Prints a Markdown table: for each N, the wall time of integrating the six betas of the
`concentration` experiment one after the other and together, fixed-step RK4 (the same steps either
way) and adaptive Dormand-Prince (shared steps: every cloud takes the hardest one's step).

    python benchmarks/betas.py            # N = 64 ... 2048, about two minutes on one core
    python benchmarks/betas.py --quick    # N = 64 and 256, a smoke test
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from _machine import cpu_name

import attnflow as af
from attnflow.dynamics.integrate import simulate

BETAS = [10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0]


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(N: int, method: str, t_max: float) -> tuple[float, float, int, int]:
    """(one-by-one s, together s, evaluations one-by-one, evaluations together) for six betas."""
    att = af.worked_example(1.0)
    X0 = af.sample_uniform(N, 3, seed=0)
    times = np.linspace(0.0, t_max, 11)
    options = {"rtol": 1e-7, "atol": 1e-9} if method == "adaptive" else None
    kw = {"method": method, "dt": 0.01, "options": options, "kernel": "sdpa"}
    seq, seq_evals = 0.0, 0
    for beta in BETAS:
        t, tr = timed(lambda beta=beta: simulate(X0, att.with_beta(beta), times, **kw))
        seq += t
        seq_evals += tr.info["n_evals"]
    together, tr = timed(lambda: simulate(X0, [att.with_beta(b) for b in BETAS], times, **kw))
    return seq, together, seq_evals, tr.info["n_evals"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 64 and 256 only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = (64, 256) if args.quick else (64, 128, 256, 600, 1024, 2048)
    print(f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores; load {os.getloadavg()[0]:.1f} at start")
    print(f"- torch {torch.__version__}, {args.threads} thread(s); Python {platform.python_version()}\n")
    print("| N | integrator | t | one by one (s) | together (s) | speed-up | evals one by one | together |")
    print("|" + "---|" * 8)
    for N in sizes:
        for method, t_max in (("rk4", 1.0), ("adaptive", 1.0)):
            seq, tog, e_seq, e_tog = run(N, method, t_max)
            cells = [N, method, f"{t_max:g}", f"{seq:.2f}", f"{tog:.2f}", f"{seq / tog:.2f}", e_seq, e_tog]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
