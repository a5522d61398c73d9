"""The API's browser side: the login URL, the session cookie, CSRF, the Host check, the page
and its static files (against the in-memory service; the real one is in test_web_browser)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from urllib.parse import urlsplit

import pytest
from service_fakes import Running, spec_text

from qosched.backends.local.client import Client
from qosched.backends.local.web import auth

pytestmark = pytest.mark.network


def call(
    running: Running,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPResponse, bytes]:
    """One raw request with exactly ``headers`` (http.client adds Host unless given)."""
    connection = http.client.HTTPConnection(running.server.host, running.server.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response, response.read()
    finally:
        connection.close()


def bearer(running: Running) -> dict[str, str]:
    return {"Authorization": f"Bearer {running.token}"}


def login_path(running: Running) -> str:
    url = running.server.login_url()
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == running.server.url
    return f"{parts.path}?{parts.query}"


def sign_in(running: Running) -> tuple[dict[str, str], str]:
    """Open the login URL as a browser would: the Cookie header it then sends, and the CSRF
    token the page carries."""
    status, response, _ = call(running, "GET", login_path(running))
    assert status == 303 and response.getheader("Location") == "/"
    cookie = response.getheader("Set-Cookie").split(";")[0]
    status, _, page = call(running, "GET", "/", headers={"Cookie": cookie})
    assert status == 200
    csrf = re.search(rb'name="qosched-csrf" content="([^"]+)"', page)
    assert csrf is not None
    return {"Cookie": cookie}, csrf.group(1).decode()


# --- signing in ----------------------------------------------------------------------------------


def test_the_page_without_a_session_is_a_401_saying_how_to_sign_in(running: Running) -> None:
    status, response, body = call(running, "GET", "/")
    assert status == 401
    assert response.getheader("Content-Type").startswith("text/html")
    assert b"needs a sign-in" in body and b"qosched web" in body
    assert b"qosched-csrf" not in body


def test_the_login_url_sets_a_strict_http_only_session_cookie(running: Running) -> None:
    path = login_path(running)
    status, response, _ = call(running, "GET", path)
    assert status == 303
    cookie = response.getheader("Set-Cookie")
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    name, _, value = name_value.partition("=")
    assert name == auth.cookie_name(running.server.port)
    assert set(attributes) == {"HttpOnly", "SameSite=Strict", "Path=/"}
    # The cookie is a fresh secret: neither the API token nor the code from the URL.
    assert len(value) >= 40 and value != running.token and value not in path


def test_a_login_url_works_once(running: Running) -> None:
    path = login_path(running)
    assert call(running, "GET", path)[0] == 303
    status, _, body = call(running, "GET", path)
    assert status == 401 and b"already used" in body


@pytest.mark.parametrize("query", ["", "?code=", "?code=guess", "?other=1"])
def test_a_login_without_a_valid_code_sets_no_cookie(running: Running, query: str) -> None:
    status, response, _ = call(running, "GET", "/login" + query)
    assert status == 401 and response.getheader("Set-Cookie") is None


def test_the_page_carries_its_csrf_token_which_is_not_the_cookie(running: Running) -> None:
    cookie, csrf = sign_in(running)
    assert csrf not in cookie["Cookie"] and csrf != running.token


def test_the_page_forbids_framing_inline_code_and_referrers(running: Running) -> None:
    cookie, _ = sign_in(running)
    _, response, _ = call(running, "GET", "/", headers=cookie)
    policy = response.getheader("Content-Security-Policy")
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert response.getheader("X-Frame-Options") == "DENY"
    assert response.getheader("Referrer-Policy") == "no-referrer"


def test_the_cli_client_gets_new_login_urls_that_each_work_once(running: Running) -> None:
    client = Client.from_home(running.home)
    first, second = client.login_url(), client.login_url()
    assert first != second
    for url in (first, second):
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == running.server.url
        assert call(running, "GET", f"{parts.path}?{parts.query}")[0] == 303


def test_making_login_codes_needs_the_api_token(running: Running) -> None:
    cookie, csrf = sign_in(running)
    assert call(running, "POST", "/login-codes", b"")[0] == 401
    headers = {**cookie, auth.CSRF_HEADER: csrf}
    assert call(running, "POST", "/login-codes", b"", headers)[0] == 401


def test_web_revoke_signs_every_browser_out_and_voids_unused_codes(
    running: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    from qosched.cli.main import main

    cookies = [sign_in(running)[0] for _ in range(2)]
    unused = login_path(running)
    assert all(call(running, "GET", "/status", headers=c)[0] == 200 for c in cookies)
    assert main(["web", "--home", str(running.home), "--revoke"]) == 0
    assert capsys.readouterr().out == "signed out 2 session(s) and voided 1 unused login URL(s)\n"
    assert all(call(running, "GET", "/status", headers=c)[0] == 401 for c in cookies)
    assert call(running, "GET", unused)[0] == 401
    assert sign_in(running)  # a fresh URL signs in again


def test_revoking_needs_the_api_token(running: Running) -> None:
    cookie, csrf = sign_in(running)
    assert (
        call(running, "DELETE", "/sessions", headers={**cookie, auth.CSRF_HEADER: csrf})[0] == 401
    )
    assert call(running, "GET", "/status", headers=cookie)[0] == 200  # nothing was revoked


def test_a_refused_login_code_is_not_written_to_the_log(
    running: Running, capfd: pytest.CaptureFixture[str]
) -> None:
    path = login_path(running)
    assert call(running, "GET", path)[0] == 303
    assert call(running, "GET", path)[0] == 401  # used: refused, and logged as a 401
    code = path.partition("code=")[2]
    # The server writes its log line just after the reply is out: wait for it.
    err, deadline = "", time.monotonic() + 10
    while '"GET /login" 401' not in err and time.monotonic() < deadline:
        time.sleep(0.02)
        err += capfd.readouterr().err
    assert '"GET /login" 401' in err
    assert code not in err


# --- what the cookie opens -----------------------------------------------------------------------

READS = ["/status", "/jobs", "/jobs/j-000001", "/jobs/j-000001/detail", "/jobs/j-000001/logs"]


@pytest.mark.parametrize("path", READS)
def test_the_cookie_opens_the_json_api_for_reading(running: Running, path: str) -> None:
    cookie, _ = sign_in(running)
    call(running, "POST", "/jobs", spec_text().encode(), bearer(running))
    assert call(running, "GET", path)[0] == 401
    assert call(running, "GET", path, headers=cookie)[0] == 200


def test_the_cookie_is_found_among_other_local_apps_cookies(running: Running) -> None:
    cookie, _ = sign_in(running)
    # What another app on 127.0.0.1 may have set, malformed by the strict rules or not.
    header = f'_xsrf=2|ab|cd|1; odd"name=1; {cookie["Cookie"]}; other=x'
    assert call(running, "GET", "/jobs", headers={"Cookie": header})[0] == 200


def test_a_made_up_or_foreign_ports_cookie_opens_nothing(running: Running) -> None:
    cookie, _ = sign_in(running)
    value = cookie["Cookie"].split("=", 1)[1]
    other_port = f"{auth.cookie_name(running.server.port + 1)}={value}"
    made_up = f"{auth.cookie_name(running.server.port)}=made-up"
    for header in (other_port, made_up, "garbage;;=="):
        assert call(running, "GET", "/jobs", headers={"Cookie": header})[0] == 401


CHANGES = [
    ("POST", "/jobs", spec_text().encode()),
    ("DELETE", "/jobs/j-000001", None),
]


@pytest.mark.parametrize(("method", "path", "body"), CHANGES, ids=[c[0] for c in CHANGES])
@pytest.mark.parametrize("csrf", [None, "wrong", ""], ids=["none", "wrong", "empty"])
def test_a_change_with_the_cookie_but_without_the_csrf_token_is_refused(
    running: Running, method: str, path: str, body: bytes | None, csrf: str | None
) -> None:
    call(running, "POST", "/jobs", spec_text().encode(), bearer(running))
    cookie, _ = sign_in(running)
    headers = cookie if csrf is None else {**cookie, auth.CSRF_HEADER: csrf}
    status, _, answer = call(running, method, path, body, headers)
    assert status == 403 and auth.CSRF_HEADER.encode() in answer
    assert [job.state for job in running.service.jobs()] == ["queued"]


def test_a_change_with_the_cookie_and_its_csrf_token_is_done(running: Running) -> None:
    cookie, csrf = sign_in(running)
    headers = {**cookie, auth.CSRF_HEADER: csrf, "X-Qosched-Source": "pasted.yaml"}
    status, _, body = call(running, "POST", "/jobs", spec_text().encode(), headers)
    assert status == 201
    job_id = json.loads(body)["id"]
    status, _, body = call(running, "DELETE", f"/jobs/{job_id}", None, headers)
    assert status == 200 and json.loads(body)["state"] == "cancelled"


def test_a_bad_spec_from_the_page_gets_the_clis_error_with_its_field(running: Running) -> None:
    cookie, csrf = sign_in(running)
    headers = {**cookie, auth.CSRF_HEADER: csrf, "X-Qosched-Source": "mine.yaml"}
    bad = spec_text().replace("deadline: 10m", "deadline: soon")
    status, _, body = call(running, "POST", "/jobs", bad.encode(), headers)
    answer = json.loads(body)
    assert status == 400
    assert answer["source"] == "mine.yaml" and answer["field"] == "spec.deadline"
    assert answer["error"].startswith("mine.yaml:")


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://127.0.0.1:1", "null"], ids=["site", "port", "null"]
)
def test_a_change_from_another_origin_is_refused_even_with_the_csrf_token(
    running: Running, origin: str
) -> None:
    cookie, csrf = sign_in(running)
    headers = {**cookie, auth.CSRF_HEADER: csrf, "Origin": origin}
    assert call(running, "POST", "/jobs", spec_text().encode(), headers)[0] == 403
    assert running.service.jobs() == []


@pytest.mark.parametrize("scheme", ["https", "ws"])
def test_a_change_from_the_services_host_under_another_scheme_is_refused(
    running: Running, scheme: str
) -> None:
    cookie, csrf = sign_in(running)
    origin = f"{scheme}://{urlsplit(running.server.url).netloc}"
    headers = {**cookie, auth.CSRF_HEADER: csrf, "Origin": origin}
    assert call(running, "POST", "/jobs", spec_text().encode(), headers)[0] == 403
    assert running.service.jobs() == []


def test_a_change_from_the_pages_own_origin_is_done(running: Running) -> None:
    cookie, csrf = sign_in(running)
    headers = {**cookie, auth.CSRF_HEADER: csrf, "Origin": running.server.url}
    assert call(running, "POST", "/jobs", spec_text().encode(), headers)[0] == 201


def test_the_cookie_cannot_stop_the_service(running: Running) -> None:
    cookie, csrf = sign_in(running)
    assert call(running, "POST", "/shutdown", b"", {**cookie, auth.CSRF_HEADER: csrf})[0] == 401
    assert not running.server.shutdown_requested.is_set()


# --- the Host check ------------------------------------------------------------------------------

EVERY_ROUTE = [
    ("GET", "/"),
    ("GET", "/login?code=x"),
    ("GET", "/static/app.js"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/status"),
    ("GET", "/jobs"),
    ("POST", "/jobs"),
    ("DELETE", "/jobs/j-000001"),
    ("POST", "/shutdown"),
]


@pytest.mark.parametrize(("method", "path"), EVERY_ROUTE, ids=[f"{m} {p}" for m, p in EVERY_ROUTE])
@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1:1", "localhost.evil.example"])
def test_every_route_refuses_a_foreign_host_even_with_the_token(
    running: Running, method: str, path: str, host: str
) -> None:
    headers = {**bearer(running), "Host": host.format(port=running.server.port)}
    status, _, body = call(running, method, path, b"" if method != "GET" else None, headers)
    assert status == 403 and b"Host header" in body
    assert not running.server.shutdown_requested.is_set()


@pytest.mark.parametrize("first", [True, False], ids=["loopback first", "foreign first"])
def test_a_request_with_two_host_headers_is_refused(running: Running, first: bool) -> None:
    port = running.server.port
    hosts = [f"127.0.0.1:{port}", f"evil.example:{port}"]
    if not first:
        hosts.reverse()
    request = "GET /status HTTP/1.1\r\n" + "".join(f"Host: {h}\r\n" for h in hosts)
    request += f"Authorization: Bearer {running.token}\r\nConnection: close\r\n\r\n"
    with socket.create_connection((running.server.host, port), timeout=10) as connection:
        connection.sendall(request.encode())
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400"
    assert json.loads(body)["error"] == "more than one Host header"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_loopback_names_with_the_port_are_served(running: Running, host: str) -> None:
    headers = {"Host": f"{host}:{running.server.port}"}
    assert call(running, "GET", "/metrics", headers=headers)[0] == 200


# --- static files and views ----------------------------------------------------------------------

STATIC = [
    ("/static/app.js", "text/javascript"),
    ("/static/app.css", "text/css"),
    ("/static/favicon.svg", "image/svg+xml"),
]


@pytest.mark.parametrize(("path", "content_type"), STATIC, ids=[p for p, _ in STATIC])
def test_the_pages_files_are_served_from_the_package(
    running: Running, path: str, content_type: str
) -> None:
    status, response, body = call(running, "GET", path)
    assert status == 200 and response.getheader("Content-Type").startswith(content_type)
    assert len(body) > 100


@pytest.mark.parametrize(
    "path", ["/static/nope.js", "/static/..%2Fapi.py", "/static/__init__.py", "/static/"]
)
def test_nothing_but_the_pages_files_is_served_as_static(running: Running, path: str) -> None:
    assert call(running, "GET", path, headers=bearer(running))[0] == 404


def test_the_page_loads_nothing_from_elsewhere(running: Running) -> None:
    cookie, _ = sign_in(running)
    page = call(running, "GET", "/", headers=cookie)[2]
    script = call(running, "GET", "/static/app.js")[2]
    style = call(running, "GET", "/static/app.css")[2]
    for text in (page, script, style):
        # The only absolute URL allowed is the SVG namespace, which is a name, not a fetch.
        urls = set(re.findall(rb"https?://[^\s\"')]+", text))
        assert urls <= {b"http://www.w3.org/2000/svg"}, urls


@pytest.mark.parametrize("path", ["/timeline", "/usage", "/usage/history", "/jobs/j-000001/speed"])
def test_a_service_without_the_pages_views_answers_501(running: Running, path: str) -> None:
    assert call(running, "GET", path, headers=bearer(running))[0] == 501


@pytest.mark.parametrize(
    ("query", "status"),
    [("0", 400), ("-5", 400), ("1e3", 400), ("31622401", 400), ("", 400), ("3600", 501)],
)
def test_the_timeline_window_is_whole_seconds_up_to_a_year(
    running: Running, query: str, status: int
) -> None:
    # Checked before the view is asked (this fake has none: 501 once the window reads).
    got = call(running, "GET", f"/timeline?window={query}", headers=bearer(running))
    assert got[0] == status, got[2]


@pytest.mark.parametrize(
    ("query", "status"), [("0", 400), ("86401", 400), ("x", 400), ("86400", 501), ("60", 501)]
)
def test_the_machine_use_window_is_whole_seconds_up_to_a_day(
    running: Running, query: str, status: int
) -> None:
    got = call(running, "GET", f"/usage/history?window={query}", headers=bearer(running))
    assert got[0] == status, got[2]
    if status == 400:
        assert json.loads(got[2])["field"] == "window"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("HEAD", "/healthz", 405), ("OPTIONS", "/jobs", 405), ("BREW", "/", 501)],
)
def test_methods_no_route_takes_are_answered_in_the_services_form(
    running: Running, method: str, path: str, status: int
) -> None:
    # Before: Python's default HTML error page, without the service's headers.
    got, response, body = call(running, method, path, headers=bearer(running))
    assert got == status
    assert response.getheader("Content-Type") == "application/json"
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert response.getheader("Cache-Control") == "no-store"
    assert response.getheader("Access-Control-Allow-Origin") is None
    if method == "HEAD":
        assert body == b"" and response.getheader("Allow") == "GET"
    else:
        assert json.loads(body)["error"]


# --- the page's job table and log file -----------------------------------------------------------


def test_jobs_with_a_query_are_one_page_of_the_table(running: Running) -> None:
    for name in ("first", "second", "third"):
        call(running, "POST", "/jobs", spec_text(name=name).encode(), bearer(running))
    running.service.update("j-000002", state="running", cpus=[0])
    status, _, body = call(running, "GET", "/jobs?limit=2&q=IR", headers=bearer(running))
    assert status == 200
    page = json.loads(body)
    # "first" and "third" match; neither runs, so submission order.
    assert [job["name"] for job in page["jobs"]] == ["first", "third"]
    assert (page["total"], page["matched"], page["limit"]) == (3, 2, 2)
    status, _, body = call(running, "GET", "/jobs?limit=1", headers=bearer(running))
    assert [job["name"] for job in json.loads(body)["jobs"]] == ["second"]  # running first
    # Without a query: every job, a list in submission order, as clients read it.
    _, _, body = call(running, "GET", "/jobs", headers=bearer(running))
    assert [job["name"] for job in json.loads(body)] == ["first", "second", "third"]


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=501", "limit"), ("state=done", "state"), ("sort=x", "sort"),
     ("order=up", "order"), ("offset=-1", "offset"), ("pages=2", "pages")],
)  # fmt: skip
def test_a_bad_job_table_query_is_a_400_naming_it(running: Running, query: str, field: str) -> None:
    status, _, body = call(running, "GET", f"/jobs?{query}", headers=bearer(running))
    answer = json.loads(body)
    assert status == 400 and answer["field"] == field
    assert field in answer["error"] or "expected" in answer["error"]


def test_the_whole_log_downloads_as_a_file(running: Running) -> None:
    call(running, "POST", "/jobs", spec_text().encode(), bearer(running))
    text = "".join(f"line {n}\n" for n in range(100_000))  # 1.2 MB: more than one chunk
    running.service.write_log("j-000001", text)
    cookie, _ = sign_in(running)
    status, response, body = call(running, "GET", "/jobs/j-000001/logs?download=1", None, cookie)
    assert status == 200 and body.decode() == text
    disposition = response.getheader("Content-Disposition")
    assert disposition == 'attachment; filename="j-000001.log"'
    assert response.getheader("Content-Length") is None  # streamed, not held whole


@pytest.mark.parametrize("query", ["download=yes", "download=1&tail=5", "download=1&offset=0"])
def test_a_download_takes_no_tail_or_offset(running: Running, query: str) -> None:
    call(running, "POST", "/jobs", spec_text().encode(), bearer(running))
    status, _, body = call(running, "GET", f"/jobs/j-000001/logs?{query}", None, bearer(running))
    assert status == 400 and json.loads(body)["field"] == "download"
