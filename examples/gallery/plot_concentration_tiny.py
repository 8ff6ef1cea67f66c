"""
A tiny concentration run, read back with xarray
===============================================

``run_experiment`` on the ``concentration-tiny`` preset (d = 2 worked example, 128 quadrature
nodes, two betas): the run writes its folder (result.zarr, summary.md, config.toml, figures) and
returns an xarray Dataset. The W2 curves are drawn here from that Dataset, with t* marked.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

from attnflow.experiments import load_config, run_experiment

config = load_config("concentration-tiny")
out = Path(tempfile.mkdtemp(prefix="attnflow-gallery-")) / "concentration-tiny"
ds = run_experiment(config, out)
print(sorted(p.name for p in out.iterdir()))

fig, ax = plt.subplots(figsize=(6, 4))
for beta in ds.beta.values:
    row = ds.sel(beta=beta)
    ax.plot(ds.time, row.w2, label=f"beta = {beta:g}: {row.status.values}")
    ax.axvline(float(row.t_star), color=ax.lines[-1].get_color(), ls=":")
ax.set_xlabel("t")
ax.set_ylabel("W2(rho_t, Pi_# rho_0)")
ax.set_yscale("log")
ax.legend()
fig.tight_layout()
