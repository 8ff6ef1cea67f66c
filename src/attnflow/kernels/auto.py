"""Automatic kernel choice: the kernel with the smallest predicted cost on the state.

Predicted CPU seconds of one evaluation on a state X of M clouds of N tokens in d dimensions:

    sdpa       M N^2 (SDPA[dtype][0] + SDPA[dtype][1] d)
    truncated  TRUNCATED[dtype][0] M N + TRUNCATED[dtype][1] pairs       pairs: candidate_pairs
    cluster    token M N + cell_pair (expanded + direct cell pairs)
               + direct_pair direct_pairs + direct_cell_pair direct_cell_pairs
               + series (C(p + d + 1, d) moment_rows + C(p + d, d) (d + 1) eval_rows)
               + expanded_pair expanded_pairs                            the constants: CLUSTER,
                                                                         counts: cells.plan(...)

The cluster kernel uses the same constants to choose, cell pair by cell pair, between its series
and direct sums.  The statistics come from the kernels' own plans (trees, nearest neighbours, cells,
ball counts), which compute no exponential: the truncated kernel's plan only where a sampled lower
bound on its pairs (the kept fraction) leaves it a chance.  All constants were measured on this
kind of machine (one thread, CPU time: benchmarks/cluster.py --calibrate, docs/benchmarks.md);
re-measure them on another.  The integrator re-decides every AUTO_EVERY steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .._checks import check_positive
from .costs import CLUSTER, SDPA, TRUNCATED

if TYPE_CHECKING:
    import torch

    from ..attention import Attention

MIN_N = 4096  # below this the dense kernel takes milliseconds: no decision needed
TRUNCATED_MAX_D = 6  # cells of directions stop paying off in higher dimension
CLUSTER_MAX_D = 5  # C(p + d, d) moments per cell pair grow too fast beyond
SAMPLE = 256  # queries of the kept-fraction sample (all clouds of a batch together)
# above this sampled kept fraction the truncated kernel does dense work plus gathers from many small
# blocks and runs at 0.2 to 1x the dense speed (docs/benchmarks.md): it is not planned at all
SKIP_FRACTION = 0.25

CANDIDATES = ("sdpa", "truncated", "cluster")
FLOOR_MARGIN = 0.5  # the truncated kernel is planned unless half its sampled floor exceeds the best


def kept_fraction(
    X: torch.Tensor, att: Attention, cutoff: float | None = None, sample: int = SAMPLE, seed: int = 0
) -> float:
    """Estimated fraction of key-query pairs with beta (x_i^T B x_j - max_k x_i^T B x_k) > -cutoff.

    X: (M, N, d) or (N, d) tensor; att: Attention (finite beta); cutoff: the truncated kernel's
    default when None.  Exact for `sample` queries drawn with `seed` (spread over the M clouds), each
    against all N keys of its cloud.  Returns a float in (0, 1] (0.0 when beta = inf).
    """
    import torch

    from .truncated import DEFAULT_CUTOFF

    cutoff = DEFAULT_CUTOFF if cutoff is None else check_positive(cutoff, "cutoff")
    sample = int(check_positive(sample, "sample", integer=True))
    beta = float(att.beta)
    if math.isinf(beta):
        return 0.0
    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    M, N, _ = X3.shape
    per = max(1, min(N, math.ceil(sample / M)))
    rng = np.random.default_rng(seed)
    idx = torch.as_tensor(np.stack([rng.choice(N, size=per, replace=False) for _ in range(M)]))
    Xd = X3.to(torch.float64)
    B = torch.tensor(att.B, dtype=torch.float64, device=X3.device)
    q = torch.gather(Xd, 1, idx.to(X3.device)[..., None].expand(-1, -1, Xd.shape[-1])) @ B  # (M, per, d)
    S = q @ Xd.transpose(1, 2)  # (M, per, N) unscaled scores <b_i, x_j>
    kept = torch.count_nonzero(S > S.amax(dim=-1, keepdim=True) - cutoff / beta)
    return float(kept) / (M * per * N)


def _dtype(X: torch.Tensor) -> str:
    return "float32" if str(X.dtype).endswith("float32") else "float64"


def cluster_cost(counts: dict[str, int], d: int) -> float:
    """Predicted seconds of the cluster kernel from the work counts of cells.Plan.counts()."""
    c, p = CLUSTER, counts["order"]
    rows = (
        math.comb(p + 1 + d, d) * counts["moment_rows"] + math.comb(p + d, d) * (d + 1) * counts["eval_rows"]
    )
    return (
        c["token"] * counts["tokens"]
        + c["cell_pair"] * (counts["expanded_pairs"] + counts["direct_cell_pairs"])
        + c["direct_pair"] * counts["direct_pairs"]
        + c["direct_cell_pair"] * counts["direct_cell_pairs"]
        + c["series"] * rows
        + c["expanded_pair"] * counts["expanded_pairs"]
    )


def _numpy64(a) -> np.ndarray:
    """A float64 NumPy copy of an array or a tensor on any device."""
    if hasattr(a, "detach"):
        return a.detach().to("cpu").double().numpy()
    return np.asarray(a, float)


def cluster_counts(X: torch.Tensor, att: Attention, weights=None) -> dict[str, int]:
    """Work counts of the cluster kernel on X (M, N, d), summed over the clouds (largest order)."""
    from . import cells
    from .cluster import DEFAULT_TOL, default_order

    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    M, N, d = X3.shape
    w = np.full((M, N), 1.0 / N) if weights is None else np.broadcast_to(_numpy64(weights), (M, N))
    w = w / w.sum(axis=-1, keepdims=True)  # as the kernel scales them
    total: dict[str, int] = {}
    for m in range(M):
        Xm = X3[m].detach().to("cpu").double().numpy()
        counts = cells.plan(
            Xm, w[m], np.asarray(att.B, float), float(att.beta), DEFAULT_TOL, default_order(d)
        )
        for key, value in counts.counts().items():
            total[key] = max(total.get(key, 0), value) if key == "order" else total.get(key, 0) + value
    return total


def predict_costs(X: torch.Tensor, att: Attention, weights=None) -> dict[str, float]:
    """Predicted seconds of one evaluation of each candidate kernel on X (M, N, d) (finite beta).

    "truncated" is inf where it cannot win (d > TRUNCATED_MAX_D, a sampled kept fraction above
    SKIP_FRACTION, or FLOOR_MARGIN times its sampled lower bound above the best other prediction),
    "cluster" where d > CLUSTER_MAX_D; neither plan is run then.
    """
    X3 = X if X.dim() == 3 else X.unsqueeze(0)
    M, N, d = X3.shape
    dt = _dtype(X3)
    a, b = SDPA[dt]
    costs = {"sdpa": M * N * N * (a + b * d), "truncated": math.inf, "cluster": math.inf}
    if d <= CLUSTER_MAX_D:
        costs["cluster"] = cluster_cost(cluster_counts(X3, att, weights), d)
    if d <= TRUNCATED_MAX_D:
        per_token, per_pair = TRUNCATED[dt]
        kept = kept_fraction(X3, att)
        floor = per_token * M * N + per_pair * kept * M * N * N
        if kept <= SKIP_FRACTION and FLOOR_MARGIN * floor < min(costs.values()):
            from .truncated import candidate_pairs

            costs["truncated"] = per_token * M * N + per_pair * candidate_pairs(X3, att, weights=weights)
    return costs


def choose_kernel(X: torch.Tensor | None, att: Attention, weights=None) -> str:
    """Name of the kernel to use on the state X (M, N, d): "zero" when beta = inf, "sdpa" for small
    N (< MIN_N) or no state, else the candidate with the smallest `predict_costs`.

    weights: optional (N,) or (M, N) quadrature weights of the tokens (the cluster kernel's cutoff
    depends on them).
    """
    if math.isinf(att.beta):
        return "zero"
    if X is None or X.shape[-2] < MIN_N:
        return "sdpa"
    costs = predict_costs(X, att, weights)
    return min(CANDIDATES, key=lambda k: costs[k])
