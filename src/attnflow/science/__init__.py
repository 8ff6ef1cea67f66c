"""What the numbers say about the theorem: diagnostics of a trajectory (`metrics`), fits (`fits`),
the N ladder (`convergence`), the claims table (`claims`) and the assumption checker
(`assumptions`).

May import everything below it (utilities, attention, measures, kernels, dynamics, transport);
knows no config, file, figure or command line.
"""
