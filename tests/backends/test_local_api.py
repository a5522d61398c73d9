"""qosched.backends.local.api and .client: routes, token checks, errors and metrics, against an
in-memory service."""

from __future__ import annotations

import http.client
import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_parser,
)
from prometheus_client.parser import text_string_to_metric_families
from service_fakes import FakeService, Running, running_service, spec_text

from qosched.backends.local import joblog
from qosched.backends.local.api import (
    MAX_BODY_BYTES,
    MAX_LOG_CHUNK,
    PROMETHEUS_CONTENT_TYPE,
    LogChunk,
    ServiceMetrics,
    ServiceStatus,
    is_loopback,
    serve,
)
from qosched.backends.local.client import Client
from qosched.backends.local.jobview import Outcome
from qosched.backends.local.prometheus import exposition
from qosched.backends.local.store import UnknownJobError
from qosched.backends.local.verdict import Verdict
from qosched.cluster.admission import Admission
from qosched.core.errors import InputError, QoschedError

pytestmark = pytest.mark.network


@pytest.fixture
def client(running: Running) -> Client:
    return Client.from_home(running.home)


def call(
    running: Running,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = "",
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPResponse, bytes]:
    """One raw request; ``token=""`` sends the right token, None sends none."""
    connection = http.client.HTTPConnection(running.server.host, running.server.port, timeout=10)
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token or running.token}"
    try:
        connection.request(method, path, body=body, headers=all_headers)
        response = connection.getresponse()
        return response.status, response, response.read()
    finally:
        connection.close()


def submit(running: Running, text: str | None = None, source: str = "job.yaml") -> dict[str, Any]:
    status, _, body = call(
        running,
        "POST",
        "/jobs",
        (text or spec_text()).encode(),
        headers={"X-Qosched-Source": source},
    )
    assert status == 201, body
    return json.loads(body)


# --- the token -----------------------------------------------------------------------------------

PROTECTED = [
    ("GET", "/status"),
    ("GET", "/jobs/j-000001/detail"),
    ("GET", "/jobs/j-000001/logs?offset=0"),
    ("GET", "/jobs"),
    ("POST", "/jobs"),
    ("POST", "/jobs/dry-run"),
    ("GET", "/jobs/j-000001"),
    ("GET", "/jobs/j-000001/logs"),
    ("DELETE", "/jobs/j-000001"),
    ("POST", "/shutdown"),
    ("GET", "/nowhere"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", "Basic dXNlcjpwYXNz", "Bearer", "bearer  "],
    ids=["none", "wrong", "basic", "empty-bearer", "blank"],
)
def test_protected_routes_refuse_a_missing_or_wrong_token(
    running: Running, method: str, path: str, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    status, response, body = call(running, method, path, b"", token=None, headers=headers)
    assert status == 401
    assert response.getheader("WWW-Authenticate", "").startswith("Bearer")
    assert "token" in json.loads(body)["error"]
    assert not running.server.shutdown_requested.is_set()
    assert running.service.jobs() == []


@pytest.mark.parametrize("path", ["/metrics", "/healthz"])
def test_metrics_and_healthz_need_no_token(running: Running, path: str) -> None:
    status, _, _ = call(running, "GET", path, token=None)
    assert status == 200


def test_the_right_token_is_accepted(running: Running) -> None:
    status, response, body = call(running, "GET", "/jobs")
    assert (status, response.getheader("Content-Type"), json.loads(body)) == (
        200,
        "application/json",
        [],
    )


# --- routes --------------------------------------------------------------------------------------


def test_submit_returns_201_and_the_job(running: Running) -> None:
    job = submit(running, spec_text(name="resnet-a", iterations=50), source="specs/a%20b.yaml")
    assert job["id"] == "j-000001"
    assert (job["name"], job["state"], job["iterations"]) == ("resnet-a", "queued", 50)
    assert running.service.submitted_sources == ["specs/a b.yaml"]


def test_submit_without_a_source_header_names_the_request(running: Running) -> None:
    status, _, body = call(running, "POST", "/jobs", b"kind: nope\n")
    assert status == 400
    assert json.loads(body)["source"] == "<request>"


def test_a_dry_run_answers_the_verdict_and_stores_nothing(running: Running) -> None:
    running.service.verdict = Verdict(Admission.DECLINED, "too tight", 1_000_600.0, 600.0)
    text = spec_text(name="tight")
    status, _, body = call(running, "POST", "/jobs/dry-run", text.encode())
    assert (status, json.loads(body)) == (
        200,
        {
            "outcome": "declined",
            "reason": "too tight",
            "earliest_deadline_at": 1_000_600.0,
            "earliest_deadline_in_s": 600.0,
        },
    )
    assert running.service.dry_run_texts == [text]
    assert running.service.jobs() == []


def test_a_dry_run_of_a_bad_spec_is_a_400_naming_the_field(running: Running) -> None:
    text = spec_text().replace("minCpus: 1", "minCpus: 0")
    status, _, body = call(running, "POST", "/jobs/dry-run", text.encode())
    assert (status, json.loads(body)["field"]) == (400, "spec.resources.minCpus")


def test_a_dry_run_only_takes_post(running: Running) -> None:
    status, _, body = call(running, "GET", "/jobs/dry-run")
    assert status == 405 and "use POST" in json.loads(body)["error"]


BAD_SPECS = [
    ("min-cpus", spec_text().replace("minCpus: 1", "minCpus: 0"), "spec.resources.minCpus", 11),
    ("unknown-key", spec_text().replace("  workload: cnn", "  workloud: cnn"), "spec.workloud", 6),
    ("no-deadline", spec_text().replace("  deadline: 10m\n", ""), "spec.deadline", None),
    ("not-yaml", "spec: [unclosed\n", None, 2),
]


@pytest.mark.parametrize(
    ("text", "field", "line"), [case[1:] for case in BAD_SPECS], ids=[c[0] for c in BAD_SPECS]
)
def test_a_bad_spec_is_a_400_naming_the_field(
    running: Running, text: str, field: str | None, line: int | None
) -> None:
    status, response, body = call(
        running, "POST", "/jobs", text.encode(), headers={"X-Qosched-Source": "job.yaml"}
    )
    error = json.loads(body)
    assert status == 400
    assert response.getheader("Content-Type") == "application/json"
    assert (error["source"], error["field"]) == ("job.yaml", field)
    if line is not None:
        assert error["line"] == line
    assert error["error"].startswith("job.yaml")
    if field is not None:
        assert repr(field) in error["error"]
    assert running.service.jobs() == []


def test_a_body_that_is_not_utf8_is_a_400(running: Running) -> None:
    status, _, body = call(running, "POST", "/jobs", b"name: \xff\xfe\n")
    assert status == 400
    assert "UTF-8" in json.loads(body)["error"]


def test_a_body_over_one_mebibyte_is_a_413(running: Running) -> None:
    status, _, body = call(running, "POST", "/jobs", b"#" * (MAX_BODY_BYTES + 1))
    assert status == 413
    assert str(MAX_BODY_BYTES) in json.loads(body)["error"]
    assert running.service.jobs() == []


def test_a_body_without_content_length_is_a_411(running: Running) -> None:
    connection = http.client.HTTPConnection(running.server.host, running.server.port, timeout=10)
    try:
        connection.putrequest("POST", "/jobs")
        connection.putheader("Authorization", f"Bearer {running.token}")
        connection.endheaders()
        assert connection.getresponse().status == 411
    finally:
        connection.close()


def test_jobs_lists_in_submission_order(running: Running) -> None:
    for name in ("first", "second", "third"):
        submit(running, spec_text(name=name))
    status, _, body = call(running, "GET", "/jobs")
    assert status == 200
    assert [job["name"] for job in json.loads(body)] == ["first", "second", "third"]


def test_one_job_by_id(running: Running) -> None:
    job = submit(running)
    status, _, body = call(running, "GET", f"/jobs/{job['id']}")
    assert (status, json.loads(body)) == (200, job)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/jobs/j-999999"),
        ("GET", "/jobs/j-999999/logs"),
        ("DELETE", "/jobs/j-999999"),
        ("GET", "/jobs/%2E%2E%2Fsecret"),
    ],
    ids=["get", "logs", "cancel", "quoted-id"],
)
def test_an_unknown_job_is_a_404(running: Running, method: str, path: str) -> None:
    status, _, body = call(running, method, path)
    assert status == 404
    assert "no job" in json.loads(body)["error"]


def test_an_unknown_route_is_a_404_and_a_wrong_method_a_405(running: Running) -> None:
    assert call(running, "GET", "/jobs/j-000001/nothing")[0] == 404
    status, response, _ = call(running, "PUT", "/jobs")
    assert status == 405
    assert response.getheader("Allow") == "GET, POST"


def test_logs_are_plain_text_and_tail_keeps_the_last_lines(running: Running) -> None:
    job = submit(running)
    running.service.write_log(job["id"], "one\ntwo\nthree\n")
    status, response, body = call(running, "GET", f"/jobs/{job['id']}/logs")
    assert (status, body) == (200, b"one\ntwo\nthree\n")
    assert response.getheader("Content-Type") == "text/plain; charset=utf-8"
    assert call(running, "GET", f"/jobs/{job['id']}/logs?tail=2")[2] == b"two\nthree\n"
    assert call(running, "GET", f"/jobs/{job['id']}/logs?tail=0")[2] == b""


@pytest.mark.parametrize("tail", ["-1", "x", "", "1.5"])
def test_a_bad_tail_is_a_400(running: Running, tail: str) -> None:
    job = submit(running)
    status, _, body = call(running, "GET", f"/jobs/{job['id']}/logs?tail={tail}")
    assert status == 400
    assert json.loads(body)["field"] == "tail"


def test_delete_cancels_and_a_second_delete_is_a_400(running: Running) -> None:
    job = submit(running)
    status, _, body = call(running, "DELETE", f"/jobs/{job['id']}")
    assert (status, json.loads(body)["state"]) == (200, "cancelled")
    status, _, body = call(running, "DELETE", f"/jobs/{job['id']}")
    assert status == 400
    assert "already cancelled" in json.loads(body)["error"]


def test_shutdown_is_a_202_and_sets_the_event(running: Running) -> None:
    status, _, body = call(running, "POST", "/shutdown")
    assert (status, json.loads(body)) == (202, {"status": "stopping"})
    assert running.server.shutdown_requested.wait(5)


def test_healthz_reports_the_process(running: Running) -> None:
    import os

    status, _, body = call(running, "GET", "/healthz", token=None)
    assert (status, json.loads(body)) == (200, {"status": "ok", "pid": os.getpid()})


class Broken(FakeService):
    def jobs(self) -> list[dict[str, Any]]:
        raise RuntimeError("secret internal detail")

    def job(self, job_id: str) -> dict[str, Any]:
        return {"id": job_id, "predicted_finish_at": math.nan}


def test_a_failing_service_is_a_500_with_a_generic_message(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with running_service(tmp_path, Broken()) as running:
        status, _, body = call(running, "GET", "/jobs")
        assert status == 500
        assert "secret" not in body.decode()
        assert "internal error" in json.loads(body)["error"]
        # NaN is not JSON: refused rather than sent.
        assert call(running, "GET", "/jobs/j-000001")[0] == 500
    assert "RuntimeError: secret internal detail" in capfd.readouterr().err


# --- binding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "", "192.168.1.10"])
def test_a_non_loopback_bind_needs_allow_remote(host: str) -> None:
    with pytest.raises(InputError, match="allow_remote=True") as caught:
        serve(FakeService(), host=host, token="t", poll_interval_s=0.01)
    assert caught.value.field == "host"


def test_allow_remote_binds_every_interface() -> None:
    with serve(
        FakeService(), host="0.0.0.0", token="t", poll_interval_s=0.01, allow_remote=True
    ) as server:
        assert server.host == "0.0.0.0"
        assert server.port > 0


def test_an_empty_token_is_refused() -> None:
    with pytest.raises(InputError, match="token"):
        serve(FakeService(), token="")


def test_close_frees_the_port() -> None:
    server = serve(FakeService(), token="t", poll_interval_s=0.01)
    port = server.port
    server.close()
    with serve(FakeService(), port=port, token="t", poll_interval_s=0.01) as again:
        assert again.port == port


def test_serve_uses_the_given_shutdown_event(tmp_path: Path) -> None:
    stop = threading.Event()
    with serve(FakeService(), token="t", poll_interval_s=0.01, shutdown_event=stop) as server:
        Client(server.url, "t").shutdown()
        assert stop.wait(5)


# --- metrics -------------------------------------------------------------------------------------


def scrape(running: Running, accept: str | None = None) -> tuple[str, dict[tuple, float]]:
    """``GET /metrics`` without a token, read by prometheus_client's own parser: the content
    type and every sample as ``{(name, sorted labels): value}``."""
    headers = {} if accept is None else {"Accept": accept}
    status, response, body = call(running, "GET", "/metrics", token=None, headers=headers)
    assert status == 200
    content_type = response.getheader("Content-Type")
    parse = openmetrics_parser if "openmetrics" in content_type else text_string_to_metric_families
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in parse(body.decode())
        for sample in family.samples
    }
    return content_type, samples


def busy_service(running: Running) -> None:
    """Two running jobs (3 cores and 1), one pre-empted, one met, one missed, one cancelled,
    one queued."""
    service = running.service
    jobs = [submit(running, spec_text(name=f"job-{n}")) for n in range(7)]
    service.update(jobs[0]["id"], state="running", cpus=[0, 1, 2])
    service.update(jobs[1]["id"], state="running", cpus=[3])
    service.update(jobs[2]["id"], state="preempted")
    finished_at = jobs[3]["deadline_at"]
    service.update(jobs[3]["id"], state="succeeded", finished_at=finished_at)
    service.update(jobs[4]["id"], state="succeeded", finished_at=finished_at + 1)
    service.cancel(jobs[5]["id"])


EXPECTED_SAMPLES = {
    ("qosched_queue_length", ()): 2,
    ("qosched_running_jobs", ()): 2,
    ("qosched_capacity_cpus", ()): 4,
    ("qosched_allocated_cpus", (("job_id", "j-000001"),)): 3,
    ("qosched_allocated_cpus", (("job_id", "j-000002"),)): 1,
    ("qosched_job_outcomes_total", (("outcome", "met"),)): 1,
    ("qosched_job_outcomes_total", (("outcome", "missed"),)): 1,
    ("qosched_job_outcomes_total", (("outcome", "failed"),)): 0,
    ("qosched_job_outcomes_total", (("outcome", "cancelled"),)): 1,
    ("qosched_job_outcomes_total", (("outcome", "declined"),)): 0,
}


def test_metrics_route_serves_prometheus_text_labelled_job_id(running: Running) -> None:
    busy_service(running)
    content_type, samples = scrape(running)
    assert content_type == PROMETHEUS_CONTENT_TYPE
    assert samples == EXPECTED_SAMPLES
    # `job` is the label Prometheus gives every scraped series; ours must not collide with it.
    assert not any(name == "job" for _, labels in samples for name, _ in labels)


def test_metrics_route_speaks_openmetrics_when_asked(running: Running) -> None:
    busy_service(running)
    content_type, samples = scrape(running, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert samples == EXPECTED_SAMPLES


def test_metrics_with_no_jobs_still_lists_every_outcome(running: Running) -> None:
    _, samples = scrape(running)
    assert samples == {
        ("qosched_queue_length", ()): 0,
        ("qosched_running_jobs", ()): 0,
        ("qosched_capacity_cpus", ()): 4,
        **{
            ("qosched_job_outcomes_total", (("outcome", o),)): 0
            for o in ("met", "missed", "failed", "cancelled", "declined")
        },
    }


def test_metrics_labels_survive_quotes_backslashes_and_newlines() -> None:
    odd = 'odd"id\\x\n'
    body, _ = exposition(
        ServiceMetrics(capacity_cpus=8, queued=0, running=1, allocated_cpus={odd: 2})
    )
    families = text_string_to_metric_families(body.decode())
    (family,) = [f for f in families if f.name == "qosched_allocated_cpus"]
    assert [(s.labels, s.value) for s in family.samples] == [({"job_id": odd}, 2)]


# --- status, detail and logs by offset -----------------------------------------------------------


def test_status_route_describes_capacity_allocations_and_outcomes(running: Running) -> None:
    busy_service(running)
    status, _, body = call(running, "GET", "/status")
    assert status == 200
    assert json.loads(body) == {
        "policy": "qos",
        "capacity": {"cpus": [0, 1, 2, 3], "gpus": []},
        "queued": 2,
        "running": 2,
        "allocated": {
            "j-000001": {"cpus": [0, 1, 2], "gpus": []},
            "j-000002": {"cpus": [3], "gpus": []},
        },
        "outcomes": {"met": 1, "missed": 1, "failed": 0, "cancelled": 1, "declined": 0},
        "trouble": None,
        "trouble_since": None,
    }


def test_status_json_reads_back_as_the_same_status() -> None:
    status = ServiceStatus(
        policy="fifo",
        cpus=(0, 2),
        queued=1,
        running=1,
        allocated={"j-000003": (2,)},
        outcomes=dict.fromkeys(Outcome, 0) | {"met": 2},
    )
    assert ServiceStatus.from_json(json.loads(json.dumps(status.to_json()))) == status


BAD_STATUS = [
    ("no-capacity", {"capacity": None}, "capacity"),
    ("negative-queue", {"queued": -1}, "queued"),
    ("huge-running", {"running": 2**60}, "running"),
    ("fraction-core", {"capacity": {"cpus": [0.5], "gpus": []}}, "capacity.cpus"),
    ("bool-outcome", {"outcomes": {"met": True}}, "outcomes.met"),
    ("negative-core-held", {"allocated": {"j-1": {"cpus": [-1]}}}, "allocated.j-1.cpus"),
    ("no-cores-held", {"allocated": {"j-1": {}}}, "allocated.j-1.cpus"),
]


@pytest.mark.parametrize(
    ("change", "field"), [c[1:] for c in BAD_STATUS], ids=[c[0] for c in BAD_STATUS]
)
def test_a_status_document_out_of_bounds_names_the_field(change: dict, field: str) -> None:
    good = ServiceStatus("qos", (0,), 0, 0, {}, dict.fromkeys(Outcome, 0)).to_json()
    with pytest.raises(InputError) as caught:
        ServiceStatus.from_json(good | change)
    assert caught.value.field == field


def test_detail_route_adds_allocation_history_events_and_slack(running: Running) -> None:
    job = submit(running)
    service = running.service
    service.update(job["id"], state="running", cpus=[0])
    service.update(job["id"], cpus=[0, 1], predicted_finish_at=job["deadline_at"] - 30)
    status, _, body = call(running, "GET", f"/jobs/{job['id']}/detail")
    assert status == 200
    detail = json.loads(body)
    assert {k: detail[k] for k in job if k not in ("state", "cpus", "predicted_finish_at")} == {
        k: job[k] for k in job if k not in ("state", "cpus", "predicted_finish_at")
    }
    first, second = detail["allocations"]
    assert (first["cpus"], second["cpus"], second["until"]) == ([0], [0, 1], None)
    assert first["until"] == second["from"]
    assert [e["kind"] for e in detail["events"]] == ["submitted", "state", "allocation"]
    assert detail["slack_s"] == pytest.approx(30)


def test_logs_by_offset_return_raw_bytes_and_where_to_go_on(running: Running) -> None:
    job = submit(running)
    running.service.write_log(job["id"], "héllo\nworld\n")  # é is two bytes
    size = len("héllo\nworld\n".encode())
    status, response, body = call(running, "GET", f"/jobs/{job['id']}/logs?offset=2&limit=4")
    assert (status, body) == (200, "héllo\n".encode()[2:6])
    assert response.getheader("Content-Type") == "application/octet-stream"
    assert response.getheader("X-Qosched-Log-Offset") == "6"
    assert response.getheader("X-Qosched-Log-Complete") == "false"  # the job is still queued
    status, response, body = call(running, "GET", f"/jobs/{job['id']}/logs?offset=6")
    assert body == "héllo\nworld\n".encode()[6:]
    assert response.getheader("X-Qosched-Log-Offset") == str(size)


def test_logs_by_offset_are_complete_once_the_job_ended_and_all_is_read(running: Running) -> None:
    job = submit(running)
    running.service.write_log(job["id"], "one\ntwo\n")
    running.service.cancel(job["id"])
    _, response, _ = call(running, "GET", f"/jobs/{job['id']}/logs?offset=0&limit=3")
    assert response.getheader("X-Qosched-Log-Complete") == "false"  # more bytes remain
    _, response, body = call(running, "GET", f"/jobs/{job['id']}/logs?offset=3")
    assert (body, response.getheader("X-Qosched-Log-Complete")) == (b"\ntwo\n", "true")


def test_the_tail_of_one_endless_line_is_cut_to_limit(running: Running) -> None:
    # A job printing a progress bar with no line breaks: the page must not get all of it.
    job = submit(running)
    running.service.write_log(job["id"], "start\n" + "x" * 200_000)
    status, _, body = call(running, "GET", f"/jobs/{job['id']}/logs?tail=40&limit=1000")
    assert (status, body) == (200, b"x" * 1000 + b"\n")
    assert call(running, "GET", f"/jobs/{job['id']}/logs?tail=2&limit=300000")[2] == (
        b"start\n" + b"x" * 200_000 + b"\n"
    )


TAILS = [
    # (what the log holds, lines, limit, the tail)
    ("lines", b"a\nb\nc\n", 2, None, "b\nc\n"),
    ("no-final-newline", b"a\nb\nc", 2, None, "b\nc\n"),
    ("fewer-lines-than-asked", b"a\nb\n", 5, None, "a\nb\n"),
    ("zero-lines", b"a\nb\n", 0, None, ""),
    ("empty", b"", 3, None, ""),
    ("carriage-returns", b"10%\r50%\r100%\n", 2, None, "50%\n100%\n"),
    ("crlf", b"a\r\nb\r\n", 1, None, "b\n"),
    ("limit-cuts-the-first-line", b"abcdef\ngh\n", 5, 7, "def\ngh\n"),
    ("limit-cuts-a-character", "a\u00e9\u00e9\n".encode(), 1, 4, "\u00e9\n"),
    ("bad-utf8", b"\xff\xfe\n", 1, None, "\ufffd\ufffd\n"),
    ("past-the-first-read", b"x" * 200_000 + b"\nend\n", 2, None, "x" * 200_000 + "\nend\n"),
]


@pytest.mark.parametrize(
    ("data", "lines", "limit", "tail"), [t[1:] for t in TAILS], ids=[t[0] for t in TAILS]
)
def test_read_log_tail(
    tmp_path: Path, data: bytes, lines: int, limit: int | None, tail: str
) -> None:
    (tmp_path / joblog.JOB_LOG).write_bytes(data)
    assert joblog.read_tail(tmp_path, lines, *([limit] if limit else [])) == tail
    assert joblog.read_tail(tmp_path / "missing", lines) == ""


BAD_LOG_QUERIES = [
    ("offset-past-end", "offset=99", "offset"),
    ("negative-offset", "offset=-1", "offset"),
    ("huge-offset", f"offset={2**64}", "offset"),
    ("zero-limit", "offset=0&limit=0", "limit"),
    ("limit-over-chunk", f"offset=0&limit={MAX_LOG_CHUNK + 1}", "limit"),
    ("tail-and-offset", "offset=0&tail=2", "tail"),
    ("limit-alone", "limit=5", "limit"),
    ("tail-limit-over-chunk", f"tail=2&limit={MAX_LOG_CHUNK + 1}", "limit"),
    ("non-ascii-digits", "offset=%D9%A3", "offset"),
]


@pytest.mark.parametrize(
    ("query", "field"), [c[1:] for c in BAD_LOG_QUERIES], ids=[c[0] for c in BAD_LOG_QUERIES]
)
def test_a_bad_log_offset_or_limit_is_a_400_naming_it(
    running: Running, query: str, field: str
) -> None:
    job = submit(running)
    running.service.write_log(job["id"], "short\n")
    status, _, body = call(running, "GET", f"/jobs/{job['id']}/logs?{query}")
    assert status == 400
    assert json.loads(body)["field"] == field


# --- the client ----------------------------------------------------------------------------------


def test_client_mirrors_every_route(running: Running, client: Client) -> None:
    running.service.verdict = Verdict(Admission.BEST_EFFORT, "allowed", None, None)
    assert client.dry_run(spec_text(name="via-client"), "job.yaml") == running.service.verdict
    job = client.submit(spec_text(name="via-client"), "job.yaml")
    assert client.jobs() == [job]
    assert client.job(job.id) == job
    assert client.job_detail(job.id).events[0].kind == "submitted"
    running.service.write_log(job.id, "a\nb\n")
    assert client.logs(job.id) == "a\nb\n"
    assert client.logs(job.id, tail_lines=1) == "b\n"
    assert client.read_log(job.id, 1, limit=2) == LogChunk(b"\nb", 3, False)
    assert client.status().queued == 1
    assert client.metrics_text().startswith("# HELP qosched_queue_length")
    assert client.cancel(job.id).state == "cancelled"
    assert client.read_log(job.id, 4) == LogChunk(b"", 4, True)
    assert client.healthz()["status"] == "ok"
    client.shutdown()
    assert running.server.shutdown_requested.wait(5)


def test_client_raises_the_servers_input_error(client: Client) -> None:
    text = spec_text().replace("minCpus: 1", "minCpus: 0")
    with pytest.raises(InputError) as caught:
        client.submit(text, "my job.yaml")
    error = caught.value
    assert (error.source, error.line, error.field) == ("my job.yaml", 11, "spec.resources.minCpus")
    assert str(error).startswith("my job.yaml:11: field 'spec.resources.minCpus': ")


def test_client_raises_unknown_job_error(client: Client) -> None:
    for call_route in (client.job, client.logs, client.cancel):
        with pytest.raises(UnknownJobError) as caught:
            call_route("j-424242")
        assert caught.value.job_id == "j-424242"


def test_client_with_a_wrong_token_says_so(running: Running) -> None:
    with pytest.raises(QoschedError, match="refused the token"):
        Client(running.server.url, "nope").jobs()


def test_client_reports_an_unreachable_service() -> None:
    server = serve(FakeService(), token="t", poll_interval_s=0.01)
    url = server.url
    server.close()
    with pytest.raises(QoschedError, match="cannot reach the qosched service"):
        Client(url, "t", timeout_s=2).jobs()


def test_client_ignores_proxy_settings(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert client.jobs() == []


def test_store_trouble_is_a_503_to_retry_later(running: Running, monkeypatch) -> None:
    from qosched.backends.local.store import StoreUnavailableError

    def busy() -> list:
        raise StoreUnavailableError("database is locked")

    monkeypatch.setattr(running.service, "jobs", busy)
    status, response, body = call(running, "GET", "/jobs")
    assert status == 503
    assert response.getheader("Retry-After") == "5"
    assert json.loads(body)["error"] == "database is locked"
