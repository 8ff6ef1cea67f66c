"""Attention weights from a file: `load_attention` reads Q, K, V from an .npz (never unpickling) and
checks them, every error one line naming the file and the problem (a missing file or key, a shape,
a dtype, NaN or inf, a singular B at beta = inf)."""

from __future__ import annotations

import math
import os

from .._checks import check_beta
from .core import COND_B_MAX, Attention

_SAVE_HINT = "save the weights with numpy.savez(path, Q=Q, K=K, V=V)"


def load_attention(path: str | os.PathLike[str], beta: float = 1.0) -> Attention:
    """Attention from an .npz file holding Q, K, V (each d x d, the same d).

    Parameters
    ----------
    path : str or os.PathLike
        The file, e.g. written by `numpy.savez(path, Q=Q, K=K, V=V)`.
    beta : float
        Inverse temperature, in (0, inf].

    Returns
    -------
    Attention

    Raises
    ------
    ValueError
        In one line naming the file and the problem: a missing file or key, a shape, NaN or inf, and
        a singular B at beta = inf (the zero-temperature field divides by |B^T x|; at finite beta
        `check_assumptions` reports B's condition number).
    """
    from ..io.arrays import load_arrays

    name = os.fspath(path)
    beta = check_beta(beta)
    from ..io.paths import not_a_file

    if (why := not_a_file(name)) is not None:
        error = FileNotFoundError if why == "no such file" else ValueError
        raise error(f"{name}: {why} (attention weights: an .npz holding Q, K, V)")
    archive = load_arrays(name)  # never unpickles: a pickle or an object array is refused, naming the file
    if not isinstance(archive, dict):
        raise ValueError(f"{name}: a single array, not an .npz archive; {_SAVE_HINT}")
    missing = [k for k in ("Q", "K", "V") if k not in archive]
    if missing:
        found = ", ".join(archive) or "nothing"
        raise ValueError(f"{name}: missing {', '.join(missing)} (found {found}); {_SAVE_HINT}")
    arrays = {k: archive[k] for k in ("Q", "K", "V")}
    for k, M in arrays.items():
        if M.dtype.kind not in "biuf":
            raise ValueError(f"{name}: {k} must be a real matrix, got dtype {M.dtype}")
    try:
        att = Attention(arrays["Q"], arrays["K"], arrays["V"], beta)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    if math.isinf(beta) and not att.cond_B <= COND_B_MAX:
        raise ValueError(
            f"{name}: B = Q^T K is singular (condition number {att.cond_B:.3g} > {COND_B_MAX:.0e}), "
            "so the zero-temperature field at beta = inf is undefined; use a finite beta"
        )
    return att
