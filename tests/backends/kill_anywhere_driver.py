"""Runs the local service, again and again, in processes that may be SIGKILLed at a fault point.

``python kill_anywhere_driver.py`` imports the service once, then reads one JSON request a line
on stdin, ``{"home": DIR, "fault": "POINT:N" | null, "gpus": bool, "long_first": bool}``, and
for each forks a process that opens the service on ``home``, runs it (submitting the workload as
it goes, or the GPU workload on two declared GPUs with ``gpus``; its first job long with
``long_first``) until no job is left, and exits 0; with ``fault`` set the service SIGKILLs
itself there (see ``qosched.backends.local.service.FAULT_ENV``). One JSON line answers each
request: ``{"exit": code}`` or ``{"signal": number}``. Forking from one process that has
imported the service keeps the test within seconds (the import alone takes about two).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from command_jobs import CORES, counting_spec

from qosched.backends.local.service import LocalService
from qosched.trainingjob.jobspec import Resources, TrainingJobSpec

#: The workload: a job that runs alone on every core first, then three more arrive (it shrinks
#: to make room); three complete, and the long one is cancelled once it runs.
WORKLOAD = (
    ("first", 12),
    ("second", 4),
    ("third", 4),
)
VICTIM = ("victim", 2000)
#: On two declared GPUs: (name, iterations, (minGpus, maxGpus)); the first may take both, the
#: last needs both, so GPUs change hands (and a GPU job is re-sized only by a restart).
GPU_WORKLOAD = (
    ("g-first", 12, (1, 2)),
    ("g-second", 4, (1, 1)),
    ("g-third", 4, (2, 2)),
)
GPU_VICTIM = ("g-victim", 2000, (1, 1))
#: The first job's iterations when the case needs its runner to outlive a killed service and be
#: adopted by the next one (about 3 s: a 12-iteration runner may be done before the restart).
LONG_FIRST = 100
GPUS = (0, 1)
RUN_TIMEOUT_S = 60.0


def _spec(name: str, iterations: int, gpus: tuple[int, int] | None) -> TrainingJobSpec:
    spec = counting_spec(name, iterations=iterations, sleep_s=0.03, max_cpus=2)
    if gpus is None:
        return spec
    return replace(spec, resources=Resources(min_gpus=gpus[0], max_gpus=gpus[1]))


def workloads(long_first: bool) -> tuple[tuple, tuple]:
    """The CPU and the GPU workload, the first job made long with ``long_first``."""
    if not long_first:
        return WORKLOAD, GPU_WORKLOAD
    (name, _), *cpu_rest = WORKLOAD
    (gpu_name, _, gpus), *gpu_rest = GPU_WORKLOAD
    return ((name, LONG_FIRST), *cpu_rest), ((gpu_name, LONG_FIRST, gpus), *gpu_rest)


def run_once(
    home: Path, fault: str | None, with_gpus: bool = False, long_first: bool = False
) -> int:
    """The service's own run loop in a thread, as ``qosched up`` runs it; this thread plays the
    user, submitting through the same methods the HTTP API calls."""
    service = LocalService.open(
        home,
        cpus=CORES,
        policy="qos",
        tick_s=0.1,
        grace_s=5.0,
        faults=fault or "",
        gpus=GPUS if with_gpus else (),
    )
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(stop,))
    runner.start()
    cpu_workload, gpu_workload = workloads(long_first)
    if with_gpus:
        jobs = tuple((name, n, gpus) for name, n, gpus in (*gpu_workload, GPU_VICTIM))
        victim_name, first = GPU_VICTIM[0], gpu_workload[0][0]
    else:
        jobs = tuple((name, n, None) for name, n in (*cpu_workload, VICTIM))
        victim_name, first = VICTIM[0], cpu_workload[0][0]
    ids = {job.name: job.id for job in service.jobs()}
    cancelled = False
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while len(ids) < len(jobs) or not service.idle():
            if time.monotonic() > deadline or not runner.is_alive():
                return 1
            if not ids or (len(ids) < len(jobs) and service.job(ids[first]).state != "queued"):
                for name, iterations, gpus in jobs[len(ids) : len(ids) + 1 if not ids else None]:
                    ids[name] = service.submit_spec(_spec(name, iterations, gpus)).id
            victim = ids.get(victim_name)
            if victim and not cancelled and service.job(victim).state == "running":
                service.cancel(victim)
                cancelled = True
            time.sleep(0.02)
    finally:
        stop.set()
        runner.join()
    service.close()
    return 0


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_once(
                    Path(request["home"]),
                    request["fault"],
                    bool(request.get("gpus")),
                    bool(request.get("long_first")),
                )
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            answer = {"signal": os.WTERMSIG(status)}
        else:
            answer = {"exit": os.WEXITSTATUS(status)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
