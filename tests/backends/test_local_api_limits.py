"""What clients who never authenticate can take of the API server: connections, file
descriptors, threads, memory and time (issue 50). The floods run against a server in a process
of its own (``api_process``), so its descriptors and memory are measured alone."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from service_fakes import FakeService

import qosched
from qosched.backends.local.api import serve
from qosched.backends.local.httpd import Limits

pytestmark = [pytest.mark.process, pytest.mark.network]

HERE = Path(__file__).parent


class ApiProcess:
    """``api_process.py`` running; ``ask`` sends it a command and reads its answer."""

    def __init__(self, fd_limit: int | None) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(qosched.__file__).parents[1]), str(HERE), env.get("PYTHONPATH", "")]
        )
        argv = [sys.executable, str(HERE / "api_process.py")]
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            argv + ([str(fd_limit)] if fd_limit is not None else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=env,
            text=True,
        )
        hello = json.loads(self._line())
        self.port: int = hello["port"]

    def _line(self) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        assert ready, "the API process did not answer within 60 s"
        line = self.process.stdout.readline()
        assert line, f"the API process ended (exit status {self.process.poll()})"
        return line

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return json.loads(self._line())

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.errors.close()


@pytest.fixture
def api_process(request: pytest.FixtureRequest) -> Iterator[ApiProcess]:
    process = ApiProcess(getattr(request, "param", None))
    try:
        yield process
    finally:
        process.close()


def healthz(port: int, timeout_s: float = 20) -> int | None:
    """The status of ``GET /healthz``, None when no answer came within ``timeout_s``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status
    except OSError:
        return None
    finally:
        connection.close()


def half_sent(port: int) -> socket.socket | None:
    """A connection whose request never ends (None if it could not be opened)."""
    try:
        connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # closed by the server already: it still counts
        connection.sendall(f"GET /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
    return connection


FD_LIMIT = 256


@pytest.mark.parametrize("api_process", [FD_LIMIT], indirect=True)
def test_more_half_sent_connections_than_descriptors_leave_healthz_and_the_services_files(
    api_process: ApiProcess,
) -> None:
    # Before: a thread and a descriptor per connection, no limit: /healthz timed out and the
    # service's own file opens failed with EMFILE.
    # Opened 32 at a time, as an attacker would: one after the other, a server that accepts
    # slowly is let off by its own timeouts.
    with ThreadPoolExecutor(32) as pool:
        flood = list(pool.map(half_sent, [api_process.port] * (FD_LIMIT + 64)))
    try:
        # What a service with a few dozen running jobs opens at once (logs, progress, SQLite).
        answer = api_process.ask("open 64")
        assert answer == {"opened": 64, "error": None, "threads": answer["threads"]}
        # One event loop and a pool of 8: no thread per connection.
        assert answer["threads"] <= 16
        assert healthz(api_process.port) == 200
    finally:
        for connection in flood:
            if connection is not None:
                connection.close()
    # Not even the server's own accept() ran out of descriptors.
    assert "Too many open files" not in api_process.stderr()


def send_big_headers(port: int, lines: int, line_bytes: int) -> str:
    """One connection sending ``lines`` header lines of ``line_bytes`` each and never ending
    its request: ``refused`` (4xx or closed before it was all sent) or ``held`` (all of it
    taken in). The connection is left open, returned to the caller through ``OPEN``."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    OPEN.append(connection)
    line = b"X-Pad: " + b"a" * (line_bytes - 9) + b"\r\n"
    try:
        connection.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        for _ in range(lines):
            connection.sendall(line)
    except (BrokenPipeError, ConnectionResetError):
        return "refused"
    except TimeoutError:
        return "stalled"  # the server stopped reading but kept the connection
    readable, _, _ = select.select([connection], [], [], 0.5)
    if readable:
        try:
            reply = connection.recv(200)
        except ConnectionResetError:
            return "refused"
        if reply == b"" or reply.startswith((b"HTTP/1.1 4", b"HTTP/1.0 4")):
            return "refused"
    return "held"


OPEN: list[socket.socket] = []


def test_a_flood_of_huge_headers_is_refused_and_memory_stays_bounded(
    api_process: ApiProcess,
) -> None:
    # Before: 100 connections of 99 header lines of 64 KB each took the service from 235 MB
    # to 869 MB, before any token was checked.
    before = api_process.ask("rss")["rss_kb"]
    try:
        outcomes = [send_big_headers(api_process.port, 99, 64 * 1024) for _ in range(100)]
        after = api_process.ask("rss")["rss_kb"]
        assert healthz(api_process.port) == 200
    finally:
        while OPEN:
            OPEN.pop().close()
    assert outcomes == ["refused"] * 100
    assert (after - before) / 1024 < 100, f"RSS grew from {before} kB to {after} kB"


def test_headers_over_the_cap_are_a_431_in_the_services_form() -> None:
    with serve(FakeService(), token="t") as server:
        request = (
            f"GET /healthz HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            + "X-Pad: " + "a" * 20_000 + "\r\n\r\n"
        )  # fmt: skip
        answer = exchange(server.port, request.encode())
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 ")
        assert json.loads(body) == {"error": "the request line and headers exceed 16384 bytes"}
        many = "".join(f"X-Line-{n}: 1\r\n" for n in range(101))
        request = f"GET /healthz HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n{many}\r\n"
        head, _, body = exchange(server.port, request.encode()).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 ")
        assert json.loads(body) == {"error": "more than 100 header lines"}


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        return answer


def trickle(port: int, pieces: list[bytes], every_s: float) -> tuple[bytes, int]:
    """Send ``pieces`` one every ``every_s`` seconds, stopping when the server answers or
    closes: what it said, and how many pieces had been sent by then."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        for sent, piece in enumerate(pieces):
            readable, _, _ = select.select([connection], [], [], every_s)
            if readable:
                return whole_answer(connection), sent
            try:
                connection.sendall(piece)
            except OSError:
                return b"", sent
        return whole_answer(connection), len(pieces)


def whole_answer(connection: socket.socket) -> bytes:
    """One answer in full, its head then ``Content-Length`` bytes of body (or what came before
    the close): the server may send the two apart, and one ``recv`` can return between them
    on a busy machine."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    while length is None or len(body) < int(length.group(1)):
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_slow_header_sender_is_cut_off_after_the_deadline() -> None:
    limits = Limits(header_timeout_s=1.0)
    with serve(FakeService(), token="t", limits=limits) as server:
        head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        # A byte every 0.1 s for 30 s: each byte came well within any idle timeout.
        pieces = [head.encode()] + [b"X"] * 300
        answer, sent = trickle(server.port, pieces, 0.1)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"headers did not arrive within 1.0 s" in answer
        assert sent < len(pieces)
        # A client that sends its headers in time is served.
        answer, _ = trickle(server.port, [head.encode(), b"\r\n"], 0.2)
        assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_slow_body_is_cut_off_after_the_body_deadline() -> None:
    limits = Limits(body_timeout_s=1.0)
    with serve(FakeService(), token="t", limits=limits) as server:
        head = (
            f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Authorization: Bearer t\r\nContent-Length: 1000\r\n\r\n"
        )
        pieces = [head.encode()] + [b"#"] * 300  # a byte every 0.1 s
        answer, sent = trickle(server.port, pieces, 0.1)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"body did not arrive within 1.0 s" in answer
        assert sent < len(pieces)


def test_connections_past_the_cap_close_the_oldest_idle_one() -> None:
    with serve(FakeService(), token="t", limits=Limits(max_connections=4)) as server:
        assert server.max_connections == 4
        flood = [half_sent(server.port) for _ in range(12)]
        try:
            assert healthz(server.port, timeout_s=10) == 200
            time.sleep(0.2)  # let the server's closes reach this side
            still_open = [c for c in flood if c is not None and not closed(c)]
            assert len(still_open) <= 4
            assert flood[0] not in still_open  # the oldest went first
        finally:
            for connection in flood:
                if connection is not None:
                    connection.close()


def closed(connection: socket.socket) -> bool:
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1) == b""
    except OSError:
        return True


@pytest.mark.parametrize(
    "limits",
    [{"header_timeout_s": 0}, {"max_header_bytes": 0}, {"workers": 0}, {"max_connections": 1}],
    ids=["header-timeout", "header-bytes", "workers", "connections"],
)
def test_limits_out_of_range_are_refused(limits: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(limits))):
        Limits(**limits)


def test_the_connection_cap_leaves_half_the_descriptors_to_the_service() -> None:
    assert Limits().connection_cap(256) == 128
    assert Limits().connection_cap(1 << 20) == 512
    assert Limits().connection_cap(None) == 512
    assert Limits(max_connections=10).connection_cap(256) == 10


def test_a_kept_alive_connection_serves_request_after_request() -> None:
    with serve(FakeService(), token="t", limits=Limits(header_timeout_s=1.0)) as server:
        connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
        try:
            for _ in range(3):
                connection.request("GET", "/jobs", headers={"Authorization": "Bearer t"})
                response = connection.getresponse()
                assert (response.status, response.read()) == (200, b"[]")
                time.sleep(0.6)  # together past the header deadline, each within it
        finally:
            connection.close()


def test_a_refused_requests_body_is_read_so_the_client_sees_the_reply() -> None:
    with serve(FakeService(), token="t") as server:
        connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
        try:
            # More than the server reads ahead for a request: sent in full before the reply
            # is read, as http.client does.
            connection.request("POST", "/jobs", body=b"x" * 200_000)
            response = connection.getresponse()
            assert response.status == 401
            assert "token" in json.loads(response.read())["error"]
            connection.request("GET", "/jobs", headers={"Authorization": "Bearer t"})
            assert connection.getresponse().status == 200  # the same connection, still good
        finally:
            connection.close()


RAISE_PROBE = """\
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))
from service_fakes import FakeService
from qosched.backends.local.api import serve
with serve(FakeService(), token="t") as server:
    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], server.max_connections)
"""


def test_serve_raises_the_open_files_limit_to_the_hard_one_and_sizes_the_cap_from_it() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(qosched.__file__).parents[1]), str(HERE), env.get("PYTHONPATH", "")]
    )
    completed = subprocess.run(
        [sys.executable, "-c", RAISE_PROBE], capture_output=True, text=True, env=env, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["1024", "512"]


class BlockingMetrics(FakeService):
    """``metrics()`` waits until released, counting the calls waiting at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.most_waiting = 0

    def metrics(self) -> Any:
        with self.lock:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            self.release.wait(60)
            return super().metrics()
        finally:
            with self.lock:
                self.waiting -= 1


def test_service_calls_are_bounded_by_the_pool_and_healthz_answers_while_it_is_full() -> None:
    service = BlockingMetrics()
    with serve(service, token="t", limits=Limits(workers=4)) as server:

        def scrape() -> int | None:
            connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
            try:
                connection.request("GET", "/metrics")
                return connection.getresponse().status
            finally:
                connection.close()

        with ThreadPoolExecutor(12) as pool:
            scrapes = [pool.submit(scrape) for _ in range(12)]
            deadline = time.monotonic() + 30
            while service.waiting < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # room for more calls to start, were the pool not bounded
            assert healthz(server.port) == 200
            assert service.most_waiting == 4  # the pool's workers, not one per request
            service.release.set()
            assert [s.result() for s in scrapes] == [200] * 12
