"""Leader election on a Lease through the real client: one leader, takeover after expiry,
409 Conflict for the replica that wrote on a stale resourceVersion."""

from __future__ import annotations

import pytest
from k8s_helpers import SCRIPT, Clock, bindings, client, job_set, scheduler

from qosched.backends.kubernetes.kube import parse_time, require
from qosched.backends.kubernetes.lease import LeaderLease, NotLeading, fenced_client


def lease(url: str, identity: str, clock: Clock, wall: Clock | None = None) -> LeaderLease:
    coordination = require().client.CoordinationV1Api(client(url))
    return LeaderLease(
        coordination,
        name="qs",
        namespace="qosched",
        identity=identity,
        lease_duration_s=15,
        clock=wall or clock,
        monotonic=clock,
    )


def test_one_leader_until_its_lease_expires(api):
    clock = Clock(1_800_000_000.0)
    a, b = lease(api.url, "a", clock), lease(api.url, "b", clock)
    assert a.hold() and not b.hold()
    clock.now += 10
    assert a.hold() and not b.hold()  # renewed: b still waits
    clock.now += 14.9
    assert not b.hold()  # 14.9 s since a's renewal, under 15
    clock.now += 0.2
    assert b.hold()  # a missed its renewal: b takes over
    assert not a.hold()  # and a steps down
    record = api.get("leases", "qosched/qs")["spec"]
    assert record["holderIdentity"] == "b"
    assert record["leaseTransitions"] == 1
    assert parse_time(record["renewTime"]) == pytest.approx(clock.now, abs=1e-3)


def test_of_two_racing_replicas_the_stale_write_gets_a_conflict(api):
    clock = Clock(1_800_000_000.0)
    a, b = lease(api.url, "a", clock), lease(api.url, "b", clock)
    c = lease(api.url, "c", clock)
    assert a.hold() and not b.hold() and not c.hold()  # b and c see a's record
    clock.now += 60  # a's lease is long expired; b and c both see it free
    stale = b.api.read_namespaced_lease("qs", "qosched", _preload_content=False)
    assert c.hold()  # c writes first

    class Stale:
        """b's read happened before c's write."""

        def read_namespaced_lease(self, *args, **kwargs):
            return stale

        def __getattr__(self, name):
            return getattr(c.api, name)

    b.api = Stale()
    assert not b.hold()  # the API server answered 409 to b's replace
    assert api.get("leases", "qosched/qs")["spec"]["holderIdentity"] == "c"


def test_only_the_leading_scheduler_binds(api):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 2
    clock = Clock(1_800_000_000.0)
    first = scheduler(api.url, identity="first", clock=clock)
    second = scheduler(api.url, identity="second", clock=clock)
    for _ in range(3):
        assert first.step().leading
        report = second.step()
        assert not report.leading and not report.bound and not report.scaled
    assert len(bindings(api)) == 2
    clock.now += 60  # the first replica died without releasing its lease
    reports = [second.step() for _ in range(2)]
    assert reports[0].leading
    assert reports[-1].decision == {"ml/a": 2}
    assert len(bindings(api)) == 2  # the new leader rebuilt the state: nothing bound twice


def test_a_released_lease_is_taken_at_once(api):
    clock = Clock(1_800_000_000.0)
    a, b = lease(api.url, "a", clock), lease(api.url, "b", clock)
    assert a.hold() and not b.hold()
    a.release()  # a clean shutdown
    assert not a.leading
    assert b.hold()  # no need to wait out a's 15 s


def test_a_leader_that_cannot_renew_stops_leading_at_its_renew_deadline(api):
    clock = Clock(1_800_000_000.0)
    a = lease(api.url, "a", clock)
    assert a.hold()
    api.fail("GET", "/leases/qs$", 500, times=100)  # every renewal fails from now on
    clock.now += 9.9
    assert a.hold() and a.leading  # still within its 10 s renew deadline (2/3 of 15 s)
    a.check()
    clock.now += 0.2
    assert not a.hold() and not a.leading
    with pytest.raises(NotLeading):
        a.check()


def test_a_successor_counts_the_lease_on_its_own_clock_whatever_its_offset(api):
    clock = Clock(1_800_000_000.0)
    ahead = Clock(1_800_000_000.0 + 3_600)  # b's wall clock is an hour ahead of a's
    a, b = lease(api.url, "a", clock), lease(api.url, "b", clock, wall=ahead)
    assert a.hold()
    assert not b.hold()  # a renewal "an hour old" by b's wall clock does not fool it
    clock.now += 14.9
    assert not b.hold()
    clock.now += 0.2
    assert b.hold()  # 15 s of b's own clock without a renewal


def test_the_fenced_client_refuses_writes_unless_leading(api):
    clock = Clock(1_800_000_000.0)
    a = lease(api.url, "a", clock)
    core = require().client.CoreV1Api(fenced_client(client(api.url), a))
    event = {"metadata": {"generateName": "e."}, "involvedObject": {}, "reason": "R"}
    with pytest.raises(NotLeading):
        core.create_namespaced_event("qosched", event, _preload_content=False)
    assert core.list_node(_preload_content=False).status == 200  # reads pass
    assert a.hold()
    core.create_namespaced_event("qosched", event, _preload_content=False)
    clock.now += 10.0  # the renew deadline passes without a renewal
    with pytest.raises(NotLeading):
        core.create_namespaced_event("qosched", event, _preload_content=False)
    assert len(api.list("events")) == 1


def test_a_client_whose_call_api_begins_with_the_path_is_refused_not_left_unfenced():
    """kubernetes < 37 generated ``call_api(resource_path, method, ...)``: a fence reading the
    method from the first argument would let every write through on it."""
    from qosched.backends.kubernetes.lease import ClientTooOld, _check_call_api

    class OldClient:
        def call_api(self, resource_path, method, path_params=None):
            raise AssertionError("never called")

    class NewClient:
        def call_api(self, method, url, header_params=None):
            raise AssertionError("never called")

    with pytest.raises(ClientTooOld, match="kubernetes 37 or later"):
        _check_call_api(OldClient)
    _check_call_api(NewClient)
    _check_call_api(require().client.ApiClient)  # the installed client is one the fence wraps
