"""Arrays from .npy / .npz / text files: the weights and tokens given to `attnflow check`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

ARRAY_SUFFIXES = (".npy", ".npz", ".txt", ".csv", ".tsv", ".dat")


def _read_arrays(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a .npy or text file, or the arrays of an .npz by name; ValueError naming the file."""
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    if path.suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .npy, .npz, .txt or .csv")
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if path.suffix == ".npz":
            return dict(np.load(path, allow_pickle=False))
        return np.loadtxt(path, delimiter="," if path.suffix == ".csv" else None, ndmin=2)
    except (ValueError, OSError) as err:
        raise ValueError(f"{path}: cannot read an array ({err})") from None


def read_array(path: str | os.PathLike, name: str = "array") -> np.ndarray:
    """One array from a .npy, an .npz holding one array, or a text file (.txt, .csv, .tsv, .dat).

    name: what the array is, for the message when an .npz holds several.
    """
    path = Path(path)
    data = _read_arrays(path)
    if isinstance(data, dict):
        if len(data) != 1:
            raise ValueError(f"{path}: an .npz for {name} must hold one array, found {sorted(data)}")
        data = next(iter(data.values()))
    return data


def load_matrices(files: list[Path]) -> dict[str, np.ndarray]:
    """Q, K, V from three files (see `read_array`) or from one .npz holding arrays named Q, K, V.

    Raises ValueError naming the file on an unreadable file, a missing key or a non-square matrix.
    """
    from .._checks import check_matrix

    if len(files) == 1:
        data = _read_arrays(Path(files[0]))
        if not isinstance(data, dict) or not {"Q", "K", "V"} <= set(data):
            raise ValueError(f"{files[0]}: a single file must be an .npz holding arrays named Q, K and V")
        named = [(f"{files[0]}[{k}]", k, data[k]) for k in ("Q", "K", "V")]
    elif len(files) == 3:
        named = [(str(p), k, read_array(p, k)) for p, k in zip(files, ("Q", "K", "V"), strict=True)]
    else:
        raise ValueError(
            f"give Q, K and V as three files, or one .npz holding Q, K, V (got {len(files)} files)"
        )
    out: dict[str, np.ndarray] = {}
    d = None
    for label, key, M in named:
        try:
            out[key] = check_matrix(M, key, d)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{label}: {err}") from None
        d = out[key].shape[0]
    return out
