"""The local service's HTTP API: what a service offers (``Service``) and the server in front of it.

Routes (JSON unless said otherwise). Every request must carry a ``Host`` header naming a
loopback address or ``localhost`` with the service's port (403 otherwise: this closes DNS
rebinding). Every route but ``GET /metrics``, ``GET /healthz``, ``GET /login`` and
``GET /static/...`` needs ``Authorization: Bearer <token>`` or the page's session cookie
(``qosched.backends.local.web.auth``); with the cookie, a request that changes something must
carry ``X-CSRF-Token`` too, and ``POST /shutdown``, ``POST /login-codes`` and
``DELETE /sessions`` take the token only:

==========================  ===================================================================
``POST /jobs``              body: a TrainingJob spec (YAML, UTF-8); header ``X-Qosched-Source``:
                            its file name, percent-encoded, for error messages -> 201, the job
``POST /jobs/dry-run``      a spec as for ``POST /jobs``: what submitting it would do now,
                            storing nothing -> ``{"outcome": "guaranteed" | "best-effort" |
                            "declined", "reason", "earliest_deadline_at",
                            "earliest_deadline_in_s"}`` (``Verdict``)
``GET /jobs``               every job, in submission order; with any of ``?state=S[,S...]``
                            (a state, ``active`` or ``finished``), ``q=TEXT`` (in the id or
                            name), ``sort=COLUMN``, ``order=asc|desc``, ``offset=N``,
                            ``limit=N`` (at most 500): one page of the table,
                            ``{"jobs", "total", "matched", "offset", "limit", "sort", "order",
                            "states"}`` (``qosched.backends.local.web.listing``)
``GET /jobs/{id}``          one job
``GET /jobs/{id}/detail``   one job with its allocation history, events and slack
``GET /jobs/{id}/logs``     its output as ``text/plain`` (all that is kept, streamed in chunks);
                            ``?tail=N`` keeps the last N lines
                            (``&limit=M``: of the last M bytes, at most 1 MiB);
                            ``?offset=N[&limit=M]`` gives the raw bytes from byte N on
                            (``application/octet-stream``, at most M, default and most 1 MiB)
                            with headers ``X-Qosched-Log-Offset`` (where the next read starts)
                            and ``X-Qosched-Log-Complete`` (``true``: the job is finished and
                            nothing more will be written), for following a log as it grows;
                            ``?download=1``: all that is kept, as a file
                            (``Content-Disposition: attachment; filename="{id}.log"``)
``DELETE /jobs/{id}``       cancel it -> the job
``GET /status``             the service: capacity, allocations, queue, outcomes (``ServiceStatus``)
``POST /shutdown``          ask the service to stop -> 202
``GET /metrics``            Prometheus exposition (text 0.0.4, or OpenMetrics if asked for)
``GET /healthz``            ``{"status": "ok", "pid": ...}``
``GET /``                   the web page (HTML); without a session a 401 page saying how to
                            sign in
``GET /login?code=C``       trade a one-time login code for a session cookie -> 303 to ``/``
``POST /login-codes``       a new one-time login code -> 201 ``{"code", "url"}``
``DELETE /sessions``        end every web session and void every unused login code
                            -> ``{"codes": n, "sessions": n}`` (``qosched web --revoke``)
``GET /static/{name}``      the page's script and style sheet
``GET /timeline``           every allocation of every job, for the page's Gantt chart
                            (``qosched.backends.local.web.views.timeline``); ``?window=S``:
                            only those of the last S seconds (whole, at most a year)
``GET /jobs/{id}/speed``    the job's speed against cores: measured and predicted
``GET /usage``              per job: cores held and CPU seconds its processes used
``GET /usage/history``      machine use over the service's history: cores allocated and
                            used, sampled every few seconds (``?window=S``: the last S
                            seconds, at most a day, the default)
==========================  ===================================================================

Errors are ``{"error": message}``: 400 bad input (with ``reason``, ``source``, ``line``,
``field`` when known), a malformed request, or two ``Host`` headers, 401 no or wrong token,
403 a foreign ``Host`` or ``Origin`` (another host, port or scheme than the service's own
``http://``), or a missing or wrong CSRF token, 404 unknown job or route, 405 wrong method,
408 headers or a body that do not arrive in time, 411 no ``Content-Length``, 413 a body over
1 MiB, 431 headers over 16 KiB or 100 lines, 500 a failure of the service, 501 a method no
HTTP server here knows (``HEAD`` and ``OPTIONS`` get 405: no route takes them, and no
cross-origin request is ever allowed).

The transport (``qosched.backends.local.httpd``) is uvicorn on an event loop of its own, with
a cap on connections, deadlines for headers and bodies and caps on their size (``Limits``);
routes run in a small thread pool, so no number of clients adds threads or takes the file
descriptors the service needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

from qosched.backends.local import machine_use
from qosched.backends.local.jobview import JobDetail, JobView, Outcome
from qosched.backends.local.metrics import ServiceMetrics
from qosched.backends.local.store import StoreUnavailableError, UnknownJobError
from qosched.backends.local.verdict import Verdict
from qosched.backends.local.web import auth, listing, page
from qosched.core.bounds import COUNT_LIMIT, check_count
from qosched.core.errors import InputError, QoschedError

if TYPE_CHECKING:  # the server is imported by serve(): clients of the API never load uvicorn
    from qosched.backends.local import httpd
    from qosched.backends.local.httpd import Limits

MAX_BODY_BYTES = 1 << 20
# A body this much over the limit is still read (and dropped) so the client sees the 413 rather
# than a connection reset; a bigger one is cut off.
_MAX_DRAIN_BYTES = 8 * MAX_BODY_BYTES
#: The most bytes of a log one ``?offset=`` request returns.
MAX_LOG_CHUNK = 1 << 20
#: The longest window ``GET /timeline?window=S`` takes: a year of seconds.
MAX_TIMELINE_WINDOW_S = 366 * 86_400
#: The longest window ``GET /usage/history?window=S`` takes: as long as samples are kept.
MAX_USAGE_WINDOW_S = int(machine_use.KEEP_S)
SOURCE_HEADER = "X-Qosched-Source"
LOG_OFFSET_HEADER = "X-Qosched-Log-Offset"
LOG_COMPLETE_HEADER = "X-Qosched-Log-Complete"
DEFAULT_SOURCE = "<request>"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Service(Protocol):
    """What the API serves. Each method is called from an HTTP handler thread, possibly several
    at once, so an implementation must be thread-safe.

    A job is a ``JobView`` (``qosched.backends.local.jobview``), sent as its ``to_json``.
    """

    def submit(self, spec_text: str, source: str) -> JobView:
        """Validate a YAML spec (``source`` names it in errors), queue it, return the new job.

        Raises ``InputError`` naming the field when the spec is bad.
        """
        ...

    def dry_run(self, spec_text: str, source: str) -> Verdict:
        """What ``submit`` would do with the spec now (its outcome, why, and the earliest
        deadline that would be guaranteed), storing nothing and changing no guarantee.

        Raises ``InputError`` as ``submit`` does.
        """
        ...

    def jobs(self) -> list[JobView]:
        """Every job, in submission order."""
        ...

    def job(self, job_id: str) -> JobView:
        """One job; raises ``UnknownJobError`` if there is none with this id."""
        ...

    def job_detail(self, job_id: str) -> JobDetail:
        """One job in detail (``GET /jobs/{id}/detail``, ``qosched status JOB``): ``job`` with
        its allocation history, audit log and slack (see ``JobDetail``).

        Raises ``UnknownJobError``.
        """
        ...

    def logs(self, job_id: str, tail_lines: int | None = None, limit: int | None = None) -> str:
        """The job's output so far, only its last ``tail_lines`` lines when given, and of those
        only what lies in the output's last ``limit`` bytes when that is given too.

        Raises ``UnknownJobError``.
        """
        ...

    def read_log(self, job_id: str, offset: int, limit: int) -> LogChunk:
        """At most ``limit`` bytes of the job's output from byte ``offset`` on, called again and
        again by a client following the log. The job's state must be read before the bytes, so
        that ``complete`` is never claimed while output may still be written.

        Raises ``UnknownJobError``, and ``InputError`` for an offset past the end of the output.
        """
        ...

    def cancel(self, job_id: str) -> JobView:
        """Stop the job for good and return it; ``UnknownJobError`` if there is none,
        ``InputError`` if it has already finished."""
        ...

    def status(self) -> ServiceStatus:
        """A snapshot for ``GET /status`` (and ``qosched status``)."""
        ...

    def metrics(self) -> ServiceMetrics:
        """A snapshot for ``GET /metrics``."""
        ...


class DashboardService(Service, Protocol):
    """What the web page needs beyond ``Service``; a service without these methods answers
    their routes with 501."""

    def timeline(self, window_s: float | None = None) -> dict[str, Any]:
        """``GET /timeline``: see ``qosched.backends.local.web.views.timeline``."""
        ...

    def job_speed(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{id}/speed``: see ``qosched.backends.local.web.views.job_speed``.

        Raises ``UnknownJobError``."""
        ...

    def usage(self) -> dict[str, Any]:
        """``GET /usage``: ``{"t": now, "cpus": n, "jobs": {job id: {"cpus": cores held,
        "cpu_s": CPU seconds its live processes used so far}}}``."""
        ...

    def usage_history(self, window_s: float) -> dict[str, Any]:
        """``GET /usage/history?window=S``: machine use over the last ``window_s`` seconds of
        the service's history, ``{"now", "cpus", "every_s", "points": [[t, cores allocated,
        cores' worth of CPU used or null], ...]}`` (``qosched.backends.local.machine_use``)."""
        ...


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """The service as a whole: what it schedules, who holds what now, how jobs ended.

    JSON (``to_json``, ``GET /status``)::

        {"policy": str, "capacity": {"cpus": [core ids], "gpus": [gpu ids]},
         "queued": n, "running": n,
         "allocated": {job id: {"cpus": [core ids], "gpus": [gpu ids]}},
         "outcomes": {"met": n, "missed": n, "failed": n, "cancelled": n, "declined": n},
         "trouble": str or null, "trouble_since": Unix s or null}

    ``queued`` counts jobs waiting for resources (queued or pre-empted). A job holds cores or
    GPUs: a GPU job's ``cpus`` list is empty (its processes share the service's cores).
    """

    policy: str
    cpus: tuple[int, ...]
    queued: int
    running: int
    allocated: Mapping[str, tuple[int, ...]]  # job id -> the cores it holds now
    outcomes: Mapping[str, int]
    gpus: tuple[int, ...] = ()
    allocated_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # job -> GPUs
    # The service's own trouble now (its state cannot be written, it is out of descriptors or
    # disk), and since when (Unix s): job states shown may be behind what really happened.
    trouble: str | None = None
    trouble_since: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "capacity": {"cpus": list(self.cpus), "gpus": list(self.gpus)},
            "queued": self.queued,
            "running": self.running,
            "allocated": {
                job_id: {
                    "cpus": list(self.allocated.get(job_id, ())),
                    "gpus": list(self.allocated_gpus.get(job_id, ())),
                }
                for job_id in sorted(set(self.allocated) | set(self.allocated_gpus))
            },
            "outcomes": {outcome.value: self.outcomes.get(outcome, 0) for outcome in Outcome},
            "trouble": self.trouble,
            "trouble_since": self.trouble_since,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "GET /status") -> ServiceStatus:
        """Read back ``to_json``'s document (a client's view of the answer), checking every
        field: InputError naming it when the document is not one."""

        def member(container: Any, key: str, kind: type, where: str) -> Any:
            value = container.get(key) if isinstance(container, dict) else None
            if not isinstance(value, kind):
                raise InputError(f"expected a {kind.__name__}", source=source, field=where)
            return value

        def ids(values: Any, where: str) -> tuple[int, ...]:
            if not isinstance(values, list):
                raise InputError("expected a list of ids", source=source, field=where)
            return tuple(check_count(v, field=where, source=source) for v in values)

        capacity = member(data, "capacity", dict, "capacity")
        allocated = member(data, "allocated", dict, "allocated")
        outcomes = member(data, "outcomes", dict, "outcomes")
        return cls(
            policy=member(data, "policy", str, "policy"),
            cpus=ids(capacity.get("cpus"), "capacity.cpus"),
            gpus=ids(capacity.get("gpus"), "capacity.gpus"),
            queued=check_count(data.get("queued"), field="queued", source=source),
            running=check_count(data.get("running"), field="running", source=source),
            allocated={
                str(job_id): ids(
                    member(held, "cpus", list, f"allocated.{job_id}.cpus"),
                    f"allocated.{job_id}.cpus",
                )
                for job_id, held in allocated.items()
            },
            allocated_gpus={
                str(job_id): ids(held.get("gpus", []), f"allocated.{job_id}.gpus")
                for job_id, held in allocated.items()
                if held.get("gpus")
            },
            outcomes={
                str(name): check_count(count, field=f"outcomes.{name}", source=source)
                for name, count in outcomes.items()
            },
            trouble=_optional_text(data.get("trouble"), "trouble", source),
            trouble_since=_optional_time(data.get("trouble_since"), "trouble_since", source),
        )


def _optional_text(value: Any, where: str, source: str, limit: int = 4096) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise InputError(f"expected text of at most {limit} characters", source=source, field=where)
    return value


def _optional_time(value: Any, where: str, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise InputError("expected a Unix time in seconds", source=source, field=where)
    return float(value)


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes of a job's output: ``data`` read from some offset, ``offset`` where the next read
    starts, ``complete`` when the job is finished and ``data`` reaches the end of its output."""

    data: bytes
    offset: int
    complete: bool


# --- the server ----------------------------------------------------------------------------------


class ApiServer:
    """A running API server; ``close()`` stops it. Returned by ``serve``."""

    def __init__(self, app: _AsgiApp, server: httpd.Server, pool: ThreadPoolExecutor) -> None:
        self._app = app
        self._server = server
        self._pool = pool

    @property
    def host(self) -> str:
        return str(self._app.server_address[0])

    @property
    def port(self) -> int:
        return int(self._app.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def max_connections(self) -> int:
        """The most connections served at once (``httpd.Limits``)."""
        return self._server.guard.cap

    def login_url(self) -> str:
        """A URL with a fresh one-time login code that opens the web page once."""
        return f"{self.url}{auth.LOGIN_PATH}?code={quote(self._app.sessions.new_code())}"

    @property
    def shutdown_requested(self) -> threading.Event:
        """Set by ``POST /shutdown``."""
        return self._app.shutdown_requested

    def close(self) -> None:
        """Stop accepting requests and free the port; requests in flight get a moment to
        finish, then their connections are closed."""
        self._server.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ApiServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def serve(
    service: Service,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str,
    allow_remote: bool = False,
    shutdown_event: threading.Event | None = None,
    poll_interval_s: float = 0.5,
    limits: Limits | None = None,
) -> ApiServer:
    """Serve ``service`` on ``host:port`` (0: any free port) from a background thread.

    Only a loopback address is accepted unless ``allow_remote``: the API runs jobs as the user
    who started it, and the token travels in clear text. ``POST /shutdown`` sets
    ``shutdown_event`` (a new one if not given), exposed as ``ApiServer.shutdown_requested``.
    ``allow_remote`` also lets requests name the service by any host name (the ``Host`` check
    is for loopback). ``limits`` bounds what clients may take (``httpd.Limits``, the module's
    docstring); the process's soft limit on open files is raised to its hard limit first, and
    the connection cap sized from it. ``poll_interval_s`` is kept for callers: ``close()``
    returns within about 0.1 s when no request is in flight.
    """
    from qosched.backends.local import httpd

    del poll_interval_s
    if not token:
        raise InputError("the API token must not be empty", field="token")
    if not allow_remote and not is_loopback(host):
        raise InputError(
            f"refusing to listen on {host!r}, which is not a loopback address: anyone who can "
            "reach it could try the token, which travels unencrypted; pass allow_remote=True "
            "to do it anyway",
            field="host",
        )
    limits = limits if limits is not None else httpd.Limits()
    fd_limit = httpd.raise_fd_limit()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As http.server did: a port just closed (TIME_WAIT) can be listened on again at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise QoschedError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="qosched-api")
    app = _AsgiApp(
        service=service,
        token=token.encode(),
        sessions=auth.Sessions(),
        check_host=not allow_remote,
        shutdown_requested=shutdown_event if shutdown_event is not None else threading.Event(),
        server_address=sock.getsockname()[:2],
        limits=limits,
        pool=pool,
    )
    server = httpd.Server(app, sock, limits, fd_limit)
    try:
        server.start()
    except RuntimeError as exc:
        pool.shutdown(wait=False)
        raise QoschedError(f"cannot serve on {host}:{port}: {exc}") from exc
    return ApiServer(app, server, pool)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(eq=False)
class _AsgiApp:
    """The ASGI app: one ``_Handler`` per request; what every request shares."""

    service: Service
    token: bytes
    sessions: auth.Sessions
    check_host: bool
    shutdown_requested: threading.Event
    server_address: tuple[str, int]
    limits: Limits
    pool: ThreadPoolExecutor

    @property
    def server_port(self) -> int:
        return int(self.server_address[1])

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        handler = _Handler(self, scope)
        try:
            reply = await handler.respond(receive)
        except _ClientGone:
            return
        await handler.send(send, reply)
        if reply.after is not None:
            reply.after()


class _ClientGone(Exception):
    """The client hung up before its request was in: nobody to answer."""


class _HttpError(Exception):
    def __init__(
        self, status: HTTPStatus, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class _Reply:
    status: HTTPStatus
    body: bytes
    content_type: str
    headers: Mapping[str, str] = field(default_factory=dict)
    html: bool = False  # sent with the page's Content-Security-Policy
    after: Callable[[], object] | None = None  # run once the reply is sent
    # A body too big to hold: ``stream(offset)`` returns the next bytes and where the ones
    # after them start, called (in the service's pool) until it returns none; sent chunked.
    stream: Callable[[int], tuple[bytes, int]] | None = None


def _json_reply(
    value: Any, status: HTTPStatus = HTTPStatus.OK, headers: Mapping[str, str] | None = None
) -> _Reply:
    # allow_nan=False: NaN is not JSON; a service that produces it gets a 500, not a broken client.
    data = json.dumps(value, allow_nan=False).encode()
    return _Reply(status, data, "application/json", dict(headers or {}))


def _text_reply(text: str, content_type: str = "text/plain; charset=utf-8") -> _Reply:
    return _Reply(HTTPStatus.OK, text.encode("utf-8"), content_type)


def _html_reply(text: str, status: HTTPStatus = HTTPStatus.OK) -> _Reply:
    return _Reply(status, text.encode("utf-8"), "text/html; charset=utf-8", html=True)


Route = Callable[["_Handler", list[str]], _Reply]


# Methods HTTP servers commonly know; any other is a 501, these a 404 or 405 by route.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class _Headers:
    """A request's headers, looked up regardless of case (values decoded as Latin-1)."""

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._pairs = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw]

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        return next((v for k, v in self._pairs if k == name), default)

    def get_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self._pairs if k == name]

    def __len__(self) -> int:
        return len(self._pairs)

    @property
    def size(self) -> int:
        """Bytes of the header lines as sent (name, ": ", value, CRLF)."""
        return sum(len(k) + len(v) + 4 for k, v in self._pairs)


class _Handler:
    """One request: resolved and authorised on the event loop, its body read there with a
    deadline, its route run in the app's thread pool (routes call the service, which may
    block)."""

    def __init__(self, server: _AsgiApp, scope: dict[str, Any]) -> None:
        self.server = server
        self.command: str = scope["method"]
        raw_path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        self.path = raw_path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        self.headers = _Headers(scope["headers"])
        client = scope.get("client")
        self.client = str(client[0]) if client else "-"
        self.body = b""
        # A body was announced and not all of it read: the connection is closed after the
        # reply, so that the rest neither waits on it nor holds it open.
        self.body_unread = self.headers.get("Content-Length", "0").strip() != "0" or bool(
            self.headers.get("Transfer-Encoding")
        )
        self.body_read_started = False

    async def respond(self, receive: Any) -> _Reply:
        """The reply; raises ``_ClientGone`` if the client left while its body was read."""
        try:
            route, args = self._resolve()
            if route in self._READS_BODY:
                self.body = await self._read_body(receive)
        except _ClientGone:
            raise
        except Exception as exc:
            reply = self._failure(exc)
            await self._drain(receive)
            return reply
        if route in self._ON_LOOP:
            return self._run(route, args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.server.pool, self._run, route, args)

    def _run(self, route: Route, args: list[str]) -> _Reply:
        try:
            return route(self, args)
        except Exception as exc:
            return self._failure(exc)

    # --- routes ----------------------------------------------------------------------------------

    def _healthz(self, args: list[str]) -> _Reply:
        return _json_reply({"status": "ok", "pid": os.getpid()})

    def _metrics(self, args: list[str]) -> _Reply:
        # Imported here: only the service serves metrics, and its clients import this module.
        from qosched.backends.local.prometheus import exposition

        body, content_type = exposition(self.server.service.metrics(), self.headers.get("Accept"))
        return _Reply(HTTPStatus.OK, body, content_type)

    def _status(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.status().to_json())

    def _list_jobs(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        if not query:
            return _json_reply([job.to_json() for job in self.server.service.jobs()])
        # Validated before the service is asked: a bad query costs nothing.
        asked = listing.JobQuery.from_query(query)
        return _json_reply(listing.table(self.server.service.jobs(), asked))

    def _submit(self, args: list[str]) -> _Reply:
        job = self.server.service.submit(*self._spec())
        return _json_reply(job.to_json(), HTTPStatus.CREATED)

    def _dry_run(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.dry_run(*self._spec()).to_json())

    def _spec(self) -> tuple[str, str]:
        """The spec in the body, and the name it is known by in errors."""
        source = unquote(self.headers.get(SOURCE_HEADER, "") or "") or DEFAULT_SOURCE
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"the spec is not UTF-8 text: {exc.reason}", source=source) from exc
        return text, source

    def _get_job(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.job(args[0]).to_json())

    def _job_detail(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.job_detail(args[0]).to_json())

    def _cancel(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.cancel(args[0]).to_json())

    def _logs(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        download = "download" in query
        if download and (query["download"][-1] != "1" or "tail" in query or "offset" in query):
            raise InputError(
                "download=1 sends the whole log as a file: give it without tail or offset",
                field="download",
            )
        if "offset" in query:
            if "tail" in query:
                raise InputError("give tail or offset, not both", field="tail")
            offset = _query_count(query, "offset")
            limit = MAX_LOG_CHUNK
            if "limit" in query:
                limit = _query_count(query, "limit", minimum=1, maximum=MAX_LOG_CHUNK)
            chunk = self.server.service.read_log(args[0], offset, limit)
            headers = {
                LOG_OFFSET_HEADER: str(chunk.offset),
                LOG_COMPLETE_HEADER: "true" if chunk.complete else "false",
            }
            return _Reply(HTTPStatus.OK, chunk.data, "application/octet-stream", headers)
        if "tail" not in query:
            if "limit" in query:
                raise InputError("give limit with tail or offset", field="limit")
            job_id = args[0]
            self.server.service.job(job_id)  # an unknown job is a 404 before the reply starts

            def read(offset: int) -> tuple[bytes, int]:
                chunk = self.server.service.read_log(job_id, offset, MAX_LOG_CHUNK)
                return chunk.data, chunk.offset

            # All that is kept of it, a chunk at a time: a log may be gigabytes.
            headers = {}
            if download:
                name = "".join(c for c in job_id if c.isascii() and (c.isalnum() or c in "-_."))
                headers["Content-Disposition"] = f'attachment; filename="{name or "job"}.log"'
            return _Reply(HTTPStatus.OK, b"", "text/plain; charset=utf-8", headers, stream=read)
        tail = _query_count(query, "tail")
        limit = None
        if "limit" in query:  # the page's: a log of one endless line must not all come back
            limit = _query_count(query, "limit", minimum=1, maximum=MAX_LOG_CHUNK)
        return _text_reply(self.server.service.logs(args[0], tail, limit))

    _READS_BODY = frozenset({_submit, _dry_run})

    def _shutdown(self, args: list[str]) -> _Reply:
        reply = _json_reply({"status": "stopping"}, HTTPStatus.ACCEPTED)
        # Set after the reply is out, so the client hears back before the service goes away.
        return replace(reply, after=self.server.shutdown_requested.set)

    # --- the web page ----------------------------------------------------------------------------

    def _page(self, args: list[str]) -> _Reply:
        session = self._session()
        if session is None:
            return _html_reply(page.login_needed(), HTTPStatus.UNAUTHORIZED)
        return _html_reply(page.index(session.csrf))

    def _login(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query)
        code = (query.get("code") or [""])[-1]
        redeemed = self.server.sessions.redeem(code) if code else None
        if redeemed is None:
            return _html_reply(page.login_needed(used=bool(code)), HTTPStatus.UNAUTHORIZED)
        secret, _ = redeemed
        cookie = (
            f"{auth.cookie_name(self.server.server_port)}={secret}; "
            "HttpOnly; SameSite=Strict; Path=/"
        )
        return _Reply(
            HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie}
        )

    def _new_login_code(self, args: list[str]) -> _Reply:
        code = self.server.sessions.new_code()
        host, port = self.server.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        url = f"http://{host}:{port}{auth.LOGIN_PATH}?code={quote(code)}"
        return _json_reply({"code": code, "url": url}, HTTPStatus.CREATED)

    def _revoke_sessions(self, args: list[str]) -> _Reply:
        codes, sessions = self.server.sessions.revoke()
        return _json_reply({"codes": codes, "sessions": sessions})

    def _static(self, args: list[str]) -> _Reply:
        found = page.static_file(args[0])
        if found is None:
            raise _HttpError(HTTPStatus.NOT_FOUND, f"no such file: {args[0]}")
        body, content_type = found
        return _Reply(HTTPStatus.OK, body, content_type)

    # Routes that never call the service answer from the loop: /healthz stays quick however
    # many requests wait for the pool.
    _ON_LOOP = frozenset({_healthz, _static})

    def _dashboard(self, method: str, *args: str) -> Any:
        view = getattr(self.server.service, method, None)
        if view is None:
            raise _HttpError(HTTPStatus.NOT_IMPLEMENTED, f"this service has no {method} view")
        return view(*args)

    def _timeline(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        if "window" not in query:
            return _json_reply(self._dashboard("timeline"))
        window = _query_count(query, "window", minimum=1, maximum=MAX_TIMELINE_WINDOW_S)
        return _json_reply(self._dashboard("timeline", window))

    def _speed(self, args: list[str]) -> _Reply:
        return _json_reply(self._dashboard("job_speed", args[0]))

    def _usage(self, args: list[str]) -> _Reply:
        return _json_reply(self._dashboard("usage"))

    def _usage_history(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        window = MAX_USAGE_WINDOW_S
        if "window" in query:
            window = _query_count(query, "window", minimum=1, maximum=MAX_USAGE_WINDOW_S)
        return _json_reply(self._dashboard("usage_history", window))

    _ROUTES: tuple[tuple[tuple[str, ...], Mapping[str, Route]], ...] = (
        (("",), {"GET": _page}),
        (("login",), {"GET": _login}),
        (("login-codes",), {"POST": _new_login_code}),
        (("sessions",), {"DELETE": _revoke_sessions}),
        (("static", "{id}"), {"GET": _static}),
        (("healthz",), {"GET": _healthz}),
        (("metrics",), {"GET": _metrics}),
        (("jobs",), {"GET": _list_jobs, "POST": _submit}),
        (("jobs", "dry-run"), {"POST": _dry_run}),  # before jobs/{id}: no job has this id
        (("jobs", "{id}"), {"GET": _get_job, "DELETE": _cancel}),
        (("jobs", "{id}", "detail"), {"GET": _job_detail}),
        (("jobs", "{id}", "logs"), {"GET": _logs}),
        (("jobs", "{id}", "speed"), {"GET": _speed}),
        (("status",), {"GET": _status}),
        (("timeline",), {"GET": _timeline}),
        (("usage",), {"GET": _usage}),
        (("usage", "history"), {"GET": _usage_history}),
        (("shutdown",), {"POST": _shutdown}),
    )
    # Open to anyone on this machine (still only under a loopback Host): health, metrics, the
    # sign-in itself, the page's script and styles, and the page, which checks its own session.
    _OPEN_PATHS = frozenset({("healthz",), ("metrics",), ("login",), ("",)})
    # Only for holders of the API token, never for a browser session.
    _TOKEN_ONLY = frozenset({("shutdown",), ("login-codes",), ("sessions",)})
    _SAFE_METHODS = frozenset({"GET", "HEAD"})

    # --- mechanics -------------------------------------------------------------------------------

    def _failure(self, exc: Exception) -> _Reply:
        """The reply to ``exc``; called in its ``except`` block (tracebacks are logged)."""
        if isinstance(exc, _HttpError):
            return _json_reply({"error": str(exc)}, exc.status, exc.headers)
        if isinstance(exc, InputError):
            return _json_reply(
                {
                    "error": str(exc),
                    "reason": exc.reason,
                    "source": exc.source,
                    "line": exc.line,
                    "field": exc.field,
                },
                HTTPStatus.BAD_REQUEST,
            )
        if isinstance(exc, UnknownJobError):
            return _json_reply({"error": str(exc), "job": exc.job_id}, HTTPStatus.NOT_FOUND)
        if isinstance(exc, StoreUnavailableError):
            # The call changed nothing and may succeed later (a full disk, a held lock).
            return _json_reply(
                {"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE, {"Retry-After": "5"}
            )
        self._log_traceback()
        if isinstance(exc, QoschedError):
            # Raised on purpose, so its message is meant for people; still a failure of ours.
            return _json_reply({"error": str(exc)}, HTTPStatus.INTERNAL_SERVER_ERROR)
        return _json_reply(
            {"error": "internal error in the qosched service; see its log"},
            HTTPStatus.INTERNAL_SERVER_ERROR,
        )

    def _resolve(self) -> tuple[Route, list[str]]:
        """The route and its arguments, once the request's headers pass every check."""
        limits = self.server.limits
        # h11 holds a head that has not ended to max_header_bytes; one that came in whole in a
        # single read is measured here.
        if self.headers.size + len(self.path) > limits.max_header_bytes:
            raise _HttpError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"the request line and headers exceed {limits.max_header_bytes} bytes",
                {"Connection": "close"},
            )
        if len(self.headers) > self.server.limits.max_header_count:
            raise _HttpError(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"more than {self.server.limits.max_header_count} header lines",
                {"Connection": "close"},
            )
        if len(self.headers.get_all("Host")) > 1:
            # HTTP requires a 400 here: proxies and servers may each read a different one.
            raise _HttpError(HTTPStatus.BAD_REQUEST, "more than one Host header")
        if self.server.check_host and not auth.host_allowed(
            self.headers.get("Host"), self.server.server_port
        ):
            raise _HttpError(
                HTTPStatus.FORBIDDEN,
                "the Host header must name this machine's loopback address (127.0.0.1, [::1] "
                "or localhost) and the service's port",
            )
        if self.command not in _KNOWN_METHODS:
            raise _HttpError(
                HTTPStatus.NOT_IMPLEMENTED,
                f"unsupported method {self.command!r}",
                {"Connection": "close"},
            )
        path = urlsplit(self.path).path
        parts = tuple(unquote(part) for part in path.strip("/").split("/"))
        if not (parts in self._OPEN_PATHS or (len(parts) == 2 and parts[0] == "static")):
            self._authorize(parts)
        for pattern, methods in self._ROUTES:
            args = _match(pattern, parts)
            if args is None:
                continue
            route = methods.get(self.command)
            if route is None:
                allowed = ", ".join(methods)
                raise _HttpError(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    f"{self.command} is not allowed on {path}; use {allowed}",
                    {"Allow": allowed},
                )
            return route, args
        raise _HttpError(HTTPStatus.NOT_FOUND, f"no such route: {self.command} {path}")

    def _authorize(self, parts: tuple[str, ...]) -> None:
        """The API token, or (except for ``_TOKEN_ONLY`` routes) the page's session cookie,
        with its CSRF token on a request that changes something; _HttpError otherwise."""
        if self.headers.get("Authorization") is not None or parts in self._TOKEN_ONLY:
            self._check_token()
            return
        session = self._session()
        if session is None:
            self._check_token()  # raises the 401 that says how to authenticate
            return
        if self.command in self._SAFE_METHODS:
            return
        origin = self.headers.get("Origin")
        if origin is not None and (
            not self.server.check_host or not auth.origin_allowed(origin, self.server.server_port)
        ):
            raise _HttpError(HTTPStatus.FORBIDDEN, f"requests from {origin} are refused")
        if not auth.csrf_matches(session, self.headers.get(auth.CSRF_HEADER)):
            raise _HttpError(
                HTTPStatus.FORBIDDEN,
                f"missing or wrong {auth.CSRF_HEADER} header: a signed-in page sends it with "
                "every request that changes something",
            )

    def _session(self) -> auth.Session | None:
        """The session the request's cookie opens, if any."""
        wanted = auth.cookie_name(self.server.server_port)
        # Split by hand: other local apps' cookies ride along (browsers share them between a
        # host's ports), and http.cookies stops at the first one it finds malformed.
        for header in self.headers.get_all("Cookie") or ():
            for pair in header.split(";"):
                name, _, value = pair.strip().partition("=")
                if name == wanted:
                    return self.server.sessions.session(value.strip().strip('"'))
        return None

    def _check_token(self) -> None:
        scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
        given = credentials.strip().encode("utf-8", errors="replace")
        # compare_digest runs in time independent of where the first difference is.
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self.server.token):
            raise _HttpError(
                HTTPStatus.UNAUTHORIZED,
                "missing or wrong API token; send 'Authorization: Bearer <token>' with the "
                "token from the service home",
                {"WWW-Authenticate": 'Bearer realm="qosched"'},
            )

    async def _read_body(self, receive: Any) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        if not length_text.strip().isdecimal():
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length_text!r}")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            # Read (and dropped) so the client sees the 413 rather than a connection reset.
            if length <= _MAX_DRAIN_BYTES:
                await self._receive_all(receive, keep=False)
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body is {length} bytes; at most {MAX_BODY_BYTES} are accepted",
            )
        return await self._receive_all(receive, keep=True)

    async def _drain(self, receive: Any) -> None:
        """Read and drop a body that is refused unread, if it is not too big, so the client
        (which may send all of it before it reads) sees the reply rather than a reset."""
        length_text = self.headers.get("Content-Length", "").strip()
        if not self.body_unread or self.body_read_started or not length_text.isdecimal():
            return  # nothing to read, or a read already given its time (a 408)
        if int(length_text) <= _MAX_DRAIN_BYTES:
            with contextlib.suppress(_HttpError):  # too slow: closed after the reply
                await self._receive_all(receive, keep=False)

    async def _receive_all(self, receive: Any, *, keep: bool) -> bytes:
        """The body (or, without ``keep``, nothing: it is read and dropped) within the body
        deadline: a 408 and the connection closed when it does not arrive in time. h11 holds
        the client to its Content-Length."""
        self.body_read_started = True
        limit = self.server.limits.body_timeout_s
        body = bytearray()
        try:
            async with asyncio.timeout(limit):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _ClientGone
                    if keep:
                        body += message.get("body", b"")
                    if not message.get("more_body", False):
                        self.body_unread = False
                        return bytes(body)
        except TimeoutError:
            raise _HttpError(
                HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {limit} s"
            ) from None

    async def send(self, send: Any, reply: _Reply) -> None:
        headers = {
            "Content-Type": reply.content_type,
            "Cache-Control": "no-store",
            # The login URL carries a code: no page of the service tells another site its
            # address.
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
        }
        if reply.stream is None:
            headers["Content-Length"] = str(len(reply.body))
        if reply.html:
            headers["Content-Security-Policy"] = page.CONTENT_SECURITY_POLICY
            headers["X-Frame-Options"] = "DENY"
        headers.update(reply.headers)
        if self.body_unread:
            # What is left of its body must not wait on the connection, nor hold it open.
            headers["Connection"] = "close"
        await send(
            {
                "type": "http.response.start",
                "status": int(reply.status),
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
            }
        )
        if reply.stream is not None:
            await self._send_stream(send, reply.stream)
        else:
            await send({"type": "http.response.body", "body": reply.body})  # none for HEAD
        if reply.status >= 400:
            # Successful requests are not logged: `qosched status --watch` polls every second.
            line = json.dumps(f"{self.command} {self._logged_path()}")
            sys.stderr.write(f"qosched api: {self.client} {line} {int(reply.status)}\n")

    async def _send_stream(self, send: Any, stream: Callable[[int], tuple[bytes, int]]) -> None:
        loop = asyncio.get_running_loop()
        offset = 0
        while True:
            try:
                data, offset = await loop.run_in_executor(self.server.pool, stream, offset)
            except Exception:  # the headers are out: all that is left is to end it short
                self._log_traceback()
                data = b""
            await send({"type": "http.response.body", "body": data, "more_body": bool(data)})
            if not data:
                return

    def _logged_path(self) -> str:
        """The path without its query: a login code travels in one, and no log holds a
        secret."""
        return urlsplit(self.path).path

    def _log_traceback(self) -> None:
        sys.stderr.write(f"qosched api: {self.command} {self._logged_path()} failed:\n")
        traceback.print_exc(file=sys.stderr)


def _query_count(
    query: Mapping[str, list[str]],
    name: str,
    *,
    minimum: int = 0,
    maximum: int = COUNT_LIMIT - 1,
) -> int:
    """A whole-number query parameter (the last one given) within bounds; 400 naming it."""
    text = query[name][-1]
    if not (text.isascii() and text.isdecimal()) or len(text) > 20:
        raise InputError(f"expected a whole number >= {minimum}, got {text!r}", field=name)
    return check_count(int(text), field=name, minimum=minimum, maximum=maximum)


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> list[str] | None:
    if len(pattern) != len(parts):
        return None
    args: list[str] = []
    for expected, part in zip(pattern, parts, strict=True):
        if expected == "{id}":
            if not part:
                return None
            args.append(part)
        elif expected != part:
            return None
    return args
