"""What the numbers say about the theorem: diagnostics of a trajectory (`metrics`), fits (`fits`),
a saved curve read between its saved times (`curves`), the N ladder (`convergence`, its errors in
`extrapolation`), the honest error of a quantity (`uncertainty`), the claims table (`claims`: the
CLAIMS registry of keyed rows) and the assumption checker (`assumptions`).

May import everything below it (utilities, attention, measures, kernels, dynamics, transport);
knows no config, file, figure or command line.
"""
