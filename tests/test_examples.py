"""The example scripts run end to end (as a user would run them) and write what they promise."""

import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_quickstart_runs_and_resumes(tmp_path):
    out = run_example("quickstart.py", "--out", str(tmp_path))
    assert "not resolved: error_vanishes (theorem)" in out  # the claims table, printed
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert set(ds.beta.values) == {10.0, 30.0, 100.0}
    parts = sorted(p.name for p in (tmp_path / "parts").iterdir())
    mtimes = [(tmp_path / "parts" / p).stat().st_mtime for p in parts]
    run_example("quickstart.py", "--out", str(tmp_path))  # second run: nothing recomputed
    assert [(tmp_path / "parts" / p).stat().st_mtime for p in parts] == mtimes


@pytest.mark.slow
def test_sweep_example_runs(tmp_path):
    out = run_example("sweep_small.py", "--out", str(tmp_path))
    assert "done 9, failed 0, pending 0" in out
    assert "under-resolved" in out and "resolution_ratio" in out  # the table's status and ratio
    t_star = [line for line in out.splitlines() if line.startswith("beta = ")]
    assert len(t_star) == 3 and all("(not resolved: under-resolved" in line for line in t_star)
    assert "Warning" not in out
    assert (tmp_path / "store" / "sweep.json").is_file()
    assert (tmp_path / "store" / "figures" / "sweep.png").is_file()
