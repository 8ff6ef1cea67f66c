"""The `attnflow` command: exit codes, messages without tracebacks, run/list/show/plot/check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

import attnflow.integrate as integrate
from attnflow.cli import app
from attnflow.io import load_matrices

runner = CliRunner()
TINY = ["concentration-tiny", "--set", "N=24", "--set", "t_max=2.0", "--set", "n_keep=6"]


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_clean_error(result, code: int, *needles: str) -> None:
    """Exit `code`, a message naming each needle, and no Python traceback."""
    text = result.output + (result.stderr if hasattr(result, "stderr") else "")
    assert result.exit_code == code, text
    assert "Traceback" not in text
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), text
    for n in needles:
        assert n in text, f"{n!r} not in {text!r}"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "tiny"
    result = invoke("run", *TINY, "--out", str(out), "--quiet", "--no-figures")
    assert result.exit_code == 0, result.output
    return out


# ---------------------------------------------------------------------------------------- help


@pytest.mark.parametrize("cmd", [[], ["run"], ["list"], ["show"], ["plot"], ["check"]])
def test_help(cmd):
    result = invoke(*cmd, "--help")
    assert result.exit_code == 0 and "Usage" in result.output


def test_import_cli_loads_no_experiment_and_no_pydantic():
    """`attnflow --help` and `attnflow list` stay fast: the CLI imports experiments when a command runs."""
    from attnflow.experiments import BUILTIN

    code = "import sys, attnflow.cli; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "attnflow.cli" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("pydantic", "xarray", "torch", "matplotlib")}
    assert not loaded & {f"attnflow.experiments.{m}" for m in (*BUILTIN, "_config", "_common")}


def test_no_arguments_shows_help():
    result = invoke()
    assert "run" in result.output and "list" in result.output


# ----------------------------------------------------------------------------------------- run


def test_run_writes_everything(finished):
    for name in ("result.zarr", "summary.json", "summary.md", "config.toml"):
        assert (finished / name).exists()
    ds = xr.open_zarr(finished / "result.zarr")
    assert ds.attrs["experiment"] == "concentration" and ds.sizes["beta"] == 2
    assert json.loads(ds.attrs["config"])["N"] == 24
    summary = json.loads((finished / "summary.json").read_text())
    assert set(summary["per_beta"]) == {"10", "100"}


def test_run_prints_resolution_and_warns(tmp_path):
    result = invoke("run", *TINY, "--out", str(tmp_path), "--no-figures")
    assert result.exit_code == 0, result.output
    assert "resolution ratio" in result.output
    assert "warning: beta = 100 is under-resolved at N = 24" in result.output
    assert "| 100 |" in result.output  # the summary table
    quiet = invoke("run", *TINY, "--out", str(tmp_path), "--no-figures", "--quiet")  # resumes: nothing to do
    assert quiet.exit_code == 0
    assert "converged window" not in quiet.output and "| 100 |" not in quiet.output  # no messages
    assert "warning" in quiet.output  # warnings are never silenced


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--set", "Nn=3"], ["Nn", "unknown key"]),
        (["--set", "N=abc"], ["N", "integer"]),
        (["--set", "betas=[10, -3]"], ["betas[1]", "greater than 0"]),
        (["--set", "betas=[0.0]"], ["betas[0]"]),
        (["--set", "N"], ["key=value"]),
    ],
)
def test_run_bad_config_exits_2(args, needles, tmp_path):
    result = invoke("run", "concentration", *args, "--out", str(tmp_path))
    assert_clean_error(result, 2, *needles)
    assert not (tmp_path / "parts").exists()


def test_run_bad_config_file_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('experiment = "concentration"\nN = "many"\n')
    assert_clean_error(invoke("run", str(bad)), 2, "bad.toml", "N")
    assert_clean_error(invoke("run", str(tmp_path / "absent.toml")), 2, "absent.toml")
    assert_clean_error(invoke("run", "concentrashun"), 2, "unknown experiment")
    (tmp_path / "afile").write_text("x")
    assert_clean_error(invoke("run", "concentration-tiny", "--out", str(tmp_path / "afile")), 2, "afile")


def test_run_failure_exits_1_and_interrupt_exits_130(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(integrate, "simulate", boom)
    assert_clean_error(invoke("run", *TINY, "--out", str(tmp_path), "-q"), 1, "injected failure", "parts")

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(integrate, "simulate", interrupt)
    assert_clean_error(invoke("run", *TINY, "--out", str(tmp_path), "-q"), 130, "interrupted", "rerun")


def test_run_from_toml_file(tmp_path):
    listed = invoke("list", "concentration-tiny", "--toml")
    assert listed.exit_code == 0
    cfg = tomllib.loads(listed.output)
    assert cfg["experiment"] == "concentration" and cfg["N"] == 64
    path = tmp_path / "mine.toml"
    path.write_text(listed.output.replace("N = 64", "N = 20").replace("t_max = 4.0", "t_max = 1.0"))
    result = invoke("run", str(path), "--out", str(tmp_path / "out"), "-q", "--no-figures")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["N"] == 20


# ---------------------------------------------------------------------------------------- list


def test_list_shows_every_experiment_preset_and_default():
    from attnflow.experiments import PRESETS, REGISTRY

    result = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in [*REGISTRY, *PRESETS]:
        assert name in result.output
    for field in REGISTRY["concentration"].Config.model_fields:
        if field != "experiment":
            assert field in result.output
    assert "[10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0]" in result.output


def test_list_unknown_exits_2():
    assert_clean_error(invoke("list", "nope"), 2, "nope")


# ---------------------------------------------------------------------------------------- show


def test_show(finished, tmp_path):
    result = runner.invoke(app, ["show", str(finished)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "per_beta" in result.output and "result.zarr" in result.output and "numpy" in result.output
    assert_clean_error(invoke("show", str(tmp_path / "absent")), 2, "absent")
    assert_clean_error(invoke("show", str(tmp_path)), 2, "not an attnflow run")
    (tmp_path / "parts" / "beta=10.zarr").mkdir(parents=True)
    assert_clean_error(invoke("show", str(tmp_path)), 1, "unfinished", "beta=10")


# ---------------------------------------------------------------------------------------- plot


def test_plot_needs_a_result(tmp_path):
    assert_clean_error(invoke("plot", str(tmp_path)), 2, "result.zarr")


@pytest.mark.slow
def test_plot_writes_figures_and_report(finished):
    result = invoke("plot", str(finished), "--no-animation")
    assert result.exit_code == 0, result.output
    pngs = list((finished / "figures").glob("*.png"))
    assert pngs and all(p.with_suffix(".pdf").exists() for p in pngs)
    assert (finished / "report.md").exists()


# --------------------------------------------------------------------------------------- check


def _worked_files(tmp_path: Path) -> list[str]:
    from attnflow.model import worked_example

    att = worked_example()
    paths = []
    for name, M in (("Q", att.Q), ("K", att.K), ("V", att.V)):
        np.save(tmp_path / f"{name}.npy", M)
        paths.append(str(tmp_path / f"{name}.npy"))
    return paths


def test_load_matrices_formats(tmp_path):
    paths = _worked_files(tmp_path)
    np.savetxt(tmp_path / "K.txt", np.load(paths[1]))
    np.savez(tmp_path / "qkv.npz", Q=np.eye(3), K=np.load(paths[1]), V=np.load(paths[2]))
    a = load_matrices([Path(paths[0]), tmp_path / "K.txt", Path(paths[2])])
    b = load_matrices([tmp_path / "qkv.npz"])
    for key in "QKV":
        np.testing.assert_allclose(a[key], b[key])


def test_check_bad_files_exit_2(tmp_path):
    paths = _worked_files(tmp_path)
    np.save(tmp_path / "K_rect.npy", np.ones((3, 2)))
    assert_clean_error(
        invoke("check", paths[0], str(tmp_path / "K_rect.npy"), paths[2]), 2, "K_rect.npy", "square"
    )
    np.save(tmp_path / "V4.npy", np.eye(4))
    assert_clean_error(invoke("check", paths[0], paths[1], str(tmp_path / "V4.npy")), 2, "V4.npy", "3 x 3")
    (tmp_path / "junk.txt").write_text("1 2\nthree\n")
    assert_clean_error(invoke("check", paths[0], str(tmp_path / "junk.txt"), paths[2]), 2, "junk.txt")
    assert_clean_error(invoke("check", paths[0], paths[1]), 2, "three files")
    assert_clean_error(invoke("check", paths[0], paths[1], str(tmp_path / "none.npy")), 2, "none.npy")
    np.savez(tmp_path / "qk.npz", Q=np.eye(3), K=np.eye(3))
    assert_clean_error(invoke("check", str(tmp_path / "qk.npz")), 2, "qk.npz", "Q, K and V")
    assert_clean_error(invoke("check", *paths, "--beta", "-1"), 2, "--beta")


def test_check_worked_example(tmp_path):
    paths = _worked_files(tmp_path)
    result = invoke("check", *paths, "--json")
    assert result.exit_code == 0, result.output
    json.loads(result.output)
    # a non-symmetric A: assumption 1 fails -> exit 1
    np.save(tmp_path / "V.npy", np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]]))
    assert invoke("check", *paths).exit_code == 1


# -------------------------------------------------------------------------- killed by a signal


@pytest.mark.slow
def test_sigterm_mid_run_then_resume(tmp_path):
    """A run killed by SIGTERM after its first beta exits 130; the rerun reuses that beta."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnflow.cli", "run", "concentration-tiny", "--out", str(out), "-q"]
    cmd += ["--no-figures", "--set", "betas=[10, 30, 100, 300]", "--set", "N=200", "--set", "t_max=3.0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = out / "parts" / "beta=10_N=200.zarr"
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert first.exists(), proc.communicate()
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not (out / "result.zarr").exists()
    assert not [p for p in (out / "parts").iterdir() if p.name.startswith(".")]  # nothing half-written
    done = {p.name for p in (out / "parts").iterdir()}
    mtimes = {p: (out / "parts" / p).stat().st_mtime_ns for p in done}
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    for p, m in mtimes.items():
        assert (out / "parts" / p).stat().st_mtime_ns == m  # finished parts were not recomputed
    assert xr.open_zarr(out / "result.zarr").sizes["beta"] == 4


def test_check_with_tokens(tmp_path):
    from attnflow.sphere import sample_uniform

    paths = _worked_files(tmp_path)
    np.save(tmp_path / "X0.npy", sample_uniform(200, 3, seed=0))
    result = invoke("check", *paths, "--x0", str(tmp_path / "X0.npy"), "--kind", "uniform", "--json")
    assert result.exit_code == 0, result.output
    assert "M1" in result.output or "M_1" in result.output
    assert_clean_error(invoke("check", *paths, "--kind", "gaussian"), 2, "kind")
    np.save(tmp_path / "X4.npy", sample_uniform(10, 4, seed=0))
    assert_clean_error(invoke("check", *paths, "--x0", str(tmp_path / "X4.npy")), 2, "X4.npy")
