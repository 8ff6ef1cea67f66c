"""A toy experiment defined here, outside the package: registered once, it gets `attnflow run`,
`list`, `show`, `plot`, the report and a sweep without any change to attnflow."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import xarray as xr
from pydantic import Field, PositiveFloat, PositiveInt
from typer.testing import CliRunner

import attnflow.experiments as experiments
from attnflow import plot
from attnflow.cli import app
from attnflow.experiments import Experiment, ExperimentConfig, Reporter

runner = CliRunner()


class ToyConfig(ExperimentConfig):
    """y(t) = exp(-rate t): a decay with a closed form."""

    experiment: Literal["toy"] = "toy"
    rate: PositiveFloat = Field(1.0, description="decay rate")
    t_max: PositiveFloat = Field(2.0, description="final time")
    n_times: PositiveInt = Field(5, description="number of saved times")


def run(config: ToyConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    reporter = progress or Reporter()
    reporter.overall(1, "toy")
    t = np.linspace(0.0, config.t_max, config.n_times)
    reporter.advance()
    return xr.Dataset(
        {"y": (("time",), np.exp(-config.rate * t)), "y_final": ((), math.exp(-config.rate * config.t_max))},
        coords={"time": t},
        attrs={"experiment": "toy", "config": json.dumps(config.model_dump()), "seed": config.seed},
    )


def summarize(ds: xr.Dataset) -> dict:
    return {"experiment": "toy", "y_final": float(ds["y_final"]), "times": int(ds.sizes["time"])}


def figures(ds: xr.Dataset, outdir: Path, *, dpi: int = plot.DPI, animation: bool = False) -> list[Path]:
    fig, axes = plot.new_figure(1, 1, (4.0, 3.0))
    axes[0][0].plot(ds["time"].values, ds["y"].values, marker="o")
    fig.suptitle(plot.run_title(ds, "Toy decay"))
    return plot.save(fig, outdir, "decay", dpi)


TOY = Experiment(
    name="toy",
    description="an exponential decay, defined in the tests",
    Config=ToyConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={"decay": ("Toy decay", "y = exp(-rate t) against t, one marker per saved time.")},
    presets={"toy-short": {"t_max": 1.0, "n_times": 3}},
)


@pytest.fixture
def toy():
    experiments.register(TOY)
    yield TOY
    experiments.unregister("toy")
    assert "toy" not in experiments.REGISTRY and "toy-short" not in experiments.PRESETS


def test_registration(toy):
    assert experiments.REGISTRY["toy"] is toy and experiments.get_experiment("toy") is toy
    assert experiments.PRESETS["toy-short"] == ("toy", {"t_max": 1.0, "n_times": 3})
    experiments.register(toy)  # the same experiment again: nothing changes
    with pytest.raises(ValueError, match="'toy' is taken"):
        experiments.register(Experiment(**{**vars(toy), "presets": {}}))
    with pytest.raises(ValueError, match="taken"):
        experiments.register(Experiment(**{**vars(toy), "name": "concentration", "presets": {}}))
    with pytest.raises(ValueError, match="not registered"):
        experiments.unregister("concentration")
    cfg = experiments.load_config("toy-short", ["rate=3"])
    assert cfg == ToyConfig(rate=3.0, t_max=1.0, n_times=3)
    assert experiments.load_config("toy", [f"{k}={v}" for k, v in cfg.model_dump().items()]) == cfg
    assert 'experiment = "toy"' in experiments.to_toml(cfg)


def test_experiment_checks_its_fields():
    with pytest.raises(TypeError, match="figures must be callable"):
        Experiment(**{**vars(TOY), "figures": None})
    with pytest.raises(TypeError, match=r"captions\['decay'\]"):
        Experiment(**{**vars(TOY), "captions": {"decay": "a caption without a title"}})


def test_run_list_show_plot_and_report(toy, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "toy", "--out", str(out), "--set", "rate=2.0", "--quiet", "--pdf"])
    assert result.exit_code == 0, result.output
    for name in ("config.toml", "result.zarr", "summary.json", "summary.md", "report.md", "report.html"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["y_final"] == pytest.approx(math.exp(-4.0), rel=1e-12)
    assert {p.name for p in (out / "figures").iterdir()} == {"decay.png", "decay.pdf"}
    report = (out / "report.md").read_text()
    assert "### Toy decay\n" in report and "y = exp(-rate t) against t" in report
    assert "![decay](figures/decay.png)" in report

    listed = runner.invoke(app, ["list", "toy"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "decay rate" in listed.output and "toy-short" in listed.output
    shown = runner.invoke(app, ["show", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "y_final" in shown.output and "decay.png" in shown.output

    (out / "figures" / "decay.png").unlink()
    redrawn = runner.invoke(app, ["plot", str(out), "--quiet"])
    assert redrawn.exit_code == 0, redrawn.output
    assert (out / "figures" / "decay.png").stat().st_size > 1000

    preset = runner.invoke(app, ["run", "toy-short", "--out", str(tmp_path / "short"), "-q", "--no-figures"])
    assert preset.exit_code == 0, preset.output
    assert json.loads((tmp_path / "short" / "summary.json").read_text())["times"] == 3


def test_sweep_in_process(toy, tmp_path):
    """Dask worker processes would not see this registration: the sweep runs on threads here."""
    from distributed import Client

    from attnflow.sweeps import open_sweep, sweep

    store = tmp_path / "store"
    grid = {"rate": [1.0, 2.0, 4.0], "seed": [0, 1]}
    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0") as client:
        result = sweep("toy", grid, client=client, store=store, progress=False)
    assert result.ok and len(result.ran) == 6
    ds = open_sweep(store)
    final = ds["y_final"].transpose("rate", "seed").values
    np.testing.assert_allclose(final, np.exp(-2.0 * np.array(grid["rate"]))[:, None] * np.ones(2), rtol=1e-12)
    assert plot.sweep_variables(ds) == ["y_final"]
    paths = experiments.plot_sweep(ds, store / "figures", pdf=True)  # no sweep_figures: the generic figure
    assert [p.name for p in paths] == ["sweep.png", "sweep.pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
