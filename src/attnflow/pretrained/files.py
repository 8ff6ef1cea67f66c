"""Reading checkpoint files from disk: safetensors and PyTorch weights, shard indexes, config.json.

Only tensors are ever read: PyTorch files go through ``torch.load(weights_only=True)``, which
refuses pickled code, and nothing here suggests loading them any other way.  A shard index may only
name files inside its own folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
WEIGHT_SUFFIXES = (".safetensors", *TORCH_SUFFIXES)
EXPECTED = (
    "a model folder (config.json with model.safetensors or pytorch_model.bin, or a sharded "
    "*.index.json) or a weights file (.safetensors, .bin, .pt, .pth)"
)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, corrupt or incomplete files, or an unknown layout."""


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


def load_file(path: Path) -> dict[str, Any]:
    """All tensors of one safetensors or PyTorch file: NumPy arrays, or torch tensors where NumPy
    has no dtype for them (bfloat16) and for PyTorch files."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} does not exist")
    if path.suffix == ".safetensors":
        return _load_safetensors(path)
    if path.suffix not in TORCH_SUFFIXES:
        raise CheckpointError(f"{path} is not a checkpoint: expected {EXPECTED}")
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


def _load_safetensors(path: Path) -> dict[str, Any]:
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


def shard_path(index: Path, shard: Any) -> Path:
    """The file a shard-index entry names: a relative path inside the index's folder, else refused.

    The check is on the name (no absolute path, no ".."), not on where symbolic links point: the
    Hugging Face cache links shards to blobs elsewhere, and that is fine.
    """
    if not isinstance(shard, str) or not shard:
        raise CheckpointError(f"shard index {index}: shard names must be file names, got {shard!r}")
    name = PurePosixPath(shard.replace("\\", "/"))
    if name.is_absolute() or ".." in name.parts or PureWindowsPath(shard).drive:
        raise CheckpointError(
            f"shard index {index} names {shard!r}, outside the checkpoint folder {index.parent}: "
            "shards must be files in that folder"
        )
    return index.parent / name


def load_sharded(index: Path) -> dict[str, Any]:
    """All tensors of a sharded checkpoint from its *.index.json (its "weight_map")."""
    data = read_json(index, "shard index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f'shard index {index} has no "weight_map" object of tensor -> file')
    shards = {shard: shard_path(index, shard) for shard in set(weight_map.values())}
    tensors: dict[str, Any] = {}
    for shard in sorted(shards):
        tensors.update(load_file(shards[shard]))
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise CheckpointError(
            f"checkpoint {index} is incomplete: {len(missing)} tensors missing, e.g. {missing[0]!r}"
        )
    return tensors


def weights_in(folder: Path) -> Path:
    """The weights file of a model folder: a standard name, else the only weights file there."""
    names = [n for n in WEIGHT_FILES if (folder / n).is_file()]
    if names:
        return folder / names[0]
    others = sorted(p.name for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if len(others) != 1:
        found = f" (found several candidates: {others})" if others else ""
        raise CheckpointError(f"no weights in {folder}: expected one of {', '.join(WEIGHT_FILES)}{found}")
    return folder / others[0]


def from_path(path: Path) -> tuple[dict[str, Any], dict[str, Any], Path | None]:
    """(tensors, config, tokenizer.json or None) from a model folder or a weights file."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist (give {EXPECTED})")
    if path.is_dir():
        folder, weights = path, weights_in(path)
    else:
        folder, weights = path.parent, path
    if weights.name.endswith(".index.json"):
        tensors = load_sharded(weights)
    else:
        tensors = load_file(weights)
    tok = folder / "tokenizer.json"
    return tensors, read_config(folder), tok if tok.is_file() else None


def checkpoint_files(path: Path) -> list[Path]:
    """The files a checkpoint is read from (`from_path`), sorted: its weights file (and the shards a
    shard index names), config.json and tokenizer.json where they are. The content of these decides
    what a run computes from the checkpoint (the fingerprint of its parts)."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist (give {EXPECTED})")
    folder, weights = (path, weights_in(path)) if path.is_dir() else (path.parent, path)
    files = [weights]
    if weights.name.endswith(".index.json"):
        data = read_json(weights, "shard index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if isinstance(weight_map, dict):
            files += [shard_path(weights, s) for s in set(weight_map.values())]
    files += [f for f in (folder / "config.json", folder / "tokenizer.json") if f.is_file()]
    return sorted({f for f in files if f.is_file()})
