"""What the points of a metastability run say, read off their parts: each cloud's departure, and the
point's statistics over its clouds, assembled into the run's Dataset.

Per cloud: each atom's departure (`attnflow.science.curves.departure` of the mass near the atom, a
fraction of the atom's mass in Pi_# rho_0), the first of the two, its save-grid error and a status.
Per point: the mean departure over the clouds that departed, its spread (standard deviation over
seeds) and error (the spread's standard error and the save grid's bias in quadrature), the fraction
of clouds that departed.

Why per atom: a random cloud's two clusters hold about half the mass each and leave at different
times, so the total mass near A's top eigenspace falls to about 1/2 when the first leaves, above or
below the level by chance; each cluster's own mass falls from about 1 to 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ...science.curves import FORMED
from ..common import DataVariables
from .points import ATOMS, LEVEL

if TYPE_CHECKING:
    import xarray as xr

#: what happened to one cloud of a point
STATUSES = {
    "departed": "a cluster left its atom (the mass near it fell back below 1/2)",
    "no metastable phase": "the mass near neither atom reached 3/4 of the atom's mass",
    "no departure": "a cluster formed and had not left by the end of the integration (its horizon)",
}


@dataclass(frozen=True)
class CloudReading:
    """One cloud of a point: its departure t (NaN if none) and save-grid error, the atom that left
    first (index into ATOMS, -1), the largest fraction each atom's mass reached (2,), the status."""

    t: float
    bias: float
    atom: int
    peak: np.ndarray
    status: str


def read_cloud(times: np.ndarray, fractions: np.ndarray, located: np.ndarray | None = None) -> CloudReading:
    """The reading of one cloud from its atom fractions (T, 2) at the saved times (T,); located (2, 2):
    per atom its departure located on the continuous solution and that time's error (NaN where none,
    e.g. a part written before they were: the reading of the saved samples, the step its error)."""
    from ...science.curves import departure

    peak = np.array([np.nanmax(f) if np.isfinite(f).any() else math.nan for f in fractions.T])
    found = []
    for a in range(fractions.shape[1]):
        f = fractions[:, a]
        if np.all(np.isfinite(f)):
            c = departure(times, f, LEVEL)
            if math.isfinite(c.t):
                if located is not None and np.all(np.isfinite(located[a])):
                    c = replace(c, t=float(located[a, 0]), bias=float(located[a, 1]))
                found.append((c.t, c.bias, a))
    if found:
        t, bias, atom = min(found)
        return CloudReading(t, bias, atom, peak, "departed")
    formed = bool(np.any(np.nan_to_num(peak, nan=0.0) >= FORMED))
    return CloudReading(math.nan, math.nan, -1, peak, "no departure" if formed else "no metastable phase")


@dataclass(frozen=True)
class PointStats:
    """A point's departure over its clouds: mean (over those that departed), error, spread (the
    standard deviation over seeds; NaN for one cloud), the fraction of clouds that departed."""

    t: float
    error: float
    spread: float
    departed: float


def point_stats(clouds: list[CloudReading]) -> PointStats:
    t = np.array([c.t for c in clouds])
    ok = np.isfinite(t)
    if not ok.any():
        return PointStats(math.nan, math.nan, math.nan, 0.0)
    bias = np.array([c.bias for c in clouds])[ok]
    n = int(ok.sum())
    spread = float(np.std(t[ok], ddof=1)) if n > 1 else math.nan
    # one cloud of several departed: the spread over seeds is unknown, and so is the mean's error
    sem = spread / math.sqrt(n) if n > 1 else (0.0 if len(clouds) == 1 else math.nan)
    grid = float(np.sqrt(np.mean(bias**2)))
    return PointStats(float(np.mean(t[ok])), math.hypot(sem, grid), spread, n / len(clouds))


def assemble(
    kinds: Mapping[str, bool],
    betas: tuple[float, ...],
    Ns: tuple[int, ...],
    seeds: tuple[int, ...],
    parts: Mapping[tuple[str, float, int], xr.Dataset],
    timestep: Mapping[float, float],
) -> xr.Dataset:
    """The run's Dataset from its parts {(kind, beta, N): part}, kinds {name: seeded}: coords init,
    beta, N, seed, atom; seeded (init): whether the kind's clouds are random (one per seed);
    per point t_depart, t_depart_error, t_depart_spread, departed, t_end, horizon, resolution_ratio;
    per cloud t_depart_cloud, t_depart_bias, status; per cloud and atom peak. A deterministic kind's
    one cloud sits at the first seed (NaN and status "" at the others). timestep: beta -> the
    time-step error of its departures (`timestep_error`), added in quadrature to every point's
    t_depart_error at that beta where known, and stored as t_depart_timestep (beta)."""
    import xarray as xr

    shape = (len(kinds), len(betas), len(Ns))
    point = {k: np.full(shape, np.nan) for k in ("t_depart", "t_depart_error", "t_depart_spread", "departed")}
    point.update({k: np.full(shape, np.nan) for k in ("t_end", "horizon", "resolution_ratio")})
    cloud = {k: np.full((*shape, len(seeds)), np.nan) for k in ("t_depart_cloud", "t_depart_bias")}
    status = np.full((*shape, len(seeds)), "", dtype=object)
    peak = np.full((*shape, len(seeds), len(ATOMS)), np.nan)
    for (i, kind), (j, beta), (k, N) in _grid(kinds, betas, Ns):
        part = parts[(kind, beta, N)]
        times = np.asarray(part["time"].values)
        readings = [
            read_cloud(times, part.fraction.values[:, m], _located(part, m))
            for m in range(part.sizes["seed"])
        ]
        stats = point_stats(readings)
        ts = timestep.get(beta, math.nan)
        if math.isfinite(ts) and math.isfinite(stats.error):
            stats = PointStats(stats.t, math.hypot(stats.error, ts), stats.spread, stats.departed)
        names = ("t_depart", "t_depart_error", "t_depart_spread", "departed")
        for name, value in zip(names, _astuple(stats), strict=True):
            point[name][i, j, k] = value
        point["t_end"][i, j, k] = float(times[-1])
        point["horizon"][i, j, k] = float(part.attrs["horizon"])
        point["resolution_ratio"][i, j, k] = float(part.attrs["resolution_ratio"])
        for m, r in enumerate(readings):
            s = seeds.index(int(part["seed"].values[m]))
            cloud["t_depart_cloud"][i, j, k, s], cloud["t_depart_bias"][i, j, k, s] = r.t, r.bias
            status[i, j, k, s] = r.status
            peak[i, j, k, s] = r.peak
    dims, cdims = ("init", "beta", "N"), ("init", "beta", "N", "seed")
    data: DataVariables = {name: (dims, v) for name, v in point.items()}
    data.update({name: (cdims, v) for name, v in cloud.items()})
    data["status"] = (cdims, status.astype(str))
    data["peak"] = ((*cdims, "atom"), peak)
    data["seeded"] = (("init",), np.array(list(kinds.values()), dtype=bool))
    data["t_depart_timestep"] = (("beta",), np.array([timestep.get(b, math.nan) for b in betas]))
    coords = {
        "init": list(kinds),
        "beta": list(betas),
        "N": list(Ns),
        "seed": list(seeds),
        "atom": list(ATOMS),
    }
    return xr.Dataset(data, coords=coords)


def timestep_error(base: xr.Dataset, tight: xr.Dataset) -> float:
    """The time-step error of a point's departure: the largest change over its clouds between the
    run's integrator (part `base`) and a tighter one (part `tight`); 0 where neither departed, NaN
    where one did and the other did not."""
    t0 = [
        read_cloud(np.asarray(base["time"].values), base.fraction.values[:, m], _located(base, m)).t
        for m in range(base.sizes["seed"])
    ]
    t1 = [
        read_cloud(np.asarray(tight["time"].values), tight.fraction.values[:, m], _located(tight, m)).t
        for m in range(tight.sizes["seed"])
    ]
    worst = 0.0
    for a, b in zip(t0, t1, strict=True):
        if math.isfinite(a) != math.isfinite(b):
            return math.nan
        if math.isfinite(a):
            worst = max(worst, abs(a - b))
    return worst


def _astuple(stats: PointStats) -> tuple[float, float, float, float]:
    return stats.t, stats.error, stats.spread, stats.departed


def _grid(
    kinds: Mapping[str, bool], betas: tuple[float, ...], Ns: tuple[int, ...]
) -> Iterator[tuple[tuple[int, str], tuple[int, float], tuple[int, int]]]:
    for i, kind in enumerate(kinds):
        for j, beta in enumerate(betas):
            for k, N in enumerate(Ns):
                yield (i, kind), (j, beta), (k, N)


def _located(part: xr.Dataset, m: int) -> np.ndarray | None:
    """A point part's located departures of cloud m (2, 2), or None (a part written before them)."""
    return part.located.values[m] if "located" in part.variables else None
