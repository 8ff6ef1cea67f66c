"""The truncated kernel's geometry kept while the tokens move less than its margin: across the
stages of a step and across steps, instead of a new tree, new nearest neighbours and new cells at
every evaluation (docs/benchmarks.md, "The truncated kernel's geometry kept across moves").

The geometry of a state x (`_geometry.Geometry`) is made with every ball radius widened by
the margin (a fraction MARGIN of it, by default).  A later state x' of the same shape, settings,
betas and weights takes it when `_geometry.holds` says so, else a new geometry (widened
again) replaces it.  The check is exact, whatever x' is: a state that moved too far, or another
run's state, is rebuilt, never given a wrong field.

Why the check suffices.  Write u'_i = b'_i / |b'_i|, b'_i = B^T x'_i, n_i the nearest key of query i
when the geometry was made, L_i its weight's widening, and

    r'_i^2 = |u'_i - x'_{n_i}|^2 + 2 (cutoff + L_i) / (beta |b'_i|).

A key with beta <b'_i, x'_j> > beta <b'_i, x'_{n_i}> - cutoff - L_i has |u'_i - x'_j| < r'_i (keys
are unit vectors).  The keys dropped have w_j e^{beta <b'_i, x'_j>} <= w_j e^{s - cutoff - L_i},
s = beta <b'_i, x'_{n_i}>, so their mass is at most e^{s - cutoff - L_i} while the row sum is at
least w_{n_i} e^s whenever n_i is kept: the relative error is at most e^{-cutoff - L_i} / w_{n_i} <=
N e^{-cutoff}, the bound of the kernel (_kernel.py, "Error bound"), with n_i in place of the
nearest key (any kept key serves).  Cell k (centre z_k) gathers the keys whose old positions lie
within radii[k] of z_k; a key within r'_i of u'_i lies, before the move, within

    |x_j - x'_j| + |x'_j - u'_i| + |u'_i - z_k| <= delta + r'_i + |u'_i - z_k|

of z_k (delta = max_j |x'_j - x_j|), and so does n_i (|u'_i - x'_{n_i}| <= r'_i).  Hence
max_{i in k} (|u'_i - z_k| + r'_i) + delta <= radii[k] for every cell (or radii[k] >= 2: all keys)
gives every query every key it needs and the kernel's accuracy; keys beyond only add accuracy.  A
reused and a rebuilt geometry thus give fields within 4 ||V|| N e^{-cutoff} of each other.

The kept geometries: at most SIZE, the oldest dropped first; each holds its tree, O(N) arrays and
at most KEPT_KEYS (_kernel.py) candidate keys, and outlives the tensors it was made for.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

MARGIN = 0.05  # ball radii widened by this fraction (docs/benchmarks.md: 0.02 to 0.25 measured)
SIZE = 2  # a run needs one; at N = 10^6 one holds under 100 MB (tree, O(N) arrays, ball queries)

_kept: list[tuple[Hashable, object]] = []
_lock = threading.Lock()


def get(key: Hashable) -> object | None:
    """The geometries kept for `key` (settings, betas, shape), or None (the caller knows their type)."""
    with _lock:
        return next((value for k, value in reversed(_kept) if k == key), None)


def put(key: Hashable, value: object) -> None:
    """Keep `value` for `key`, replacing what was kept for it."""
    with _lock:
        _kept[:] = [e for e in _kept if e[0] != key]
        _kept.append((key, value))
        del _kept[:-SIZE]


def clear() -> None:
    """Forget every kept geometry (`forget_geometry`): the next evaluation makes its own."""
    with _lock:
        _kept.clear()
