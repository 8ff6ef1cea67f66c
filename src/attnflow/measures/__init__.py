"""Initial measures rho_0 on the sphere S^{d-1}: the sphere's geometry, random samples, quadrature
nodes with weights, densities.

May import the utilities (`attnflow._checks`, `_text`, `_threads`) only: a measure knows no
attention weights (a von Mises-Fisher mean is passed in) and no dynamics.
"""
