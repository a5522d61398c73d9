"""The API's HTTP transport: an ASGI app served by uvicorn (its pure-Python h11 protocol) on
one event loop in one background thread, with the limits a service open to every local user
needs before anyone has authenticated.

``Limits`` (the defaults, each a field):

- at most ``max_connections`` open connections (default: 512, or half the process's
  file-descriptor soft limit if that is less; ``serve`` raises the soft limit to the hard one
  first). A connection past the cap closes the oldest connection that has no request in
  progress (idle, or still sending its headers); if every one is busy, the new one is closed.
  The other half of the descriptors stays with the service, so its log, progress and database
  files never meet ``EMFILE`` however many clients connect. asyncio accepts up to
  ``accept_burst`` connections (a sixteenth of the cap) at once before any is seen, and a
  closed one's descriptor is freed on the loop's next round: the cap is overrun for a moment
  by two or three bursts at most, well inside the half kept back;
- a request's headers must arrive in full within ``header_timeout_s`` (10 s) of the connection
  opening or the previous reply (slowloris), or the connection is closed with a 408;
- at most ``max_header_bytes`` (16 KiB) of request line and headers, else a 431 and the
  connection closed; at most ``max_header_count`` (100) header lines, else a 431;
- a body must arrive in full within ``body_timeout_s`` (30 s), else a 408 (checked by the app);
- an idle kept-alive connection is closed after ``keep_alive_s`` (5 s);
- the service is called from a pool of ``workers`` (8) threads: a slow call (SQLite, a log
  read) never blocks the loop, and no number of clients adds threads to the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    import resource
except ImportError:  # not on Windows: there the limit is left as it is
    resource = None  # type: ignore[assignment]

#: The most connections served at once whatever the descriptor limit.
DEFAULT_MAX_CONNECTIONS = 512
# Connections the kernel holds for us until they are accepted.
_LISTEN_QUEUE = 1024
# How long close() lets requests in flight finish before their connections are cut.
_GRACE_S = 2.0
# Uvicorn's own notes ("Invalid HTTP request received.") would let any local user fill the
# service's log; errors still get through.
_log = logging.getLogger("qosched.api.http")
_log.setLevel(logging.ERROR)

# h11's words for two refusals, said as the rest of the API says them.
_H11_REASONS = {
    "Found multiple Host: headers": "more than one Host header",
    "Missing mandatory Host: header": "no Host header",
}

#: An ASGI 3 application: ``await app(scope, receive, send)``.
App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may take of the server; see the module's docstring."""

    max_connections: int | None = None  # None: DEFAULT_MAX_CONNECTIONS or half the fd limit
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_header_bytes: int = 16 * 1024
    max_header_count: int = 100
    workers: int = 8

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("max_header_bytes", "max_header_count", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_connections is not None and self.max_connections < 2:
            raise ValueError(f"Limits.max_connections must be >= 2, got {self.max_connections}")

    def connection_cap(self, fd_limit: int | None) -> int:
        if self.max_connections is not None:
            return self.max_connections
        if fd_limit is None:
            return DEFAULT_MAX_CONNECTIONS
        return max(2, min(DEFAULT_MAX_CONNECTIONS, fd_limit // 2))


def accept_burst(cap: int) -> int:
    """How many connections the kernel queues for us, and asyncio accepts in one go."""
    return max(4, min(128, cap // 16))


def raise_fd_limit() -> int | None:
    """Raise this process's soft limit on open files to its hard limit; the soft limit now
    (None where there is none to read)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


class _Guard:
    """The connections of one server, oldest first, and the cap on their number."""

    def __init__(self, cap: int, limits: Limits) -> None:
        self.cap = cap
        self.limits = limits
        self.open: dict[_Protocol, None] = {}  # insertion order: oldest first

    def admit(self, newcomer: _Protocol) -> bool:
        """Make room for ``newcomer`` (already counted) by closing the oldest connection with
        no request in progress; False when every one is busy."""
        if len(self.open) <= self.cap:
            return True
        for connection in self.open:
            if connection is not newcomer and not connection.busy():
                connection.evict()
                return True
        return False


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a cap on connections and a deadline on request heads."""

    guard: _Guard  # set on the per-server subclass made by ``Server``

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _log
        self._head_timer: asyncio.TimerHandle | None = None
        self._timed_cycle: Any = None  # the cycle before the head being waited for
        # h11's reason for refusing a request, which uvicorn does not pass on.
        self._protocol_error: h11.RemoteProtocolError | None = None
        self._h11_next_event = self.conn.next_event
        self.conn.next_event = self._next_event  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.guard.open[self] = None
        if not self.guard.admit(self):
            self.evict()
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.open.pop(self, None)
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not self._timed_cycle:  # a new request's head is in
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        finished = self.cycle
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is finished:
            self._timed_cycle = finished
            self._arm_head_timer()

    def busy(self) -> bool:
        """A request is in progress: its head is in and its reply not yet sent."""
        return self.cycle is not None and not self.cycle.response_complete

    def evict(self) -> None:
        self._cancel_head_timer()
        self.guard.open.pop(self, None)
        self.transport.abort()  # no lingering close: freed on the loop's next round

    def send_400_response(self, msg: str) -> None:
        # Called when h11 refuses what came in; the service's form, with h11's reason.
        error = self._protocol_error
        status = error.error_status_hint if error is not None else 400
        reason = str(error) if error is not None else msg
        if status == 431:
            reason = (
                f"the request line and headers exceed {self.guard.limits.max_header_bytes} bytes"
            )
        else:
            reason = _H11_REASONS.get(reason, f"malformed HTTP request: {reason}")
        self._answer_and_close(status, reason)

    def _next_event(self) -> Any:
        try:
            return self._h11_next_event()
        except h11.RemoteProtocolError as exc:
            self._protocol_error = exc
            raise

    def _answer_and_close(self, status: int, message: str) -> None:
        body = error_body(message)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            (b"connection", b"close"),
        ]
        with contextlib.suppress(h11.LocalProtocolError):
            output = self.conn.send(h11.Response(status_code=status, headers=headers))
            output += self.conn.send(h11.Data(data=body))
            output += self.conn.send(h11.EndOfMessage())
            self.transport.write(output)
        self.transport.close()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(
            self.guard.limits.header_timeout_s, self._head_timed_out
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.busy():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            limit = self.guard.limits.header_timeout_s
            self._answer_and_close(408, f"the request's headers did not arrive within {limit} s")
        else:
            self.transport.close()


class Server:
    """``app`` served on the listening socket ``sock`` from a thread of its own."""

    def __init__(self, app: App, sock: socket.socket, limits: Limits, fd_limit: int | None):
        self.guard = _Guard(limits.connection_cap(fd_limit), limits)
        protocol = type("_ServerProtocol", (_Protocol,), {"guard": self.guard})
        config = uvicorn.Config(
            app,
            http=protocol,
            ws="none",
            lifespan="off",
            loop="asyncio",
            interface="asgi3",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            # asyncio accepts up to this many connections at a time before any of them is
            # seen (and the oldest closed to make room): the cap can be overrun by this much.
            backlog=accept_burst(self.guard.cap),
            timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
            timeout_graceful_shutdown=_GRACE_S,  # type: ignore[arg-type]
            h11_max_incomplete_event_size=limits.max_header_bytes,
        )
        self._uvicorn = uvicorn.Server(config)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="qosched-api", daemon=True)
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def start(self, wait_s: float = 30.0) -> None:
        """Start serving; return once the loop accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the HTTP server did not start: {self._failure!r}")
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish for a moment, then cut the rest."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(stopping.set)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._sock.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()
            self._failure = exc

    async def _serve(self) -> None:
        # uvicorn's startup and state, without its main loop: that one polls for the end every
        # 0.1 s, and its shutdown sleeps as long again, which every close() would wait out.
        server = self._uvicorn
        server.config.load()
        server.lifespan = server.config.lifespan_class(server.config)
        self._stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        await server.on_tick(0)  # the Date header
        await server.startup(sockets=[self._sock])
        # The kernel may queue more than asyncio accepts at once (queued connections take no
        # descriptor of ours): clients past a burst wait in the queue, not on SYN retries.
        self._sock.listen(_LISTEN_QUEUE)
        ticking = asyncio.create_task(self._tick())
        try:
            await self._stopping.wait()
        finally:
            ticking.cancel()
            await self._shutdown()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self._uvicorn.on_tick(0)

    async def _shutdown(self) -> None:
        state = self._uvicorn.server_state
        for listener in self._uvicorn.servers:
            listener.close()
        for connection in list(state.connections):
            with contextlib.suppress(h11.LocalProtocolError):
                connection.shutdown()  # idle ones close now, busy ones after their reply
        deadline = time.monotonic() + _GRACE_S
        while state.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in list(state.tasks):
            task.cancel()
        for connection in list(state.connections):
            connection.transport.abort()
