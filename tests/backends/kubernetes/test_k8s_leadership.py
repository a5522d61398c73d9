"""Two replicas against a server that holds watches open: only the Lease holder's writes are
ever accepted, with rounds as long as the API makes them and with a replica paused longer
than its Lease, as a GC pause or a node stall does; a replica stalled after its fence check
lands no write over what its successor wrote."""

from __future__ import annotations

import threading
import time

import pytest
from k8s_helpers import (
    SCRIPT,
    Scripted,
    after_fence,
    client,
    job_set,
    stale_writes,
    unconditional_writes,
    writes_without_the_lease,
)

from qosched.backends.kubernetes.scheduler import K8sScheduler, SchedulerConfig

BIG = {"gpus": 64, "cpu": "256", "memory": "1Ti"}
pytestmark = pytest.mark.apiserver(nodes={"g1": BIG, "g2": BIG})


def replica(api, identity: str, **config) -> K8sScheduler:
    cfg = SchedulerConfig(identity=identity, policy="scripted", **config)
    return K8sScheduler(client(api.url, agent=f"qosched/{identity}"), cfg, make_policy=Scripted)


def run_replicas(replicas: list[K8sScheduler], seconds: float, arrivals) -> None:
    """Each replica's ``run`` in a thread of its own, the first until it leads (on a busy
    machine 0.3 s may not be enough for it to take the Lease), the others 0.3 s apart, while
    ``arrivals`` submits jobs."""
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in replicas]
    for index, thread in enumerate(threads):
        thread.start()
        time.sleep(0.3)
        if index == 0:
            assert wait_for(lambda: replicas[0].lease.leading), "the first replica never led"
    try:
        arrivals(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def submit_every(api, interval_s: float):
    def arrivals(seconds: float) -> None:
        end, index = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            SCRIPT[f"ml/j{index}"] = 1
            api.create("statefulsets", job_set(f"j{index}"))
            index += 1
            time.sleep(interval_s)

    return arrivals


@pytest.mark.slow
def test_two_replicas_with_long_watches_never_both_write(api):
    # The settings of the report: watches of 3 s, a Lease of 4 s, two replicas, jobs arriving.
    options = {"watch_timeout_s": 3, "lease_duration_s": 4, "tick_s": 0.5}
    a, b = replica(api, "a", **options), replica(api, "b", **options)
    run_replicas([a, b], 10.5, submit_every(api, 0.3))
    assert len(api.writes) > 20  # the replicas did write: the check below can fail
    assert writes_without_the_lease(api) == []
    bound = [p for p in api.list("pods") if p["spec"].get("nodeName")]
    assert len(bound) >= 20  # and they kept scheduling the jobs as they came


@pytest.mark.slow
def test_a_replica_paused_longer_than_its_lease_writes_nothing_when_it_wakes(api):
    options = {"watch_timeout_s": 30, "lease_duration_s": 2, "tick_s": 0.2}
    a, b = replica(api, "a", **options), replica(api, "b", **options)
    running = threading.Event()
    running.set()
    paused: list[float] = []

    def frozen(method):
        """``method``, stopped while the replica is paused (its whole process is)."""

        def call(*args, **kwargs):
            running.wait()
            return method(*args, **kwargs)

        return call

    a.lease.hold = frozen(a.lease.hold)
    bind_jobs = a.binder.bind_jobs

    def pause_then_bind(*args, **kwargs):
        if not paused:  # the first time a binds, mid-round, it stalls for 3.5 s
            paused.append(time.monotonic())
            running.clear()
            time.sleep(3.5)
            running.set()
        return bind_jobs(*args, **kwargs)

    a.binder.bind_jobs = pause_then_bind
    api.create("statefulsets", job_set("first"))
    SCRIPT["ml/first"] = 1

    def arrivals(seconds: float) -> None:
        time.sleep(1.0)  # a leads (it started first) and meets the job
        submit_every(api, 0.25)(seconds - 1.0)

    run_replicas([a, b], 6.0, arrivals)
    assert paused, "replica a never reached a binding"
    assert writes_without_the_lease(api) == []
    holders = [r.holder for r in api.lease_log]
    assert "a" in holders and "b" in holders  # b took over during the pause
    assert api.get("pods", "ml/first-0")["spec"].get("nodeName")  # and scheduled the job


def wait_for(condition, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_a_replica_stalled_after_its_fence_check_lands_no_stale_patch(api):
    # The gap the fence cannot close: a stops between the check and the send of a
    # StatefulSet patch, b takes over and patches the same set, then a's patch arrives.
    options = {"watch_timeout_s": 30, "lease_duration_s": 2, "tick_s": 0.2}
    a, b = replica(api, "a", **options), replica(api, "b", **options)
    running, stalled, armed = threading.Event(), threading.Event(), threading.Event()
    running.set()
    hold = a.lease.hold

    def frozen_hold():
        running.wait()  # a's whole process stalls: its Lease renewals too
        return hold()

    def b_patched_the_set() -> bool:
        return any(
            w.agent == "qosched/b" and w.method == "PATCH" and w.path.endswith("statefulsets/j")
            for w in api.writes
        )

    def stall(method: str, url: str) -> None:
        if armed.is_set() and method == "PATCH" and url.endswith("/statefulsets/j"):
            armed.clear()
            running.clear()
            stalled.set()
            wait_for(b_patched_the_set, timeout_s=20.0)  # a stall as long as b needs
            running.set()

    a.lease.hold = frozen_hold
    after_fence(a, stall)
    api.create("statefulsets", job_set("j"))
    SCRIPT["ml/j"] = 1

    def scenario(_seconds: float) -> None:
        assert wait_for(lambda: api.get("pods", "ml/j-0")["spec"].get("nodeName"))
        assert a.lease.leading  # a started first: it leads and bound the job
        armed.set()
        SCRIPT["ml/j"] = 3  # a decides 3 replicas and stalls sending it
        assert stalled.wait(20.0), "a never patched the set"
        SCRIPT["ml/j"] = 2  # b, leading now, decides 2
        assert wait_for(lambda: running.is_set(), timeout_s=30.0)
        # a's late patch has been sent and answered; b goes on leading
        assert wait_for(lambda: api.get("statefulsets", "ml/j")["spec"]["replicas"] == 2)
        time.sleep(1.0)

    run_replicas([a, b], 0.0, scenario)
    assert b_patched_the_set()  # the scenario happened: b wrote the set while a stalled
    assert stale_writes(api) == []  # a's patch was refused, not laid over b's
    assert unconditional_writes(api) == []
    assert api.get("statefulsets", "ml/j")["spec"]["replicas"] == 2
