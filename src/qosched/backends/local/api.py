"""The local service's HTTP API: what a service offers (``Service``) and the server in front of it.

Routes (JSON unless said otherwise; every one but ``GET /metrics`` and ``GET /healthz`` needs
``Authorization: Bearer <token>``):

=========================  ====================================================================
``POST /jobs``             body: a TrainingJob spec (YAML, UTF-8); header ``X-Qosched-Source``:
                           its file name, percent-encoded, for error messages -> 201, the job
``GET /jobs``              every job, in submission order
``GET /jobs/{id}``         one job
``GET /jobs/{id}/logs``    its output as ``text/plain``; ``?tail=N`` keeps the last N lines
``DELETE /jobs/{id}``      cancel it -> the job
``POST /shutdown``         ask the service to stop -> 202
``GET /metrics``           Prometheus text exposition format 0.0.4
``GET /healthz``           ``{"status": "ok", "pid": ...}``
=========================  ====================================================================

Errors are ``{"error": message}``: 400 bad input (with ``reason``, ``source``, ``line``,
``field`` when known), 401 no or wrong token, 404 unknown job or route, 405 wrong method,
411 no ``Content-Length``, 413 a body over 1 MiB, 500 a failure of the service.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from qosched.backends.local.store import UnknownJobError
from qosched.core.errors import InputError, QoschedError

MAX_BODY_BYTES = 1 << 20
# A body this much over the limit is still read (and dropped) so the client sees the 413 rather
# than a connection reset; a bigger one is cut off.
_MAX_DRAIN_BYTES = 8 * MAX_BODY_BYTES
SOURCE_HEADER = "X-Qosched-Source"
DEFAULT_SOURCE = "<request>"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("met", "missed", "failed", "cancelled", "declined")


class Service(Protocol):
    """What the API serves. Each method is called from an HTTP handler thread, possibly several
    at once, so an implementation must be thread-safe.

    A job is a JSON-ready dict with the keys ``id, name, state, submitted_at, deadline_at,
    started_at, finished_at, iterations, iterations_done, cpus`` (list of core ids),
    ``predicted_finish_at`` (float or None), ``predicted_finish_band`` ([lo, hi] or None),
    ``best_effort, guaranteed, attempts, error``; times are Unix seconds or None.
    """

    def submit(self, spec_text: str, source: str) -> dict[str, Any]:
        """Validate a YAML spec (``source`` names it in errors), queue it, return the new job.

        Raises ``InputError`` naming the field when the spec is bad.
        """
        ...

    def jobs(self) -> list[dict[str, Any]]:
        """Every job, in submission order."""
        ...

    def job(self, job_id: str) -> dict[str, Any]:
        """One job; raises ``UnknownJobError`` if there is none with this id."""
        ...

    def logs(self, job_id: str, tail_lines: int | None = None) -> str:
        """The job's output so far, only its last ``tail_lines`` lines when given.

        Raises ``UnknownJobError``.
        """
        ...

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Stop the job for good and return it; ``UnknownJobError`` if there is none,
        ``InputError`` if it has already finished."""
        ...

    def metrics(self) -> Metrics:
        """A snapshot for ``GET /metrics``."""
        ...


@dataclass(frozen=True)
class Metrics:
    capacity_cpus: int
    queued: int  # jobs waiting for CPUs (queued or preempted)
    running: int
    allocated_cpus: dict[str, int] = field(default_factory=dict)  # job id -> cores held now
    outcomes: dict[str, int] = field(default_factory=dict)  # OUTCOMES -> finished jobs


# --- Prometheus text format ----------------------------------------------------------------------

_GAUGES = (
    ("qosched_queue_length", "Jobs waiting for CPUs (queued or preempted).", "queued"),
    ("qosched_running_jobs", "Jobs running now.", "running"),
    ("qosched_capacity_cpus", "CPU cores the service schedules.", "capacity_cpus"),
)
_ALLOCATED = "qosched_allocated_cpus"
_OUTCOMES_TOTAL = "qosched_job_outcomes_total"


def render_metrics(metrics: Metrics) -> str:
    """``metrics`` in the Prometheus text exposition format 0.0.4."""
    lines: list[str] = []
    for name, help_text, attribute in _GAUGES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines.append(f"{name} {int(getattr(metrics, attribute))}")
    lines += [
        f"# HELP {_ALLOCATED} CPU cores each running job holds now.",
        f"# TYPE {_ALLOCATED} gauge",
    ]
    for job_id in sorted(metrics.allocated_cpus):
        lines.append(
            f'{_ALLOCATED}{{job="{_escape_label(job_id)}"}} {int(metrics.allocated_cpus[job_id])}'
        )
    lines += [
        f"# HELP {_OUTCOMES_TOTAL} Finished jobs by outcome.",
        f"# TYPE {_OUTCOMES_TOTAL} counter",
    ]
    extra = sorted(set(metrics.outcomes) - set(OUTCOMES))
    for outcome in (*OUTCOMES, *extra):
        count = int(metrics.outcomes.get(outcome, 0))
        lines.append(f'{_OUTCOMES_TOTAL}{{outcome="{_escape_label(outcome)}"}} {count}')
    return "\n".join(lines) + "\n"


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_metrics(text: str) -> Metrics:
    """Read back what ``render_metrics`` wrote (the subset of the format it uses)."""
    gauges: dict[str, int] = {}
    allocated: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line.strip())
        if match is None:
            raise QoschedError(f"metrics line {number}: not a Prometheus sample: {line!r}")
        name, label_text, value_text = match.groups()
        try:
            value = int(float(value_text))
        except ValueError as exc:
            raise QoschedError(f"metrics line {number}: bad value {value_text!r}") from exc
        labels = _parse_labels(label_text or "", number)
        if name == _ALLOCATED:
            allocated[labels["job"]] = value
        elif name == _OUTCOMES_TOTAL:
            outcomes[labels["outcome"]] = value
        else:
            gauges[name] = value
    missing = [name for name, _, _ in _GAUGES if name not in gauges]
    if missing:
        raise QoschedError(f"metrics: missing {', '.join(missing)}")
    values = {attribute: gauges[name] for name, _, attribute in _GAUGES}
    return Metrics(**values, allocated_cpus=allocated, outcomes=outcomes)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _parse_labels(text: str, number: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            raise QoschedError(f"metrics line {number}: bad labels {text!r}")
        raw = match.group(2)
        labels[match.group(1)] = re.sub(
            r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), raw
        )
        position = match.end()
    return labels


# --- the server ----------------------------------------------------------------------------------


class ApiServer:
    """A running API server; ``close()`` stops it. Returned by ``serve``."""

    def __init__(self, httpd: _HttpServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def shutdown_requested(self) -> threading.Event:
        """Set by ``POST /shutdown``."""
        return self._httpd.shutdown_requested

    def close(self) -> None:
        """Stop accepting requests and free the port (requests in flight may still finish)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

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
) -> ApiServer:
    """Serve ``service`` on ``host:port`` (0: any free port) from a background thread.

    Only a loopback address is accepted unless ``allow_remote``: the API runs jobs as the user
    who started it, and the token travels in clear text. ``POST /shutdown`` sets
    ``shutdown_event`` (a new one if not given), exposed as ``ApiServer.shutdown_requested``.
    ``close()`` takes up to ``poll_interval_s`` to stop the serving thread.
    """
    if not token:
        raise InputError("the API token must not be empty", field="token")
    if not allow_remote and not is_loopback(host):
        raise InputError(
            f"refusing to listen on {host!r}, which is not a loopback address: anyone who can "
            "reach it could try the token, which travels unencrypted; pass allow_remote=True "
            "to do it anyway",
            field="host",
        )
    server_class = _HttpServer6 if ":" in host else _HttpServer
    try:
        httpd = server_class((host, port), _Handler)
    except OSError as exc:
        raise QoschedError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    httpd.service = service
    httpd.token = token.encode()
    httpd.shutdown_requested = shutdown_event if shutdown_event is not None else threading.Event()
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": poll_interval_s},
        name="qosched-api",
        daemon=True,
    )
    thread.start()
    return ApiServer(httpd, thread)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    service: Service
    token: bytes
    shutdown_requested: threading.Event


class _HttpServer6(_HttpServer):
    address_family = socket.AF_INET6


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
    after: Callable[[], object] | None = None  # run once the reply is sent


def _json_reply(
    value: Any, status: HTTPStatus = HTTPStatus.OK, headers: Mapping[str, str] | None = None
) -> _Reply:
    # allow_nan=False: NaN is not JSON; a service that produces it gets a 500, not a broken client.
    data = json.dumps(value, allow_nan=False).encode()
    return _Reply(status, data, "application/json", dict(headers or {}))


def _text_reply(text: str, content_type: str = "text/plain; charset=utf-8") -> _Reply:
    return _Reply(HTTPStatus.OK, text.encode("utf-8"), content_type)


Route = Callable[["_Handler", list[str]], _Reply]


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    server_version = "qosched"
    sys_version = ""
    timeout = 30  # seconds a client may take to send its request

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    # --- routes ----------------------------------------------------------------------------------

    def _healthz(self, args: list[str]) -> _Reply:
        return _json_reply({"status": "ok", "pid": os.getpid()})

    def _metrics(self, args: list[str]) -> _Reply:
        return _text_reply(render_metrics(self.server.service.metrics()), PROMETHEUS_CONTENT_TYPE)

    def _list_jobs(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.jobs())

    def _submit(self, args: list[str]) -> _Reply:
        body = self._read_body()
        source = unquote(self.headers.get(SOURCE_HEADER, "") or "") or DEFAULT_SOURCE
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"the spec is not UTF-8 text: {exc.reason}", source=source) from exc
        return _json_reply(self.server.service.submit(text, source), HTTPStatus.CREATED)

    def _get_job(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.job(args[0]))

    def _cancel(self, args: list[str]) -> _Reply:
        return _json_reply(self.server.service.cancel(args[0]))

    def _logs(self, args: list[str]) -> _Reply:
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        tail: int | None = None
        if "tail" in query:
            text = query["tail"][-1]
            if not text.isdecimal():
                raise InputError(f"expected a whole number >= 0, got {text!r}", field="tail")
            tail = int(text)
        return _text_reply(self.server.service.logs(args[0], tail))

    def _shutdown(self, args: list[str]) -> _Reply:
        reply = _json_reply({"status": "stopping"}, HTTPStatus.ACCEPTED)
        # Set after the reply is out, so the client hears back before the service goes away.
        return replace(reply, after=self.server.shutdown_requested.set)

    _ROUTES: tuple[tuple[tuple[str, ...], Mapping[str, Route]], ...] = (
        (("healthz",), {"GET": _healthz}),
        (("metrics",), {"GET": _metrics}),
        (("jobs",), {"GET": _list_jobs, "POST": _submit}),
        (("jobs", "{id}"), {"GET": _get_job, "DELETE": _cancel}),
        (("jobs", "{id}", "logs"), {"GET": _logs}),
        (("shutdown",), {"POST": _shutdown}),
    )
    _OPEN = frozenset({("GET", ("healthz",)), ("GET", ("metrics",))})

    # --- mechanics -------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        try:
            reply = self._handle()
        except _HttpError as exc:
            reply = _json_reply({"error": str(exc)}, exc.status, exc.headers)
        except InputError as exc:
            reply = _json_reply(
                {
                    "error": str(exc),
                    "reason": exc.reason,
                    "source": exc.source,
                    "line": exc.line,
                    "field": exc.field,
                },
                HTTPStatus.BAD_REQUEST,
            )
        except UnknownJobError as exc:
            reply = _json_reply({"error": str(exc), "job": exc.job_id}, HTTPStatus.NOT_FOUND)
        except QoschedError as exc:
            # Raised on purpose, so its message is meant for people; still a failure of ours.
            self._log_traceback()
            reply = _json_reply({"error": str(exc)}, HTTPStatus.INTERNAL_SERVER_ERROR)
        except Exception:
            self._log_traceback()
            reply = _json_reply(
                {"error": "internal error in the qosched service; see its log"},
                HTTPStatus.INTERNAL_SERVER_ERROR,
            )
        self._send(reply)
        if reply.after is not None:
            reply.after()

    def _handle(self) -> _Reply:
        path = urlsplit(self.path).path
        parts = tuple(unquote(part) for part in path.strip("/").split("/"))
        if (self.command, parts) not in self._OPEN:
            self._check_token()
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
            return route(self, args)
        raise _HttpError(HTTPStatus.NOT_FOUND, f"no such route: {self.command} {path}")

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

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        if not length_text.strip().isdecimal():
            raise _HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length_text!r}")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            if length <= _MAX_DRAIN_BYTES:
                self._drain(length)
            raise _HttpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body is {length} bytes; at most {MAX_BODY_BYTES} are accepted",
            )
        body = self.rfile.read(length)
        if len(body) != length:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "the body ended before its Content-Length")
        return body

    def _drain(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                return
            length -= len(chunk)

    def _send(self, reply: _Reply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply.body)

    def _log_traceback(self) -> None:
        sys.stderr.write(f"qosched api: {self.command} {self.path} failed:\n")
        traceback.print_exc(file=sys.stderr)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Successful requests are not logged: `qosched status --watch` polls every second.
        if isinstance(code, int) and code >= 400:
            super().log_request(code, size)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"qosched api: {self.address_string()} {format % args}\n")


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
