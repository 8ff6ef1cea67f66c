"""Figures and report against the computation, for the tiny presets; and `attnflow plot DIR`.

For each preset, one fresh Python process runs the experiment into a temporary folder
(`run_experiment`) and then draws its figures and report (`plot_run` + `write_report`), timing both
in wall and CPU seconds (the CPU time of the process, all threads); the figure time includes the
import of matplotlib, as in `attnflow run`. Then the whole command `attnflow plot DIR` is timed (a
new process: start-up, reading result.zarr, figures, report).

    python benchmarks/figures.py                       # the default figures (PNG), every tiny preset
    python benchmarks/figures.py --pdf --animation     # also PDF and the token animation
    python benchmarks/figures.py --presets concentration-tiny --repeat 3

On a shared machine wall times depend on the others' load; CPU times say more.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import cpu_name

PRESETS = (
    "concentration-tiny",
    "terminal-tiny",
    "resolution-tiny",
    "zero-temperature-tiny",
    "layers-tiny",
)

CHILD = r"""
import inspect, json, sys, time
from pathlib import Path
preset, out, pdf, animation = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
from attnflow.experiments import load_config, plot_run, run_experiment, write_report
def clock():
    return time.perf_counter(), time.process_time()
cfg = load_config(preset)
w0, c0 = clock()
ds = run_experiment(cfg, out)
w1, c1 = clock()
summary = json.loads((out / "summary.json").read_text())
kw = {"animation": animation}
if "pdf" in inspect.signature(plot_run).parameters:
    kw["pdf"] = pdf
paths = plot_run(ds, out / "figures", **kw)
paths.append(write_report(ds, summary, paths, out))
w2, c2 = clock()
print(json.dumps({"run_wall": w1 - w0, "run_cpu": c1 - c0, "fig_wall": w2 - w1, "fig_cpu": c2 - c1,
                  "files": sorted(p.name for p in paths)}))
"""


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(preset: str, tmp: Path, pdf: bool, animation: bool) -> dict:
    """One preset: compute and figures in one process, then `attnflow plot` as a command."""
    out = tmp / preset
    args = [sys.executable, "-c", CHILD, preset, str(out), str(int(pdf)), str(int(animation))]
    res = subprocess.run(args, capture_output=True, text=True, check=True)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    plot = [sys.executable, "-m", "attnflow.cli", "plot", str(out), "--quiet"]
    help_ = subprocess.run([*plot, "--help"], capture_output=True, text=True, check=True).stdout
    plot += (["--pdf"] if pdf else []) if "--pdf" in help_ else []
    plot += ["--animation" if animation else "--no-animation"]
    c0, w0 = child_cpu(), time.perf_counter()
    subprocess.run(plot, capture_output=True, text=True, check=True)
    row |= {"plot_wall": time.perf_counter() - w0, "plot_cpu": child_cpu() - c0}
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--pdf", action="store_true", help="also write PDF (where the code can)")
    parser.add_argument("--animation", action="store_true", help="also write the token animation")
    parser.add_argument("--repeat", type=int, default=1, help="runs per preset (medians are printed)")
    args = parser.parse_args(argv)
    import matplotlib
    import torch

    print(f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores; load {os.getloadavg()[0]:.1f} at start")
    print(
        f"- Python {platform.python_version()}, matplotlib {matplotlib.__version__}, "
        f"torch {torch.__version__}; pdf={args.pdf}, animation={args.animation}\n"
    )
    cols = ("run_wall", "run_cpu", "fig_wall", "fig_cpu", "plot_wall", "plot_cpu")
    print(
        "| preset | compute wall | compute CPU | figures+report wall | figures+report CPU "
        "| `attnflow plot` wall | `attnflow plot` CPU | files |"
    )
    print("|" + "---|" * 8)
    for preset in args.presets:
        rows = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(measure(preset, Path(tmp), args.pdf, args.animation))
        med = {c: statistics.median(r[c] for r in rows) for c in cols}
        files = len(rows[0]["files"])
        print(f"| {preset} | " + " | ".join(f"{med[c]:.2f} s" for c in cols) + f" | {files} |", flush=True)


if __name__ == "__main__":
    main()
