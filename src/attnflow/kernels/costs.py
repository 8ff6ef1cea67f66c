"""The kernels' cost model, one home: CPU seconds per unit of work (one thread), used by
`auto.choose_kernel` to predict each kernel's time on a state and by the cluster kernel to choose,
cell pair by cell pair, between its series and its direct sums (`cells.plan`).

    sdpa       call M + M N^2 (pair + pair_d d)                                     variant: dtype
    fused      call M + M N^2 (pair + pair_d d)                                     variant: backend
    truncated  call M + token M N + pair pairs + key keys                           variant: backend
    cluster    call M + token M N + cell cells + cell_pair (expanded + direct       variant: backend
               cell pairs)
               + direct_pair direct_pairs + direct_key direct_keys
               + direct_cell_pair direct_cell_pairs + expanded_pair expanded_pairs
               + series (C(p + d + 1, d) moment_rows + C(p + d, d) (d + 1) eval_rows)

M clouds of N tokens in d dimensions; the counts come from the kernels' own plans
(`truncated.candidate_counts`, `cells.Plan.counts`); the backend is "compiled" where the fused
kernel's compiled core runs (compiled.py), "torch" where it does not.  `call` is each kernel's fixed
cost per cloud and call (Python, planning set-up, thread pools), which decides at small N.

DEFAULTS were fitted by `python -m attnflow.kernels.calibrate` (non-negative least squares relative
to each time, CPU seconds, one thread) on the machine described beside them; `active()` returns the
constants calibrated on the present machine where the user cache holds them (cache.py: a file per
machine and torch version), else DEFAULTS.  A cache file that cannot be read, has another format,
belongs to another machine or misses a constant is ignored with a warning.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

from .cache import cache_dir, machine, machine_key, write_atomic

Costs = dict[str, dict[str, dict[str, float]]]  # kernel -> variant -> term -> CPU seconds

FORMAT = 1
TERMS: dict[str, tuple[str, ...]] = {
    "sdpa": ("call", "pair", "pair_d"),
    "fused": ("call", "pair", "pair_d"),
    "truncated": ("call", "token", "pair", "key"),
    "cluster": (
        "call",
        "token",
        "cell",
        "cell_pair",
        "direct_pair",
        "direct_key",
        "direct_cell_pair",
        "series",
        "expanded_pair",
    ),
}
VARIANTS: dict[str, tuple[str, ...]] = {
    "sdpa": ("float64", "float32"),
    "fused": ("compiled", "torch"),
    "truncated": ("compiled", "torch"),
    "cluster": ("compiled", "torch"),
}

# Fitted on an Intel Xeon (Sapphire Rapids class, AVX-512, 2 logical cores, shared with other jobs),
# torch 2.13.0+cpu, one torch thread: `python -m attnflow.kernels.calibrate` over uniform,
# metastable (two von Mises-Fisher clusters, kappa = 100), collapsed (kappa = 1e4) and
# terminal-phase clouds, N = 4096 to 65536, beta = 30 and 1000, the d = 3 worked example, and
# uniform clouds in d = 6 for the dimension terms (docs/benchmarks.md, "Choosing the kernel").
DEFAULTS: Costs = {
    "sdpa": {
        "float64": {"call": 1.0e-4, "pair": 3.0e-9, "pair_d": 0.07e-9},
        "float32": {"call": 1.0e-4, "pair": 1.2e-9, "pair_d": 0.03e-9},
    },
    "fused": {
        "compiled": {"call": 2.0e-4, "pair": 0.55e-9, "pair_d": 0.05e-9},
        "torch": {"call": 2.0e-4, "pair": 1.6e-9, "pair_d": 0.05e-9},
    },
    "truncated": {
        "compiled": {"call": 2.0e-3, "token": 1.5e-6, "pair": 0.9e-9, "key": 5e-9},
        "torch": {"call": 2.0e-3, "token": 1.5e-6, "pair": 2.5e-9, "key": 5e-9},
    },
    "cluster": {
        "compiled": {
            "call": 3.0e-3,
            "token": 1.5e-6,
            "cell": 1.0e-5,
            "cell_pair": 1.0e-6,
            "direct_pair": 1.0e-9,
            "direct_key": 5e-9,
            "direct_cell_pair": 0.0,
            "series": 0.5e-9,
            "expanded_pair": 0.0,
        },
        "torch": {
            "call": 3.0e-3,
            "token": 1.5e-6,
            "cell": 1.0e-5,
            "cell_pair": 1.0e-6,
            "direct_pair": 6.0e-9,
            "direct_key": 5e-9,
            "direct_cell_pair": 0.0,
            "series": 0.5e-9,
            "expanded_pair": 0.0,
        },
    },
}


def check(costs: Any, where: str = "costs") -> Costs:
    """The constants as floats, every kernel, variant and term of TERMS and VARIANTS present, finite
    and >= 0; ValueError naming the first one that is not."""
    out: Costs = {}
    for kernel, terms in TERMS.items():
        out[kernel] = {}
        for variant in VARIANTS[kernel]:
            given = costs.get(kernel, {}).get(variant) if isinstance(costs, dict) else None
            if not isinstance(given, dict):
                raise ValueError(f"{where}: no constants for {kernel!r} ({variant})")
            values = {}
            for term in terms:
                v = given.get(term)
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"{where}: {kernel}.{variant}.{term} must be a number >= 0, got {v!r}")
                values[term] = float(v)
            out[kernel][variant] = values
    return out


def cache_path() -> Path:
    """The calibration file of this machine and torch version in the user cache."""
    return cache_dir() / f"costs-{machine_key()}.json"


def read(path: Path) -> Costs:
    """The constants of a calibration file; ValueError saying why it cannot be used."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a calibration file of format {FORMAT}")
    if data.get("machine") != machine():
        raise ValueError(f"{path} was calibrated on another machine or torch version ({data.get('machine')})")
    return check(data.get("costs"), str(path))


def write(costs: Costs, fit: dict | None = None, path: Path | None = None) -> Path:
    """Store calibrated constants (checked) with this machine's description; returns the file."""
    path = cache_path() if path is None else Path(path)
    record = {
        "format": FORMAT,
        "machine": machine(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "costs": check(costs),
        "fit": fit or {},
    }
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


_loaded: dict[tuple[str, int, int], Costs] = {}


def active() -> Costs:
    """The constants in use: this machine's calibration file when it is valid, else DEFAULTS (with a
    warning, once per file state, for a file that exists but cannot be used)."""
    path = cache_path()
    try:
        st = path.stat()
    except OSError:
        return DEFAULTS
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _loaded:
        try:
            _loaded[key] = read(path)
        except ValueError as e:
            warnings.warn(f"attnflow: ignoring the kernels' calibration file: {e}", stacklevel=2)
            _loaded[key] = DEFAULTS
    return _loaded[key]


def source() -> str:
    """Where `active()` takes its constants from: the calibration file's path, or "defaults"."""
    return str(cache_path()) if active() is not DEFAULTS else "defaults"
