"""The `attnflow` command: exit codes, messages without tracebacks, run/list/show/plot/check."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import attnflow.dynamics.integrate as integrate
from attnflow.cli import app
from attnflow.io import load_matrices
from cli_helpers import TINY, invoke, runner
from events import HANG_S, gated_cli, wait_for


def assert_clean_error(result, code: int, *needles: str) -> None:
    """Exit `code`, a message naming each needle, and no Python traceback."""
    text = result.output + (result.stderr if hasattr(result, "stderr") else "")
    assert result.exit_code == code, text
    assert "Traceback" not in text
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), text
    for n in needles:
        assert n in text, f"{n!r} not in {text!r}"


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
    assert not loaded & {f"attnflow.experiments.{m}" for m in (*BUILTIN, "config", "common")}


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
    assert set(summary["per_beta"]) == {"10", "20"}


@pytest.mark.slow  # an end-to-end run of a few seconds: the full suite only
def test_run_ends_with_a_short_summary(tmp_path):
    """After the progress lines: under 30 lines with every beta's status, every claims row's
    verdict and where the report and the full tables are."""
    result = invoke("run", *TINY, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    tail = result.output[result.output.index("concentration: done in") :].splitlines()[1:]
    assert len(tail) < 30, "\n".join(tail)
    text = "\n".join(tail)
    summary = json.loads((tmp_path / "summary.json").read_text())
    for beta, record in summary["per_beta"].items():
        assert f"  β = {beta}: {record['status']}, N = {record['N']}" in text
    for row in summary["claims"]:
        shown = (
            f"  {row['key']}: {row['verdict']}"
            if row["kind"] == "theorem"
            else f"{row['key']} {row['verdict']}"
        )
        assert shown in text
    assert f"report: {tmp_path / 'report.html'}" in text and f"every table: attnflow show {tmp_path}" in text
    assert "| key |" not in text and "wrote" not in text.split("report:")[1]  # no full tables


def test_run_prints_resolution_and_warns(tmp_path):
    result = invoke("run", *TINY, "--out", str(tmp_path), "--no-figures")
    assert result.exit_code == 0, result.output
    assert "resolution ratio" in result.output
    assert "warning: beta = 20 is under-resolved at N = 24" in result.output
    assert "  β = 20: under-resolved, N = 24" in result.output  # the closing summary, one line per beta
    quiet = invoke("run", *TINY, "--out", str(tmp_path), "--no-figures", "--quiet")  # resumes: nothing to do
    assert quiet.exit_code == 0
    assert "converged window" not in quiet.output and "| 20 |" not in quiet.output  # no messages
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


def test_run_exit_codes_of_every_failure(tmp_path, monkeypatch):
    """One map from what went wrong to the exit code: the output folder and the config 2, a failed
    run 1 (a permission error named), --debug shows the traceback instead."""
    from attnflow.experiments import ConfigError
    from attnflow.io.lock import folder_lock

    out = tmp_path / "run"
    out.mkdir()
    with folder_lock(out):  # another writer holds the folder
        assert_clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, "--out", "in use by another")
    calls = []

    def raising(err):
        def fn(*args, **kwargs):
            calls.append(err)
            raise err

        return fn

    monkeypatch.setattr(integrate, "simulate", raising(ConfigError("weights: B is singular; use another K")))
    assert_clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 2, "weights: B is singular")
    denied = PermissionError(13, "Permission denied", str(tmp_path / "ro"))
    monkeypatch.setattr(integrate, "simulate", raising(denied))
    assert_clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 1, "cannot write", "permission denied")
    monkeypatch.setattr(integrate, "simulate", raising(ValueError("a bad value")))
    assert_clean_error(invoke("run", *TINY, "--out", str(out), "-q"), 1, "run failed: a bad value")
    monkeypatch.setattr(integrate, "simulate", raising(RuntimeError("injected")))
    debug = invoke("--debug", "run", *TINY, "--out", str(out), "-q")
    assert debug.exit_code == 1 and isinstance(debug.exception, RuntimeError)  # the traceback, for --debug
    assert len(calls) == 4


def test_exits_maps_the_first_matching_failure(capsys):
    import typer

    from attnflow.cli.console import EXIT_INTERRUPTED, Failure, exits

    failures = [
        Failure((KeyboardInterrupt,), EXIT_INTERRUPTED, lambda e: "interrupted"),
        Failure((KeyError,), 2, lambda e: f"key {e}"),
        Failure((LookupError,), 1, lambda e: "lookup"),
    ]
    for err, code, message in [(KeyError("k"), 2, "key 'k'"), (IndexError(), 1, "lookup")]:
        with pytest.raises(typer.Exit) as info, exits(failures):
            raise err
        assert info.value.exit_code == code and capsys.readouterr().err == f"attnflow: {message}\n"
    with pytest.raises(ZeroDivisionError), exits(failures):  # not in the map: through
        raise ZeroDivisionError
    with pytest.raises(KeyError), exits(failures, debug=True):  # --debug: the exception itself
        raise KeyError("k")
    with pytest.raises(typer.Exit) as info, exits(failures, debug=True):  # but Ctrl-C still exits 130
        raise KeyboardInterrupt
    assert info.value.exit_code == EXIT_INTERRUPTED
    with pytest.raises(typer.Exit) as info, exits(failures):  # an exit of the block goes through
        raise typer.Exit(7)
    assert info.value.exit_code == 7


def _commands():
    import typer.main

    group = typer.main.get_command(app)
    return [(name, group.commands[name]) for name in sorted(group.commands)]


@pytest.mark.parametrize(("name", "command"), _commands())
def test_every_option_has_help_and_a_plain_metavar(name, command):
    from attnflow.cli.command import Command

    assert isinstance(command, Command)
    for param in command.params:
        assert getattr(param, "help", None), f"attnflow {name}: {param.name} has no help"
    text = invoke(name, "--help").output
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: attnflow {name} [OPTIONS]")
    for python in ("{", "<", "list[", "Optional", "Union", "Path]", "str>", "int>", "float>"):
        assert python not in text, (name, python, text)
    if name in ("show", "plot", "verify"):
        assert usage.endswith(" DIR") and "\n  DIR  " in text


def test_help_names_the_values():
    assert "Usage: attnflow check [OPTIONS] FILE..." in invoke("check", "--help").output
    assert "--beta NUMBER" in invoke("check", "--help").output
    assert "Usage: attnflow run [OPTIONS] [NAME]" in invoke("run", "--help").output
    assert "-w, --workers INTEGER" in invoke("sweep", "--help").output
    assert "-g, --grid KEY=VALUES" in invoke("sweep", "--help").output
    assert (
        "-q, --quiet" in invoke("plot", "--help").output and "no progress" in invoke("plot", "--help").output
    )


def test_run_from_toml_file(tmp_path):
    listed = invoke("list", "concentration-tiny", "--toml")
    assert listed.exit_code == 0
    cfg = tomllib.loads(listed.output)
    assert cfg["experiment"] == "concentration" and cfg["N"] == 128
    path = tmp_path / "mine.toml"
    path.write_text(listed.output.replace("N = 128", "N = 20").replace("t_max = 8.0", "t_max = 1.0"))
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


def test_piped_list_fits_120_columns():
    """Not a terminal (CliRunner, a pipe, a file): Markdown with no line over 120 characters (or
    COLUMNS); a table too wide for that is a list of its rows; --wide keeps each row on one line."""
    from attnflow.experiments import REGISTRY, SimulationConfig

    longest = SimulationConfig.model_fields["dtype"].description
    assert len(longest) > 100
    piped = runner.invoke(app, ["list"], env={"COLUMNS": None})
    assert piped.exit_code == 0, piped.output
    assert max(map(len, piped.output.splitlines())) <= 120
    assert "- **dtype** — type: float64 or float32;" in piped.output
    assert longest in " ".join(piped.output.split())  # folded between words, never cut
    for name, exp in REGISTRY.items():
        assert f"## {name}\n" in piped.output
        for field in exp.Config.model_fields:
            assert field == "experiment" or f"- **{field}** — " in piped.output
    narrow = runner.invoke(app, ["list"], env={"COLUMNS": "80"})
    assert max(map(len, narrow.output.splitlines())) <= 80
    wide = runner.invoke(app, ["list", "--wide"], env={"COLUMNS": None})
    assert any(longest in line and line.startswith("| dtype |") for line in wide.output.splitlines())


def _in_a_terminal(columns: int, *args: str) -> str:
    """What `attnflow ARGS` prints in a terminal (a pseudo-terminal) of `columns` columns."""
    pty = pytest.importorskip("pty")
    import fcntl
    import re
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = dict(os.environ, COLUMNS=str(columns), TERM="xterm", NO_COLOR="1")
    cmd = [sys.executable, "-m", "attnflow.cli", *args]
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait() == 0, out
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode().replace("\r\n", "\n"))


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_list_reads_at_80_columns():
    """`attnflow list concentration` in a terminal of 80 columns: no line over 80, one record per
    parameter whose meaning fills the lines (not a word or two per line)."""
    from attnflow.experiments import REGISTRY

    text = _in_a_terminal(80, "list", "concentration")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    fields = [f for f in REGISTRY["concentration"].Config.model_fields if f != "experiment"]
    starts = [i for i, line in enumerate(lines) if line.split(" — ")[0] in fields]
    assert [lines[i].split(" — ")[0] for i in starts] == fields  # each parameter once, in order
    dtype = REGISTRY["concentration"].Config.model_fields["dtype"].description
    i = fields.index("dtype")
    record = lines[starts[i] : starts[i + 1]]
    assert dtype in " ".join(" ".join(record).split())
    assert len(record) <= 1 + len(dtype) // 60  # full lines, about 75 characters each
    wide = _in_a_terminal(80, "list", "concentration", "--wide")
    assert any(line.startswith("│ dtype ") and dtype in line for line in wide.splitlines())


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_show_in_a_terminal(finished):
    """`attnflow show` in a terminal: the rows of summary.md, at most 80 columns."""
    text = _in_a_terminal(80, "show", str(finished))
    assert max(map(len, text.splitlines())) <= 80, text
    assert "attnflow run: concentration" in text and "per_beta" in text and "error_vanishes — claim: " in text
    flat = " ".join(text.split())
    for line in (finished / "summary.md").read_text().splitlines():
        if line.startswith("| 20 |"):  # a per_beta row: every cell shown
            for cell in line.strip("| ").split(" | "):
                assert cell.strip() in flat


def test_list_types_are_in_user_words():
    doc = json.loads(invoke("list", "--json").output)
    types = {r["parameter"]: r["type"] for r in doc["experiments"]["concentration"]["parameters"]}
    shared = {r["parameter"]: r["type"] for r in doc["shared_parameters"]}
    assert types["d"] == "integer > 0 or none"
    assert types["N"] == "integer > 0 or auto"
    assert types["betas"] == "list of numbers > 0"
    assert types["seeds"] == "list of integers >= 0"
    assert types["kappa"] == "number > 0"
    assert types["symmetric"] == "true or false"
    assert types["init"] == "uniform, fibonacci, quadrature, graded or meanfield"
    assert shared["seed"] == "integer >= 0" and shared["dtype"] == "float64 or float32"
    text = invoke("list").output
    for python in ("Optional", "Union", "typing", "Literal", "Annotated", "NoneType", "list["):
        assert python not in text


def test_list_as_json_and_csv():
    import csv
    import io

    from attnflow.experiments import REGISTRY, SimulationConfig

    doc = json.loads(invoke("list", "--json").output)
    assert [r["parameter"] for r in doc["shared_parameters"]] == list(SimulationConfig.model_fields)
    conc = doc["experiments"]["concentration"]
    assert "rtol" in conc["shared_parameters"] and "rtol" not in [r["parameter"] for r in conc["parameters"]]
    assert conc["presets"]["concentration-tiny"]["N"] == 128
    rows = list(csv.DictReader(io.StringIO(invoke("list", "--csv").output)))
    pairs = {(r["experiment"], r["parameter"]) for r in rows}
    for name, exp in REGISTRY.items():
        assert {(name, f) for f in exp.Config.model_fields if f != "experiment"} <= pairs
    assert_clean_error(invoke("list", "--json", "--csv"), 2, "choose one")


def test_config_checks_when_loaded():
    """dt_save > t_max is an error; t_max shorter than ln(max beta) a warning (docs/guide.md)."""
    import warnings

    from attnflow.experiments import ConfigError, load_config
    from attnflow.experiments.config import ConfigWarning

    with pytest.raises(ConfigError, match=r"dt_save = 10 is larger than t_max = 8: only t = 0 and t_max"):
        load_config("concentration-tiny", ["dt_save=10"])
    with pytest.warns(ConfigWarning, match=r"t_max = 2 is shorter than ln\(beta\) = 3 for beta = 20"):
        load_config("concentration-tiny", ["t_max=2.0"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("concentration", "terminal", "resolution", "zero-temperature", "layers", "heads"):
            load_config(name)  # the defaults are meaningful
        load_config("concentration-tiny", ["t_max=4.0", "betas=[10.0, 50.0]"])  # ln 50 = 3.9 < t_max = 4
    assert_clean_error(invoke("run", "concentration-tiny", "-s", "dt_save=10"), 2, "dt_save = 10 is larger")


def test_run_prints_a_config_warning_once(tmp_path):
    args = ["concentration-tiny", "-s", "N=6", "-s", "t_max=0.5", "-s", "betas=[10.0]", "-s", "n_keep=2"]
    result = runner.invoke(app, ["run", *args, "-o", str(tmp_path / "r"), "-q", "--no-figures"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "t_max = 0.5 is shorter" in line]
    assert len(lines) == 1 and lines[0].startswith("attnflow: warning: "), result.output


def test_sweep_takes_set_like_run(tmp_path, monkeypatch):
    """`attnflow sweep -s KEY=VALUE` overrides the base config as `run -s` does; errors say `attnflow:`."""
    import attnflow.sweeps as sw

    seen = {}

    def fake(config, grid, **kwargs):
        seen.update(config=config, grid=grid)
        return sw.SweepResult(store=kwargs["store"], keys=["seed=0"], ran=["seed=0"])

    monkeypatch.setattr(sw, "sweep", fake)
    out = str(tmp_path / "s")
    result = invoke(
        "sweep",
        "concentration-tiny",
        "-g",
        "seed=0",
        "-s",
        "N=8",
        "-s",
        "betas=[3.0]",
        "-o",
        out,
        "-q",
        "--no-figures",
    )
    assert result.exit_code == 0, result.output
    assert seen["config"].N == 8 and seen["config"].betas == [3.0] and seen["grid"] == {"seed": [0]}
    bad = invoke("sweep", "concentration-tiny", "-g", "seed=0", "-s", "dt_save=10", "-o", out, "-q")
    assert_clean_error(bad, 2, "dt_save = 10 is larger than t_max")
    assert bad.output.startswith("attnflow: ")
    unknown = invoke("sweep", "concentration-tiny", "-g", "seed=0", "-s", "bogus=1", "-o", out, "-q")
    assert_clean_error(unknown, 2, "bogus")
    assert unknown.output.startswith("attnflow: ")


# ---------------------------------------------------------------------------------------- show


def test_show(finished, tmp_path):
    result = runner.invoke(app, ["show", str(finished)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "per_beta" in result.output and "result.zarr" in result.output and "numpy" in result.output
    assert_clean_error(invoke("show", str(tmp_path / "absent")), 2, "absent")
    assert_clean_error(invoke("show", str(tmp_path)), 2, "not an attnflow run")
    (tmp_path / "parts" / "beta=10.zarr").mkdir(parents=True)
    assert_clean_error(invoke("show", str(tmp_path)), 1, "unfinished", "beta=10")


def test_show_of_a_run_loads_no_xarray(finished):
    """`attnflow show` reads the store's metadata only: xarray, zarr, torch and matplotlib stay out."""
    code = (
        "import sys; from attnflow.cli import main; sys.argv = ['attnflow', 'show', sys.argv[1]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', ' '.join(sorted(sys.modules)))"
    )
    argv = [sys.executable, "-c", code, str(finished)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert "result.zarr" in out.stdout
    loaded = set(out.stdout.split("LOADED")[-1].split())
    assert not {m for m in loaded if m.split(".")[0] in ("xarray", "zarr", "torch", "matplotlib", "dask")}


# ---------------------------------------------------------------------------------------- plot


def test_show_as_json_and_piped_markdown(finished):
    doc = json.loads(invoke("show", str(finished), "--json").output)
    assert doc["summary"]["experiment"] == "concentration"
    assert doc["dataset"]["sizes"]["beta"] == 2 and "w2" in doc["dataset"]["variables"]
    assert "versions" in doc["provenance"]
    piped = runner.invoke(app, ["show", str(finished)], env={"COLUMNS": None}).output
    assert "| quantity | value |" in piped  # the summary's Markdown as it is, not a rendering
    assert_clean_error(invoke("show", str(finished), "--csv"), 2, "--csv is for a sweep store")


def test_plot_needs_a_result(tmp_path):
    assert_clean_error(invoke("plot", str(tmp_path)), 2, "result.zarr")


@pytest.mark.slow
def test_plot_writes_figures_and_report(finished, tmp_path):
    run = tmp_path / "run"  # a copy: the finished run is shared by the whole session
    shutil.copytree(finished, run)
    result = invoke("plot", str(run), "--no-animation", "--pdf")
    assert result.exit_code == 0, result.output
    pngs = list((run / "figures").glob("*.png"))
    assert pngs and all(p.with_suffix(".pdf").exists() for p in pngs)
    assert (run / "report.md").exists()


# --------------------------------------------------------------------------------------- check


def _worked_files(tmp_path: Path) -> list[str]:
    from attnflow.attention import worked_example

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
    """A run killed by SIGTERM after its first beta exits 130; the rerun reuses that beta. The second
    beta's simulation waits at a gate, so the run is certainly unfinished when it is killed."""
    out = tmp_path / "run"
    args = ["run", "concentration-tiny", "--out", str(out), "-q"]
    args += ["--no-figures", "--set", "betas=[10, 30, 100, 300]", "--set", "N=200", "--set", "t_max=3.0"]
    gated, _ = gated_cli(tmp_path, free=1)
    proc = subprocess.Popen([*gated, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = out / "parts" / "beta=10_N=200.zarr"
    wait_for(first.exists, "the first beta's part on disk", proc)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not (out / "result.zarr").exists()
    assert not [p for p in (out / "parts").iterdir() if p.name.startswith(".")]  # nothing half-written
    done = {p.name for p in (out / "parts").iterdir()}
    assert first.name in done and not [p for p in done if p.startswith(("beta=30", "beta=100", "beta=300"))]
    cmd = [sys.executable, "-m", "attnflow.cli", *args]
    mtimes = {p: (out / "parts" / p).stat().st_mtime_ns for p in done}
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S)
    assert rerun.returncode == 0, rerun.stderr
    for p, m in mtimes.items():
        assert (out / "parts" / p).stat().st_mtime_ns == m  # finished parts were not recomputed
    assert xr.open_zarr(out / "result.zarr").sizes["beta"] == 4


def test_check_with_tokens(tmp_path):
    from attnflow.measures.sampling import sample_uniform

    paths = _worked_files(tmp_path)
    np.save(tmp_path / "X0.npy", sample_uniform(200, 3, seed=0))
    result = invoke("check", *paths, "--x0", str(tmp_path / "X0.npy"), "--kind", "uniform", "--json")
    assert result.exit_code == 0, result.output
    assert "M1" in result.output or "M_1" in result.output
    assert_clean_error(invoke("check", *paths, "--kind", "gaussian"), 2, "kind")
    np.save(tmp_path / "X4.npy", sample_uniform(10, 4, seed=0))
    assert_clean_error(invoke("check", *paths, "--x0", str(tmp_path / "X4.npy")), 2, "X4.npy")
