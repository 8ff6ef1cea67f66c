"""Model folders and shard indexes: which file of a folder holds the weights, and which reader
reads it.  A shard index may only name files inside its own folder."""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from .common import CheckpointError, Found, Tensor, read_config, read_json, tokenizer_next_to
from .registry import READERS, WEIGHT_FILES, reader_for

__all__ = ["EXPECTED", "WEIGHT_FILES", "checkpoint_files", "read_path", "shard_path", "weights_in"]

SUFFIXES = tuple(s for r in READERS.values() for s in r.suffixes)
_FOLDER_NAMES = " or ".join(r.folder_files[0] for r in READERS.values() if r.folder_files)
EXPECTED = (
    f"a model folder (config.json with {_FOLDER_NAMES}, or a sharded *.index.json) or a weights file "
    f"({', '.join(SUFFIXES)})"
)


def shard_path(index: Path, shard: object) -> Path:
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


def _read_sharded(index: Path) -> Found:
    """All tensors of a sharded checkpoint from its *.index.json (its "weight_map")."""
    data = read_json(index, "shard index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f'shard index {index} has no "weight_map" object of tensor -> file')
    shards = {shard: shard_path(index, shard) for shard in set(weight_map.values())}
    tensors: dict[str, Tensor] = {}
    fmt = "?"
    for shard in sorted(shards):
        found = _read_file(shards[shard])
        tensors.update(found.tensors)
        fmt = found.fmt
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise CheckpointError(
            f"checkpoint {index} is incomplete: {len(missing)} tensors missing, e.g. {missing[0]!r}"
        )
    return Found(tensors, read_config(index.parent), tokenizer_next_to(index), fmt)


def weights_in(folder: Path) -> Path:
    """The weights file of a model folder: a standard name, else the only weights file there."""
    names = [n for n in WEIGHT_FILES if (folder / n).is_file()]
    if names:
        return folder / names[0]
    others = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in SUFFIXES)
    if len(others) != 1:
        found = f" (found several candidates: {others})" if others else ""
        raise CheckpointError(f"no weights in {folder}: expected one of {', '.join(WEIGHT_FILES)}{found}")
    return folder / others[0]


def _read_file(path: Path) -> Found:
    from ...io.paths import not_a_file

    if (why := not_a_file(path)) is not None:
        raise CheckpointError(
            f"checkpoint file {path} {'does not exist' if why == 'no such file' else 'is ' + why}"
        )
    reader = reader_for(path)
    if reader is None:
        raise CheckpointError(f"{path} is not a checkpoint: expected {EXPECTED}")
    return reader.read(path)


def read_path(path: Path) -> Found:
    """What the reader of its format finds in a model folder or a weights file."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist (give {EXPECTED})")
    weights = weights_in(path) if path.is_dir() else path
    if weights.name.endswith(".index.json"):
        return _read_sharded(weights)
    return _read_file(weights)


def checkpoint_files(path: Path) -> list[Path]:
    """The files a checkpoint is read from (`read_path`), sorted: its weights file (and the shards a
    shard index names), config.json and tokenizer.json where they are. Their content decides what a
    run computes from the checkpoint (the fingerprint of its parts)."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist (give {EXPECTED})")
    weights = weights_in(path) if path.is_dir() else path
    files = [weights, weights.parent / "config.json"]
    if weights.name.endswith(".index.json"):
        data = read_json(weights, "shard index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if isinstance(weight_map, dict):
            files += [shard_path(weights, s) for s in set(weight_map.values())]
    tok = tokenizer_next_to(weights)
    return sorted({f for f in [*files, *([tok] if tok else [])] if f.is_file()})
