"""What every reader shares: the error types, the record a reader returns, JSON and config files.

A reader turns one file (or a model folder) into a `Found`: tensors by name, the model's config as
a dict in Hugging Face's key names, the tokenizer if one ships with it, and notes on what reading
did to the weights (dequantised, found through the graph).  Tensors may be read lazily.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

__all__ = [
    "EXTRA_HINT",
    "CheckpointError",
    "Found",
    "LazyTensors",
    "MissingExtra",
    "Tensor",
    "read_config",
    "read_json",
    "require",
    "tokenizer_next_to",
]

EXTRA_HINT = 'pip install "attnflow[pretrained]"'

#: a tensor as a reader gives it: NumPy, or torch where NumPy has no dtype (bfloat16) or the file is torch's
Tensor: TypeAlias = "np.ndarray | torch.Tensor"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupt or incomplete files, or an unknown layout."""


class MissingExtra(CheckpointError):
    """A package of the `pretrained` extra is not installed; the message says how to install it."""


def require(package: str, what: str) -> ModuleType:
    """Import `package` (needed for `what`), or MissingExtra naming the install command."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise MissingExtra(
            f"{what} needs the {package} package of the pretrained extra: {EXTRA_HINT}"
        ) from None


@dataclass(frozen=True)
class Found:
    """What a reader found in a checkpoint file or folder.

    tensors: name -> array (NumPy or torch; possibly read on access).  config: the model's
    hyperparameters in Hugging Face key names ({} if none).  tokenizer: a tokenizer.json path, a
    `tokenizers.Tokenizer`, or None.  fmt: the reader's name.  notes: what reading did to the
    weights, for the report (e.g. "quantised Q4_1, dequantised to float32").  token_names: the
    vocabulary as strings when the file has one (to show ids as tokens), else None.
    """

    tensors: Mapping[str, Tensor]
    config: dict[str, Any]
    tokenizer: Tokenizer | Path | None
    fmt: str
    notes: tuple[str, ...] = ()
    token_names: list[str] | None = field(default=None, repr=False)


class LazyTensors(Mapping[str, Tensor]):
    """A read-only mapping of tensor names to arrays made on access by `load(name)`; `rows(name,
    index)` makes only those rows of a matrix when the reader can (`load_rows`), the whole tensor
    indexed otherwise (an embedding's rows for a few tokens, not all of it)."""

    def __init__(
        self,
        names: list[str],
        load: Callable[[str], Tensor],
        load_rows: Callable[[str, np.ndarray], Tensor] | None = None,
        shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self._names = list(names)
        self._set = set(names)
        self._load = load
        self._load_rows = load_rows
        self._shapes = shapes

    def shape(self, name: str) -> tuple[int, ...]:
        """The tensor's shape, from the file's header where the reader knows it (not read)."""
        if self._shapes is not None and name in self._shapes:
            return self._shapes[name]
        return tuple(self[name].shape)

    def rows(self, name: str, index: np.ndarray) -> Tensor:
        if name not in self._set:
            raise KeyError(name)
        return self._load(name)[index] if self._load_rows is None else self._load_rows(name, index)

    def __getitem__(self, name: str) -> Tensor:
        if name not in self._set:
            raise KeyError(name)
        return self._load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._set


def read_json(path: Path, what: str) -> Any:
    """The JSON value in `path`; CheckpointError (one line, naming the file) when it is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise CheckpointError(f"{what} {path} is nested too deeply to be a checkpoint file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{what} {path} is not valid JSON ({e})") from None


def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder as a dict; {} when there is none."""
    path = folder / "config.json"
    if not path.is_file():
        return {}
    cfg = read_json(path, "config")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"config {path} must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def tokenizer_next_to(path: Path) -> Path | None:
    """tokenizer.json in the folder of `path` (or in `path` itself when it is a folder), or None."""
    folder = path if path.is_dir() else path.parent
    tok = folder / "tokenizer.json"
    return tok if tok.is_file() else None
