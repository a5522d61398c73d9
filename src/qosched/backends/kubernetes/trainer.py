"""``qosched k8s train``: a built-in workload as a training pod of a qosched job.

Runs inside the pod the scheduler placed: resumes from ``<checkpoint dir>/state.pt`` when one
exists (model, optimizer, iteration, and the compute clock ``active_s``), trains, checkpoints
every ``checkpoint_every`` iterations and on SIGTERM (pre-emption, a re-size by restart),
reports progress on its pod's annotation, and follows an in-place re-size: the number of
PyTorch threads tracks the container's CPU limit as the kubelet rewrites it (cgroup v2
``cpu.max``). After the last iteration it reports the end and waits for the scheduler to scale
the job to zero (a StatefulSet restarts pods that exit).
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from qosched.backends.kubernetes.progress import ProgressReporter

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
STATE_FILE = "state.pt"


def cpu_limit(path: Path = CPU_MAX) -> int | None:
    """Whole cores of the container's CPU limit (cgroup v2), None when unlimited or unknown."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def train(
    workload: str,
    iterations: int,
    checkpoint_dir: Path,
    reporter: ProgressReporter | None,
    *,
    seed: int = 0,
    checkpoint_every: int = 50,
    stop: threading.Event | None = None,
    limit: Callable[[], int | None] = cpu_limit,
    wait_at_end: bool = True,
) -> int:
    """Train to ``iterations`` (or until ``stop``); returns the iteration reached."""
    import torch

    from qosched.workloads import get_workload

    factory = get_workload(workload)
    state = factory.build(seed)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path = checkpoint_dir / STATE_FILE
    active_s = 0.0
    if path.exists():
        saved = torch.load(path, weights_only=False)
        state.load_state_dict(saved["training"])
        active_s = float(saved["active_s"])
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        torch.save({"training": state.state_dict(), "active_s": active_s}, tmp)
        tmp.replace(path)  # atomic: a kill mid-write leaves the last good checkpoint

    threads = 0
    while state.iteration < iterations and not stop.is_set():
        cores = limit()
        if cores is not None and cores != threads:
            torch.set_num_threads(cores)  # an in-place re-size took effect
            threads = cores
        started = time.monotonic()
        factory.step(state)  # advances state.iteration
        active_s += time.monotonic() - started
        if reporter is not None:
            reporter.report(state.iteration, active_s)
        if state.iteration % checkpoint_every == 0:
            save()
    save()
    if reporter is not None:
        reporter.report(state.iteration, active_s, force=True)
    while wait_at_end and state.iteration >= iterations and not stop.wait(60):
        pass
    return state.iteration
