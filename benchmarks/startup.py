"""Start-up of the command line: `attnflow --help`, `attnflow list` and `attnflow show DIR`.

Each command is run whole in a new process (`python -m attnflow.cli ...`, output discarded) and its
CPU time (user + system of the child) and wall time are taken; the commands are run in turns, so
that each sees the same load. `show` needs a finished run: a tiny one is made first (not timed).
Python's bytecode cache is on (as after `pip install`): the first, untimed round writes it.

    python benchmarks/startup.py                   # 7 rounds
    python benchmarks/startup.py --repeat 11 --src other/src   # another checkout's code

On a shared machine wall times depend on the others' load; CPU times say more.
"""

from __future__ import annotations

import argparse
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process running argv."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds (medians are reported)")
    parser.add_argument("--src", type=Path, default=None, help="a src folder to import attnflow from")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    cli = [sys.executable, "-m", "attnflow.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        run = Path(tmp) / "run"
        subprocess.run(
            [*cli, "run", "concentration-tiny", "--out", str(run), "-q", "--no-figures"], env=env, check=True
        )
        commands = {"--help": ["--help"], "list": ["list"], "show DIR": ["show", str(run)]}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for round_ in range(args.repeat + 1):
            for name, extra in commands.items():
                wall, cpu = timed([*cli, *extra], env)
                if round_:  # the first round writes the bytecode cache
                    times[name].append((wall, cpu))
    load = os.getloadavg()[0]
    print(
        f"{cpu_name()}, {os.cpu_count()} logical cores, Python {platform.python_version()}, load {load:.1f}"
    )
    print("| command | CPU (median) | wall (median) |\n|---|---:|---:|")
    for name, pairs in times.items():
        cpu = statistics.median(c for _, c in pairs)
        wall = statistics.median(w for w, _ in pairs)
        print(f"| `attnflow {name}` | {cpu:.2f} s | {wall:.2f} s |")


if __name__ == "__main__":
    main()
