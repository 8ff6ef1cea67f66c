"""The units of work of a run: each a part of its run folder (`attnflow.experiments.parts`).

A `Unit` is a name (its part's, e.g. `part_name(beta=10)`), a compute function returning its
Dataset, and a cost: its share of the run's overall progress bar. `Units` runs them for one run: a
unit finished by an earlier run into the same folder is read back (`cached_part`: only when it is
what this run computes), a new one is computed and written there atomically; the bar advances by the
unit's cost and its wall time goes into the run's timings. Every experiment's `run` reads: its
inputs, its units, run them, assemble the Dataset, `finish` (the attrs every result carries).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import Reporter
from .common import base_attrs
from .parts import cached_part, fingerprint, part_done

if TYPE_CHECKING:
    import xarray as xr

    from .config import ExperimentConfig

__all__ = ["Unit", "Units"]


@dataclass(frozen=True)
class Unit:
    """One unit of work: `name`, the name of its part in out/parts; `compute`, () -> its Dataset;
    `cost`, how far the overall bar advances once it is done; `timing`, the key of its wall time (s) in
    the run's attrs["timings"] (None: not timed on its own)."""

    name: str
    compute: Callable[[], xr.Dataset]
    cost: float = 1.0
    timing: str | None = None


class Units:
    """The units of one run of `config`: its folder `out` (None: nothing kept), the fingerprint of its
    parts (the config without `part_keys`, see `parts.fingerprint`), its reporter and the wall time
    of each timed unit (`timings`)."""

    def __init__(
        self,
        config: ExperimentConfig,
        part_keys: Iterable[str],
        out: Path | None,
        reporter: Reporter,
        inputs: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.out = out
        self.reporter = reporter
        self.fp = fingerprint(config, exclude=set(part_keys), inputs=inputs)
        self.timings: dict[str, float] = {}
        self.start = time.perf_counter()
        self.ahead: dict[str, xr.Dataset] = {}  # parts computed ahead by this run's workers, by name

    def plan(self, total: float, description: str) -> None:
        """Start the overall progress bar: `total`, the sum of the costs of the run's units."""
        self.reporter.overall(total, description)

    def run(self, unit: Unit) -> xr.Dataset:
        """The Dataset of `unit`: computed ahead by this run (`ahead`), read back from the run folder,
        else computed and written there; the bar advances by its cost."""
        t0 = time.perf_counter()
        part = self.ahead.pop(unit.name, None)
        if part is None:
            part = cached_part(self.out, unit.name, self.fp, unit.compute, self.reporter)
        if unit.timing is not None:
            self.timings[unit.timing] = time.perf_counter() - t0
        self.reporter.advance(unit.cost)
        return part

    def run_all(self, units: Iterable[Unit]) -> list[xr.Dataset]:
        """The Datasets of `units`, in their order (`run` each)."""
        return [self.run(unit) for unit in units]

    def done(self, name: str) -> bool:
        """Whether the unit `name` would be read back from the run folder rather than computed."""
        return part_done(self.out, name, self.fp)

    def finish(self, ds: xr.Dataset, **extra: object) -> xr.Dataset:
        """ds with the attrs every result carries (`common.base_attrs`): the config, provenance, the
        timings of the units and the run's total, the reporter's warnings, and `extra`."""
        timings = {**self.timings, "total_s": time.perf_counter() - self.start}
        ds.attrs = base_attrs(self.config, self.reporter, timings, **extra)
        return ds
