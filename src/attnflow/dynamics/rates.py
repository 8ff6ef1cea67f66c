"""Local decay rates of a W2 curve, -d log W2 / dt over time windows (`local_rates`): what the
exact reference's rates are compared with c* by (docs/math.md, "The zero-temperature flow")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike

from .._checks import check_positive, check_times

__all__ = ["LocalRate", "local_rates"]


class LocalRate(TypedDict):
    """One window of `local_rates`: its ends [t0, t1], the rate and its error (None: no w2_err)."""

    window: list[float]
    rate: float
    err: float | None


def local_rates(
    times: ArrayLike,
    w2: ArrayLike,
    w2_err: ArrayLike | None = None,
    windows: Sequence[Sequence[float]] | None = None,
    width: float = 4.0,
) -> list[LocalRate]:
    """Local decay rates -d log W2 / dt over time windows: log(W2(t0) / W2(t1)) / (t1 - t0).

    times, w2 (T,) (and w2_err (T,), absolute, or None).  windows: [[t0, t1], ...] whose ends are
    among `times`; None: successive windows of `width` from times[0], the last ending at or before
    the last time before W2 first reaches 0 (a curve that decays for long enough underflows: past it
    there is no logarithm), or times[-1].  Returns [{"window": [t0, t1], "rate": r, "err": e}],
    e = (w2_err/w2 at t0 + at t1) / (t1 - t0), or None without w2_err.
    """
    t = check_times(times)
    w = np.asarray(w2, dtype=np.float64).reshape(-1)
    if w.shape != t.shape:
        raise ValueError(f"w2 must have one value per time ({t.size}), got shape {np.shape(w2)}")
    err = None
    if w2_err is not None:
        err = np.asarray(w2_err, dtype=np.float64).reshape(-1)
        if err.shape != t.shape:
            raise ValueError(f"w2_err must have one value per time ({t.size}), got shape {np.shape(w2_err)}")
    if windows is None:
        width = check_positive(width, "width")
        zero = np.flatnonzero(~(w > 0))
        last = t[zero[0] - 1] if zero.size and zero[0] > 0 else t[-1]
        k = math.floor((last - t[0]) / width + 1e-9)
        windows = [[t[0] + j * width, t[0] + (j + 1) * width] for j in range(k)]
    scale = max(abs(float(t[-1])), 1.0)
    out: list[LocalRate] = []
    for win in windows:
        if len(win) != 2 or not win[0] < win[1]:
            raise ValueError(f"each window must be [t0, t1] with t0 < t1, got {win}")
        idx = []
        for edge in win:
            j = int(np.argmin(np.abs(t - edge)))
            if abs(t[j] - edge) > 1e-9 * scale:
                raise ValueError(f"window end {edge} is not one of the times; pick windows on the time grid")
            idx.append(j)
        i0, i1 = idx
        if not (w[i0] > 0 and w[i1] > 0):
            raise ValueError(f"W2 must be > 0 at both ends of window {win} to take its logarithm")
        dt = float(t[i1] - t[i0])
        rate = float(math.log(w[i0] / w[i1]) / dt)
        e = None if err is None else float((err[i0] / w[i0] + err[i1] / w[i1]) / dt)
        out.append({"window": [float(t[i0]), float(t[i1])], "rate": rate, "err": e})
    return out
