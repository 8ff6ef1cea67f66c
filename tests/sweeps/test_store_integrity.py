"""Fault injection on sweep stores: what a sweep reads back is what it wrote.

A lock or a point linked out of the store, an edited or swapped `.done` record, swapped point stores,
an edited input file, a grid too large to hold: each is refused, named or recomputed, and the values
read back are the true ones. A toy experiment with closed-form results; one in-process cluster.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import xarray as xr
from pydantic import BaseModel, ConfigDict, Field

import attnflow as af
from attnflow.io.lock import LOCK_FILE
from attnflow.sweeps import SweepError, open_sweep, show_sweep, summary_table, sweep, sweep_info
from attnflow.sweeps.grid import CONFIRM_POINTS, MAX_POINTS, check_grid_size
from cli_helpers import invoke

distributed = pytest.importorskip("distributed")

TIMES = np.linspace(0.0, 1.0, 5)


class ToyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    experiment: Literal["toy"] = "toy"
    beta: float = Field(1.0, gt=0, description="inverse temperature")
    seed: int = Field(0, description="seed")
    weights: str = Field("", description="an .npz whose array `scale` multiplies w2 (empty: 1)")


def run_toy(c: ToyConfig) -> xr.Dataset:
    scale = float(np.load(c.weights)["scale"]) if c.weights else 1.0
    w2 = scale * np.exp(-TIMES * c.beta) + c.seed
    return xr.Dataset(
        {"w2": (("time",), w2), "t_star": ((), 1.0 / c.beta)},
        coords={"time": TIMES},
        attrs={"experiment": "toy"},
    )


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as c,
    ):
        yield c


def toy_sweep(client, store, grid=None, config=None, **kw):
    grid = grid or {"beta": [1.0, 2.0], "seed": [0, 1]}
    config = config or ToyConfig()
    return sweep(config, grid, client=client, store=store, run_fn=run_toy, progress=False, **kw)


def expected(beta: float, seed: int, scale: float = 1.0) -> np.ndarray:
    return scale * np.exp(-TIMES * beta) + seed


# ------------------------------------------------------------------------------------- links


def test_a_symlinked_sweep_lock_never_writes_the_file_it_points_to(client, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    store = tmp_path / "store"
    store.mkdir()
    (store / LOCK_FILE).symlink_to(victim)
    with pytest.raises(SweepError, match="symbolic link") as err:
        toy_sweep(client, store)
    assert str(store / LOCK_FILE) in str(err.value) and victim.read_text() == "the user's file"
    assert not (store / "points").exists()


def test_points_linked_out_of_the_store_are_refused_and_named(client, tmp_path):
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    assert toy_sweep(client, store).ok
    (store / "points" / "beta=2_seed=1.zarr").rename(elsewhere)
    (store / "points" / "beta=2_seed=1.zarr").symlink_to(elsewhere)
    with pytest.raises(SweepError, match="symbolic link") as err:
        toy_sweep(client, store)
    assert "beta=2_seed=1.zarr" in str(err.value) and elsewhere.is_dir()
    assert sweep_info(store)["entries"]["beta=2_seed=1"]["status"] == "pending"  # never read through it
    text = invoke("verify", str(store)).output
    assert "beta=2_seed=1.zarr" in text and "outside" in text


# ------------------------------------------------------------------------------ records and names


def test_an_edited_done_record_is_named_never_shown_and_recomputed(client, tmp_path):
    store = tmp_path / "store"
    assert toy_sweep(client, store).ok
    done = store / "points" / "beta=2_seed=1.done"
    rec = json.loads(done.read_text())
    rec["scalars"]["t_star"] = 9.99
    done.write_text(json.dumps(rec, indent=1))
    verified = invoke("verify", str(store))
    assert verified.exit_code == 1 and str(done) in verified.output and "altered" in verified.output
    entry = sweep_info(store)["entries"]["beta=2_seed=1"]
    assert entry["status"] == "pending" and "scalars" not in entry
    _, rows = summary_table(store)
    assert "9.99" not in json.dumps(rows) and "9.99" not in show_sweep(store)
    csv = invoke("show", str(store), "--csv")
    assert csv.exit_code == 0 and "9.99" not in csv.output
    again = toy_sweep(client, store)
    assert again.ran == ["beta=2_seed=1"] and any(str(done) in w for w in again.warnings)
    assert sweep_info(store)["entries"]["beta=2_seed=1"]["scalars"]["t_star"] == 0.5


def test_swapped_points_are_not_read_under_each_others_names(client, tmp_path):
    store = tmp_path / "store"
    assert toy_sweep(client, store).ok
    a, b = store / "points" / "beta=1_seed=0.zarr", store / "points" / "beta=2_seed=1.zarr"
    a.rename(tmp_path / "a")
    b.rename(a)
    (tmp_path / "a").rename(b)
    with pytest.raises(af.io.StoreError, match="moved or swapped"):
        open_sweep(store)
    text = invoke("verify", str(store)).output
    assert "holds point beta=2_seed=1" in text and "holds point beta=1_seed=0" in text
    again = toy_sweep(client, store)
    assert sorted(again.ran) == ["beta=1_seed=0", "beta=2_seed=1"]
    ds = open_sweep(store)
    for beta, seed in ((1.0, 0), (2.0, 1)):
        np.testing.assert_array_equal(ds.w2.sel(beta=beta, seed=seed).values, expected(beta, seed))


def test_swapped_done_records_are_named(client, tmp_path):
    store = tmp_path / "store"
    assert toy_sweep(client, store, {"seed": [0, 1]}).ok
    a, b = store / "points" / "seed=0.done", store / "points" / "seed=1.done"
    text_a, text_b = a.read_text(), b.read_text()
    a.write_text(text_b)
    b.write_text(text_a)
    shown = " ".join(show_sweep(store).split())  # (Rich wraps long lines)
    assert "seed=0.done: is the record of point seed=1" in shown
    assert sorted(toy_sweep(client, store, {"seed": [0, 1]}).ran) == ["seed=0", "seed=1"]


def test_an_edited_input_file_recomputes_its_points(client, tmp_path):
    store, w = tmp_path / "store", tmp_path / "w.npz"
    np.savez(w, scale=np.array(1.0))
    config = ToyConfig(weights=str(w))
    assert toy_sweep(client, store, {"seed": [0, 1]}, config).ok
    again = toy_sweep(client, store, {"seed": [0, 1]}, config)
    assert again.skipped == ["seed=0", "seed=1"] and not again.ran
    np.savez(w, scale=np.array(2.0))
    changed = toy_sweep(client, store, {"seed": [0, 1]}, config)
    assert sorted(changed.ran) == ["seed=0", "seed=1"]
    assert sum("the content of its input (weights) has changed" in w for w in changed.warnings) == 2
    np.testing.assert_array_equal(open_sweep(store).w2.sel(seed=1).values, expected(1.0, 1, 2.0))


# ------------------------------------------------------------------------------------- grids


def test_a_huge_grid_is_refused_at_once_in_bounded_memory(tmp_path):
    """The grid of the fault probe (10^9 seeds) was built in memory (24 GB, killed): now one line and
    exit 2, under an address-space limit of 500 MB, and nothing is written."""
    if not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_AS bounds the memory of the command on Linux")
    store = tmp_path / "S"
    cmd = [sys.executable, "-m", "attnflow.cli", "sweep", "concentration-tiny", "--grid", "seed=0:1000000000"]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (500 * 2**20, 500 * 2**20))

    env = {**os.environ, "PYTHONPATH": str(Path(af.__file__).parents[1])}
    cmd += ["--out", str(store)]
    done = subprocess.run(cmd, preexec_fn=limit, env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnflow: --grid 'seed=0:1000000000': 1,000,000,000")
    assert "in the store" in lines[0] and "Traceback" not in done.stderr and not store.exists()


def test_a_large_grid_needs_yes_and_a_grid_too_large_is_refused(client, tmp_path):
    big = {"seed": range(CONFIRM_POINTS + 1)}
    with pytest.raises(SweepError, match=r"10,001 points .* pass yes=True \(--yes\)") as err:
        toy_sweep(client, tmp_path / "s", big)
    assert err.value.argument == "grid" and not (tmp_path / "s").exists()
    assert check_grid_size(big, yes=True) == CONFIRM_POINTS + 1
    with pytest.raises(SweepError, match="split the grid"):
        toy_sweep(client, tmp_path / "s", {"seed": range(MAX_POINTS), "beta": [1.0, 2.0]}, yes=True)
    grid = f"seed=0:{CONFIRM_POINTS + 1}"
    text = invoke("sweep", "concentration-tiny", "--grid", grid, "--out", str(tmp_path / "cli"))
    assert text.exit_code == 2 and "--yes" in text.output and not (tmp_path / "cli").exists()


def test_points_stream_through_a_bounded_window_of_tasks(client, tmp_path, monkeypatch):
    import attnflow.sweeps.run as run

    monkeypatch.setattr(run, "SUBMIT_WINDOW", 2)
    res = toy_sweep(client, tmp_path / "store", {"seed": range(7)})
    assert res.ok and len(res.ran) == 7
    ds = open_sweep(tmp_path / "store")
    np.testing.assert_array_equal(ds.w2.sel(seed=6).values, expected(1.0, 6))
