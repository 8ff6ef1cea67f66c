"""READERS: checkpoint formats by name, each a module with ``read(path) -> Found``.

A new format is one module in this folder and one line here: what it needs is read from that line
(its package, checked before its module is imported; the file names of a model folder, `WEIGHT_FILES`;
the suffixes a weights file may have; whether such a file is a model on its own, as an installed
checkpoint package may ship it).  The modules are imported only when a file of their format is read,
so that an absent optional package costs nothing until then.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from .common import Found, require

__all__ = ["READERS", "SELF_DESCRIBING", "WEIGHT_FILES", "Reader", "reader_for"]


@dataclass(frozen=True)
class Reader:
    """One checkpoint format: its name, the file suffixes it reads, its module in this folder, the
    package it needs (core, or of the pretrained extra), a description, the names of its weights
    file in a model folder (config.json beside it; a shard index `<name>.index.json`), and whether
    one such file is a model on its own (it carries its config)."""

    name: str
    suffixes: tuple[str, ...]
    module: str
    needs: str
    description: str
    folder_files: tuple[str, ...] = ()
    own_config: bool = False

    def read(self, path: Path) -> Found:
        """Read the file `path` (a `Found`); CheckpointError when it cannot be used (MissingExtra
        where the package it needs is absent)."""
        require(self.needs, f"reading {path.name}")
        return importlib.import_module(f"{__package__}.{self.module}").read(path)


READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader(
            "safetensors", (".safetensors",), "safetensors_file", "safetensors", "Hugging Face safetensors",
            folder_files=("model.safetensors", "model.safetensors.index.json"),
        ),
        Reader(
            "pytorch", (".bin", ".pt", ".pth"), "pytorch_file", "torch", "PyTorch state dicts (tensors only)",
            folder_files=("pytorch_model.bin", "pytorch_model.bin.index.json"),
        ),
        Reader(
            "gguf", (".gguf",), "gguf_file", "gguf", "GGUF (llama.cpp), quantised weights dequantised",
            own_config=True,
        ),
        Reader(
            "onnx", (".onnx",), "onnx_graph", "onnx", "ONNX graphs, weights found from the attention ops",
            own_config=True,
        ),
    )
}  # fmt: skip

#: the names of the weights file in a model folder, in the order they are looked for
WEIGHT_FILES = tuple(n for r in READERS.values() for n in r.folder_files)
#: the suffixes of the weights files that are a model on their own (they carry their config)
SELF_DESCRIBING = tuple(s for r in READERS.values() if r.own_config for s in r.suffixes)


def reader_for(path: Path) -> Reader | None:
    """The reader of a file, by its suffix; None when no reader takes it."""
    suffix = path.suffix.lower()
    return next((r for r in READERS.values() if suffix in r.suffixes), None)
