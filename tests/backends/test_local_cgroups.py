"""qosched.backends.local.cgroups: a job's group holds every process the job starts, however it
leaves its session and environment, and ``kill`` ends them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_helpers import events, log_of, make_job_dir

from qosched.backends.local import cgroups
from qosched.backends.local.cgroups import ENV_CGROUPS, JobGroup, JobGroups, detect
from qosched.backends.local.process import RunnerProcess
from qosched.backends.local.progress import RunnerEvent
from qosched.backends.local.service import RUNNER_LOG

pytestmark = pytest.mark.process

WAIT_S = 30.0


def hide_cgroup2(folder: Path) -> Path:
    """A ``/proc/self`` stand-in for detection: this process's, with cgroup2 not mounted."""
    folder.mkdir()
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    (folder / "mountinfo").write_text("\n".join(x for x in lines if " - cgroup2 " not in x))
    (folder / "cgroup").write_text(Path("/proc/self/cgroup").read_text())
    return folder


def groups_of(version: int, home: Path, scratch: Path) -> JobGroups:
    groups = detect(home) if version == 2 else detect(home, proc_self=hide_cgroup2(scratch))
    if groups is None or groups.version != version:
        pytest.skip(f"this machine does not let this process make cgroup v{version} groups")
    return groups


@pytest.fixture(params=[2, 1], ids=["v2", "v1"])
def group(request, tmp_path: Path) -> Iterator[JobGroup]:
    groups = groups_of(request.param, tmp_path / "home", tmp_path / "proc")
    made = groups.of("job-1")
    made.create()
    yield made
    made.kill()
    deadline = time.monotonic() + WAIT_S
    while not made.remove() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(parent.exists() for parent in groups.parents)  # gone with its last group


def test_no_groups_where_they_are_turned_off_or_no_cgroup_is_mounted(tmp_path):
    assert detect(tmp_path, environ={ENV_CGROUPS: "off"}) is None
    bare = tmp_path / "proc"
    bare.mkdir()
    (bare / "mountinfo").write_text("22 1 0:21 / /proc rw,relatime - proc proc rw\n")
    (bare / "cgroup").write_text("0::/\n")
    assert detect(tmp_path, proc_self=bare, environ={}) is None
    assert detect(tmp_path, proc_self=tmp_path / "missing", environ={}) is None


def test_a_home_has_one_parent_found_again_after_a_restart_and_apart_from_another_homes(
    tmp_path,
):
    first = groups_of(2, tmp_path / "a", tmp_path / "proc")
    assert not first.parents[0].exists()  # made with the first job's group, not before
    assert detect(tmp_path / "a") == first  # a restarted service finds its jobs' groups
    other = detect(tmp_path / "b")
    assert other is not None and other.parents != first.parents
    assert first.of("job-7").paths == (first.parents[0] / "job-7",)
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError, match="not a job id"):
            first.of(bad)


def test_v1_groups_are_made_in_the_freezer_and_pids_hierarchies(tmp_path):
    groups = groups_of(1, tmp_path / "home", tmp_path / "proc")
    hierarchies = {parent.parent.name for parent in groups.parents}
    assert hierarchies <= {"freezer", "pids"} and hierarchies


#: Leaves its session, double-forks and clears its environment, ignoring SIGTERM; then forks a
#: new child every few milliseconds, so a kill that lists the members once misses some.
ESCAPE_AND_FORK = textwrap.dedent(
    """
    import os, signal, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open(sys.argv[1] + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            while True:
                if os.fork() == 0:
                    time.sleep(300)
                    os._exit(0)
                time.sleep(0.005)
        os._exit(0)
    time.sleep(300)
    """
)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def start_in(group: JobGroup, pid_file: Path) -> tuple[subprocess.Popen, int]:
    """The script above, started in ``group`` from its first instruction (``preexec_fn``)."""
    command = subprocess.Popen(
        [sys.executable, "-c", ESCAPE_AND_FORK, str(pid_file)], preexec_fn=group.join
    )
    deadline = time.monotonic() + WAIT_S
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the script never wrote its pid"
        time.sleep(0.02)
    return command, int(pid_file.read_text())


@pytest.mark.parametrize("kill_file", [True, False], ids=["as-offered", "without-cgroup.kill"])
def test_kill_ends_every_member_however_it_left_its_session(
    group, tmp_path, kill_file, monkeypatch
):
    if not kill_file:  # as on a kernel before 5.14, or on v1, which has no cgroup.kill
        write = cgroups._write
        monkeypatch.setattr(
            cgroups, "_write", lambda path, text: path.name != "cgroup.kill" and write(path, text)
        )
    command, escaped = start_in(group, tmp_path / "escaped.pid")
    try:
        time.sleep(0.2)  # a few children forked meanwhile
        members = group.members()
        assert command.pid in members and escaped in members and len(members) > 3
        assert os.getsid(escaped) != os.getsid(command.pid)  # it left the session
        assert not group.remove()  # refused while members are left
        assert group.kill()
        deadline = time.monotonic() + WAIT_S
        while group.members() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group.members() == []
        assert command.wait(timeout=WAIT_S) == -signal.SIGKILL
        assert not any(alive(pid) for pid in members)
        assert group.remove()
        assert not any(path.exists() for path in group.paths)
    finally:
        command.kill()
        command.wait()


def test_a_runner_joins_the_group_named_in_its_environment(group):
    env = {cgroups.ENV_RUNNER_CGROUP: os.pathsep.join(map(str, group.paths)), "KEEP": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        preexec_fn=lambda: os._exit(3) if cgroups.join_from_environment(dict(env)) else None,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while child.pid not in group.members():
            assert child.poll() is None, "the child could not join"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        child.kill()
        child.wait()


def test_joining_a_group_that_is_not_there_is_a_message_not_a_crash(tmp_path):
    env = {cgroups.ENV_RUNNER_CGROUP: str(tmp_path / "nowhere"), "KEEP": "1"}
    message = cgroups.join_from_environment(env)
    assert message is not None and "cannot join the job's cgroup" in message
    assert env == {"KEEP": "1"}  # the job does not inherit the name
    assert cgroups.join_from_environment({}) is None


def test_limits_say_which_hold(group):
    # Only what the kernel took counts: where the parent enables no controller, nothing holds.
    expected = []
    if (group.paths[0] / "cpuset.cpus").exists():
        expected.append("cpuset")
    if (group.paths[0] / "memory.max").exists():
        expected.append("memory")
    held = group.limit(cpus=sorted(os.sched_getaffinity(0))[:1], memory_bytes=2**30)
    assert list(held) == (expected if group.version == 2 else [])
    if "memory" in held:
        assert (group.paths[0] / "memory.max").read_text().strip() == str(2**30)


@pytest.mark.parametrize(
    ("events", "kills"),
    [
        ("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n", 2),
        ("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", 0),
        ("", 0),  # no memory controller for the group: no such file
    ],
    ids=["killed", "none", "no-controller"],
)
def test_oom_kills_are_read_from_memory_events(tmp_path, events, kills):
    # The kernel's format (Documentation/admin-guide/cgroup-v2.rst, memory.events).
    if events:
        (tmp_path / "memory.events").write_text(events)
    assert JobGroup(2, (tmp_path,)).oom_kills() == kills
    assert JobGroup(1, (tmp_path,)).oom_kills() == 0  # v1 groups have no memory limit here


#: Writes its pid and whether the runner's group variable reached it, then reports one
#: iteration and exits.
REPORTS_ITSELF = textwrap.dedent(
    """
    import json, os
    folder = os.environ["QOSCHED_JOB_DIR"]
    with open(os.path.join(folder, "seen.json"), "w") as out:
        json.dump({"pid": os.getpid(),
                   "cgroup": open("/proc/self/cgroup").read(),
                   "named": "QOSCHED_RUNNER_CGROUP" in os.environ}, out)
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
        out.write('{"iteration": 1}\\n')
    """
)


def run_runner(tmp_path: Path, group: JobGroup | None, env: dict[str, str]) -> tuple[Path, int]:
    job_dir = make_job_dir(
        tmp_path,
        workload=None,
        command=[sys.executable, "-c", REPORTS_ITSELF],
        iterations=1,
        cpus=None,
    )
    with open(job_dir / RUNNER_LOG, "ab") as log:
        runner = RunnerProcess.start(sys.executable, job_dir, log=log, env=env, group=group)
    try:
        assert runner.popen is not None
        return job_dir, runner.popen.wait(timeout=WAIT_S)
    finally:
        runner.kill_group(signal.SIGKILL)
        runner.close()


def test_a_runner_starts_its_command_inside_its_group(group, tmp_path):
    job_dir, code = run_runner(tmp_path, group, dict(os.environ))
    assert code == 0, log_of(job_dir)
    seen = json.loads((job_dir / "seen.json").read_text())
    # The command's cgroup, as the kernel reports it, is the job's, in every hierarchy.
    for path in group.paths:
        assert f":/{path.parent.name}/{path.name}\n" in seen["cgroup"], seen["cgroup"]
    assert not seen["named"]  # the group's name is the runner's, not the job's to see
    assert not [e for e in events(job_dir) if e.event is RunnerEvent.WARNING]


def test_a_group_the_runner_cannot_join_is_a_warning_and_the_job_runs(tmp_path):
    env = {**os.environ, cgroups.ENV_RUNNER_CGROUP: str(tmp_path / "no-such-group")}
    job_dir, code = run_runner(tmp_path, None, env)
    assert code == 0, log_of(job_dir)
    warnings = [e.message for e in events(job_dir) if e.event is RunnerEvent.WARNING]
    assert len(warnings) == 1 and "cannot join the job's cgroup" in str(warnings[0])
    assert events(job_dir)[-1].event is RunnerEvent.DONE
