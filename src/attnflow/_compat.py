"""The import paths of attnflow 0.1 (`attnflow.sphere`, `attnflow.model`, ...), kept for one release
as aliases of their new homes. `import attnflow.sphere` warns (a DeprecationWarning naming the new
path) and gives the new module itself, so old and new names are the same objects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: old path -> new path (0.1 -> 0.2)
MOVED = {
    "attnflow.model": "attnflow.attention",
    "attnflow.sphere": "attnflow.measures.sphere",
    "attnflow.integrate": "attnflow.dynamics.integrate",
    "attnflow.trajectory": "attnflow.dynamics.trajectory",
    "attnflow.zero_temperature": "attnflow.dynamics.zero_temperature",
    "attnflow.zero_temperature_reference": "attnflow.dynamics.reference",
    "attnflow.separatrix": "attnflow.dynamics.separatrix",
    "attnflow.wasserstein": "attnflow.transport.wasserstein",
    "attnflow.metrics": "attnflow.science.metrics",
    "attnflow.fits": "attnflow.science.fits",
    "attnflow.convergence": "attnflow.science.convergence",
    "attnflow.claims": "attnflow.science.claims",
    "attnflow.assumptions": "attnflow.science.assumptions",
    "attnflow.report": "attnflow.experiments.report",
    "attnflow.verify": "attnflow.sweeps.verify",
    "attnflow.info_cli": "attnflow.cli.info",
    "attnflow.sweep_cli": "attnflow.cli.sweep",
    "attnflow.pretrained_cli": "attnflow.cli.pretrained",
    "attnflow.verify_cli": "attnflow.cli.verify",
    "attnflow.experiments.concentration_levels": "attnflow.experiments.concentration.levels",
    "attnflow.experiments.concentration_figures": "attnflow.experiments.concentration.figures",
    "attnflow.experiments.concentration_presets": "attnflow.experiments.concentration.presets",
}


def moved(old: str) -> ModuleType:
    """The new module of an old path, with the DeprecationWarning that names it."""
    new = MOVED[old]
    message = f"{old} is deprecated: import {new} (the old path goes in attnflow 0.3)"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of MOVED; loads each as its new module (keeping that module's own spec)."""

    def find_spec(self, name: str, path: object = None, target: object = None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = moved(spec.name)
        self._spec = module.__spec__  # the import system sets __spec__ to the alias's: put it back
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec


def install() -> None:
    """Put the alias finder on sys.meta_path (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
