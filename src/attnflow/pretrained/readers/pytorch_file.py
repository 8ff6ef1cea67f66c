"""PyTorch files (.bin, .pt, .pth): a state dict of tensors, read with ``weights_only=True``.

``torch.load(weights_only=True)`` refuses pickled code; nothing here suggests loading a file any
other way, and torch's own advice to do so is not shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .common import CheckpointError, Found, read_config, tokenizer_next_to

__all__ = ["load", "read", "unwrap_state_dict"]


def load(path: Path) -> dict[str, Any]:
    """All tensors of one PyTorch file (torch tensors)."""
    import torch

    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        # torch's message advises loading with weights_only=False, i.e. running pickled code: not shown
        raise CheckpointError(
            f"checkpoint {path} is not a readable PyTorch state dict of tensors (torch.load with "
            f"weights_only=True refused it: {type(e).__name__})"
        ) from None
    return unwrap_state_dict(obj, str(path))


def unwrap_state_dict(obj: Any, source: str) -> dict[str, Any]:
    """A flat {name: tensor} dict, unwrapping {"state_dict": ...} / {"model": ...} containers."""
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"checkpoint {source} holds a {type(obj).__name__}, not a state dict")
    for wrapper in ("state_dict", "model", "module"):
        if wrapper in obj and isinstance(obj[wrapper], Mapping) and len(obj) <= 4:
            return unwrap_state_dict(obj[wrapper], source)
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not hasattr(v, "shape")]
    if bad:
        raise CheckpointError(f"checkpoint {source} is not a state dict of tensors (entry {bad[0]!r})")
    return dict(obj)


def read(path: Path) -> Found:
    """The tensors of one pytorch file, with config.json and tokenizer.json of its folder."""
    return Found(load(path), read_config(path.parent), tokenizer_next_to(path), "pytorch")
