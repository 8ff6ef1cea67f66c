"""Work a kernel did on a state, kept for the next call on the very same tensors: the cluster
kernel's plans and the truncated kernel's geometry and trees on its keys, which `kernel="auto"`
computes to price them and the kernel it picks then takes instead of computing them again.

An entry belongs to live tensors (weak references, so it never keeps a state alive) at their
versions (torch counts every in-place write), and to a key of everything else the work depends on:
another tensor, one modified in place, or other settings miss.  At most SIZE entries, the oldest
dropped first.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SIZE = 4

Tensors = tuple["torch.Tensor | None", ...]
Refs = tuple["weakref.ref[torch.Tensor] | None", ...]

_entries: list[tuple[Refs, tuple[int, ...], Hashable, object]] = []
_lock = threading.Lock()


def _refs(tensors: Tensors) -> tuple[Refs, tuple[int, ...]]:
    """Weak references (None for None) and versions (-1 for None) of the tensors."""
    refs = tuple(None if t is None else weakref.ref(t) for t in tensors)
    versions = tuple(-1 if t is None else int(t._version) for t in tensors)
    return refs, versions


def _matches(refs: Refs, versions: tuple[int, ...], tensors: Tensors) -> bool:
    if len(refs) != len(tensors):
        return False
    for ref, version, t in zip(refs, versions, tensors, strict=True):
        if t is None or ref is None:
            if (t is None) != (ref is None):
                return False
        elif ref() is not t or int(t._version) != version:
            return False
    return True


def get(tensors: Tensors, key: Hashable) -> object | None:
    """The value stored for these tensors (by identity, unmodified since) and key, or None (the
    caller knows the type of what it stored under its key)."""
    with _lock:
        for refs, versions, k, value in reversed(_entries):
            if k == key and _matches(refs, versions, tensors):
                return value
    return None


def put(tensors: Tensors, key: Hashable, value: object) -> None:
    """Keep `value` for these tensors (torch tensors or None) as they are now and `key`."""
    refs, versions = _refs(tensors)
    with _lock:  # drop the entries this one replaces and those whose tensors are gone
        _entries[:] = [
            e
            for e in _entries
            if (e[2] != key or not _matches(e[0], e[1], tensors))
            and all(r is None or r() is not None for r in e[0])
        ]
        _entries.append((refs, versions, key, value))
        del _entries[:-SIZE]


def clear() -> None:
    """Forget every entry."""
    with _lock:
        _entries.clear()
