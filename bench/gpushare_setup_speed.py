"""How long fggr's calibration takes with its what-if runs in one process and shared among cores.

    python bench/gpushare_setup_speed.py [--repeat 2] [EXAMPLE ...]

For each example mix (by default the six of examples/: ``gpu_apps*.yaml`` and
``gpu_mix_*.yaml``), ``FgGR().setup`` is run with ``WhatIf(workers=1)`` (every what-if run in
this process) and with the default (shared among the usable cores), alternately, ``--repeat``
times each. Printed per mix: the setting adopted (the same both ways, or the bench stops), wall
seconds and CPU seconds (the workers' included) of every setup, and the ratio of the median
wall times. The ratio is measured in one process on the same machine, so it holds where the
absolute times do not; it depends on the cores this process may use (printed first).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

from qosched.gpushare.apps import load_apps_spec, workloads
from qosched.gpushare.estimate import estimate_model
from qosched.gpushare.policies.fggr import FgGR
from qosched.gpushare.simulator import app_infos
from qosched.gpushare.whatif import WhatIf
from qosched.hardware import gpu
from qosched.hardware.measure import usable_core_count

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MIXES = ("gpu_apps_small", "gpu_apps_kernels", "gpu_apps", "gpu_mix_bert", "gpu_mix_three",
         "gpu_mix_four")  # fmt: skip


def cpu_s() -> float:
    """CPU seconds of this process and of every child it has waited for."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))  # fmt: skip
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def infos_of(path: Path) -> list:
    spec = load_apps_spec(path)
    device = gpu(spec.gpu)

    def estimate(model, gpu_, *, batch, dtype):
        return estimate_model(model, gpu_, batch=batch, dtype=dtype)

    return app_infos(workloads(spec, device, estimate=estimate), device, spec.duration_s)


def cells(runs: list[tuple[str, float, float]], column: int) -> str:
    return " / ".join(f"{run[column]:.1f}" for run in runs)


def timed_setup(infos: list, workers: int) -> tuple[str, float, float]:
    policy = FgGR(what_if=WhatIf(workers=workers))
    cpu, wall = cpu_s(), time.perf_counter()
    policy.setup(infos)
    return policy.calibrated or "", time.perf_counter() - wall, cpu_s() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mixes", nargs="*", default=MIXES, help="example names (default: all six)")
    parser.add_argument("--repeat", type=int, default=2, help="setups per way (default 2)")
    args = parser.parse_args(argv)
    if not 1 <= args.repeat <= 20:
        parser.error("--repeat must be in 1..20")
    paths = [EXAMPLES / f"{name}.yaml" for name in args.mixes]
    for path in paths:
        if not path.is_file():
            parser.error(f"no example {path.stem!r} in {EXAMPLES}")
    print(f"{usable_core_count()} usable cores\n")
    print("| example | adopted | one process, wall s | shared, wall s | one process, CPU s "
          "| shared, CPU s | wall, shared / one |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        infos = infos_of(path)
        runs: dict[int, list[tuple[str, float, float]]] = {1: [], 0: []}
        for _ in range(args.repeat):
            for workers in runs:
                runs[workers].append(timed_setup(infos, workers))
        adopted = {name for way in runs.values() for name, _, _ in way}
        if len(adopted) != 1:
            raise SystemExit(f"{path.stem}: the choice depends on the workers: {adopted}")
        ratio = statistics.median(r[1] for r in runs[0]) / statistics.median(r[1] for r in runs[1])
        one, shared = runs[1], runs[0]
        print(f"| {path.stem} | {adopted.pop() or '-'} | {cells(one, 1)} | {cells(shared, 1)} "
              f"| {cells(one, 2)} | {cells(shared, 2)} | {ratio:.2f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
