"""Runs the local service, again and again, in processes that may be SIGKILLed at a fault point.

``python kill_anywhere_driver.py`` imports the service once, then reads one JSON request a line
on stdin, ``{"home": DIR, "fault": "POINT:N" | null}``, and for each forks a process that opens
the service on ``home``, runs it (submitting the workload as it goes) until no job is left, and
exits 0; with ``fault`` set the service SIGKILLs itself there (see
``qosched.backends.local.service.FAULT_ENV``). One JSON line answers each request:
``{"exit": code}`` or ``{"signal": number}``. Forking from one process that has imported the
service keeps the test within seconds (the import alone takes about two).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from command_jobs import CORES, counting_spec

from qosched.backends.local.service import LocalService

#: The workload: a job that runs alone on every core first, then three more arrive (it shrinks
#: to make room); three complete, and the long one is cancelled once it runs.
WORKLOAD = (
    ("first", 12),
    ("second", 4),
    ("third", 4),
)
VICTIM = ("victim", 2000)
RUN_TIMEOUT_S = 60.0


def run_once(home: Path, fault: str | None) -> int:
    """The service's own run loop in a thread, as ``qosched up`` runs it; this thread plays the
    user, submitting through the same methods the HTTP API calls."""
    service = LocalService.open(
        home, cpus=CORES, policy="qos", tick_s=0.1, grace_s=5.0, faults=fault or ""
    )
    stop = threading.Event()
    runner = threading.Thread(target=service.run, args=(stop,))
    runner.start()
    jobs = (*WORKLOAD, VICTIM)
    ids = {job["name"]: job["id"] for job in service.jobs()}
    cancelled = False
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while len(ids) < len(jobs) or not service.idle():
            if time.monotonic() > deadline or not runner.is_alive():
                return 1
            if not ids or (len(ids) < len(jobs) and service.job(ids["first"])["state"] != "queued"):
                for name, iterations in jobs[len(ids) : len(ids) + 1 if not ids else None]:
                    spec = counting_spec(name, iterations=iterations, sleep_s=0.03, max_cpus=2)
                    ids[name] = service.submit_spec(spec)["id"]
            victim = ids.get(VICTIM[0])
            if victim and not cancelled and service.job(victim)["state"] == "running":
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
                code = run_once(Path(request["home"]), request["fault"])
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
