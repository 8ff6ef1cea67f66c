"""Input validation shared by the public functions: clear errors that name the argument."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, SupportsFloat

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    import torch


SeedLike = int | np.random.Generator | None


def rng_from(seed: SeedLike, name: str = "seed") -> np.random.Generator:
    """A NumPy Generator from an int seed (>= 0), a Generator (used as is) or None (fresh entropy);
    any other seed is a ValueError naming `name`."""
    if isinstance(seed, np.random.Generator):
        return seed
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a non-negative integer, a numpy Generator or None, got {seed!r}"
        ) from None


UNIT_TOL = 1e-8  # largest accepted | |x_i| - 1 | for a token
WEIGHT_SUM_TOL = 1e-12  # largest accepted |sum_j w_j - 1| of quadrature weights
FLOAT32_MIN_RTOL = 1e-5  # float32 rounding (6e-8 per operation) swamps smaller local errors
# a saved trajectory may take at most this fraction of the memory available where it is kept
SAVE_MEMORY_FRACTION = 0.5


def to_numpy(a: ArrayLike) -> np.ndarray:
    """Array-like (NumPy, list, torch tensor) -> NumPy array, without copying when possible."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):  # a torch tensor, without importing torch
        a = a.detach().cpu().numpy()
    return np.asarray(a)


#: why a list of finite betas refuses beta = inf, said where one is found
INF_BETA_HINT = "beta = inf, the zero-temperature limit, is computed separately"


def _beta_range(finite: bool) -> str:
    return "(0, inf)" if finite else "(0, inf]"


def check_beta(beta: SupportsFloat, name: str = "beta", *, finite: bool = False) -> float:
    """An inverse temperature in (0, inf] ((0, inf) with finite=True), as a float (math.inf allowed).
    Lists of betas: `check_betas`, with the same rule and words."""
    try:
        b = float(beta)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number in {_beta_range(finite)}, got {beta!r}") from None
    if math.isnan(b) or b <= 0 or (finite and math.isinf(b)):
        hint = f" ({INF_BETA_HINT})" if finite and b == math.inf else ""
        raise ValueError(f"{name} must be in {_beta_range(finite)}{hint}, got {beta!r}")
    return b


def check_betas(
    betas: ArrayLike, name: str = "betas", *, finite: bool = True, distinct: bool = False
) -> np.ndarray:
    """Inverse temperatures: a non-empty 1-D float64 array (B,), each in (0, inf) ((0, inf] with
    finite=False), pairwise different with distinct=True.  Every message is one line naming `name`."""
    try:
        arr = to_numpy(betas).astype(np.float64)
    except (TypeError, ValueError):
        shown = betas.tolist() if isinstance(betas, np.ndarray) else betas
        raise TypeError(f"{name} must be a sequence of numbers, got {shown!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of numbers, got shape {arr.shape}")
    bad = np.isnan(arr) | (arr <= 0) | (np.isinf(arr) if finite else False)
    if bad.any():
        want = "finite and > 0" if finite else "in (0, inf]"
        hint = f" ({INF_BETA_HINT})" if finite and bool(np.any(arr == math.inf)) else ""
        raise ValueError(f"{name} must be {want}{hint}, got {arr.tolist()}")
    if distinct and np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must be distinct, got {arr.tolist()}")
    return arr


def real_array(A: np.ndarray, name: str) -> np.ndarray:
    """A, or its real part when every imaginary part is 0; ValueError naming `name` for complex
    entries (NumPy would drop their imaginary parts with only a warning)."""
    if A.dtype.kind != "c":
        return A
    if np.any(A.imag != 0):
        raise ValueError(
            f"{name} must be real, got complex entries (dtype {A.dtype}, largest imaginary part "
            f"{float(np.max(np.abs(A.imag))):.3g})"
        )
    return A.real


def check_matrix(M: ArrayLike, name: str, d: int | None = None) -> np.ndarray:
    """A finite square float64 matrix, of size d x d when d is given. Complex entries are refused
    (NumPy would drop their imaginary parts with a warning), unless every imaginary part is 0."""
    not_real = f"{name} must be a real (d, d) array, got {type(M).__name__}"
    try:
        raw = to_numpy(M)
    except (TypeError, ValueError):
        raise TypeError(not_real) from None
    if raw.dtype.kind == "c":
        if np.any(raw.imag != 0):
            raise ValueError(
                f"{name} must be a real matrix, got complex entries (dtype {raw.dtype}, largest "
                f"imaginary part {float(np.max(np.abs(raw.imag))):.3g}): attention weights are real"
            )
        raw = raw.real
    try:
        A = raw.astype(np.float64, copy=True)
    except (TypeError, ValueError):
        raise TypeError(not_real) from None
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square (d, d) matrix, got shape {A.shape}")
    if A.shape[0] < 2:
        raise ValueError(f"{name} must be at least 2 x 2 (tokens live on S^(d-1), d >= 2), got {A.shape}")
    if d is not None and A.shape[0] != d:
        raise ValueError(f"{name} must be {d} x {d} to match the other matrices, got {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf")
    return A


def check_points(
    X: ArrayLike,
    name: str = "X",
    d: int | None = None,
    normalize: bool = False,
    allow_batch: bool = True,
    tol: float = UNIT_TOL,
) -> np.ndarray:
    """Tokens on the sphere: float64 array (N, d) or (M, N, d) with finite unit rows.

    Rows off the sphere by more than `tol` are an error unless `normalize=True`, in which
    case they are divided by their norm (a zero row is still an error).
    """
    try:
        A = to_numpy(X)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real array of shape (N, d), got {type(X).__name__}") from None
    A = real_array(A, name)
    try:
        A = A.astype(np.float64, copy=not (A.dtype == np.float64 and A.flags.c_contiguous))
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real array of shape (N, d), got {type(X).__name__}") from None
    ndims = (2, 3) if allow_batch else (2,)
    if A.ndim not in ndims:
        want = "(N, d) or (M, N, d)" if allow_batch else "(N, d)"
        raise ValueError(f"{name} must have shape {want}, got shape {A.shape}")
    if A.shape[-2] == 0 or (A.ndim == 3 and A.shape[0] == 0):
        raise ValueError(f"{name} is empty (shape {A.shape}): need at least one token")
    if A.shape[-1] < 2:
        raise ValueError(f"{name} must have d >= 2 columns (points of S^(d-1)), got shape {A.shape}")
    if d is not None and A.shape[-1] != d:
        raise ValueError(f"{name} has d = {A.shape[-1]} columns but the attention matrices are {d} x {d}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf")
    norms = np.linalg.norm(A, axis=-1)
    if normalize:
        if np.any(norms == 0):
            raise ValueError(f"{name} has a zero row, which cannot be normalised onto the sphere")
        A = np.ascontiguousarray(A / norms[..., None])
    else:
        dev = float(np.max(np.abs(norms - 1.0)))
        if dev > tol:
            raise ValueError(
                f"{name} must have unit rows (points of the sphere): largest | |x_i| - 1 | is {dev:.3g}; "
                "pass normalize=True to project the rows onto the sphere"
            )
    return A


def check_times(times: ArrayLike, name: str = "times") -> np.ndarray:
    """Output times: finite, non-negative, non-decreasing 1-D float64 array, at least one entry."""
    t = np.atleast_1d(real_array(to_numpy(times), name).astype(np.float64))
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of times, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name} contains NaN or inf")
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError(f"{name} must be non-negative and non-decreasing, got {t}")
    return t


def check_positive(x: SupportsFloat, name: str, integer: bool = False) -> float:
    """A finite number > 0 (an int when integer=True)."""
    if integer:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{name} must be a positive integer, got {x!r}")
        if x <= 0:
            raise ValueError(f"{name} must be a positive integer, got {x!r}")
        return int(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v


def check_choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    """One of a few option strings."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_cloud(X: ArrayLike, name: str = "X", allow_batch: bool = False) -> np.ndarray:
    """check_points for measured clouds: float32 (or lower precision) input is accepted within 1e-5
    of unit norm and renormalised in float64 (a float32 trajectory's rows are off by about 1e-7)."""
    A = to_numpy(X)
    low = A.dtype.kind == "f" and A.dtype.itemsize < 8
    P = check_points(A, name, allow_batch=allow_batch, tol=1e-5 if low else UNIT_TOL)
    return P / np.linalg.norm(P, axis=-1, keepdims=True) if low else P


def check_stack(X: ArrayLike, name: str) -> np.ndarray:
    """Clouds with any leading axes (..., N, d), e.g. (T, N, d) or (T, M, N, d), as check_cloud."""
    A = to_numpy(X)
    if A.ndim < 2:
        raise ValueError(f"{name} must have shape (..., N, d), e.g. (N, d) or (T, N, d), got {A.shape}")
    flat = A.reshape(-1, *A.shape[-2:]) if A.ndim > 3 else A
    return check_cloud(flat, name, allow_batch=True).reshape(A.shape)


def check_weights(w: ArrayLike, shape: int | tuple[int, ...], name: str = "weights") -> np.ndarray:
    """Weights of a measure sum_i w_i delta_{x_i}: finite, > 0, summing to 1 over the token axis.

    shape: the cloud's leading shape X.shape[:-1], e.g. (N,), (M, N) or (T, M, N). The weights have
    N entries on their last axis and broadcast against `shape` ((N,) for every cloud alike; (M, N)
    for a batch of M clouds, the same at every saved time). An int N means (N,) or (M, N) for any M
    (the caller checks M). Returns a float64 array (no copy for float64 input).
    """
    per_cloud = isinstance(shape, int)
    if isinstance(shape, int):
        shape = (*np.shape(w)[:-1], shape) if 1 <= np.ndim(w) <= 2 else (shape,)
    n = shape[-1]
    not_real = f"{name} must be a real array of {n} weights per cloud, got {type(w).__name__}"
    try:
        W = to_numpy(w)
    except (TypeError, ValueError):
        raise TypeError(not_real) from None
    W = real_array(W, name)
    try:
        W = W.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise TypeError(not_real) from None
    try:
        fits = W.ndim >= 1 and W.shape[-1] == n and np.broadcast_shapes(W.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits and per_cloud:
        raise ValueError(f"{name} must have shape (N,) or (M, N) with N = {n} tokens, got shape {W.shape}")
    if not fits:
        raise ValueError(
            f"{name} must have shape ({n},) or one that broadcasts against the clouds' {tuple(shape)}, "
            f"got {W.shape}"
        )
    if not np.all(np.isfinite(W)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(W <= 0):
        raise ValueError(
            f"{name} must be > 0 (a weighted measure's atoms carry positive mass), got min {W.min():.3g}; "
            "drop the points of zero weight"
        )
    off = float(np.max(np.abs(W.sum(axis=-1) - 1.0)))
    if off > WEIGHT_SUM_TOL:
        raise ValueError(
            f"{name} must sum to 1 over the tokens (a probability measure): off by {off:.3g}; "
            f"pass {name} / {name}.sum(axis=-1, keepdims=True)"
        )
    return W


def torch_build_has_gpu() -> bool | None:
    """Whether the installed torch was built for CUDA (or ROCm), read from its version file without
    importing torch (seconds on a loaded machine); None when that cannot be told."""
    import importlib.util
    import re
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except (OSError, ImportError, ValueError, StopIteration):
        return None
    found = {k: v for k, v in re.findall(r"^(cuda|hip)\b[^=]*=\s*(.+)$", text, flags=re.M)}
    if set(found) != {"cuda", "hip"}:
        return None
    return any(v.strip() != "None" for v in found.values())


def check_device(device: str | torch.device | None, X: object = None) -> torch.device:
    """Where to compute, as a torch.device: None means X's device for a torch tensor X, else the CPU;
    "cpu", "cuda", "cuda:<k>" or a torch.device.  A device that is not available is a ValueError."""
    import torch

    if device is None:
        return X.device if isinstance(X, torch.Tensor) else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        raise ValueError(
            f"device must be 'cpu', 'cuda', 'cuda:<k>' or a torch.device, got {device!r}"
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device {device!r} cannot run attnflow's kernels: use 'cpu' or 'cuda'")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r} is not available: torch sees no CUDA GPU; use device='cpu'")
    n = torch.cuda.device_count()
    if dev.index is not None and dev.index >= n:
        raise ValueError(
            f"device {device!r} is not available: torch sees {n} CUDA GPU(s), cuda:0 to cuda:{n - 1}"
        )
    return dev


def check_rtol_for_dtype(rtol: float, dtype: str, method: str = "adaptive") -> None:
    """The one rule tying the adaptive tolerance to the arithmetic: float32 needs rtol >= FLOAT32_MIN_RTOL
    (its rounding, 6e-8 per operation, swamps smaller local errors and the steps shrink without end).
    Used by `simulate` and by the experiment configs."""
    if dtype == "float32" and method == "adaptive" and rtol < FLOAT32_MIN_RTOL:
        raise ValueError(
            f"rtol = {rtol:g} is below what dtype 'float32' resolves (about 7 digits): the adaptive "
            f"integrator needs rtol >= {FLOAT32_MIN_RTOL:g} with float32; set rtol to {FLOAT32_MIN_RTOL:g} "
            "or more, or dtype to 'float64'"
        )


def available_memory(device: torch.device | None = None) -> int | None:
    """Bytes available for new arrays: on a CUDA device its free memory, else the host's MemAvailable
    (Linux; free physical pages elsewhere).  None when unknown."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def total_memory() -> int | None:
    """Bytes of physical memory of this machine, None when unknown."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_saved_memory(
    n_times: int,
    shape: tuple[int, ...],
    itemsize: int,
    device: torch.device | None = None,
    fix: str | None = None,
    machine: bool = False,
) -> None:
    """Refuse a saved trajectory of n_times states of `shape` ((N, d) or (M, N, d)) that would take more
    than SAVE_MEMORY_FRACTION of the memory available where it is kept (ValueError naming times and N),
    before anything is allocated. fix: what to change, in the caller's words (default: times, N).
    machine=True: refuse only what exceeds the whole memory of this machine (the configs' check, made
    when a config is loaded: it must not depend on what other processes use at that moment)."""
    from ._text import format_value

    need = n_times * math.prod(shape) * itemsize
    avail, fraction = (total_memory(), 1.0) if machine else (available_memory(device), SAVE_MEMORY_FRACTION)
    if avail is None or need <= fraction * avail:
        return
    on_gpu = device is not None and getattr(device, "type", "cpu") == "cuda"
    clouds = f"{shape[0]} clouds x " if len(shape) > 2 else ""
    gib = format_value(avail / 2**30, 3)
    of = f"the {gib} GiB of this machine" if machine else f"{fraction:g} of the {gib} GiB available"
    if on_gpu:
        of += " on the GPU"
    raise ValueError(
        f"the saved trajectory would take {format_value(need / 2**30, 3)} GiB ({n_times} times x {clouds}"
        f"N = {shape[-2]} tokens x d = {shape[-1]} x {itemsize} bytes), more than {of}: "
        f"{fix or 'save fewer times (times) or fewer tokens (N)'}"
    )
