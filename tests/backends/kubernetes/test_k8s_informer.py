"""The list-then-watch cache: resumption from resourceVersion, 410 Expired, back-off."""

from __future__ import annotations

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import Clock

from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import api_client, require


@pytest.fixture
def api():
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server


def informer(url: str, clock: Clock) -> Informer:
    core = require().client.CoreV1Api(api_client(url))
    return Informer(core.list_node, watch_timeout_s=1, backoff_s=(1.0, 8.0), clock=clock)


def test_watch_resumes_from_the_last_resource_version(api):
    cache = informer(api.url, Clock(0.0))
    assert cache.sync() and set(cache.objects) == {"n1"}
    api.add_node("n2")
    api.patch("nodes", "n1", {"spec": {"unschedulable": True}})
    api.delete("nodes", "n2")
    api.add_node("n3")
    assert cache.sync()
    assert set(cache.objects) == {"n1", "n3"}
    assert cache.objects["n1"]["spec"]["unschedulable"] is True
    assert cache.relists == 1  # one list, then watches only
    assert cache.resource_version == api.get("nodes", "n3")["metadata"]["resourceVersion"]
    watches = [r for r in api.requests if r[0] == "WATCH"]
    assert len(watches) == 1


def test_an_expired_watch_lists_again_and_misses_nothing(api):
    cache = informer(api.url, Clock(0.0))
    cache.sync()
    api.add_node("n2")
    api.delete("nodes", "n1")
    api.compact()  # the events above are gone: a watch from the old version gets 410
    assert cache.sync()
    assert cache.relists == 2
    assert set(cache.objects) == {"n2"}  # the deletion seen through the new list


def test_errors_back_off_exponentially_and_keep_the_cache(api):
    clock = Clock(0.0)
    cache = informer(api.url, clock)
    cache.sync()
    api.fail("WATCH", "/nodes", 500, times=2)
    assert not cache.sync()
    assert set(cache.objects) == {"n1"}  # the last good state stays
    watches = len([r for r in api.requests if r[0] == "WATCH"])
    assert not cache.sync()  # inside the 1 s back-off: no request at all
    assert len([r for r in api.requests if r[0] == "WATCH"]) == watches
    clock.now += 1.0
    assert not cache.sync()  # second failure: now 2 s
    clock.now += 1.5
    assert not cache.sync()
    clock.now += 0.5
    api.add_node("n2")
    assert cache.sync()
    assert set(cache.objects) == {"n1", "n2"} and cache.failures == 0
