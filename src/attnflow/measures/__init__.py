"""Initial measures rho_0 on the sphere S^{d-1}, one module per concept::

    geometry     normalize, tangent_project, distances, sphere_area, spacing
    sampling     sample_uniform, sample_vmf (seeded i.i.d. points)
    quadrature   fibonacci_sphere, circle_nodes, quadrature (nodes with weights for a density),
                 graded_circle_quadrature (nodes on S^1 graded toward given angles),
                 graded_sphere_quadrature (on S^2 toward two poles and a curve through them)
    densities    densities w.r.t. the uniform law, up to a constant and normalised (uniform, vMF)
    registry     MEASURES (the densities by name) and DISCRETISATIONS (the `init` choices by name)

May import the utilities (`attnflow._checks`, `_text`, `_threads`) only: a measure knows no
attention weights (a von Mises-Fisher mean is passed in) and no dynamics.
"""

from .registry import DISCRETISATIONS, MEASURES, Density, DensityFamily, Dims, Discretisation, Nodes

__all__ = ["DISCRETISATIONS", "MEASURES", "Density", "DensityFamily", "Dims", "Discretisation", "Nodes"]
