"""What a `simulate` call would cost, estimated before its first step: `check_work` refuses work far
beyond the machine, with the estimate, unless the caller passes force=True.

    seconds = steps x evaluations per step x seconds of one kernel evaluation / threads

steps = t_final / dt (the fixed-step methods: the adaptive method's steps are known only as it runs,
and it is not estimated); evaluations per step: euler 1, heun 2, rk4 4; one evaluation is priced by
the kernels' cost model (`attnflow.kernels.costs`, CPU seconds of one thread): the dense kernels by
their closed form, "auto" by the cheapest kernel `kernels.auto.predict_costs` finds for X0 (asked only
where the dense kernels exceed the limit). The truncated, cluster and zero-temperature kernels chosen
by name are not estimated (their cost depends on the state as it moves). Memory: the states a step
keeps, (evaluations + 2) x M x N x d numbers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from .._text import format_value

if TYPE_CHECKING:
    import numpy as np

    from ..attention import Attention
    from ..flow import Dynamics

__all__ = ["EVALUATIONS", "WORK_LIMIT_S", "check_work", "kernel_seconds"]

#: the wall time (seconds, on the threads of the run) beyond which simulate refuses without force=True
WORK_LIMIT_S = 86_400.0
#: kernel evaluations per step of the fixed-step methods
EVALUATIONS = {"euler": 1, "heun": 2, "rk4": 4}
_DENSE = ("sdpa", "blocked", "fused")


class Numerics(Protocol):
    """What `check_work` reads of a run's numerics: the method, its step, the kernel and the dtype."""

    @property
    def method(self) -> str: ...
    @property
    def dt(self) -> float: ...
    @property
    def kernel(self) -> str: ...
    @property
    def dtype(self) -> str: ...


def _dense_seconds(kernel: str, M: int, N: int, d: int, dtype: str) -> float:
    """One evaluation of a dense kernel (the cheaper variant of the fused kernel's backends)."""
    from ..kernels import costs
    from ..kernels.auto import dense_cost

    table = costs.active()
    if kernel == "fused":
        return min(dense_cost("fused", M, N, d, v, c) for v, c in table["fused"].items())
    return dense_cost("sdpa", M, N, d, dtype, table["sdpa"][dtype])


def kernel_seconds(
    kernel: str, X0: np.ndarray, shape: tuple[int, ...], model: Attention | Dynamics, dtype: str, above: float
) -> float | None:
    """Predicted CPU seconds (one thread) of one evaluation of `kernel` on clouds of `shape` (M, N, d)
    starting at X0 (N, d) or (M, N, d); for "auto" the cheapest kernel's, the state priced only where
    the dense kernels cost more than `above`; None where it is not estimated."""
    import numpy as np

    from ..attention import Attention

    M, N, d = shape
    finite = not isinstance(model, Attention) or bool(np.isfinite(model.beta))
    if kernel in _DENSE:
        return _dense_seconds(kernel, M, N, d, dtype)
    if kernel != "auto" or not finite:
        return None  # beta = inf: the zero-temperature kernel, linear in N
    dense = min(_dense_seconds(k, M, N, d, dtype) for k in ("sdpa", "fused"))
    if dense <= above or not isinstance(model, Attention):
        return dense
    import torch

    from ..kernels.auto import predict_costs

    per_cloud = min(predict_costs(torch.from_numpy(X0), model).values()) / (
        X0.shape[0] if X0.ndim == 3 else 1
    )
    return min(dense, M * per_cloud)


def check_work(
    X0: np.ndarray,
    shape: tuple[int, ...],
    model: Attention | Dynamics,
    t_final: float,
    numerics: Numerics,
    force: bool,
) -> None:
    """ValueError with the estimate when the run of `numerics` (method, dt, kernel, dtype) on clouds of
    `shape` ((N, d) or (M, N, d)) from X0 would take more than WORK_LIMIT_S on this process's torch
    threads (module docstring); nothing when force=True or the run is not estimated."""
    import torch

    if force or numerics.method not in EVALUATIONS:
        return
    shape = (1, *shape) if len(shape) == 2 else tuple(shape)
    steps, evals = t_final / numerics.dt, EVALUATIONS[numerics.method]
    threads = max(torch.get_num_threads(), 1)
    limit = WORK_LIMIT_S * threads / max(steps * evals, 1.0)  # CPU seconds of one evaluation
    each = kernel_seconds(numerics.kernel, X0, shape, model, numerics.dtype, limit)
    if each is None or each <= limit:
        return
    seconds = steps * evals * each / threads
    memory = (evals + 2) * math.prod(shape) * (4 if numerics.dtype == "float32" else 8)
    clouds = f"{shape[0]} clouds of " if shape[0] > 1 else ""
    raise ValueError(
        f"this run would take about {format_value(seconds / 3600, 3)} hours on {threads} thread(s) "
        f"({format_value(steps, 3)} steps x {evals} evaluations of the {numerics.kernel} kernel on "
        f"{clouds}N = {shape[1]} tokens in d = {shape[2]}, about {format_value(each, 3)} CPU s each by "
        f"attnflow.kernels.costs) and {format_value(memory / 2**30, 3)} GiB for the states of a step, "
        "more than a day: take fewer tokens, a shorter time or a larger dt, or pass force=True to run "
        "it anyway"
    )
