"""How tokens move: `simulate` (its arguments, steppers and `Trajectory`), the exact zero-temperature
flow and the projection Pi, the zero-temperature W2 at N = infinity (cubature) and the local decay
rates of a W2 curve (`rates`), and the mean-field separatrices of d = 2 with the graded quadrature
toward them.

May import the utilities, `attention`, `measures` and `kernels`; never transport, science or
anything above.
"""
