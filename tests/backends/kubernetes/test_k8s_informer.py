"""The reflector against a server that holds watches open: one list, then one long watch that
resumes from its resourceVersion, bookmarks, a relist on 410 Expired, back-off with jitter."""

from __future__ import annotations

import time

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import client

from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import require


class Half:
    """An rng whose every draw is 0.5: jittered delays become exact."""

    def random(self) -> float:
        return 0.5


def informer(api: FakeApiServer, **options) -> Informer:
    core = require().client.CoreV1Api(client(api.url))
    cache = Informer(core.list_node, name="nodes", watch_timeout_s=60, rng=Half(), **options)
    api.stopping.append(cache.stop)
    cache.start()
    return cache


def until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def matches(cache: Informer, api: FakeApiServer) -> bool:
    held = {k: o["metadata"]["resourceVersion"] for k, o in cache.snapshot().items()}
    return held == api.versions("nodes")


@pytest.fixture
def api():
    with FakeApiServer(bookmark_every_s=0.2) as server:
        server.add_node("n1")
        yield server


def watches(api: FakeApiServer) -> int:
    return len([r for r in api.requests if r[0] == "WATCH"])


def test_one_list_then_one_watch_that_stays_open(api):
    cache = informer(api)
    until(lambda: cache.synced and watches(api) == 1)
    api.add_node("n2")
    api.patch("nodes", "n1", {"spec": {"unschedulable": True}})
    api.delete("nodes", "n2")
    api.add_node("n3")
    until(lambda: matches(cache, api))
    assert cache.snapshot()["n1"]["spec"]["unschedulable"] is True
    time.sleep(0.5)  # longer than the old fake kept any watch open
    assert (cache.relists, cache.watches, watches(api)) == (1, 1, 1)
    assert api.open_watches == 1


def test_bookmarks_advance_the_version_of_a_quiet_watch(api):
    cache = informer(api)
    until(lambda: cache.synced)
    listed = int(cache.resource_version)
    api.create("pods", {"metadata": {"name": "p", "namespace": "x"}, "spec": {"containers": []}})
    until(lambda: int(cache.resource_version) > listed)  # no node changed: a bookmark did it
    assert int(cache.resource_version) == api.rv
    assert cache.watches == 1


def test_a_watch_that_fell_behind_the_history_lists_again(api):
    api.history = 3
    cache = informer(api)
    until(lambda: cache.synced and api.open_watches == 1)
    with api.lock:  # five changes at once: the open watch cannot read between them
        for name in ("n2", "n3", "n4", "n5"):
            api._create("nodes", {"metadata": {"name": name}, "spec": {}, "status": {}})
        api._delete("nodes", "n1")
    until(lambda: matches(cache, api))
    assert cache.relists == 2
    assert set(cache.snapshot()) == {"n2", "n3", "n4", "n5"}


def test_a_watch_from_a_compacted_version_lists_again(api):
    cache = informer(api)
    until(lambda: cache.synced and api.open_watches == 1)
    api.fail("WATCH", "/nodes", 500)  # the next watch fails; the one after resumes
    api.drop_watches()
    until(lambda: cache.failures == 1)
    api.add_node("n2")
    api.compact()  # its version is now too old: 410, then a list
    until(lambda: matches(cache, api) and cache.relists == 2)
    assert set(cache.snapshot()) == {"n1", "n2"}


def test_failures_back_off_exponentially_with_jitter_and_keep_the_cache(api):
    delays: list[float] = []

    def sleep(seconds: float) -> bool:
        delays.append(seconds)
        return False

    cache = informer(api, backoff_s=(1.0, 3.0), jitter=0.5, sleep=sleep)
    until(lambda: cache.synced and api.open_watches == 1)
    api.fail("WATCH", "/nodes", 500, times=3)
    api.drop_watches()
    until(lambda: len(delays) == 3)
    assert set(cache.snapshot()) == {"n1"}  # the last good state stays
    # 1, 2, then capped at 3; each with half of the 0.5 jitter added
    assert delays == [1.25, 2.5, 3.75]
    api.add_node("n2")
    until(lambda: matches(cache, api))
    assert cache.failures == 0 and cache.relists == 1  # resumed, not listed again


def test_resync_lists_again(api):
    cache = informer(api)
    until(lambda: cache.synced)
    generation = cache.resync()
    assert cache.wait_listed(generation, timeout_s=5)
    assert cache.relists == 2


def test_stop_ends_the_thread_and_its_watch(api):
    cache = informer(api)
    until(lambda: api.open_watches == 1)
    started = time.monotonic()
    cache.stop()
    assert not cache._thread.is_alive()
    assert time.monotonic() - started < 2.0  # not the watch's 60 s
    until(lambda: api.open_watches == 0)
