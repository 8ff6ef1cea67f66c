"""PyTorch files (.bin, .pt, .pth): a state dict of tensors, read with ``weights_only=True``.

``torch.load(weights_only=True)`` refuses pickled code; nothing here suggests loading a file any
other way, and torch's own advice to do so is not shown. Memory is bounded by the file: the records
of a zip-format file may not expand to more than `MAX_EXPANSION` times its size on disk (torch.save
stores them uncompressed; a deflated record is checked before it is inflated), and every tensor's
declared shape must fit the bytes its storage holds (a stride-0 view declaring 20000 x 20000 over
one number is refused before anything is converted).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .common import CheckpointError, Found, Tensor, read_config, tokenizer_next_to

__all__ = ["MAX_EXPANSION", "load", "read", "unwrap_state_dict"]

#: how many times its size on disk the records of a zip-format PyTorch file may expand to (+ 1 MiB)
MAX_EXPANSION = 2


def _mb(n: int) -> str:
    return f"{n / 1e6:.4g} MB"


def _check_zip(path: Path) -> None:
    """CheckpointError when the records of a zip-format file expand beyond MAX_EXPANSION x its size."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return  # the legacy format: its storages are as large as the file
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as z:
            expanded = sum(info.file_size for info in z.infolist())
    except (zipfile.BadZipFile, OSError):
        return  # torch.load says what is wrong with it
    if expanded > MAX_EXPANSION * size + (1 << 20):
        raise CheckpointError(
            f"checkpoint {path}: its records expand to {_mb(expanded)} from {_mb(size)} on disk (compressed "
            "storages); torch.save stores them uncompressed: re-save the state dict with torch.save"
        )


def _check_storages(tensors: Mapping[str, Tensor], source: str) -> None:
    """CheckpointError naming the first tensor whose declared shape needs more bytes than its storage
    holds (a stride-0 or overlapping view: converting it would allocate the declared size)."""
    for name, t in tensors.items():
        if isinstance(t, np.ndarray) or not hasattr(t, "untyped_storage"):  # NumPy: no storage
            continue
        declared, held = t.numel() * t.element_size(), t.untyped_storage().nbytes()
        if declared > held:
            raise CheckpointError(
                f"checkpoint {source}: tensor {name} declares shape {tuple(t.shape)} ({_mb(declared)}) over "
                f"a storage of {held} bytes (strides {tuple(t.stride())}); a state dict holds each "
                "tensor's data"
            )


def load(path: Path) -> dict[str, Tensor]:
    """All tensors of one PyTorch file (torch tensors), their sizes checked against the file."""
    import torch

    _check_zip(path)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:
        # torch's message advises loading with weights_only=False, i.e. running pickled code: not shown
        raise CheckpointError(
            f"checkpoint {path} is not a readable PyTorch state dict of tensors (torch.load with "
            f"weights_only=True refused it: {type(e).__name__})"
        ) from None
    tensors = unwrap_state_dict(obj, str(path))
    _check_storages(tensors, str(path))
    return tensors


def unwrap_state_dict(obj: object, source: str) -> dict[str, Tensor]:
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
