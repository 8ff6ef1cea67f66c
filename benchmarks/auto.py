"""The automatic kernel choice on the 24 cases: picks, times, ratios to the fastest, decisions included.

States of the d = 3 worked example: uniform, metastable (two antipodal von Mises-Fisher clusters at
+-u_1, kappa = 100), collapsed (kappa = 1e4) and a terminal-phase state from a real run (uniform
start, beta = 100, Heun with dt = 0.1, stopped at the first time (on a grid of 0.5) when a quarter
of the tokens has reached +-v_1, V's top eigenvector, after half had gathered at +-u_1; the states
are kept in the cache directory, some minutes at N = 65536 the first time); N = 4096, 16384,
65536; beta = 30 and 1000.
One torch thread; every time is the best of --repeats calls of `velocity(X, att, kernel=...)` with
the kernels interleaved, CPU seconds (and wall seconds beside).  Each kernel is timed cold (every
kept decision, plan and geometry forgotten first, `auto.forget()`, as in a new process) and warm
(the same call right after: the truncated kernel keeps its geometry while the state moves less
than its margin, 1.6 to 4x cheaper).  "auto, first call": `velocity(kernel="auto")` cold: the
decision, then the kernel, which takes the plan the decision made; compared with the fastest cold
kernel.  "auto, next call": the same call again (the kept decision, then the kernel, warm);
compared with the fastest warm kernel.

    python benchmarks/auto.py                        # the 24 cases (about 10 minutes)
    python benchmarks/auto.py --N 4096 16384         # a quicker look
    python benchmarks/auto.py --N 256 512 1024 2048  # below auto.MIN_N: the dense pick, no decision
    python benchmarks/auto.py --fit                  # fit the cost constants on these cases instead
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import torch
from scale import load, machine, row

import attnflow as af
from attnflow.kernels import auto, calibrate, compiled
from attnflow.kernels import costs as kcosts
from attnflow.kernels.cache import cache_dir

KERNELS = ("fused", "sdpa", "truncated", "cluster")
STATES = ("uniform", "metastable", "collapsed", "terminal")
TERMINAL = {"beta": 100.0, "dt": 0.1, "t_max": 60.0, "every": 0.5, "seed": 0}
NEAR = math.cos(math.radians(8.0))  # a token within 8 degrees of a direction (or its opposite)


def terminal_state(N: int) -> np.ndarray:
    """The terminal-phase state of a real run (module docstring), computed once and kept: the first
    saved state (every 0.5 time units) with a quarter of the tokens within 8 degrees of +-v_1 after
    half of them had been within 8 degrees of +-u_1."""
    tag = "-".join(f"{k}{v:g}" for k, v in TERMINAL.items())
    path = cache_dir() / "benchmarks" / f"terminal-N{N}-{tag}.npy"
    if path.exists():
        return np.load(path)
    att = af.worked_example(TERMINAL["beta"])
    u1, v1 = att.spectrum().top.basis[:, 0], att.spectrum().v_top_real.basis[:, 0]
    X = af.sample_uniform(N, 3, seed=int(TERMINAL["seed"]))
    t, concentrated = 0.0, False
    while t < TERMINAL["t_max"]:
        run = af.simulate(X, att, [TERMINAL["every"]], method="heun", dt=TERMINAL["dt"], kernel="auto")
        X = run.x[-1]
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        t += TERMINAL["every"]
        concentrated = concentrated or np.mean(np.abs(X @ u1) > NEAR) >= 0.5
        if concentrated and np.mean(np.abs(X @ v1) > NEAR) >= 0.25:
            break
    X = np.ascontiguousarray(X)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, X)
    print(f"- terminal-phase state at N = {N}: t = {t:g} ({path})", flush=True)
    return X


def state(name: str, N: int) -> np.ndarray:
    u1 = af.worked_example(1.0).spectrum().top.basis[:, 0]
    if name == "uniform":
        return af.sample_uniform(N, 3, seed=0)
    if name == "terminal":
        return terminal_state(N)
    return calibrate.two_clusters(N, u1, {"metastable": 100.0, "collapsed": 1e4}[name], seed=1)


def timed(fn, out: dict, name: str) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out[name] = fn()
    return time.process_time() - c0, time.perf_counter() - t0


def case(X: np.ndarray, att, kernels: list[str], repeats: int) -> dict:
    """Best (CPU, wall) seconds of each kernel and of auto's first and next calls, interleaved; the
    decision of the first call; auto's largest error against sdpa (relative to ||V||_2)."""
    best: dict[str, tuple[float, float]] = {}
    fields: dict[str, np.ndarray] = {}

    def keep(name: str, fn) -> None:
        t = timed(fn, fields, name)
        if name not in best or t[0] < best[name][0]:
            best[name] = t

    af.velocity(X[:256], att, kernel="fused")  # warm up
    decision = None
    for r in range(repeats):
        for k in kernels[r % len(kernels) :] + kernels[: r % len(kernels)]:
            auto.forget()
            keep(k, lambda k=k: af.velocity(X, att, kernel=k))
            keep(f"{k} warm", lambda k=k: af.velocity(X, att, kernel=k))
        auto.forget()
        keep("auto first", lambda: af.velocity(X, att, kernel="auto"))
        decision = auto._decisions[-1] if auto._decisions else None  # none below auto.MIN_N
        keep("auto next", lambda: af.velocity(X, att, kernel="auto"))
    err = math.nan
    if "sdpa" in fields:
        err = max(float(np.abs(fields[a] - fields["sdpa"]).max()) for a in ("auto first", "auto next"))
        err /= float(np.linalg.norm(att.V, 2))
    pick = decision.kernel if decision is not None else auto.choose_kernel(torch.as_tensor(X)[None], att)
    return {"times": best, "decision": decision, "pick": pick, "error": err}


def table(args) -> list[dict]:
    print(
        "\n| N | state | beta | "
        + " | ".join(f"{k} CPU s, cold / warm" for k in KERNELS)
        + " | fastest cold / warm | auto picks | auto first call CPU s (wall) | / fastest cold "
        "| auto next call CPU s | / fastest warm | decision CPU s | decision / picked kernel "
        "| auto error vs sdpa | load |"
    )
    print("|" + "---:|" * 3 + "---:|" * len(KERNELS) + ":---|:---|" + "---:|" * 8)
    results = []
    for N in args.N:
        for name in STATES:
            X = state(name, N)
            for beta in args.betas:
                att = af.worked_example(beta)
                kernels = [k for k in KERNELS if not (k == "sdpa" and N > args.sdpa_max_N and beta < 100)]
                if N > args.sdpa_max_N and name in ("uniform", "terminal"):
                    kernels = [k for k in kernels if k != "sdpa"]
                r = case(X, att, kernels, args.repeats)
                results.append({"N": N, "state": name, "beta": beta, **r})
                print(row(cells(r, N, name, beta)), flush=True)
    return results


def fastest(t: dict, warm: bool) -> str:
    """The kernel with the least CPU time, cold (a fresh state) or warm (the call right after)."""
    return min((k for k in KERNELS if k in t), key=lambda k: t[f"{k} warm" if warm else k][0])


def ratio(r: dict, which: str) -> float:
    """auto's first call over the fastest cold kernel, its next call over the fastest warm one."""
    t, warm = r["times"], which == "auto next"
    k = fastest(t, warm)
    return t[which][0] / t[f"{k} warm" if warm else k][0]


def cells(r: dict, N: int, name: str, beta: float) -> list:
    t, dec = r["times"], r["decision"]
    cold, warm = fastest(t, False), fastest(t, True)
    pick = r["pick"]
    out = [N, name, f"{beta:g}"]
    out += [f"{t[k][0]:.3f} / {t[k + ' warm'][0]:.3f}" if k in t else "" for k in KERNELS]
    first, nxt = t["auto first"], t["auto next"]
    out += [f"{cold} / {warm}", pick, f"{first[0]:.3f} ({first[1]:.3f})", f"{ratio(r, 'auto first'):.2f}"]
    out += [f"{nxt[0]:.3f}", f"{ratio(r, 'auto next'):.2f}"]
    dsec = dec.seconds if dec is not None else 0.0
    out += [f"{dsec:.4f}", f"{dsec / t[pick][0]:.1%}" if pick in t else ""]
    out += ["" if math.isnan(r["error"]) else f"{r['error']:.1e}", f"{load():.1f}"]
    return out


def summary(results: list[dict]) -> None:
    n = len(results)
    for which, kind in (("auto first", "cold"), ("auto next", "warm")):
        good = sum(ratio(r, which) <= 1.2 for r in results)
        print(f"- {which} call within 20 % of the fastest {kind} kernel: {good} of {n}")
    for N in sorted({r["N"] for r in results}):
        extra = [r["times"]["auto first"][0] / r["times"]["auto next"][0] - 1 for r in results if r["N"] == N]
        print(f"- N = {N}: a first call's extra time over the next call's, median {np.median(extra):.0%}")
    for r in results:
        t = r["times"]
        if r["beta"] == 1000 and r["state"] in ("metastable", "collapsed") and "sdpa" in t:
            for which in ("auto first", "auto next"):
                speedup = t["sdpa"][0] / t[which][0]
                print(f"- N = {r['N']}, beta = 1000, {r['state']}: sdpa / {which} = {speedup:.1f}x")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--betas", type=float, nargs="+", default=[30.0, 1000.0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sdpa-max-N", type=int, default=16384, help="above: sdpa only for the targets")
    ap.add_argument("--fit", action="store_true", help="fit the cost constants on these states (print them)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(machine())
    print(f"- fused kernel: {compiled.status()}; cost constants: {kcosts.source()}; pid {os.getpid()}")
    if args.fit:
        sts = [
            calibrate.State(f"{s} N={N} beta={b:g}", state(s, N), af.worked_example(b))
            for N in args.N
            for s in STATES
            for b in args.betas
        ]
        sts += calibrate.states(())  # the dense kernels' dimension and per-call terms
        samples = calibrate.measure(sts, args.repeats, max_seconds=6.0)
        fitted = calibrate.fit(samples, kcosts.active())
        for s in samples:
            ratio = calibrate.predict(s, fitted) / s.seconds
            print(f"  {s.state:32s} {s.kernel:10s} {s.variant:9s} predicted / measured {ratio:6.2f}")
        print(repr(fitted))
        return
    summary(table(args))
    print(f"- load average {load():.1f} at the end")


if __name__ == "__main__":
    main()
