"""Helpers used by several experiments: initial clouds, time grids, token subsets, attrs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._threads import torch_threads
from ..progress import Reporter

__all__ = [
    "base_attrs",
    "finite_or_none",
    "fit_or_reason",
    "initial_cloud",
    "integrator_label",
    "simulate_kwargs",
    "time_grid",
    "token_subset",
    "torch_threads",  # the thread policy's home is attnflow._threads
    "unit_float64",
]


def initial_cloud(init: str, N: int, d: int, seed: int) -> np.ndarray:
    """rho_0 as N tokens (N, d): "uniform" (i.i.d., seeded) or "fibonacci" (quasi-uniform, d = 3)."""
    from ..sphere import fibonacci_sphere, sample_uniform

    if init == "uniform":
        return sample_uniform(N, d, seed=seed)
    if init == "fibonacci":
        if d != 3:
            raise ValueError(f"init='fibonacci' is the Fibonacci lattice on S^2 and needs d = 3, got d = {d}")
        return fibonacci_sphere(N)
    raise ValueError(f"init must be 'uniform' or 'fibonacci', got {init!r}")


def time_grid(t_max: float, dt_save: float) -> np.ndarray:
    """Saved times 0, dt_save, ..., t_max (t_max included up to rounding)."""
    n = math.floor(t_max / dt_save + 1e-9)
    t = dt_save * np.arange(n + 1)
    if t_max - t[-1] > 1e-9 * t_max:
        t = np.append(t, t_max)
    return t


def token_subset(N: int, n_keep: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded subset of min(n_keep, N) tokens, kept for snapshots."""
    n = min(n_keep, N)
    rng = np.random.default_rng([seed, 1])
    return np.sort(rng.choice(N, size=n, replace=False))


def simulate_kwargs(config: Any) -> dict[str, Any]:
    """Integrator settings of a SimulationConfig for `attnflow.integrate.simulate` (the tolerances go
    in `options`, for the adaptive method only)."""
    adaptive = config.integrator == "adaptive"
    return {
        "method": config.integrator,
        "dt": config.dt,
        "kernel": config.kernel,
        "dtype": config.dtype,
        "options": {"rtol": config.rtol, "atol": config.atol} if adaptive else None,
        "threads": config.threads,
    }


def unit_float64(x: np.ndarray) -> np.ndarray:
    """States of a trajectory as float64 unit rows (a float32 run's rows are unit to 6e-8 only)."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def integrator_label(config: Any) -> str:
    if config.integrator == "adaptive":
        return f"adaptive Dormand-Prince 5(4), rtol={config.rtol:g}, atol={config.atol:g}"
    return f"{config.integrator}, dt={config.dt:g}"


def base_attrs(config: Any, reporter: Reporter, timings: dict[str, float], **extra: Any) -> dict:
    """attrs every result carries: experiment, full config, provenance, seed, timings, warnings."""
    from ..io import provenance, to_json

    attrs = {
        "experiment": config.experiment,
        "config": to_json(config.model_dump()),
        "provenance": to_json(provenance()),
        "seed": int(config.seed),
        "timings": to_json(timings),
        "warnings": to_json(reporter.warnings),
    }
    for key, value in extra.items():
        attrs[key] = to_json(value) if isinstance(value, (dict, list)) else value
    return attrs


def fit_or_reason(fn, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """fn(*args).to_dict(), or {"error": why} when the fit cannot be made (too few points...)."""
    try:
        return fn(*args, **kwargs).to_dict()
    except (ValueError, np.linalg.LinAlgError) as err:
        return {"error": str(err)}


def finite_or_none(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
