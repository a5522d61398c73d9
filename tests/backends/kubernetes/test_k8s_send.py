"""Writes sent with bounded concurrency: the Sender on its own, then a burst of bindings through
the scheduler, never more in flight than configured, and none after the Lease is lost."""

from __future__ import annotations

import threading

import pytest
from k8s_helpers import SCRIPT, Clock, after_fence, bindings, job_set, scheduler

from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.backends.kubernetes.lease import NotLeading
from qosched.backends.kubernetes.send import MAX_IN_FLIGHT, Sender
from qosched.core.errors import InputError

#: Generous bound on any wait for other threads: a busy machine is slow, never this slow.
WAIT_S = 30.0


class Gauge:
    """Counts the calls running at once; the first ``together`` calls wait for each other, so
    a sender that runs fewer at once than that fails them (BrokenBarrierError) instead of
    passing by luck of timing."""

    def __init__(self, together: int) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.started = 0
        self.barrier = threading.Barrier(together, timeout=WAIT_S)
        self.together = together

    def __enter__(self) -> Gauge:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.started += 1
            first = self.started <= self.together
        if first:
            self.barrier.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


@pytest.mark.parametrize("in_flight", [2, 5])
def test_the_sender_runs_in_flight_calls_at_once_and_no_more(in_flight):
    gauge = Gauge(in_flight)

    def call(i: int) -> int:
        with gauge:
            return i * i

    outcomes = Sender(in_flight).each([lambda i=i: call(i) for i in range(40)])
    assert [o.result() for o in outcomes] == [i * i for i in range(40)]  # in the calls' order
    assert gauge.most == in_flight


@pytest.mark.parametrize("in_flight", [1, 4])
def test_after_the_stop_error_the_calls_not_started_are_not_run(in_flight):
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            started.append(i)
        if i == 9:
            raise NotLeading("lost")
        if i == 3:
            raise ValueError("one call's error")
        return i

    calls = [lambda i=i: call(i) for i in range(200)]
    outcomes = Sender(in_flight, stop=NotLeading).each(calls)
    assert len(outcomes) == 200
    assert isinstance(outcomes[3].error, ValueError)  # an error of its own: the others go on
    assert [o.result() for o in outcomes[:3]] == [0, 1, 2]
    assert isinstance(outcomes[9].error, NotLeading)
    if in_flight == 1:
        assert started == list(range(10))  # in order, and none after the stop
    # Those in flight when the stop came finish; no other starts.
    assert len(started) < 200
    for i in set(range(200)) - set(started):
        with pytest.raises(NotLeading):
            outcomes[i].result()


def test_one_in_flight_runs_the_calls_in_the_callers_thread_in_order():
    seen: list[tuple[int, str]] = []
    Sender(1).each(
        [lambda i=i: seen.append((i, threading.current_thread().name)) for i in range(5)]
    )
    assert seen == [(i, threading.current_thread().name) for i in range(5)]


@pytest.mark.parametrize("bad", [0, MAX_IN_FLIGHT + 1, 2.5, "8"])
def test_in_flight_out_of_bounds_is_refused_with_its_field(bad):
    with pytest.raises(InputError, match="in_flight"):
        SchedulerConfig(identity="a", in_flight=bad)


JOBS = 40
BURST = {"nodes": {f"n{i}": {"gpus": 8} for i in range(8)}}


def burst(api) -> None:
    for i in range(JOBS):
        api.create("statefulsets", job_set(f"j{i:02d}"))
        SCRIPT[f"ml/j{i:02d}"] = 1


def count_bindings(sched, gauge: Gauge) -> None:
    """Measure the bindings in flight: from the fence passed to the answer back."""
    fenced = sched.apps.api_client
    send = fenced.call_api

    def call_api(method, url, *args, **kwargs):
        if not url.endswith("/binding"):
            return send(method, url, *args, **kwargs)
        with gauge:
            return send(method, url, *args, **kwargs)

    fenced.call_api = call_api


@pytest.mark.apiserver(**BURST)
def test_a_burst_of_bindings_is_sent_in_flight_at_a_time(api):
    burst(api)
    sched = scheduler(api.url, in_flight=4)
    gauge = Gauge(4)
    count_bindings(sched, gauge)
    report = sched.step()
    assert not report.errors
    assert len(report.bound) == JOBS and len(bindings(api)) == JOBS
    assert gauge.most == 4  # the 4 first waited for one another; never a fifth at once
    scheduled = [w for w in api.writes if w.path.endswith("/events")]
    assert len(scheduled) == JOBS  # and every Scheduled Event went out


@pytest.mark.apiserver(**BURST)
def test_no_binding_leaves_after_the_lease_is_lost_mid_burst(api):
    burst(api)
    clock = Clock(1_000.0)
    sched = scheduler(api.url, clock=clock, in_flight=8)
    passed: list[str] = []
    lock = threading.Lock()

    def lose_the_lease_at_the_fifth_binding(method: str, url: str) -> None:
        if not url.endswith("/binding"):
            return
        with lock:
            passed.append(url)
            if len(passed) == 5:
                clock.now += 3_600.0  # past the renew deadline: every later check refuses

    after_fence(sched, lose_the_lease_at_the_fifth_binding)
    report = sched.step()
    assert report.abandoned and not report.leading
    sent = bindings(api)
    # Exactly the bindings that passed the fence before the loss (up to the 8 in flight then):
    # each later one was refused by its own check, in the thread that was to send it.
    assert 5 <= len(sent) == len(passed) < 5 + 8
    assert len(sent) < JOBS  # the burst was cut short: the check above could fail
    assert not [w for w in api.writes if w.path.endswith("/events")]  # nor an Event after it
    # The next round leads again (a new term) and binds the rest, none twice.
    report = sched.step()
    assert report.leading and not report.abandoned
    assert sorted(p["metadata"]["name"] for p in api.list("pods") if p["spec"].get("nodeName")) == [
        f"j{i:02d}-0" for i in range(JOBS)
    ]
    assert len(api.bound_uids) == len(set(api.bound_uids)) == JOBS


@pytest.mark.apiserver(**BURST)
def test_a_burst_reuses_its_connections(api):
    """Each answer is read to its end, so its connection serves the next write: an unread one
    holds its connection until collected, and every write then opens one (a TLS handshake on
    a real cluster)."""
    sched = scheduler(api.url, in_flight=4)
    sched.step()  # the term's first round: fresh lists, the admission key
    burst(api)
    opened = api.connections
    report = sched.step()
    assert len(report.bound) == JOBS
    writes = [w for w in api.writes if w.agent == "qosched/a"]
    assert len(writes) >= 3 * JOBS  # an admission, a binding and an Event per job
    assert api.connections - opened <= 4 + 1  # one per write in flight (and one spare)
