"""The `attnflow` command: run named experiments, list them, show and plot results, check weights.

    attnflow run                                   # the default experiment: concentration
    attnflow run terminal --out runs/t --set N=400 --set "betas=[10, 100]"
    attnflow run my.toml                           # a config file (`attnflow list NAME --toml`)
    attnflow list                                  # experiments, presets, every parameter and default
    attnflow show runs/concentration               # headline numbers of a finished run
    attnflow plot runs/concentration               # figures, animation and report
    attnflow check Q.npy K.npy V.npy               # the theorem's assumptions for given weights
    attnflow verify runs/concentration             # stored results against their checksums

Exit codes: 0 success, 1 the run failed (or `check`: an assumption fails; `show`, `plot`: a damaged
result; `verify`: a problem found), 2 bad usage, config, input file or output folder (a message, no
traceback), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..experiments import DEFAULT_EXPERIMENT
from ..experiments.layout import FIGURES_DIR, RESULT_STORE, SUMMARY_JSON
from ..progress import RichReporter
from .command import Command
from .console import (
    BAD_CONFIG,
    BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliOptions,
    Failure,
    console,
    exits,
    options_of,
    run_failures,
)
from .console import fail as _fail
from .info import list_command
from .options import AnimationOption, PdfOption, SetOption
from .pretrained import heads
from .show import damaged as _damaged
from .show import show_command
from .sweep import sweep_command
from .verify import verify_command

if TYPE_CHECKING:
    import xarray as xr

DEFAULT_RUN = "concentration-demo"  # what `attnflow run` runs without a name (and `make demo`)

app = typer.Typer(
    name="attnflow",
    help=(
        "Token dynamics of deep self-attention on the sphere: run the paper's experiments, "
        "get figures, a summary table and an xarray dataset.\n\n"
        f"Start with `attnflow run` (the {DEFAULT_RUN} preset of the {DEFAULT_EXPERIMENT} experiment: "
        "every beta converged in N and the claims table, a few minutes on a laptop), "
        f"then `attnflow show runs/{DEFAULT_RUN}`. `attnflow list` shows every experiment and "
        "parameter."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="show Python tracebacks of failures")] = False,
) -> None:
    ctx.obj = CliOptions(debug=debug)
    if not debug:
        _warnings_as_messages()


def _warnings_as_messages() -> None:
    """Show every warning as one `attnflow: warning: ...` line on stderr, never Python's file, line
    and source: one of attnflow's (a ConfigWarning: a config that runs but may mislead, e.g. t_max
    too short for the betas; a FigureWarning: a figure left out) as its message, any other (a
    library's, NumPy's) with its category. `--debug` leaves Python's display."""
    shown = warnings.showwarning
    if getattr(shown, "attnflow", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        ours = category.__module__.split(".")[0] == "attnflow"
        kind = "" if ours else f" ({category.__name__})"
        typer.echo(f"attnflow: warning: {message}{kind}", err=True)

    show.attnflow = True  # type: ignore[attr-defined]
    warnings.showwarning = show


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt, so a killed run cleans up like Ctrl-C and exits 130."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ------------------------------------------------------------------------------------------ run


def _default_out(target: str) -> Path:
    name = Path(target).stem if target.endswith(".toml") else target
    return Path("runs") / name


def _figures(
    ds: xr.Dataset,
    summary: dict,
    out: Path,
    animation: bool,
    quiet: bool,
    pdf: bool = False,
    debug: bool = False,
) -> list[Path]:
    """The experiment's figures (PDF, animation) in OUT/figures and the report; a failure only warns."""
    from contextlib import nullcontext

    from ..experiments import plot_run, write_report
    from ..io import inside

    paths: list[Path] = []
    what = (
        "figures" + (" (PNG and PDF)" if pdf else "") + (", animation" if animation else "") + " and report"
    )
    status = nullcontext() if quiet else console(stderr=True).status(f"drawing {what}")
    try:
        with status:
            paths = plot_run(ds, inside(out, FIGURES_DIR), animation=animation, pdf=pdf)
            paths.append(write_report(ds, summary, paths, out))
        suffixes = {p.suffix for p in paths}
        if not quiet and ".gif" in suffixes and ".mp4" not in suffixes:  # animate found no ffmpeg
            from ..plot.tokens import FFMPEG_HINT

            typer.echo(f"attnflow: no MP4 (no ffmpeg found): {FFMPEG_HINT}", err=True)
    except Exception as err:  # figures never fail a finished run
        if debug:
            raise
        typer.echo(f"attnflow: figures incomplete ({type(err).__name__}: {err})", err=True)
    if not quiet and paths:
        figs = [p for p in paths if p.parent.name == FIGURES_DIR]
        drawn = f"{len(figs)} figure file(s) in {out / FIGURES_DIR}" if figs else ""
        typer.echo("wrote " + " and ".join(x for x in (drawn, *map(str, paths[len(figs) :])) if x))
    return paths


@app.command(cls=Command)
def run(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            metavar="NAME", help="experiment or preset name (see `attnflow list`) or a TOML config file"
        ),
    ] = DEFAULT_RUN,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="DIR", help="output folder (default runs/NAME); rerun with it to resume"
        ),
    ] = None,
    set_: SetOption = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no progress bars or messages (warnings stay)")
    ] = False,
    figures: Annotated[bool, typer.Option(help="draw the figures (PNG) and the report at the end")] = True,
    pdf: PdfOption = False,
    animation: AnimationOption = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="replace a run of another experiment or config in OUT")
    ] = False,
) -> None:
    """Run an experiment and write OUT/result.zarr, summary.json, summary.md, config.toml, figures/.

    Finished betas (grid points) are saved in OUT/parts as they complete: a run that is killed or
    fails part-way resumes from them when the same command is run again. OUT holding another run
    (another experiment or config; more betas are fine) is refused unless --overwrite.

    Without NAME: the concentration-demo preset (d = 2, every beta converged in N, the claims table).
    Examples: `attnflow run`, `attnflow run concentration` (the d = 3 worked example),
    `attnflow run terminal -s N=300`, `attnflow run concentration-2d`, `attnflow run my.toml -o runs/mine`.
    """
    from ..experiments import load_config, run_experiment
    from ..experiments.config import ConfigWarning

    debug = options_of(ctx).debug
    with exits([BAD_CONFIG]), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)  # the run reports them, once, with its result
        cfg = load_config(target, list(set_ or []))
    out = out or _default_out(target)
    with exits(run_failures(out), debug):
        reporter = RichReporter(quiet=quiet)
        try:
            with _sigterm_as_interrupt():
                ds = run_experiment(cfg, out, progress=reporter, overwrite=overwrite)
        finally:
            reporter.close()
    from ..io import read_checked_text

    summary = json.loads(read_checked_text(out / SUMMARY_JSON))
    if figures:
        _figures(ds, summary, out, animation, quiet, pdf, debug)
    if not quiet:
        _brief(summary, f"attnflow run: {getattr(cfg, 'experiment', target)}", out)


def _brief(summary: dict, title: str, out: Path) -> None:
    """The run's closing summary (under 30 lines): statuses, verdicts, where the rest is."""
    from ..experiments.brief import brief_lines
    from ..experiments.layout import REPORT_HTML

    report = out / REPORT_HTML
    lines = brief_lines(summary, title, str(report) if report.exists() else "", f"attnflow show {out}")
    typer.echo("\n" + "\n".join(lines))
    typer.echo(f"results in {out}/ ({RESULT_STORE} opens with xarray.open_zarr)")


# ----------------------------------------------------------------------------------------- plot


@app.command(cls=Command)
def plot(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="output folder of `attnflow run`")],
    pdf: PdfOption = False,
    animation: AnimationOption = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no progress message and no list of the files written")
    ] = False,
) -> None:
    """(Re)draw the figures (PNG; --pdf: also PDF), the animation (--animation) and the report of a
    finished run into DIR/figures."""
    from ..io import StoreError, read_checked_text, read_dataset

    store = directory / RESULT_STORE
    if not store.exists():
        raise _fail(
            f"{directory}: no {RESULT_STORE} (run `attnflow run ... --out {directory}` first)", EXIT_USAGE
        )
    try:
        ds = read_dataset(store)  # its files checked against their checksums first
    except StoreError as err:
        raise _damaged(err, directory) from None
    summary_path = directory / SUMMARY_JSON
    try:
        summary = json.loads(read_checked_text(summary_path)) if summary_path.exists() else {}
    except StoreError as err:  # altered since it was written
        raise _damaged(err, directory) from None
    except ValueError as err:
        raise _damaged(ValueError(f"{summary_path}: not JSON ({err})"), directory) from None
    paths = _figures(ds, summary, directory, animation, quiet, pdf, options_of(ctx).debug)
    if not paths:
        raise typer.Exit(EXIT_FAILED)


# ---------------------------------------------------------------------------------------- check


@app.command(cls=Command)
def check(
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...", help="Q K V as three .npy/.npz/.txt files, or one .npz with Q, K, V"
        ),
    ],
    beta: Annotated[
        float, typer.Option(metavar="NUMBER", help="inverse temperature (for the report; inf allowed)")
    ] = 1.0,
    x0: Annotated[
        Path | None,
        typer.Option("--x0", metavar="FILE", help="initial tokens (N, d) as .npy/.txt, for assumption 2"),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            metavar="uniform|vmf|points",
            help="how X0 was drawn (assumption 3 needs a density)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Report the theorem's assumptions for attention weights Q, K, V (docs/math.md, "Assumptions").

    Exit code 0 when every checkable assumption holds, 1 when one fails, 2 for unreadable input.
    """
    from .._checks import check_beta, check_points
    from ..attention import Attention
    from ..io import load_matrices, read_array

    with exits([BAD_INPUT]):
        mats = load_matrices(list(files))
        att = Attention(mats["Q"], mats["K"], mats["V"], beta=check_beta(beta, "--beta"))
    X0 = None
    if x0 is not None:
        with exits([Failure((ValueError, TypeError), EXIT_USAGE, lambda e: f"{x0}: {e}")]):
            X0 = check_points(read_array(x0, "X0"), "X0", d=att.d, normalize=True, allow_batch=False)
    from ..science.assumptions import check_assumptions

    kind_error = Failure((ValueError,), EXIT_USAGE, lambda e: f"--kind: {e}" if "kind" in str(e) else str(e))
    with exits([kind_error]):
        report = check_assumptions(att, X0=X0, kind=kind)
    if json_out:
        from ..io import to_json

        typer.echo(to_json(report.to_dict(), indent=2))
    else:
        typer.echo(str(report))
    raise typer.Exit(EXIT_OK if report.ok else EXIT_FAILED)


# ------------------------------------------------------------------ commands of other modules

# These modules are light (Typer signatures); each command imports what it needs when it runs.
app.command("list", cls=Command)(list_command)
app.command("show", cls=Command)(show_command)
app.command("heads", cls=Command)(heads)
app.command("sweep", cls=Command)(sweep_command)
app.command("verify", cls=Command)(verify_command)


def main() -> None:
    """Entry point of the `attnflow` script."""
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - outside a command
        typer.echo("attnflow: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
