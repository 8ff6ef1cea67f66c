"""attnflow: token dynamics of deep self-attention on the sphere.

The public API is re-exported here lazily: `import attnflow` imports nothing heavy (no torch, no
POT); each name loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "Attention": "model",
    "Spectrum": "model",
    "attention_from_A": "model",
    "worked_example": "model",
    "random_attention": "model",
    "load_attention": "model",
    "sample_uniform": "sphere",
    "sample_vmf": "sphere",
    "fibonacci_sphere": "sphere",
    "circle_nodes": "sphere",
    "quadrature": "sphere",
    "vmf_density": "sphere",
    "graded_circle_quadrature": "sphere",
    "locate_separatrices": "separatrix",
    "mean_field_quadrature": "separatrix",
    "SeparatrixSearch": "separatrix",
    "velocity": "kernels",
    "simulate": "integrate",
    "Trajectory": "trajectory",
    "simulate_zero_temperature": "zero_temperature",
    "project": "zero_temperature",
    "reference_w2": "zero_temperature_reference",
    "ReferenceW2": "zero_temperature_reference",
    "local_rates": "zero_temperature_reference",
    "check_assumptions": "assumptions",
    "AssumptionReport": "assumptions",
    "reference_rates": "assumptions",
    "subspace_angle": "assumptions",
    "w2": "wasserstein",
    "W2Info": "wasserstein",
    "w2_to_target": "wasserstein",
    "coupling_bound": "metrics",
    "subspace_mass": "metrics",
    "lyapunov": "metrics",
    "resolution_ratio": "metrics",
    "t_star": "fits",
    "fit_t_star": "fits",
    "fit_min_w2": "fits",
    "fit_decay_rate": "fits",
    "theorem_bound": "fits",
    "fit_theorem_bound": "fits",
    "terminal_time": "fits",
    "load_config": "experiments",
    "run_experiment": "experiments",
    "sweep": "sweeps",
    "open_sweep": "sweeps",
}

__all__ = [*sorted(_API), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
