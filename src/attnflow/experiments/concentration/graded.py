"""init = graded in `concentration`: the search of one beta (a part of the run folder, so that a resumed
run grades its nodes from the stored separatrices) and the clouds of its levels: d = 2 toward the
separatrices (`dynamics.separatrix`), d = 3 toward the sources and the separatrix (`dynamics.sources`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ...io import to_json
from ...progress import Reporter
from ..common import torch_threads
from .levels import Cloud, ConcentrationInputs, make_cloud

if TYPE_CHECKING:
    import xarray as xr

    from ...dynamics.separatrix import SeparatrixSearch
    from ...dynamics.sources import SourceSearch

__all__ = ["graded_clouds", "separatrix_part", "stored_search"]


def separatrix_part(inputs: ConcentrationInputs, beta: float, reporter: Reporter) -> xr.Dataset:
    """init = graded: the separatrices of the flow at beta (`InitialMeasure.search`, rho_0's density,
    up to t_max) as a Dataset: d = 2 angles (separatrix,) and brackets (separatrix, end) in radians;
    d = 3 the source's alpha_bracket (end), the frame (axis, dim) = u_1, u_2, u_3, the rings' theta
    (ring,) and brackets (ring, end); attrs width (the widest bracket), passes (JSON), wall_s."""
    import xarray as xr

    from ...dynamics.separatrix import SeparatrixSearch

    start = time.perf_counter()
    with torch_threads(inputs.solver.threads), reporter.task(f"beta = {beta:g}: separatrix search"):
        res = inputs.model.rho0.search(
            inputs.model.head_at(beta), inputs.t_max, inputs.solver.kernel, inputs.solver.device
        )
    if isinstance(res, SeparatrixSearch):
        data = {"angles": (("separatrix",), res.angles), "brackets": (("separatrix", "end"), res.brackets)}
    else:
        data = {
            "alpha_bracket": (("end",), res.alpha_bracket),
            "frame": (("axis", "dim"), np.stack([res.u1, res.u2, res.u3])),
            "theta": (("ring",), res.theta),
            "brackets": (("ring", "end"), res.brackets),
        }
    wall = time.perf_counter() - start
    return xr.Dataset(
        data, attrs={"beta": beta, "width": res.width, "passes": to_json(res.passes), "wall_s": wall}
    )


def stored_search(search: xr.Dataset) -> SeparatrixSearch | SourceSearch:
    """The search a separatrix_part stored."""
    from ...dynamics.separatrix import SeparatrixSearch
    from ...dynamics.sources import SourceSearch

    if "angles" in search:
        return SeparatrixSearch(search.angles.values, search.brackets.values)
    ab = search.alpha_bracket.values
    u1, u2, u3 = search.frame.values
    return SourceSearch(float(ab.mean()), ab, u1, u2, u3, search.theta.values, search.brackets.values)


def graded_clouds(inputs: ConcentrationInputs, beta: float, search: xr.Dataset) -> Iterator[Cloud]:
    """init = graded: the clouds of levels 0, 1, 2, ... at beta, graded toward the separatrices of
    `search` (a separatrix_part); level 0 always, then each level whose node count is <= N_max."""
    found = stored_search(search)
    att = inputs.model.head_at(beta)
    for level in itertools.count():
        nodes = inputs.model.rho0.graded_nodes(att, inputs.t_max, level, found)
        if level and len(nodes.X) > inputs.rules.N_max:
            return
        yield make_cloud(inputs, len(nodes.X), nodes)
