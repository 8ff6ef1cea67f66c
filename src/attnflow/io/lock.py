"""One writer per folder: a lock file naming its holder (pid, host, since when, command).

    with folder_lock(out, on_stale=reporter.notice):
        ...  # only this process writes into `out`

The lock is `folder/.attnflow.lock`, held with an exclusive `flock` (POSIX) for as long as the writer
runs and removed when it ends. A second writer gets LockedError naming the holder. A lock left by a
process that died (its flock is free; on this host its pid is gone or reused) is taken over, and
`on_stale` is told. A lock written on another host is not taken over: whether that process still
runs cannot be seen from here, and the message says which file to delete if it does not. Without
`fcntl` (Windows) the lock is the file alone, with the same pid check.

The lock file is opened without following a symbolic link (O_NOFOLLOW) and used only when it is a
regular file with one link: a symbolic link in its place (through which the lock record would
overwrite the file it points to), a hard link (a second name of another file, which the record
would overwrite as well), a folder or a FIFO is a LockedError naming it, and nothing is written.

Standard library only.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .._text import JSON

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_FILE",
    "LockedError",
    "check_free",
    "describe",
    "folder_lock",
    "lock_file_problem",
    "lock_holder",
]

LOCK_FILE = ".attnflow.lock"
# never follow a link; never block on a FIFO; never leak the descriptor into a child process
_OPEN_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class LockedError(ValueError):
    """The folder is being written by another process: `path` (the folder), `holder` (what its lock
    file says: pid, host, since, command), `problem` (one line, without the folder's name)."""

    def __init__(self, path: str | os.PathLike, holder: dict[str, JSON], problem: str) -> None:
        super().__init__(f"{os.fspath(path)}: {problem}")
        self.path, self.holder, self.problem = os.fspath(path), holder, problem


def describe(holder: dict[str, JSON]) -> str:
    """'pid 123 on host h since 2026-01-01T00:00:00+00:00 (attnflow run ...)'."""
    cmd = f" ({holder['command']})" if holder.get("command") else ""
    pid, host, since = (holder.get(k, "?") for k in ("pid", "host", "since"))
    return f"pid {pid} on host {host} since {since}{cmd}"


def _alive(pid: object) -> bool:
    """Whether a process with this pid runs on this host."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _parse(text: str) -> dict[str, JSON]:
    try:
        holder = json.loads(text)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def lock_holder(folder: str | os.PathLike) -> dict[str, JSON] | None:
    """What the lock file of `folder` says, when a live writer holds it; None when the folder is free
    (no lock file, or one left by a process that died)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:  # absent, or a link (no lock: `lock_file_problem` says what is wrong)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        holder = _parse(os.read(fd, 1 << 16).decode("utf-8", "replace"))
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return holder or {"pid": "?"}  # held (its record may not be written yet)
            fcntl.flock(fd, fcntl.LOCK_UN)
            live = False
        else:
            live = _alive(holder.get("pid"))
        # a free lock of another host: that process may still run there (no flock across hosts)
        return holder if holder and (live or holder.get("host") != socket.gethostname()) else None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file (a FIFO, socket or device)"


def _bad_lock(path: Path, mode: int, links: int = 1) -> str:
    """Why `path`, of this mode and number of hard links, cannot be the lock file, and the fix."""
    what = f"a file with {links} hard links (another file's name too)" if stat.S_ISREG(mode) else _kind(mode)
    if stat.S_ISLNK(mode):
        what += f" (to {os.readlink(path)})"
    return (
        f"its lock file {path} is {what}, where attnflow keeps a regular file of its own; "
        "nothing was written: remove it and rerun"
    )


def lock_file_problem(folder: str | os.PathLike) -> str | None:
    """Why the lock file of `folder` cannot be used (a symbolic or hard link, a folder, a FIFO...), or
    None when it is absent or a regular file of one link. Reads only (lstat: a link is not followed)."""
    path = Path(folder) / LOCK_FILE
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return None if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else _bad_lock(path, st.st_mode, st.st_nlink)


def check_free(folder: str | os.PathLike) -> None:
    """LockedError naming the holder when a live process holds the lock of `folder`, or naming the lock
    file when it is not a regular file. Reads only."""
    problem = lock_file_problem(folder)
    if problem is not None:
        raise LockedError(folder, {}, problem)
    holder = lock_holder(folder)
    if holder is not None:
        raise LockedError(folder, holder, _busy(holder, Path(folder) / LOCK_FILE))


def _me() -> dict[str, JSON]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300] if sys.argv else "",
    }


def _acquire(path: Path, on_stale: Callable[[str], None] | None) -> int:
    """The open, locked lock file `path` with this process's record in it (its descriptor)."""
    for _ in range(20):  # a new try when the file was replaced between open and lock
        fd = _open_lock(path)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _parse(os.read(fd, 1 << 16).decode("utf-8", "replace"))
                    raise LockedError(path.parent, holder, _busy(holder, path, live=True)) from None
                try:
                    if os.fstat(fd).st_ino != os.stat(path).st_ino:
                        os.close(fd)
                        continue  # the holder removed it as we opened it: lock the new one
                except FileNotFoundError:
                    os.close(fd)
                    continue
            holder = _parse(os.read(fd, 1 << 16).decode("utf-8", "replace"))
            if holder:
                here = holder.get("host") == socket.gethostname()
                if not here or (fcntl is None and _alive(holder.get("pid"))):
                    raise LockedError(path.parent, holder, _busy(holder, path))
                if on_stale is not None:
                    on_stale(f"{path.parent}: took over the lock of {describe(holder)}, which no longer runs")
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(_me()).encode())
            os.fsync(fd)
            return fd
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
    raise LockedError(path.parent, {}, "its lock file keeps changing; another writer is starting there")


def _open_lock(path: Path) -> int:
    """The lock file opened for writing (created if absent), never through a symbolic link and only
    when it is a regular file of one link; LockedError naming it otherwise."""
    problem = lock_file_problem(path.parent)  # a link or a folder: refused before any open
    if problem is not None:
        raise LockedError(path.parent, {}, problem)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
    except OSError as err:  # replaced by a link or a folder since: ELOOP, EISDIR
        mode = os.lstat(path).st_mode if os.path.lexists(path) else stat.S_IFREG
        if stat.S_ISREG(mode):
            raise
        raise LockedError(path.parent, {}, _bad_lock(path, mode)) from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a hard link made since the check
        os.close(fd)
        raise LockedError(path.parent, {}, _bad_lock(path, st.st_mode, st.st_nlink))
    return fd


def _busy(holder: dict[str, JSON], path: Path, live: bool = False) -> str:
    """Why a folder is taken, and what to do. live: its flock is held (the holder runs)."""
    if not live and holder.get("host", socket.gethostname()) != socket.gethostname():
        return (
            f"its lock {path} is held by {describe(holder)}, which may still run there; if it does not, "
            "delete the lock file and rerun"
        )
    return (
        f"in use by another attnflow process: {describe(holder)}; wait for it to finish, or use another "
        "folder"
    )


@contextmanager
def folder_lock(folder: str | os.PathLike, on_stale: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock of `folder` (which must exist) for the duration of the block; LockedError naming
    the holder when another live process holds it. The lock file is removed at the end."""
    path = Path(folder) / LOCK_FILE
    fd = _acquire(path, on_stale)
    try:
        yield
    finally:
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                path.unlink()  # before the flock is released: no one locks a file about to vanish
        except OSError:
            pass
        os.close(fd)
