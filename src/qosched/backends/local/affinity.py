"""Pin a whole running process, every thread and (optionally) every descendant, to CPU cores.

``os.sched_setaffinity(pid, cpus)`` alone is not enough for a re-size: on Linux it changes only
the one thread whose id equals ``pid``. Threads that already exist, such as PyTorch's OpenMP pool,
keep their old mask, and so do child processes a launcher (``torchrun``, a shell) has started.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from pathlib import Path

_PROC = Path("/proc")


def thread_ids(pid: int) -> list[int]:
    """Ids of the threads of ``pid`` right now ([] when it has exited)."""
    try:
        return sorted(int(entry.name) for entry in (_PROC / str(pid) / "task").iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return []


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid``, from ``/proc/PID/task/TID/children`` or, on kernels built
    without that file, by scanning every process's parent id."""
    children: list[int] = []
    try:
        for tid in thread_ids(pid):
            text = (_PROC / str(pid) / "task" / str(tid) / "children").read_text()
            children.extend(int(child) for child in text.split())
        return children
    except FileNotFoundError:
        pass
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            # Field 4 (ppid) follows the command name, which is in parentheses and may hold spaces.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
    return children


def set_process_affinity(pid: int, cpus: Collection[int], *, descendants: bool = False) -> None:
    """Restrict every thread of ``pid`` (and of its descendants) to ``cpus``.

    The thread named ``pid`` goes first: threads it creates while the others are being changed
    inherit its new mask, and a mask the kernel refuses (no core of it inside this container's
    cpuset: ``OSError`` EINVAL) fails there, before anything has changed. A thread or process
    that exits meanwhile is skipped.
    """
    mask = set(cpus)
    os.sched_setaffinity(0 if pid == os.getpid() else pid, mask)
    for tid in thread_ids(pid):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, mask)
    if descendants:
        for child in child_pids(pid):
            with contextlib.suppress(ProcessLookupError):
                set_process_affinity(child, mask, descendants=True)


def runqueue_wait_s(pid: int) -> float | None:
    """Seconds the threads of ``pid`` alive now have been ready to run but waited for a core
    (``/proc/PID/task/TID/schedstat``, second field); None where the kernel does not say."""
    total = 0
    for tid in thread_ids(pid):
        try:
            fields = (_PROC / str(pid) / "task" / str(tid) / "schedstat").read_text().split()
            total += int(fields[1])
        except FileNotFoundError:
            continue  # the thread ended since it was listed
        except (OSError, IndexError, ValueError):
            return None
    return total / 1e9
