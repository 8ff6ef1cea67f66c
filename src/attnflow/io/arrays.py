"""Arrays from .npy / .npz / text files: the weights and tokens given to `attnflow check` and to the
experiments (`load_arrays`), and the digest of an input file's content (`content_digest`).

NumPy files are read with allow_pickle=False, always: a file that holds a pickle (an object array,
or a pickle saved under a NumPy name) is refused in attnflow's words, never with NumPy's advice to
load it unsafely, and a file that is neither NumPy format nor a pickle is called what it is.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np

ARRAY_SUFFIXES = (".npy", ".npz", ".txt", ".csv", ".tsv", ".dat")
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip archive (an empty one)
_PICKLE_PROTOCOLS = range(2, 6)  # b"\x80" then the protocol number
NEVER_PICKLE = "which attnflow never loads (unpickling can run code)"
SAVE_HINT = "save real-valued arrays with numpy.save or numpy.savez"


def _kind(head: bytes) -> str:
    """What a file holds, from its first bytes: "npy", "npz", "pickle" or "other"."""
    if head.startswith(_NPY_MAGIC):
        return "npy"
    if head.startswith(_ZIP_MAGICS):
        return "npz"
    if len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS:
        return "pickle"
    return "other"


def load_arrays(path: str | os.PathLike) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a .npy file, or the arrays of an .npz archive by name (read into memory), never
    unpickling anything. ValueError (one line naming the file) for a pickle, an object array, a file
    that is neither a NumPy array nor an archive of them, or a damaged one."""
    path = Path(path)
    with open(path, "rb") as f:
        kind = _kind(f.read(8))
    if kind == "pickle":
        raise ValueError(f"{path}: a Python pickle, not a NumPy array file, {NEVER_PICKLE}; {SAVE_HINT}")
    if kind == "other":
        raise ValueError(
            f"{path}: not a NumPy array file (neither .npy format nor an .npz archive of arrays); {SAVE_HINT}"
        )
    try:
        if kind == "npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except ValueError as err:
        if "allow_pickle" in str(err):  # NumPy's refusal of an object array, with its advice: not shown
            raise ValueError(
                f"{path}: holds an array of Python objects (a pickle), {NEVER_PICKLE}; {SAVE_HINT}"
            ) from None
        raise ValueError(f"{path}: a damaged NumPy file ({err})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path}: a damaged NumPy file ({type(err).__name__}: {err})") from None


def _read_arrays(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """The array of a .npy or text file, or the arrays of an .npz by name; ValueError naming the file."""
    from .paths import not_a_file

    if (why := not_a_file(path)) is not None:
        raise ValueError(f"{path}: {why}")
    if path.suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .npy, .npz, .txt or .csv")
    if path.suffix in (".npy", ".npz"):
        return load_arrays(path)
    try:
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


# ------------------------------------------------------------------------------------- digests

# digests of large files by (path, size, mtime, ctime, inode): hashed once per process while unchanged
_digests: dict[tuple[str, int, int, int, int], str] = {}
#: files from this size on are hashed once per process while their size and times stay the same (a
#: checkpoint: about 0.1 s per 100 MB); smaller ones (weights .npz) are hashed at every call, so that
#: a rewrite within the file system's time resolution is still seen
CACHE_FROM_BYTES = 16 * 2**20


def content_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of what a file holds: for a NumPy file the arrays themselves (names, dtypes, shapes
    and values, so that re-saving the same arrays does not change it), for any other file its bytes.
    A NumPy file that cannot be read is hashed by its bytes (reading it fails later, with its own
    message)."""
    path = Path(path)
    st = path.stat()
    if st.st_size < CACHE_FROM_BYTES:
        return _arrays_digest(path) or _bytes_digest(path)
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if key not in _digests:
        _digests[key] = _arrays_digest(path) or _bytes_digest(path)
    return _digests[key]


def _bytes_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _arrays_digest(path: Path) -> str | None:
    if path.suffix not in (".npy", ".npz"):
        return None
    try:
        data = load_arrays(path)
    except (OSError, ValueError):
        return None
    arrays = data if isinstance(data, dict) else {"": data}
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()
