"""Bad specs against the real service behind the real HTTP API: each is a 400 with a message,
nothing is stored, and the service opens again afterwards; the largest allowed job schedules."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_fuzz import documents, dump, spec_texts

from qosched.backends.local.api import ApiServer, serve
from qosched.backends.local.httpd import Limits
from qosched.backends.local.service import LocalService

pytestmark = [pytest.mark.process, pytest.mark.network]

TOKEN = "fuzz-token"


def spec_text(iterations: Any = 40, deadline: str = "10m", extra: str = "") -> str:
    return (
        "apiVersion: qosched/v1\nkind: TrainingJob\nmetadata:\n  name: big\nspec:\n"
        f'  command: ["true"]\n  work: {{iterations: {iterations}}}\n  deadline: {deadline}\n'
        f"  bestEffort: true\n{extra}"
    )


@dataclass
class Served:
    home: Path
    service: LocalService
    server: ApiServer

    def post(self, body: bytes) -> tuple[int, dict[str, Any]]:
        connection = http.client.HTTPConnection(self.server.host, self.server.port, timeout=30)
        try:
            connection.request(
                "POST",
                "/jobs",
                body=body,
                headers={"Authorization": f"Bearer {TOKEN}", "X-Qosched-Source": "job.yaml"},
            )
            response = connection.getresponse()
            status, data = response.status, response.read()
        finally:
            connection.close()
        assert response.getheader("Content-Type") == "application/json", data
        return status, json.loads(data)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Module-wide: submitting never launches a runner (nothing here calls step()).
    home = tmp_path_factory.mktemp("home")
    service = LocalService.open(home, policy="qos")
    server = serve(service, token=TOKEN)
    try:
        yield Served(home, service, server)
    finally:
        server.close()
        service.close()


BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)
REGRESSIONS = [
    ("iterations-401-digits", spec_text(iterations="9" * 401), "spec.work.iterations"),
    ("deadline-400-digits", spec_text(deadline="9" * 400 + "s"), "spec.deadline"),
    ("deadline-offset-past-9999", spec_text(deadline="9999-12-31T23:00:00-12:00"), "spec.deadline"),
    ("billion-laughs", BILLION_LAUGHS, None),
    ("recursive-alias", spec_text(extra="  seed: &s [*s]\n"), None),
    ("5000-deep", spec_text(extra="  seed: " + "[" * 5000 + "]" * 5000 + "\n"), None),
]


@pytest.mark.parametrize(
    ("text", "field"),
    [case[1:] for case in REGRESSIONS],
    ids=[case[0] for case in REGRESSIONS],
)
def test_a_bad_spec_is_a_400_naming_the_source_and_nothing_is_stored(served, text, field):
    before = len(served.service.jobs())
    status, reply = served.post(text.encode())
    assert status == 400, reply
    assert reply["source"] == "job.yaml" and reply["error"].startswith("job.yaml")
    assert reply["field"] == field
    assert len(served.service.jobs()) == before
    LocalService.open(served.home, policy="qos").close()  # the store still opens


def test_the_largest_iterations_are_accepted_by_the_api(served):
    status, reply = served.post(spec_text(iterations=2**53 - 1).encode())
    assert status == 201, reply
    assert reply["iterations"] == 2**53 - 1


_bodies = st.one_of(
    st.binary(max_size=200),
    spec_texts().map(lambda text: text.encode("utf-8", errors="surrogatepass")),
    st.builds(dump, documents(), st.just(True)).map(
        lambda text: text.encode("utf-8", errors="surrogatepass")
    ),
)


@pytest.mark.slow
@given(_bodies)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_any_body_is_a_201_or_a_4xx_with_a_message(served, body):
    status, reply = served.post(body)
    if status == 201:
        assert reply["state"] in ("queued", "declined")
    else:
        assert 400 <= status < 500, reply
        assert isinstance(reply["error"], str) and reply["error"]


@pytest.mark.parametrize("policy", ["qos", "fifo"])
def test_a_job_of_the_largest_iterations_is_scheduled_without_error(tmp_path, policy):
    service = LocalService.open(tmp_path, policy=policy, tick_s=0.1)
    try:
        job = service.submit(spec_text(iterations=2**53 - 1), "big.yaml")
        # A command never seen: qos measures it before judging its deadline.
        assert job.state == ("profiling" if policy == "qos" else "queued")
        service.step()
        service.step()
        described = service.job(job.id)
        json.dumps(described.to_json(), allow_nan=False)  # what GET /jobs/{id} sends
        assert described.state in ("queued", "profiling", "running")
        service.cancel(job.id)
        service.step()
    finally:
        service.stop_runners(grace_s=10)
        service.close()
    LocalService.open(tmp_path, policy=policy).close()


def test_a_body_that_stops_arriving_is_a_408_not_a_failure(
    served: Served, capfd: pytest.CaptureFixture[str]
) -> None:
    limits = Limits(body_timeout_s=0.5)
    with (
        serve(served.service, token=TOKEN, limits=limits) as server,
        socket.create_connection((server.host, server.port), timeout=30) as raw,
    ):
        raw.sendall(
            f"POST /jobs HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\nonly part".encode()
        )
        reply = raw.makefile("rb").read()  # to the end: the connection is closed after it
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"did not arrive within 0.5 s" in reply
    assert "Traceback" not in capfd.readouterr().err


def test_clients_that_hang_up_leave_no_tracebacks(
    served: Served, capfd: pytest.CaptureFixture[str]
) -> None:
    request = f"GET /healthz HTTP/1.1\r\nHost: {served.server.host}:{served.server.port}\r\n\r\n"
    for _ in range(20):
        with socket.create_connection((served.server.host, served.server.port)) as raw:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.sendall(request.encode())  # and gone at once, with a reset
    with socket.create_connection((served.server.host, served.server.port), timeout=30) as raw:
        raw.sendall(request.encode())
        assert raw.makefile("rb").readline().startswith(b"HTTP/1.1 200 ")  # still serving
    time.sleep(0.5)  # the handler threads of the hung-up clients have written what they would
    assert "Traceback" not in capfd.readouterr().err
