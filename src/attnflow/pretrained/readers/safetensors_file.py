"""safetensors files: every tensor as a NumPy array (torch where NumPy has no dtype, e.g. bfloat16)."""

from __future__ import annotations

from pathlib import Path

from .common import CheckpointError, Found, Tensor, read_config, require, tokenizer_next_to

__all__ = ["load", "read"]


def load(path: Path) -> dict[str, Tensor]:
    """All tensors of one safetensors file."""
    require("safetensors", f"reading {path.name}")
    from safetensors.numpy import load_file as load_numpy

    try:
        return dict(load_numpy(str(path)))
    except TypeError:  # a dtype NumPy lacks (bfloat16): read the tensors with torch instead
        pass
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is not a readable safetensors file: {e}") from None
    from safetensors.torch import load_file as load_torch

    try:
        return dict(load_torch(str(path)))
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is not a readable safetensors file: {e}") from None


def read(path: Path) -> Found:
    """The tensors of one safetensors file, with config.json and tokenizer.json of its folder."""
    return Found(load(path), read_config(path.parent), tokenizer_next_to(path), "safetensors")
