"""The local service's home directory: its token, where it listens, its database and logs.

The home is ``$QOSCHED_HOME``, else ``$XDG_STATE_HOME/qosched``, else ``~/.local/state/qosched``.
In it:

- ``token``: the API's bearer token, created at the first start, readable by its owner only;
- ``service.json``: ``{"host", "port", "pid", "started_at"}`` of the running service, written
  when it starts listening and removed when it stops cleanly;
- ``service.lock``: held (``flock``) by the running service, so two cannot share a home;
- ``service.log``: the output of a service started with ``qosched up --detach``;
- ``port.json``: ``{"port"}``, where the last service of this home listened, kept after it stops:
  the next ``qosched up`` listens there again unless told otherwise (``--port``), so the address
  of the service and its web page stays the same across restarts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from qosched.core.atomic import atomic_write_json
from qosched.core.errors import InputError, QoschedError

ENV_HOME = "QOSCHED_HOME"
TOKEN_FILE = "token"
ENDPOINT_FILE = "service.json"
LOCK_FILE = "service.lock"
LOG_FILE = "service.log"
PORT_FILE = "port.json"

NOT_RUNNING = "no qosched service is running (start one with `qosched up`)"


class ServiceNotRunningError(QoschedError):
    """No live service owns this home."""

    def __init__(self, home: Path, detail: str | None = None) -> None:
        self.home = home
        suffix = f"; {detail}" if detail else ""
        super().__init__(f"{NOT_RUNNING}; home {home}{suffix}")


class ServiceRunningError(QoschedError):
    """A live service already owns this home."""


def default_home(environ: dict[str, str] | None = None) -> Path:
    """``$QOSCHED_HOME``, else ``$XDG_STATE_HOME/qosched``, else ``~/.local/state/qosched``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_HOME):
        return Path(env[ENV_HOME]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "qosched"
    return Path("~/.local/state/qosched").expanduser()


def resolve_home(value: str | Path | None) -> Path:
    """The home a user named (``--home``), or the default one."""
    return default_home() if value is None else Path(value).expanduser()


def ensure_home(home: Path) -> Path:
    """Create the home (owner-only) if it does not exist yet; returns it.

    The home holds the API token, job commands, their logs and checkpoints: whoever can read
    it can act as its owner. So a home owned by another user is refused, and one that others
    may enter or read is made owner-only, saying so on standard error.
    """
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the service home: {exc.strerror}", source=home) from exc
    try:
        info = home.lstat()
    except OSError as exc:
        raise InputError(f"cannot read the service home: {exc.strerror}", source=home) from exc
    if stat.S_ISLNK(info.st_mode):
        info = home.stat()  # a home reached through a link is judged by what it points to
    if not stat.S_ISDIR(info.st_mode):
        raise InputError("the service home is not a directory", source=home)
    if info.st_uid != os.getuid():
        raise InputError(
            f"the service home belongs to user id {info.st_uid}, not to you ({os.getuid()}); "
            "use a home of your own (--home or $QOSCHED_HOME)",
            source=home,
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        before = stat.S_IMODE(info.st_mode)
        try:
            os.chmod(home, 0o700)
        except OSError as exc:
            raise InputError(
                f"the service home is open to others (mode {before:04o}) and cannot be made "
                f"owner-only: {exc.strerror}",
                source=home,
            ) from exc
        print(
            f"qosched: {home} was open to other users (mode {before:04o}); made it owner-only "
            "(0700). If others could have read its token, delete the token file to get a new one.",
            file=sys.stderr,
            flush=True,
        )
    return home


def open_private_log(path: Path) -> IO[bytes]:
    """``path`` opened for appending, created owner-only (0600); an existing file that others
    could read is made owner-only too. A symlink in its place is refused."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise QoschedError(f"{path}: cannot open the log: {exc.strerror}") from exc
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


# --- token -------------------------------------------------------------------------------------


def ensure_token(home: Path) -> str:
    """The API token of ``home``, created (mode 0600) the first time."""
    ensure_home(home)
    path = home / TOKEN_FILE
    if not path.exists():
        _create_token(path)
    return read_token(home)


def read_token(home: Path) -> str:
    """The token of ``home``; refuses a file others could read, or one owned by another user."""
    path = home / TOKEN_FILE
    try:
        # O_NOFOLLOW: a symlink planted in place of the token is refused, not followed.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise ServiceNotRunningError(home, f"it has no token file {path}") from exc
    except OSError as exc:
        raise QoschedError(f"{path}: cannot open the API token: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise QoschedError(f"{path}: the API token must be a regular file")
        if info.st_uid != os.getuid():
            raise QoschedError(
                f"{path}: the API token belongs to user id {info.st_uid}, not to you "
                f"({os.getuid()}); use your own --home"
            )
        if info.st_mode & 0o077:
            raise QoschedError(
                f"{path}: the API token is readable by others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); refusing to use it. Run `chmod 600 {path}` "
                "if nobody else could have read it, or delete it to get a new one"
            )
        token = handle.read().decode("ascii", errors="replace").strip()
    if not token:
        raise QoschedError(f"{path}: the API token file is empty; delete it to get a new one")
    return token


def _create_token(path: Path) -> None:
    """Write a fresh token to a private temp file, then link it into place if none is there.

    ``os.link`` fails when the target exists, so two services starting at once cannot overwrite
    each other's token, and a reader never sees a half-written one.
    """
    fd, temp = _exclusive_temp(path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_urlsafe(32).encode("ascii") + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process won the race: use its token
            os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def _exclusive_temp(directory: Path, prefix: str) -> tuple[int, str]:
    for _ in range(100):
        name = os.path.join(directory, f"{prefix}{secrets.token_hex(8)}.tmp")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), name
        except FileExistsError:
            continue
    raise QoschedError(f"{directory}: cannot create a temporary token file")  # pragma: no cover


# --- endpoint ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a running service listens (``service.json``)."""

    host: str
    port: int
    pid: int
    started_at: float

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
            "started_at": self.started_at,
        }


def write_endpoint(home: Path, endpoint: Endpoint) -> None:
    atomic_write_json(home / ENDPOINT_FILE, endpoint.to_dict())


def remove_endpoint(home: Path, pid: int) -> bool:
    """Remove ``service.json`` if process ``pid`` wrote it; returns whether it was removed."""
    path = home / ENDPOINT_FILE
    try:
        current = recorded_endpoint(home)
    except QoschedError:
        return False
    if current is None or current.pid != pid:
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False


def recorded_endpoint(home: Path) -> Endpoint | None:
    """What ``service.json`` says, whether or not its process is alive; None without one."""
    try:
        return _load_endpoint(home / ENDPOINT_FILE)
    except FileNotFoundError:
        return None


def read_endpoint(home: Path) -> Endpoint:
    """The live service's endpoint; ``ServiceNotRunningError`` if none, or its process is gone."""
    path = home / ENDPOINT_FILE
    endpoint = recorded_endpoint(home)
    if endpoint is None:
        raise ServiceNotRunningError(home)
    if not pid_alive(endpoint.pid):
        raise ServiceNotRunningError(
            home, f"{path} is left from process {endpoint.pid}, which is gone"
        )
    return endpoint


def _load_endpoint(path: Path) -> Endpoint:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QoschedError(f"{path}: cannot read the service endpoint: {exc}") from exc
    try:
        return Endpoint(
            host=_typed(data, "host", str),
            port=_typed(data, "port", int),
            pid=_typed(data, "pid", int),
            started_at=float(_typed(data, "started_at", (int, float))),
        )
    except QoschedError as exc:
        raise QoschedError(f"{path}: {exc}") from exc


def _typed(data: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise QoschedError(f"field {key!r}: expected {kind}, got {value!r}")
    return value


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited: a zombie (dead, not yet reaped by its
    parent) is not alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:  # it went away just now
        return False
    except OSError:  # no /proc here: kill's answer is all there is
        return True
    # The state follows the command name, which is in parentheses and may hold any byte.
    after_name = stat_line.rfind(b")") + 2
    return stat_line[after_name : after_name + 1] not in (b"Z", b"X")


# --- one service per home ----------------------------------------------------------------------


class HomeLock:
    """An exclusive ``flock`` on ``service.lock``, held while a service owns the home.

    The kernel drops it when the process dies, so a crashed service never blocks the next one.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / LOCK_FILE
        self._handle: IO[bytes] | None = None

    def acquire(self) -> None:
        handle = open(self.path, "ab")  # noqa: SIM115 - held open until release()
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            handle.close()
            raise ServiceRunningError(
                f"another qosched service is starting or running with home {self.path.parent}"
            ) from exc
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> HomeLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def check_not_running(home: Path) -> None:
    """Raise ``ServiceRunningError`` if a live service owns ``home``.

    The home lock decides, not a recorded pid: the kernel frees the lock the moment its holder
    dies, while a pid lives on as a zombie until the dead service's parent reaps it (and may
    be reused by another process after that)."""
    lock = HomeLock(home)
    try:
        lock.acquire()
    except ServiceRunningError:
        endpoint = None
        with contextlib.suppress(QoschedError):
            endpoint = recorded_endpoint(home)
        if endpoint is None:
            raise
        raise ServiceRunningError(
            f"a qosched service is already running at {endpoint.url} (pid {endpoint.pid}, "
            f"home {home}); stop it with `qosched down`"
        ) from None
    lock.release()


# --- the port kept across restarts -------------------------------------------------------------


def remember_port(home: Path, port: int) -> None:
    """Record ``port`` as where this home's service listens (``PORT_FILE``)."""
    atomic_write_json(home / PORT_FILE, {"port": port})


def remembered_port(home: Path) -> int | None:
    """The port this home's service listened on last; None when none was recorded, or the
    record does not read as a port (it only saves choosing: the next start writes a good one)."""
    try:
        data = json.loads((home / PORT_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    port = data.get("port") if isinstance(data, dict) else None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= 65535:
        return None
    return port
