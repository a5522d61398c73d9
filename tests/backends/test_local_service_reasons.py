"""Every decision the local service records says why, with the numbers behind it; and a job's
row never contradicts its events on its promise.

Hand-computed speeds (``data/throughputs/CPU/cnn.csv``, batch 64): 20.7457 iterations/s on one
core, so 2,075 iterations take 100.0 s. Before a job has run, qos's prediction band is that
speed times ``exp(±z * 0.3)``, z = 0.2533 the normal quantile of its confidence 0.2 (0.6 of
the distribution below it): a factor 1.079, so the finish is predicted within 92.7-107.9 s.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from command_jobs import COUNTING, command_spec

from qosched.backends.local.service import ASKED_UP_TO, LocalService
from qosched.backends.local.store import JobEvent
from qosched.cluster.policies import Policy
from qosched.cluster.policies import base as policy_base
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

pytestmark = pytest.mark.process

CORES = tuple(sorted(os.sched_getaffinity(0)))
NOW = 1_000_000.0
WAIT_S = 60.0  # generous: the machine may be busy with other test runs

#: What the test policy does with each job (by id): guarantee it, decline it, give it this many
#: workers (else none), and why.
GUARANTEE: dict[str, bool] = {}
DECLINE: set[str] = set()
WANT: dict[str, int] = {}
WHY: dict[str, str] = {}
NAME = "test-reasons"


class Told(Policy):
    """Does what the test says (``GUARANTEE``, ``DECLINE``, ``WANT``, ``WHY``) and promises no
    deadlines, so nothing is measured first. Registered only while a test of this module runs
    (`told`): it leaves untold jobs without workers, so the tests that run every registered
    policy on a trace must never see it."""

    name = NAME

    def admit(self, job: JobState, view: ClusterView) -> bool:
        return job.job_id not in DECLINE

    def is_guaranteed(self, job_id: str) -> bool:
        return GUARANTEE.get(job_id, False)

    def allocate(self, view: ClusterView) -> Decision:
        workers: dict[str, int] = {}
        free = view.cluster.total_workers
        for job in view.jobs:
            want = WANT.get(job.job_id, 0)
            if 0 < want <= free:
                workers[job.job_id] = want
                free -= want
        reasons = {job.job_id: WHY[job.job_id] for job in view.jobs if job.job_id in WHY}
        return Decision(workers, reasons=reasons)


@pytest.fixture(autouse=True)
def told(monkeypatch):
    monkeypatch.setitem(policy_base._POLICIES._factories, NAME, Told)
    yield
    for table in (GUARANTEE, DECLINE, WANT, WHY):
        table.clear()


def cnn(name: str, iterations: int, deadline_s: int, **extra) -> TrainingJobSpec:
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=deadline_s, absolute_at=None),
        workload="cnn",
        resources=Resources(min_cpus=1, max_cpus=1),
        requested_cpus=1,
        **extra,
    )


def open_service(home: Path, policy: str, cpus=CORES[:1], **options) -> LocalService:
    return LocalService.open(home, policy=policy, cpus=cpus, tick_s=0.2, **options)


def last(service: LocalService, job_id: str, kind: str) -> JobEvent:
    return [e for e in service.store.events(job_id) if e.kind == kind][-1]


def assert_promise_agrees(service: LocalService, job_id: str) -> None:
    """The job's row (stored and as the API shows it) says the promise its last event stating
    one says; with no such event, no guarantee."""
    stated = [e for e in service.store.events(job_id) if "guaranteed" in e.detail]
    said = stated[-1].detail["guaranteed"] if stated else False
    assert service.store.get(job_id).guaranteed is said
    assert service.job(job_id).guaranteed is said


# -- admissions, declines, profiling: nothing runs ------------------------------------------------


def test_a_guaranteed_job_says_its_predicted_finish_against_its_deadline_on_how_many_cores(
    tmp_path,
):
    service = open_service(tmp_path, "qos", clock=lambda: NOW)
    try:
        job = service.submit_spec(cnn("a", 2075, 600), NOW)
        admitted = last(service, job.id, "admitted")
    finally:
        service.close()
    assert admitted.detail["why"] == (
        "qos guarantees its deadline; it would start on 1 core, predicted to finish in 100 s "
        "(93-108 s), 500 s before its deadline (in 600 s); speed: table"
    )
    assert admitted.detail["promise"] == "guaranteed" and admitted.detail["workers"] == 1
    assert admitted.detail["predicted_finish_at"] == pytest.approx(NOW + 2075 / 20.7457, abs=0.1)
    # Queued, not started yet: the row already says the promise the event says.
    assert job.state == "queued" and job.guaranteed


def test_a_best_effort_job_says_why_its_deadline_is_not_guaranteed(tmp_path):
    service = open_service(tmp_path, "qos", clock=lambda: NOW)
    try:
        # 2,075 iterations alone on the core take 100 s; the deadline is in 60 s.
        job = service.submit_spec(cnn("tight", 2075, 60, best_effort=True), NOW)
        admitted = last(service, job.id, "admitted")
    finally:
        service.close()
    assert admitted.detail["why"] == (
        "qos runs it best effort: it needs 100 s even alone on 1 core (its fastest, at an "
        "expected 20.7 iterations/s), and its deadline is in 60 s; its spec allows best effort, "
        "so it runs without a guarantee; it would start on 1 core, predicted to finish in 100 s "
        "(93-108 s), 40 s after its deadline (in 60 s); speed: table"
    )
    assert (admitted.detail["promise"], job.guaranteed, job.best_effort) == (
        "best effort",
        False,
        True,
    )


def test_a_declined_job_records_the_verdicts_reason_and_earliest_deadline_on_its_event(tmp_path):
    service = open_service(tmp_path, "qos", clock=lambda: NOW)
    try:
        job = service.submit_spec(cnn("tight", 2075, 60), NOW)
        [state] = [e for e in service.store.events(job.id) if e.kind == "state"]
    finally:
        service.close()
    assert job.state == "declined"
    assert state.detail["why"] == job.error
    assert "it needs 100 s even alone on 1 core" in state.detail["why"]
    # Found to within 10 s (or 1%) of the 100 s the job takes alone, never earlier.
    assert 100.0 <= state.detail["earliest_deadline_in_s"] <= 110.0
    assert state.detail["earliest_deadline_at"] == NOW + state.detail["earliest_deadline_in_s"]
    assert state.detail["guaranteed"] is False


def test_a_command_is_measured_first_and_says_why(tmp_path):
    service = open_service(tmp_path, "qos", clock=lambda: NOW)
    try:
        job = service.submit_spec(command_spec("cmd", [sys.executable, "-c", "pass"]), NOW)
        profiling = last(service, job.id, "profiling")
        assert_promise_agrees(service, job.id)
    finally:
        service.close()
    assert job.state == "profiling"
    assert profiling.detail["why"] == (
        "its speed on this machine is not known yet: qos promises deadlines, and nothing gives "
        "a command's speed here (no table, nothing remembered from an earlier job of the same "
        "speed key); it is measured for at most 60 s of running first"
    )


def test_a_policy_that_promises_nothing_says_so_and_the_row_shows_no_promise(tmp_path):
    service = open_service(tmp_path, "fifo", clock=lambda: NOW)
    try:
        job = service.submit_spec(cnn("a", 2075, 600), NOW)
        admitted = last(service, job.id, "admitted")
    finally:
        service.close()
    assert admitted.detail["why"] == (
        "fifo runs it without a promise: fifo promises no deadlines; it would start on 1 core, "
        "predicted to finish in 100 s, 500 s before its deadline (in 600 s); "
        "speed: table"
    )
    assert admitted.detail["promise"] == "no promise"
    assert (job.guaranteed, job.best_effort) == (False, False)


def test_the_row_and_the_events_agree_on_the_promise_through_queued_declined_cancelled_failed(
    tmp_path,
):
    clock = [NOW]
    service = open_service(tmp_path, NAME, clock=lambda: clock[0])
    try:
        kept = service.submit_spec(cnn("kept", 2075, 600), NOW).id
        GUARANTEE["j-000002"] = True
        promised = service.submit_spec(cnn("promised", 2075, 600), NOW).id
        assert promised == "j-000002"
        DECLINE.add("j-000003")
        declined = service.submit_spec(cnn("declined", 2075, 600), NOW).id
        # More cores than there are: it cannot be scheduled, and fails.
        failed = service.submit_spec(
            TrainingJobSpec(
                name="big",
                iterations=10,
                deadline=Deadline(relative_s=600, absolute_at=None),
                workload="cnn",
                resources=Resources(min_cpus=2, max_cpus=2),
                requested_cpus=2,
            ),
            NOW,
        ).id
        states = {j: service.job(j).state for j in (kept, promised, declined, failed)}
        assert states == {
            kept: "queued",
            promised: "queued",
            declined: "declined",
            failed: "failed",
        }
        for job_id in states:
            assert_promise_agrees(service, job_id)
        assert service.job(promised).guaranteed and not service.job(kept).guaranteed

        # The policy drops one guarantee and gives another: each is an event, and the rows
        # follow. Nobody gets a core, so nothing starts.
        GUARANTEE[promised], GUARANTEE[kept] = False, True
        clock[0] = NOW + 10
        service.step()
        dropped, given = last(service, promised, "promise"), last(service, kept, "promise")
        assert dropped.detail["why"] == (
            f"{NAME} no longer guarantees its deadline: no plan meets it on its predicted speed "
            f"with its safety margin any more, so it runs without a promise; its deadline is in "
            f"590 s"
        )
        assert given.detail["why"].startswith(f"{NAME} now guarantees its deadline")
        for job_id in (kept, promised):
            assert_promise_agrees(service, job_id)
        assert service.job(kept).guaranteed and not service.job(promised).guaranteed

        service.cancel(kept)
        assert service.job(kept).state == "cancelled"
        assert_promise_agrees(service, kept)
    finally:
        service.close()


# -- re-sized, pre-empted, restarted: a real runner -----------------------------------------------


def step_until(service: LocalService, done, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        service.step()
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.skipif(len(CORES) < 2, reason="the job is re-sized from two cores to one")
def test_a_running_job_says_why_it_was_resized_preempted_and_restarted(tmp_path):
    service = open_service(tmp_path, NAME, cpus=CORES[:2])
    spec = command_spec(
        "counting",
        [sys.executable, "-c", COUNTING, "0.05"],
        iterations=120,
        min_cpus=1,
        max_cpus=2,
    )
    try:
        job_id = "j-000001"
        GUARANTEE[job_id], WANT[job_id], WHY[job_id] = True, 2, "the test gives it two"
        assert service.submit_spec(spec).id == job_id
        step_until(service, lambda: service.job(job_id).iterations_done >= 3, "a start")
        started = last(service, job_id, "launched")
        assert started.detail["why"].startswith("started on 2 cores: the test gives it two")
        assert started.detail["workers"] == 2
        assert service.job(job_id).state == "running"
        assert_promise_agrees(service, job_id)

        WANT[job_id], WHY[job_id] = 1, "the test takes one back"
        step_until(service, lambda: len(service.job(job_id).cpus) == 1, "a re-size")
        resized = last(service, job_id, "allocation")
        assert resized.detail["why"].startswith("from 2 cores to 1: the test takes one back")
        assert (resized.detail["workers_from"], resized.detail["workers_to"]) == (2, 1)

        WANT[job_id], WHY[job_id] = 0, "the test stops it"
        GUARANTEE[job_id] = False
        step_until(service, lambda: service.job(job_id).state == "preempted", "a pre-emption")
        stopped = last(service, job_id, "stopped")
        assert stopped.detail["why"].startswith(
            "pre-empted, giving up its 1 core: the test stops it"
        )
        promise = last(service, job_id, "promise")
        assert promise.detail["promise"] == "best effort"  # its spec allows it
        assert_promise_agrees(service, job_id)

        WANT[job_id], WHY[job_id] = 1, "the test starts it again"
        step_until(service, lambda: service.job(job_id).state == "succeeded", "its end")
        restarted = last(service, job_id, "launched")
        assert restarted.detail["why"].startswith("restarted on 1 core: the test starts it again")
        assert_promise_agrees(service, job_id)
    finally:
        service.stop_runners(grace_s=5)
        service.close()


def test_past_a_few_jobs_an_admission_says_the_fastest_count_instead_of_asking_the_policy(
    tmp_path,
):
    # Asking a copy of the policy costs more with every job waiting: past ASKED_UP_TO jobs in
    # the pool, the admission says the job's fastest count on the free core instead.
    service = open_service(tmp_path, "qos", clock=lambda: NOW)
    try:
        ids = [
            service.submit_spec(cnn(f"j{n}", 2075, 600 + 200 * n, best_effort=True), NOW).id
            for n in range(ASKED_UP_TO + 2)
        ]
        whys = [last(service, job_id, "admitted").detail["why"] for job_id in ids]
    finally:
        service.close()
    assert all("it would start on" in why or "it waits" in why for why in whys[:ASKED_UP_TO])
    assert (
        "alone on the free cores it is fastest on 1 core, predicted to finish in 100 s"
        in (whys[-1])
    )
