"""concentration with init = graded: rho_0 on nodes graded toward each beta's separatrices (d = 2; d = 3
from a stored search of its sources), the ladder's levels being the grading's levels, the search
stored as a part and reused."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

import attnflow.dynamics.separatrix as separatrix
from attnflow.attention import worked_example
from attnflow.experiments import ConfigError, load_config, run_experiment
from attnflow.experiments.concentration import concentration_inputs
from attnflow.experiments.concentration.graded import graded_clouds
from attnflow.io import read_dataset
from attnflow.measures.quadrature import graded_circle_quadrature
from attnflow.science.metrics import resolution_ratio

GRADED = [
    "weights=worked-example-2d",
    "init=graded",
    'N="auto"',
    "N_max=1200",  # levels 0 and 1 at beta = 10 (584, 1168 nodes) and 20 (600, 1196)
    "streak=1",
    "betas=[10, 20]",
    "t_max=4.0",
    "N_min=16",  # only the zero-temperature cloud (rho_0 that does not depend on beta) uses it
    "dt_save=0.5",
    "n_keep=8",
    "integrator=rk4",
    "dt=0.1",
    "threads=1",
    "zero_reference=false",
]


@pytest.fixture
def search_calls(monkeypatch):
    """Count the separatrix searches; make each one pass with few tracers (the test needs the
    pipeline, not the search's precision)."""
    calls: list[float] = []
    real = separatrix.locate_separatrices

    def counted(att, *args, **kwargs):
        calls.append(att.beta)
        kwargs.update(max_passes=1, tracers=8, options={"rtol": 1e-5, "atol": 1e-7})
        return real(att, *args, **kwargs)

    monkeypatch.setattr(separatrix, "locate_separatrices", counted)
    return calls


@pytest.mark.slow  # about 17 s: three graded levels, then a resume
def test_graded_run_levels_weights_and_resume(tmp_path, search_calls):
    config = load_config("concentration", GRADED)
    ds = run_experiment(config, tmp_path)
    assert sorted(search_calls) == [10.0, 20.0]  # one search per beta
    conv = json.loads(ds.attrs["convergence"])
    seps = json.loads(ds.attrs["separatrices"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["separatrices"] == seps
    att = worked_example(1.0, d=2)
    for i, beta in enumerate((10.0, 20.0)):
        key = f"{beta:g}"
        part = read_dataset(tmp_path / "parts" / f"beta={key}_separatrix.zarr")
        angles = part.angles.values
        assert seps[key]["angles"] == pytest.approx(angles.tolist(), abs=0)
        assert seps[key]["width"] == pytest.approx(float(np.max(np.diff(part.brackets.values, axis=1))))
        assert seps[key]["search_s"] > 0 and seps[key]["passes"] == 1
        # the flow is odd (x -> -x), so the separatrices are antipodal; near +-u_2 (3 pi / 4)
        gap = np.angle(np.exp(1j * (angles[1] - angles[0] - math.pi)))
        assert abs(gap) <= 2 * seps[key]["width"]
        assert abs(np.angle(np.exp(1j * (angles[0] - 3 * math.pi / 4)))) < 0.25
        # the ladder's N are the node counts of the grading's levels 0, 1 toward those angles
        kw = 1.0 / math.sqrt(beta * att.norm_B)
        expect = [
            len(graded_circle_quadrature(angles, kw / 2**lv, min(2 * kw, 0.2) / 2**lv)[1]) for lv in (0, 1)
        ]
        assert conv[key]["levels"] == expect and conv[key]["N"] == expect[-1]
        np.testing.assert_array_equal(ds.ladder_N.values[i], expect)
        # the resolution ratio takes the largest gap (at most kw / 2^level, halved by each level), not
        # the 2 pi / N of evenly spread nodes (graded nodes crowd near the separatrices)
        ratio = ds.ladder_ratio.values[i]
        even = [resolution_ratio(n, 2, beta, B=att.B) for n in expect]
        assert ratio[1] == pytest.approx(ratio[0] / 2, rel=0.02) and ratio[0] <= 1.0
        assert np.all(ratio > 3 * np.array(even))
        clouds = list(graded_clouds(concentration_inputs(config), beta, part))
        assert [c.N for c in clouds] == expect  # level 2 would pass N_max
        for c in clouds:
            assert c.weights is not None and abs(c.weights.sum() - 1.0) < 1e-12 and np.all(c.weights > 0)
        # the metrics take the weights: at t = 0, W2(rho_0, Pi_# rho_0)^2 = 2 - 4 / pi for uniform rho_0
        # (equal weights on these nodes, crowded near the separatrices, would give about 1.3)
        assert float(ds.w2.sel(beta=beta).values[0]) == pytest.approx(math.sqrt(2 - 4 / math.pi), rel=1e-4)

    # resume: a lost level is recomputed from the stored separatrices, without a new search
    w2 = ds.w2.values.copy()
    shutil.rmtree(tmp_path / "parts" / f"beta=20_N={conv['20']['levels'][0]}.zarr")
    search_calls.clear()
    again = run_experiment(config, tmp_path)
    assert search_calls == []
    np.testing.assert_array_equal(again.w2.values, w2)
    assert json.loads(again.attrs["separatrices"]) == seps


def test_graded_levels_stop_at_N_max_and_level_0_always_runs():
    import xarray as xr

    angles = np.array([2.23, 2.23 + math.pi])  # a stored search (angles near the beta = 10 ones)
    part = xr.Dataset(
        {"angles": (("separatrix",), angles), "brackets": (("separatrix", "end"), np.stack([angles] * 2, 1))}
    )
    kw = 1.0 / math.sqrt(10.0 * worked_example(1.0, d=2).norm_B)
    counts = [
        len(graded_circle_quadrature(angles, kw / 2**lv, min(2 * kw, 0.2) / 2**lv)[1]) for lv in range(5)
    ]
    inputs = concentration_inputs(load_config("concentration", [*GRADED, f"N_max={counts[0] - 1}"]))
    assert [c.N for c in graded_clouds(inputs, 10.0, part)] == counts[:1]  # level 0 even above N_max
    inputs = concentration_inputs(load_config("concentration", [*GRADED, f"N_max={counts[3]}"]))
    assert [c.N for c in graded_clouds(inputs, 10.0, part)] == counts[:4]


@pytest.mark.parametrize(
    ("name", "overrides", "words"),
    [
        (
            "concentration",
            ["weights=random", "d=3", "init=graded", 'N="auto"'],
            "reflection through u_2^perp",
        ),
        ("concentration", ["weights=random", "d=4", "init=graded", 'N="auto"'], "d = 4"),
        ("concentration", ["weights=worked-example-2d", "init=graded", 'N="auto"', "seeds=[1, 2]"], "seeds"),
        ("concentration", ["weights=worked-example-2d", "init=graded", "N=600"], 'N = "auto"'),
        ("terminal", ["weights=worked-example-2d", "init=graded"], "only the concentration experiment"),
    ],
)
def test_graded_config_errors(name, overrides, words):
    with pytest.raises(ConfigError) as err:
        load_config(name, overrides)
    assert words in str(err.value)


def test_d3_search_part_round_trips_and_grades_the_levels(monkeypatch):
    """init = graded in d = 3: the part stores the source's bracket, the frame and the rings' brackets;
    the clouds of its levels are sphere_quadrature's, level 0 even above N_max."""
    from attnflow.dynamics.sources import SourceSearch, sphere_quadrature
    from attnflow.experiments.concentration.graded import separatrix_part, stored_search
    from attnflow.experiments.inputs import InitialMeasure
    from attnflow.progress import Reporter

    att = worked_example(2.0)
    u3, u2, u1 = np.linalg.eigh(att.A)[1].T
    found = SourceSearch(-0.1979, np.array([-0.19791, -0.19789]), u1, u2, u3, np.array([0.01, 0.5]),
                         np.array([[-1e-3, -8e-4], [-9e-3, -8e-3]]), [{"N": 1}])  # fmt: skip
    monkeypatch.setattr(InitialMeasure, "search", lambda self, att, t_max, kernel, device: found)
    config = load_config("concentration", ["init=graded", 'N="auto"', "N_max=1000", "betas=[2]"])
    inputs = concentration_inputs(config)
    part = separatrix_part(inputs, 2.0, Reporter())
    back = stored_search(part)
    assert back.alpha == pytest.approx(-0.1979) and part.attrs["width"] == pytest.approx(found.width)
    for name in ("alpha_bracket", "u1", "u2", "u3", "theta", "brackets"):
        np.testing.assert_array_equal(getattr(back, name), getattr(found, name))
    clouds = list(graded_clouds(inputs, 2.0, part))
    X, w, _ = sphere_quadrature(att, config.t_max, 0, search=back)
    assert [c.N for c in clouds] == [len(w)] and len(w) > 1000
    np.testing.assert_array_equal(clouds[0].X0[0], X)
    np.testing.assert_array_equal(clouds[0].weights, w)
