"""The fault probe of a new user (issue 25): each value exits 2 with one line that starts with
"attnflow:" and names the key, no traceback, no warning text, and nothing written; the documented
option symmetric = false runs; `attnflow plot` of a healthy under-resolved run exits 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_helpers import invoke


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    np.savez(folder / "huge.npz", Q=np.eye(3) * 1e300, K=np.eye(3) * 1e300, V=np.eye(3))
    np.savez(folder / "singular.npz", Q=np.eye(4), K=np.diag([2.0, 1.0, 1.0, 0.0]), V=np.eye(4))
    np.savez(folder / "complex.npz", Q=np.eye(3) + 0j, K=np.eye(3) * (1 + 1j), V=np.eye(3))
    (folder / "deep.toml").write_text("betas = " + "[" * 3000 + "]" * 3000 + "\n")
    return folder


def refused(args: list[str], out, *needles: str) -> str:
    """The command exits 2 with one line on stderr, "attnflow: ..." holding every needle, and
    leaves out unwritten."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnflow: "), result.stderr
    for text in ("Traceback", "Warning", ".py:"):
        assert text not in result.output, result.output
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    if out is not None:
        assert not out.exists(), sorted(p.name for p in out.iterdir())
    return lines[0]


RUN = ["run", "concentration-tiny", "-q", "--no-figures"]


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ("concentration-tiny", "dt"),
        ("concentration-tiny", "rtol"),
        ("concentration-tiny", "atol"),
        ("concentration-tiny", "t_max"),
        ("terminal-tiny", "t_max"),
        ("zero-temperature-tiny", "t_max"),
        ("layers-tiny", "T"),
    ],
)
def test_an_infinite_value_is_refused(preset, key, tmp_path):
    out = tmp_path / "out"
    refused(["run", preset, "-q", "--no-figures", "-o", str(out), "-s", f"{key}=inf"], out, f"{key}:")


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["density=vmf", "kappa=inf"], "kappa: must be a finite number"),
        (["seed=99999999999999999999999"], "seed: a seed is stored as a 64-bit integer"),
        (["weights=random", "d=1"], "weights = random needs d >= 2"),
        (["weights=random", "d=100000"], "d <= 512"),
        (["weights=random", "symmetric=false", "weights_seed=1"], "are not real"),
        (["threads=99999999999"], "threads:"),
        (["betas=" + "[" * 3000 + "]" * 3000], "--set betas=...: the value nests"),
        (["t_max=1e300", "dt_save=1e-300"], "t_max = 1e+300 and dt_save = 1e-300"),
        (["N=100000000000"], "N = 100000000000 tokens x d = 2"),
    ],
)
def test_a_value_that_cannot_run_is_refused_when_the_config_is_made(sets, needle, tmp_path):
    out = tmp_path / "out"
    refused([*RUN, "-o", str(out), *(a for s in sets for a in ("-s", s))], out, needle)


def test_weights_that_cannot_run_are_refused(files, tmp_path):
    out = tmp_path / "out"
    huge, singular = files / "huge.npz", files / "singular.npz"
    refused([*RUN, "-o", str(out), "-s", f"weights={huge}"], out, f"weights = {huge}", "rescale Q and K")
    refused(
        [*RUN, "-o", str(out), "-s", f"weights={singular}", "-s", "init=uniform"],  # d = 4: random clouds
        out,
        "B = Q^T K is singular",
        "concentration needs an invertible B",
        f"`attnflow check {singular}`",
    )


def test_a_device_that_is_not_there(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "out"
    refused([*RUN, "-o", str(out), "-s", "device=cuda"], out, "device 'cuda' is not available")
    refused([*RUN, "-o", str(out), "-s", "device=tpu"], out, "device: device must be cpu, cuda or cuda:K")


def test_a_config_file_nested_too_deeply(files, tmp_path):
    out = tmp_path / "out"
    refused(["run", str(files / "deep.toml"), "-q", "-o", str(out)], out, "a value nests lists or tables")


def test_a_sweep_grid_that_cannot_run_is_refused(tmp_path):
    out = tmp_path / "sweep"
    refused(["sweep", "concentration-tiny", "--grid", "t_max=1,inf", "-o", str(out), "-q"], out, "t_max")
    deep = "betas=" + "[" * 3000 + "]" * 3000
    refused(["sweep", "concentration-tiny", "--grid", deep, "-o", str(out), "-q"], out, "--grid", "16 deep")


def test_check_refuses_complex_weights(files):
    message = refused(["check", str(files / "complex.npz")], None, "K must be a real matrix")
    assert "complex entries" in message


def test_symmetric_false_runs_and_its_claims_say_the_theorem_does_not_apply(tmp_path):
    out = tmp_path / "out"
    args = ["-s", "weights=random", "-s", "symmetric=false", "-s", "N=16", "-s", "n_keep=4"]
    result = invoke(*RUN, "-o", str(out), *args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "Warning" not in result.output
    claims = json.loads((out / "summary.json").read_text())["claims"]
    assert {c["verdict"] for c in claims if c["kind"] == "theorem"} == {"not applicable"}


@pytest.mark.slow  # about 26 s: a whole run, then every figure
def test_plot_of_an_under_resolved_run_draws_what_it_can_and_the_report(tmp_path):
    out = tmp_path / "run"
    result = invoke("run", "resolution-tiny", "-o", str(out), "-q", "--no-figures", "-s", "N_max=32")
    assert result.exit_code == 0, result.output
    statuses = {r["status"] for r in json.loads((out / "summary.json").read_text())["per_beta"].values()}
    assert statuses == {"under-resolved"} and not (out / "figures" / "w2.png").exists()
    result = invoke("plot", str(out), "-q")  # draws the figures the run left out
    assert result.exit_code == 0, result.output
    assert (out / "report.md").is_file() and (out / "figures" / "w2.png").is_file()
    assert "attnflow: warning: a figure is left out: plot_t_star: no finite t_star" in result.stderr
    assert "Traceback" not in result.output


def test_one_wall_time_in_summary_provenance_and_the_last_line(tmp_path):
    out = tmp_path / "run"
    args = ["-o", str(out), "--no-figures", "-s", "N=8", "-s", "n_keep=2"]
    result = invoke("run", "concentration-tiny", *args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    import xarray as xr

    prov = json.loads(xr.open_zarr(out / "result.zarr").attrs["provenance"])
    assert summary["wall_time_s"] == prov["wall_time_s"]["this_run"]
    done = [line for line in result.stderr.splitlines() if "done in" in line]
    assert done == [f"concentration: done in {summary['wall_time_s']:.1f} s"]


def test_list_says_what_each_experiment_needs_of_its_weights():
    doc = json.loads(invoke("list", "--json").output)["experiments"]
    assert doc["concentration"]["needs"] == ["invertible-B", "limit", "sources"]
    assert doc["zero-temperature"]["needs"] == ["invertible-B", "limit", "reference"]
    assert doc["terminal"]["needs"] == doc["layers"]["needs"] == []
    text = " ".join(invoke("list", "concentration").output.split())
    assert "needs of the weights, checked when a config is made: an invertible B = Q^T K" in text
