"""What a training script calls to run well under qosched; every call is harmless outside it.

A command job (``spec.command`` in a TrainingJob) is started by qosched's runner with a few
environment variables (see ``docs/local.md``). This module reads them, so a script needs no
knowledge of the file protocol under it::

    import qosched.job

    start = load_my_checkpoint(qosched.job.checkpoint_dir())  # where to save and resume
    for step in range(start, qosched.job.total_iterations() or 1000):
        loss = train_one_step()
        qosched.job.report(step + 1, loss=loss)                # how far, for the predictor
        if qosched.job.stop_requested():                       # pre-empted, re-sized, cancelled
            save_my_checkpoint(step + 1)
            raise SystemExit(0)

``report`` appends one JSON line ``{"iteration": n, "loss": x}`` to the file named by
``QOSCHED_PROGRESS_FILE``; the runner relays it to the scheduler, whose predictor learns the job's
speed from it. In a multi-process job (``torchrun``) only global rank 0 reports; the other ranks'
calls do nothing. Outside qosched (the variable unset), ``report`` does nothing and returns
False, so the same script runs anywhere.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import signal
import threading
from pathlib import Path

from qosched.core.bounds import COUNT_LIMIT, is_whole
from qosched.trainingjob.protocol import (
    ENV_CPUS,
    ENV_ITERATIONS,
    ENV_JOB_DIR,
    ENV_PROGRESS_FILE,
)

#: Visible GPU indices a job was given (also in ``CUDA_VISIBLE_DEVICES``).
ENV_GPUS = "QOSCHED_GPUS"

_lock = threading.Lock()
_progress_fd: dict[str, int] = {}
_stop = threading.Event()
_handler_installed = False


def active() -> bool:
    """True when this process runs as a qosched job (its progress file is known)."""
    return bool(os.environ.get(ENV_PROGRESS_FILE))


def report(iteration: int, *, loss: float | None = None) -> bool:
    """Record that ``iteration`` iterations are done (counted from the start of the whole job,
    not of this process), with the latest loss if known. Returns True when the line was written,
    False outside qosched or on a rank other than 0.

    ``iteration`` must be a whole number in [0, 2**53); a loss that is not finite is written as
    null (JSON has no NaN). Each call writes one complete line with a single ``write`` to a file
    opened for appending, so a crash never leaves half a line the scheduler would misread.
    """
    if not is_whole(iteration) or not 0 <= iteration < COUNT_LIMIT:
        raise ValueError(f"iteration must be a whole number in [0, 2**53), got {iteration!r}")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, numbers.Real)):
        raise ValueError(f"loss must be a number or None, got {loss!r}")
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path or _rank() != 0:
        return False
    value = float(loss) if loss is not None and math.isfinite(loss) else None
    line = json.dumps({"iteration": iteration, "loss": value}, allow_nan=False) + "\n"
    with _lock:
        fd = _progress_fd.get(path)
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            _progress_fd[path] = fd
        os.write(fd, line.encode())
    return True


def stop_requested() -> bool:
    """True once qosched asked this job to stop (SIGTERM: pre-emption, a re-size that needs a
    restart, cancel, the service going down). Save a checkpoint and exit soon after: qosched
    sends SIGKILL when its grace period ends.

    The first call installs a SIGTERM handler (from the main thread only, as Python requires);
    before that, SIGTERM ends the process at once, as it does by default.
    """
    _install_stop_handler()
    return _stop.is_set()


def total_iterations() -> int | None:
    """The job's whole work in iterations (``spec.work.iterations``), None outside qosched."""
    text = os.environ.get(ENV_ITERATIONS)
    return int(text) if text and text.isdecimal() else None


def checkpoint_dir() -> Path | None:
    """The job's own folder, kept across pre-emptions and restarts: save checkpoints here and
    resume from them. None outside qosched."""
    text = os.environ.get(ENV_JOB_DIR)
    return Path(text) if text else None


def cpus() -> tuple[int, ...]:
    """The CPU cores this job holds now (the process is already pinned to them)."""
    return _indices(os.environ.get(ENV_CPUS))


def gpus() -> tuple[int, ...]:
    """The GPU indices this job was given (empty for a CPU job or outside qosched)."""
    return _indices(os.environ.get(ENV_GPUS))


def _indices(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    return tuple(int(part) for part in text.split(",") if part.strip().isdecimal())


def _rank() -> int:
    # torchrun sets RANK for every process of a multi-process job; a plain process has none.
    text = os.environ.get("RANK", "0")
    return int(text) if text.isdecimal() else 0


def _install_stop_handler() -> None:
    global _handler_installed
    if _handler_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handle(signum: int, frame: object) -> None:
        _stop.set()
        if callable(previous) and previous not in (signal.SIG_DFL, signal.SIG_IGN):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, handle)
    _handler_installed = True


__all__ = [
    "ENV_GPUS",
    "active",
    "checkpoint_dir",
    "cpus",
    "gpus",
    "report",
    "stop_requested",
    "total_iterations",
]
