"""Sweeps on Dask: grid parsing, one task per point, atomic results, resume, faults, moved stores.

A toy experiment defined here (closed-form results) stands in for the real ones, so that every value
in the combined Dataset can be checked exactly. One 2-worker LocalCluster (processes) serves the
module; the embedded default cluster (client=None) is started once, in the interrupt test.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from attnflow.sweeps import (
    SweepError,
    check_grid,
    expand_grid,
    is_sweep_store,
    open_sweep,
    parse_grid,
    point_config,
    point_key,
    show_sweep,
    summary_table,
    sweep,
    sweep_info,
)
from events import HANG_S, Gate, wait_for

distributed = pytest.importorskip("distributed")


# ------------------------------------------------------------------------------ toy experiment


class ToyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    experiment: Literal["toy"] = "toy"
    beta: float = Field(1.0, gt=0, description="inverse temperature")
    N: int = Field(10, gt=0, description="tokens")
    seed: int = Field(0, description="seed")
    marker_dir: str = Field("", description="where runs leave marker files (tests only)")


class ToyListConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    experiment: Literal["toylist"] = "toylist"
    betas: list[float] = Field([1.0, 2.0], description="inverse temperatures")
    seed: int = Field(0, description="seed")


TIMES = np.linspace(0.0, 1.0, 5)


def toy_w2(beta: float, N: int, seed: int) -> np.ndarray:
    return np.exp(-TIMES * beta) + seed / N


def _tag(c: ToyConfig) -> str:
    """Which sweep of a test this is: marker_dir/tag (default 0)."""
    tag = Path(c.marker_dir) / "tag"
    return tag.read_text().strip() if tag.exists() else "0"


def _mark(c: ToyConfig, kind: str) -> None:
    """Leave a marker file `<kind>-<tag>-<point>-<uuid>`."""
    if c.marker_dir:
        (Path(c.marker_dir) / f"{kind}-{_tag(c)}-{c.beta:g}-{c.N}-{c.seed}-{uuid.uuid4().hex[:6]}").touch()


def run_toy(c: ToyConfig) -> xr.Dataset:
    _mark(c, "start")
    w2 = toy_w2(c.beta, c.N, c.seed)
    ds = xr.Dataset(
        {"w2": (("time",), w2), "min_w2": ((), w2.min()), "t_star": ((), 1.0 / c.beta)},
        coords={"time": TIMES},
        attrs={"experiment": "toy", "config": c.model_dump_json()},
    )
    _mark(c, "end")
    return ds


GATE_FREE = 3  # points of a gated sweep that run at once; the others wait for the test's word


def gate_of(marker_dir: str | Path, tag: str) -> Gate:
    """The gate of the sweep with this tag (files in marker_dir)."""
    return Gate(marker_dir, f"gate{tag}", free=GATE_FREE)


def run_gated(c: ToyConfig) -> xr.Dataset:
    """run_toy behind its sweep's gate: GATE_FREE points run at once, the others when the test opens
    the gate (or never: stopped, they fail), so what is done when the test strikes is known."""
    gate_of(c.marker_dir, _tag(c)).enter()
    return run_toy(c)


def run_victim(c: ToyConfig) -> xr.Dataset:
    """run_toy, except the first attempt at beta=2, seed=1: it writes its worker's pid to
    marker_dir/victim and waits (at a gate nobody opens) to be killed."""
    d = Path(c.marker_dir)
    if (c.beta, c.seed) == (2.0, 1) and not (d / "victim").exists():
        tmp = d / f".victim-{os.getpid()}"
        tmp.write_text(str(os.getpid()))
        tmp.rename(d / "victim")  # whole, or not there yet
        Gate(d, "victim").enter()
    return run_toy(c)


def run_toy_torch(c: ToyConfig) -> xr.Dataset:
    """run_toy in a worker that has loaded torch (whose process then takes seconds to exit)."""
    import torch

    torch.ones(2).sum()
    return run_toy(c)


def run_kill_once(c: ToyConfig) -> xr.Dataset:
    """The worker process dies (os._exit) on the first attempt at beta=2, N=20, seed=1."""
    flag = Path(c.marker_dir) / f"killed-{c.beta:g}-{c.N}-{c.seed}"
    if (c.beta, c.N, c.seed) == (2.0, 20, 1) and not flag.exists():
        flag.touch()
        os._exit(1)
    return run_toy(c)


def run_fail_beta2(c: ToyConfig) -> xr.Dataset:
    _mark(c, "attempt")
    if c.beta == 2.0:
        raise RuntimeError(f"injected failure at beta={c.beta}")
    return run_toy(c)


def run_flaky(c: ToyConfig) -> xr.Dataset:
    """Fails on the first attempt at every point, succeeds afterwards."""
    _mark(c, "attempt")
    if len(list(Path(c.marker_dir).glob(f"attempt-*-{c.beta:g}-{c.N}-{c.seed}-*"))) == 1:
        raise ValueError("first attempt fails")
    return run_toy(c)


def run_list(c: ToyListConfig) -> xr.Dataset:
    """Like the concentration experiment: a `beta` dim of its own, a seeded subset of tokens."""
    beta = np.array(c.betas)
    tokens = 10 * c.seed + np.arange(3)
    return xr.Dataset(
        {
            "t_star": (("beta",), 1.0 / beta),
            "w2_zero": (("time",), np.exp(-TIMES) + c.seed),
            "x": (("token",), tokens + 0.5),
        },
        coords={"beta": beta, "time": TIMES, "token": tokens},
    )


def markers(d: Path, kind: str, tag: str | None = None) -> list[str]:
    """Point names ('beta-N-seed') of the markers of one kind (and tag)."""
    out = []
    for p in d.glob(f"{kind}-*"):
        _, t, b, n, s, _ = p.name.split("-")
        if tag is None or t == tag:
            out.append(f"{b}-{n}-{s}")
    return sorted(out)


GRID = {"beta": [1.0, 2.0], "N": [10, 20], "seed": [0, 1]}


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster,
        Client(cluster) as c,
    ):
        yield c


def check_values(ds: xr.Dataset, grid: dict) -> None:
    for p in expand_grid(grid):
        got = ds.w2.sel(p).values
        np.testing.assert_allclose(got, toy_w2(p["beta"], p["N"], p["seed"]), rtol=0, atol=0)
        assert float(ds.t_star.sel(p)) == 1.0 / p["beta"]


# ----------------------------------------------------------------------------------------- grid


def test_parse_grid_values_and_ranges():
    g = parse_grid(["beta=10,100,1e3,inf", "N=4096,16384", "seed=0:8", "M=1:10:4", "kernel=sdpa,auto"])
    assert g["beta"] == [10, 100, 1000.0, math.inf]
    assert g["N"] == [4096, 16384]
    assert g["seed"] == range(8)  # a range stays one: never materialised before it is sized
    assert list(g["M"]) == [1, 5, 9]
    assert g["kernel"] == ["sdpa", "auto"]


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (["beta"], "key=v1,v2"),
        (["beta=1", "beta=2"], "given twice"),
        (["seed=5:2"], "no values"),
        (["seed=0:4:0"], "step"),
        (["1x=3"], "not a config key"),
    ],
)
def test_parse_grid_errors(items, match):
    with pytest.raises(ValueError, match=match):
        parse_grid(items)


def _toy_store(path: Path, keys: tuple[str, ...] = ("beta",)) -> None:
    """The sweep.json of a sweep of the toy experiment over `keys` (no point run)."""
    path.mkdir()
    meta = {"format": "attnflow-sweep", "version": 1, "experiment": "toy"}
    meta["config"] = ToyConfig().model_dump(exclude=set(keys))
    meta["grid"] = {k: [getattr(ToyConfig(), k)] for k in keys}
    (path / "sweep.json").write_text(json.dumps(meta))


def test_library_errors_name_the_argument_not_an_option(tmp_path):
    """`grid` and `store` in the library's messages; `--grid` and `--out` are the command's words."""
    with pytest.raises(SweepError, match=r"^grid 'beta': expected key=v1,v2") as bad_grid:
        parse_grid(["beta"])
    assert (bad_grid.value.argument, bad_grid.value.value) == ("grid", "beta")
    _toy_store(tmp_path / "s", ("beta", "seed"))
    with pytest.raises(SweepError, match=r"sweep over \['beta', 'seed'\], not \['seed', 'beta'\]") as bad:
        sweep(ToyConfig(), {"seed": [1], "beta": [1.0]}, store=tmp_path / "s", run_fn=run_toy, progress=False)
    assert bad.value.argument == "store" and "--" not in str(bad.value)


def test_check_grid_errors():
    with pytest.raises(TypeError, match="grid"):
        check_grid({})
    with pytest.raises(ValueError, match="repeated"):
        check_grid({"seed": [1, 1]})
    with pytest.raises(ValueError, match="empty"):
        check_grid({"seed": []})
    with pytest.raises(TypeError, match=r"grid\['beta'\]"):
        check_grid({"beta": [[1, 2]]})
    assert check_grid({"seed": np.arange(2), "beta": 3.0}) == {"seed": [0, 1], "beta": [3.0]}


values = st.one_of(
    st.integers(-1000, 10**6),
    st.floats(allow_nan=False, width=64),
    st.text(alphabet="abc_/ .=-", min_size=1, max_size=6),
)


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["beta", "N", "seed", "kernel"]),
        st.lists(values, min_size=1, max_size=3, unique_by=json.dumps),
        min_size=1,
    )
)
def test_expand_grid_properties(grid):
    pts = expand_grid(grid)
    assert len(pts) == math.prod(len(v) for v in grid.values())
    keys = [point_key(p) for p in pts]
    assert len(set(keys)) == len(keys)  # distinct points, distinct names
    for k in keys:
        assert "/" not in k and " " not in k and len(k) <= 120
    assert {json.dumps(p, sort_keys=True) for p in pts} == {
        json.dumps(dict(zip(grid, c, strict=True)), sort_keys=True)
        for c in __import__("itertools").product(*grid.values())
    }


def test_point_key_readable():
    assert point_key({"beta": 10.0, "N": 4096, "seed": 3}) == "beta=10_N=4096_seed=3"
    assert point_key({"beta": math.inf}) == "beta=inf"
    assert point_key({"beta": 0.1 + 0.2}) != point_key({"beta": 0.3})


def test_point_config_validates_and_maps_plural():
    c = point_config(ToyConfig(), {"beta": 5, "seed": 2})
    assert (c.beta, c.seed) == (5.0, 2)
    assert point_config(ToyListConfig(), {"beta": 7.0}).betas == [7.0]
    with pytest.raises(ValueError, match="'gamma' is not a field"):
        point_config(ToyConfig(), {"gamma": 1})
    with pytest.raises(ValueError, match=r"grid point .*beta"):
        point_config(ToyConfig(), {"beta": -1.0})
    with pytest.raises(ValueError, match=r"N"):
        point_config(ToyConfig(), {"N": "many"})


def test_package_level_sweep_is_callable(tmp_path):
    import attnflow as af
    import attnflow.sweeps  # the module is `sweeps`, so importing it leaves `attnflow.sweep` alone

    assert callable(af.sweep) and af.open_sweep is open_sweep
    with pytest.raises(TypeError, match="config must be"):
        af.sweep(3.0, {"seed": [1]}, store=tmp_path / "s")


def test_sweep_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="'gamma' is not a field"):
        sweep(ToyConfig(), {"gamma": [1]}, store=tmp_path / "s", run_fn=run_toy, progress=False)
    with pytest.raises(ValueError, match="retries"):
        sweep(ToyConfig(), {"seed": [1]}, store=tmp_path / "s", retries=-1, run_fn=run_toy, progress=False)
    with pytest.raises(TypeError, match="config"):
        sweep(3.0, {"seed": [1]}, store=tmp_path / "s")
    with pytest.raises(ValueError, match="grid point"):
        sweep(ToyConfig(), {"beta": [1.0, -2.0]}, store=tmp_path / "s", run_fn=run_toy, progress=False)
    with pytest.raises(TypeError, match="client"):
        sweep(ToyConfig(), {"seed": [1]}, client=42, store=tmp_path / "t", run_fn=run_toy, progress=False)


# ------------------------------------------------------------------------------------ on Dask


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_small_grid_on_two_workers(client, tmp_path):
    store = tmp_path / "store"
    res = sweep(ToyConfig(), GRID, client=client, store=store, run_fn=run_toy, progress=False)
    assert res.ok and len(res.ran) == 8 and not res.skipped
    assert is_sweep_store(store) and not is_sweep_store(tmp_path)
    ds = open_sweep(store)
    assert list(ds.w2.dims) == ["beta", "N", "seed", "time"]
    assert ds.attrs["complete"] and bool(ds.done.all())
    assert isinstance(ds.w2.data, __import__("dask").array.Array)  # lazy
    check_values(ds, GRID)
    man = json.loads((store / "manifest.json").read_text())
    assert man["counts"]["done"] == 8
    for e in man["points"].values():
        assert e["status"] == "done" and e["attempts"] == 1 and e["seconds"] >= 0
        assert not Path(e["path"]).is_absolute()
    text = show_sweep(store)
    assert "8 points" in text and "done 8" in text and text.count(" done ") == 8
    assert "t_star" in text and "min_w2" in text

    # the same sweep again: nothing runs
    again = sweep(ToyConfig(), GRID, client=client, store=store, run_fn=run_toy, progress=False)
    assert again.ok and not again.ran and len(again.skipped) == 8


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_rerun_with_larger_grid_runs_only_new_points(client, tmp_path):
    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    cfg = ToyConfig(marker_dir=str(mk))
    sweep(cfg, {"beta": [1.0], "seed": [0, 1]}, client=client, store=store, run_fn=run_toy, progress=False)
    res = sweep(
        cfg, {"beta": [1.0, 3.0], "seed": [1, 2]}, client=client, store=store, run_fn=run_toy, progress=False
    )
    assert sorted(res.ran) == ["beta=1_seed=2", "beta=3_seed=0", "beta=3_seed=1", "beta=3_seed=2"]
    assert len(res.skipped) == 2
    ends = markers(mk, "end")
    assert len(ends) == len(set(ends)) == 6  # every point computed exactly once
    ds = open_sweep(store)
    assert ds.sizes["beta"] == 2 and ds.sizes["seed"] == 3 and ds.attrs["complete"]
    with pytest.raises(ValueError, match="another base config"):
        sweep(ToyConfig(N=99), {"beta": [1.0]}, client=client, store=store, run_fn=run_toy, progress=False)
    with pytest.raises(ValueError, match="use another store"):
        sweep(cfg, {"seed": [0]}, client=client, store=store, run_fn=run_toy, progress=False)


def test_worker_killed_mid_sweep(client, tmp_path):
    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    res = sweep(
        ToyConfig(marker_dir=str(mk)), GRID, client=client, store=store, run_fn=run_kill_once, progress=False
    )
    assert (mk / "killed-2-20-1").exists()  # the worker did die
    assert res.ok and len(res.ran) == 8
    ends = markers(mk, "end")
    assert len(ends) == len(set(ends)) == 8
    zarrs = sorted(p.name for p in (store / "points").iterdir() if p.suffix == ".zarr")
    assert zarrs == sorted(f"{k}.zarr" for k in res.keys)  # each point once, no temporaries left
    check_values(open_sweep(store), GRID)


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_worker_process_sigkilled_from_outside(client, tmp_path):
    """SIGKILL to a worker process while it runs a point (as the OOM killer would): the point is
    killed as it runs (it says so with its pid, then waits), the sweep recomputes it."""
    import signal
    import threading

    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    killed = []

    def kill_the_victim():
        wait_for((mk / "victim").exists, "the victim point running")
        pid = int((mk / "victim").read_text())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_the_victim, daemon=True)
    killer.start()
    grid = {"beta": [1.0, 2.0], "seed": [0, 1, 2]}
    res = sweep(
        ToyConfig(marker_dir=str(mk)), grid, client=client, store=store, run_fn=run_victim, progress=False
    )
    killer.join(timeout=HANG_S)
    assert killed and res.ok and len(res.ran) == 6
    ends = markers(mk, "end")  # the victim was killed before its end: every point ended once
    assert len(ends) == len(set(ends)) == 6
    zarrs = sorted(p.name for p in (store / "points").glob("[!.]*.zarr"))
    assert zarrs == sorted(f"{k}.zarr" for k in res.keys)  # every point committed exactly once
    check_values(open_sweep(store).expand_dims(N=[10]).transpose("beta", "N", ...), {**grid, "N": [10]})


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_failed_points_are_retried_then_reported(client, tmp_path):
    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    cfg = ToyConfig(marker_dir=str(mk))
    res = sweep(cfg, GRID, client=client, store=store, run_fn=run_fail_beta2, retries=1, progress=False)
    assert not res.ok and len(res.ran) == 4
    assert sorted(res.failed) == sorted(k for k in res.keys if k.startswith("beta=2_"))
    assert all("injected failure at beta=2" in e for e in res.failed.values())
    attempts = markers(mk, "attempt")
    for p in expand_grid(GRID):  # bounded: 1 + retries attempts at a failing point
        name = f"{p['beta']:g}-{p['N']}-{p['seed']}"
        assert attempts.count(name) == (2 if p["beta"] == 2.0 else 1)
    info = sweep_info(store)
    for key in res.failed:
        e = info["entries"][key]
        assert e["status"] == "failed" and e["attempts"] == 2 and "RuntimeError" in e["error"]
    assert "FAILED beta=2_N=10_seed=0 after 2 attempts" in show_sweep(store)
    ds = open_sweep(store)
    assert not ds.attrs["complete"] and sorted(json.loads(ds.attrs["missing"])) == sorted(res.failed)
    assert bool(ds.done.sel(beta=1.0).all()) and not bool(ds.done.sel(beta=2.0).any())
    assert bool(np.isnan(ds.w2.sel(beta=2.0)).all())
    np.testing.assert_array_equal(ds.w2.sel(beta=1.0, N=20, seed=1), toy_w2(1.0, 20, 1))
    # a rerun retries only the failed points
    res2 = sweep(cfg, GRID, client=client, store=store, run_fn=run_toy, progress=False)
    assert res2.ok and sorted(res2.ran) == sorted(res.failed) and len(res2.skipped) == 4
    check_values(open_sweep(store), GRID)


def test_flaky_point_succeeds_on_retry(client, tmp_path):
    mk = tmp_path / "mk"
    mk.mkdir()
    grid = {"seed": [0, 1, 2]}
    res = sweep(
        ToyConfig(marker_dir=str(mk)),
        grid,
        client=client,
        store=tmp_path / "s",
        run_fn=run_flaky,
        retries=2,
        progress=False,
    )
    assert res.ok and len(res.ran) == 3
    assert all(e["attempts"] == 2 for e in sweep_info(tmp_path / "s")["entries"].values())


def _wait_idle(client) -> None:
    """Wait until the workers hold no task: cancelled tasks that were running go on to their end."""
    wait_for(
        lambda: not any(client.run(lambda dask_worker: len(dask_worker.state.tasks)).values()),
        "the workers idle",
    )


def test_interrupted_client_then_rerun_runs_only_missing(client, tmp_path):
    """Ctrl-C in the client's loop once the gate's free points are done (the others held at it): the
    manifest says exactly those are done, the rest pending; the rerun runs only the rest."""
    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    (mk / "tag").write_text("1")
    cfg = ToyConfig(marker_dir=str(mk))

    def interrupt(done, total):
        if done >= GATE_FREE:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(cfg, GRID, client=client, store=store, run_fn=run_gated, progress=interrupt)
    gate_of(mk, "1").stop()  # the held points give up: nothing more is committed
    man = json.loads((store / "manifest.json").read_text())["points"]
    done = {k for k, e in man.items() if e["status"] == "done"}
    assert len(done) == GATE_FREE and all(e["status"] == "pending" for k, e in man.items() if k not in done)
    _wait_idle(client)
    complete = {k for k in man if (store / "points" / f"{k}.done").exists()}
    assert complete == done
    (mk / "tag").write_text("2")
    gate_of(mk, "2").open()
    res = sweep(cfg, GRID, client=client, store=store, run_fn=run_gated, progress=False)
    assert res.ok and set(res.skipped) == complete and set(res.ran) == set(res.keys) - complete
    ran_again = markers(mk, "start", tag="2")
    assert len(ran_again) == len(set(ran_again)) == 8 - len(complete)
    check_values(open_sweep(store), GRID)


# The child restores Python's SIGINT handler: a shell that starts the suite in the background makes
# its children ignore SIGINT, and the test's Ctrl-C would then never reach the sweep.
SCRIPT = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [{tests!r}, {tests_root!r}]
from test_sweep import ToyConfig, run_gated
from attnflow.sweeps import sweep

if __name__ == "__main__":
    res = sweep(ToyConfig(marker_dir={mk!r}), {grid!r}, store={store!r}, workers=2, run_fn=run_gated,
                progress=False)
    print(res)
"""


@pytest.mark.slow
def test_embedded_cluster_client_process_killed_then_rerun(tmp_path):
    """The default (a LocalCluster started by sweep), its client process killed by SIGINT mid-sweep:
    once the gate's free points are committed (the others held at it)."""
    import signal
    import subprocess
    import sys

    store, mk = tmp_path / "store", tmp_path / "mk"
    mk.mkdir()
    (mk / "tag").write_text("1")
    grid = {"beta": [1.0, 2.0], "N": [10], "seed": [0, 1, 2, 3]}
    script = tmp_path / "run.py"
    script.write_text(
        SCRIPT.format(
            tests=str(Path(__file__).parent),
            tests_root=str(Path(__file__).parents[1]),
            mk=str(mk),
            grid=grid,
            store=str(store),
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def committed() -> set[str]:
        return {p.name[: -len(".done")] for p in (store / "points").glob("*.done")}

    wait_for(lambda: len(committed()) >= GATE_FREE, "the free points committed", proc)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=HANG_S)[0].decode()
    gate_of(mk, "1").stop()  # a worker outliving its cluster gives up
    assert proc.returncode != 0, out
    done = committed()
    assert len(done) == GATE_FREE, out
    man = json.loads((store / "manifest.json").read_text())["points"]
    assert {k for k, e in man.items() if e["status"] == "done"} == done, out  # honest after Ctrl-C
    assert all(e["status"] == "pending" for k, e in man.items() if k not in done), out
    (mk / "tag").write_text("2")
    gate_of(mk, "2").open()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=HANG_S, check=True)
    ran_again = markers(mk, "end", tag="2")
    assert len(ran_again) == len(set(ran_again)) == 8 - len(done)
    assert f"{8 - len(done)} run, {len(done)} already done, 0 failed" in proc.stdout.decode()
    check_values(open_sweep(store), grid)


def test_moved_store_opens_with_same_results(client, tmp_path):
    store = tmp_path / "a" / "store"
    sweep(
        ToyConfig(),
        {"beta": [1.0, 2.0], "seed": [0, 3]},
        client=client,
        store=store,
        run_fn=run_toy,
        progress=False,
    )
    before, text = open_sweep(store).load(), show_sweep(store)
    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(store, moved)
    assert not store.exists()
    after = open_sweep(moved).load()
    xr.testing.assert_identical(before, after)
    assert show_sweep(moved) == text
    # and a rerun at the new place skips everything
    res = sweep(
        ToyConfig(),
        {"beta": [1.0, 2.0], "seed": [0, 3]},
        client=client,
        store=moved,
        run_fn=run_toy,
        progress=False,
    )
    assert not res.ran and len(res.skipped) == 4


def test_fsspec_url_store_and_grid_dim_in_results(client, tmp_path):
    url = f"file://{tmp_path}/remote"
    grid = {"beta": [1.0, 4.0], "seed": [0, 1]}
    res = sweep(ToyListConfig(), grid, client=client, store=url, run_fn=run_list, progress=False)
    assert res.ok
    assert is_sweep_store(url)
    ds = open_sweep(url)  # `beta` is a length-1 dimension of each point: it becomes the grid axis
    np.testing.assert_allclose(ds.t_star.values, [[1.0, 1.0], [0.25, 0.25]])
    np.testing.assert_allclose(ds.w2_zero.sel(beta=4.0, seed=1), np.exp(-TIMES) + 1)
    # the token subset differs per seed: positions 0..2 along `token`, the ids in `token_id`
    assert ds.sizes["token"] == 3 and not bool(ds.x.isnull().any())
    np.testing.assert_array_equal(ds.token_id.sel(beta=1.0, seed=1), [10, 11, 12])
    np.testing.assert_array_equal(ds.x.sel(beta=4.0, seed=1), [10.5, 11.5, 12.5])
    assert not list((tmp_path / "remote" / "points").glob(".*"))  # no temporaries left


def test_half_written_point_is_recomputed(client, tmp_path):
    store = tmp_path / "store"
    grid = {"seed": [0, 1]}
    sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_toy, progress=False)
    (store / "points" / "seed=1.done").unlink()  # the commit marker never got written
    res = sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_toy, progress=False)
    assert res.ran == ["seed=1"] and res.skipped == ["seed=0"]
    check_values(
        open_sweep(store).expand_dims(beta=[1.0], N=[10]), {"beta": [1.0], "N": [10], "seed": [0, 1]}
    )


def _standard_json(path: Path) -> dict:
    """The file read as standard JSON: the NaN and Infinity literals of Python's json are refused."""

    def refuse(literal: str) -> None:
        raise AssertionError(f"{path.name} holds the non-standard JSON literal {literal}")

    return json.loads(path.read_text(), parse_constant=refuse)


def run_nan_at_seed1(c: ToyConfig) -> xr.Dataset:
    """min_w2 NaN everywhere, t_star NaN at seed 1; a variable `extra` only at seed 0."""
    ds = run_toy(c).assign(min_w2=((), math.nan))
    return ds.assign(t_star=((), math.nan)) if c.seed == 1 else ds.assign(extra=((), 2.5))


def test_nan_results_written_as_null_read_back_as_nan(client, tmp_path):
    store = tmp_path / "store"
    grid = {"seed": [0, 1]}
    res = sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_nan_at_seed1, progress=False)
    assert res.ok
    man = _standard_json(store / "manifest.json")
    assert man["points"]["seed=1"]["scalars"]["t_star"] is None  # NaN has no literal in JSON
    for name in ("sweep.json", "points/seed=0.done", "points/seed=1.done"):
        _standard_json(store / name)
    scalars = {k: e["scalars"] for k, e in sweep_info(store)["entries"].items()}
    assert scalars["seed=0"]["t_star"] == 1.0 and math.isnan(scalars["seed=1"]["t_star"])
    assert "extra" not in scalars["seed=1"]
    header, rows = summary_table(store)
    seed0, seed1 = (dict(zip(header, r, strict=True)) for r in rows)
    assert seed0["min_w2"] == seed1["min_w2"] == "NaN"  # a column of NaN results is still shown
    assert seed1["t_star"] == "NaN" and seed1["extra"] == ""  # a NaN result is not a missing one
    assert seed0["extra"] == "2.5"
    again = sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_nan_at_seed1, progress=False)
    assert not again.ran and math.isnan(sweep_info(store)["entries"]["seed=1"]["scalars"]["t_star"])


def test_non_finite_grid_values_come_back_exactly(client, tmp_path):
    store = tmp_path / "store"
    res = sweep(
        ToyConfig(), {"beta": [1.0, math.inf]}, client=client, store=store, run_fn=run_toy, progress=False
    )
    assert res.ok and res.keys == ["beta=1", "beta=inf"]
    assert _standard_json(store / "sweep.json")["grid"] == {"beta": [1.0, {"float": "inf"}]}
    assert sweep_info(store)["grid"] == {"beta": [1.0, math.inf]}
    again = sweep(
        ToyConfig(), {"beta": [math.inf, 2.0]}, client=client, store=store, run_fn=run_toy, progress=False
    )
    assert again.ran == ["beta=2"] and again.skipped == ["beta=1", "beta=inf"]
    assert float(open_sweep(store).t_star.sel(beta=math.inf)) == 0.0


def test_store_of_version_0_1_0_with_json_literals_opens(client, tmp_path):
    """Stores written before the standard-JSON encoder hold NaN and Infinity literals: still read."""
    store = tmp_path / "store"
    grid = {"beta": [1.0, 2.0]}
    sweep(ToyConfig(), grid, client=client, store=store, run_fn=run_nan_at_seed1, progress=False)
    meta = json.loads((store / "sweep.json").read_text())
    meta["grid"] = {"beta": [1.0, 2.0, math.inf]}
    (store / "sweep.json").write_text(json.dumps(meta))  # json.dumps writes Infinity
    done = store / "points" / "beta=2.done"
    rec = json.loads(done.read_text())
    assert rec["scalars"]["min_w2"] is None
    rec["scalars"]["min_w2"] = math.nan
    done.write_text(json.dumps(rec))  # NaN: the same record (and checksum) as null
    info = sweep_info(store)
    assert (
        info["keys"] == ["beta=1", "beta=2", "beta=inf"]
        and info["entries"]["beta=inf"]["status"] == "pending"
    )
    assert math.isnan(info["entries"]["beta=2"]["scalars"]["min_w2"])


def test_stale_temporaries_are_cleaned(tmp_path):
    from attnflow.sweeps.store import Store, clean_temporaries

    points = tmp_path / "points"
    (points / ".seed=1.zarr.1a2b3c4d").mkdir(parents=True)
    (points / ".seed=2.zarr.5e6f7a8b").mkdir()
    (points / "seed=0.zarr").mkdir()
    old = time.time() - 3600
    os.utime(points / ".seed=1.zarr.1a2b3c4d", (old, old))
    assert clean_temporaries(Store(tmp_path)) == 1
    assert sorted(p.name for p in points.iterdir()) == [".seed=2.zarr.5e6f7a8b", "seed=0.zarr"]


def test_open_sweep_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a sweep store"):
        open_sweep(tmp_path)


# -------------------------------------------------------------------------------------- command


def _app():
    import typer

    from attnflow.cli.sweep import sweep_command

    app = typer.Typer()
    app.command("sweep")(sweep_command)
    app.command("other")(lambda: None)
    return app


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["concentration", "--grid", "beta"], "key=v1,v2"),
        (["nonsense-experiment", "--grid", "beta=1,2"], "unknown experiment"),
        (["concentration", "--grid", "gamma=1,2"], "'gamma' is not a field"),
        (["concentration", "--grid", "N=-5"], "grid point"),
        (["concentration", "--grid", "beta=1", "--set", "bogus=3"], "bogus"),
        (["concentration", "-g", "beta=1", "-g", "beta=2"], "--grid 'beta=2': key 'beta' given twice"),
    ],
)
def test_command_bad_usage_exits_2(tmp_path, args, match):
    from typer.testing import CliRunner

    res = CliRunner().invoke(_app(), ["sweep", *args, "--out", str(tmp_path / "s"), "-q"])
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output


def test_command_names_its_option_for_the_store(tmp_path):
    """The library's error about `store` comes out about `--out`, which set it (exit 2, no cluster)."""
    from typer.testing import CliRunner

    _toy_store(tmp_path / "s")
    res = CliRunner().invoke(_app(), ["sweep", "concentration", "-g", "beta=1", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2, res.output
    assert f"--out {str(tmp_path / 's')!r}: holds a sweep of toy with another base config" in res.output
    assert "use another store" in res.output and "Traceback" not in res.output


def test_command_exit_codes_failed_and_interrupted(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import attnflow.sweeps as sw

    def failing(*a, **k):
        return sw.SweepResult(
            store=str(tmp_path), keys=["a", "b"], ran=["a"], failed={"b": "RuntimeError: x"}
        )

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    for fake, code, text in ((failing, 1, "1 point(s) failed"), (interrupted, 130, "rerun the same command")):
        monkeypatch.setattr(sw, "sweep", fake)
        res = CliRunner().invoke(_app(), ["sweep", "concentration", "-g", "beta=1", "-q", "--no-figures"])
        assert res.exit_code == code and text in res.output, res.output


@pytest.mark.filterwarnings("ignore:t_max = :attnflow.experiments.config.ConfigWarning")  # short on purpose
@pytest.mark.slow
def test_command_runs_concentration_grid(client, tmp_path):
    """The real experiment, a tiny grid, through `attnflow sweep --scheduler` on the 2-worker cluster."""
    from typer.testing import CliRunner

    out = tmp_path / "conc"
    args = ["sweep", "concentration-tiny", "-g", "beta=10,100", "-g", "seed=0:2", "--set", "N=32"]
    args += ["--set", "t_max=2.0", "--scheduler", client.scheduler.address, "--out", str(out)]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    assert "4 run, 0 already done, 0 failed" in res.output and "t_star" in res.output
    assert (out / "figures" / "sweep.png").stat().st_size > 0
    # each task shares the host's cores with the other worker: cores // 2 torch threads
    from attnflow.sweeps.point import cpus, threads_on_host

    assert client.submit(threads_on_host, pure=False).result() == 2
    entries = sweep_info(out)["entries"].values()
    assert {e["torch_threads"] for e in entries} == {max(1, cpus() // 2)}
    ds = open_sweep(out)
    assert ds.attrs["experiment"] == "concentration" and ds.attrs["complete"]
    assert dict(ds.w2.sizes) == {"beta": 2, "seed": 2, "time": 11}
    from attnflow.experiments import load_config, run_experiment

    ref = run_experiment(load_config("concentration-tiny", ["betas=[100.0]", "N=32", "t_max=2.0", "seed=1"]))
    np.testing.assert_allclose(ds.w2.sel(beta=100.0, seed=1), ref.w2.sel(beta=100.0), rtol=1e-12)
    assert float(ds.t_star.sel(beta=100.0, seed=1)) == float(ref.t_star.sel(beta=100.0))
    res = CliRunner().invoke(_app(), args)  # again: every point already done
    assert res.exit_code == 0 and "0 run, 4 already done" in res.output, res.output


def test_one_gpu_per_worker(monkeypatch):
    """A config asking for device "cuda" runs on cuda:k, k the worker's number modulo the GPUs;
    other configs and single-GPU hosts are left alone (checked here without a GPU)."""
    import types

    import distributed
    import torch

    from attnflow.experiments import load_config
    from attnflow.sweeps.point import worker_device

    cfg = load_config("concentration-tiny", ["device=cuda"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for name, want in (("0", "cuda:0"), ("3", "cuda:1")):
        monkeypatch.setattr(
            distributed, "get_worker", lambda n=name: types.SimpleNamespace(name=n, address="x")
        )
        assert worker_device(cfg).device == want
    assert worker_device(load_config("concentration-tiny")).device == "cpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert worker_device(cfg).device == "cuda"


QUIET_SCRIPT = """
import sys
sys.path[:0] = [{tests!r}, {tests_root!r}]
from test_sweep import ToyConfig, run_toy_torch
from attnflow.sweeps import sweep

if __name__ == "__main__":
    print(sweep(ToyConfig(), {{"seed": [0, 1, 2, 3]}}, store={store!r}, workers=2, run_fn=run_toy_torch,
                progress=False))
"""


@pytest.mark.slow
def test_own_cluster_closes_without_killing_its_workers(tmp_path):
    """A sweep on the LocalCluster it starts gives its workers the time they need to exit: no
    "Worker process still alive after 4.0 seconds, killing" from Dask at the end."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    tests, tests_root = str(Path(__file__).parent), str(Path(__file__).parents[1])
    script.write_text(QUIET_SCRIPT.format(tests=tests, tests_root=tests_root, store=str(tmp_path / "s")))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "4 run" in res.stdout
    assert "still alive" not in res.stderr and "killing" not in res.stderr, res.stderr


def test_point_warnings_are_each_config_warning_once():
    from attnflow.experiments import load_config
    from attnflow.sweeps.config import point_config, point_warnings

    base = load_config("concentration-tiny")  # t_max = 8
    configs = [point_config(base, {"beta": b}) for b in (10.0, 1e4, 1e4)]
    (warning,) = point_warnings(configs)
    assert warning.startswith("t_max = 8 is shorter than ln(beta) = 9.2 for beta = 10000")
    assert point_warnings(configs[:1]) == []


def test_the_sweep_table_shows_the_experiment_s_columns_first():
    """Each point's state, then concentration's status and resolution ratio before its numbers."""
    from attnflow.sweeps.read import _table

    scalars = {"t_star": 2.5, "min_w2": 0.4, "t_entry": 2.0, "N_used": 48, "resolution_ratio": 2.8}
    entry = {"point": {"beta": 10.0}, "status": "done", "attempts": 1, "seconds": 1.5}
    info = {
        "experiment": "concentration",
        "grid": {"beta": [10.0, 30.0]},
        "keys": ["beta=10", "beta=30"],
        "entries": {
            "beta=10": {**entry, "scalars": {**scalars, "status": "under-resolved"}},
            "beta=30": {**entry, "point": {"beta": 30.0}, "status": "pending", "attempts": 0, "seconds": 0.0},
        },
    }
    header, rows = _table(info, 6)
    first = ["status", "N_used", "resolution_ratio", "t_star", "min_w2"]
    assert header == ["beta", "run", "attempts", "seconds", *first, "t_entry"]
    assert rows[0][4:7] == ["under-resolved", "48", "2.8"] and rows[1][1] == "pending"
    assert _table({**info, "experiment": "toy"}, 2)[0][4:] == ["t_star", "min_w2"]  # (no columns first)
