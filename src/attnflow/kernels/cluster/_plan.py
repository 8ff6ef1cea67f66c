"""The plans of the cluster kernel (`cluster`): one `cells.plan` per cloud, its settings checked.

The default tolerance and series orders, the checked settings of a plan, the per-cloud quadrature
weights and inverse temperatures, and `cloud_plans` (kept for the next call on the same tensors,
reuse.py, so that `kernel="auto"` and the kernel share them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np
import torch

from ..._checks import check_positive
from .. import cells as _cells
from .. import costs as _costs
from .. import reuse
from ..common import batched, finite_beta
from ..fused import variant

if TYPE_CHECKING:
    from ...attention import Attention

DEFAULT_TOL = 1e-10  # |v^ - v| <= tol ||V||_2 for every token (times max |x_j| off the sphere)
ORDERS = {1: 10, 2: 8, 3: 6, 4: 5, 5: 4}  # series order p by d (measured, benchmarks/cluster.py)
MIN_ORDER = 4  # from d = 6 on


def default_order(d: int) -> int:
    return ORDERS.get(d, MIN_ORDER)


def _cloud_weights(weights: torch.Tensor | None, M: int, N: int, like: torch.Tensor) -> torch.Tensor:
    """Quadrature weights (M, N) (or (N,), shared) as a float64 tensor on like's device, each row
    scaled to sum 1 (the softmax does not see the scale); uniform 1/N for None."""
    if weights is None:
        return torch.full((M, N), 1.0 / N, dtype=torch.float64, device=like.device)
    w = torch.as_tensor(weights, device=like.device).to(torch.float64)
    if w.dim() == 1:
        w = w.expand(M, -1)
    if w.shape != (M, N):
        raise ValueError(f"weights must have shape ({M}, {N}) (one weight per token), got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or not bool((w > 0).all()):
        raise ValueError(
            "weights must be finite and > 0 (a quadrature measure); got a zero, negative or NaN entry"
        )
    return w / w.sum(-1, keepdim=True)


def _cloud_betas(att: Attention, betas: torch.Tensor | None, M: int) -> list[float]:
    """The inverse temperature of each of the M clouds: betas (M,) (finite, > 0) or att.beta."""
    beta0 = finite_beta(att, "cluster", betas)
    if betas is None:
        return [beta0] * M
    bt = torch.as_tensor(betas, dtype=torch.float64).reshape(-1)
    if bt.numel() != M:
        raise ValueError(f"betas has {bt.numel()} entries for a batch of {M} clouds")
    if not bool((bt > 0).all()):
        raise ValueError(f"every beta in betas must be > 0, got {bt.tolist()}")
    return [float(b) for b in bt.tolist()]


class Settings(TypedDict):
    """The checked settings of a plan (`cells.plan`'s keywords)."""

    tol: float
    order: int
    leaf_min: int
    leaf_max: int
    costs: dict[str, float]


def settings(
    d: int,
    device: torch.device,
    tol: float,
    order: int | None,
    leaf_min: int,
    leaf_max: int,
    costs: Mapping[str, float] | None,
) -> Settings:
    """The plan's settings, checked: tol in (0, 1), order (default by d), leaf sizes, and the cost
    constants (default: the active constants of costs.py for the backend that runs on `device`)."""
    tol = check_positive(tol, "tol")
    if tol >= 1.0:
        raise ValueError(f"tol must be < 1 (a relative error bound), got {tol}")
    leaf_min = int(check_positive(leaf_min, "leaf_min", integer=True))
    leaf_max = max(leaf_min, int(check_positive(leaf_max, "leaf_max", integer=True)))
    p = default_order(d) if order is None else int(check_positive(order, "order", integer=True))
    if costs is None:
        costs = _costs.active()["cluster"][variant(d, device)]
    return {"tol": tol, "order": p, "leaf_min": leaf_min, "leaf_max": leaf_max, "costs": dict(costs)}


def cloud_plans(
    X: torch.Tensor,
    att: Attention,
    *,
    betas: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    tol: float = DEFAULT_TOL,
    order: int | None = None,
    leaf_min: int = _cells.LEAF_MIN,
    leaf_max: int = _cells.LEAF_MAX,
    costs: dict[str, float] | None = None,
) -> list[_cells.Plan]:
    """The plan (`cells.plan`) of every cloud of X (M, N, d) (or (N, d)), as `velocity_cluster` makes
    them; kept for the next call on the same, unmodified tensors (reuse.py): `kernel="auto"` prices
    the kernel by these plans and the kernel then takes them."""
    return _batched_plans(X, att, betas, weights, tol, order, leaf_min, leaf_max, costs)[2]


def _batched_plans(
    X: torch.Tensor,
    att: Attention,
    betas: torch.Tensor | None,
    weights: torch.Tensor | None,
    tol: float,
    order: int | None,
    leaf_min: int,
    leaf_max: int,
    costs: dict[str, float] | None,
) -> tuple[torch.Tensor, list[float], list[_cells.Plan]]:
    """X as (M, N, d), the inverse temperature of each cloud and the plans of `cloud_plans`: the one
    reading of the keywords that `cloud_plans` and `velocity_cluster` share."""
    X3 = batched(X, "X")
    M, N, d = X3.shape
    beta_list = _cloud_betas(att, betas, M)
    s = settings(d, X3.device, tol, order, leaf_min, leaf_max, costs)
    tensors = tuple(t if isinstance(t, torch.Tensor) else None for t in (X, weights, betas))
    settings_key = tuple((k, v) for k, v in s.items() if k != "costs")
    key = ("cluster", att.B.tobytes(), tuple(beta_list), tuple(sorted(s["costs"].items())), settings_key)
    cacheable = all(t is None or isinstance(t, torch.Tensor) for t in (weights, betas))
    plans = cast("list[_cells.Plan] | None", reuse.get(tensors, key) if cacheable else None)
    if plans is None:
        w = _cloud_weights(weights, M, N, X3).to("cpu").numpy()
        B = np.asarray(att.B, dtype=float)
        threads = torch.get_num_threads()
        plans = [
            _cells.plan(
                X3[m].detach().to("cpu", torch.float64).numpy(), w[m], B, beta_list[m], threads=threads, **s
            )
            for m in range(M)
        ]
        if cacheable:
            reuse.put(tensors, key, plans)
    return X3, beta_list, plans
