"""Helpers used by several experiments: time grids, token subsets, attrs, fits that may fail.

The integrator settings of a config are `attnflow.experiments.inputs.integration` (`simulate_kwargs`
and `integrator_label` here are its short forms for the experiments that take the config)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, SupportsFloat

import numpy as np
from numpy.typing import ArrayLike

from .._threads import torch_threads
from ..progress import Reporter
from .config import n_saved_times, time_grid

if TYPE_CHECKING:
    from ..attention import Attention
    from ..flow import Dynamics
    from .config import ExperimentConfig, SimulationConfig
    from .inputs import SimulateKeywords

__all__ = [
    "DataVariables",
    "base_attrs",
    "finite_or_none",
    "fit_or_reason",
    "integrator_label",
    "n_saved_times",
    "simulate_kwargs",
    "time_grid",
    "token_subset",
    "torch_threads",  # the thread policy's home is attnflow._threads
    "unit_float64",
    "warn_assumptions",
]


#: the data variables of a Dataset being built, name -> (dims, values), for `xarray.Dataset(...)`
DataVariables = dict[str, tuple[tuple[str, ...], ArrayLike]]


def token_subset(N: int, n_keep: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded subset of min(n_keep, N) tokens, kept for snapshots."""
    n = min(n_keep, N)
    rng = np.random.default_rng([seed, 1])
    return np.sort(rng.choice(N, size=n, replace=False))


def simulate_kwargs(config: SimulationConfig) -> SimulateKeywords:
    """`integration(config).kwargs()`: the keywords of `simulate` (attnflow.experiments.inputs)."""
    from .inputs import integration

    return integration(config).kwargs()


def restartable(model: Attention | Dynamics) -> bool:
    """Whether a run of `model` (an Attention or a Dynamics) can be integrated again from a saved
    state, to locate a time on its solution: an autonomous, noiseless flow (no Brownian path to
    replay, no weights redrawn in time) on the sphere (the experiments keep the directions of the
    states: pre- and peri-LN tokens lose their norms there)."""
    return (
        getattr(model, "noise", 0.0) == 0.0
        and getattr(model, "redraw", None) is None
        and getattr(model, "on_sphere", True)
    )


def unit_float64(x: np.ndarray) -> np.ndarray:
    """States of a trajectory as float64 unit rows (a float32 run's rows are unit to 6e-8 only)."""
    y = np.asarray(x, dtype=np.float64)
    unit: np.ndarray = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return unit


def integrator_label(config: SimulationConfig) -> str:
    """`integration(config).label`: the integrator in words (attnflow.experiments.inputs)."""
    from .inputs import integration

    return integration(config).label


def base_attrs(
    config: ExperimentConfig, reporter: Reporter, timings: dict[str, float], **extra: object
) -> dict[str, object]:
    """attrs every result carries: experiment, full config, provenance, seed, timings, warnings."""
    from ..io import provenance, to_json

    dump = config.model_dump()
    attrs: dict[str, object] = {
        "experiment": dump["experiment"],
        "config": to_json(dump),
        "provenance": to_json(provenance(threads_in_effect(config), _devices(extra.get("solver")))),
        "seed": int(config.seed),
        "timings": to_json(timings),
        "warnings": to_json(reporter.warnings),
    }
    for key, value in extra.items():
        attrs[key] = to_json(value) if isinstance(value, (dict, list)) else value
    return attrs


def threads_in_effect(config: ExperimentConfig) -> int | None:
    """The torch CPU threads a run of `config` computes with (`torch_threads(config.threads)`): the
    config's number, or torch's own for threads = 0 (None when the config has no `threads` or torch
    is not loaded)."""
    import sys

    n = getattr(config, "threads", None)
    if n:
        return int(n)
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if n == 0 and torch is not None else None


def _devices(solver: object) -> str:
    """Where the run computed: the devices its solver infos name ("cpu" when none does)."""
    infos = solver if isinstance(solver, list) else [solver] if isinstance(solver, dict) else []
    names = sorted({str(s["device"]) for s in infos if isinstance(s, dict) and s.get("device")})
    return ", ".join(names) or "cpu"


class Fitted(Protocol):
    """A fit that gives its numbers as a mapping (attnflow.science's results)."""

    def to_dict(self) -> Mapping[str, object]: ...


def fit_or_reason(fn: Callable[..., Fitted], *args: object, **kwargs: object) -> Mapping[str, object]:
    """fn(*args).to_dict(), or {"error": why} when the fit cannot be made (too few points...)."""
    try:
        return fn(*args, **kwargs).to_dict()
    except (ValueError, np.linalg.LinAlgError) as err:
        return {"error": str(err)}


def finite_or_none(x: SupportsFloat) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def warn_assumptions(att: Attention, reporter: Reporter) -> None:
    """A warning of the run when the weights fail the theorem's first assumption (B invertible, A
    symmetric, a spectral gap; docs/math.md "Assumptions of the theorem"), with its numbers: the run
    goes on, and its result says that the theorem does not apply to it."""
    from ..science.assumptions import FAILS, check_assumptions

    first = check_assumptions(att)[0]
    if first.status != FAILS:
        return
    sp = att.spectrum()
    message = f"the weights fail assumption 1 of the theorem ({first.name}): {first.reason}"
    if sp.mu2 is None and sp.multiplicity == att.d:
        message += (
            " The top eigenspace of A is all of R^d, so Pi is the identity and W2(rho_t, Pi_# rho_0) is "
            "W2(rho_t, rho_0): t* = 0 and min W2 = 0 say nothing about concentration."
        )
    reporter.warn(message + " The theorem says nothing about this run.")
