"""The web page with 200 jobs in the service's store, in headless Chromium at 1024x768: how fast
it loads, its filter, sort, paging and per-job URLs, and whether its timeline can be read.

The jobs are written straight into the store of a ``LocalService`` whose scheduling loop is not
started: the page shows what the store holds, and nothing runs. ``QOSCHED_SCREENSHOTS=1`` also
writes the page to ``docs/img/`` for docs/local.md.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from service_fakes import spec_text
from test_web_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, WAIT_MS, _playwright

from qosched.backends.local import joblog
from qosched.backends.local.api import ApiServer, serve
from qosched.backends.local.home import ensure_token
from qosched.backends.local.machine_use import UseSample
from qosched.backends.local.service import LocalService
from qosched.backends.local.store import Lifecycle, Store
from qosched.trainingjob.jobspec import parse_job_spec

pytestmark = [pytest.mark.browser, pytest.mark.network]

JOBS = 200
CORES = (0, 1, 2, 3)
RUNNING = range(197, 201)  # the last four hold a core each
QUEUED = range(185, 197)
STEP_S = 50.0  # between two submissions
RUN_S = 120.0  # how long each finished job ran
#: The bound asserted on the page's load. It is shown in under 1 s (0.3 to 0.95 s measured on
#: a 2-core machine busy with other tests, printed by the test); the bound leaves room for a
#: machine running the whole suite in parallel, and still fails a page that fetches or draws
#: every job.
LOAD_BOUND_MS = 3000.0
KINDS = ("resnet", "bert", "cnn-small", "a-very-long-experiment-name-for-the-sweep")


def name_of(n: int) -> str:
    return f"{KINDS[n % len(KINDS)]}-{n}"


def state_of(n: int) -> Lifecycle:
    if n in RUNNING:
        return Lifecycle.RUNNING
    if n in QUEUED:
        return Lifecycle.QUEUED
    if n % 7 == 0:
        return Lifecycle.FAILED
    if n % 11 == 0:
        return Lifecycle.CANCELLED
    return Lifecycle.SUCCEEDED


@dataclass
class Crowded:
    server: ApiServer
    service: LocalService
    home: Path
    start: float  # when the first job was submitted


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crowded]:
    _playwright()
    home = tmp_path_factory.mktemp("crowded")
    now = time.time()
    start = now - JOBS * STEP_S  # the first job 2 h 47 min ago, the last 50 s ago
    store = Store(home / "state.db")
    for n in range(1, JOBS + 1):
        t = start + (n - 1) * STEP_S
        spec = parse_job_spec(spec_text(name_of(n), deadline="10m"), f"{n}.yaml", now=t)
        job_id = store.submit(spec, t)
        state = state_of(n)
        if state is Lifecycle.QUEUED:
            continue
        core = CORES[n % len(CORES)]  # job n and n + 4 share a core, 200 s apart: no overlap
        store.transition(job_id, Lifecycle.RUNNING, t + 5, allocation=[core], guaranteed=n % 2 == 0)
        done = 100 if state is Lifecycle.RUNNING else 400
        store.add_progress(job_id, t + 60, done, 1)
        if state is not Lifecycle.RUNNING:
            store.transition(job_id, state, t + 5 + RUN_S)
    # Two hours of machine use, a sample every 5 s as the service takes them, with the cores
    # the jobs above held.
    for step in range(2 * 720, -1, -1):
        t = now - step * 5.0
        running = sum(
            1
            for n in range(1, JOBS + 1)
            if state_of(n) is not Lifecycle.QUEUED
            and start + (n - 1) * STEP_S + 5 <= t
            and (state_of(n) is Lifecycle.RUNNING or t < start + (n - 1) * STEP_S + 5 + RUN_S)
        )
        store.add_machine_use(UseSample(t, running, 0.8 * running), keep_s=86_400, most=20_000)
    # No scheduling loop, no recovery: only what the store says is shown.
    service = LocalService(home, store, CORES, "qos")
    server = serve(service, token=ensure_token(home))
    try:
        yield Crowded(server, service, home, start)
    finally:
        server.close()
        service.close()


@pytest.fixture(scope="module")
def browser(crowded: Crowded) -> Iterator[Any]:
    sync_api = _playwright()
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, crowded: Crowded) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1024, "height": 768})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    assert page.goto(crowded.server.login_url()).status == 200
    yield page
    context.close()
    assert errors == [], f"the page's script failed: {errors}"


def shown(page: Any, column: str) -> list[str]:
    return page.locator(f"#jobs tbody td.{column}").all_inner_texts()


def wait_for_rows(page: Any, count: int) -> None:
    page.wait_for_function(
        f"() => document.querySelectorAll('#jobs tbody tr').length === {count}", timeout=WAIT_MS
    )


def screenshot(page: Any, name: str) -> None:
    if os.environ.get("QOSCHED_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / name))


def test_200_jobs_load_in_under_a_second_running_first(page: Any, crowded: Crowded) -> None:
    page.goto(crowded.server.url + "/")  # a fresh load, signed in
    wait_for_rows(page, 50)
    drawn_ms = page.evaluate("performance.getEntriesByName('qosched:drawn')[0].startTime")
    print(f"\nthe page showed 50 of {JOBS} jobs {drawn_ms:.0f} ms after navigation")
    assert drawn_ms < LOAD_BOUND_MS
    # Running first, then queued (each in submission order), then finished newest first.
    expected = [*RUNNING, *QUEUED, *range(184, 150, -1)]
    assert shown(page, "id") == [f"j-{n:06d}" for n in expected]
    assert shown(page, "state")[:16] == ["running"] * 4 + ["queued"] * 12
    assert page.locator("#page-info").inner_text() == "1–50 of 200"
    # Every column fits 1024 px: the last one (Cancel) ends inside the window.
    right = page.evaluate(
        "Math.max(...[...document.querySelectorAll('#jobs th')].map("
        "th => th.getBoundingClientRect().right))"
    )
    assert right <= 1024 and page.evaluate("document.documentElement.scrollWidth") <= 1024
    screenshot(page, "page-200-jobs.png")
    page.click("#page-next")
    page.locator("#page-info", has_text="51–100 of 200").wait_for()
    assert shown(page, "id")[0] == "j-000150"
    assert "page=2" in page.url


def test_filter_by_state_and_text(page: Any, crowded: Crowded) -> None:
    wait_for_rows(page, 50)
    failed = [n for n in range(1, JOBS + 1) if state_of(n) is Lifecycle.FAILED]
    assert len(failed) == 26  # 7, 14, ..., 182 (189 and 196 are queued)
    page.select_option("#state-filter", "failed")
    wait_for_rows(page, 26)
    assert set(shown(page, "state")) == {"failed"}
    assert shown(page, "id") == [f"j-{n:06d}" for n in reversed(failed)]  # newest first
    assert page.locator("#page-info").inner_text() == "1–26 of 26 (200 in all)"
    assert page.locator("#state-filter option[value=failed]").inner_text() == "failed (26)"
    # And by text: failed jobs named bert-N (N = 1 mod 4).
    page.fill("#text-filter", "BERT")
    bert = [n for n in reversed(failed) if n % 4 == 1]
    wait_for_rows(page, len(bert))
    assert shown(page, "name") == [name_of(n) for n in bert]
    assert "state=failed" in page.url and "q=BERT" in page.url
    # The filter is in the URL: opening it again shows the same rows.
    again = page.context.new_page()
    again.goto(page.url)
    again.wait_for_function(
        f"() => document.querySelectorAll('#jobs tbody tr').length === {len(bert)}", timeout=WAIT_MS
    )
    assert again.locator("#state-filter").input_value() == "failed"


def test_sort_by_a_column_both_ways(page: Any) -> None:
    wait_for_rows(page, 50)
    names = [name_of(n) for n in range(1, JOBS + 1)]
    page.click("#jobs th[data-sort=name]")
    page.locator("#jobs th.sorted[data-sort=name]").wait_for()
    by_name = sorted(names, key=str.casefold)
    page.wait_for_function(
        f"() => document.querySelector('#jobs tbody td.name').textContent === '{by_name[0]}'"
    )
    assert shown(page, "name") == by_name[:50]
    page.click("#jobs th[data-sort=name]")
    page.locator("#jobs th.sorted.desc[data-sort=name]").wait_for()
    descending = sorted(names, key=str.casefold, reverse=True)
    page.wait_for_function(
        f"() => document.querySelector('#jobs tbody td.name').textContent === '{descending[0]}'"
    )
    assert shown(page, "name") == descending[:50]
    assert "sort=name" in page.url and "order=desc" in page.url


def test_a_jobs_own_url_opens_its_view(page: Any, crowded: Crowded) -> None:
    job_id = "j-000042"  # finished long ago: on no page the table shows first
    log = "".join(f"step {n}\n" for n in range(5000))
    (crowded.home / "jobs" / job_id).mkdir(parents=True, exist_ok=True)
    (crowded.home / "jobs" / job_id / joblog.JOB_LOG).write_text(log)
    page.goto(f"{crowded.server.url}/#job={job_id}")
    title = page.locator("#detail-title", has_text=job_id)
    title.wait_for()
    assert title.inner_text().startswith(f"{job_id} ({name_of(42)}): failed")
    assert page.locator(f'#jobs tbody tr[data-job="{job_id}"]').count() == 0
    page.locator("#events td", has_text="running -> failed").wait_for()
    page.locator("#log", has_text="step 4999").wait_for()
    # The whole log, not the tail: as a file, named after the job.
    href = page.locator("#log-download").get_attribute("href")
    response = page.request.get(crowded.server.url + href)
    assert response.status == 200 and response.text() == log
    assert response.headers["content-disposition"] == f'attachment; filename="{job_id}.log"'
    # Clicking another job's row gives the page that job's URL.
    page.locator('#jobs tbody tr[data-job="j-000200"]').click()
    page.locator("#detail-title", has_text="j-000200").wait_for()
    assert page.url.endswith("#job=j-000200")


def boxes(page: Any, selector: str) -> list[dict[str, float]]:
    return page.evaluate(
        f"[...document.querySelectorAll('{selector}')].map(e => {{"
        "const b = e.getBBox(); return {x: b.x, width: b.width, text: e.textContent}; })"
    )


def test_the_timeline_shows_the_last_hour_with_clock_ticks_and_zoom(
    page: Any, crowded: Crowded
) -> None:
    page.locator("#timeline rect.segment").first.wait_for()
    page.locator("#window-info", has_text="1h00m").wait_for()
    ticks = boxes(page, "#timeline text.tick")
    # An hour at 10-minute steps on ~950 px: five or six whole-ten-minute clock times.
    assert 5 <= len(ticks) <= 7, ticks
    assert all(re.fullmatch(r"\d\d:\d0", tick["text"]) for tick in ticks), ticks
    for before, after in itertools.pairwise(ticks):  # in order, none on another
        assert before["x"] + before["width"] + 10 < after["x"]
    # Only the jobs of the last hour: 72 jobs were submitted in it (50 s apart), and the ones
    # that ran hold one bar each.
    bars = page.evaluate(
        "[...document.querySelectorAll('#timeline rect.segment')].map(r => ({"
        "job: r.dataset.job, x: +r.getAttribute('x'), width: +r.getAttribute('width'),"
        "fill: r.getAttribute('fill')}))"
    )
    hour_ago = time.time() - 3600
    ran_in_hour = {
        f"j-{n:06d}"
        for n in range(1, JOBS + 1)
        if state_of(n) is not Lifecycle.QUEUED
        and crowded.start + (n - 1) * STEP_S + 5 + RUN_S >= hour_ago + 5
    }
    assert ran_in_hour <= {bar["job"] for bar in bars}
    # Neighbours in submission order never share a colour.
    fills = {bar["job"]: bar["fill"] for bar in bars}
    ordered = sorted(fills)
    assert all(fills[a] != fills[b] for a, b in itertools.pairwise(ordered))
    # A label is a whole id (with its name when there is room) or #number, and fits its bar.
    labels = page.evaluate(
        "[...document.querySelectorAll('#timeline text.label')].map(t => ({"
        "job: t.dataset.job, text: t.textContent, width: t.getBBox().width}))"
    )
    width_of = {bar["job"]: bar["width"] for bar in bars}
    assert labels
    for label in labels:
        number = label["job"].removeprefix("j-").lstrip("0")
        assert label["text"].startswith(label["job"]) or label["text"] == f"#{number}"
        assert label["width"] <= width_of[label["job"]], label
    # Machine use comes from the service's history: the hour's 720 samples, not the few seconds
    # this tab has seen.
    points = page.evaluate(
        "document.querySelector('#usage polyline.allocated').getAttribute('points')"
    )
    assert 600 <= len(points.split()) <= 720
    page.evaluate("document.getElementById('timeline-section').scrollIntoView()")
    screenshot(page, "page-timeline.png")
    # Zoom: 15 minutes ticks every 2 or 5 minutes; the buttons and the URL follow.
    page.click("#zoom button[data-window='900']")
    page.locator("#window-info", has_text="15m00s").wait_for()
    assert "window=900" in page.url
    ticks = boxes(page, "#timeline text.tick")
    assert 3 <= len(ticks) <= 9 and all(re.fullmatch(r"\d\d:\d\d", t["text"]) for t in ticks)
    page.click("#zoom-out")
    page.locator("#window-info", has_text="30m00s").wait_for()
    page.locator("#timeline").hover()
    page.mouse.wheel(0, -200)  # the wheel zooms in
    page.locator("#window-info", has_text="24m00s").wait_for()
