"""The kernels' cost model, one home: CPU seconds per unit of work (one thread), used by
`auto.choose_kernel` to predict each kernel's time on a state and by the cluster kernel to choose,
cell pair by cell pair, between its series and its direct sums (`cells.plan`).

    kernel     predicted seconds                                              variant
    sdpa       call M + M N^2 (pair + pair_d d)                               dtype
    fused      call M + M N^2 (pair + pair_d d)                               backend
    truncated  call M + token M N + pair pairs + key keys                     backend
    cluster    call M + token M N + cell cells                                backend
               + cell_pair (expanded_pairs + direct_cell_pairs)
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

from .cache import cache_dir, machine, machine_key

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

# Fitted on an Intel Xeon (Sapphire Rapids class, AVX-512, 2 logical cores, shared with other jobs:
# load 4 to 7), torch 2.13.0+cpu, one torch thread, by `benchmarks/auto.py --fit` (the calibration
# command's fit on the 24 cases of docs/benchmarks.md, "Choosing the kernel": uniform, metastable,
# collapsed and terminal-phase clouds of the d = 3 worked example, N = 4096 to 65536, beta = 30 and
# 1000, plus uniform clouds at N = 1024 and at d = 6); the "torch" variants by
# `python -m attnflow.kernels.calibrate --torch` on the same machine.
DEFAULTS: Costs = {
    "sdpa": {
        "float64": {"call": 2.93e-4, "pair": 1.84e-9, "pair_d": 3.41e-11},
        "float32": {"call": 6.09e-4, "pair": 7.70e-10, "pair_d": 2.51e-11},
    },
    "fused": {
        "compiled": {"call": 4.70e-4, "pair": 1.94e-10, "pair_d": 1.65e-10},
        "torch": {"call": 4.48e-4, "pair": 1.60e-9, "pair_d": 3.75e-11},
    },
    "truncated": {
        "compiled": {"call": 1.16e-3, "token": 1.12e-6, "pair": 5.65e-10, "key": 9.04e-8},
        "torch": {"call": 2.02e-3, "token": 1.46e-6, "pair": 1.52e-9, "key": 1.41e-7},
    },
    "cluster": {
        "compiled": {
            "call": 4.03e-3,
            "token": 9.83e-7,
            "cell": 6.92e-6,
            "cell_pair": 2.58e-7,
            "direct_pair": 6.84e-10,
            "direct_key": 2.92e-8,
            "direct_cell_pair": 5.03e-8,
            "series": 1.31e-10,
            "expanded_pair": 2.60e-5,
        },
        "torch": {
            "call": 8.56e-3,
            "token": 8.71e-7,
            "cell": 7.42e-6,
            "cell_pair": 2.60e-7,
            "direct_pair": 0.0,
            "direct_key": 1.50e-7,
            "direct_cell_pair": 0.0,
            "series": 1.43e-10,
            "expanded_pair": 1.51e-5,
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
    from ..io import atomic_write_text

    return atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


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
