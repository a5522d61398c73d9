"""A job's runner process as the service holds it: found by its job folder, held by a pidfd.

A pid alone names whatever process has that number now; after the runner exits the number can
be given to an unrelated process, which a later ``os.kill`` would hit and a liveness check would
call "running". A pidfd (``os.pidfd_open``, Linux >= 5.3) names one process for good: once that
process exits, polling the pidfd says so and ``pidfd_send_signal`` fails instead of reaching a
stranger. Where the kernel (or a sandbox) refuses pidfds, the process's identity (pid and start
time) is re-checked on every use instead.

A runner is adopted only after its identity is checked (its command line names the runner
module, or the name an earlier version gave it, and this job's folder, and its start time matches
when one was recorded), with the pidfd opened *before* that check, so the check is about the
process the pidfd holds.

Runners live in their own session and process group (``start_new_session``) and, where the
service could make one, in their job's cgroup (``cgroups.JobGroup``), which every process the
job starts is born in and none can leave: ``kill_group`` kills every member of it, and ``gone``
is true only when none is left. Without a cgroup, the job's processes are reached three ways:
through the runner's process group; through the runner's descendants, which ``kill_group``
stops (SIGSTOP, until no new one appears) and then kills while the runner still lives, the
runner being their child subreaper, so a process that left the group (``setsid``, a double
fork) is still among them; and, once the runner is gone, by the job folder their environment
names (``QOSCHED_JOB_DIR``, inherited from the command). So without a cgroup a process that
leaves the session and clears its environment escapes only when the runner dies before the
service kills the job (a crash, the kernel's OOM killer, a SIGKILL from elsewhere): its orphans
then go to PID 1.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from qosched.backends.local.cgroups import ENV_RUNNER_CGROUP, JobGroup
from qosched.trainingjob.protocol import ENV_JOB_DIR

#: The module a runner executes: ``python -m RUNNER_MODULE JOB_DIR``.
RUNNER_MODULE = "qosched.backends.local.runner"
#: The modules a runner is recognised by on its command line: ``RUNNER_MODULE``, and the name
#: the same module had in earlier versions (``...local.worker``), so that a service restarted
#: after an upgrade still adopts the runners the previous version started.
RUNNER_MODULES = (RUNNER_MODULE, "qosched.backends.local.worker")

_RUNNER_MODULES = tuple(module.encode() for module in RUNNER_MODULES)
_PROC = Path("/proc")
_PF_KTHREAD = 0x00200000
_EXEC_RETRIES = 20


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` fields from field 3 (state) on; None when the process is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # Field 2, the command name, is in parentheses and may hold spaces and parentheses.
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22): with the
    pid, it names one process for the life of the machine."""
    fields = _stat_fields(pid)
    return int(fields[22 - 3]) if fields is not None else None


def runner_folder(pid: int, *, wait_for_exec: bool = False) -> str | None:
    """The job folder ``pid`` is a runner for, or None when it is no runner (or gone).
    ``wait_for_exec``: a process in mid-exec shows an empty command line for a moment; wait
    for it (a scan need not: the runners it looks for were started long before)."""
    for _ in range(_EXEC_RETRIES if wait_for_exec else 1):
        try:
            raw = (_PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        if raw or not _execing(pid):
            break
        time.sleep(0.005)
    argv = raw.split(b"\0")
    if argv and argv[-1] == b"":
        argv.pop()
    if len(argv) != 4 or argv[1] != b"-m" or argv[2] not in _RUNNER_MODULES:
        return None
    return os.fsdecode(argv[3])


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; None where pidfds are not available. ``ProcessLookupError`` when
    ``pid`` does not exist."""
    try:
        return os.pidfd_open(pid)
    except AttributeError:  # not built for Linux
        return None
    except ProcessLookupError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            return None
        raise


def _execing(pid: int) -> bool:
    """An empty command line may mean a process in mid-exec; or a zombie or a kernel thread
    (flag PF_KTHREAD in field 9), which stay empty."""
    fields = _stat_fields(pid)
    return (
        fields is not None
        and fields[0] not in ("Z", "X")
        and not (int(fields[9 - 3]) & _PF_KTHREAD)
    )


def find_runners() -> dict[str, list[int]]:
    """Every live runner on this machine by job folder (zombies excluded)."""
    found: dict[str, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        folder = runner_folder(pid)
        if folder is None:
            continue
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            continue
        found.setdefault(folder, []).append(pid)
    return found


def group_members(pgid: int) -> list[int]:
    """Live processes (not zombies) in process group ``pgid``."""
    members = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        # Field 5 is the process group; field 3 the state.
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[5 - 3]) == pgid:
            members.append(int(entry.name))
    return members


def _environ_names(pid: int, entry: bytes) -> bool:
    """Whether ``pid``'s environment holds ``entry`` (``NAME=value``); False for a process gone,
    a zombie (its environment reads empty) or another user's."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return entry in environ.split(b"\0")


def stragglers(job_dir: Path) -> list[int]:
    """Live processes whose environment says they belong to job ``job_dir``: what a command
    left outside its runner's process group, found once the runner is gone."""
    entry = f"{ENV_JOB_DIR}={job_dir}".encode()
    me = os.getpid()
    return [
        int(e.name)
        for e in _PROC.iterdir()
        if e.name.isdigit() and int(e.name) != me and _environ_names(int(e.name), entry)
    ]


def _descendants(pid: int) -> Iterator[tuple[int, int]]:
    """``(descendant, its parent)`` for every live descendant of ``pid``, found through each
    thread's ``children`` (exact only while the processes are stopped: see ``kill_descendants``)."""
    pending, seen = [pid], {pid}
    while pending:
        parent = pending.pop()
        try:
            tasks = list((_PROC / str(parent) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in seen:
                    seen.add(child)
                    pending.append(child)
                    yield child, parent


def kill_descendants(pid: int, wait_s: float = 5.0) -> int:
    """SIGKILL every live descendant of ``pid`` (not ``pid`` itself); how many there were. First
    each is stopped (SIGSTOP), walking the tree again until no new one appears, so none can
    fork a process the walk misses; ``pid``, a child subreaper, is given the orphans of any
    that exit meanwhile, so none leaves the tree. Each is held by a pidfd opened before its
    parent is checked, so a pid reused meanwhile is never hit. ``wait_s`` bounds the walking."""
    held: dict[int, int] = {}  # pid -> pidfd
    seen: set[int] = set()
    refused: set[int] = set()
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            found = False
            for child, parent in list(_descendants(pid)):
                if child in seen:
                    continue
                seen.add(child)
                found = True
                try:
                    pidfd = os.pidfd_open(child)
                except OSError:  # gone; or no pidfds here, where a pid alone is no safe aim
                    continue
                fields = _stat_fields(child)
                if fields is not None and fields[0] in ("Z", "X"):  # exited: nothing to kill
                    os.close(pidfd)
                    continue
                if fields is None or int(fields[4 - 3]) != parent:
                    # Gone, a reused pid, or an orphan given to ``pid`` meanwhile: the next
                    # walk finds it again if it is still a descendant.
                    seen.discard(child)
                    os.close(pidfd)
                    continue
                held[child] = pidfd
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
                except PermissionError:  # another user's (setuid): not ours to stop or kill
                    refused.add(child)
                except ProcessLookupError:
                    pass
            if not found and all(_stopped(child) for child in held.keys() - refused):
                break
        for pidfd in held.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return len(held)
    finally:
        for pidfd in held.values():
            os.close(pidfd)


def _stopped(pid: int) -> bool:
    """Stopped, or no longer running at all."""
    fields = _stat_fields(pid)
    return fields is None or fields[0] in ("T", "t", "Z", "X")


def _signal_straggler(pid: int, job_dir: Path, signum: int) -> None:
    """Signal ``pid`` if it is still a process of job ``job_dir``, held by a pidfd between the
    check and the signal so that a reused pid is never hit."""
    entry = f"{ENV_JOB_DIR}={job_dir}".encode()
    try:
        pidfd = _open_pidfd(pid)
    except OSError:
        return
    try:
        if not _environ_names(pid, entry):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(pid, signum)
    finally:
        if pidfd is not None:
            os.close(pidfd)


class ExitWaiter:
    """Waits until one of ``runners`` exits, on copies of their pidfds taken now: the runners
    may be closed meanwhile (by another thread's round). Only runners still running are
    watched: one that has exited would wake every wait at once."""

    SLICE_S = 0.1  # how often a wait looks at its ``stop`` event

    def __init__(self, runners: Sequence[RunnerProcess]) -> None:
        self._fds = [
            os.dup(runner._pidfd)
            for runner in runners
            if runner._pidfd is not None and runner.running()
        ]

    def wait(self, timeout_s: float, stop: threading.Event | None = None) -> bool:
        """Up to ``timeout_s`` (less once ``stop`` is set); True when a runner exited. Where
        there are no pidfds, this only sleeps."""
        stop = stop or threading.Event()
        deadline = time.monotonic() + timeout_s
        try:
            poller = select.poll()
            for fd in self._fds:
                poller.register(fd, select.POLLIN)
            while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
                slice_s = min(left, self.SLICE_S)
                if not self._fds:
                    stop.wait(slice_s)
                elif poller.poll(slice_s * 1000):
                    return True
            return False
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []


class RunnerProcess:
    """One runner, held by a pidfd; ``popen`` is set when this service started it (its exit
    code is then known; an adopted runner's is read from its last progress event)."""

    def __init__(
        self,
        pid: int,
        ticks: int,
        pidfd: int | None,
        popen: subprocess.Popen | None = None,
        job_dir: Path | None = None,
        group: JobGroup | None = None,
    ) -> None:
        self.pid = pid
        self.group = group  # the job's cgroup, where the service made one
        # Its command's processes name it, resolved as the runner resolves it (``stragglers``).
        self.job_dir = None if job_dir is None else job_dir.resolve()
        self.start_ticks = ticks
        self._pidfd = pidfd  # None: no pidfds here; identity is re-checked on every use
        self._closed = False
        self.popen = popen

    @classmethod
    def start(
        cls,
        python: str,
        job_dir: Path,
        *,
        log: IO[bytes],
        env: Mapping[str, str],
        group: JobGroup | None = None,
    ) -> RunnerProcess:
        """Start ``python -m RUNNER_MODULE job_dir`` in a session of its own (it outlives the
        service, which re-adopts it after a restart) and, given one, in ``group``: the runner
        joins it before it starts the job."""
        if group is not None:
            env = {**env, ENV_RUNNER_CGROUP: os.pathsep.join(str(p) for p in group.paths)}
        popen = launch_runner(job_dir, python=python, stdout=log, env=env, own_session=True)
        # Our child is not reaped until we wait for it, so its pid cannot be reused yet.
        pidfd = _open_pidfd(popen.pid)
        ticks = start_ticks(popen.pid)
        return cls(popen.pid, ticks if ticks is not None else -1, pidfd, popen, job_dir, group)

    @classmethod
    def adopt(
        cls,
        pid: int,
        job_dir: Path,
        *,
        ticks: int | None = None,
        popen: subprocess.Popen | None = None,
        group: JobGroup | None = None,
    ) -> RunnerProcess | None:
        """The runner ``pid`` of ``job_dir`` if that is what ``pid`` is now (and, given
        ``ticks``, started then); None otherwise. ``group``: its job's cgroup."""
        try:
            pidfd = _open_pidfd(pid)
        except OSError:  # gone, or not ours to see
            return None
        now_ticks = start_ticks(pid)
        runner = cls(pid, now_ticks if now_ticks is not None else -1, pidfd, popen, job_dir, group)
        same = (
            now_ticks is not None
            and (ticks is None or ticks == now_ticks)
            and runner_folder(pid, wait_for_exec=True) == str(job_dir)
            and runner.running()  # checked last: the pidfd is about the process just checked
        )
        if not same:
            runner.close()
            return None
        runner.start_ticks = now_ticks
        return runner

    def running(self) -> bool:
        """The runner itself has not exited (its children may have: see ``gone``)."""
        if self._closed or (self.popen is not None and self.popen.poll() is not None):
            return False
        if self._pidfd is None:
            return self._same_process()
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return not poller.poll(0)  # readable once the process has exited

    def _same_process(self) -> bool:
        """``pid`` is still the process that started at ``start_ticks`` and has not exited."""
        fields = _stat_fields(self.pid)
        return (
            fields is not None
            and fields[0] not in ("Z", "X")
            and int(fields[22 - 3]) == self.start_ticks
        )

    def exit_code(self) -> int | None:
        """The exit code when this service started the runner and it exited; else None."""
        return None if self.popen is None else self.popen.poll()

    def send(self, signum: int) -> bool:
        """Send ``signum`` to the runner; False when it has exited (nothing else is hit)."""
        if self._closed:
            return False
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            elif self._same_process():  # without a pidfd, checked just before
                os.kill(self.pid, signum)
            else:
                return False
        except ProcessLookupError:
            return False
        return True

    def kill_group(self, signum: int = signal.SIGKILL) -> None:
        """Send ``signum`` to every process of the runner's group, and, once the runner has
        exited, to its job's stragglers; SIGKILL also goes to every member of the job's
        cgroup and, first, to the runner's descendants (see the module docstring). While the
        runner lives its group id is its pid; after it exits, a group that still has members
        keeps its id (the kernel does not reuse an id in use as a group id), so the members
        found are its own."""
        if signum == signal.SIGKILL:
            if self.group is not None:
                self.group.kill()
            if self.running():  # its descendants first: killed, it could no longer hold them
                kill_descendants(self.pid)
        if self.running():
            fields = _stat_fields(self.pid)
            if fields is None or int(fields[5 - 3]) != self.pid:
                self.send(signum)  # not a group leader (not started by a service): itself only
                return
        else:
            # A runner that exits stops what its command left; one that was killed could not.
            for pid in self._stragglers():
                _signal_straggler(pid, self.job_dir, signum)  # type: ignore[arg-type]
            if not group_members(self.pid):
                return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def gone(self) -> bool:
        """No process of the runner's group, nor of its job outside it, is left: its cores
        may be handed on."""
        return (
            not self.running()
            and not group_members(self.pid)
            and not (self.group is not None and self.group.members())
            and not self._stragglers()
        )

    def _stragglers(self) -> list[int]:
        return [] if self.job_dir is None else stragglers(self.job_dir)

    def close(self) -> None:
        self._closed = True
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        if self.popen is not None:
            self.popen.poll()  # reap it if it has exited


def tree_files(pid: int, name: str, proc: Path = Path("/proc")) -> Iterator[str]:
    """The text of ``/proc/PID/<name>`` for ``pid`` and every descendant still running (found
    through each thread's ``children``); a process gone meanwhile is skipped with its subtree.
    Nothing for a ``pid`` that is gone."""
    pending, seen = [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        folder = proc / str(current)
        try:
            text = (folder / name).read_text()
            tasks = list((folder / "task").iterdir())
        except OSError:
            continue
        yield text
        for task in tasks:
            with contextlib.suppress(OSError, ValueError):
                pending.extend(int(child) for child in (task / "children").read_text().split())


def launch_runner(
    job_dir: Path,
    *,
    python: str = sys.executable,
    stdout: IO[bytes] | int = subprocess.DEVNULL,
    stderr: IO[bytes] | int = subprocess.STDOUT,
    env: Mapping[str, str] | None = None,
    own_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start the runner of the job folder ``job_dir`` (``python -m RUNNER_MODULE job_dir``, the
    command line ``find_runners`` knows it by), its standard input closed. ``own_session``: in a
    session and process group of its own, so it outlives its starter and its whole group can be
    signalled. ``env`` defaults to this process's environment."""
    return subprocess.Popen(
        [python, "-m", RUNNER_MODULE, str(job_dir)],
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ if env is None else env),
        start_new_session=own_session,
    )
