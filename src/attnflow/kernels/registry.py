"""The kernels' registry: one `KernelSpec` per kernel, everything the package knows about it.

A spec names the kernel, its function (loaded on first use), whether it refuses beta = inf (every
kernel but the zero-temperature one), whether it computes a `Dynamics` beyond the single head, and
its cost model (`CostModel`, or None: `kernel="auto"` never picks it).  `KERNELS`, the config's
kernel choices, the cost constants (costs.py), `auto`'s candidates and the calibration command are
all read from here; adding a kernel is one `KernelSpec` in SPECS (or `register(spec)` at run time).

This module imports nothing heavy: the kernels (and torch) load on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from . import costs as _costs
from . import pricing as _p

if TYPE_CHECKING:
    import torch

Constants = dict[str, dict[str, float]]  # variant -> term -> CPU seconds


@dataclass(frozen=True)
class CostModel:
    """Predicted CPU seconds (one thread) of one evaluation of a kernel.

    terms: the names of its constants; defaults: variant -> term -> seconds, the shipped constants
    (their keys are the variants); by: what picks the variant, "backend" (where the fused kernel's
    compiled core runs: "compiled", else "torch") or "dtype" ("float64", "float32");
    seconds(work, constants): the model, work a mapping with M, N, d (and `clouds`) and the kernel's
    own counts; features(work): the coefficients of the terms (seconds is linear in the constants),
    for the calibration's fit, unless `fit(samples) -> constants` fits it otherwise;
    price(pricing) -> seconds on a state (pricing.Pricing); bound(pricing): None where `price` is a
    closed form (priced on every state, and below auto.MIN_N tokens), else a lower bound from the
    sampled state: the kernel is then priced only where its bound can gain (auto.py), in
    increasing order of the bounds, those with late(pricing) true last; max_d: the largest d where
    it is priced; stats: the kernel fills a `stats` dict with its counts (the calibration reads it).
    """

    terms: tuple[str, ...]
    defaults: Mapping[str, Mapping[str, float]]
    seconds: Callable[[_p.Work, Mapping[str, float]], float]
    price: Callable[[_p.Pricing], float]
    by: str = "backend"
    features: Callable[[_p.Work], tuple[float, ...]] | None = None
    fit: Callable[[Sequence[_p.Timed]], dict[str, float]] | None = None
    bound: Callable[[_p.Pricing], float] | None = None
    late: Callable[[_p.Pricing], bool] | None = None
    max_d: int | None = None
    stats: bool = False

    def __post_init__(self) -> None:
        if self.by not in ("backend", "dtype"):
            raise ValueError(f"CostModel.by must be 'backend' or 'dtype', got {self.by!r}")
        for variant, terms in self.defaults.items():
            if set(terms) != set(self.terms):
                raise ValueError(f"the defaults of variant {variant!r} must give the terms {self.terms}")

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.defaults)


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its name, its function (a callable, or "module:function" under attnflow.kernels,
    imported on first use), a one-line summary (the kernels' docstring table), whether it refuses
    beta = inf (finite_only), whether it computes a Dynamics beyond the single head (dynamics:
    variants.velocity_model with impl=name) and its cost model (None: never picked by "auto")."""

    name: str
    function: Callable[..., torch.Tensor] | str
    summary: str = ""
    finite_only: bool = True
    dynamics: bool = False
    cost: CostModel | None = field(default=None, compare=False)

    def load(self) -> Callable[..., torch.Tensor]:
        """The kernel function."""
        if callable(self.function):
            return self.function
        module, func = self.function.split(":")
        return cast(
            "Callable[..., torch.Tensor]", getattr(importlib.import_module(f".{module}", __package__), func)
        )


_DENSE = ("call", "pair", "pair_d")
_CLUSTER = (
    "call", "token", "cell", "cell_pair", "direct_pair", "direct_key", "direct_cell_pair", "series",
    "expanded_pair",
)  # fmt: skip

# The shipped constants were fitted on an Intel Xeon (Sapphire Rapids class, AVX-512, 2 logical
# cores, shared with other jobs: load 4 to 7), torch 2.13.0+cpu, one torch thread, by
# `benchmarks/auto.py --fit` (the calibration command's fit on the 24 cases of docs/benchmarks.md,
# "Choosing the kernel": uniform, metastable, collapsed and terminal-phase clouds of the d = 3 worked
# example, N = 4096 to 65536, beta = 30 and 1000, plus uniform clouds at N = 1024 and at d = 6); the
# "torch" variants by `python -m attnflow.kernels.calibrate --torch` on the same machine.
# The order of SPECS is the order of the kernel choices, and breaks ties of "auto".
SPECS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "fused", "fused:velocity_fused",
        "every pair, softmax fused with its sums (compiled core, or torch) (fused.py)",
        dynamics=True,
        cost=CostModel(
            _DENSE,
            {
                "compiled": {"call": 4.70e-4, "pair": 1.94e-10, "pair_d": 1.65e-10},
                "torch": {"call": 4.48e-4, "pair": 1.60e-9, "pair_d": 3.75e-11},
            },
            _p.dense_seconds, _p.fused_price, features=_p.dense_features, stats=True,
        ),
    ),
    KernelSpec(
        "sdpa", "dense:velocity_sdpa",
        "fused torch scaled_dot_product_attention, memory O(N d)       (dense.py)",
        dynamics=True,
        cost=CostModel(
            _DENSE,
            {
                "float64": {"call": 2.93e-4, "pair": 1.84e-9, "pair_d": 3.41e-11},
                "float32": {"call": 6.09e-4, "pair": 7.70e-10, "pair_d": 2.51e-11},
            },
            _p.dense_seconds, _p.sdpa_price, by="dtype", features=_p.dense_features,
        ),
    ),
    KernelSpec(
        "blocked", "dense:velocity_blocked",
        "explicit max-subtracted softmax over blocks of queries         (dense.py)",
        dynamics=True,
    ),
    KernelSpec(
        "zero", "zero:velocity_zero",
        "zero-temperature field P_x^perp A x / |B^T x| (weights ignored) (zero.py)",
        finite_only=False,
    ),
    KernelSpec(
        "truncated", "truncated:velocity_truncated",
        "low-temperature kernel, keys near the row maximum only          (truncated/)",
        cost=CostModel(
            ("call", "token", "pair", "key"),
            {
                "compiled": {"call": 1.16e-3, "token": 1.12e-6, "pair": 5.65e-10, "key": 9.04e-8},
                "torch": {"call": 2.02e-3, "token": 1.46e-6, "pair": 1.52e-9, "key": 1.41e-7},
            },
            _p.truncated_seconds, _p.truncated_price, features=_p.truncated_features,
            bound=_p.truncated_bound, late=_p.truncated_late, max_d=_p.TRUNCATED_MAX_D, stats=True,
        ),
    ),
    KernelSpec(
        "cluster", "cluster:velocity_cluster",
        "collapsed clusters: certified series between cells of tokens    (cluster/, cells.py)",
        cost=CostModel(
            _CLUSTER,
            {
                "compiled": {
                    "call": 4.03e-3, "token": 9.83e-7, "cell": 6.92e-6, "cell_pair": 2.58e-7,
                    "direct_pair": 6.84e-10, "direct_key": 2.92e-8, "direct_cell_pair": 5.03e-8,
                    "series": 1.31e-10, "expanded_pair": 2.60e-5,
                },
                "torch": {
                    "call": 8.56e-3, "token": 8.71e-7, "cell": 7.42e-6, "cell_pair": 2.60e-7,
                    "direct_pair": 0.0, "direct_key": 1.50e-7, "direct_cell_pair": 0.0,
                    "series": 1.43e-10, "expanded_pair": 1.51e-5,
                },
            },
            _p.cluster_seconds, _p.cluster_price, fit=_p.cluster_fit, bound=_p.cluster_bound,
            max_d=_p.CLUSTER_MAX_D, stats=True,
        ),
    ),
)  # fmt: skip

_registry: dict[str, KernelSpec] = {s.name: s for s in SPECS}
_version = [0]  # bumped by register / unregister: kept decisions and constants are per version


def _changed() -> None:
    """Tell costs.py the cost models now registered (it never imports this module)."""
    _version[0] += 1
    _costs.set_models({s.name: (s.cost.terms, s.cost.defaults) for s in candidates() if s.cost is not None})


def specs() -> tuple[KernelSpec, ...]:
    """Every registered kernel, in order."""
    return tuple(_registry.values())


def names() -> tuple[str, ...]:
    return tuple(_registry)


def get(name: str) -> KernelSpec:
    """The spec of kernel `name`; ValueError naming the kernels where there is none."""
    try:
        return _registry[name]
    except (KeyError, TypeError):
        raise ValueError(f"kernel must be one of {['auto', *_registry]}, got {name!r}") from None


def candidates() -> tuple[KernelSpec, ...]:
    """The kernels that "auto" may pick: those with a cost model, in order."""
    return tuple(s for s in _registry.values() if s.cost is not None)


def version() -> int:
    return _version[0]


def register(spec: KernelSpec) -> None:
    """Add a kernel (after the others); ValueError where its name is taken or not an identifier."""
    if not isinstance(spec, KernelSpec):
        raise TypeError(f"register takes a KernelSpec, got {type(spec).__name__}")
    if not spec.name.isidentifier() or spec.name == "auto" or spec.name in _registry:
        raise ValueError(f"kernel name {spec.name!r} is taken or not an identifier")
    _registry[spec.name] = spec
    _changed()


def unregister(name: str) -> None:
    """Remove a kernel added by `register` (the shipped ones stay)."""
    if name in {s.name for s in SPECS} or name not in _registry:
        raise ValueError(f"{name!r} is not a kernel added by register")
    del _registry[name]
    _changed()


_changed()


@contextmanager
def registered(spec: KernelSpec) -> Iterator[KernelSpec]:
    """`register(spec)` for the duration of a with-block."""
    register(spec)
    try:
        yield spec
    finally:
        unregister(spec.name)


def table() -> str:
    """The kernels' docstring table: one line per kernel, then "auto"."""
    rows = [(s.name, s.summary) for s in specs()] + [("auto", "chosen per state by `auto.choose_kernel`")]
    return "\n".join("    " + f'"{name}"'.ljust(12) + " " + summary for name, summary in rows)


__all__ = [
    "SPECS", "CostModel", "KernelSpec", "candidates", "get", "names", "register", "registered",
    "specs", "table", "unregister", "version",
]  # fmt: skip
