"""The web page in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright) against a real ``LocalService`` running real small command jobs.

Chromium is looked for at ``/usr/bin/chromium`` (``.ci/run`` installs it); without it these
tests are skipped on a developer's machine and fail under CI. ``QOSCHED_SCREENSHOTS=1`` also
writes the page to ``docs/img/`` for the README.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import http.server
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from service_fakes import FakeService, running_service, spec_text

from qosched.backends.local.api import ApiServer, serve
from qosched.backends.local.client import Client
from qosched.backends.local.home import Endpoint, ensure_token, write_endpoint
from qosched.backends.local.jobview import HeldAllocation
from qosched.backends.local.service import RUNNER_LOG, LocalService
from qosched.backends.local.store import ProgressSample
from qosched.backends.local.web import auth, views
from qosched.core.errors import InputError

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "img"
WAIT_MS = 30_000  # the most any one expectation waits for the live page

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.network]

# A command job that reports ``$QOSCHED_ITERATIONS`` iterations, one every ``argv[1]`` seconds,
# printing a numbered line for each.
STEPPER = """\
import json, os, sys, time
total = int(os.environ["QOSCHED_ITERATIONS"])
with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
    for n in range(1, total + 1):
        time.sleep(float(sys.argv[1]))
        print(f"line {n}", flush=True)
        progress.write(json.dumps({"iteration": n}) + "\\n")
        progress.flush()
"""


def _playwright() -> Any:
    """The Playwright module, or a skip (a failure under CI) saying what is missing."""
    missing = None
    try:
        from playwright import sync_api
    except ImportError:
        missing = "the playwright package (pip install -e '.[dev]')"
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} (apt-get install -y chromium)"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests need {missing}", pytrace=False)
        pytest.skip(f"the browser tests need {missing}")
    return sync_api


@dataclass
class Live:
    home: Path
    scripts: Path
    server: ApiServer
    service: LocalService

    @property
    def client(self) -> Client:
        return Client.from_home(self.home)

    def spec(self, name: str, iterations: int, step_s: float = 0.1, deadline: str = "10m") -> str:
        command = [sys.executable, str(self.scripts / "stepper.py"), str(step_s)]
        spec = {
            "command": command,
            "work": {"iterations": iterations},
            "deadline": deadline,
            "resources": {"minCpus": 1, "maxCpus": 1},
            "bestEffort": True,
        }
        document = {"apiVersion": "qosched/v1", "kind": "TrainingJob", "metadata": {"name": name}}
        return yaml.safe_dump({**document, "spec": spec}, sort_keys=False)

    def submit(self, name: str, iterations: int, step_s: float = 0.1) -> str:
        return self.client.submit(self.spec(name, iterations, step_s), f"{name}.yaml").id


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A real service, as ``qosched up`` runs it, with a short tick."""
    _playwright()  # no service started for nothing
    root = tmp_path_factory.mktemp("web")
    home, scripts = root / "home", root / "scripts"
    scripts.mkdir()
    (scripts / "stepper.py").write_text(STEPPER)
    service = LocalService.open(home, policy="qos", tick_s=0.2)
    stop = threading.Event()
    server = serve(service, token=ensure_token(home), shutdown_event=stop, poll_interval_s=0.05)
    write_endpoint(home, Endpoint(server.host, server.port, os.getpid(), time.time()))
    runner = threading.Thread(target=service.run, args=(stop,), daemon=True)
    runner.start()
    try:
        yield Live(home, scripts, server, service)
    finally:
        stop.set()
        runner.join(60)
        server.close()
        service.close()


@pytest.fixture(scope="module")
def browser(live: Live) -> Iterator[Any]:
    sync_api = _playwright()
    with sync_api.sync_playwright() as playwright:
        # Each test opens its own context: a fresh, empty profile (no cookies), as Playwright
        # launches with a new temporary user-data directory.
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], f"the page's script failed: {errors}"


def signed_in(page: Any, live: Live) -> Any:
    response = page.goto(live.server.login_url())
    assert response.status == 200 and page.url == f"{live.server.url}/"
    return page


def row(page: Any, job_id: str) -> Any:
    return page.locator(f'#jobs tbody tr[data-job="{job_id}"]')


def wait_for_progress(page: Any, job_id: str, total: int) -> None:
    """Until the page shows the job part done: more than none, less than ``total``."""
    page.wait_for_function(
        f"""() => {{
            const cell = document.querySelector('tr[data-job="{job_id}"] td.progress');
            const done = cell && parseInt(cell.textContent, 10);
            return done > 0 && done < {total};
        }}"""
    )


def iterations_shown(page: Any, job_id: str) -> int:
    text = row(page, job_id).locator("td.progress").inner_text()
    return int(text.split("/")[0])


# --- signing in ----------------------------------------------------------------------------------


def test_without_the_login_url_the_page_says_to_sign_in(page: Any, live: Live) -> None:
    response = page.goto(live.server.url + "/")
    assert response.status == 401
    assert "needs a sign-in" in page.locator("#login-needed").inner_text()
    assert page.locator("#jobs").count() == 0


def test_the_login_url_opens_the_page_and_works_once(page: Any, browser: Any, live: Live) -> None:
    url = live.server.login_url()
    assert page.goto(url).status == 200
    assert page.url == f"{live.server.url}/"
    page.locator("#connection", has_text="updated").wait_for()
    other = browser.new_context()
    try:
        again = other.new_page()
        assert again.goto(url).status == 401
        assert "already used" in again.locator("#login-needed").inner_text()
    finally:
        other.close()


# --- what it shows -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_job_appears_and_its_progress_moves_to_the_end(page: Any, live: Live) -> None:
    signed_in(page, live)
    job_id = live.submit("moving", iterations=60)
    wait_for_progress(page, job_id, 60)
    first = iterations_shown(page, job_id)
    row(page, job_id).locator("td.state", has_text="succeeded").wait_for()
    assert first < iterations_shown(page, job_id) == 60
    assert row(page, job_id).locator("td.outlook").inner_text() == "met"
    # Its allocation is on the timeline, on the core the service gave it.
    page.locator(f'#timeline rect[data-job="{job_id}"]').first.wait_for()


@pytest.mark.slow
def test_one_job_shows_its_reasons_speed_allocations_and_log(page: Any, live: Live) -> None:
    signed_in(page, live)
    job_id = live.submit("watched", iterations=300)  # still running when its title is read
    other = live.submit("neighbour", iterations=60)
    row(page, job_id).click()
    admitted = re.compile("guarantees its deadline|runs it best effort|runs it without a promise")
    page.locator("#events td", has_text=admitted).first.wait_for()
    page.locator("#events td", has_text="runner started").wait_for()
    page.locator("#allocations tbody tr").first.wait_for()
    page.locator("#log", has_text="line 2").wait_for()
    page.locator("#speed circle.measured").first.wait_for()
    assert page.locator("#detail-title").inner_text().startswith(f"{job_id} (watched)")
    # Measured dots are drawn: the prediction rests on the job's own progress, and says so.
    page.locator("#detail-title", has_text="speed measured now").wait_for()
    if os.environ.get("QOSCHED_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator(f'#timeline rect[data-job="{other}"]').first.wait_for()
        page.wait_for_timeout(3000)  # a few points of machine use, bars long enough to read
        page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)
    for done_with in (job_id, other):  # free the cores for the next tests
        with contextlib.suppress(InputError):  # it finished already: its core is free too
            live.client.cancel(done_with)


def test_the_log_shows_only_the_end_of_one_endless_line(page: Any, live: Live) -> None:
    # A progress bar drawn without line breaks makes a job's whole output one line.
    signed_in(page, live)
    job_id = live.submit("endless", iterations=3, step_s=0.01)
    row(page, job_id).locator("td.state", has_text="succeeded").wait_for()
    with (live.home / "jobs" / job_id / RUNNER_LOG).open("a") as log:
        log.write("x" * (1 << 20) + "the end")
    row(page, job_id).click()
    page.locator("#log", has_text="the end").wait_for()
    assert page.evaluate("document.getElementById('log').textContent.length") <= 64 * 1024 + 1


def test_machine_use_counts_the_cores_held_and_the_cpu_time_used(page: Any, live: Live) -> None:
    signed_in(page, live)
    job_id = live.submit("used", iterations=100)
    wait_for_progress(page, job_id, 100)
    usage = live.service.usage()
    assert usage["cpus"] == len(live.service.cores)
    # A Python process has spent CPU time starting up (tens of ms) by the time it reports.
    assert usage["jobs"][job_id]["cpus"] == 1 and usage["jobs"][job_id]["cpu_s"] > 0
    page.locator("#use-summary", has_text="CPU in use").wait_for()
    assert page.locator("#usage polyline.allocated").count() == 1
    with contextlib.suppress(InputError):  # free its core; it may have finished already
        live.client.cancel(job_id)


@pytest.mark.slow
def test_the_page_says_when_the_service_is_in_trouble(
    page: Any, live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed_in(page, live)
    page.locator("#connection", has_text="updated").wait_for()
    real = live.service.status

    def troubled() -> Any:  # what GET /status answers while the disk is full
        return dataclasses.replace(
            real(), trouble="its state cannot be written: disk is full", trouble_since=time.time()
        )

    monkeypatch.setattr(live.service, "status", troubled)
    banner = page.locator("#connection.bad", has_text="the service is in trouble since")
    banner.wait_for()
    assert "disk is full; job states may be behind" in banner.inner_text()
    monkeypatch.setattr(live.service, "status", real)
    page.locator("#connection.muted", has_text="updated").wait_for()


# --- actions -------------------------------------------------------------------------------------


def test_a_pasted_spec_is_submitted(page: Any, live: Live) -> None:
    signed_in(page, live)
    page.fill("#spec-text", live.spec("pasted", iterations=5))
    page.click("#submit-button")
    result = page.locator("#submit-result", has_text="submitted")
    result.wait_for()
    job_id = result.inner_text().split()[1]
    assert live.client.job(job_id).name == "pasted"
    row(page, job_id).wait_for()


@pytest.mark.parametrize("how", ["pasted", "uploaded"])
def test_a_bad_spec_shows_the_clis_error_with_its_field(
    page: Any, live: Live, tmp_path: Path, how: str
) -> None:
    signed_in(page, live)
    before = len(live.client.jobs())
    bad = live.spec("bad", iterations=5).replace("deadline: 10m", "deadline: soon")
    if how == "pasted":
        page.fill("#spec-text", bad)
        source = "<pasted>"
    else:
        path = tmp_path / "bad-job.yaml"
        path.write_text(bad)
        page.set_input_files("#spec-file", str(path))
        source = "bad-job.yaml"
    page.click("#submit-button")
    error = page.locator("#submit-error")
    error.wait_for()
    text = error.inner_text()
    assert text.startswith(f"{source}:") and "field 'spec.deadline'" in text
    assert error.get_attribute("data-field") == "spec.deadline"
    assert len(live.client.jobs()) == before


@pytest.mark.slow
def test_cancel_stops_a_running_job(page: Any, live: Live) -> None:
    signed_in(page, live)
    job_id = live.submit("to-cancel", iterations=600)
    row(page, job_id).locator("td.state", has_text="running").wait_for()
    row(page, job_id).locator("button.cancel").click()
    row(page, job_id).locator("td.state", has_text="cancelled").wait_for()
    assert live.client.job(job_id).state == "cancelled"
    assert row(page, job_id).locator("button.cancel").count() == 0


# --- what it refuses -----------------------------------------------------------------------------


def session_cookie(page: Any, live: Live) -> str:
    name = auth.cookie_name(live.server.port)
    (cookie,) = [c for c in page.context.cookies() if c["name"] == name]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    return f"{name}={cookie['value']}"


def test_the_session_cookie_is_out_of_the_pages_scripts_reach(page: Any, live: Live) -> None:
    signed_in(page, live)
    session_cookie(page, live)
    assert auth.cookie_name(live.server.port) not in page.evaluate("document.cookie")


def test_a_foreign_host_is_refused_even_with_the_session_cookie(page: Any, live: Live) -> None:
    signed_in(page, live)
    cookie = session_cookie(page, live)
    connection = http.client.HTTPConnection(live.server.host, live.server.port, timeout=10)
    try:
        headers = {"Host": f"rebound.example:{live.server.port}", "Cookie": cookie}
        connection.request("GET", "/jobs", headers=headers)
        response = connection.getresponse()
        assert response.status == 403 and b"Host header" in response.read()
    finally:
        connection.close()


def test_a_change_without_the_csrf_header_is_refused(page: Any, live: Live) -> None:
    signed_in(page, live)
    before = len(live.client.jobs())
    body = json.dumps(live.spec("sneaky", iterations=5))
    status = page.evaluate(
        f"fetch('/jobs', {{method: 'POST', body: {body}, credentials: 'same-origin'}})"
        ".then(r => r.status)"
    )
    assert status == 403
    assert len(live.client.jobs()) == before


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Serves a page on another port (the same site, so a SameSite=Strict cookie still goes
    along) whose button posts a form to the service."""

    target = ""
    spec = ""

    def do_GET(self) -> None:
        name, _, value = self.spec.partition("=")
        page = (
            f'<form id="f" method="POST" action="{self.target}/jobs" enctype="text/plain">'
            f'<textarea name="{name}">{value}</textarea><button id="go">Win a prize</button></form>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_cross_site_form_post_is_refused(page: Any, live: Live) -> None:
    signed_in(page, live)
    before = len(live.client.jobs())
    attacker = type("Attacker", (_Attacker,), {"target": live.server.url, "spec": "a=b"})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), attacker)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        page.goto(f"http://127.0.0.1:{httpd.server_address[1]}/")
        with page.expect_response(f"{live.server.url}/jobs") as posted:
            page.click("#go")
        assert posted.value.status == 403
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(live.client.jobs()) == before


# --- the timeline's marks and the speed chart, from known facts -------------------------------


class FakeDashboard(FakeService):
    """The in-memory service with the page's views, built by the same functions as
    ``LocalService``'s from the fake's events, and a known speed curve."""

    def timeline(self, window_s: float | None = None) -> dict[str, Any]:
        events = [event for job in self.jobs() for event in self.job_detail_events(job.id)]
        return views.timeline(
            self.jobs(), events, now=self.clock(), cpus=range(4), window_s=window_s
        )

    def job_detail_events(self, job_id: str) -> list[Any]:
        with self._lock:
            return list(self._events[job_id])

    def job_speed(self, job_id: str) -> dict[str, Any]:
        samples = [ProgressSample(10.0 * n, 20 * n, 1) for n in range(3)]
        allocations = [HeldAllocation(0.0, None, (0,), ())]
        predicted = {1: (2.0, 1.5, 2.5), 2: (3.5, 3.0, 4.0), 3: (4.5, 3.5, 5.5)}
        speed = views.job_speed(job_id, [], [], predicted)
        return {**speed, "measured": views.measured_speeds(samples, allocations)}

    def usage(self) -> dict[str, Any]:
        held = {j.id: {"cpus": len(j.cpus), "cpu_s": 0.0} for j in self.jobs() if j.cpus}
        return {"t": self.clock(), "cpus": 4, "jobs": held}

    def usage_history(self, window_s: float) -> dict[str, Any]:
        now = self.clock()
        allocated = sum(len(j.cpus) for j in self.jobs())
        return {"now": now, "cpus": 4, "every_s": 5.0, "points": [[now, allocated, None]]}


def test_the_timeline_marks_resizes_preemptions_restarts_and_ends(
    page: Any, tmp_path: Path
) -> None:
    service = FakeDashboard()
    with running_service(tmp_path, service) as running:
        job_id = service.submit(spec_text("marked"), "marked.yaml").id
        service.update(job_id, state="running", cpus=[0, 1])
        service.update(job_id, cpus=[0], why="from 2 cores to 1: its plan needs 1")
        service.update(job_id, state="preempted", cpus=[])
        service.update(job_id, state="running", cpus=[2])  # restarted elsewhere
        service.update(job_id, state="succeeded", cpus=[], finished_at=service.clock())
        assert page.goto(running.server.login_url()).status == 200
        for kind in ("resize", "preempt", "restart", "succeeded"):
            page.locator(f"#timeline text.mark.{kind}").wait_for()
        bars = page.locator(f'#timeline rect[data-job="{job_id}"]')
        assert bars.count() == 4  # cores 0 and 1, then 0, then 2
        # A history of a moment is drawn over 5 minutes, not squeezed to the edge of an hour.
        page.locator("#window-info", has_text="5m00s, all the history there is").wait_for()
        row(page, job_id).click()
        words = "re-sized from cores 0-1 to 0: from 2 cores to 1: its plan needs 1"
        page.locator("#events td", has_text=words).wait_for()
        # The predictor's line and band over 1-3 cores, and one measured speed: 2 it/s on 1 core.
        page.locator("#speed polygon.band").wait_for()
        assert page.locator("#speed circle.measured").count() == 1
        title = page.locator("#speed circle.measured title").text_content()
        assert title.startswith("2.00 it/s on 1 cores")


# --- without a browser -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [("true", pytest.fail.Exception), (None, pytest.skip.Exception)],
    ids=["ci-fails", "developer-skips"],
)
def test_a_missing_chromium_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str | None, outcome: type
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", tmp_path / "no-chromium")
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="apt-get install -y chromium"):
        _playwright()
