"""Wall time of attnflow.w2 on its paths; prints a Markdown table.

    python benchmarks/w2.py            # the default sizes (about a minute on one core)
    python benchmarks/w2.py --quick    # smaller sizes, a smoke test

Uniform clouds on S^2 (d = 3), chordal cost. Times are the best of `repeat` runs, input checks
included; the first POT call pays `import ot` (timed separately).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from attnflow.measures.sampling import sample_uniform
from attnflow.transport.wasserstein import w2


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    big = 10**5 if args.quick else 10**6
    general = (250, 500) if args.quick else (500, 1000, 2000, 4000)
    rows: list[tuple[str, str, float, float, str]] = []

    start = time.perf_counter()
    import ot  # noqa: F401  (loaded once so that later rows time the solver only)

    rows.append(("import ot", "-", time.perf_counter() - start, float("nan"), "once per process"))

    X = sample_uniform(big, 3, seed=0)
    u = np.array([0.0, 0.0, 1.0])
    poles = np.array([u, -u])
    b1 = float(np.mean(X @ u > 0))
    PiX = np.where((X @ u > 0)[:, None], u, -u)  # Pi_# rho_0 as a full cloud of N rows
    for label, fn in [
        ("two atoms, given (k = 2 sort)", lambda: w2(X, poles, b=[b1, 1 - b1], log=True)),
        ("two atoms, detected in N rows", lambda: w2(X, PiX, log=True)),
    ]:
        t, (value, info) = best_time(fn, args.repeat)
        rows.append((label, f"N = {big}", t, value, info.method))

    for k in (3, 8):
        atoms = sample_uniform(k, 3, seed=1)
        for n in (10**4, big):
            t, (value, info) = best_time(lambda n=n, atoms=atoms: w2(X[:n], atoms, log=True), 1)
            how = "whole N x k simplex" if n <= 20_000 else "simplex on a certified band"
            rows.append((f"{k} atoms", f"N = {n}", t, value, f"{info.method}: {how}"))

    for n in general:
        Y = sample_uniform(n, 3, seed=2)
        t, (value, info) = best_time(lambda n=n, Y=Y: w2(X[:n], Y, log=True), 1)
        rows.append(("exact, equal sizes", f"N = K = {n}", t, value, info.method))
        Z = Y[: n // 2]
        t, (value, info) = best_time(lambda n=n, Z=Z: w2(X[:n], Z, log=True), 1)
        rows.append(("exact, unequal sizes", f"N = {n}, K = {n // 2}", t, value, info.method))

    for n in (300, 1000) if not args.quick else (300,):
        Y = sample_uniform(n, 3, seed=3)
        exact = w2(X[:n], Y)
        t, (value, info) = best_time(lambda n=n, Y=Y: w2(X[:n], Y, method="sinkhorn", log=True), 1)
        note = f"reg {info.reg:.3g}, error {info.error:.2g} (exact {exact:.4f}), {info.n_iter} it"
        rows.append(("sinkhorn (debiased)", f"N = K = {n}", t, value, note))

    Y = sample_uniform(big, 3, seed=4)
    t, (value, info) = best_time(lambda: w2(X, Y, method="subsample", n_sub=1000, log=True), 1)
    note = f"n_sub 1000 x {info.repeats}, CI +-{info.error:.2g}, noise floor {info.noise_floor:.3f}"
    rows.append(("subsample", f"N = K = {big}", t, value, note))

    print(f"w2 benchmark, d = 3, chordal cost, numpy {np.__version__}, python {sys.version.split()[0]}\n")
    print("| case | size | time (s) | W2 | method / notes |")
    print("|---|---|---:|---:|---|")
    for case, size, t, value, note in rows:
        print(f"| {case} | {size} | {t:.3f} | {value:.6f} | {note} |")


if __name__ == "__main__":
    main()
