"""Figures, animations and the report, from small synthetic Datasets that follow the schemas.

The shared pieces live in `attnflow.plot`; each experiment's figures in its module (`FIG` below maps
a figure function to it); `attnflow.experiments.plot_run` draws a run's figures by its experiment.
"""

from __future__ import annotations

import importlib
import itertools
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

xr = pytest.importorskip("xarray")
PIL_Image = pytest.importorskip("PIL.Image")

import attnflow.experiments as experiments  # noqa: E402
import attnflow.experiments.concentration.figures as cf  # noqa: E402
from attnflow import plot  # noqa: E402
from attnflow._text import format_value  # noqa: E402
from attnflow.experiments import heads, layers, terminal, zero_temperature  # noqa: E402
from attnflow.plot import animation, tokens  # noqa: E402

# the heads figures' module (the package's name `figures` is its function)
heads_figures = importlib.import_module("attnflow.experiments.heads.figures")

DPI = 50  # small images keep the tests fast

# each figure function in its experiment's module
FIG = {
    "plot_w2": cf.plot_w2,
    "plot_t_star": cf.plot_t_star,
    "plot_min_w2": cf.plot_min_w2,
    "plot_mass": terminal.plot_mass,
    "plot_zero_temperature": zero_temperature.plot_zero_temperature,
    "plot_ladder": cf.plot_ladder,
    "plot_layers": layers.plot_layers,
}


def _unit(X):
    return X / np.linalg.norm(X, axis=-1, keepdims=True)


def _zero_temperature_flow(X0, A, t):
    """Exact zero-temperature flow for B = I: x(t) = expm(A t) x0 / |expm(A t) x0| (A symmetric)."""
    w, U = np.linalg.eigh(A)
    Y = np.einsum("ij,tj,nj->tni", U, np.exp(np.outer(t, w - w.max())), X0 @ U)
    return _unit(Y)


def make_concentration(d=3, n_keep=12, betas=(10.0, 100.0, 1000.0), T=9, k=1, seed=0):
    """A Dataset with the concentration schema; curves follow the theorem's shape."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 8.0, T)
    betas = np.asarray(betas, dtype=float)
    A = np.diag(np.linspace(1.0, -1.0, d))
    basis = np.eye(d)[:, :k]
    X0 = _unit(rng.standard_normal((n_keep, d)))
    xz = _zero_temperature_flow(X0, A, t)
    a = np.sqrt(np.log1p(betas) / betas)
    w2 = a[:, None] * np.exp(0.6 * t)[None] + np.exp(-1.0 * t)[None]
    x = _unit(xz[None] + 0.3 * a[:, None, None, None] * np.exp(0.3 * t)[None, :, None, None]
              * rng.standard_normal((len(betas), T, n_keep, d)))  # fmt: skip
    mass = np.clip(1 - np.exp(-t)[None] + 0 * a[:, None], 0, 1)
    i = np.argmin(w2, axis=1)
    ds = xr.Dataset(
        {
            "w2": (("beta", "time"), w2),
            "coupling_bound": (("beta", "time"), 1.3 * w2),
            "w2_zero": (("time",), np.exp(-t)),
            "lyapunov_zero": (("time",), np.exp(-2 * t)),
            "lyapunov": (("beta", "time"), w2**2),
            "mass_A": (("beta", "time"), mass),
            "mass_V": (("beta", "time"), 0.5 * mass),
            "t_star": (("beta",), t[i]),
            "t_star_lo": (("beta",), t[i] - 0.5),
            "t_star_hi": (("beta",), t[i] + 0.7),
            "min_w2": (("beta",), w2[np.arange(len(betas)), i]),
            "resolution_ratio": (("beta",), 100.0 / betas),
            "x": (("beta", "time", "token", "dim"), x.astype(np.float32)),
            "x_zero": (("time", "token", "dim"), xz.astype(np.float32)),
            "basis_A": (("dim", "k"), basis),
        },
        coords={"beta": betas, "time": t, "token": np.arange(n_keep), "dim": np.arange(d)},
        attrs={
            "experiment": "concentration",
            "config": json.dumps({"experiment": "concentration", "N": 400, "d": d, "eps": 0.1}),
            "provenance": json.dumps({"attnflow": "0.1.0", "numpy": np.__version__}),
            "fits": json.dumps(
                {
                    "t_star": {"a": 0.5, "b": 0.4, "a_err": 0.1, "b_err": 0.05},
                    "min_w2": {"exponent": 0.6, "exponent_err": 0.05, "prefactor": 1.5},
                    "zero_temperature_rate": {"fitted": 1.0, "guaranteed": 0.5, "c_star": 1.0},
                    "theorem_bound": {"C1": 0.6, "c": 1.0, "K1": 1.0, "K2": 1.0},
                }
            ),
            "seed": seed,
            "kernel": "sdpa",
            "integrator": "rk4",
            "timings": json.dumps({"total_s": 1.0}),
        },
    )
    return ds


@pytest.fixture(autouse=True)
def _png_and_pdf():
    """The figures of this module are written as PNG and PDF, so that both are checked (outside
    `figure_formats` the default is PNG only: `test_default_is_png_only_and_pdf_on_request`)."""
    with plot.figure_formats("png", "pdf"):
        yield


@pytest.fixture(scope="module")
def conc3():
    return make_concentration(d=3, k=2)


@pytest.fixture(scope="module")
def conc5():
    return make_concentration(d=5, k=1, betas=(30.0, 300.0))


def _check_files(paths, stems):
    assert [p.name for p in paths] == [f"{s}.{ext}" for s in stems for ext in ("png", "pdf")]
    for p in paths:
        data = p.read_bytes()
        assert len(data) > 1000, p
        assert data.startswith(b"\x89PNG" if p.suffix == ".png" else b"%PDF"), p


# --- concentration figures ----------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["plot_w2", "plot_t_star", "plot_min_w2", "plot_mass"])
def test_concentration_figures_write_png_and_pdf(conc3, tmp_path, fn):
    paths = FIG[fn](conc3, tmp_path, dpi=DPI)
    _check_files(paths, [fn.removeprefix("plot_")])


@pytest.mark.parametrize(
    ("fn", "var"),
    [("plot_w2", "w2"), ("plot_t_star", "t_star"), ("plot_min_w2", "min_w2"), ("plot_mass", "mass_V")],
)
def test_missing_variable_is_a_clear_error(conc3, tmp_path, fn, var):
    with pytest.raises(ValueError, match=rf"{fn} needs variable\(s\) \['{var}'\]"):
        FIG[fn](conc3.drop_vars(var), tmp_path)
    assert not list(tmp_path.iterdir())


def test_wrong_dims_and_wrong_type_are_clear_errors(conc3, tmp_path):
    swept = conc3.expand_dims(seed=[0, 1])
    with pytest.raises(ValueError, match=r"dims.*plot_sweep"):
        cf.plot_w2(swept, tmp_path)
    with pytest.raises(TypeError, match=r"xarray\.Dataset"):
        cf.plot_w2({"w2": 1}, tmp_path)


def test_optional_parts_may_be_absent(conc3, tmp_path):
    bare = conc3.drop_vars(["coupling_bound", "w2_zero", "t_star", "min_w2"])
    bare.attrs = {"experiment": "concentration"}
    _check_files(cf.plot_w2(bare, tmp_path, dpi=DPI), ["w2"])
    bare = conc3.drop_vars(["t_star_lo", "t_star_hi"])
    bare.attrs = {}
    _check_files(cf.plot_t_star(bare, tmp_path, dpi=DPI), ["t_star"])
    _check_files(cf.plot_min_w2(bare, tmp_path, dpi=DPI), ["min_w2"])


def test_log_axes_survive_zeros_and_nans(conc3, tmp_path):
    ds = conc3.copy(deep=True)
    ds["w2"][0, 0] = 0.0
    ds["w2"][1, 2] = np.nan
    ds["min_w2"][0] = np.nan
    _check_files(cf.plot_w2(ds, tmp_path, dpi=DPI), ["w2"])
    _check_files(cf.plot_min_w2(ds, tmp_path, dpi=DPI), ["min_w2"])


def _with_claims(ds, rows):
    out = ds.copy()
    out.attrs = {**ds.attrs, "claims": json.dumps(rows)}
    return out


def test_points_follow_each_quantitys_own_convergence(conc3):
    """A converged beta whose t* did not converge is drawn open, not filled; under-resolved as x."""
    ds = conc3.copy()
    ds["status"] = ("beta", np.array(["converged", "converged", "under-resolved"]))
    ds["t_star_converged"] = ("beta", np.array([True, False, False]))
    assert list(cf.drawn_as(ds, "t_star", 3)) == ["converged", "resolved", "under-resolved"]
    assert list(cf.drawn_as(ds.drop_vars("t_star_converged"), "t_star", 3)) == list(ds.status.values)


def test_claim_rows_are_found_by_their_key(conc3):
    ds = _with_claims(conc3, [{"key": "law_t_star", "claim": "anything, reworded", "verdict": "observed"}])
    assert cf.claim_row(ds, "law_t_star")["claim"] == "anything, reworded"
    assert cf.claim_row(ds, "law_min_w2") == {}


def test_envelope_figure_needs_the_envelope_constants(conc3, tmp_path):
    assert cf.plot_envelope(conc3, tmp_path, dpi=DPI) == []  # no bound_envelope row: no figure
    row = {
        "key": "bound_envelope",
        "betas": [10.0, 100.0],
        "constants": {"K1": 0.3, "C1": 0.1, "K2": 0.9, "c": 0.25, "p0": 0.7},
    }
    _check_files(cf.plot_envelope(_with_claims(conc3, [row]), tmp_path, dpi=DPI), ["envelope"])


def _figure_of(monkeypatch, draw, ds, tmp_path):
    """The Figure a figure function draws (its saving skipped)."""
    drawn = []
    module = sys.modules[draw.__module__]  # (w2 and envelope live in bound_figures)
    monkeypatch.setattr(module, "save", lambda fig, *args, **kw: drawn.append(fig) or [])
    draw(ds, tmp_path, dpi=DPI)
    return drawn[0]


@pytest.mark.parametrize("draw", [cf.plot_w2, cf.plot_envelope])
def test_the_bound_drawn_is_the_envelope_and_every_converged_curve_lies_under_it(
    conc3, tmp_path, monkeypatch, draw
):
    # the curves are a(beta) e^{0.6 t} + e^{-t}; the envelope (row bound_envelope) holds for the two
    # converged betas; the least-squares fit in attrs["fits"] (C1 = 0.3) is crossed by the data
    row = {
        "key": "bound_envelope",
        "betas": [10.0, 100.0],
        "constants": {"K1": 1.0, "C1": 0.6, "K2": 1.1, "c": 1.0},
    }
    ds = _with_claims(conc3, [row])
    ds["status"] = ("beta", np.array(["converged", "converged", "under-resolved"]))
    ds.attrs["fits"] = json.dumps({"theorem_bound": {"C1": 0.3, "c": 1.0, "K1": 1.0, "K2": 1.0}})
    fig = _figure_of(monkeypatch, draw, ds, tmp_path)
    ax = fig.axes[0]
    bounds = {line.get_gid(): line for line in ax.get_lines() if (line.get_gid() or "").startswith("bound")}
    assert set(bounds) == {"bound beta=10", "bound beta=100"}  # the betas the envelope was decided on
    for beta in (10.0, 100.0):
        line = bounds[f"bound beta={beta:g}"]
        assert np.all(ds.w2.sel(beta=beta).values <= np.asarray(line.get_ydata()) * (1 + 1e-12))
        k = row["constants"]
        t = np.asarray(line.get_xdata())
        expected = k["K1"] * np.sqrt(np.log1p(beta) / beta) * np.exp(k["C1"] * t) + k["K2"] * np.exp(
            -k["c"] * t
        )
        np.testing.assert_allclose(
            line.get_ydata(), expected, rtol=1e-12
        )  # the row's constants, not the fit's
    labels = [line.get_label() for line in ax.get_lines()]
    assert not any("fit" in lab for lab in labels)  # no fitted curve on these figures
    assert sum("bound" in lab for lab in labels if not lab.startswith("_")) == 1  # one legend entry
    if draw is cf.plot_w2:  # the under-resolved curve is faded and says so
        faded = [line for line in ax.get_lines() if line.get_label() == "β = 1000 (under-resolved)"]
        assert len(faded) == 1 and faded[0].get_alpha() == pytest.approx(0.35)
        lo, hi = ax.get_ylim()  # the y range is the data's, not half empty
        data = np.concatenate([ds.w2.values.ravel(), ds.w2_zero.values])
        span = np.log(data.max() / data.min())  # margins of a few % of the data's span
        assert np.log(data.min() / lo) <= 0.07 * span and np.log(hi / data.max()) <= 0.13 * span


def test_beta_ticks_sit_at_the_data_and_the_title_names_the_n_used(conc3, tmp_path):
    from matplotlib.ticker import FixedLocator

    ds = conc3.copy()
    ds["N_used"] = ("beta", np.array([512, 1024, 1024]))
    assert "N ∈ {512, 1024}" in plot.run_title(ds, "x")
    _, axes = plot.new_figure(1, 1, (4, 3))
    ax = axes[0][0]
    cf._beta_axis(ax, np.array([5.0, 7.0, 10.0, 14.0, 20.0]))
    assert isinstance(ax.xaxis.get_major_locator(), FixedLocator)
    assert list(ax.xaxis.get_major_locator().tick_values(1, 30)) == [5.0, 7.0, 10.0, 14.0, 20.0]
    ax.set_yscale("log")
    ax.set_ylim(0.16, 0.31)
    plot.plain_log_ticks(ax.yaxis)
    ticks = [v for v in ax.yaxis.get_major_locator().tick_values(0.16, 0.31) if 0.16 <= v <= 0.31]
    assert len(ticks) >= 3


def test_many_betas_get_a_colorbar(tmp_path):
    ds = make_concentration(betas=np.geomspace(2, 2e4, 12), T=5, n_keep=4)
    _check_files(cf.plot_w2(ds, tmp_path, dpi=DPI), ["w2"])


# --- tokens -------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["conc3", "conc5"])
def test_snapshots_d3_and_d5(request, tmp_path, which):
    ds = request.getfixturevalue(which)
    paths = plot.plot_snapshots(ds, tmp_path, times=[0.0, 8.0], dpi=DPI)
    _check_files(paths, ["snapshots"])


def test_snapshot_time_and_beta_choice(conc5, tmp_path):
    paths = plot.plot_snapshots(conc5, tmp_path, beta=30.0, times=[0.0, 8.0], dpi=DPI)
    _check_files(paths, ["snapshots"])
    with pytest.raises(ValueError, match="beta = 31"):
        plot.plot_snapshots(conc5, tmp_path, beta=31.0)
    with pytest.raises(ValueError, match="times"):
        plot.plot_snapshots(conc5, tmp_path, times=[np.nan])
    with pytest.raises(ValueError, match=r"\['x'\]"):
        plot.plot_snapshots(conc5.drop_vars("x"), tmp_path)


def test_default_snapshot_times_include_start_t_star_and_end():
    t = np.linspace(0, 10, 11)
    assert tokens._default_time_indices(t, 7.2) == [0, 5, 7, 10]
    assert tokens._default_time_indices(t, None) == [0, 3, 5, 10]
    assert tokens._default_time_indices(t[:2], None) == [0, 1]


def test_directions_are_orthonormal_and_start_with_basis_A(conc5):
    X = conc5["x"].isel(beta=0).values.astype(float)
    U, labels = tokens._directions(conc5, X, 3)
    assert labels == ["u1", "w1", "w2"]
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(U[:, 0], conc5["basis_A"].values[:, 0])


@pytest.mark.parametrize("which", ["conc3", "conc5"])
def test_gif_has_one_frame_per_time(request, tmp_path, which, monkeypatch):
    monkeypatch.setattr(animation.shutil, "which", lambda name: None)  # GIF only
    ds = request.getfixturevalue(which)
    paths = plot.animate(ds, tmp_path / "tokens.gif", dpi=40)
    assert paths == [tmp_path / "tokens.gif"]
    with PIL_Image.open(paths[0]) as im:
        assert im.format == "GIF"
        assert im.n_frames == ds.sizes["time"]


def test_gif_of_zero_temperature_run(conc3, tmp_path, monkeypatch):
    monkeypatch.setattr(animation.shutil, "which", lambda name: None)
    ds = make_zero_temperature(conc3)
    paths = plot.animate(ds, tmp_path / "z.gif", dpi=40, fps=4)
    with PIL_Image.open(paths[0]) as im:
        assert im.n_frames == ds.sizes["time"]


def test_animate_rejects_bad_path_and_fps(conc3, tmp_path):
    with pytest.raises(ValueError, match="gif"):
        plot.animate(conc3, tmp_path / "tokens.mp4")
    with pytest.raises(ValueError, match="fps"):
        plot.animate(conc3, tmp_path / "tokens.gif", fps=0)
    with pytest.raises(TypeError, match="dpi"):
        plot.animate(conc3, tmp_path / "tokens.gif", dpi=1.5)
    with pytest.raises(ValueError, match="dpi"):
        layers.plot_layers(make_layers(), tmp_path, dpi=-1)


# --- other experiments ---------------------------------------------------------------------------


def make_zero_temperature(conc):
    return xr.Dataset(
        {
            "w2": (("time",), conc["w2_zero"].values),
            "lyapunov": (("time",), conc["w2_zero"].values ** 2),
            "x": (("time", "token", "dim"), conc["x_zero"].values),
            "basis_A": conc["basis_A"],
        },
        coords={k: conc[k] for k in ("time", "token", "dim")},
        attrs={
            "experiment": "zero-temperature",
            "fits": json.dumps({"fitted": 1.0, "fitted_err": 0.01, "guaranteed": 0.5, "c_star": 1.02}),
        },
    )


def make_terminal(conc):
    ds = conc[["mass_A", "mass_V", "x", "basis_A"]].copy()
    ds["mass_V_magnitude"] = 0.8 * ds["mass_V"]
    d = ds.sizes["dim"]
    ds["basis_V"] = (("dim", "kv"), (np.arange(d) + 1.0)[:, None] / np.linalg.norm(np.arange(d) + 1.0))
    B = ds.sizes["beta"]
    ds["terminal_time"] = ("beta", np.where(np.arange(B) == 1, np.nan, 2.0 + 2 * np.arange(B)))
    ds.attrs = {"experiment": "terminal", "config": json.dumps({"N": 50})}
    return ds


def make_ladder():
    """The N ladder of a concentration run (the former `resolution` experiment's figure)."""
    betas = np.array([10.0, 100.0])
    N = np.array([[128.0, 256.0, 512.0], [128.0, 256.0, np.nan]])
    m = np.array([[np.nan, 0.30, 0.29], [np.nan, 0.12, np.nan]])
    w = np.array([[-np.inf, 9.0, 10.0], [-np.inf, 8.5, np.nan]])
    return xr.Dataset(
        {
            "ladder_N": (("beta", "level"), N),
            "ladder_min_w2": (("beta", "level"), m),
            "ladder_window": (("beta", "level"), w),
        },
        coords={"beta": betas, "level": [0, 1, 2]},
        attrs={"experiment": "concentration", "config": json.dumps({"d": 3})},
    )


def make_layers():
    L = np.array([4, 8, 16, 32])
    h = 2.0 / L
    return xr.Dataset(
        {"error": (("L",), 0.3 * h), "h": (("L",), h)},
        coords={"L": L},
        attrs={"experiment": "layers", "fits": json.dumps({"order": 1.0, "order_err": 0.01})},
    )


@pytest.mark.parametrize(
    ("make", "fn", "stem"),
    [
        ("terminal", "plot_mass", "mass"),
        ("zero_temperature", "plot_zero_temperature", "zero_temperature"),
        ("ladder", "plot_ladder", "ladder"),
        ("layers", "plot_layers", "layers"),
    ],
)
def test_other_experiment_figures(conc3, tmp_path, make, fn, stem):
    maker = globals()[f"make_{make}"]
    ds = maker(conc3) if make in ("terminal", "zero_temperature") else maker()
    _check_files(FIG[fn](ds, tmp_path, dpi=DPI), [stem])


@pytest.mark.parametrize("which", ["conc3", pytest.param("conc5", marks=pytest.mark.slow)])
def test_terminal_snapshots_mark_v(request, tmp_path, which):
    ds = make_terminal(request.getfixturevalue(which))
    assert tokens._v_direction(ds, ds.sizes["dim"]) is not None
    _check_files(plot.plot_snapshots(ds, tmp_path, times=[0.0, 8.0], dpi=DPI), ["snapshots"])
    _check_files(terminal.figures(ds, tmp_path / "all", dpi=DPI), ["mass", "snapshots"])


def test_zero_temperature_snapshots_have_no_beta(conc3, tmp_path):
    ds = make_zero_temperature(conc3)
    _check_files(plot.plot_snapshots(ds, tmp_path, times=[0.0, 4.0], dpi=DPI), ["snapshots"])


@pytest.fixture
def recorded(monkeypatch):
    """The figure functions that the experiments' `figures` call, replaced by recorders: which
    figures `experiments.plot_run` draws for a run, without drawing."""
    calls = []

    def fake(name):
        def f(ds, outdir, *args, **kwargs):
            calls.append(name)
            return [outdir / f"{name}.png"]

        return f

    for module, names in (
        (cf, ["plot_w2", "plot_t_star", "plot_min_w2", "plot_mass", "token_figures", "plot_sweep"]),
        (layers, ["plot_layers"]),
        (heads_figures, ["plot_heads"]),
    ):
        for name in names:
            monkeypatch.setattr(module, name, fake(name))
    return calls


def test_plot_run_dispatch(conc3, tmp_path, recorded):
    experiments.plot_run(conc3, tmp_path)
    assert recorded == ["plot_w2", "plot_t_star", "plot_min_w2", "plot_mass", "token_figures"]
    recorded.clear()
    experiments.plot_run(make_layers(), tmp_path)
    experiments.plot_run(make_heads(), tmp_path)
    assert recorded == ["plot_layers", "plot_heads"]
    recorded.clear()
    experiments.plot_sweep(make_sweep(), tmp_path)  # the caller knows it is a sweep: its figure
    assert recorded == ["plot_sweep"]


def test_plot_run_skips_snapshots_without_tokens(conc3, tmp_path):
    ds = make_zero_temperature(conc3).drop_vars("x")
    _check_files(experiments.plot_run(ds, tmp_path, dpi=DPI, pdf=True), ["zero_temperature"])


def test_plot_run_unknown_or_missing_experiment(conc3, tmp_path):
    ds = conc3.copy()
    ds.attrs = {"experiment": "nope"}
    with pytest.raises(ValueError, match="no figures known for experiment 'nope'"):
        experiments.plot_run(ds, tmp_path)
    ds.attrs = {}
    with pytest.raises(ValueError, match=r"attrs\['experiment'\]"):
        experiments.plot_run(ds, tmp_path)


@pytest.mark.slow
def test_plot_run_and_report_end_to_end(conc5, tmp_path, monkeypatch):
    monkeypatch.setattr(animation.shutil, "which", lambda name: None)
    paths = experiments.plot_run(conc5, tmp_path / "figures", animation=True, dpi=DPI, pdf=True)
    _check_files(paths[:-1], ["w2", "t_star", "min_w2", "mass", "snapshots"])
    assert paths[-1] == tmp_path / "figures" / "tokens.gif"
    md = experiments.write_report(conc5, {"n": 1}, paths, tmp_path).read_text()
    assert md.count("![") == 6


def test_missing_variable_other_experiments(tmp_path):
    with pytest.raises(ValueError, match=r"plot_layers needs variable\(s\) \['h'\]"):
        layers.plot_layers(make_layers().drop_vars("h"), tmp_path)
    with pytest.raises(ValueError, match=r"plot_ladder needs variable\(s\) \['ladder_window'\]"):
        cf.plot_ladder(make_ladder().drop_vars("ladder_window"), tmp_path)


# --- pretrained heads -----------------------------------------------------------------------------


def make_heads(heads=(-1, 0, 1, 2), T=11, model=True, n_tokens=9):
    """A Dataset with the heads schema: whole layer (head = -1) and a few heads."""
    t = np.linspace(0.0, 2.0, T)
    heads = np.asarray(heads)
    k = np.arange(len(heads))[:, None]
    data = {
        "mass_S": (("head", "time"), np.clip(0.1 * k * t[None] / 2, 0, 1)),
        "mass_V": (("head", "time"), np.zeros((len(heads), T))),
        "alignment": (("head", "time"), 0.2 + 0.0 * k * t[None]),
        "diameter": (("head", "time"), 1.5 * np.exp(-0.5 * (heads[:, None] == -1) * t[None])),
        "w2_pi_S": (("head", "time"), 1.3 - 0.01 * (k + 1) * t[None]),
        "pi_undefined": (("head",), np.zeros(len(heads), dtype=int)),
        "beta_eff": (("head",), np.full(len(heads), 12.6)),
    }
    if model:
        w2m = 0.5 + 0.1 * (t[None] - 0.2 * (k + 1)) ** 2
        i = np.argmin(w2m, axis=1)
        data["w2_model"] = (("head", "time"), w2m)
        data["t_model"] = (("head",), t[i])
        data["w2_model_min"] = (("head",), w2m[np.arange(len(heads)), i])
        data["w2_model_ref"] = ((), float(w2m[0, 0]))
    cfg = {"experiment": "heads", "checkpoint": "/some/where/minilm", "layer": 2, "eps": 0.3, "text": "a b c"}
    return xr.Dataset(
        data,
        coords={"head": heads, "time": t, "token": np.arange(n_tokens)},
        attrs={"experiment": "heads", "config": json.dumps(cfg)},
    )


@pytest.mark.parametrize("model", [True, False])
def test_plot_heads_writes_png_and_pdf(tmp_path, model):
    _check_files(heads.plot_heads(make_heads(model=model), tmp_path, dpi=DPI), ["heads"])
    with PIL_Image.open(tmp_path / "heads.png") as im:
        assert im.size[0] > im.size[1] > 100  # a grid of panels, wider than tall


def test_plot_heads_through_plot_run_and_title(tmp_path):
    ds = make_heads(heads=(-1, *range(12)))  # all heads of a MiniLM layer: more than LEGEND_MAX lines
    _check_files(experiments.plot_run(ds, tmp_path, dpi=DPI, pdf=True), ["heads"])
    title = heads_figures._heads_title(ds, "what").splitlines()
    assert title[0] == "what"
    assert title[1] == "heads: checkpoint minilm, layer 2, N = 9 tokens, β = 12.6, “a b c”"


@pytest.mark.parametrize("var", ["mass_S", "mass_V", "w2_pi_S", "diameter"])
def test_plot_heads_missing_variable_is_a_clear_error(tmp_path, var):
    with pytest.raises(ValueError, match=rf"plot_heads needs variable\(s\) \['{var}'\]"):
        heads.plot_heads(make_heads().drop_vars(var), tmp_path)
    assert not list(tmp_path.iterdir())


def test_plot_heads_wrong_dims(tmp_path):
    ds = make_heads()
    ds["w2_model"] = ds["w2_model"].isel(time=0)
    with pytest.raises(ValueError, match=r"plot_heads needs ds\['w2_model'\] with dims \('head', 'time'\)"):
        heads.plot_heads(ds, tmp_path)


def test_plot_heads_survives_nan_w2(tmp_path):
    """A head whose Pi_S is undefined for every token has NaN W2: a gap on the log axis, not a crash."""
    ds = make_heads()
    ds["w2_pi_S"][1] = np.nan
    _check_files(heads.plot_heads(ds, tmp_path, dpi=DPI), ["heads"])


# --- sweeps ---------------------------------------------------------------------------------------


def make_sweep(seeds=3):
    rng = np.random.default_rng(1)
    betas, Ns = np.array([10.0, 100.0, 1000.0]), np.array([200, 2000])
    a = np.sqrt(np.log1p(betas) / betas)
    shape = (len(Ns), seeds, len(betas))
    ts = 1 + 0.5 * np.log(betas)[None, None] + 0.1 * rng.standard_normal(shape)
    m = a[None, None] * (1 + 0.1 * rng.standard_normal(shape)) + 0.3 / np.sqrt(Ns)[:, None, None]
    return xr.Dataset(
        {"t_star": (("N", "seed", "beta"), ts), "min_w2": (("N", "seed", "beta"), m)},
        coords={"N": Ns, "seed": np.arange(seeds), "beta": betas},
        attrs={"experiment": "concentration", "config": json.dumps({"d": 3})},
    )


def test_plot_sweep(tmp_path):
    ds = make_sweep()
    ds["min_w2"][0, 0, 0] = np.nan
    ds["t_star"][1, :, 2] = np.nan  # a grid point that failed for every seed
    _check_files(cf.sweep_figures(ds, tmp_path, dpi=DPI), ["sweep"])
    _check_files(cf.sweep_figures(make_sweep(seeds=1).isel(seed=0), tmp_path / "one", dpi=DPI), ["sweep"])
    _check_files(plot.plot_sweep(ds, tmp_path / "generic", dpi=DPI), ["sweep"])  # any experiment's


def test_plot_sweep_errors(tmp_path):
    ds = make_sweep()
    with pytest.raises(ValueError, match=r"plot_sweep needs variable\(s\) \['min_w2'\]"):
        cf.sweep_figures(ds.drop_vars("min_w2"), tmp_path)
    with pytest.raises(ValueError, match="'beta' dim"):
        cf.sweep_figures(ds.isel(beta=0), tmp_path)
    with pytest.raises(ValueError, match="no numeric variable"):
        plot.plot_sweep(ds.drop_vars(["t_star", "min_w2"]), tmp_path)


def test_generic_sweep_variables_are_the_per_point_numbers():
    ds = make_sweep()
    ds["curve"] = (("N", "seed", "beta", "time"), np.zeros((*ds["t_star"].shape, 3)))
    ds.attrs["grid"] = json.dumps({"N": [200, 2000], "seed": [0, 1, 2], "beta": [10.0, 100.0, 1000.0]})
    assert plot.sweep_variables(ds) == ["t_star", "min_w2"]


# --- report ---------------------------------------------------------------------------------------


def test_format_value():
    assert format_value(float("nan")) == "NaN"
    assert format_value(list(range(20))).count(",") == 9
    assert format_value("a|b") == "a|b"
    assert format_value(["one", "two"]) == "one; two"


def _fake_figures(figdir, stems):
    """Tiny real PNG/GIF/PDF files standing in for figures (write_report only links them)."""
    figdir.mkdir(parents=True)
    paths = []
    for stem in stems:
        if stem == "tokens":
            p = figdir / "tokens.gif"
            frames = [PIL_Image.new("L", (8, 8), c) for c in (0, 255)]
            frames[0].save(p, save_all=True, append_images=frames[1:])
            paths.append(p)
            continue
        PIL_Image.new("RGB", (8, 8)).save(figdir / f"{stem}.png")
        (figdir / f"{stem}.pdf").write_bytes(b"%PDF-1.4 stand-in")
        paths += [figdir / f"{stem}.png", figdir / f"{stem}.pdf"]
    return paths


def test_write_report(conc3, tmp_path):
    stems = ["w2", "t_star", "min_w2", "mass", "snapshots", "tokens"]
    figs = _fake_figures(tmp_path / "figures", stems)
    summary = {
        "t_star_slope": 0.41,
        "min_w2_exponent": 0.6,
        "resolution_ratio": [10.0, 1.0, 0.1],
        "warnings": ["N = 400 is too small for beta >= 100"],
    }
    md_path = experiments.write_report(conc3, summary, figs, tmp_path)
    assert md_path == tmp_path / "report.md"
    md = md_path.read_text()
    assert "| t_star_slope | 0.41 |" in md
    assert "| resolution_ratio | [10, 1, 0.1] |" in md
    fits = md[md.index("## Fits") : md.index("## Configuration")]
    assert "### t_star\n\n| quantity | value |\n|---|---|\n" in fits and "| b | 0.4 |" in fits  # attrs' fits
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert images == [f"figures/{s}.png" for s in stems[:-1]] + ["figures/tokens.gif"]
    assert "(figures/w2.pdf)" in md
    assert "### Distance to the zero-temperature limit\n" in md  # titles and captions of the experiment
    assert cf.CAPTIONS["t_star"][1] in md
    assert "## Warnings\n\n- N = 400 is too small for beta >= 100\n" in md
    assert md.index("## Warnings") < md.index("## Figures") < md.index("## Detail tables")
    assert "## Configuration\n\n| parameter | value |" in md and "| N | 400 |" in md
    assert "| numpy |" in md[md.index("## Provenance") :]  # the provenance
    assert "{'" not in md and '{"' not in md  # no literal anywhere
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<img ") == 6 and 'src="data:image/gif;base64,' in page  # embedded
    assert "<td>t_star_slope</td><td>0.41</td>" in page
    assert "<li>N = 400 is too small for beta &gt;= 100</li>" in page
    assert not list(tmp_path.glob(".*.tmp"))


def test_write_report_errors(conc3, tmp_path):
    with pytest.raises(ValueError, match="do not exist"):
        experiments.write_report(conc3, {}, [tmp_path / "nope.png"], tmp_path)
    with pytest.raises(TypeError, match="summary"):
        experiments.write_report(conc3, "bad", [], tmp_path)
    with pytest.raises(TypeError, match="list of paths"):
        experiments.write_report(conc3, {}, tmp_path / "a.png", tmp_path)


def test_html_escapes_text(tmp_path):
    ds = make_layers()
    ds.attrs["config"] = json.dumps({"note": "<script>"})
    experiments.write_report(ds, {"<b>": "<i>"}, [], tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>" not in page


def test_import_attnflow_plot_is_light():
    import subprocess
    import sys

    code = (
        "import sys, attnflow.plot; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'xarray', 'torch'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fit_fields_under_either_name():
    assert plot.pick({"p": 0.5, "exponent": 0.7}, ("exponent", "p")) == 0.7
    assert plot.pick({"p": 0.5}, ("exponent", "p")) == 0.5
    assert plot.pick({"p": float("nan")}, ("exponent", "p")) is None
    assert plot.pick({"p": True}, ("p",)) is None
    assert plot.pick(None, ("p",)) is None


def test_mp4_is_written_when_ffmpeg_exists(conc5, tmp_path, monkeypatch):
    """With ffmpeg on the PATH, animate also drives FFMpegWriter (a recorder here) frame by frame."""
    import matplotlib.animation as manim

    frames = {}

    class FakeFFMpeg(manim.AbstractMovieWriter):
        def __init__(self, fps):
            super().__init__(fps=fps)

        def setup(self, fig, outfile, dpi=None):
            super().setup(fig, outfile, dpi)
            frames[outfile] = 0

        def grab_frame(self, **kwargs):
            frames[self.outfile] += 1

        def finish(self):
            pass

    monkeypatch.setattr(animation.shutil, "which", lambda name: "/usr/bin/ffmpeg")
    monkeypatch.setattr(manim, "FFMpegWriter", FakeFFMpeg)
    paths = plot.animate(conc5, tmp_path / "a.gif", dpi=30)
    assert paths == [tmp_path / "a.gif", tmp_path / "a.mp4"]
    assert frames == {str(tmp_path / "a.mp4"): conc5.sizes["time"]}


@pytest.mark.slow
def test_example_script_runs(tmp_path):
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "plot_concentration.py"
    module = runpy.run_path(str(path))
    report = module["main"](tmp_path)
    assert report.is_file() and (tmp_path / "report.html").is_file()
    with PIL_Image.open(tmp_path / "figures" / "tokens.gif") as im:
        assert im.n_frames == len(module["TIMES"])


def test_titles_say_what_was_run(conc3):
    title = plot.run_title(conc3, "what")
    assert title.splitlines() == ["what", "concentration, N = 400, d = 3, β = 10…1000 (3), seed 0"]
    sweep = make_sweep()
    sweep.attrs["grid"] = json.dumps({"N": [200, 2000], "seed": [0, 1, 2], "kernel": ["sdpa", "blocked"]})
    line = plot.run_title(sweep, "w").splitlines()[1]
    assert line == "concentration, N ∈ {200, 2000}, d = 3, β = 10…1000 (3), kernel ∈ {sdpa, blocked}, 3 seeds"


def test_under_resolved_betas_are_named_in_the_title_and_faded_everywhere(conc3, monkeypatch, tmp_path):
    """Nothing under-resolved is drawn like something resolved: the title names those betas, their
    curves (W2 and mass panels) are faded and labelled, their t* stars are hollow and faded."""
    ds = conc3.copy()
    ds["status"] = ("beta", np.array(["converged", "under-resolved", "under-resolved"]))
    assert plot.run_title(ds, "w").splitlines()[2] == (
        "β ∈ {100, 1000} under-resolved (N too small: not the mean-field limit)"
    )
    ds["status"] = ("beta", np.array(["under-resolved"] * 3))
    assert plot.run_title(ds, "w").splitlines()[2].startswith("every β under-resolved")
    ds["status"] = ("beta", np.array(["converged", "converged", "under-resolved"]))
    assert len(plot.run_title(ds, "w").splitlines()) == 3
    ds["status"] = ("beta", np.array(["converged"] * 3))
    assert len(plot.run_title(ds, "w").splitlines()) == 2  # nothing to say
    ds["status"] = ("beta", np.array(["converged", "converged", "under-resolved"]))
    for draw in (cf.plot_w2, cf.plot_mass):
        fig = _figure_of(monkeypatch, draw, ds, tmp_path)
        for ax in fig.axes:
            for line in ax.get_lines():
                under = "(under-resolved)" in str(line.get_label())
                assert (line.get_alpha() == pytest.approx(0.35)) == under or line.get_label().startswith("_")
            assert sum("β = 1000 (under-resolved)" == line.get_label() for line in ax.get_lines()) <= 1
        if draw is cf.plot_w2:
            stars = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*" and len(ln.get_xdata())]
            assert [s.get_alpha() for s in stars] == [None, None, pytest.approx(0.35)]


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 6), k=st.integers(0, 3), n=st.integers(3, 12), seed=st.integers(0, 2**31 - 1))
def test_directions_property(d, k, n, seed):
    """Directions are orthonormal, start with basis_A's columns and span at most d dims."""
    rng = np.random.default_rng(seed)
    k = min(k, d)
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :k]
    X = _unit(rng.standard_normal((2, n, d)))
    ds = xr.Dataset({"basis_A": (("dim", "k"), basis)}) if k else xr.Dataset()
    U, labels = tokens._directions(ds, X, 3)
    m = min(3, d)
    assert U.shape == (d, m) and len(labels) == m
    np.testing.assert_allclose(U.T @ U, np.eye(m), atol=1e-10)
    np.testing.assert_allclose(U[:, : min(k, m)], basis[:, :m], atol=1e-12)
    assert labels[: min(k, m)] == [f"u{j + 1}" for j in range(min(k, m))]


@pytest.mark.parametrize("cmap", [plot.BETA_CMAP, plot.SERIES_CMAP])
def test_series_styles_are_greyscale_readable(cmap):
    """Luminance rises with rank, and line style and marker also change from one series to the next."""
    styles = plot.series_styles(6, cmap)
    rgb = np.array([s["color"][:3] for s in styles])
    luminance = rgb @ [0.2126, 0.7152, 0.0722]
    assert np.all(np.diff(luminance) > 0.03)
    for a, b in itertools.pairwise(styles):
        assert a["linestyle"] != b["linestyle"] and a["marker"] != b["marker"]


# --- formats, tick labels, honest markers ---------------------------------------------------------


def _drawn(monkeypatch, module):
    """The figures `module` saves, kept (drawn, not cleared) for inspection."""
    kept = []

    def keep(fig, outdir, stem, dpi, formats=None):
        fig.canvas.draw()
        kept.append(fig)
        return [Path(outdir) / f"{stem}.png"]

    monkeypatch.setattr(module, "save", keep)
    return kept


def test_default_is_png_only_and_pdf_on_request(conc3, tmp_path):
    with plot.figure_formats("png"):  # the default outside this module's fixture
        assert [p.name for p in cf.plot_t_star(conc3, tmp_path / "a", dpi=DPI)] == ["t_star.png"]
        both = experiments.plot_run(make_layers(), tmp_path / "b", dpi=DPI, pdf=True)
        assert [p.name for p in both] == ["layers.png", "layers.pdf"]
        assert both[1].read_bytes().startswith(b"%PDF")
        assert [p.name for p in experiments.plot_run(make_layers(), tmp_path / "c", dpi=DPI)] == [
            "layers.png"
        ]
    with pytest.raises(ValueError, match="formats"):
        plot.figure_formats("png", "svg").__enter__()
    with pytest.raises(TypeError, match="formats"):
        plot.save(None, tmp_path, "x", DPI, formats="pdf")


def _overlaps(labels) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_visible() and t.get_text()]
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]


@pytest.mark.parametrize("Ls", [[4, 8, 16, 32, 64], [4, 8, 16, 32, 64, 128, 256, 512], [30, 40, 50]])
def test_layers_step_labels_do_not_overlap(monkeypatch, tmp_path, Ls):
    """The x axis of the layers figure is labelled at the steps h = T/L, with no crowded minor labels
    (the figure had overlapping labels 2x10^-2, 3x10^-2, 4x10^-2 when h spanned about one decade)."""
    kept = _drawn(monkeypatch, layers)
    L = np.asarray(Ls)
    h = 1.0 / L
    ds = xr.Dataset(
        {"error": (("L",), 0.3 * h), "h": (("L",), h)}, coords={"L": L}, attrs={"experiment": "layers"}
    )
    layers.plot_layers(ds, tmp_path, dpi=DPI)
    ax = kept[0].axes[0]
    labels = [*ax.xaxis.get_ticklabels(), *ax.xaxis.get_ticklabels(minor=True)]
    shown = [t.get_text() for t in labels if t.get_visible() and t.get_text()]
    assert shown and not _overlaps(labels), shown
    assert format_value(float(h.max()), 3) in shown  # the largest step is labelled as a plain number


def test_mp4_through_the_bundled_ffmpeg(conc5, tmp_path, monkeypatch):
    """Without ffmpeg on the PATH, the optional imageio-ffmpeg package's program writes the MP4;
    without either, GIF only."""
    import sys
    import types

    monkeypatch.setattr(animation.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # not installed
    assert animation.ffmpeg_path() is None
    fake = types.ModuleType("imageio_ffmpeg")
    fake.get_ffmpeg_exe = lambda: "/opt/bundled/ffmpeg"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", fake)
    assert animation.ffmpeg_path() == "/opt/bundled/ffmpeg"
    monkeypatch.setattr(animation.shutil, "which", lambda name: "/usr/bin/ffmpeg")
    assert animation.ffmpeg_path() == "/usr/bin/ffmpeg"  # the PATH's first


def test_gif_frames_keep_the_first_layout(conc3, tmp_path, monkeypatch):
    """Every frame of the GIF has the same size, and the figure's layout is computed once."""
    monkeypatch.setattr(animation, "ffmpeg_path", lambda: None)
    paths = plot.animate(conc3, tmp_path / "t.gif", dpi=40)
    with PIL_Image.open(paths[0]) as im:
        sizes = set()
        for k in range(im.n_frames):
            im.seek(k)
            sizes.add(im.size)
    assert len(sizes) == 1 and im.n_frames == conc3.sizes["time"]


def test_no_star_where_the_minimum_lies_past_the_window_and_no_empty_coupling_panel(
    conc3, monkeypatch, tmp_path
):
    """A least W2 at t_max is no minimum (the curve still falls): no t* star there. A run without a
    coupling bound (the mean-field flow: all NaN) draws no empty second panel."""
    ds = conc3.copy()
    t_star = ds.t_star.values.copy()
    t_star[2] = float(ds.time.values[-1])
    ds["t_star"] = ("beta", t_star)
    ds["coupling_bound"] = (("beta", "time"), np.full(ds.w2.shape, np.nan))
    fig = _figure_of(monkeypatch, cf.plot_w2, ds, tmp_path)
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert len(panels) == 1
    stars = [ln for ln in panels[0].get_lines() if ln.get_marker() == "*" and len(ln.get_xdata())]
    assert sorted(float(s.get_xdata()[0]) for s in stars) == sorted(t_star[:2].tolist())
    # a t* not converged in N is drawn hollow, a converged one filled
    ds["t_star_converged"] = ("beta", np.array([True, False, False]))
    ds["status"] = ("beta", np.array(["converged", "converged", "converged"]))
    fig = _figure_of(monkeypatch, cf.plot_w2, ds, tmp_path)
    stars = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*" and len(ln.get_xdata())]
    hollow = {float(s.get_xdata()[0]): s.get_markerfacecolor() == "none" for s in stars}
    assert hollow == {float(t_star[0]): False, float(t_star[1]): True}
