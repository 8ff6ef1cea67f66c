"""What refusing at config time costs: `load_config` per preset and per weights (the weights are made
and their needs checked when a config is made), and the wall time of `attnflow run` refusing a value
of the fault probe (a fresh process each: Python, the CLI, pydantic, the check, the message).

Prints Markdown tables; the machine and its load first.

    python benchmarks/config.py                 # 3 rounds
    python benchmarks/config.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

from _machine import cpu_name

CONFIGS = [
    ("concentration", []),
    ("concentration-tiny", []),
    ("zero-temperature-tiny", []),
    ("concentration-tiny", ["weights=random", "d=64"]),
    ("concentration-tiny", ["weights=random", "d=256"]),
    ("concentration-tiny", ["weights=random", "d=256", "symmetric=false"]),
    ("concentration-tiny", ["weights=random", "d=512", "symmetric=false"]),
]
#: refusals of the fault probe (issue 25), each with the arguments after `attnflow run`
REFUSALS = [
    ("t_max = inf", ["concentration-tiny", "-s", "t_max=inf"]),
    ("seed = 1e23", ["concentration-tiny", "-s", "seed=99999999999999999999999"]),
    ("complex top eigenvalue", ["concentration-tiny", "-s", "weights=random", "-s", "symmetric=false",
                                "-s", "weights_seed=1"]),
    ("device = cuda, no GPU", ["concentration-tiny", "-s", "device=cuda"]),
]  # fmt: skip


def load_times(rounds: int) -> list[tuple[str, float, float]]:
    """(config, first load in ms (the weights made), a second load in ms) of each of CONFIGS."""
    from attnflow.experiments import load_config
    from attnflow.experiments.model import drawn_attention

    rows = []
    for name, overrides in CONFIGS:
        first = []
        for _ in range(rounds):
            drawn_attention.cache_clear()
            t0 = time.perf_counter()
            load_config(name, overrides)
            first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        load_config(name, overrides)
        again = time.perf_counter() - t0
        rows.append((" ".join([name, *overrides]), 1e3 * statistics.median(first), 1e3 * again))
    return rows


def refusal_times(rounds: int, out: Path) -> list[tuple[str, float, int]]:
    """(case, median wall time in s of `attnflow run ... -o OUT`, exit code) of each of REFUSALS."""
    rows = []
    for label, args in REFUSALS:
        times, code = [], 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "attnflow.cli", "run", *args, "-o", str(out), "-q"],
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - t0)
            code = proc.returncode
        rows.append((label, statistics.median(times), code))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{cpu_name()}, {os.cpu_count()} logical cores, load average {os.getloadavg()[0]:.2f}\n")
    print("| config | first load_config (ms) | again (ms) |\n|---|---|---|")
    for name, first, again in load_times(args.rounds):
        print(f"| {name} | {first:.1f} | {again:.2f} |")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print("\n| refused by `attnflow run` | wall (s) | exit code |\n|---|---|---|")
        for label, wall, code in refusal_times(args.rounds, Path(tmp) / "out"):
            print(f"| {label} | {wall:.2f} | {code} |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
