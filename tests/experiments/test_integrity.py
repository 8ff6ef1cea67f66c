"""Fault injection: stored results are right or refused, one writer per folder, checks before writing.

Each case of the fault probe gets its expected outcome: a deleted, truncated or zeroed chunk (in a
part, a result, a sweep point), truncated metadata and sweep.json, concurrent runs and sweeps, a
poisoned grid, a read-only or foreign folder, seed = -1, a huge time grid; resume is bit-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import xarray as xr
from pydantic import BaseModel, ConfigDict, Field

import attnflow as af
from attnflow.experiments import ConfigError, load_config, run_experiment
from attnflow.io import (
    CHECKSUM_FILE,
    StoreError,
    dataset_problems,
    read_dataset,
    verify_dataset,
    write_checksums,
    write_dataset,
)
from attnflow.io.lock import LOCK_FILE, LockedError, folder_lock, lock_holder
from attnflow.sweeps import SweepError, open_sweep, show_sweep, sweep, sweep_info
from attnflow.sweeps.verify import verify_folder
from cli_helpers import TINY, invoke
from events import HANG_S, gated_cli, wait_for

DAMAGES = ["delete", "truncate", "zero"]


def has(text: str, needle: str) -> bool:
    """`needle` in `text`, whatever the line wrapping (Rich wraps long messages)."""
    return "".join(needle.split()) in "".join(text.split())


def errors(text: str) -> list[str]:
    """The lines of a command's output that are not warnings (a tiny run warns about its t_max)."""
    return [line for line in text.strip().splitlines() if not line.startswith("attnflow: warning:")]


def clean_error(result, code: int, *needles: str) -> str:
    """The output of a command that exited with `code`, named each needle and printed no traceback."""
    text = result.output  # stdout and stderr
    assert result.exit_code == code, text
    assert "Traceback" not in text
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), text
    for n in needles:
        assert has(text, n), f"{n!r} not in {text!r}"
    return text


def damage(var: Path, how: str) -> Path:
    """Delete, truncate or zero the first chunk file of the variable folder `var`; returns the file."""
    chunk = sorted(p for p in var.iterdir() if not p.name.startswith("."))[0]
    data = chunk.read_bytes()
    if how == "delete":
        chunk.unlink()
    elif how == "truncate":
        chunk.write_bytes(data[: len(data) // 2])
    else:
        chunk.write_bytes(bytes(len(data)))
    return chunk


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `folder` with its size and mtime (to prove nothing changed)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
        for p in [folder, *folder.rglob("*")]
    }


def _ds(scale: float = 1.0) -> xr.Dataset:
    return xr.Dataset(
        {
            "w2": (("beta", "time"), scale * np.arange(6.0).reshape(2, 3)),
            "x": (("beta", "token", "dim"), np.ones((2, 4, 3), dtype=np.float32)),
        },
        coords={"beta": [10.0, 100.0], "time": [0.0, 0.5, 1.0]},
        attrs={"experiment": "concentration"},
    )


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    return int(done.stdout)


def copy_run(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    return out


# ------------------------------------------------------------------------------ verified storage


def test_checksums_are_written_and_a_sound_store_verifies(tmp_path):
    path = write_dataset(_ds(), tmp_path / "r.zarr")
    record = json.loads((path / CHECKSUM_FILE).read_text())
    files = set(record["files"])
    assert {".zmetadata", "w2/.zarray", "w2/0.0"} <= files and CHECKSUM_FILE not in files
    assert dataset_problems(path) == []
    xr.testing.assert_identical(read_dataset(path), _ds())
    with xr.open_zarr(path) as plain:  # any xarray still reads it
        xr.testing.assert_identical(plain.load(), _ds())


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_chunk_is_named_never_read_as_nan(tmp_path, how):
    path = write_dataset(_ds(), tmp_path / "r.zarr")
    chunk = damage(path / "w2", how)
    problems = dataset_problems(path)
    assert [f for f, _ in problems] == [str(chunk)]
    with pytest.raises(StoreError, match=r"w2/0\.0") as info:
        read_dataset(path)
    assert info.value.path == str(chunk)
    assert {"delete": "missing", "truncate": "truncated", "zero": "altered"}[how] in info.value.problem


def test_truncated_metadata_and_a_foreign_file_are_named(tmp_path):
    path = write_dataset(_ds(), tmp_path / "r.zarr")
    meta = path / ".zmetadata"
    meta.write_bytes(meta.read_bytes()[:100])
    with pytest.raises(StoreError, match=r"\.zmetadata: 100 bytes"):
        read_dataset(path, load=False)
    other = write_dataset(_ds(), tmp_path / "s.zarr")
    (other / "w2" / "9.9").write_bytes(b"x")
    assert dataset_problems(other) == [(f"{other}/w2/9.9", "not part of the store as written")]


def test_a_store_without_checksums_is_refused_unless_verify_is_off(tmp_path):
    path = tmp_path / "plain.zarr"
    _ds().to_zarr(path, zarr_format=2, consolidated=True)
    with pytest.raises(StoreError, match="no checksums"):
        read_dataset(path)
    xr.testing.assert_identical(read_dataset(path, verify=False), _ds())
    # unverified and damaged: zarr's error (here a JSONDecodeError) becomes one line naming the store
    meta = path / ".zmetadata"
    meta.write_bytes(meta.read_bytes()[:100])
    with pytest.raises(StoreError, match=r"plain\.zarr: cannot be read"):
        read_dataset(path, verify=False)


def test_fsspec_url_stores_have_checksums_too(tmp_path):
    url = f"file://{tmp_path}/u.zarr"
    _ds().to_zarr(url, zarr_format=2, consolidated=True, storage_options={"auto_mkdir": True})
    write_checksums(url)
    assert dataset_problems(url) == []
    (tmp_path / "u.zarr" / "w2" / "0.0").unlink()
    with pytest.raises(StoreError, match=r"w2/0\.0: missing"):
        verify_dataset(url)


@pytest.mark.slow
def test_checksum_cost_on_a_large_result(tmp_path):
    """N = 65536 tokens kept at 121 times (95 MB of float32): the checksums agree and name a chunk.

    (Timings are not asserted; measured: 0.09-0.12 s of hashing next to 0.5-0.7 s of writing.)"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 121, 65536, 3)).astype(np.float32)
    ds = xr.Dataset({"x": (("beta", "time", "token", "dim"), x)})
    path = write_dataset(ds, tmp_path / "big.zarr")
    assert dataset_problems(path) == []
    damage(path / "x", "zero")
    assert len(dataset_problems(path)) == 1


# ------------------------------------------------------------------------------- damaged runs


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_part_is_recomputed_to_the_bit(finished, tmp_path, how):
    """Rerunning a finished run whose part lost a chunk gives the same result, NaN-free, to the bit
    (the small fixed-step run recomputes its whole batch of betas), with a warning naming the part."""
    out = copy_run(finished, tmp_path)
    before = read_dataset(out / "result.zarr")
    damage(out / "parts" / "beta=10_N=24.zarr" / "w2", how)
    damage(out / "parts" / "beta=20_N=24.zarr" / "x", how)
    assert clean_error(invoke("verify", str(out)), 1, "beta=10_N=24.zarr/w2/0.0", "beta=20_N=24.zarr/x/")
    result = invoke("run", *TINY, "--out", str(out), "--quiet", "--no-figures")
    assert result.exit_code == 0, result.output
    assert has(result.output, "part beta=10_N=24 is damaged") and has(result.output, "recomputing it")
    after = read_dataset(out / "result.zarr")
    assert not any(bool(after[v].isnull().any()) for v in ("w2", "x", "t_star"))
    for v in before.data_vars:
        np.testing.assert_array_equal(after[v].values, before[v].values)
    assert invoke("verify", str(out)).exit_code == 0


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_result_is_refused_by_show_and_plot(finished, tmp_path, how):
    out = copy_run(finished, tmp_path)
    chunk = damage(out / "result.zarr" / "w2", how)
    for cmd in ("show", "plot"):
        text = clean_error(invoke(cmd, str(out)), 1, str(chunk), "rerun `attnflow run")
        assert len(text.strip().splitlines()) == 1
    assert clean_error(invoke("verify", str(out)), 1, str(chunk))


def test_truncated_metadata_in_show_is_one_line(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    meta = out / "result.zarr" / ".zmetadata"
    meta.write_bytes(meta.read_bytes()[:50])
    clean_error(invoke("show", str(out)), 1, str(meta), "truncated")


def test_rerun_rebuilds_a_damaged_result(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    before = read_dataset(out / "result.zarr")
    damage(out / "result.zarr" / "x", "delete")
    assert invoke("run", str(out / "config.toml"), "--out", str(out), "-q", "--no-figures").exit_code == 0
    xr.testing.assert_identical(read_dataset(out / "result.zarr").drop_attrs(), before.drop_attrs())


def test_verify_exit_codes(finished, tmp_path):
    result = invoke("verify", str(finished))
    assert result.exit_code == 0 and "run ok" in result.output
    clean_error(invoke("verify", str(tmp_path)), 2, "not an attnflow run folder")
    assert verify_folder(finished).kind == "run"


# ------------------------------------------------------------------------------ run folders


def test_a_foreign_folder_is_refused_and_left_untouched(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("keep me")
    (folder / "data").mkdir()
    before = snapshot(folder)
    clean_error(invoke("run", *TINY, "--out", str(folder), "-q"), 2, "holds no attnflow run", "thesis.tex")
    clean_error(invoke("run", *TINY, "--out", str(folder), "-q", "--overwrite"), 2, "holds no attnflow run")
    assert snapshot(folder) == before


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_hidden_files_do_not_make_a_folder_foreign_an_unreadable_config_is_named(finished, tmp_path):
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / ".DS_Store").write_bytes(b"\0")
    assert invoke("run", *TINY, "--out", str(folder), "-q", "--no-figures").exit_code == 0
    out = copy_run(finished, tmp_path)
    (out / "config.toml").write_text("N = [")
    text = clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, "config.toml cannot be read")
    # the advice resumes from the parts (removing the broken file), never --overwrite, which deletes them
    assert has(text, f"delete {out / 'config.toml'}") and "--overwrite" not in text
    (out / "config.toml").unlink()
    ds = run_experiment(load_config(TINY[0], [s for s in TINY[1:] if s != "--set"]), out)
    # nothing recomputed: zero, two betas and the time-step probe
    assert json.loads(ds.attrs["provenance"])["wall_time_s"]["n_reused_parts"] == 4
    assert invoke("run", *TINY, "--out", str(out), "-q", "--no-figures", "--overwrite").exit_code == 0


def test_another_experiment_is_refused_and_overwrite_replaces_it(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    (out / "figures").mkdir()
    (out / "figures" / "w2.png").write_bytes(b"old figure")
    (out / "report.md").write_text("old report")
    (out / "notes.txt").write_text("the user's")
    before = snapshot(out)
    clean_error(
        invoke("run", "terminal-tiny", "--set", "N=24", "--out", str(out), "-q", "--no-figures"),
        2,
        "holds a run of 'concentration'",
        "--overwrite",
    )
    assert snapshot(out) == before
    args = ["run", "terminal-tiny", "--set", "N=24", "--set", "t_max=2.0", "--out", str(out), "-q"]
    result = invoke(*args, "--no-figures", "--overwrite")
    assert result.exit_code == 0, result.output
    assert read_dataset(out / "result.zarr").attrs["experiment"] == "terminal"
    assert not (out / "figures").exists() and not (out / "report.md").exists()
    assert sorted(p.name for p in (out / "parts").iterdir()) == ["beta=10.zarr", "beta=30.zarr"]
    assert (out / "notes.txt").read_text() == "the user's"


def test_other_parameters_are_refused_more_betas_extend(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    clean_error(invoke("run", *TINY, "--set", "seed=7", "--out", str(out), "-q"), 2, "seed = 0 there, 7 here")
    (out / "report.md").write_text("report of two betas")
    more = invoke("run", *TINY, "--set", "betas=[10, 15, 20]", "--out", str(out), "-q", "--no-figures")
    assert more.exit_code == 0, more.output
    assert read_dataset(out / "result.zarr").sizes["beta"] == 3
    assert not (out / "report.md").exists()  # drawn from the previous result: removed


def test_a_second_writer_is_refused_naming_the_holder(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    with folder_lock(out):
        holder = lock_holder(out)
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        text = clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, f"pid {os.getpid()}", "since")
        assert "in use by another attnflow process" in text
        with pytest.raises(LockedError, match="in use"):
            run_experiment(load_config(str(out / "config.toml")), out)
    assert not (out / LOCK_FILE).exists()


def test_a_stale_lock_is_taken_over_with_a_message(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    pid = dead_pid()
    stale = {"pid": pid, "host": socket.gethostname(), "since": "2026-01-01T00:00:00+00:00"}
    (out / LOCK_FILE).write_text(json.dumps(stale))
    assert lock_holder(out) is None
    result = invoke("run", *TINY, "--out", str(out), "-q", "--no-figures")
    assert result.exit_code == 0, result.output
    assert has(result.output, f"took over the lock of pid {pid}")
    assert not (out / LOCK_FILE).exists()
    # a lock written on another host is not taken over: the message says which file to delete
    (out / LOCK_FILE).write_text(json.dumps({**stale, "host": "elsewhere"}))
    clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, "host elsewhere", str(out / LOCK_FILE))


@pytest.mark.slow
def test_two_concurrent_runs_one_is_refused(tmp_path):
    """Two processes run into one folder: the second exits 2 naming the first; the folder holds one run.
    The first run's simulations wait at a gate until the second has been refused: it holds the lock
    all that time, at any load."""
    out = tmp_path / "both"
    args = ["run", *TINY, "--set", "N=96", "--set", "t_max=5.0", "--out", str(out), "-q", "--no-figures"]
    env = {**os.environ, "PYTHONPATH": str(Path(af.__file__).parents[1])}
    gated, gate = gated_cli(tmp_path, free=0)
    first = subprocess.Popen([*gated, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: lock_holder(out) is not None, "the first run's lock", first)
        assert lock_holder(out)["pid"] == first.pid
        other = [*TINY, "--set", "seed=7"]
        second = subprocess.run(
            [sys.executable, "-m", "attnflow.cli", "run", *other, "--out", str(out), "-q"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
    finally:
        gate.open()
        first.wait(timeout=HANG_S)
    assert first.returncode == 0, first.stdout.read().decode() if first.stdout else ""
    config = load_config(str(out / "config.toml"))
    assert config.N == 96 and config.seed == 0
    assert json.loads(read_dataset(out / "result.zarr").attrs["config"])["N"] == 96


def test_read_only_folder_gives_a_true_message(finished, tmp_path, monkeypatch):
    out = copy_run(finished, tmp_path)
    if os.geteuid() != 0:  # a real read-only folder (root writes anyway)
        out.chmod(0o555)
        try:
            text = clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, "not writable")
        finally:
            out.chmod(0o755)
        assert "finished parts are kept" not in text
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    text = clean_error(invoke("run", *TINY, "--out", str(tmp_path / "new"), "-q"), 2, "not writable")
    assert "finished parts are kept" not in text and not (tmp_path / "new").exists()


def test_permission_denied_mid_run_names_the_file(tmp_path, monkeypatch):
    import attnflow.io as io

    def refuse(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(io, "atomic_write_text", refuse)
    text = clean_error(
        invoke("run", *TINY, "--out", str(tmp_path / "r"), "-q"), 1, "config.toml", "permission"
    )
    assert "finished parts are kept" not in text


def test_provenance_sums_wall_time_over_resumes(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    shutil.rmtree(out / "parts" / "beta=20_N=24.zarr")
    ds = run_experiment(load_config(str(out / "config.toml")), out)
    prov = json.loads(ds.attrs["provenance"])
    wall = prov["wall_time_s"]
    assert wall["n_reused_parts"] == 3  # zero, beta=10 and the time-step probe; beta=20 recomputed
    reused = ("zero", "beta=10_N=24", "beta=20_N=24_timestep")
    parts = [read_dataset(out / "parts" / f"{n}.zarr").attrs["wall_s"] for n in reused]
    assert wall["reused_parts"] == pytest.approx(sum(parts))
    assert wall["total"] == pytest.approx(wall["this_run"] + wall["reused_parts"])
    assert prov["torch_threads"] == 1 and prov["device"] == "cpu"


# ------------------------------------------------------- links, inputs, names and summaries


def test_a_symlinked_lock_never_writes_the_file_it_points_to(tmp_path):
    """A lock planted as a link (a folder received from someone else) is refused before anything is
    written: the file it points to keeps its content, and no part is computed."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(victim)
    result = invoke("run", *TINY, "--out", str(out), "-q")
    assert len(errors(clean_error(result, 2, str(out / LOCK_FILE), "symbolic link"))) == 1
    assert victim.read_text() == "the user's file" and not (out / "parts").exists()
    with pytest.raises(LockedError, match="symbolic link"), folder_lock(out):
        pass
    assert victim.read_text() == "the user's file" and lock_holder(out) is None


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_that_is_no_regular_file_is_named_before_computing(tmp_path, kind):
    out = tmp_path / "run"
    out.mkdir()
    if kind == "folder":
        (out / LOCK_FILE).mkdir()
    else:
        os.mkfifo(out / LOCK_FILE)  # opening it for writing would block without O_NONBLOCK
    why = "a folder" if kind == "folder" else "not a regular file"
    clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, str(out / LOCK_FILE), why)
    assert not (out / "parts").exists()


@pytest.mark.parametrize("name", ["parts", "figures", "result.zarr", "summary.json"])
def test_a_link_out_of_the_folder_is_refused_before_computing(tmp_path, name):
    out, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / name).symlink_to(elsewhere if name != "summary.json" else elsewhere / "s.json")
    text = clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, str(out / name), str(elsewhere))
    assert "symbolic link" in text and len(errors(text)) == 1
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == [name]


def test_a_part_linked_out_of_the_folder_is_refused(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    outside = tmp_path / "outside.zarr"
    shutil.move(out / "parts" / "beta=10_N=24.zarr", outside)
    (out / "parts" / "beta=10_N=24.zarr").symlink_to(outside)
    before = snapshot(outside)
    link = out / "parts" / "beta=10_N=24.zarr"
    clean_error(invoke("run", *TINY, "--out", str(out), "-q", "--no-figures"), 2, str(link), "symbolic link")
    clean_error(invoke("verify", str(out)), 1, str(link), "outside")
    assert snapshot(outside) == before


def test_overwrite_deletes_nothing_before_its_checks_pass(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.png").write_bytes(b"png")
    (out / "figures").symlink_to(elsewhere)
    before = snapshot(out)
    args = ["run", "terminal-tiny", "--set", "N=24", "--out", str(out), "-q", "--overwrite"]
    clean_error(invoke(*args), 2, str(out / "figures"), "symbolic link")
    assert snapshot(out) == before and (out / "config.toml").exists()
    assert (elsewhere / "keep.png").read_bytes() == b"png"


def _weights(path: Path, scale: float = 1.0) -> Path:
    att = af.worked_example(1.0, d=3)
    np.savez(path, Q=att.Q, K=att.K, V=scale * att.V)
    return path


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_an_edited_weights_file_recomputes_every_part(tmp_path):
    """The parts' fingerprint covers the arrays of the weights file, not only its name: a rerun
    after the file changed recomputes (with a warning naming the part) and equals a clean run."""
    w = _weights(tmp_path / "w.npz")
    args = [*TINY, "--set", f"weights={w}", "-q", "--no-figures"]
    out = tmp_path / "run"
    assert invoke("run", *args, "--out", str(out)).exit_code == 0
    old = read_dataset(out / "result.zarr")
    _weights(w, scale=1.5)
    result = invoke("run", *args, "--out", str(out))
    assert result.exit_code == 0, result.output
    for name in ("zero", "beta=10_N=24", "beta=20_N=24", "beta=20_N=24_timestep"):
        assert has(result.output, f"part {name} is not what this run computes")
    assert has(result.output, "the content of its input (weights) has changed")
    clean = tmp_path / "clean"
    assert invoke("run", *args, "--out", str(clean)).exit_code == 0
    new, fresh = read_dataset(out / "result.zarr"), read_dataset(clean / "result.zarr")
    for v in ("w2", "x", "t_star", "min_w2"):
        np.testing.assert_array_equal(new[v].values, fresh[v].values)
    assert not np.array_equal(new.w2.values, old.w2.values)
    # re-saving the same arrays (a new zip, same content) reuses them
    _weights(w, scale=1.5)
    again = run_experiment(load_config(str(out / "config.toml")), out)
    assert json.loads(again.attrs["provenance"])["wall_time_s"]["n_reused_parts"] == 4  # with the probe


def test_an_edited_checkpoint_recomputes_the_heads_parts(tmp_path):
    """heads: the fingerprint covers every file the checkpoint is read from."""
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from attnflow.experiments.parts import input_digests
    from checkpoints import write_checkpoint

    ckpt, out = tmp_path / "bert", tmp_path / "run"
    write_checkpoint(ckpt)
    config = load_config("heads-tiny", [f"checkpoint={ckpt}", "text='the cat sat on the mat'", "heads=[0]"])
    first = run_experiment(config, out)
    before = input_digests(config)["checkpoint"]
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text())  # rewritten, same bytes
    assert input_digests(config)["checkpoint"] == before
    write_checkpoint(ckpt, seed=1)  # other weights under the same names
    assert input_digests(config)["checkpoint"] != before
    reporter = af.progress.Reporter()
    again = run_experiment(config, out, progress=reporter)
    changed = [w for w in reporter.warnings if "the content of its input (checkpoint) has changed" in w]
    assert len(changed) == 2  # the whole layer and head 0
    assert not np.array_equal(again.w2_pi_S.values, first.w2_pi_S.values)


def test_swapped_parts_are_not_reused_under_each_others_names(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    before = read_dataset(out / "result.zarr")
    a, b = out / "parts" / "beta=10_N=24.zarr", out / "parts" / "beta=20_N=24.zarr"
    a.rename(tmp_path / "a")
    b.rename(a)
    (tmp_path / "a").rename(b)
    result = invoke("run", *TINY, "--out", str(out), "-q", "--no-figures")
    assert result.exit_code == 0, result.output
    for name, other in (("beta=10_N=24", "beta=20_N=24"), ("beta=20_N=24", "beta=10_N=24")):
        assert has(result.output, f"part {name} is not what this run computes: it holds the part {other}")
    after = read_dataset(out / "result.zarr")
    for v in before.data_vars:
        np.testing.assert_array_equal(after[v].values, before[v].values)


EDITS = {  # a file of a finished run, a string in it, what it becomes, and the ways of showing it
    "summary.json": ('"resolution_ratio": ', '"resolution_ratio": 9', (["show"], ["show", "--json"])),
    "summary.md": ("| N |", "| N (edited) |", (["show"],)),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_an_edited_summary_is_named_by_verify_and_refused_by_show(finished, tmp_path, name):
    out = copy_run(finished, tmp_path)
    path, (old, new, shows) = out / name, EDITS[name]
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    clean_error(invoke("verify", str(out)), 1, str(path), "altered")
    for show in shows:
        shown = clean_error(invoke(*show, str(out)), 1, str(path), "rerun `attnflow run")
        assert new not in shown and len(errors(shown)) == 1
    assert invoke("run", *TINY, "--out", str(out), "-q", "--no-figures").exit_code == 0
    assert invoke("verify", str(out)).exit_code == 0 and new not in path.read_text()


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_an_edited_report_is_named_and_an_unrecorded_summary_too(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    assert invoke("plot", str(out), "-q").exit_code == 0
    assert invoke("verify", str(out)).exit_code == 0
    (out / "report.md").write_text((out / "report.md").read_text() + "\nedited")
    clean_error(invoke("verify", str(out)), 1, str(out / "report.md"), "attnflow plot")
    (out / ".attnflow-files.json").unlink()  # a summary nobody can vouch for
    clean_error(invoke("show", str(out)), 1, "summary.", "has no checksum")


def test_a_lock_taken_over_is_told_but_not_stored_with_the_result(finished, tmp_path):
    out = copy_run(finished, tmp_path)
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "since": "2026-01-01T00:00:00+00:00"}
    (out / LOCK_FILE).write_text(json.dumps(stale))
    result = invoke("run", *TINY, "--out", str(out), "-q", "--no-figures")
    assert result.exit_code == 0 and has(result.output, "took over the lock")
    stored = json.loads(read_dataset(out / "result.zarr").attrs["warnings"])
    before = json.loads(read_dataset(finished / "result.zarr").attrs["warnings"])
    assert stored == before and not any("took over" in w for w in stored)
    assert "took over" not in (out / "summary.json").read_text()


def test_a_failed_extend_leaves_config_and_result_agreeing(finished, tmp_path, monkeypatch):
    """A full disk while the extended result is written: config.toml still describes the result
    there (verify ok), and the rerun completes the extension from the parts."""
    import attnflow.io as io

    out = copy_run(finished, tmp_path)
    real = io.write_dataset

    def full_disk(ds, path):
        if Path(path).name == "result.zarr":
            raise OSError(28, "No space left on device", str(path))
        return real(ds, path)

    monkeypatch.setattr(io, "write_dataset", full_disk)
    more = [*TINY, "--set", "betas=[10, 15, 20]", "--out", str(out), "-q", "--no-figures"]
    assert invoke("run", *more).exit_code == 1
    assert load_config(str(out / "config.toml")).betas == [10.0, 20.0]
    assert invoke("verify", str(out)).exit_code == 0
    monkeypatch.setattr(io, "write_dataset", real)
    assert invoke("run", *more).exit_code == 0
    assert read_dataset(out / "result.zarr").sizes["beta"] == 3
    # a config.toml that asks for another run than the result holds is named
    (out / "config.toml").write_text((out / "config.toml").read_text().replace("seed = 0", "seed = 3"))
    clean_error(invoke("verify", str(out)), 1, "asks for another run", "seed = 3 there, 0 in the result")


def test_weights_without_a_spectral_gap_are_an_assumption_failure_of_the_run(tmp_path):
    w = tmp_path / "nogap.npz"
    np.savez(w, Q=np.eye(3), K=np.eye(3), V=np.eye(3))
    out = tmp_path / "run"
    result = invoke("run", *TINY, "--set", f"weights={w}", "--out", str(out), "-q", "--no-figures")
    assert result.exit_code == 0, result.output
    assert has(result.output, "fail assumption 1 of the theorem") and has(result.output, "no spectral gap")
    warnings = json.loads((out / "summary.json").read_text())["warnings"]
    assert any("no spectral gap" in w and "say nothing about concentration" in w for w in warnings)
    assert invoke("show", str(out)).output.count("no spectral gap") >= 1


# --------------------------------------------------------------------------- checks at config time


def test_seed_and_time_grid_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="seed"):
        load_config("concentration", ["seed=-1"])
    with pytest.raises(ConfigError, match=r"t_max = 1e\+09 and dt_save = 1e-09") as info:
        load_config("concentration", ["t_max=1e9", "dt_save=1e-9"])
    assert "GiB" in str(info.value) and "MemoryError" not in str(info.value)
    for sets in (["seed=-1"], ["t_max=1e9", "dt_save=1e-9"]):
        args = [a for s in sets for a in ("--set", s)]
        clean_error(invoke("run", *TINY, *args, "--out", str(tmp_path / "r")), 2, sets[0].split("=")[0])
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        af.sample_uniform(10, 3, seed=-1)


# ------------------------------------------------------------------------------------ sweeps


class ToyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    experiment: Literal["toy"] = "toy"
    beta: float = Field(1.0, gt=0, description="inverse temperature")
    seed: int = Field(0, description="seed")


TIMES = np.linspace(0.0, 1.0, 5)


def run_toy(c: ToyConfig) -> xr.Dataset:
    return xr.Dataset(
        {"w2": (("time",), np.exp(-TIMES * c.beta) + c.seed), "t_star": ((), 1.0 / c.beta)},
        coords={"time": TIMES},
    )


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as c,
    ):
        yield c


def toy_sweep(client, store, grid=None, **kw):
    grid = grid or {"beta": [1.0, 2.0], "seed": [0, 1]}
    return sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_toy, progress=False, **kw)


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_sweep_point_is_reported_then_recomputed(client, tmp_path, how):
    store = tmp_path / "store"
    assert toy_sweep(client, store).ok
    chunk = damage(store / "points" / "beta=2_seed=1.zarr" / "w2", how)
    assert sweep_info(store)["entries"]["beta=2_seed=1"]["status"] == "pending"
    assert has(show_sweep(store), f"DAMAGED beta=2_seed=1: {chunk}")
    with pytest.raises(StoreError, match="rerun the sweep") as info:
        open_sweep(store)
    assert info.value.path == str(chunk)
    clean_error(invoke("verify", str(store)), 1, str(chunk))
    again = toy_sweep(client, store)
    assert again.ran == ["beta=2_seed=1"] and len(again.skipped) == 3
    assert any(str(chunk) in w for w in again.warnings)
    ds = open_sweep(store)
    assert bool(ds.attrs["complete"]) and not bool(ds.w2.isnull().any())
    np.testing.assert_array_equal(ds.w2.sel(beta=2.0, seed=1).values, np.exp(-2 * TIMES) + 1)


def test_a_damaged_done_record_is_recomputed(client, tmp_path):
    store = tmp_path / "store"
    toy_sweep(client, store, {"seed": [0, 1]})
    done = store / "points" / "seed=1.done"
    done.write_text(done.read_text()[:10])
    assert has(show_sweep(store), "DAMAGED seed=1")
    assert toy_sweep(client, store, {"seed": [0, 1]}).ran == ["seed=1"]


def test_truncated_sweep_json_is_named(client, tmp_path):
    store = tmp_path / "store"
    toy_sweep(client, store, {"seed": [0]})
    meta = store / "sweep.json"
    meta.write_text(meta.read_text()[:40])
    clean_error(invoke("show", str(store)), 2, str(meta), "restore it")
    with pytest.raises(SweepError, match=r"sweep\.json is damaged"):
        toy_sweep(client, store, {"seed": [0]})
    clean_error(invoke("verify", str(store)), 1, str(meta))


@pytest.mark.parametrize("bad", [[10.0, "3000x"], [10.0, -1.0]])
def test_a_poisoned_grid_leaves_the_store_usable(client, tmp_path, bad):
    store = tmp_path / "store"
    toy_sweep(client, store, {"beta": [10.0, 100.0]})
    before = snapshot(store)
    with pytest.raises(ValueError, match="grid point"):
        toy_sweep(client, store, {"beta": [*bad, 100.0]})
    assert snapshot(store) == before
    res = toy_sweep(client, store, {"beta": [10.0, 100.0, 1000.0]})
    assert res.ok and res.ran == ["beta=1000"]
    assert open_sweep(store).beta.dtype == np.float64
    # a new store with a bad grid is not even created
    with pytest.raises(ValueError, match="grid point"):
        toy_sweep(client, tmp_path / "new", {"beta": bad})
    assert not (tmp_path / "new").exists()


def test_a_poisoned_grid_on_the_command_line_exits_2_and_the_store_still_runs(tmp_path):
    store = tmp_path / "s"
    sets = ["N=16", "t_max=0.5", "integrator=rk4", "dt=0.1", "n_keep=2"]
    base = ["sweep", "concentration", *(a for s in sets for a in ("--set", s))]
    base += ["--workers", "1", "-q", "--no-figures", "--out", str(store)]
    clean_error(invoke(*base, "--grid", "beta=10,-1"), 2, "grid point")
    assert not store.exists()


def test_a_second_sweep_client_is_refused_and_leaves_no_debris(client, tmp_path):
    store = tmp_path / "store"
    toy_sweep(client, store, {"seed": [0]})
    with folder_lock(store):
        with pytest.raises(SweepError, match=f"pid {os.getpid()}"):
            toy_sweep(client, store, {"seed": [0, 1]})
    # an attempt that finds its point committed by another removes the parts it made
    from attnflow.sweeps import run_point

    work = store / "work" / "seed=0" / "parts"
    work.mkdir(parents=True)
    rec = run_point(ToyConfig(), {"seed": 0}, "seed=0", str(store), run_toy)
    assert rec["reused"] and not (store / "work" / "seed=0").exists()


def test_a_foreign_folder_is_no_sweep_store(client, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("keep me")
    before = snapshot(folder)
    with pytest.raises(SweepError, match="not a sweep store"):
        toy_sweep(client, folder, {"seed": [0]})
    assert snapshot(folder) == before


def test_a_stale_sweep_lock_is_taken_over(client, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "since": "x"}
    (store / LOCK_FILE).write_text(json.dumps(stale))
    res = toy_sweep(client, store, {"seed": [0]})
    assert res.ok and any("took over the lock" in w for w in res.warnings)
    assert not (store / LOCK_FILE).exists()
