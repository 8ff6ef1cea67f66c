"""The truncated kernel's geometry kept across moves (kernels/truncated_moves.py) against a new
geometry at every evaluation, measured in one run, one torch thread, CPU seconds (best of
--repeats, the variants interleaved).

Per evaluation: the field at the state x1 one Euler step of dt from x0, the geometry made at x0
(kept: "margin m") or made again at x1 ("rebuilt", margin None, as before).  Per step: `simulate`
with kernel="truncated", RK4, --steps steps of dt from x0, CPU seconds per step and the geometries
built.  Differences: max |v_kept - v_rebuilt| / ||V||_2, and max |x_kept - x_rebuilt| at the end.

    python benchmarks/truncated_moves.py                 # N = 4096 and 16384, beta = 1000
    python benchmarks/truncated_moves.py --N 8192 --betas 100 1000 --margins 0.05 0.1 0.25
    python benchmarks/truncated_moves.py --N 16384 --dtype float32   # float32 states and runs
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scale import load, machine, row

import attnflow as af
from attnflow.dynamics.integrate import simulate
from attnflow.kernels import reuse
from attnflow.kernels.truncated import _geometry as truncated_geometry
from attnflow.kernels.truncated import _moves as truncated_moves
from attnflow.kernels.truncated import velocity_truncated


def states(N: int) -> dict[str, np.ndarray]:
    """uniform; clusters: four vMF clusters (kappa 300, a metastable state); collapsed: two
    antipodal clusters (kappa 1e6)."""
    rng = np.random.default_rng(3)
    means = rng.normal(size=(4, 3))
    parts = [af.sample_vmf(N // 4, m / np.linalg.norm(m), 300.0, seed=k) for k, m in enumerate(means)]
    tight = af.sample_vmf(N, np.ones(3) / np.sqrt(3), 1e6, seed=1)
    tight[::2] *= -1
    return {"uniform": af.sample_uniform(N, 3, seed=0), "clusters": np.concatenate(parts), "collapsed": tight}


def with_margin(margin):
    velocity_truncated.__kwdefaults__["margin"] = margin  # what simulate's kernel call takes


def per_evaluation(X0, att, dt: float, margins, repeats: int, dtype: str) -> tuple[dict, dict]:
    """CPU seconds of one evaluation at x1 = x0 + dt v(x0) (renormalised), and the fields."""
    X0 = torch.as_tensor(X0, dtype=getattr(torch, dtype))
    v0 = velocity_truncated(X0, att, margin=None)
    X1 = X0 + dt * v0
    X1 = X1 / X1.norm(dim=1, keepdim=True)
    best: dict = {}
    out: dict = {}
    names = ["rebuilt", *margins]
    for r in range(repeats):
        for m in names[r % len(names) :] + names[: r % len(names)]:
            margin = None if m == "rebuilt" else m
            truncated_moves.clear()
            reuse.clear()
            if margin is not None:
                velocity_truncated(X0.clone(), att, margin=margin)  # the geometry at x0
            stats: dict = {}
            c0 = time.process_time()
            out[m] = velocity_truncated(X1.clone(), att, margin=margin, stats=stats)
            best[m] = min(best.get(m, np.inf), time.process_time() - c0)
            out[m, "kept"] = stats["geometry_kept"]
    return best, out


def per_step(X0, att, dt: float, steps: int, margins, dtype: str) -> dict:
    """(CPU seconds per step, geometries built, final state) of simulate for each margin."""
    built = [0]
    make = truncated_geometry._geometry

    def counting(*a, **k):
        built[0] += 1
        return make(*a, **k)

    truncated_geometry._geometry = counting
    res = {}
    try:
        for m in ["rebuilt", *margins]:
            with_margin(None if m == "rebuilt" else m)
            truncated_moves.clear()
            reuse.clear()
            built[0] = 0
            c0 = time.process_time()
            tr = simulate(X0, att, [0.0, steps * dt], dt=dt, kernel="truncated", threads=1, dtype=dtype)
            res[m] = ((time.process_time() - c0) / steps, built[0], np.asarray(tr.x[-1]))
    finally:
        truncated_geometry._geometry = make
        with_margin(truncated_moves.MARGIN)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--betas", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--margins", type=float, nargs="+", default=[0.05, 0.1, 0.25])
    ap.add_argument("--dt", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    print(f"- dt = {args.dt:g}, RK4, {args.steps} steps per run; margins {args.margins}; {args.dtype}\n")
    print(
        row(
            [
                "N",
                "beta",
                "state",
                "variant",
                "eval CPU s",
                "kept",
                "rebuilt / this",
                "field diff",
                "step CPU s",
                "geometries built",
                "rebuilt / this",
                "state diff",
                "load",
            ]
        )
    )
    print("|---:|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for beta in args.betas:
        att = af.worked_example(beta)
        scale = float(np.linalg.norm(att.V, 2))
        for N in args.N:
            for name, X0 in states(N).items():
                best, out = per_evaluation(X0, att, args.dt, args.margins, args.repeats, args.dtype)
                steps = per_step(X0, att, args.dt, args.steps, args.margins, args.dtype)
                for m in ["rebuilt", *args.margins]:
                    diff = float((out[m].double() - out["rebuilt"].double()).abs().max()) / scale
                    t, built, Xend = steps[m]
                    sdiff = float(np.abs(Xend - steps["rebuilt"][2]).max())
                    cells = [N, f"{beta:g}", name, "rebuilt" if m == "rebuilt" else f"margin {m:g}"]
                    cells += [
                        f"{best[m]:.4f}",
                        out[m, "kept"],
                        f"{best['rebuilt'] / best[m]:.2f}",
                        f"{diff:.1e}",
                    ]
                    cells += [
                        f"{t:.4f}",
                        built,
                        f"{steps['rebuilt'][0] / t:.2f}",
                        f"{sdiff:.1e}",
                        f"{load():.1f}",
                    ]
                    print(row(cells), flush=True)


if __name__ == "__main__":
    main()
