"""Paths inside a folder: what a run folder or a sweep store reads, writes or removes stays inside it.

    path = inside(out, "parts", "beta=10.zarr")   # out/parts/beta=10.zarr, or OutsideFolderError

A symbolic link that resolves inside the folder is followed; one that leads outside it (a link
planted in a folder received from someone else, aimed at a file of the user's) is refused with one
line naming the link and its target, before anything is read or written through it.

`file_kind(path)` names what a path is ("a regular file", "a folder", "a FIFO", "a symbolic link
(to ...)", ...), so that a path that is no regular file is called what it is, not "no such file".

Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["REGULAR", "OutsideFolderError", "file_kind", "inside", "link_out", "not_a_file"]

REGULAR = "a regular file"
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(path: str | os.PathLike) -> str | None:
    """None when `path` is a regular file (through a link); else why it cannot be read as one: "no
    such file", "a folder, not a file", "a FIFO, not a regular file" ..."""
    kind = file_kind(path, follow=True)
    if kind == REGULAR:
        return None
    if kind == "absent":
        return "no such file"
    return f"{kind}, not a file" if kind == "a folder" else f"{kind}, not a regular file"


def file_kind(path: str | os.PathLike, follow: bool = False) -> str:
    """What `path` is: REGULAR, "a folder", "a FIFO", "a socket", "a character device", "a block
    device", "a symbolic link (to T)" (follow=False: the link itself is named) or "absent"."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(os.fspath(path))})"
    if stat.S_ISREG(mode):
        return REGULAR
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class OutsideFolderError(ValueError):
    """`path` (in `folder`) is, or passes through, a symbolic link to `target`, outside `folder`."""

    def __init__(self, path: str | os.PathLike, target: str | os.PathLike, folder: str | os.PathLike) -> None:
        self.path, self.target, self.folder = os.fspath(path), os.fspath(target), os.fspath(folder)
        self.problem = (
            f"is a symbolic link to {self.target}, outside {self.folder}; attnflow reads and writes only "
            "inside its folder: remove the link (or copy what it points to into the folder)"
        )
        super().__init__(f"{self.path}: {self.problem}")


def link_out(folder: str | os.PathLike, *names: str) -> OutsideFolderError | None:
    """The error `inside(folder, *names)` would raise, or None: the first symbolic link on the way
    from `folder` to folder/names... that resolves outside `folder` (the folder itself may be a link)."""
    root = Path(folder).resolve()
    path = Path(folder)
    for name in names:
        path = path / name
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root):
                return OutsideFolderError(path, target, folder)
    return None


def inside(folder: str | os.PathLike, *names: str) -> Path:
    """folder/names... (names: one path component each); OutsideFolderError when it is, or passes
    through, a symbolic link that resolves outside `folder`."""
    for name in names:
        if not name or name in (".", "..") or "/" in name or os.sep in name:
            raise ValueError(f"{name!r} is not one file name inside {os.fspath(folder)}")
    err = link_out(folder, *names)
    if err is not None:
        raise err
    return Path(folder, *names)
