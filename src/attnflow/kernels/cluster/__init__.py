"""The collapsed-cluster kernel (`kernel="cluster"`): cells of tokens, series expansions between
cells, a certified bound (the method is described in `_kernel`).

The kernel itself (`_kernel`), the plans of the clouds and their settings (`_plan`), the expanded
and the direct sums of one cloud (`_sums`).
"""

from ._kernel import velocity_cluster
from ._plan import DEFAULT_TOL, MIN_ORDER, ORDERS, cloud_plans, default_order

__all__ = ["DEFAULT_TOL", "MIN_ORDER", "ORDERS", "cloud_plans", "default_order", "velocity_cluster"]
