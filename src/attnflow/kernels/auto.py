"""Automatic kernel choice: the truncated kernel where few keys matter, the fused dense one elsewhere.

The truncated kernel (truncated.py) evaluates, for each query, only the keys whose weight is at
least e^{-cutoff} times the row maximum, plus the slack its cells of queries bring.  It pays off when
few of the N^2 key-query pairs are evaluated: low temperature on a spread-out cloud.  Once the tokens
cluster, most keys of a cluster are kept and the dense fused kernel is faster.  `choose_kernel`
decides in two steps, both cheap next to one dense evaluation:

1. the kept fraction, exact on a seeded sample of queries against all keys (O(sample N d), no
   exponentials): clustered or hot states (fraction > SKIP_FRACTION) go to "sdpa" at once;
2. otherwise the truncated kernel's own plan (tree, nearest neighbours, cells, ball counts, no
   exponentials) counts the pairs it would evaluate; "truncated" is chosen when that is at most
   PAIRS_MAX[d] of N^2 (more from N = LARGE_N on), thresholds measured on this kind of machine
   (benchmarks/scale.py, docs/benchmarks.md).

The integrator re-decides every few steps as the tokens move.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .._checks import check_positive

if TYPE_CHECKING:
    import torch

    from ..model import Attention

TRUNCATED_MAX_D = 6  # cells of directions stop paying off in higher dimension
TRUNCATED_MIN_N = 4096  # below this the dense kernel takes milliseconds: no decision needed
SKIP_FRACTION = 0.25  # a larger sampled kept fraction means "sdpa" without planning
# largest fraction of the N^2 pairs the truncated kernel may evaluate and still be chosen, by d.
# Measured (d = 3, benchmarks/scale.py), truncated / dense time: 0.93 at 36 % of the pairs and
# N = 16384, 0.60 at 29 % and N = 65536, 0.04 at 0.5 %; higher d costs more per pair (ball queries)
PAIRS_MAX = {2: 0.2, 3: 0.2, 4: 0.15, 5: 0.08, 6: 0.05}
LARGE_N, LARGE_N_FACTOR = 32768, 1.5  # from N = LARGE_N on, the fixed overhead matters less
SAMPLE = 256  # queries per decision (all clouds of a batch together)
# cluster kernel, seconds per unit of work (cells.plan uses them to choose direct or expanded pairs):
# per direct key-query pair, per moment row and monomial, per evaluated row and monomial times d + 1
CLUSTER_COSTS = (10e-9, 0.2e-9, 0.2e-9)


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


def choose_kernel(X: torch.Tensor | None, att: Attention) -> str:
    """Name of the kernel to use on the state X (M, N, d).

    "zero" when beta = inf; "truncated" when d <= TRUNCATED_MAX_D, N >= TRUNCATED_MIN_N, the
    sampled kept fraction is <= SKIP_FRACTION and the truncated kernel would evaluate at most
    PAIRS_MAX[d] of the N^2 pairs (LARGE_N_FACTOR times that from N = LARGE_N on); "sdpa" otherwise.
    """
    if math.isinf(att.beta):
        return "zero"
    if X is None:
        return "sdpa"
    N, d = X.shape[-2], X.shape[-1]
    if d > TRUNCATED_MAX_D or N < TRUNCATED_MIN_N:
        return "sdpa"
    if kept_fraction(X, att) > SKIP_FRACTION:
        return "sdpa"
    from .truncated import candidate_pairs

    M = X.shape[0] if X.dim() == 3 else 1
    limit = PAIRS_MAX[d] * (LARGE_N_FACTOR if N >= LARGE_N else 1.0)
    return "truncated" if candidate_pairs(X, att) <= limit * M * N * N else "sdpa"
