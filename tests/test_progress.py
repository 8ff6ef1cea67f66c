"""Progress bars of the API (`progress=True` on simulate, run_experiment and sweep) and the one
thread policy (`threads=` on simulate, the configs' `threads`)."""

from __future__ import annotations

import re
import sys
import types
from typing import ClassVar

import numpy as np
import pytest
import torch

import attnflow.progress as progress
from attnflow import _threads
from attnflow.attention import worked_example
from attnflow.dynamics.integrate import simulate
from attnflow.measures.sampling import sample_uniform


class FakeBar:
    """Records what a bar was told (stands in for `progress.open_bar`)."""

    made: ClassVar[list[FakeBar]] = []

    def __init__(self, description, total, unit="", steps=False):
        self.description, self.total, self.updates, self.closed = description, float(total), [], False
        self.steps = steps
        FakeBar.made.append(self)

    def update(self, completed, total=None):
        self.updates.append((float(completed), total))

    def describe(self, text):
        self.description = text

    def close(self):
        self.closed = True


class FakeWidget(FakeBar):
    """A notebook widget bar (stands in for `progress.Bar`): records resets too."""

    made: ClassVar[list[FakeBar]] = []

    def __init__(self, description, total, unit="", notebook=None, *, steps=False, leave=True):
        super().__init__(description, total, unit, steps)
        FakeBar.made.pop()
        FakeWidget.made.append(self)
        self.resets = []

    def reset(self, description, total):
        self.resets.append((description, total))
        self.description = description


@pytest.fixture
def bars(monkeypatch):
    FakeBar.made = []
    FakeWidget.made = []
    monkeypatch.setattr(progress, "open_bar", FakeBar)
    return FakeBar.made


def _shell(config):
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: types.SimpleNamespace(config=config)  # type: ignore[attr-defined]
    return ipython


def test_in_notebook_only_in_a_jupyter_kernel(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not progress.in_notebook()  # a script, a test
    monkeypatch.setitem(sys.modules, "IPython", _shell({"TerminalInteractiveShell": {}}))
    assert not progress.in_notebook()  # IPython in a terminal: Rich bars
    monkeypatch.setitem(sys.modules, "IPython", _shell({"IPKernelApp": {"connection_file": "k.json"}}))
    assert progress.in_notebook()
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)  # IPython imported, no shell running
    assert not progress.in_notebook()


def test_time_bar_for_each_kind_of_progress(bars):
    with progress.time_bar(None, "x") as cb:
        assert cb is None
    with progress.time_bar(False, "x") as cb:
        assert cb is None
    seen = []
    with progress.time_bar(lambda t, tf: seen.append((t, tf)), "x") as cb:
        cb(1.0, 2.0)
    assert seen == [(1.0, 2.0)] and not bars
    with progress.time_bar(True, "simulate") as cb:
        assert not bars  # the bar comes with the first report (no bar for a call that fails its checks)
        cb(0.0, 4.0)
        cb(4.0, 4.0)
    assert len(bars) == 1 and bars[0].total == 4.0 and bars[0].updates[-1][0] == 4.0 and bars[0].closed
    with pytest.raises(TypeError, match="progress"), progress.time_bar("yes", "x"):
        pass


def test_simulate_progress_true_shows_a_bar_to_t_final(bars):
    X0 = sample_uniform(12, 3, seed=0)
    times = np.linspace(0.0, 0.5, 6)
    tr = simulate(X0, worked_example(5.0), times, progress=True)
    ref = simulate(X0, worked_example(5.0), times)
    np.testing.assert_array_equal(tr.x, ref.x)  # the bar changes nothing
    assert len(bars) == 1 and bars[0].closed
    assert bars[0].total == 0.5 and bars[0].updates[-1][0] == pytest.approx(0.5)
    assert simulate(X0, worked_example(5.0), times, progress=False).x.shape == ref.x.shape
    with pytest.raises(TypeError, match="progress must be a callable"):
        simulate(X0, worked_example(5.0), times, progress="bar")


def test_a_real_bar_in_a_terminal_and_in_a_notebook(capsys, monkeypatch):
    """Every kind of bar runs: Rich on stderr; in a notebook tqdm's widget (where ipywidgets is
    installed) or plain lines on stdout."""
    kinds = [(False, False), (True, False)] + ([(True, True)] if progress.has_widgets() else [])
    for notebook, widgets in kinds:
        monkeypatch.setattr(progress, "has_widgets", lambda widgets=widgets: widgets)
        bar = progress.Bar("work", 3.0, unit="time", notebook=notebook)
        bar.update(1.5)
        bar.update(3.0, total=3.0)
        bar.describe("work (done)")
        bar.close()
        bar.close()  # twice is harmless
    out = capsys.readouterr()
    assert "work" in out.err
    assert re.match(r"work \(done\): 3/3 time in \d+\.\d s\n", out.out)  # lines (then a widget's text)


def test_notebook_bars_without_ipywidgets_are_a_few_plain_lines(capsys, monkeypatch):
    """No tqdm text bar in a notebook's stored output: a bar over t is one line when it closes, a bar
    of steps (a sweep's points) one line per step; no carriage returns or escape codes."""
    monkeypatch.setattr(progress, "has_widgets", lambda: False)
    bar = progress.Bar("simulate", 6.0, unit="time", notebook=True)
    for t in np.linspace(0.0, 6.0, 200):
        bar.update(t)
    bar.close()
    points = progress.Bar("sweep seed", 3, unit="points", notebook=True, steps=True)
    for done in (1, 1, 2):
        points.update(done)
    points.describe("sweep seed (1 failed)")
    points.update(3)
    points.close()
    unfinished = progress.Bar("beta = 10", 5.0, unit="time", notebook=True)
    unfinished.update(2.5)
    unfinished.close()  # interrupted: the line says how far it got
    out = capsys.readouterr()
    said = [line.split(" in ")[0] for line in out.out.splitlines()]
    assert said == [
        "simulate: 6/6 time",
        "sweep seed: 1/3 points",
        "sweep seed: 2/3 points",
        "sweep seed (1 failed): 3/3 points",
        "beta = 10: 2.5/5 time",
    ]
    assert out.err == "" and "\r" not in out.out and "\x1b" not in out.out


def test_tqdm_reporter_without_ipywidgets_prints_a_line_per_task(capsys, monkeypatch):
    monkeypatch.setattr(progress, "has_widgets", lambda: False)
    rep = progress.TqdmReporter()
    rep.overall(2, "run: 2 betas")
    for beta in (10, 30):
        with rep.task(f"beta = {beta}", total=4.0) as cb:
            cb(2.0, 4.0)
            cb(4.0, 4.0)
        rep.advance()
    rep.info("run: done in 1.0 s")
    rep.warn("a warning")
    rep.close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" in ")[0] for line in lines[:2]] == ["beta = 10: 4/4 time", "beta = 30: 4/4 time"]
    assert lines[2:] == ["run: done in 1.0 s", "attnflow: warning: a warning"]


def test_tqdm_reporter_with_widgets_reuses_one_task_bar(monkeypatch, bars):
    """With ipywidgets, the tasks take one widget in turn (few widgets: a small saved widget state);
    a task inside a task gets its own; close() closes them all."""
    monkeypatch.setattr(progress, "has_widgets", lambda: True)
    monkeypatch.setattr(progress, "Bar", FakeWidget)
    rep = progress.TqdmReporter()
    rep.overall(3, "run")
    for beta in (10, 30):
        with rep.task(f"beta = {beta}", total=4.0) as cb:
            cb(4.0, 4.0)
        rep.advance()
    with rep.task("outer", total=1.0), rep.task("inner", total=2.0) as inner:
        inner(1.0, 2.0)
    rep.close()
    made = FakeWidget.made
    assert [b.description for b in made] == ["run", "outer", "inner"]  # the task bar: "beta = 10", ...
    assert made[1].resets == [("beta = 30", 4.0), ("outer", 1.0)] and made[2].updates == [(1.0, 2.0)]
    assert all(b.closed for b in made)


def test_reporter_for_each_kind_of_progress(monkeypatch):
    mine = progress.Reporter()
    assert progress.reporter_for(mine) == (mine, False)
    for quiet in (None, False):
        rep, own = progress.reporter_for(quiet)
        assert type(rep) is progress.Reporter and not own
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    rep, own = progress.reporter_for(True)
    assert isinstance(rep, progress.TqdmReporter) and own
    rep.close()
    monkeypatch.setattr(progress, "in_notebook", lambda: False)
    rep, own = progress.reporter_for(True)
    assert isinstance(rep, progress.RichReporter) and own
    rep.close()
    with pytest.raises(TypeError, match="progress"):
        progress.reporter_for("yes")


def test_tqdm_reporter_records_and_draws(capsys):
    rep = progress.TqdmReporter()
    rep.overall(2, "run")
    with rep.task("beta = 10", total=1.0) as cb:
        cb(0.5, 1.0)
    rep.advance()
    rep.info("a message")
    rep.warn("a warning")
    rep.close()
    assert rep.messages == ["a message"] and rep.warnings == ["a warning"]
    out = capsys.readouterr()
    assert "a message" in out.out + out.err and "warning: a warning" in out.out + out.err


def test_run_experiment_progress_true_closes_its_bars(monkeypatch):
    from attnflow.experiments import load_config, run_experiment

    made = []

    class Recording(progress.Reporter):
        def __init__(self):
            super().__init__()
            self.closed = False
            made.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(progress, "in_notebook", lambda: False)
    monkeypatch.setattr(progress, "RichReporter", Recording)
    cfg = load_config("concentration-tiny", ["N=8", "t_max=0.4", "betas=[1.2]", "n_keep=2"])
    ds = run_experiment(cfg, progress=True)
    assert ds.w2.dims == ("beta", "time")
    assert len(made) == 1 and made[0].closed and any("done in" in m for m in made[0].messages)
    with pytest.raises(TypeError, match="progress"):
        run_experiment(cfg, progress="bars")


def test_sweep_progress_bar_counts_points(bars):
    from attnflow.sweeps.progress import ProgressBar

    told = []
    ProgressBar(lambda done, total: told.append((done, total)), 2, "s").advance(1)
    assert not bars
    bar = ProgressBar(True, 2, "store")
    bar.advance(1)
    bar.after(failed=1)
    bar.close()
    assert bars[0].updates == [(1.0, None)] and "1 failed" in bars[0].description and bars[0].closed
    assert bars[0].steps  # where a bar is plain lines, one per point
    assert ProgressBar(None, 2, "s").bar is None and ProgressBar(False, 2, "s").bar is None


# ----------------------------------------------------------------------------------------- threads


def test_simulate_runs_on_the_threads_it_is_given_and_restores_torch():
    X0 = sample_uniform(10, 3, seed=1)
    before = torch.get_num_threads()
    seen = []

    def record(t, t_final):
        seen.append(torch.get_num_threads())

    simulate(X0, worked_example(3.0), [0.0, 0.1], progress=record)  # the default: one thread
    assert set(seen) == {1} and torch.get_num_threads() == before
    seen.clear()
    simulate(X0, worked_example(3.0), [0.0, 0.1], progress=record, threads=0)  # torch's own setting
    assert set(seen) == {before}
    with pytest.raises(ValueError, match="threads"):
        simulate(X0, worked_example(3.0), [0.0, 0.1], threads=-1)
    with pytest.raises(TypeError, match="threads"):
        simulate(X0, worked_example(3.0), [0.0, 0.1], threads=1.5)


def test_one_thread_policy_for_api_and_configs():
    """The API's default, the configs' default and their description come from one place."""
    import inspect

    from attnflow.experiments import REGISTRY

    assert inspect.signature(simulate).parameters["threads"].default == _threads.DEFAULT_THREADS
    with_threads = [n for n, exp in REGISTRY.items() if "threads" in exp.Config.model_fields]
    assert {"concentration", "terminal", "layers", "heads"} <= set(with_threads)
    for name in with_threads:  # (zero-temperature runs no torch)
        field = REGISTRY[name].Config.model_fields["threads"]
        assert (field.default, field.description) == (_threads.DEFAULT_THREADS, _threads.THREADS_HELP), name
    before = torch.get_num_threads()
    with _threads.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.filterwarnings("ignore:t_max = :attnflow.experiments.config.ConfigWarning")  # short on purpose
def test_the_overall_bar_of_a_ladder_weighs_each_level_by_its_cost():
    """concentration: the zero-temperature part and the time-step probe count as a first level each,
    each level advances the bar by N^2, a ladder that stops early advances by the levels it skips; the
    bar ends at its total.
    Then `done` closes the bars before the run's last line."""
    from attnflow.experiments import load_config, run_experiment

    class Recording(progress.Reporter):
        def __init__(self):
            super().__init__()
            self.total, self.steps, self.events = 0.0, [], []

        def overall(self, total, description):
            self.total = total

        def advance(self, n=1):
            self.steps.append(n)

        def done(self, message):
            self.events.append("done")
            super().done(message)

        def info(self, message):
            self.events.append("info")
            super().info(message)

    levels = [8.0**2, 16.0**2, 32.0**2]
    ran_levels = []
    for overrides in (["tol=10.0", "curve_atol=10.0"], ["tol=1e-9", "curve_atol=1e-9", "curve_rtol=1e-9"]):
        reporter = Recording()
        config = load_config(
            "concentration-tiny",
            ['N="auto"', "N_min=8", "N_max=32", "streak=1", "betas=[10.0, 30.0]", "t_max=1.0", *overrides],
        )
        ds = run_experiment(config, progress=reporter)
        assert reporter.total == 2 * levels[0] + 2 * sum(levels)  # (the time-step probe: one more)
        assert sum(reporter.steps) == reporter.total and reporter.steps[0] == levels[0]
        ran = int(np.isfinite(ds.ladder_N.values[0]).sum())
        ran_levels.append(ran)
        assert reporter.steps[1 : 1 + ran] == levels[:ran]  # the first beta's levels, as they finish
        assert reporter.events[-2:] == ["done", "info"]  # (done prints its line through info)
        assert reporter.messages[-1].startswith("concentration: done in")
    assert ran_levels[0] < 3 == ran_levels[1]  # the loose tolerances stopped early, the strict ones did not
