"""attnflow against the best public code, per Euler step: `simu_xform` of borjanG/2023-transformers-rotf.

    git clone https://github.com/borjanG/2023-transformers-rotf /tmp/rotf
    python benchmarks/peer.py --peer /tmp/rotf                       # N = 8192, beta = 1000
    python benchmarks/peer.py --peer /tmp/rotf --N 8192 32768 --betas 10 1000

The peer's `phase-diagrams.py` is read from the checkout given (nothing of it is copied into
attnflow) and run as written, with its hard-wired device "cuda" read as "cpu": its `step_1` takes
one Euler step of softmax attention over the dense N x N matrix of inner products, x <- normalize(x +
dt softmax(beta x BF x^T) x V), in float64 (the default dtype its script sets), on one thread.  Its
random BF (= Q^T K) and V (randomKQ = randomV = 1, seeded) and its random initial cloud are handed to
attnflow as Attention(Q = I, K = BF, V^T): both codes start from the same state with the same
weights.  attnflow's Euler step is MATH.md's (the tangent projection, then renormalisation), taken
two ways: a loop of `velocity(X, att, kernel=...)` calls, as a user's script would, and
`simulate(..., method="euler")`.  Times: CPU and wall seconds per step over --steps steps from the
same state (after one step to warm up); the peer's peak memory is its N x N matrices (three of them,
8 N^2 bytes each).  Without --peer (or without the file) the script says so and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from scale import load, machine, row

import attnflow as af
from attnflow.kernels import auto, compiled

PEER_FILE = "phase-diagrams.py"


def load_peer(path: Path) -> types.ModuleType:
    """The peer's module, read from its checkout, its device "cuda" read as "cpu", not run as a script."""
    source = (path / PEER_FILE).read_text().replace("'cuda'", "'cpu'").replace('"cuda"', '"cpu"')
    module = types.ModuleType("peer_rotf")
    module.__file__ = str(path / PEER_FILE)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def peer_args(N: int, d: int, dt: float) -> types.SimpleNamespace:
    """The peer's command-line options for one system of N tokens: softmax, random BF and V."""
    return types.SimpleNamespace(
        batch=1,
        ntokens=N,
        dmodel=d,
        use_softmax=True,
        rawstep=True,
        step=dt,
        noanneal=0,
        randomKQ=1,
        randomV=1,
    )


def per_step(fn, steps: int) -> tuple[float, float]:
    fn()  # warm up
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.process_time() - c0) / steps, (time.perf_counter() - t0) / steps


def euler_loop(X0: np.ndarray, att: af.Attention, dt: float, kernel: str):
    """One Euler step of a user's loop per call: x <- normalize(x + dt velocity(x)), from X0 on."""
    state = [X0.copy()]

    def step() -> None:
        Y = state[0] + dt * af.velocity(state[0], att, kernel=kernel)
        state[0] = Y / np.linalg.norm(Y, axis=1, keepdims=True)

    return step


def compare(peer: types.ModuleType, N: int, beta: float, d: int, dt: float, steps: int, seed: int) -> list:
    torch.manual_seed(seed)
    args = peer_args(N, d, dt)
    peer.args = args  # its step_1 reads the global `args` of its script
    sim = peer.simu_xform(args, beta)
    X0 = sim.M[0].detach().clone().double().numpy()
    att = af.Attention(np.eye(d), sim.BF[0].double().numpy(), sim.V[0].double().numpy().T, beta)
    t = [0.0]

    def peer_step() -> None:
        t[0] = sim.step_1(t[0])

    peer_cpu, peer_wall = per_step(peer_step, steps)
    out = []
    for kernel in ("auto", "fused", "truncated", "cluster", "sdpa"):
        auto.forget()
        c, w = per_step(euler_loop(X0, att, dt, kernel), steps)
        out.append((f"velocity loop, kernel={kernel}", c, w))
    auto.forget()
    c0, t0 = time.process_time(), time.perf_counter()
    tr = af.simulate(X0, att, [steps * dt], method="euler", dt=dt, kernel="auto")
    c, w = (time.process_time() - c0) / steps, (time.perf_counter() - t0) / steps
    used = ", ".join(f"{k} {n}" for k, n in tr.info["kernel_evals"].items())
    out.append((f"simulate(method='euler', kernel='auto') ({used})", c, w))
    rows = [[N, f"{beta:g}", "peer simu_xform.step_1", f"{peer_cpu:.4f}", f"{peer_wall:.4f}", "1.0", "1.0"]]
    for name, c, w in out:
        rows.append(
            [N, f"{beta:g}", name, f"{c:.4f}", f"{w:.4f}", f"{peer_cpu / c:.1f}", f"{peer_wall / w:.1f}"]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", type=Path, default=None, help="a checkout of borjanG/2023-transformers-rotf")
    ap.add_argument("--N", type=int, nargs="+", default=[8192])
    ap.add_argument("--betas", type=float, nargs="+", default=[1000.0])
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.peer is None or not (args.peer / PEER_FILE).exists():
        print(f"no peer checkout (--peer PATH with {PEER_FILE}): nothing to compare")
        return
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # as the peer's script does
    peer = load_peer(args.peer)
    print(machine())
    print(f"- fused kernel: {compiled.status()}; d = {args.d}, dt = {args.dt}, {args.steps} steps per row")
    print("\n| N | beta | code | CPU s / step | wall s / step | peer / this (CPU) | peer / this (wall) |")
    print("|---:|---:|:---|---:|---:|---:|---:|")
    for N in args.N:
        for beta in args.betas:
            for r in compare(peer, N, beta, args.d, args.dt, args.steps, args.seed):
                print(row(r), flush=True)
    print(f"\n- load average {load():.1f} at the end")


if __name__ == "__main__":
    sys.exit(main())
