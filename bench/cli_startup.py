"""How long ``qosched`` takes to start, against a bare Python interpreter, in the same run.

    python bench/cli_startup.py              # 7 repeats of each command, medians
    python bench/cli_startup.py --repeats 15

Each command is a fresh process (``python -m qosched.cli.main ...``, as the ``qosched`` script
runs it): ``--help``, ``status --help``, ``status`` with no service running (the error path: it
reads the service home and gives up), and ``status`` against a real service started for the
purpose (``up --detach``, no jobs), each against ``python -c pass`` measured alternately in the
same loop, so a busy machine slows both. Target: ``--help`` and ``status`` under 0.5 s
(absolute), that is a few times a bare interpreter. Timings on a shared machine are noisy:
compare the ratios, and repeat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "qosched --help": ["--help"],
    "qosched status --help": ["status", "--help"],
    "qosched status (no service)": ["status"],
}
TARGET_S = 0.5


def wall(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(name: str, argv: list[str], env: dict[str, str], repeats: int) -> None:
    bare = [sys.executable, "-c", "pass"]
    wall(argv, env)  # warm the file cache
    times, bares = [], []
    for _ in range(repeats):
        times.append(wall(argv, env))
        bares.append(wall(bare, env))
    median, baseline = statistics.median(times), statistics.median(bares)
    verdict = "yes" if median < TARGET_S else "NO"
    print(f"{name:<30} {median:>9.3f} {baseline:>8.3f} {median / baseline:>7.1f} {verdict:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (default 7)")
    args = parser.parse_args()
    qosched = [sys.executable, "-m", "qosched.cli.main"]
    print(f"{'command':<30} {'median s':>9} {'bare s':>8} {'x bare':>7} {'< 0.5 s':>8}")
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "QOSCHED_HOME": home}  # no service lives here
        for name, rest in COMMANDS.items():
            measure(name, [*qosched, *rest], env, args.repeats)
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "QOSCHED_HOME": home}
        subprocess.run([*qosched, "up", "--detach"], env=env, check=True, capture_output=True)
        try:
            measure("qosched status (service up)", [*qosched, "status"], env, args.repeats)
        finally:
            subprocess.run([*qosched, "down"], env=env, check=True, capture_output=True)
    print(f"(medians of {args.repeats}; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
