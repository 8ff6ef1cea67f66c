"""The levers of the d = 2 mean-field flow (`attnflow.dynamics.meanfield`), each as old / new in one run.

- field: the dense field by the fused compiled core against the torch path it replaces (the sparse
  path from 400k pairs on, torch's fused attention below): both evaluated on every query of the same
  run, ms per evaluation and their largest difference;
- step control: the PI controller (PI_BETA) against the plain I controller (PI_BETA = 0): accepted
  and rejected steps, field evaluations and CPU seconds over the same span;
- sparse: the field and the importance weights on the compiled core, each block of queries against
  its kept keys (from COMPILED_SPARSE_MIN_PAIRS pairs on), against the dense compiled core for every
  pair: CPU seconds of the same run, and the largest change of the saved states' first moments.

Each row runs level 0, one pass, t in [0, --span], saved every 0.05, on the d = 2 worked example.

    python benchmarks/meanfield_levers.py --betas 100 1000 --span 8
    python benchmarks/meanfield_levers.py --betas 1000 10000 --span 4 --sparse-only
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
from attnflow.dynamics.meanfield import MeanFieldSettings, circle_field, simulate_mean_field_circle
from attnflow.dynamics.meanfield import _flow as meanfield


def _run(beta: float, span: float) -> tuple[dict, float]:
    att = af.worked_example(beta, d=2)
    times = np.linspace(0.0, span, round(span / 0.05) + 1)
    start = time.process_time()
    traj = simulate_mean_field_circle(att, times, settings=MeanFieldSettings(margin=1.0, max_passes=1))
    cpu = time.process_time() - start
    return {**traj.passes[0], "evals": traj.info["field_evals"], "nodes": int(traj.n_nodes.max())}, cpu


def field_row(beta: float, span: float) -> str:
    """Both field paths on every evaluation of one run (the torch one's result is used)."""
    totals = {"torch": 0.0, "compiled": 0.0, "n": 0, "diff": 0.0}
    original = circle_field.CircleField.__call__

    def both(self, phi, theta, logw):
        ref = circle_field.CircleField(att_of[0], "torch")
        t0 = time.perf_counter()
        old = original(ref, phi, theta, logw)
        t1 = time.perf_counter()
        new = self.dense(phi, theta, logw)
        t2 = time.perf_counter()
        totals["torch"] += t1 - t0
        totals["compiled"] += t2 - t1
        totals["n"] += 1
        totals["diff"] = max(totals["diff"], float((old - new).abs().max()))
        self.n_evals += 1
        return old

    att_of = [af.worked_example(beta, d=2)]
    circle_field.CircleField.__call__ = both
    try:
        _run(beta, span)
    finally:
        circle_field.CircleField.__call__ = original
    n = totals["n"]
    old, new = 1e3 * totals["torch"] / n, 1e3 * totals["compiled"] / n
    diff = totals["diff"]
    ratio = old / new
    return f"| field | {beta:g} | {n} evals | {old:.2f} ms | {new:.2f} ms | {ratio:.2f} | diff {diff:.1e} |"


def control_row(beta: float, span: float) -> str:
    """The I controller (PI_BETA = 0) and the PI one, back to back."""
    kept = meanfield.PI_BETA
    out = []
    for pi in (0.0, kept):
        meanfield.PI_BETA = pi
        try:
            info, cpu = _run(beta, span)
        finally:
            meanfield.PI_BETA = kept
        out.append((info["steps"], info["rejected"], info["evals"], cpu))
    (s0, r0, e0, c0), (s1, r1, e1, c1) = out
    return (
        f"| step control | {beta:g} | steps {s0} + {r0} rejected -> {s1} + {r1} | {e0} evals, {c0:.1f} s | "
        f"{e1} evals, {c1:.1f} s | {e0 / e1:.2f} (evals), {c0 / c1:.2f} (CPU) | |"
    )


def _moments(states) -> np.ndarray:
    return np.array([[np.exp(lw) @ f(th) for f in (np.cos, np.sin)] for th, lw in states])


def sparse_row(beta: float, span: float, level: int) -> str:
    """The same run with the compiled field dense for every pair, then sparse (the default)."""
    kept = circle_field.COMPILED_SPARSE_MIN_PAIRS
    att = af.worked_example(beta, d=2)
    times = np.linspace(0.0, span, round(span / 0.05) + 1)
    out = []
    for threshold in (10**18, kept):
        circle_field.COMPILED_SPARSE_MIN_PAIRS = threshold
        try:
            start = time.process_time()
            traj = simulate_mean_field_circle(
                att, times, level=level, settings=MeanFieldSettings(max_passes=1)
            )
            out.append((traj, time.process_time() - start))
        finally:
            circle_field.COMPILED_SPARSE_MIN_PAIRS = kept
    (dense, c0), (sparse, c1) = out
    moved = np.abs(_moments(dense.states) - _moments(sparse.states)).max()
    nodes = int(sparse.n_nodes.max())
    return (
        f"| sparse (level {level}) | {beta:g} | {nodes} nodes | {c0:.1f} s | {c1:.1f} s | {c0 / c1:.2f} | "
        f"moments moved {moved:.1e} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--betas", type=float, nargs="+", default=[100.0, 1000.0])
    ap.add_argument("--span", type=float, default=8.0)
    ap.add_argument("--sparse-only", action="store_true", help="only the sparse row (levels 0 and 1)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(
        f"machine: {cpu_name()}, {os.cpu_count()} logical cores, load {os.getloadavg()[0]:.1f}; "
        f"torch {torch.__version__}, Python {platform.python_version()}, one thread; span [0, {args.span:g}]"
    )
    print("| lever | beta | size | old | new | old / new | note |")
    print("|---|---|---|---|---|---|---|")
    for beta in args.betas:
        if args.sparse_only:
            for level in (0, 1):
                print(sparse_row(beta, args.span, level), flush=True)
            continue
        print(field_row(beta, args.span), flush=True)
        print(control_row(beta, args.span), flush=True)
        print(sparse_row(beta, args.span, 0), flush=True)


if __name__ == "__main__":
    main()
