"""Per-job CSVs of every policy under both fidelities on small reference traces, and where two
sets of them differ: a change to the simulator or the policy interface that should not change
outcomes is checked against them, byte for byte.

    python bench/sim_reference_csvs.py write DIR [--src SRC]     # SRC: another tree's src
    python bench/sim_reference_csvs.py compare BEFORE AFTER

- write: the bundled example (200 jobs, 4x8 GPUs), a generated 300-job trace (load 1.0, 10 %
  best effort, 16x8) and a generated 300-job trace in the ElasticFlow layout (load 1.2, with
  durations, 8x8), each under ``--policy all`` with ``--fidelity sound`` and ``artifact``, and
  the generated one with hidden speeds and noise; the whole ``qosched sim cluster --jobs-csv``
  command per run, with ``src`` on ``PYTHONPATH`` (this tree's by default).
- compare: every CSV of BEFORE against AFTER's: identical, or how many fields differ, by how
  much at most (relative), and any difference in a discrete field (declined, met, reallocations)
  or above 1e-9 relative.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"
EXAMPLES = Path("qosched") / "data" / "examples"
DISCRETE = ("declined", "met_deadline", "reallocations")


def _qosched(src: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, "-m", "qosched.cli.main", *args]
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)


def write(args: argparse.Namespace) -> None:
    src, out = args.src.resolve(), args.out
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    generated, elasticflow = traces / "gen300.csv", traces / "ef300.csv"
    _qosched(src, "trace", "generate", "--out", str(generated), "--jobs", "300", "--load", "1.0",
             "--cluster-gpus", "128", "--seed", "5", "--best-effort-fraction", "0.1")  # fmt: skip
    _qosched(src, "trace", "generate", "--out", str(elasticflow), "--format", "elasticflow",
             "--jobs", "300", "--load", "1.2", "--cluster-gpus", "64", "--seed", "7")  # fmt: skip
    example = ["--trace", str(src / EXAMPLES / "workload.csv"),
               "--cluster-spec", str(src / EXAMPLES / "cluster.csv")]  # fmt: skip
    runs = {}
    for fidelity in ("sound", "artifact"):
        runs[f"example-{fidelity}"] = [*example, "--fidelity", fidelity]
        runs[f"gen300-{fidelity}"] = ["--trace", str(generated), "--nodes", "16",
                                      "--gpus-per-node", "8", "--fidelity", fidelity]  # fmt: skip
        runs[f"ef300-{fidelity}"] = ["--trace", str(elasticflow), "--nodes", "8",
                                     "--gpus-per-node", "8", "--fidelity", fidelity]  # fmt: skip
    runs["gen300-hidden"] = ["--trace", str(generated), "--nodes", "16", "--gpus-per-node", "8",
                             "--speed-sigma", "0.3", "--scaling-sigma", "0.1", "--noise", "0.05",
                             "--seed", "3"]  # fmt: skip
    for name, options in runs.items():
        folder = out / name
        folder.mkdir(exist_ok=True)
        _qosched(src, "sim", "cluster", *options, "--policy", "all", "--jobs-csv", str(folder))
        print(f"{name}: {len(list(folder.glob('jobs_*.csv')))} CSVs", flush=True)


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as handle:
        return {row["job_id"]: row for row in csv.DictReader(handle)}


def compare(args: argparse.Namespace) -> None:
    before_files = sorted(args.before.glob("*/jobs_*.csv"))
    same = 0
    for before in before_files:
        after = args.after / before.relative_to(args.before)
        if after.read_bytes() == before.read_bytes():
            same += 1
            continue
        old, new = _rows(before), _rows(after)
        if old.keys() != new.keys():
            print(f"{before.relative_to(args.before)}: different jobs")
            continue
        fields, largest, notable = 0, 0.0, []
        for job_id, row in old.items():
            for name, value in row.items():
                other = new[job_id][name]
                if value == other:
                    continue
                fields += 1
                try:
                    x, y = float(value), float(other)
                except ValueError:
                    notable.append((job_id, name, value, other))
                    continue
                relative = abs(x - y) / max(abs(x), 1e-300)
                largest = max(largest, relative)
                if name in DISCRETE or relative > 1e-9:
                    notable.append((job_id, name, value, other))
        print(
            f"{before.relative_to(args.before)}: {fields} fields differ, at most {largest:.1e} "
            f"relative; discrete or larger: {notable[:5] or 'none'}"
        )
    print(f"{same} of {len(before_files)} CSVs identical")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("write")
    p.add_argument("out", type=Path)
    p.add_argument("--src", type=Path, default=HERE, help="the src directory of the tree to run")
    p.set_defaults(run=write)
    p = commands.add_parser("compare")
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.set_defaults(run=compare)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
