"""Calibrate the kernels' cost model on this machine and keep the constants for `kernel="auto"`:

    python -m attnflow.kernels.calibrate              # N = 1024 to 16384: a few minutes
    python -m attnflow.kernels.calibrate --full       # also N = 65536 (longer)
    python -m attnflow.kernels.calibrate --dry-run    # measure and print, store nothing
    python -m attnflow.kernels.calibrate --N 2048     # other sizes
    python -m attnflow.kernels.calibrate --torch      # the torch paths, as on a machine without a compiler

Times every kernel that runs here (the fused kernel's compiled core or its torch path, sdpa in both
dtypes, truncated, cluster; CPU seconds, one torch thread, the best of REPEATS calls, the kernels
interleaved on each state) on a fixed, seeded set of states: uniform, metastable (two antipodal von
Mises-Fisher clusters at +-u_1, kappa = 100), collapsed (kappa = 1e4) and terminal-like (half of the
tokens at +-u_1, half at +-v_1, V's top eigenvector, kappa = 300) clouds of the d = 3 worked example
at beta = 30 and 1000, plus uniform clouds at d = 6 and N = 1024 for the dense kernels' dimension
and per-call terms.  Then it fits the constants of costs.py by non-negative least squares relative
to each time (the cluster kernel phase by phase: plan, series, direct sums) and writes them to the
user cache, keyed by machine and torch version (costs.write, cache.py).  A kernel whose predicted
time exceeds --max-seconds on a state is not timed there.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from . import compiled, reuse
from . import costs as _costs
from .cluster import velocity_cluster
from .dense import velocity_sdpa
from .fused import variant, velocity_fused
from .truncated import velocity_truncated

REPEATS = 2
MAX_SECONDS = 20.0
BETAS = (30.0, 1000.0)


@dataclass(frozen=True)
class State:
    """One state to time the kernels on: a name, the cloud (N, d) and the attention."""

    name: str
    X: np.ndarray
    att: object
    kernels: tuple[str, ...] = ("fused", "sdpa", "sdpa32", "truncated", "cluster")


@dataclass
class Sample:
    """One kernel timed on one state: CPU seconds and the kernel's work counts (stats)."""

    kernel: str
    variant: str
    state: str
    M: int
    N: int
    d: int
    seconds: float
    stats: dict = field(default_factory=dict)


def two_clusters(N: int, mean: np.ndarray, kappa: float, seed: int) -> np.ndarray:
    """N tokens in two antipodal von Mises-Fisher clusters at +-mean (every other token flipped)."""
    from ..measures.sampling import sample_vmf

    X = sample_vmf(N, mean, kappa, seed=seed)
    X[::2] *= -1
    return X


def states(Ns: tuple[int, ...]) -> list[State]:
    """The calibration states (module docstring), seeded."""
    from ..attention import random_attention, worked_example
    from ..measures.sampling import sample_uniform

    spectrum = worked_example(1.0).spectrum()
    u1, v1 = spectrum.top.basis[:, 0], spectrum.v_top_real.basis[:, 0]
    out = []
    for N in Ns:
        clouds = {
            "uniform": sample_uniform(N, 3, seed=0),
            "metastable": two_clusters(N, u1, 100.0, seed=1),
            "collapsed": two_clusters(N, u1, 1e4, seed=2),
            "terminal": np.vstack(
                [two_clusters(N // 2, u1, 300.0, 3), two_clusters(N - N // 2, v1, 300.0, 4)]
            ),
        }
        for name, X in clouds.items():
            out += [State(f"{name} N={N} beta={b:g}", X, worked_example(b)) for b in BETAS]
    dense = ("fused", "sdpa", "sdpa32")
    out.append(State("uniform N=1024 beta=30", sample_uniform(1024, 3, seed=5), worked_example(30.0), dense))
    att6 = random_attention(6, seed=6, beta=30.0)
    out.append(State("uniform d=6 N=4096 beta=30", sample_uniform(4096, 6, seed=6), att6, dense))
    return out


def _run(kernel: str, X: torch.Tensor, att) -> tuple[float, dict]:
    """CPU seconds and stats of one call (nothing reused from an earlier one)."""
    kernels: dict[str, Callable[..., torch.Tensor]] = {
        "fused": velocity_fused,
        "sdpa": velocity_sdpa,
        "sdpa32": velocity_sdpa,
        "truncated": velocity_truncated,
        "cluster": velocity_cluster,
    }
    fn = kernels[kernel]
    Xk = X.to(torch.float32) if kernel == "sdpa32" else X
    stats: dict = {}
    reuse.clear()
    c0 = time.process_time()
    fn(Xk, att) if kernel.startswith("sdpa") else fn(Xk, att, stats=stats)
    return time.process_time() - c0, stats


def _variant_of(kernel: str, d: int) -> str:
    if kernel.startswith("sdpa"):
        return "float32" if kernel == "sdpa32" else "float64"
    return variant(d)


def _predicted(kernel: str, s: State) -> float:
    """A rough time from the active constants, to skip what would take too long."""
    from .auto import dense_cost

    N, d = s.X.shape
    if kernel in ("fused", "sdpa", "sdpa32"):
        name = "fused" if kernel == "fused" else "sdpa"
        return dense_cost(name, 1, N, d, _variant_of(kernel, d))
    if kernel == "cluster" and s.name.startswith("uniform") and float(s.att.beta) < 100:  # type: ignore[attr-defined]
        return dense_cost("fused", 1, N, d, _variant_of("fused", d)) * 8  # direct sums everywhere
    return 0.0


def measure(all_states: list[State], repeats: int = REPEATS, max_seconds: float = MAX_SECONDS, log=print):
    """Time the kernels on every state (interleaved, best of `repeats`): a list of Samples."""
    samples = []
    for s in all_states:
        X = torch.as_tensor(s.X)[None]
        N, d = s.X.shape
        kernels = [k for k in s.kernels if _predicted(k, s) <= max_seconds]
        for k in kernels:  # warm up: imports, the compiled core, caches
            _run(k, X[:, :256], s.att)
        best: dict[str, tuple[float, dict]] = {}
        for r in range(repeats):
            for k in kernels[r % len(kernels) :] + kernels[: r % len(kernels)]:
                t, st = _run(k, X, s.att)
                if k not in best or t < best[k][0]:
                    best[k] = (t, st)
        for k, (t, st) in best.items():
            samples.append(Sample(k.removesuffix("32"), _variant_of(k, d), s.name, 1, N, d, t, st))
            log(f"  {s.name:32s} {k:10s} {t:9.4f} s")
    return samples


def nnls(rows: list[list[float]], seconds: list[float]) -> np.ndarray:
    """Non-negative least squares relative to each time (every sample weighs alike)."""
    from scipy.optimize import nnls as solve

    t = np.asarray(seconds, float)
    return solve(np.asarray(rows, float) / t[:, None], np.ones_like(t))[0]


def _series_rows(st: dict, d: int) -> float:
    p = st["order"]
    return math.comb(p + 1 + d, d) * st["moment_rows"] + math.comb(p + d, d) * (d + 1) * st["eval_rows"]


def _fit_cluster(samples: list[Sample]) -> dict[str, float]:
    """The cluster kernel's constants, phase by phase; `call`: the median remainder per call."""
    plan = nnls(
        [
            [
                1.0,
                s.stats["tokens"],
                s.stats["cells"],
                s.stats["expanded_pairs"] + s.stats["direct_cell_pairs"],
            ]
            for s in samples
        ],
        [s.stats["plan_s"] for s in samples],
    )
    ser = nnls(
        [[_series_rows(s.stats, s.d) + 1.0, s.stats["expanded_pairs"]] for s in samples],
        [max(s.stats["expand_s"], 1e-6) for s in samples],
    )
    dirs = nnls(
        [
            [s.stats["direct_pairs"] + 1.0, s.stats["direct_keys"], s.stats["direct_cell_pairs"]]
            for s in samples
        ],
        [max(s.stats["direct_s"], 1e-6) for s in samples],
    )
    c = {
        "token": plan[1],
        "cell": plan[2],
        "cell_pair": plan[3],
        "series": ser[0],
        "expanded_pair": ser[1],
        "direct_pair": dirs[0],
        "direct_key": dirs[1],
        "direct_cell_pair": dirs[2],
    }
    from .auto import cluster_cost

    rest = [s.seconds - cluster_cost(s.stats, s.d, constants={**c, "call": 0.0}) for s in samples]
    return {"call": max(0.0, float(np.median(rest))), **{k: float(v) for k, v in c.items()}}


def fit(samples: list[Sample], base: _costs.Costs | None = None) -> _costs.Costs:
    """Constants of costs.py fitted on the samples; the variants not measured keep `base`'s."""
    out = {k: {v: dict(c) for v, c in variants.items()} for k, variants in (base or _costs.DEFAULTS).items()}
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.kernel, s.variant), []).append(s)
    for (kernel, var), group in groups.items():
        if kernel in ("fused", "sdpa"):
            c = nnls([[s.M, s.M * s.N**2, s.M * s.N**2 * s.d] for s in group], [s.seconds for s in group])
            out[kernel][var] = dict(zip(("call", "pair", "pair_d"), map(float, c), strict=True))
        elif kernel == "truncated":
            rows = [[s.M, s.M * s.N, s.stats["pairs"], s.stats["keys"]] for s in group]
            c = nnls(rows, [s.seconds for s in group])
            out[kernel][var] = dict(zip(("call", "token", "pair", "key"), map(float, c), strict=True))
        else:
            out[kernel][var] = _fit_cluster(group)
    return _costs.check(out)


def predict(s: Sample, c: _costs.Costs) -> float:
    """The fitted model's seconds for a sample."""
    from .auto import cluster_cost, dense_cost, truncated_cost

    terms = c[s.kernel][s.variant]
    if s.kernel in ("fused", "sdpa"):
        return dense_cost(s.kernel, s.M, s.N, s.d, s.variant, terms)
    if s.kernel == "truncated":
        return truncated_cost(s.stats, s.M, s.N, s.variant, terms)
    return cluster_cost(s.stats, s.d, s.variant, clouds=s.M, constants=terms)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m attnflow.kernels.calibrate", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--full", action="store_true", help="also N = 65536")
    ap.add_argument("--N", type=int, nargs="+", default=None, help="the sizes (default 4096 16384)")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="calls per kernel and state (best kept)")
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="skip longer predicted calls")
    ap.add_argument("--dry-run", action="store_true", help="print the constants, store nothing")
    ap.add_argument("--torch", action="store_true", help="the torch paths (as without a C compiler)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"calibrating on {compiled.status()}; constants now from {_costs.source()}")
    Ns = tuple(args.N) if args.N else (4096, 16384, 65536) if args.full else (4096, 16384)
    with compiled.disabled() if args.torch else contextlib.nullcontext():
        samples = measure(states(Ns), args.repeats, args.max_seconds)
    c = fit(samples, _costs.active())
    print("\npredicted / measured:")
    for s in samples:
        print(f"  {s.state:32s} {s.kernel:10s} {s.variant:9s} {predict(s, c) / s.seconds:6.2f}")
    print("\nconstants:")
    for kernel, variants in c.items():
        for var, terms in variants.items():
            print(f"  {kernel}.{var}: " + ", ".join(f"{k} {v:.3g}" for k, v in terms.items()))
    if not args.dry_run:
        fit_info = {"samples": len(samples), "N": list(Ns), "repeats": args.repeats}
        print(f"\nwritten to {_costs.write(c, fit_info)}")


if __name__ == "__main__":
    main()
