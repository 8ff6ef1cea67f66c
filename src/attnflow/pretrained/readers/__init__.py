"""Checkpoint readers by format, one module each behind one interface: ``read(path) -> Found``.

`READERS` names them (safetensors, pytorch, gguf, onnx); `read_path` reads a model folder or a
weights file with the reader of its format.  `common` holds the record (`Found`) and the errors.
"""

from .common import EXTRA_HINT, CheckpointError, Found, LazyTensors, MissingExtra, require
from .folder import EXPECTED, WEIGHT_FILES, checkpoint_files, read_path, shard_path, weights_in
from .pytorch_file import unwrap_state_dict
from .registry import READERS, Reader, reader_for

__all__ = [
    "EXPECTED",
    "EXTRA_HINT",
    "READERS",
    "WEIGHT_FILES",
    "CheckpointError",
    "Found",
    "LazyTensors",
    "MissingExtra",
    "Reader",
    "checkpoint_files",
    "read_path",
    "reader_for",
    "require",
    "shard_path",
    "unwrap_state_dict",
    "weights_in",
]
