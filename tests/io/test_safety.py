"""attnflow.io against hostile or damaged files: the lock never follows a link, nothing is read or
written through a link out of a folder, plain files are read back only as written, NumPy files never
unpickle, and an input file's digest is of its content."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from attnflow.io import (
    FILES_RECORD,
    OutsideFolderError,
    StoreError,
    content_digest,
    file_problem,
    forget_files,
    inside,
    load_arrays,
    read_array,
    read_checked_text,
    record_files,
    write_checked_text,
)
from attnflow.io.lock import LOCK_FILE, LockedError, check_free, folder_lock, lock_file_problem, lock_holder

# ------------------------------------------------------------------------------------------- lock


def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_FILE).symlink_to(victim)
    with pytest.raises(LockedError, match=r"\.attnflow\.lock is a symbolic link \(to .*victim\.txt\)") as err:
        with folder_lock(folder):
            pass
    assert "\n" not in str(err.value) and victim.read_text() == "keep"
    with pytest.raises(LockedError, match="symbolic link"):
        check_free(folder)
    assert lock_holder(folder) is None and (folder / LOCK_FILE).is_symlink()
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / LOCK_FILE).symlink_to(tmp_path / "would-be-created")
    with pytest.raises(LockedError, match="symbolic link"), folder_lock(dangling):
        pass
    assert not (tmp_path / "would-be-created").exists()


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_that_is_no_regular_file_is_named(tmp_path, kind):
    path = tmp_path / LOCK_FILE
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    problem = lock_file_problem(tmp_path)
    assert problem is not None and str(path) in problem
    assert ("a folder" if kind == "folder" else "not a regular file") in problem
    with pytest.raises(LockedError, match="remove it and rerun"), folder_lock(tmp_path):
        pass
    assert lock_holder(tmp_path) is None  # read without blocking on the FIFO


def test_a_regular_lock_still_works(tmp_path):
    assert lock_file_problem(tmp_path) is None
    with folder_lock(tmp_path):
        assert lock_file_problem(tmp_path) is None and lock_holder(tmp_path)["pid"] == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


# ---------------------------------------------------------------------------------------- inside


def test_inside_follows_links_within_the_folder_and_refuses_links_out(tmp_path):
    folder, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (folder / "parts" / "a.zarr").mkdir(parents=True)
    elsewhere.mkdir()
    (folder / "parts" / "b.zarr").symlink_to(folder / "parts" / "a.zarr")
    assert inside(folder, "parts", "b.zarr") == folder / "parts" / "b.zarr"
    assert inside(folder, "parts", "new.zarr") == folder / "parts" / "new.zarr"  # need not exist
    (folder / "figures").symlink_to(elsewhere)
    with pytest.raises(OutsideFolderError, match=r"figures: is a symbolic link to .*elsewhere") as err:
        inside(folder, "figures", "w2.png")
    assert err.value.path == str(folder / "figures") and err.value.target == str(elsewhere)
    (folder / "parts" / "c.zarr").symlink_to("../../elsewhere")  # relative, and through ..
    with pytest.raises(OutsideFolderError):
        inside(folder, "parts", "c.zarr")
    linked = tmp_path / "linked-run"
    linked.symlink_to(folder)  # the folder itself may be a link: what counts is inside it
    assert inside(linked, "parts", "a.zarr") == linked / "parts" / "a.zarr"
    with pytest.raises(ValueError, match="not one file name"):
        inside(folder, "../escape")


# ---------------------------------------------------------------------------------- plain files


def test_checked_text_reads_back_only_what_was_written(tmp_path):
    path = write_checked_text(tmp_path / "summary.json", '{"t_star": 3.3}\n')
    assert read_checked_text(path) == '{"t_star": 3.3}\n' and file_problem(path) is None
    path.write_text('{"t_star": 9.9}\n')  # the same size: the digest tells
    with pytest.raises(StoreError, match=r"summary\.json: altered"):
        read_checked_text(path)
    path.write_text('{"t_star": 3.3, "x": 1}\n')
    assert "truncated or altered" in file_problem(path)
    (tmp_path / "report.md").write_text("by hand")
    assert "has no checksum" in file_problem(tmp_path / "report.md")
    record_files(tmp_path, ["report.md"])
    assert file_problem(tmp_path / "report.md") is None
    (tmp_path / "report.md").unlink()
    assert file_problem(tmp_path / "report.md") == "missing"
    forget_files(tmp_path, ["report.md"])
    assert "report.md" not in json.loads((tmp_path / FILES_RECORD).read_text())["files"]
    (tmp_path / FILES_RECORD).write_text("{")
    assert "damaged" in file_problem(path)


# ------------------------------------------------------------------------------------ NumPy files

ADVICE = ("allow_pickle", "pickle.load", "If you trust")


def _refusal(path) -> str:
    with pytest.raises(ValueError) as err:
        load_arrays(path)
    text = str(err.value)
    assert text.startswith(str(path)) and "\n" not in text
    assert not any(a in text for a in ADVICE), text
    with pytest.raises(ValueError) as again:
        read_array(path)
    assert str(again.value) == text
    return text


def test_pickles_are_refused_in_attnflows_words(tmp_path):
    for name in ("pickled.npy", "pickled.npz"):
        (tmp_path / name).write_bytes(pickle.dumps({"Q": np.eye(3)}, protocol=4))
        assert "a Python pickle" in _refusal(tmp_path / name)
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "objects.npz", Q=np.array([1, "a"], dtype=object), K=np.eye(3))
    for name in ("objects.npy", "objects.npz"):
        assert "an array of Python objects" in _refusal(tmp_path / name)


def test_junk_is_not_called_a_pickle(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"\x00garbage" * 10)
    (tmp_path / "text.npy").write_text("1 2 3")
    for name in ("junk.npz", "text.npy"):
        text = _refusal(tmp_path / name)
        assert "not a NumPy array file" in text and "pickle" not in text
    np.savez(tmp_path / "cut.npz", Q=np.eye(3))
    data = (tmp_path / "cut.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    assert "damaged NumPy file" in _refusal(tmp_path / "cut.npz")


def test_load_arrays_reads_real_arrays(tmp_path):
    np.savez(tmp_path / "w.npz", Q=np.eye(3), K=2 * np.eye(3))
    data = load_arrays(tmp_path / "w.npz")
    assert sorted(data) == ["K", "Q"] and float(data["K"][0, 0]) == 2.0
    np.save(tmp_path / "x.npy", np.arange(4.0))
    np.testing.assert_array_equal(load_arrays(tmp_path / "x.npy"), np.arange(4.0))


# ---------------------------------------------------------------------------------------- digests


def test_the_digest_of_a_weights_file_is_of_its_arrays(tmp_path):
    Q, K = np.eye(3), np.diag([3.0, 1.0, 1 / 3])
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, Q=Q, K=K)
    np.savez_compressed(b, K=K, Q=Q)  # another zip, the same arrays
    assert content_digest(a) == content_digest(b)
    before = content_digest(a)
    np.savez(a, Q=Q, K=K * (1 + 1e-15))
    assert content_digest(a) != before  # rewritten at once, same size: seen (small files: no cache)
    np.savez(a, Q=Q.astype(np.float32), K=K)
    assert content_digest(a) != before  # the dtype counts
    (tmp_path / "config.json").write_text("{}")
    first = content_digest(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[]")
    assert content_digest(tmp_path / "config.json") != first  # any other file: its bytes


# ------------------------------------------------------------------------------- what a path is


def test_file_kind_names_each_kind_of_path(tmp_path):
    from attnflow.io.paths import REGULAR, file_kind, not_a_file

    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert file_kind(tmp_path / "file") == REGULAR and not_a_file(tmp_path / "file") is None
    assert (
        file_kind(tmp_path / "folder") == "a folder"
        and not_a_file(tmp_path / "folder") == "a folder, not a file"
    )
    assert (
        file_kind(tmp_path / "fifo") == "a FIFO"
        and not_a_file(tmp_path / "fifo") == "a FIFO, not a regular file"
    )
    assert file_kind(tmp_path / "link") == f"a symbolic link (to {tmp_path / 'file'})"
    assert file_kind(tmp_path / "link", follow=True) == REGULAR and not_a_file(tmp_path / "link") is None
    assert file_kind("/dev/null") == "a character device"
    assert file_kind(tmp_path / "absent") == "absent" and not_a_file(tmp_path / "absent") == "no such file"
    assert file_kind(tmp_path / "file" / "below") == "absent"


def test_a_hard_linked_lock_is_refused_and_nothing_written(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    folder = tmp_path / "run"
    folder.mkdir()
    os.link(victim, folder / LOCK_FILE)
    assert "2 hard links" in lock_file_problem(folder)
    with pytest.raises(LockedError, match="2 hard links"), folder_lock(folder):
        pass
    assert victim.read_text() == "keep"
    os.unlink(victim)  # one link left: a lock file like any other
    assert lock_file_problem(folder) is None
    with folder_lock(folder):
        assert lock_holder(folder)["pid"] == os.getpid()
