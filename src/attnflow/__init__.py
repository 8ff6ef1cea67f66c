"""attnflow: token dynamics of deep self-attention on the sphere.

The public API is re-exported here lazily: `import attnflow` imports nothing heavy (no torch, no
POT); each name loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_API = {
    "Attention": "attention",
    "Spectrum": "attention",
    "attention_from_A": "attention",
    "worked_example": "attention",
    "random_attention": "attention",
    "load_attention": "attention",
    "Dynamics": "flow",
    "Redraw": "flow",
    "padded_head": "flow",
    "sample_uniform": "measures.sampling",
    "sample_vmf": "measures.sampling",
    "fibonacci_sphere": "measures.quadrature",
    "circle_nodes": "measures.quadrature",
    "quadrature": "measures.quadrature",
    "vmf_density": "measures.densities",
    "graded_circle_quadrature": "measures.quadrature",
    "graded_sphere_quadrature": "measures.quadrature",
    "locate_separatrices": "dynamics.separatrix",
    "mean_field_quadrature": "dynamics.separatrix",
    "SeparatrixSearch": "dynamics.separatrix",
    "SeparatrixSettings": "dynamics.separatrix",
    "locate_sources": "dynamics.sources",
    "sphere_quadrature": "dynamics.sources",
    "SourceSearch": "dynamics.sources",
    "SourceSettings": "dynamics.sources",
    "velocity": "kernels",
    "simulate": "dynamics.integrate",
    "Trajectory": "dynamics.trajectory",
    "simulate_zero_temperature": "dynamics.zero_temperature",
    "project": "dynamics.zero_temperature",
    "reference_w2": "dynamics.reference",
    "ReferenceW2": "dynamics.reference",
    "local_rates": "dynamics.rates",
    "check_assumptions": "science.assumptions",
    "AssumptionReport": "science.assumptions",
    "reference_rates": "science.assumptions",
    "subspace_angle": "science.assumptions",
    "w2": "transport.wasserstein",
    "W2Info": "transport.wasserstein",
    "w2_to_target": "transport.wasserstein",
    "coupling_bound": "science.metrics",
    "subspace_mass": "science.metrics",
    "lyapunov": "science.metrics",
    "resolution_ratio": "science.metrics",
    "count_clusters": "science.clusters",
    "nearest_atoms_w2": "science.clusters",
    "predict_clusters": "science.linearisation",
    "interaction_energy": "science.energy",
    "ClusterPrediction": "science.linearisation",
    "t_star": "science.fits",
    "fit_t_star": "science.fits",
    "fit_min_w2": "science.fits",
    "fit_decay_rate": "science.fits",
    "theorem_bound": "science.bound",
    "fit_theorem_bound": "science.bound",
    "terminal_time": "science.fits",
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
