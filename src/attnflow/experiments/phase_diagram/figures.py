"""The figures of a phase diagram: heatmaps over (t, beta) of the mean over the clouds and of their
spread, one column per model, for the clusters, the clustered pairs and W2 to the nearest k atoms;
and the interaction energy of the first cloud against time (its plateaus)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ...plot import DPI, new_figure, run_title, save

if TYPE_CHECKING:
    import xarray as xr
    from matplotlib.colors import Normalize

CAPTIONS = {
    "clusters": (
        "Number of clusters over (t, β)",
        "Top: the mean over the clouds of the number of clusters (tokens within ε joined); bottom: its "
        "standard deviation over the clouds. One column per model.",
    ),
    "pairs": (
        "Clustered pairs over (t, β)",
        "The mass of the pairs of tokens within ε of each other (GLPR's phase diagram: the probability "
        "that two tokens are clustered): mean over the clouds (top) and its spread (bottom).",
    ),
    "energy": (
        "Interaction energy against time",
        "log E_β(t) − log E_β(0) of the first cloud, one line per β, one panel per model (E_β = (1/2β) ∬ "
        "exp(β xᵀBy) dρ dρ). Where the flow is its gradient flow (V = B, e.g. Q = K = V = I) it never "
        "falls, and its plateaus are the metastable states: with Q = K = V = I, k equal clusters sit "
        "near −log k below one cluster, so each merger is a step.",
    ),
    "predicted": (
        "Predicted against measured cluster counts",
        "Per β: the number of clusters the linearisation about the uniform measure predicts (attnflow."
        "predict_clusters: k* = argmax_k k² I_k(β) on the circle; on S² from each cloud's degree-l* "
        "component) and the measured count of the metastable state (the first count ≤ N/2 held over 5 "
        "saved times), mean and standard deviation over the clouds. Only for models the linearisation "
        "speaks about (one head, B = bI, V = vI).",
    ),
    "atoms": (
        "W2 to the nearest k-atom measure over (t, β)",
        "Mean over the clouds of the W2 distance to the nearest measure with k atoms on the sphere, one "
        "row per k (exact for k = 1, an upper bound for k ≥ 2), on a log colour scale whose floor, 1e-8 "
        "of its largest value, also shows the smaller values (float64 rounding gives W2 ~ 1e-8 for one "
        "cluster).",
    ),
}


class Mesh(TypedDict, total=False):
    """pcolormesh keywords of a row of heatmaps; log: a log colour scale (floored, not a keyword)."""

    norm: Normalize
    cmap: str
    vmin: float
    vmax: float
    log: bool


#: the rows of `_heatmaps`: (label, values (variant, beta, time), pcolormesh keywords)
Rows = list[tuple[str, np.ndarray, Mesh]]


def _heatmaps(ds: xr.Dataset, rows: Rows, title: str, outdir: str | Path, stem: str, dpi: int) -> list[Path]:
    """One row of heatmaps over (t, beta) per (row label, values (variant, beta, time), pcolormesh
    keywords), one column per variant, each row on one colour scale with its colour bar. The betas
    are rows of equal height, labelled with their values (a grid of betas need not be even)."""
    t = np.asarray(ds.time.values, dtype=float)
    betas = np.asarray(ds.beta.values, dtype=float)
    rows_at = np.arange(len(betas))
    variants = [str(v) for v in ds.variant.values]
    fig, axes = new_figure(len(rows), len(variants), (3.6 * len(variants) + 1.2, 3.0 * len(rows) + 0.8))
    for r, (label, values, kw) in enumerate(rows):
        kw = kw.copy()
        if "norm" not in kw and "vmin" not in kw:
            kw["norm"] = _norms(values, log=False)
        floor = getattr(kw.get("norm"), "vmin", None) if kw.get("log") else None
        kw.pop("log", None)
        mesh = None
        for c, variant in enumerate(variants):
            ax = axes[r][c]
            shown = values[c] if floor is None else np.maximum(values[c], floor)  # (exact zeros too)
            mesh = ax.pcolormesh(t, rows_at, shown, shading="nearest", rasterized=True, **kw)
            ax.set_yticks(rows_at[:: max(1, len(betas) // 8)])
            ax.set_yticklabels([f"{b:g}" for b in betas[:: max(1, len(betas) // 8)]])
            ax.set_title(variant if r == 0 else "", fontsize="medium")
            ax.set_xlabel("time t")
            ax.set_ylabel("β" if c == 0 else "")
        fig.colorbar(mesh, ax=list(axes[r]), label=label, shrink=0.9)
    fig.suptitle(run_title(ds, title))
    return save(fig, outdir, stem, dpi)


def _norms(values: np.ndarray, log: bool) -> Normalize:
    from matplotlib.colors import LogNorm, Normalize

    finite = values[np.isfinite(values) & (values > 0 if log else True)]
    if finite.size == 0:
        return Normalize(0, 1)
    if log:  # a floor FLOOR below the largest value: smaller ones (zeros too) are drawn at it
        return LogNorm(max(finite.min(), finite.max() * FLOOR), finite.max(), clip=True)
    return Normalize(finite.min(), max(finite.max(), finite.min() + 1e-12))


FLOOR = 1e-8  # the smallest value of a log colour scale, relative to its largest


def _spans_decades(values: np.ndarray) -> bool:
    """Whether positive values span more than a factor 20 (then a log colour scale)."""
    v = values[np.isfinite(values) & (values > 0)]
    return bool(v.size) and float(v.max()) > 20 * float(v.min())


def _scale(values: np.ndarray, cmap: str) -> Mesh:
    """pcolormesh keywords: a log colour scale where the values span decades, else linear."""
    log = _spans_decades(values)
    return {"norm": _norms(values, log), "cmap": cmap, "log": log}


def _stats(da: xr.DataArray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation over the clouds, (variant, beta, time)."""
    v = da.transpose("variant", "beta", "time", "cloud").values
    return v.mean(axis=-1), (v.std(axis=-1, ddof=1) if v.shape[-1] > 1 else np.zeros(v.shape[:-1]))


def figures(ds: xr.Dataset, outdir: str | Path, *, dpi: int = DPI, animation: bool = False) -> list[Path]:
    """Heatmaps over (t, beta): clusters, clustered pairs (mean, spread) and W2 to the nearest atoms."""
    mean, std = _stats(ds.clusters)
    paths = _heatmaps(
        ds,
        [
            (
                "mean number of clusters",
                mean,
                {"norm": _norms(mean, _spans_decades(mean)), "cmap": "viridis"},
            ),
            ("its standard deviation over the clouds", std, {"cmap": "magma"}),
        ],
        "Number of clusters (tokens within ε joined)",
        outdir,
        "clusters",
        dpi,
    )
    mean, std = _stats(ds.clustered_pairs)
    paths += _heatmaps(
        ds,
        [
            ("mass of clustered pairs", mean, {"vmin": 0.0, "vmax": 1.0, "cmap": "RdBu_r"}),
            ("its standard deviation over the clouds", std, {"cmap": "magma"}),
        ],
        "Clustered pairs (GLPR's phase diagram)",
        outdir,
        "pairs",
        dpi,
    )
    rows: Rows = []
    for k in ds.k.values.tolist():
        m, _ = _stats(ds.w2_atoms.sel(k=k))
        rows.append(
            (f"W2 to the nearest {k}-atom measure", m, {"norm": _norms(m, True), "cmap": "viridis_r"})
        )
    paths += _heatmaps(
        ds, rows, "W2 to the nearest k-atom measure (mean over the clouds)", outdir, "atoms", dpi
    )
    if "log_energy" in ds.variables and np.isfinite(ds.log_energy.values).any():
        paths += _energy(ds, outdir, dpi)
    if "predicted_clusters" in ds.variables and np.isfinite(ds.predicted_clusters.values).any():
        paths += _predicted(ds, outdir, dpi)
    return paths


def _predicted(ds: xr.Dataset, outdir: str | Path, dpi: int) -> list[Path]:
    """Predicted and measured metastable cluster counts against beta, one panel per variant."""
    betas = np.asarray(ds.beta.values, dtype=float)
    variants = [str(v) for v in ds.variant.values]
    fig, axes = new_figure(1, len(variants), (3.6 * len(variants) + 1.0, 3.4))
    for c, variant in enumerate(variants):
        ax = axes[0][c]
        pred = ds.predicted_clusters.sel(variant=variant).values  # (beta, cloud)
        seen = ds.metastable_clusters.sel(variant=variant).values
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a beta with no finite value: NaN
            ax.plot(betas, np.nanmean(pred, axis=1), "o-", label="predicted (linearisation)")
            ax.errorbar(betas, np.nanmean(seen, axis=1), yerr=np.nanstd(seen, axis=1), fmt="s",
                        capsize=3, label="measured (metastable)")  # fmt: skip
        ax.set_xscale("log")
        ax.set_title(variant, fontsize="medium")
        ax.set_xlabel("β")
        ax.set_ylabel("clusters" if c == 0 else "")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(run_title(ds, "Cluster counts, predicted and measured"))
    return save(fig, outdir, "predicted", dpi)


def _energy(ds: xr.Dataset, outdir: str | Path, dpi: int) -> list[Path]:
    """log E_beta(t) - log E_beta(0) of cloud 0, one line per beta, one panel per variant."""
    t = np.asarray(ds.time.values, dtype=float)
    variants = [str(v) for v in ds.variant.values]
    fig, axes = new_figure(1, len(variants), (3.6 * len(variants) + 1.0, 3.4))
    for c, variant in enumerate(variants):
        ax = axes[0][c]
        for beta in ds.beta.values.tolist():
            e = ds.log_energy.sel(variant=variant, beta=beta).isel(cloud=0).values
            if np.isfinite(e).any():
                ax.plot(t, e - e[0], label=f"β = {beta:g}")
        ax.set_title(variant, fontsize="medium")
        ax.set_xlabel("time t")
        ax.set_ylabel("log E_β(t) − log E_β(0)" if c == 0 else "")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(run_title(ds, "Interaction energy of the first cloud"))
    return save(fig, outdir, "energy", dpi)
