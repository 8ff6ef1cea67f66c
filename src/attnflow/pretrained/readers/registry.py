"""READERS: checkpoint formats by name, each a module with ``read(path) -> Found``.

A new format is one module in this folder and one line here.  The modules are imported only when
a file of their format is read, so that an absent optional package costs nothing until then.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from .common import Found

__all__ = ["READERS", "Reader", "reader_for"]


@dataclass(frozen=True)
class Reader:
    """One checkpoint format: its name, the file suffixes it reads, its module and what it needs."""

    name: str
    suffixes: tuple[str, ...]
    module: str
    needs: str
    description: str

    def read(self, path: Path) -> Found:
        """Read the file `path` (a `Found`); CheckpointError when it cannot be used."""
        return importlib.import_module(f"{__package__}.{self.module}").read(path)


READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader(
            "safetensors", (".safetensors",), "safetensors_file", "safetensors", "Hugging Face safetensors"
        ),
        Reader(
            "pytorch", (".bin", ".pt", ".pth"), "pytorch_file", "torch", "PyTorch state dicts (tensors only)"
        ),
        Reader("gguf", (".gguf",), "gguf_file", "gguf", "GGUF (llama.cpp), quantised weights dequantised"),
        Reader("onnx", (".onnx",), "onnx_graph", "onnx", "ONNX graphs, weights found from the attention ops"),
    )
}


def reader_for(path: Path) -> Reader | None:
    """The reader of a file, by its suffix; None when no reader takes it."""
    suffix = path.suffix.lower()
    return next((r for r in READERS.values() if suffix in r.suffixes), None)
