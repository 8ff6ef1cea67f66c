"""The levels every ladder needs, computed ahead on `workers` processes (config `workers` > 1).

A ladder runs its levels one after the other, since whether it needs another depends on the levels
before; but some run whatever they say (init = meanfield: levels 0 and 1 of every beta, and the
time-step probe of the largest), and those are independent.  With `workers` > 1 a run computes
them first, on that many new processes, the costliest first (largest beta, finest level); each
worker rebuilds the run's inputs from its config, reads the zero-temperature part back from the
run folder and writes its part there, as any unit does (`experiments.parts`).  The run then reads
them back and goes on as with one process: the result is the same (each part is computed by the
same code from the same inputs), its parts are this run's (not counted as reused), and an
interrupted run resumes from the parts the workers finished.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ...progress import Reporter
from ..config import ExperimentConfig
from ..parts import cached_part, count_reused

if TYPE_CHECKING:
    import xarray as xr

    from ..units import Unit
    from .strategies import LadderRun, Levels

C = TypeVar("C", bound=ExperimentConfig)
# experiment.prepare: (config, out, reporter, planned) -> (shared, levels, zero part)
Prepare = Callable[[C, Path | None, Reporter, bool], "tuple[LadderRun, Levels, xr.Dataset]"]

__all__ = ["compute_ahead"]


def _ahead_units(shared: LadderRun, levels: Levels) -> list[Unit]:
    """The units computed ahead, the costliest first: by beta, largest first, the probe (its largest
    beta's first level at tighter tolerances) and the finer level before the coarser."""
    top = max(shared.inputs.betas)
    units = []
    for beta in sorted(shared.inputs.betas, reverse=True):
        units.extend(levels.ahead(shared, beta, probe=beta == top))  # the strategy's order: costliest first
    return units


def compute_ahead(
    config: C, workers: int, out: Path, shared: LadderRun, levels: Levels, prepare: Prepare[C]
) -> None:
    """Compute the units every ladder needs on `workers` processes into out/parts, then keep
    them for the run (`Units.ahead`); nothing where fewer than two are left to compute.  prepare:
    the experiment's `prepare`, which each worker calls to rebuild the run's shared inputs."""
    units = shared.units
    todo = [u.name for u in _ahead_units(shared, levels) if not units.done(u.name)]
    if len(todo) < 2:
        return
    n = min(workers, len(todo))
    context = multiprocessing.get_context("spawn")  # a new interpreter: no inherited threads or locks
    with (
        units.reporter.task(f"{len(todo)} levels ahead on {n} processes", total=float(len(todo))) as tick,
        ProcessPoolExecutor(n, mp_context=context) as pool,
    ):
        futures = [pool.submit(compute_one, prepare, config, out, name) for name in todo]
        try:
            for k, done in enumerate(as_completed(futures), 1):
                done.result()
                tick(float(k), float(len(todo)))
        except BrokenProcessPool:
            pool.shutdown(wait=False, cancel_futures=True)
            raise RuntimeError(
                "a worker process of `workers` stopped: a script that runs an experiment with workers > 1 "
                'must do it under `if __name__ == "__main__":` (each worker imports it, as Python\'s '
                "multiprocessing does), and each worker needs the memory of one level"
            ) from None
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    wanted = set(todo)
    with count_reused():  # read back: computed by this run, not by an earlier one
        for unit in _ahead_units(shared, levels):
            if unit.name in wanted:
                units.ahead[unit.name] = cached_part(out, unit.name, units.fp, unit.compute, units.reporter)


def compute_one(prepare: Prepare[C], config: C, out: Path, name: str) -> str:
    """In a worker process: the unit `name` of the run of `config` into out/parts; returns its name."""
    shared, levels, _ = prepare(config, out, Reporter(), False)
    for unit in _ahead_units(shared, levels):
        if unit.name == name:
            shared.units.run(unit)
            return name
    raise ValueError(f"no unit {name!r} is computed ahead in this run")
