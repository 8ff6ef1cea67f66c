"""The measured constants of the kernels' cost model (one home): CPU seconds per unit of work, used
by `auto.choose_kernel` to predict each kernel's time and by the cluster kernel to choose, cell pair
by cell pair, between its series and its direct sums (`cells.plan`).
"""

from __future__ import annotations

# Measured on an AMD EPYC (2 cores, AVX2, MKL), one torch thread, CPU seconds, with other jobs on the
# machine (benchmarks/cluster.py --calibrate: uniform clouds at N = 8192 for sdpa; for the others
# non-negative least squares, relative to each time, over uniform and clustered clouds at N = 65536;
# docs/benchmarks.md):
SDPA = {"float64": (6.2e-9, 0.41e-9), "float32": (2.3e-9, 0.0)}  # per pair: a + b d
TRUNCATED = {"float64": (6.1e-6, 7.2e-9), "float32": (2.9e-6, 4.2e-9)}  # per token, per evaluated pair
# cluster kernel: the plan per token and per cell pair; direct sums per key-query pair and per cell
# pair; series per row, monomial and output (moments and evaluation) and per expanded cell pair
CLUSTER = {
    "token": 2.6e-6,
    "cell_pair": 1.2e-6,
    "direct_pair": 17e-9,
    "direct_cell_pair": 0.0,
    "series": 0.44e-9,
    "expanded_pair": 0.0,
}
