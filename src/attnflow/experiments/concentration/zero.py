"""The zero-temperature unit of `concentration`: the beta = inf W2 curve a run compares its betas
with, the exact N = infinity reference where one exists, else the exact flow of the run's cloud."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from ...io import to_json
from .levels import Cloud, ConcentrationInputs

if TYPE_CHECKING:
    import xarray as xr

    from ...dynamics.rates import LocalRate


class ZeroInfo(TypedDict, total=False):
    """attrs["zero"] of the zero part as read back: kind, the finite reference rates
    (`science.assumptions.reference_rates`: gamma, norm_B, guaranteed, c_star, the angles), the
    local rates of the reference or the reason there is none."""

    kind: str
    reason: str
    local_rates: list[LocalRate]
    gamma: float
    norm_B: float
    guaranteed: float
    c_star: float
    angle_A_V_real: float
    angle_A_V_magnitude: float


#: about the width of the windows of the zero-temperature reference's local rates (zero-temperature's)
RATE_WINDOW = 4.0


def rate_window(dt_save: float) -> float:
    """The width of the local rates' windows: the multiple of dt_save nearest RATE_WINDOW (a window's
    ends are saved times)."""
    return dt_save * max(1, round(RATE_WINDOW / dt_save))


def zero_temperature(inputs: ConcentrationInputs, cloud: Cloud) -> xr.Dataset:
    """The zero-temperature W2 curve: the exact N = infinity reference where it exists (d = 2, 3;
    symmetric A with a one-dimensional top eigenspace; rho_0 uniform or von Mises-Fisher) and was
    asked for (zero_reference), else the exact flow of the cloud (labelled so). A Dataset with w2_zero
    (time), w2_zero_error (time; the reference's error bound, NaN for a cloud) and attrs["zero"]
    (JSON: kind, the reference rates, local rates or the reason). A model the theorem does not speak
    about (several heads, a mask, usa, another layer norm, noise) has no zero-temperature flow here:
    no w2_zero, kind "not applicable" and the reason."""
    import xarray as xr

    from ...dynamics.rates import local_rates
    from ...dynamics.reference import reference_w2
    from ...dynamics.zero_temperature import simulate_zero_temperature
    from ...science.assumptions import reference_rates
    from ...transport.wasserstein import w2_to_target

    applies, why = inputs.model.theorem()
    if not applies:  # no zero-temperature flow of this model: said, not computed
        return xr.Dataset(
            coords={"time": inputs.times}, attrs={"zero": to_json({"kind": "not applicable", "reason": why})}
        )
    att, times, density = inputs.model.head_at(math.inf), inputs.times, inputs.model.rho0.density
    info: dict[str, object] = {
        k: float(v) for k, v in reference_rates(att).items() if isinstance(v, int | float)
    }
    why = "it was not asked for (zero_reference = false)"
    w2: np.ndarray | None = None
    err = np.full(times.shape, np.nan)
    if inputs.zero_reference:
        try:
            ref = reference_w2(att, times, density.name, rtol=1e-3, **density.params)
        except ValueError as e:
            why = str(e)
        else:
            w2, err = ref.w2, ref.w2_err
            rates = local_rates(ref.times, ref.w2, ref.w2_err, width=rate_window(inputs.rules.dt))
            info.update(kind="N = infinity reference", local_rates=rates)
    if w2 is None:
        traj = simulate_zero_temperature(cloud.X0[0], att, times)
        w2 = w2_to_target(traj.x, cloud.PiX0[0], weights=cloud.weights).values
        info.update(kind=f"exact flow of the N = {cloud.N} cloud", reason=f"no N = infinity reference: {why}")
    data = {"w2_zero": (("time",), np.asarray(w2)), "w2_zero_error": (("time",), np.asarray(err))}
    ds = xr.Dataset(data, coords={"time": times})
    ds.attrs["zero"] = to_json(info)
    return ds
