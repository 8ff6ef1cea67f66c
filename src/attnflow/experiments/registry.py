"""What an experiment is: the `Experiment` record every experiment module ends with, and ConfigError.

Standard library only, so that the command line and `attnflow.experiments` import it without
pydantic, NumPy or any experiment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..progress import Reporter

__all__ = ["ConfigError", "Experiment", "doc_summary"]


class ConfigError(ValueError):
    """A config that cannot be used: unknown key, wrong type or value, unreadable file."""


@dataclass(frozen=True)
class Experiment:
    """A named experiment: everything the command line, the report and the sweeps need of it.

    Attributes
    ----------
    name : str
        What `attnflow run NAME` and `config.experiment` say (e.g. "zero-temperature").
    description : str
        One line for `attnflow list`.
    Config : type
        Its pydantic config (a subclass of `_config.ExperimentConfig` with a field
        `experiment: Literal[name] = name`; every field defaulted and described).
    run : callable
        run(config, out, progress) -> xarray.Dataset: out (Path or None) is the run folder for
        resumable parts (`_config.cached_part`); progress a `Reporter` or None. The Dataset carries
        attrs["experiment"] = name.
    summarize : callable
        summarize(ds) -> dict: the headline numbers (JSON-able) of a result.
    figures : callable
        figures(ds, outdir, *, dpi, animation) -> list[Path]: draws the run's figures into outdir
        (PNG before PDF per figure; with animation=True also the token animation where there is one).
    captions : dict
        {file stem: (title, caption)} of those figures, used by the report.
    presets : dict
        {preset name: {config key: value}}, run as `attnflow run PRESET`.
    sweep_figures : callable or None
        sweep_figures(ds, outdir, *, dpi) -> list[Path]: the figures of a sweep's Dataset (grid keys
        as extra dims); None: the generic `attnflow.plot.plot_sweep`.
    part_keys : tuple of str
        Config fields that only choose which parts a run computes (e.g. "betas"); they are left out of
        the parts' fingerprint. A rerun into the same folder may change them and reuses the parts it
        shares; a change of any other field makes another run, refused there unless
        `run_experiment(..., overwrite=True)`.
    sweep_columns : tuple of str
        The one-element variables of a grid point's Dataset that a sweep's table shows first (e.g. a
        point's convergence status and resolution ratio); () for none in particular.
    """

    name: str
    description: str
    Config: type[BaseModel]
    run: Callable[[Any, Path | None, Reporter | None], Any]
    summarize: Callable[[Any], dict[str, Any]]
    figures: Callable[..., list[Path]]
    captions: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sweep_figures: Callable[..., list[Path]] | None = None
    part_keys: tuple[str, ...] = ()
    sweep_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"Experiment name must be a non-empty string, got {self.name!r}")
        for key in ("run", "summarize", "figures"):
            if not callable(getattr(self, key)):
                raise TypeError(
                    f"Experiment {self.name!r}: {key} must be callable, got {getattr(self, key)!r}"
                )
        if self.sweep_figures is not None and not callable(self.sweep_figures):
            raise TypeError(f"Experiment {self.name!r}: sweep_figures must be callable or None")
        bad = [k for k, v in self.captions.items() if not (isinstance(v, tuple) and len(v) == 2)]
        if bad:
            raise TypeError(f"Experiment {self.name!r}: captions[{bad[0]!r}] must be a (title, caption) pair")
        fields = getattr(self.Config, "model_fields", {})
        if not isinstance(self.part_keys, tuple) or any(k not in fields for k in self.part_keys):
            raise TypeError(f"Experiment {self.name!r}: part_keys must be a tuple of config fields")
        if not isinstance(self.sweep_columns, tuple) or not all(
            isinstance(c, str) for c in self.sweep_columns
        ):
            raise TypeError(f"Experiment {self.name!r}: sweep_columns must be a tuple of variable names")
        if "experiment" not in fields:
            raise TypeError(
                f"Experiment {self.name!r}: Config must be a pydantic model with a field `experiment`"
            )


def doc_summary(doc: str | None) -> str:
    """The first paragraph of a module docstring as one line, without a leading "`name`: "."""
    first = (doc or "").strip().split("\n\n")[0].replace("\n", " ")
    return first.split(": ", 1)[1] if first.startswith("`") and ": " in first else first
