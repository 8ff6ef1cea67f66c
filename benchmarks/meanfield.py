"""The mean-field flow on S^1 (`attnflow.science.meanfield.mean_field_circle`) per beta: its cost and
what it measures, for docs/benchmarks.md and docs/math.md.

For each beta (d = 2 worked example, uniform rho_0): t_max = max(25, --span x (delta / lambda_0) beta)
(the heuristic departure time; delta = |B^T u_1| - u_1^T B u_1, lambda_0 the zero-temperature
expansion rate at the separatrix), saved every t_max / --saves, at each --levels.  Prints one
Markdown row per (beta, level): wall and CPU seconds, passes, steps (accepted + rejected), largest
node count, field evaluations, t_depart, argmin t*, min W2, the separatrices at t = 0; and between
consecutive levels the largest W2 difference up to the departure and after it.  Each run is
written to --out as JSON (the curves too) as soon as it ends, so a long ladder loses nothing.

    python benchmarks/meanfield.py --betas 10 20 40 --levels 0 1          # minutes
    python benchmarks/meanfield.py --betas 10 18.7 35 65.8 123 231 433 811 1520 2848 5337 10000
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch
from _machine import cpu_name

import attnflow as af
from attnflow.dynamics.meanfield import MeanFieldSettings
from attnflow.science.meanfield import mean_field_circle


def heuristic_slope(att) -> float:
    """delta / lambda_0 (MATH.md, "Why concentration lasts longer than guaranteed")."""
    sp = att.spectrum()
    u1, u2 = sp.top.basis[:, 0], np.real(sp.eigenvectors[:, 1])
    delta = float(np.linalg.norm(att.B.T @ u1) - u1 @ att.B @ u1)
    lam0 = sp.gap / float(np.linalg.norm(att.B.T @ (u2 / np.linalg.norm(u2))))
    return delta / lam0


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(beta: float, level: int, args) -> dict:
    att = af.worked_example(beta, d=2)
    t_max = max(25.0, args.span * heuristic_slope(att) * beta)
    times = np.linspace(0.0, t_max, args.saves + 1)
    settings = MeanFieldSettings(max_passes=args.passes, rtol=args.rtol, atol=args.rtol / 100)
    wall, cpu = time.perf_counter(), cpu_seconds()
    c = mean_field_circle(att, times, level=level, settings=settings)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    k = int(np.argmin(c.w2))
    passes = c.info["passes"]
    return {
        "beta": beta,
        "level": level,
        "t_max": t_max,
        "wall_s": wall,
        "cpu_s": cpu,
        "passes": len(passes),
        "moved": passes[-1]["moved"],
        "steps": int(sum(p["steps"] for p in passes)),
        "rejected": int(sum(p["rejected"] for p in passes)),
        "max_nodes": int(c.n_nodes.max()),
        "field_evals": c.info["field_evals"],
        "t_depart": c.t_depart,
        "t_star": float(c.t[k]),
        "min_w2": float(c.w2[k]),
        "separatrices0": c.separatrices0.tolist(),
        "t": c.t.tolist(),
        "w2": c.w2.tolist(),
        "mass_A": c.mass_A.tolist(),
        "mass_V": c.mass_V.tolist(),
        "n_nodes": c.n_nodes.tolist(),
        "load": os.getloadavg(),
    }


def fmt(r: dict) -> str:
    return (
        f"| {r['beta']:g} | {r['level']} | {r['t_max']:.0f} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
        f"{r['passes']} ({r['moved']:.1e}) | {r['steps']} + {r['rejected']} | {r['max_nodes']} | "
        f"{r['field_evals']} | {r['t_depart']:.2f} | {r['t_star']:.2f} | {r['min_w2']:.5f} | "
        f"{', '.join(f'{a:.6f}' for a in r['separatrices0'])} | {np.mean(r['load']):.1f} |"
    )


def compare(a: dict, b: dict) -> str:
    t, wa, wb = np.array(a["t"]), np.array(a["w2"]), np.array(b["w2"])
    pre = t <= (a["t_depart"] if math.isfinite(a["t_depart"]) else t[-1])
    d = np.abs(wa - wb)
    post = f"{d[~pre].max():.1e}" if (~pre).any() else "-"
    levels = f"levels {a['level']} / {b['level']}"
    return f"beta {a['beta']:g}: {levels}: max |dW2| {d[pre].max():.1e} up to t_depart, {post} after"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--betas", type=float, nargs="+", default=[10.0, 20.0, 40.0])
    ap.add_argument("--levels", type=int, nargs="+", default=[0])
    ap.add_argument("--span", type=float, default=1.2, help="t_max in units of the heuristic departure")
    ap.add_argument("--saves", type=int, default=500)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--out", type=Path, default=Path("meanfield-runs"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    versions = f"torch {torch.__version__}; Python {platform.python_version()}"
    print(f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores; {versions}")
    print(
        "| beta | level | t_max | wall s | CPU s | passes (moved) | steps | max nodes | field evals "
        "| t_depart | t* | min W2 | separatrices(0) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    done: dict[float, dict[int, dict]] = {}
    for beta in args.betas:
        for level in args.levels:
            r = run(beta, level, args)
            (args.out / f"beta={beta:g}_level={level}.json").write_text(json.dumps(r))
            print(fmt(r), flush=True)
            done.setdefault(beta, {})[level] = r
    for runs in done.values():
        levels = sorted(runs)
        for a, b in itertools.pairwise(levels):
            print(compare(runs[a], runs[b]))


if __name__ == "__main__":
    main()
