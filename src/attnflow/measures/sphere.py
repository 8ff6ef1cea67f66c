"""Points of the unit sphere S^{d-1}: every name of `attnflow.measures` in one module (sampling,
quadrature nodes and weights, densities, geometry), where the docs and attnflow 0.1's
`attnflow.sphere` find them. Each lives in its own module of `attnflow.measures`."""

from .densities import check_vmf, uniform_density, vmf_density, vmf_normaliser
from .geometry import chordal_distance, geodesic_distance, normalize, spacing, sphere_area, tangent_project
from .quadrature import (
    CIRCLE_OFFSET,
    QUADRATURE_DIMS,
    circle_nodes,
    fibonacci_sphere,
    graded_circle_quadrature,
    quadrature,
)
from .sampling import sample_uniform, sample_vmf

__all__ = [
    "CIRCLE_OFFSET",
    "QUADRATURE_DIMS",
    "check_vmf",
    "chordal_distance",
    "circle_nodes",
    "fibonacci_sphere",
    "geodesic_distance",
    "graded_circle_quadrature",
    "normalize",
    "quadrature",
    "sample_uniform",
    "sample_vmf",
    "spacing",
    "sphere_area",
    "tangent_project",
    "uniform_density",
    "vmf_density",
    "vmf_normaliser",
]
