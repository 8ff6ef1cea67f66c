"""The fault probe of issue 35: links and hard links in a run folder, copied summaries, files replaced
by folders, hostile checkpoints, API input the command line refuses, and a finished result replaced
by another run. Each failure is one line (exit 2 for bad input, 1 for a damaged folder), no
traceback, and nothing outside the folder is written or read."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnflow.io.lock import LOCK_FILE
from cli_helpers import TINY, invoke


def one_line(result, code: int, *needles: str) -> str:
    """The command exited `code` with one "attnflow..." line on stderr holding every needle."""
    assert result.exit_code == code, result.output
    for text in ("Traceback", ".py:"):
        assert text not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnflow"), result.stderr
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished tiny run."""
    out = tmp_path / "run"
    shutil.copytree(finished, out, symlinks=True)
    return out


# ----------------------------------------------------------------------- links in and out of a folder


def test_a_hard_linked_lock_is_refused_and_the_file_it_shares_untouched(run, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.link(victim, run / LOCK_FILE)
    result = invoke("run", *TINY, "--out", str(run), "-q", "--no-figures")
    one_line(result, 2, LOCK_FILE, "2 hard links")
    assert victim.read_text() == "keep"
    result = invoke("verify", str(run))
    assert result.exit_code == 1 and "2 hard links" in result.output


def _store_files(run):
    """One chunk, the metadata and the checksums of result.zarr and of a part, and the file record."""
    part = sorted((run / "parts").glob("*.zarr"))[0]
    chunk = next(p for p in sorted((run / "result.zarr").rglob("*")) if p.is_file() and p.name[0].isdigit())
    names = [".zmetadata", ".zattrs", ".attnflow-checksums.json"]
    stores = [*(run / "result.zarr" / n for n in names), *(part / n for n in names)]
    return [chunk, *stores, run / ".attnflow-files.json"]


@pytest.mark.parametrize("index", range(8))
def test_a_file_inside_a_store_linked_out_is_named_and_not_read(run, tmp_path, index):
    path = _store_files(run)[index]
    outside, data = tmp_path / "outside", path.read_bytes()
    outside.write_bytes(data)  # the same bytes: only the link is wrong
    path.unlink()
    path.symlink_to(outside)
    result = invoke("verify", str(run))
    assert result.exit_code == 1, result.output
    assert f"{path}: is a symbolic link (to {outside})" in result.output
    if "parts" in path.parts:  # the part is recomputed, never reused through the link
        result = invoke("run", *TINY, "--out", str(run), "--no-figures")
        assert result.exit_code == 0, result.output
        assert "is damaged" in result.stderr and "symbolic link" in result.stderr
        assert not path.is_symlink() and invoke("verify", str(run)).exit_code == 0
    else:
        one_line(invoke("show", str(run)), 1, str(path), "symbolic link")
    assert outside.read_bytes() == data


def test_show_refuses_a_summary_linked_out(run, tmp_path):
    outside = tmp_path / "summary.md"
    outside.write_bytes((run / "summary.md").read_bytes())
    (run / "summary.md").unlink()
    (run / "summary.md").symlink_to(outside)
    one_line(invoke("show", str(run)), 1, "summary.md", "symbolic link")


NAMES = [
    "config.toml", "summary.json", "summary.md", ".attnflow-files.json", "result.zarr/.zmetadata",
    "result.zarr/.zattrs", "result.zarr/.attnflow-checksums.json", "result.zarr/.zgroup", "PART/.zmetadata",
    "PART/.attnflow-checksums.json", "PART/.zattrs", LOCK_FILE,
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_a_file_replaced_by_a_folder_is_named_by_verify_and_show(run, name):
    part = sorted((run / "parts").glob("*.zarr"))[0]
    path = run / name.replace("PART", f"parts/{part.name}")
    if path.exists():
        path.unlink()
    path.mkdir()
    (path / "x").write_text("x")
    result = invoke("verify", str(run))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{path}" in result.output
    result = invoke("show", str(run))
    assert "Traceback" not in result.output and result.exit_code in (0, 1, 2), result.output


# ---------------------------------------------------------------------------------- one run identity


def test_summaries_copied_from_another_run_are_refused(run, tmp_path):
    import hashlib
    import json

    other = tmp_path / "other"
    result = invoke("run", *TINY, "--set", "N=16", "--out", str(other), "-q", "--no-figures")
    assert result.exit_code == 0, result.output
    run_id = json.loads((run / "summary.json").read_text())["run"]
    checksums = (run / "result.zarr" / ".attnflow-checksums.json").read_bytes()
    assert run_id == hashlib.sha256(checksums).hexdigest()[:16]
    assert f"| run | {run_id} |" in (run / "summary.md").read_text()
    assert json.loads((run / ".attnflow-files.json").read_text())["run"] == run_id
    for name in ("summary.json", "summary.md", ".attnflow-files.json"):
        shutil.copyfile(other / name, run / name)
    result = invoke("verify", str(run))
    assert result.exit_code == 1, result.output
    for name in ("summary.json", "summary.md", ".attnflow-files.json"):
        assert f"{run / name}: its run fingerprint is " in result.output
    one_line(invoke("show", str(run)), 1, "run fingerprint", "copied from another run")


# ------------------------------------------------------------------ the API refuses what the CLI does


@pytest.fixture(scope="module")
def att():
    from attnflow import Attention

    return Attention(np.eye(2), np.eye(2), np.eye(2), 1.0)


def test_the_api_refuses_complex_input(att):
    import attnflow as af

    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(
        ValueError, match=r"X0 must be real, got complex entries .*largest imaginary part 0\.5"
    ):
        af.simulate(X + 0.5j * np.eye(2), att, [0.0, 1.0])
    with pytest.raises(ValueError, match="times must be real"):
        af.simulate(X, att, np.array([0.0, 1.0 + 1e-3j]))
    with pytest.raises(ValueError, match="Y must be real"):
        af.w2(X, X + 0.5j)
    with pytest.raises(ValueError, match="a must be real"):
        af.w2(X, X, a=np.array([0.5 + 1j, 0.5]))
    assert af.w2(X + 0j, X) == 0.0  # a zero imaginary part is a real array


def test_a_time_span_beyond_max_steps_is_refused_before_integrating(att):
    import time

    import attnflow as af

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"take 1e\+302 steps, more than options\['max_steps'\] = 10000000"):
        af.simulate(np.eye(2), att, [0.0, 1e300])
    with pytest.raises(ValueError, match=r"take 1\.1e\+03 steps, more than options\['max_steps'\] = 1000"):
        af.simulate(np.eye(2), att, [0.0, 11.0], dt=0.01, options={"max_steps": 1000})
    assert time.perf_counter() - t0 < 2.0
    assert af.simulate(np.eye(2), att, [0.0, 9.0], dt=0.01, options={"max_steps": 1000}).x.shape == (2, 2, 2)


# ------------------------------------------------------------------ checkpoints that lie about sizes


def _patch(path, key: bytes, skip: int, fmt: str, value: int) -> None:
    """Overwrite the number `skip` bytes after the name `key` in the file (struct format `fmt`)."""
    import struct

    data = bytearray(path.read_bytes())
    at = data.index(key) + len(key) + skip
    data[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory):
    import struct
    import zipfile

    import torch

    from checkpoints import write_gguf

    folder = tmp_path_factory.mktemp("checkpoints")
    q = "model.layers.0.self_attn.q_proj.weight"
    torch.save({q: torch.zeros(1).expand(20000, 20000)}, folder / "stride0.bin")  # 2 kB, 1.6 GB declared
    torch.save({q: torch.zeros(4000, 4000)}, folder / "stored.bin")
    with (
        zipfile.ZipFile(folder / "stored.bin") as z,
        zipfile.ZipFile(folder / "deflated.bin", "w", compression=zipfile.ZIP_DEFLATED) as out,
    ):
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename))
    (folder / "stored.bin").unlink()
    write_gguf(folder / "overlap.gguf", layers=1)
    data = (folder / "overlap.gguf").read_bytes()
    # a tensor info: name, n_dims (u32), dims (u64 each), type (u32), offset (u64)
    embd = data.index(b"token_embd.weight") + len(b"token_embd.weight")
    embd_offset = struct.unpack_from("<Q", data, embd + 4 + 16 + 4)[0]
    _patch(folder / "overlap.gguf", b"blk.0.attn_q.weight", 4 + 16 + 4, "<Q", embd_offset)
    write_gguf(folder / "zero-heads.gguf", layers=1)
    _patch(folder / "zero-heads.gguf", b"llama.attention.head_count", 4, "<I", 0)  # after the value type
    _lying_onnx(folder / "lying.onnx")
    write_gguf(folder / "truncated.gguf", layers=1)
    data = (folder / "truncated.gguf").read_bytes()
    (folder / "truncated.gguf").write_bytes(data[: len(data) * 2 // 3])  # a download cut short
    return folder


def _lying_onnx(path) -> None:
    """An ONNX graph whose one initializer declares 20000 x 20000 float32 over 4 bytes."""
    import onnx
    from onnx import TensorProto, helper

    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[20000, 20000], raw_data=b"\0\0\0\0")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph), str(path))


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("stride0.bin", ["declares shape (20000, 20000) (1600 MB) over a storage of 4 bytes"]),
        ("deflated.bin", ["its records expand to 64", "on disk (compressed storages)"]),
        ("overlap.gguf", ["the data of", "overlap those of", "each tensor's data once"]),
        ("zero-heads.gguf", ["its config gives 0 attention heads"]),
        ("lying.onnx", ["initializer W declares shape (20000, 20000) but holds 1 values"]),
        ("truncated.gguf", ["is truncated or malformed: not a readable GGUF file"]),
    ],
)
def test_a_checkpoint_that_lies_about_its_sizes_is_refused_before_allocating(bad_checkpoints, name, needles):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    one_line(invoke("heads", str(bad_checkpoints / name)), 2, str(bad_checkpoints / name), *needles)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300_000  # kB: nothing declared


def test_heads_and_check_name_a_path_that_is_no_checkpoint_for_what_it_is(tmp_path):
    fifo, folder, text = tmp_path / "fifo", tmp_path / "folder", tmp_path / "notes.txt"
    os.mkfifo(fifo)
    folder.mkdir()
    text.write_text("not a checkpoint")
    one_line(invoke("heads", str(fifo)), 2, str(fifo), "a FIFO, not a regular file")
    one_line(invoke("heads", "/dev/zero"), 2, "a character device, not a regular file")
    one_line(invoke("heads", str(text)), 2, "is not a checkpoint")
    one_line(invoke("heads", str(folder)), 2, "no weights in")
    one_line(invoke("check", str(fifo)), 2, "a FIFO, not a regular file")
    one_line(invoke("check", str(folder)), 2, "a folder, not a file")
    out = tmp_path / "out"
    one_line(invoke("run", *TINY, "-s", f"weights={fifo}", "-o", str(out)), 2, "a FIFO, not a regular file")
    assert not out.exists()


# ------------------------------------------------------------------------------- leftovers and grids


def test_a_leftover_old_link_in_parts_is_removed_as_verify_promises(run, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    link = run / "parts" / ".beta=10_N=24.zarr.old-0123abcd"
    link.symlink_to(outside)
    result = invoke("verify", str(run))
    assert f"note: {link}: left by an interrupted write; the next run removes it" in result.output
    assert invoke("run", *TINY, "--out", str(run), "-q", "--no-figures").exit_code == 0
    assert not os.path.lexists(link) and (outside / "keep.txt").read_text() == "keep"


def test_a_grid_range_of_2_to_the_70_is_refused_in_one_line(tmp_path):
    out = tmp_path / "sweep"
    result = invoke("sweep", "concentration-tiny", "--grid", f"seed=0:{2**70}", "-o", str(out), "-q")
    one_line(result, 2, "--grid", f"{2**70:,} points", "at most 100,000 points")
    assert not out.exists()


@given(st.integers(-40, 40), st.integers(-40, 40), st.integers(-7, 7).filter(bool))
def test_the_size_of_a_range_axis_is_its_length(a, b, step):
    from attnflow.sweeps.grid import grid_size

    assert grid_size({"seed": range(a, b, step), "beta": [1, 2]}) == 2 * len(range(a, b, step))


# -------------------------------------------------------------- a finished result is never replaced


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_a_finished_result_is_not_replaced_by_another_run_without_overwrite(run):
    import json

    from attnflow.io import read_dataset, store_fingerprint

    before = store_fingerprint(run / "result.zarr"), (run / "summary.json").read_bytes()
    for sets in (["N=16"], ["betas=[10]"], ["tol=0.05"]):  # another N, a beta fewer, another ladder tolerance
        args = [a for s in sets for a in ("--set", s)]
        result = invoke("run", *TINY, *args, "--out", str(run), "-q", "--no-figures")
        one_line(result, 2, "holds a finished concentration run", sets[0].split("=")[0], "--overwrite")
        assert (store_fingerprint(run / "result.zarr"), (run / "summary.json").read_bytes()) == before
    result = invoke("run", *TINY, "--set", "betas=[10, 20, 30]", "--out", str(run), "-q", "--no-figures")
    assert result.exit_code == 0, result.output  # more betas extend it
    assert read_dataset(run / "result.zarr").sizes["beta"] == 3
    args = ["--set", "N=16", "--out", str(run), "-q", "--no-figures", "--overwrite"]
    assert invoke("run", *TINY, *args).exit_code == 0
    assert json.loads((run / "summary.json").read_text())["N"] == 16


def test_a_fifo_inside_a_store_is_named_and_never_opened(run):
    chunk = next(p for p in sorted((run / "result.zarr").rglob("*")) if p.is_file() and p.name[0].isdigit())
    data = chunk.read_bytes()
    chunk.unlink()
    os.mkfifo(chunk)  # opening it would block: verify and show name it without reading
    result = invoke("verify", str(run))
    assert result.exit_code == 1 and f"{chunk}: is a FIFO" in result.output, result.output
    one_line(invoke("show", str(run)), 1, str(chunk), "is a FIFO")
    chunk.unlink()
    chunk.write_bytes(data)  # the store as written: only the summary is a FIFO now
    summary = run / "summary.md"
    summary.unlink()
    os.mkfifo(summary)
    result = invoke("verify", str(run))
    assert result.exit_code == 1 and f"{summary}: is a FIFO" in result.output, result.output
    one_line(invoke("show", str(run)), 1, str(summary), "is a FIFO")


def test_work_far_beyond_the_machine_is_refused_with_its_estimate(att):
    import time

    import attnflow as af
    from attnflow._text import format_value
    from attnflow.dynamics.work import check_work
    from attnflow.kernels import costs

    X = af.sample_uniform(20000, 2, seed=0)
    c = costs.active()["sdpa"]["float64"]
    each = c["call"] + 20000**2 * (c["pair"] + 2 * c["pair_d"])  # the cost model's closed form
    hours = 1e6 * 4 * each / 3600  # t_final / dt steps of rk4 on one thread (threads=1)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="pass force=True") as err:
        af.simulate(X, att, [0.0, 1e4], kernel="sdpa")
    assert time.perf_counter() - t0 < 5.0  # refused before the first step
    assert f"about {format_value(hours, 3)} hours on 1 thread(s) (1e+06 steps x 4 evaluations" in str(
        err.value
    )
    assert "N = 20000 tokens in d = 2" in str(err.value)

    class Numerics:
        method, dt, kernel, dtype = "rk4", 1e-2, "sdpa", "float64"

    check_work(X, X.shape, att, 1e4, Numerics, force=True)  # the escape: nothing refused
    with pytest.raises(ValueError, match="more than a day"):
        check_work(X, X.shape, att, 1e4, Numerics, force=False)


def test_heads_of_a_file_that_cannot_be_read_exits_2_in_one_line(tmp_path, monkeypatch):
    import attnflow.pretrained as pretrained

    path = tmp_path / "model.safetensors"
    path.write_bytes(b"x")

    def unreadable(checkpoint, **kw):
        raise PermissionError(13, "Permission denied", str(checkpoint))

    monkeypatch.setattr(pretrained, "report", unreadable)  # root reads any file: the refusal is made up
    one_line(invoke("heads", str(path)), 2, f"cannot read {path}: Permission denied")
