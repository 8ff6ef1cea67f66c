"""Calibrate the kernels' cost model on this machine and keep the constants for `kernel="auto"`:

    python -m attnflow.kernels.calibrate              # N = 1024 to 16384: a few minutes
    python -m attnflow.kernels.calibrate --full       # also N = 65536 (longer)
    python -m attnflow.kernels.calibrate --dry-run    # measure and print, store nothing
    python -m attnflow.kernels.calibrate --N 2048     # other sizes
    python -m attnflow.kernels.calibrate --torch      # the torch paths, as on a machine without a compiler

Times every kernel with a cost model (registry.candidates: the fused kernel's compiled core or its
torch path, sdpa in both dtypes, truncated, cluster; a cost model by dtype in each; CPU seconds, one
torch thread, the best of REPEATS calls, the kernels interleaved on each state) on a fixed, seeded
set of states: uniform, metastable (two antipodal von Mises-Fisher clusters at +-u_1, kappa = 100),
collapsed (kappa = 1e4) and terminal-like (half of the tokens at +-u_1, half at +-v_1, V's top
eigenvector, kappa = 300) clouds of the d = 3 worked example at beta = 30 and 1000, plus uniform
clouds at d = 6 and N = 1024 for the dense kernels' dimension and per-call terms (the kernels priced
in closed form only). Then it fits each cost model's constants by non-negative least squares
relative to each time, on its features (the cluster kernel's own fit: phase by phase, plan, series,
direct sums) and writes them to the user cache, keyed by machine and torch version (costs.write,
cache.py). A kernel whose predicted time exceeds --max-seconds on a state is not timed there.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from . import compiled, registry, reuse
from . import costs as _costs
from .common import Stats
from .fused import variant
from .pricing import Work, nnls
from .truncated import forget_geometry

if TYPE_CHECKING:
    from ..attention import Attention

REPEATS = 2
MAX_SECONDS = 20.0
BETAS = (30.0, 1000.0)


@dataclass(frozen=True)
class State:
    """One state to time the kernels on: a name, the cloud (N, d), the attention, and whether only
    the kernels priced in closed form are timed on it."""

    name: str
    X: np.ndarray
    att: Attention
    closed_only: bool = False


@dataclass(frozen=True)
class Run:
    """One kernel timed in one variant of its cost model, on input of `dtype`."""

    kernel: str
    variant: str
    dtype: str = "float64"


def runs(d: int, closed_only: bool = False) -> list[Run]:
    """What is timed in dimension d: every candidate kernel (registry.candidates), a cost model by
    dtype in each of its dtypes, one by backend on the backend that runs here."""
    out = []
    for spec in registry.candidates():
        cost = spec.cost
        if cost is None or (closed_only and cost.bound is not None):
            continue
        if cost.by == "dtype":
            out += [Run(spec.name, v, v) for v in cost.variants]
        else:
            out.append(Run(spec.name, variant(d)))
    return out


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
    stats: Stats = field(default_factory=dict)


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
    out.append(State("uniform N=1024 beta=30", sample_uniform(1024, 3, seed=5), worked_example(30.0), True))
    att6 = random_attention(6, seed=6, beta=30.0)
    out.append(State("uniform d=6 N=4096 beta=30", sample_uniform(4096, 6, seed=6), att6, True))
    return out


def _run(run: Run, X: torch.Tensor, att: Attention) -> tuple[float, Stats]:
    """CPU seconds and stats of one call (nothing reused from an earlier one: no plan, no kept
    geometry of the truncated kernel)."""
    spec = registry.get(run.kernel)
    fn = spec.load()
    Xk = X.to(getattr(torch, run.dtype))
    stats: Stats = {}
    reuse.clear()
    forget_geometry()
    c0 = time.process_time()
    fn(Xk, att, stats=stats) if spec.cost is not None and spec.cost.stats else fn(Xk, att)
    return time.process_time() - c0, stats


def _predicted(run: Run, s: State) -> float:
    """A rough time from the active constants, to skip what would take too long (0: not known)."""
    N, d = s.X.shape
    cost = registry.get(run.kernel).cost
    table = _costs.active()
    if cost is not None and cost.bound is None:
        return cost.seconds({"M": 1, "N": N, "d": d, "clouds": 1}, table[run.kernel][run.variant])
    if run.kernel == "cluster" and s.name.startswith("uniform") and float(s.att.beta) < 100:
        fused = registry.get("fused").cost
        assert fused is not None
        work = {"M": 1, "N": N, "d": d, "clouds": 1}
        return fused.seconds(work, table["fused"][variant(d)]) * 8  # direct sums everywhere
    return 0.0


def measure(
    all_states: list[State],
    repeats: int = REPEATS,
    max_seconds: float = MAX_SECONDS,
    log: Callable[[str], object] = print,
) -> list[Sample]:
    """Time the kernels on every state (interleaved, best of `repeats`): a list of Samples."""
    samples: list[Sample] = []
    for s in all_states:
        X = torch.as_tensor(s.X)[None]
        N, d = s.X.shape
        kernels = [k for k in runs(d, s.closed_only) if _predicted(k, s) <= max_seconds]
        for k in kernels:  # warm up: imports, the compiled core, caches
            _run(k, X[:, :256], s.att)
        best: dict[Run, tuple[float, Stats]] = {}
        for r in range(repeats):
            for k in kernels[r % len(kernels) :] + kernels[: r % len(kernels)]:
                t, st = _run(k, X, s.att)
                if k not in best or t < best[k][0]:
                    best[k] = (t, st)
        for k, (t, st) in best.items():
            samples.append(Sample(k.kernel, k.variant, s.name, 1, N, d, t, st))
            log(f"  {s.name:32s} {k.kernel:10s} {k.variant:9s} {t:9.4f} s")
    return samples


def work(s: Sample) -> Work:
    """A sample's work, as the cost models read it: M, N, d, clouds and the kernel's counts."""
    return {**s.stats, "M": s.M, "N": s.N, "d": s.d, "clouds": s.M}


def fit(samples: list[Sample], base: _costs.Costs | None = None) -> _costs.Costs:
    """Each cost model's constants fitted on its samples (its `fit`, else non-negative least squares
    on its `features`); the variants not measured keep `base`'s (default: the shipped constants)."""
    base = _costs.defaults() if base is None else base
    out = {k: {v: dict(c) for v, c in variants.items()} for k, variants in base.items()}
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.kernel, s.variant), []).append(s)
    for (kernel, var), group in groups.items():
        cost = registry.get(kernel).cost
        if cost is None:
            raise ValueError(f"kernel {kernel!r} has no cost model to fit")
        if cost.fit is not None:
            out.setdefault(kernel, {})[var] = cost.fit(group)
            continue
        if cost.features is None:
            raise ValueError(f"the cost model of {kernel!r} has neither features nor a fit")
        c = nnls([list(cost.features(work(s))) for s in group], [s.seconds for s in group])
        out.setdefault(kernel, {})[var] = dict(zip(cost.terms, map(float, c), strict=True))
    return _costs.check(out)


def predict(s: Sample, c: _costs.Costs) -> float:
    """The fitted model's seconds for a sample."""
    cost = registry.get(s.kernel).cost
    assert cost is not None
    return cost.seconds(work(s), c[s.kernel][s.variant])


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
