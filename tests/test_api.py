"""The public API of DESIGN.md: every name resolves, and `import attnflow` stays light."""

import subprocess
import sys

import pytest

import attnflow as af


@pytest.mark.parametrize("name", af.__all__)
def test_public_names_resolve(name):
    assert getattr(af, name) is not None


def test_import_is_light():
    """No torch, POT, xarray, matplotlib or dask at `import attnflow` (nor at the core modules)."""
    code = (
        "import sys, attnflow, attnflow.attention, attnflow.measures.sampling, attnflow.measures.quadrature, "
        "attnflow.measures.densities, attnflow.measures.geometry, attnflow.dynamics.integrate, "
        "attnflow.kernels;"
        "heavy = [m for m in ('torch', 'ot', 'xarray', 'matplotlib', 'dask', 'zarr') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_sweep_is_the_function_even_after_importing_its_module():
    import attnflow.sweeps  # noqa: F401

    assert callable(af.sweep) and af.sweep.__name__ == "sweep"


def test_unknown_name():
    with pytest.raises(AttributeError, match="no attribute 'simulatee'"):
        af.simulatee  # noqa: B018
