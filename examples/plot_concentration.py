"""Concentration figures, animation and report from a small simulation (runs in seconds).

The worked example of MATH.md (d = 3, symmetric A with gap 3/2) at three inverse temperatures:
N = 150 uniform tokens, RK4, W2 to Pi_# rho_0 (exact, two atoms), the coupling bound, mass near
the top eigenspaces of A and V, the Lyapunov functional and the zero-temperature flow.  The
Dataset follows the `concentration` schema, so the experiment's figures draw it like a run of it.
With N = 150 the run is far from mean-field resolution for the larger betas (see the ratio): it
shows the figures, not the theorem's beta-scaling.

    python examples/plot_concentration.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

import attnflow as af
from attnflow.experiments import plot_run, write_report
from attnflow.science import fits, metrics

N, SEED, EPS = 150, 0, 0.1
BETAS = (3.0, 30.0, 300.0)
TIMES = np.linspace(0.0, 6.0, 19)
N_KEEP = 40  # tokens kept for snapshots and the animation


def build_dataset() -> xr.Dataset:
    """Simulate the worked example and collect the concentration variables in a Dataset."""
    att = af.worked_example(beta=1.0)
    spec = att.spectrum()
    X0 = af.sample_uniform(N, 3, seed=SEED)
    PiX0 = af.project(X0, att)
    keep = np.random.default_rng(SEED).choice(N, N_KEEP, replace=False)
    rows = {k: [] for k in ("w2", "bound", "mass_A", "mass_V", "lyap", "x")}
    for beta in BETAS:
        traj = af.simulate(X0, att.with_beta(beta), TIMES, method="rk4", dt=0.1)
        rows["w2"].append(af.w2_to_target(traj.x, PiX0).values)
        rows["bound"].append(metrics.coupling_bound(traj.x, PiX0))
        rows["mass_A"].append(metrics.subspace_mass(traj.x, spec.top.basis, EPS))
        rows["mass_V"].append(metrics.subspace_mass(traj.x, spec.v_top_real.basis, EPS))
        rows["lyap"].append(metrics.lyapunov(traj.x, spec.top_projector))
        rows["x"].append(traj.x[:, keep])
    zero = af.simulate_zero_temperature(X0, att, TIMES)
    w2 = np.array(rows["w2"])
    ts = [fits.t_star(TIMES, w) for w in w2]
    t_fit = fits.fit_t_star(BETAS, [s.t_star for s in ts])
    m_fit = fits.fit_min_w2(BETAS, [s.w2_min for s in ts])
    bt = ("beta", "time")
    return xr.Dataset(
        {
            "w2": (bt, w2),
            "coupling_bound": (bt, np.array(rows["bound"])),
            "w2_zero": ("time", af.w2_to_target(zero.x, PiX0).values),
            "lyapunov": (bt, np.array(rows["lyap"])),
            "mass_A": (bt, np.array(rows["mass_A"])),
            "mass_V": (bt, np.array(rows["mass_V"])),
            "t_star": ("beta", [s.t_star for s in ts]),
            "t_star_lo": ("beta", [s.t_lo for s in ts]),
            "t_star_hi": ("beta", [s.t_hi for s in ts]),
            "min_w2": ("beta", [s.w2_min for s in ts]),
            "resolution_ratio": ("beta", [metrics.resolution_ratio(N, 3, b, B=att.B, X=X0) for b in BETAS]),
            "x": (("beta", "time", "token", "dim"), np.array(rows["x"], dtype=np.float32)),
            "x_zero": (("time", "token", "dim"), zero.x[:, keep].astype(np.float32)),
            "basis_A": (("dim", "k"), spec.top.basis),
        },
        coords={"beta": list(BETAS), "time": TIMES, "token": keep, "dim": np.arange(3)},
        attrs={
            "experiment": "concentration",
            "config": json.dumps({"experiment": "concentration", "N": N, "d": 3, "eps": EPS, "seed": SEED}),
            "fits": json.dumps(
                {
                    "t_star": {"a": t_fit.a, "b": t_fit.b, "a_err": t_fit.a_err, "b_err": t_fit.b_err},
                    "min_w2": {"exponent": m_fit.p, "exponent_err": m_fit.p_err, "prefactor": m_fit.C},
                }
            ),
            "seed": SEED,
            "integrator": "rk4",
        },
    )


def main(out: Path) -> Path:
    ds = build_dataset()
    figures = plot_run(ds, out / "figures", animation=True)
    summary = {
        "N": N,
        "beta": list(BETAS),
        "t_star": ds["t_star"].values.tolist(),
        "min_w2": ds["min_w2"].values.tolist(),
        "resolution_ratio": ds["resolution_ratio"].values.tolist(),
        "fits": json.loads(ds.attrs["fits"]),
    }
    return write_report(ds, summary, figures, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new temporary one)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="attnflow-plot-"))
    print(f"report: {main(out)}")
