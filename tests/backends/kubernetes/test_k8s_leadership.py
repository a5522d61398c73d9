"""Two replicas against a server that holds watches open: only the Lease holder's writes are
ever accepted, with rounds as long as the API makes them and with a replica paused longer
than its Lease, as a GC pause or a node stall does."""

from __future__ import annotations

import threading
import time

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import SCRIPT, Scripted, client, job_set, writes_without_the_lease

from qosched.backends.kubernetes.scheduler import K8sScheduler, SchedulerConfig


@pytest.fixture
def api():
    SCRIPT.clear()
    with FakeApiServer() as server:
        server.add_node("g1", gpus=64, cpu="256", memory="1Ti")
        server.add_node("g2", gpus=64, cpu="256", memory="1Ti")
        yield server


def replica(api, identity: str, **config) -> K8sScheduler:
    cfg = SchedulerConfig(identity=identity, policy="scripted", **config)
    return K8sScheduler(client(api.url, agent=f"qosched/{identity}"), cfg, make_policy=Scripted)


def run_replicas(replicas: list[K8sScheduler], seconds: float, arrivals) -> None:
    """Each replica's ``run`` in a thread of its own, started 0.3 s apart (the first leads),
    while ``arrivals`` submits jobs."""
    stop = threading.Event()
    threads = [threading.Thread(target=r.run, args=(stop,), daemon=True) for r in replicas]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
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


def test_two_replicas_with_long_watches_never_both_write(api):
    # The settings of the report: watches of 3 s, a Lease of 4 s, two replicas, jobs arriving.
    options = {"watch_timeout_s": 3, "lease_duration_s": 4, "tick_s": 0.5}
    a, b = replica(api, "a", **options), replica(api, "b", **options)
    run_replicas([a, b], 10.5, submit_every(api, 0.3))
    assert len(api.writes) > 20  # the replicas did write: the check below can fail
    assert writes_without_the_lease(api) == []
    bound = [p for p in api.list("pods") if p["spec"].get("nodeName")]
    assert len(bound) >= 20  # and they kept scheduling the jobs as they came


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
    bind_job = a._bind_job

    def pause_then_bind(*args, **kwargs):
        if not paused:  # the first time a binds, mid-round, it stalls for 3.5 s
            paused.append(time.monotonic())
            running.clear()
            time.sleep(3.5)
            running.set()
        return bind_job(*args, **kwargs)

    a._bind_job = pause_then_bind
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
