"""The units of a run (attnflow.experiments.units): reuse, progress, timings; the resume of the
experiments whose units are new (layers, zero-temperature): interrupted after one unit, the rerun
computes only the rest and gives the uninterrupted result."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import attnflow.dynamics.reference as reference
import attnflow.dynamics.zero_temperature as zero_temperature
import attnflow.experiments.layers as layers
from attnflow.experiments import load_config, run_experiment
from attnflow.experiments.units import Unit, Units
from attnflow.progress import Reporter


class Counting(Reporter):
    """A Reporter that adds up the overall bar's advances."""

    def __init__(self) -> None:
        super().__init__()
        self.advanced = 0.0

    def advance(self, n: float = 1) -> None:
        self.advanced += n


def test_units_reuse_finished_parts_and_advance_by_cost(tmp_path):
    cfg = load_config("layers-tiny")
    calls: list[str] = []

    def unit(name: str, value: float) -> Unit:
        def compute() -> xr.Dataset:
            calls.append(name)
            return xr.Dataset({"v": ((), value)})

        return Unit(name, compute, cost=value, timing=f"{name}_s")

    reporter = Counting()
    first = Units(cfg, ("Ls",), tmp_path, reporter)
    parts = first.run_all([unit("a", 2.0), unit("b", 3.0)])
    assert [float(p["v"]) for p in parts] == [2.0, 3.0]
    assert calls == ["a", "b"] and reporter.advanced == 5.0
    assert set(first.timings) == {"a_s", "b_s"}
    again = Units(cfg, ("Ls",), tmp_path, Counting())
    assert again.done("a") and not again.done("c")
    assert float(again.run(unit("a", 2.0))["v"]) == 2.0
    assert calls == ["a", "b"]  # read back, not computed
    other = Units(load_config("layers-tiny", ["N=20"]), ("Ls",), tmp_path, Counting())
    assert not other.done("a")  # another config: another fingerprint
    ds = other.finish(xr.Dataset())
    assert ds.attrs["experiment"] == "layers" and "total_s" in ds.attrs["timings"]


def _identical_data(a: xr.Dataset, b: xr.Dataset) -> None:
    xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())


def test_layers_resume_after_the_reference(tmp_path, monkeypatch):
    """Interrupted after its first unit (the ODE reference): the rerun computes the depths only."""
    cfg = load_config("layers-tiny", ["threads=1"])
    fresh = run_experiment(cfg, None)
    real = layers.transformer
    calls: list[int] = []

    def failing(X0, att, L, *args, **kw):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(layers, "transformer", failing)
    with pytest.raises(RuntimeError, match="injected"):
        run_experiment(cfg, tmp_path)
    assert [p.name for p in (tmp_path / "parts").glob("*.zarr")] == ["reference.zarr"]

    def counting(X0, att, L, *args, **kw):
        calls.append(L)
        return real(X0, att, L, *args, **kw)

    def no_reference(*args, **kw):
        raise AssertionError("the reference was computed again")

    monkeypatch.setattr(layers, "transformer", counting)
    monkeypatch.setattr("attnflow.dynamics.integrate.simulate", no_reference)
    resumed = run_experiment(cfg, tmp_path)
    assert calls == list(cfg.Ls)
    _identical_data(resumed, fresh)
    assert resumed.attrs["fits"] == fresh.attrs["fits"]


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_zero_temperature_resume_after_the_reference(tmp_path, monkeypatch):
    """Interrupted after its first unit (the N = infinity reference): the rerun computes the cloud
    only, and its result is the uninterrupted run's."""
    cfg = load_config("zero-temperature-tiny", ["N=200", "n_keep=8"])
    fresh = run_experiment(cfg, None)
    real = zero_temperature.simulate_zero_temperature

    def failing(*args, **kw):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(zero_temperature, "simulate_zero_temperature", failing)
    with pytest.raises(RuntimeError, match="injected"):
        run_experiment(cfg, tmp_path)
    assert [p.name for p in (tmp_path / "parts").glob("*.zarr")] == ["reference.zarr"]

    def no_reference(*args, **kw):
        raise AssertionError("the reference was computed again")

    calls: list[int] = []

    def counting(X0, *args, **kw):
        calls.append(len(X0))
        return real(X0, *args, **kw)

    monkeypatch.setattr(reference, "reference_w2", no_reference)
    monkeypatch.setattr(zero_temperature, "simulate_zero_temperature", counting)
    resumed = run_experiment(cfg, tmp_path)
    assert calls == [200]
    _identical_data(resumed, fresh)
    assert resumed.attrs["fits"] == fresh.attrs["fits"]
    assert np.array_equal(resumed.x.values, fresh.x.values)


def test_zero_temperature_without_reference_resumes_with_its_warning(tmp_path, monkeypatch):
    """Where the exact formula does not apply, the reference's part says why: a rerun reads it back
    and warns again (the warning is part of the result)."""
    calls: list[int] = []

    def no_formula(*args, **kw):
        calls.append(1)
        raise ValueError("has no exact formula here")

    monkeypatch.setattr(reference, "reference_w2", no_formula)
    cfg = load_config("zero-temperature-tiny", ["N=200", "n_keep=8"])
    first = run_experiment(cfg, tmp_path)
    again = run_experiment(cfg, tmp_path)
    assert calls == [1]
    for ds in (first, again):
        assert "no N = infinity reference (has no exact formula here)" in ds.attrs["warnings"]
        assert "w2_err" not in ds.variables and "w2_cloud" not in ds.variables
    _identical_data(first, again)
