"""How tokens move: `simulate` (its arguments, steppers and `Trajectory`), the exact zero-temperature
flow and the projection Pi, the zero-temperature W2 at N = infinity (cubature) and the local decay
rates of a W2 curve (`rates`), the mean-field separatrices of d = 2 (`separatrix`) and the sources
and separatrix of d = 3 (`sources`) with the graded quadratures toward them.

May import the utilities, `attention`, `measures` and `kernels`; never transport, science or
anything above.
"""
