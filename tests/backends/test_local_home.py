"""qosched.backends.local.home: where the home is, the token file, service.json, the home lock."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qosched.backends.local.home import (
    ENDPOINT_FILE,
    NOT_RUNNING,
    PORT_FILE,
    TOKEN_FILE,
    Endpoint,
    HomeLock,
    ServiceNotRunningError,
    ServiceRunningError,
    check_not_running,
    default_home,
    ensure_token,
    pid_alive,
    read_endpoint,
    read_token,
    recorded_endpoint,
    remember_port,
    remembered_port,
    remove_endpoint,
    write_endpoint,
)
from qosched.core.errors import QoschedError


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"QOSCHED_HOME": "/srv/q", "XDG_STATE_HOME": "/x"}, Path("/srv/q")),
        ({"QOSCHED_HOME": "", "XDG_STATE_HOME": "/x"}, Path("/x/qosched")),
        ({"XDG_STATE_HOME": "/x"}, Path("/x/qosched")),
        ({}, Path("~/.local/state/qosched").expanduser()),
    ],
    ids=["qosched-home", "empty-qosched-home", "xdg", "fallback"],
)
def test_default_home(environ: dict[str, str], expected: Path) -> None:
    assert default_home(environ) == expected


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# --- the token -----------------------------------------------------------------------------------


def test_the_token_is_created_owner_only_and_reused(tmp_path: Path) -> None:
    home = tmp_path / "new" / "home"
    token = ensure_token(home)
    info = (home / TOKEN_FILE).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert len(token) >= 40
    assert ensure_token(home) == token
    assert read_token(home) == token
    assert [p.name for p in home.iterdir()] == [TOKEN_FILE]  # no temp file left behind


def test_an_existing_token_is_kept(tmp_path: Path) -> None:
    path = tmp_path / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"my-own-token\n")
    os.close(fd)
    assert ensure_token(tmp_path) == "my-own-token"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    token = ensure_token(tmp_path)
    path = tmp_path / TOKEN_FILE
    path.chmod(mode)
    with pytest.raises(QoschedError, match="readable by others") as caught:
        ensure_token(tmp_path)
    assert str(path) in str(caught.value)
    assert f"{mode:04o}" in str(caught.value)
    assert token not in str(caught.value)


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    fd = os.open(tmp_path / TOKEN_FILE, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    with pytest.raises(QoschedError, match="empty"):
        read_token(tmp_path)


def test_a_symlinked_token_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    ensure_token(elsewhere)
    home = tmp_path / "home"
    home.mkdir()
    (home / TOKEN_FILE).symlink_to(elsewhere / TOKEN_FILE)
    with pytest.raises(QoschedError, match="cannot open"):
        read_token(home)


def test_a_missing_token_means_no_service(tmp_path: Path) -> None:
    with pytest.raises(ServiceNotRunningError, match="no token file"):
        read_token(tmp_path)


# --- service.json --------------------------------------------------------------------------------


def test_endpoint_round_trip(tmp_path: Path) -> None:
    endpoint = Endpoint("127.0.0.1", 8123, os.getpid(), 1_700_000_000.5)
    write_endpoint(tmp_path, endpoint)
    assert json.loads((tmp_path / ENDPOINT_FILE).read_text()) == {
        "host": "127.0.0.1",
        "port": 8123,
        "pid": os.getpid(),
        "started_at": 1_700_000_000.5,
    }
    assert read_endpoint(tmp_path) == endpoint
    assert endpoint.url == "http://127.0.0.1:8123"
    assert Endpoint("::1", 1, 1, 0.0).url == "http://[::1]:1"


def test_no_service_json_is_the_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ServiceNotRunningError) as caught:
        read_endpoint(tmp_path)
    assert str(caught.value).startswith(NOT_RUNNING)
    assert NOT_RUNNING == "no qosched service is running (start one with `qosched up`)"


@pytest.mark.process
def test_a_dead_pid_is_the_clear_error(tmp_path: Path) -> None:
    pid = dead_pid()
    write_endpoint(tmp_path, Endpoint("127.0.0.1", 8123, pid, 0.0))
    with pytest.raises(ServiceNotRunningError) as caught:
        read_endpoint(tmp_path)
    message = str(caught.value)
    assert message.startswith(NOT_RUNNING)
    assert f"process {pid}, which is gone" in message
    assert recorded_endpoint(tmp_path) is not None  # reading does not delete


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"host": "h", "port": "80", "pid": 1, "started_at": 0}', "[]"],
    ids=["not-json", "port-text", "not-object"],
)
def test_a_broken_service_json_is_reported(tmp_path: Path, content: str) -> None:
    (tmp_path / ENDPOINT_FILE).write_text(content)
    with pytest.raises(QoschedError, match=ENDPOINT_FILE):
        read_endpoint(tmp_path)


def test_remove_endpoint_removes_only_its_own(tmp_path: Path) -> None:
    write_endpoint(tmp_path, Endpoint("127.0.0.1", 1, os.getpid(), 0.0))
    assert not remove_endpoint(tmp_path, os.getpid() + 1)
    assert (tmp_path / ENDPOINT_FILE).exists()
    assert remove_endpoint(tmp_path, os.getpid())
    assert not (tmp_path / ENDPOINT_FILE).exists()
    assert not remove_endpoint(tmp_path, os.getpid())


# --- one service per home ------------------------------------------------------------------------


@pytest.mark.process
def test_the_home_lock_is_exclusive(tmp_path: Path) -> None:
    with HomeLock(tmp_path):
        with pytest.raises(ServiceRunningError, match="another qosched service"):
            HomeLock(tmp_path).acquire()
        with pytest.raises(ServiceRunningError):
            check_not_running(tmp_path)
    check_not_running(tmp_path)  # released
    with HomeLock(tmp_path):
        pass


def hold_the_lock(home: Path) -> subprocess.Popen[str]:
    """Another process holding ``home``'s lock, as a running service does; ready on return."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from qosched.backends.local.home import HomeLock\n"
            "lock = HomeLock(Path(sys.argv[1]))\n"
            "lock.acquire()\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.process
def test_check_not_running_sees_a_service_holding_the_lock(tmp_path: Path) -> None:
    check_not_running(tmp_path)
    holder = hold_the_lock(tmp_path)
    try:
        write_endpoint(tmp_path, Endpoint("127.0.0.1", 4242, holder.pid, 0.0))
        with pytest.raises(
            ServiceRunningError, match=r"already running at http://127\.0\.0\.1:4242"
        ):
            check_not_running(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    check_not_running(tmp_path)  # a stale file does not block a new start


@pytest.mark.process
def test_a_dead_service_not_yet_reaped_does_not_block_a_restart(tmp_path: Path) -> None:
    """Right after a crash, the service's parent may not have reaped it yet: its pid is a
    zombie, which ``kill(pid, 0)`` still finds. The lock was freed when it died."""
    holder = hold_the_lock(tmp_path)
    write_endpoint(tmp_path, Endpoint("127.0.0.1", 4242, holder.pid, 0.0))
    try:
        os.kill(holder.pid, signal.SIGKILL)
        # Not reaped: wait until the kernel shows it dead (a zombie), then check.
        for _ in range(500):
            state = Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
            time.sleep(0.01)
        assert state == "Z"
        assert not pid_alive(holder.pid)
        check_not_running(tmp_path)
        with pytest.raises(ServiceNotRunningError, match="which is gone"):
            read_endpoint(tmp_path)
    finally:
        holder.wait()


def test_a_recorded_live_pid_without_the_lock_is_no_service(tmp_path: Path) -> None:
    """A pid is reused by unrelated processes: only the lock says a service owns the home."""
    write_endpoint(tmp_path, Endpoint("127.0.0.1", 4242, os.getpid(), 0.0))
    check_not_running(tmp_path)


def test_the_port_is_remembered_across_services(tmp_path: Path) -> None:
    assert remembered_port(tmp_path) is None  # the first start: none yet
    remember_port(tmp_path, 41885)
    assert remembered_port(tmp_path) == 41885
    assert json.loads((tmp_path / PORT_FILE).read_text()) == {"port": 41885}


@pytest.mark.parametrize(
    "text",
    ["", "41885", "{", '{"port": "41885"}', '{"port": true}', '{"port": 0}', '{"port": 65536}'],
)
def test_a_port_record_that_does_not_read_as_a_port_is_ignored(tmp_path: Path, text: str) -> None:
    (tmp_path / PORT_FILE).write_text(text)
    assert remembered_port(tmp_path) is None
