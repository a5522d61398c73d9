"""Every job in a control group (cgroup) of its own, so that no process of it escapes it.

A process can leave its runner's process group and session (``setsid``), its parent (a double
fork) and the environment that names its job (``execve`` with an empty one); it cannot leave
its cgroup without write access above it, and every process it starts is born in it. So the
service makes a group per job, the runner joins it before it starts the job, and a stopped
job's processes are its group's members: ``kill`` ends them all, and the job is gone only when
the group is empty.

Where the groups go (``detect``), in this order:

1. cgroup v2 (the unified hierarchy): under the outermost cgroup on the way to the service's
   own that it may write to (the hierarchy's root for root; under systemd, the delegated
   ``user@UID.service`` for a user), in a folder ``qosched-TAG`` (``TAG`` names the service's
   home, so two services keep apart). Members, ``cgroup.kill`` (else freeze and SIGKILL every
   member until none is left) and, where the controllers are enabled there, the job's cores
   (``cpuset.cpus``) and memory (``memory.max``).
2. cgroup v1, with a ``freezer`` or ``pids`` hierarchy it may write to: members and kill only
   (freeze, SIGKILL every member, thaw, until none is left; without a freezer, SIGKILL until
   none is left).
3. None: the runner's own means hold instead (see ``process.RunnerProcess.kill_group``).

``QOSCHED_CGROUPS=off`` skips the detection (no groups), e.g. where a host's groups must not be
touched.

A job's group is ``PARENT/JOB_ID`` in each hierarchy: derivable from the job's id, so a
restarted service finds the group of a runner it re-adopts, and of a job whose runner died
while the service was down.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import signal
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: ``off``: make no groups (the fallback).
ENV_CGROUPS = "QOSCHED_CGROUPS"
#: Set by the service for a runner: the group folders (``os.pathsep``-separated) it joins before
#: it starts its job (see ``join_from_environment``).
ENV_RUNNER_CGROUP = "QOSCHED_RUNNER_CGROUP"
#: v1 hierarchies that can hold a job: a freezer stops its members from forking while they are
#: killed; pids alone still lists them.
V1_CONTROLLERS = ("freezer", "pids")
#: v2 controllers enabled for the jobs' groups where the parent offers them.
V2_CONTROLLERS = ("cpuset", "memory", "pids")
KILL_WAIT_S = 5.0  # how long ``kill`` goes on killing before it leaves the rest to a later call
_POLL_S = 0.01


@dataclass(frozen=True)
class JobGroup:
    """One job's group: a folder per hierarchy (one for v2)."""

    version: int  # 2 or 1
    paths: tuple[Path, ...]

    def create(self) -> None:
        """Make the group, and its parent if need be (the parent goes with its last group)."""
        for path in self.paths:
            if not path.parent.is_dir():
                path.parent.mkdir(exist_ok=True)
                if self.version == 2:
                    _enable_controllers(path.parent)
            path.mkdir(exist_ok=True)

    def join(self, pid: int | None = None) -> None:
        """Move ``pid`` (default: this process) into the group; ``OSError`` when refused."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(f"{os.getpid() if pid is None else pid}\n")

    def members(self) -> list[int]:
        """The processes in the group and in any group under it (a member may make some)."""
        found: set[int] = set()
        for path in self.paths:
            for folder, _, _ in os.walk(path):
                with contextlib.suppress(OSError, ValueError):
                    found.update(int(p) for p in Path(folder, "cgroup.procs").read_text().split())
        return sorted(found)

    def kill(self) -> bool:
        """SIGKILL every member, including those started meanwhile; True when none is left
        within ``KILL_WAIT_S`` (the killed may still be exiting: see ``members``)."""
        if self.version == 2 and all(_write(p / "cgroup.kill", "1") for p in self.paths):
            return True  # the kernel kills them all, forks under way included
        deadline = time.monotonic() + KILL_WAIT_S
        try:
            while pids := self.members():
                self._freeze(True, deadline)  # frozen, a member cannot fork while it is killed
                for pid in pids:
                    _kill_member(pid, self.paths)
                if self.version == 1:
                    self._freeze(False, deadline)  # a frozen v1 process dies only once thawed
                if time.monotonic() > deadline:
                    return False
                time.sleep(_POLL_S)
            return True
        finally:
            self._freeze(False, deadline)

    def _freeze(self, on: bool, deadline: float) -> None:
        """Freeze (or thaw) the group where a freezer is, waiting (until ``deadline``) for
        the kernel to say it is done."""
        if self.version == 2:
            events = self.paths[0] / "cgroup.events"
            if _write(self.paths[0] / "cgroup.freeze", "1" if on else "0") and on:
                while "frozen 1" not in _read(events) and time.monotonic() < deadline:
                    time.sleep(_POLL_S)
            return
        state = "FROZEN" if on else "THAWED"
        for path in self.paths:
            if _write(path / "freezer.state", state):
                while _read(path / "freezer.state").strip() not in (state, ""):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(_POLL_S)

    def limit(self, *, cpus: Sequence[int] | None, memory_bytes: int | None) -> tuple[str, ...]:
        """Hold the group to ``cpus`` and ``memory_bytes`` where its controllers allow; returns
        the limits that hold (``cpuset``, ``memory``). Called before the runner starts and
        again on every re-size, before the runner is told its new cores (widened first, its
        affinity stays inside the group's)."""
        held = []
        if self.version != 2:
            return ()
        path = self.paths[0]
        if cpus is not None and _write(path / "cpuset.cpus", ",".join(map(str, cpus))):
            held.append("cpuset")
        if memory_bytes is not None and _write(path / "memory.max", str(memory_bytes)):
            held.append("memory")
        return tuple(held)

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for the group's ``memory.max`` (v2's
        ``memory.events``; 0 where there is no such count)."""
        if self.version != 2:
            return 0
        for line in _read(self.paths[0] / "memory.events").splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self) -> bool:
        """Remove the (empty) group, and its parent when no other group is left in it; False
        while a member is left."""
        for path in self.paths:
            folders = sorted((Path(f) for f, _, _ in os.walk(path)), key=lambda p: -len(p.parts))
            for folder in folders:
                try:
                    folder.rmdir()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                        return False
                    raise
            with contextlib.suppress(OSError):  # refused while it holds another job's group
                path.parent.rmdir()
        return True


@dataclass(frozen=True)
class JobGroups:
    """Where this service's job groups are: one parent folder per hierarchy."""

    version: int
    parents: tuple[Path, ...]

    def of(self, job_id: str) -> JobGroup:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            raise ValueError(f"not a job id for a group: {job_id!r}")
        return JobGroup(self.version, tuple(parent / job_id for parent in self.parents))

    def sweep(self, keep: Collection[str] = ()) -> None:
        """Remove every job group left empty (one whose last process was still being reaped
        when its job ended) but those of the jobs in ``keep`` (their runners may not have
        joined yet), then the parents if nothing is left in them. The kernel refuses to
        remove a group that holds a process, so no running job's group goes."""
        for parent in self.parents:
            with contextlib.suppress(OSError):
                for child in parent.iterdir():
                    if child.is_dir() and child.name not in keep:
                        with contextlib.suppress(OSError):
                            JobGroup(self.version, (child,)).remove()
            with contextlib.suppress(OSError):
                parent.rmdir()

    def describe(self) -> str:
        return f"cgroup v{self.version} under {', '.join(map(str, self.parents))}"


def describe(groups: JobGroups | None) -> str:
    """What holds each job's processes, for the service's first lines."""
    if groups is None:
        return "each job held by its runner's process tree (no cgroup could be made)"
    return f"each job in a {groups.describe()}"


def detect(
    home: Path,
    *,
    environ: Mapping[str, str] = os.environ,
    proc_self: Path = Path("/proc/self"),
) -> JobGroups | None:
    """The groups this process may make for the jobs of the service at ``home`` (see the
    module docstring for the order); None where it may make none."""
    if environ.get(ENV_CGROUPS, "").strip().lower() == "off":
        return None
    try:
        mounts = _cgroup_mounts((proc_self / "mountinfo").read_text())
        own = _own_groups((proc_self / "cgroup").read_text())
    except OSError:
        return None
    tag = "qosched-" + hashlib.sha256(os.fsencode(Path(home).absolute())).hexdigest()[:12]
    for mount, controllers in mounts:
        if controllers is None and "" in own:  # v2
            parent = _parent_in(mount, own[""], tag)
            if parent is not None:
                return JobGroups(2, (parent,))
    parents = []
    for name in V1_CONTROLLERS:
        for mount, controllers in mounts:
            if controllers is not None and name in controllers and name in own:
                parent = _parent_in(mount, own[name], tag)
                if parent is not None and parent not in parents:
                    parents.append(parent)
                break
    return JobGroups(1, tuple(parents)) if parents else None


def join_from_environment(environ: dict[str, str] | None = None) -> str | None:
    """In a runner: join the group the service named in ``ENV_RUNNER_CGROUP`` (and take the
    name out of the environment its job inherits); a message when it could not."""
    named = (os.environ if environ is None else environ).pop(ENV_RUNNER_CGROUP, "")
    paths = tuple(Path(p) for p in named.split(os.pathsep) if p)
    try:
        for path in paths:
            (path / "cgroup.procs").write_text(f"{os.getpid()}\n")
    except OSError as exc:
        return f"cannot join the job's cgroup {named}: {exc.strerror or exc}"
    return None


def _cgroup_mounts(mountinfo: str) -> list[tuple[Path, frozenset[str] | None]]:
    """Every cgroup mount: its mount point and, for v1, its controllers (None: v2)."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        point = Path(fields[4].replace("\\040", " "))
        if after[0] == "cgroup2":
            found.append((point, None))
        elif after[0] == "cgroup":
            found.append((point, frozenset(after[2].split(","))))
    return found


def _own_groups(text: str) -> dict[str, str]:
    """This process's group per hierarchy from ``/proc/self/cgroup``: ``""`` for v2, each
    controller's name for v1."""
    own = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            own[""] = parts[2]
        else:
            for name in parts[1].split(","):
                own.setdefault(name, parts[2])
    return own


def _parent_in(mount: Path, own: str, tag: str) -> Path | None:
    """``tag`` under the outermost group on the way from ``mount`` to ``own`` that this
    process may write to and move processes into (tried by making it, and removing it again
    unless it was there: a job's group makes it when needed); None where there is none.
    Outermost: a process moves between two groups only with write access to their common
    ancestor, and the service's own group may hold processes, which a v2 group with
    controllers enabled for its children may not."""
    parts = [p for p in own.split("/") if p and p not in (".", "..")]
    for depth in range(len(parts) + 1):
        folder = mount.joinpath(*parts[:depth])
        if not (os.access(folder, os.W_OK) and os.access(folder / "cgroup.procs", os.W_OK)):
            continue
        parent = folder / tag
        existed = parent.is_dir()
        try:
            parent.mkdir(exist_ok=True)
        except OSError:
            continue
        usable = os.access(parent / "cgroup.procs", os.W_OK)
        if not existed:
            with contextlib.suppress(OSError):
                parent.rmdir()
        if usable:
            return parent
    return None


def _enable_controllers(parent: Path) -> None:
    """Give the jobs' groups under ``parent`` the controllers ``parent`` has (best effort:
    without them a group still holds and kills its members)."""
    offered = _read(parent / "cgroup.controllers").split()
    for name in V2_CONTROLLERS:
        if name in offered:
            _write(parent / "cgroup.subtree_control", f"+{name}")


def _kill_member(pid: int, paths: Sequence[Path]) -> None:
    """SIGKILL ``pid`` if it is still in the group at ``paths``: held by a pidfd from before
    the check, so a pid reused meanwhile is never hit."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfds here: the pid is checked just before it is signalled
        pidfd = None
    try:
        if pid in JobGroup(0, tuple(paths)).members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pidfd is None:
                    os.kill(pid, signal.SIGKILL)
                else:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, text: str) -> bool:
    """Write a cgroup file; False where it is missing or the kernel refuses the value."""
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError:
        return False
    return True


__all__ = [
    "ENV_CGROUPS",
    "ENV_RUNNER_CGROUP",
    "JobGroup",
    "JobGroups",
    "describe",
    "detect",
    "join_from_environment",
]
