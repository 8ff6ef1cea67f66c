"""The sampled plan of the truncated kernel against its plan: what `kernel="auto"` prices it by above
pricing.PLAN_MAX_N tokens (`truncated.sampled_counts`) against `candidate_counts`.

For each state of benchmarks/auto.py (the d = 3 worked example: uniform, metastable, collapsed,
terminal-phase) and beta: the predicted cost of the truncated kernel from the sampled counts over
the one from the plan's counts (what the decision uses), the pairs' ratio, and the CPU time of the
sampled plan over the plan's (best of --repeats, one torch thread).

    python benchmarks/sampled_plan.py                     # N = 8192, 16384, 65536
    python benchmarks/sampled_plan.py --N 16384 --betas 30 1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from auto import STATES, state
from scale import load, machine, row

import attnflow as af
from attnflow.kernels import auto, reuse
from attnflow.kernels.truncated import candidate_counts, sample_size, sampled_counts


def best(fn, repeats: int) -> tuple[float, dict]:
    """(best CPU seconds, result) of `repeats` calls, the kept plans dropped before each."""
    seconds, out = np.inf, {}
    for _ in range(repeats):
        reuse.clear()
        c0 = time.process_time()
        out = fn()
        seconds = min(seconds, time.process_time() - c0)
    return seconds, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[8192, 16384, 65536])
    ap.add_argument("--betas", type=float, nargs="+", default=[30.0, 1000.0, 1e4])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    print(
        "\n| N | sampled queries | state | beta | cost, sampled / plan | pairs, sampled / plan "
        "| time, sampled / plan | sampled ms | plan ms | load |"
    )
    print("|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for N in args.N:
        for name in STATES:
            X = torch.as_tensor(state(name, N))[None]
            v = auto._variant(X)
            for beta in args.betas:
                att = af.worked_example(beta)
                ts, est = best(lambda X=X, att=att: sampled_counts(X, att), args.repeats)
                tp, exact = best(lambda X=X, att=att: candidate_counts(X, att), args.repeats)
                cost = auto.truncated_cost(est, 1, N, v) / auto.truncated_cost(exact, 1, N, v)
                pairs = est["pairs"] / exact["pairs"]
                ratios.append((cost, pairs, ts / tp))
                cells = [N, sample_size(N), name, f"{beta:g}", f"{cost:.2f}", f"{pairs:.2f}"]
                print(row([*cells, f"{ts / tp:.2f}", f"{1e3 * ts:.1f}", f"{1e3 * tp:.1f}", f"{load():.1f}"]))
    r = np.array(ratios)
    for k, what in enumerate(("predicted cost", "pairs", "time")):
        lo, med, hi = np.min(r[:, k]), np.median(r[:, k]), np.max(r[:, k])
        print(f"- {what}, sampled / plan: {lo:.2f} to {hi:.2f}, median {med:.2f}")


if __name__ == "__main__":
    main()
