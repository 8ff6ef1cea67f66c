"""Optimal transport on the sphere: W2 between (weighted) clouds, exact, to a few atoms, Sinkhorn and
subsampled (`wasserstein`), over the solvers of POT and SciPy (`solvers`, `atoms`).

May import the utilities and `measures` (the sphere's distances) only.
"""
