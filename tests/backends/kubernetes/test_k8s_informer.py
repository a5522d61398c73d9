"""The reflector against a server that holds watches open: one list, then one long watch that
resumes from its resourceVersion, bookmarks, a relist on 410 Expired, back-off with jitter."""

from __future__ import annotations

import json
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


def no_wait(seconds: float) -> bool:
    """A back-off that does not wait: these tests check what happens after it, not its delay."""
    return False


def until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def matches(cache: Informer, api: FakeApiServer) -> bool:
    held = {k: o["metadata"]["resourceVersion"] for k, o in cache.snapshot().items()}
    return held == api.versions("nodes")


pytestmark = pytest.mark.apiserver(nodes={"n1": {}}, bookmark_every_s=0.2)


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
    cache = informer(api, sleep=no_wait)
    until(lambda: cache.synced and api.open_watches == 1)
    with api.lock:  # five changes at once: the open watch cannot read between them
        for name in ("n2", "n3", "n4", "n5"):
            api._create("nodes", {"metadata": {"name": name}, "spec": {}, "status": {}})
        api._delete("nodes", "n1")
    until(lambda: matches(cache, api))
    assert cache.relists == 2
    assert set(cache.snapshot()) == {"n2", "n3", "n4", "n5"}


def test_a_watch_from_a_compacted_version_lists_again(api):
    cache = informer(api, sleep=no_wait)
    until(lambda: cache.synced and api.open_watches == 1)
    api.fail("WATCH", "/nodes", 500)  # the next watch fails; the one after resumes
    api.drop_watches()
    until(lambda: cache.failures >= 1 and api.open_watches == 1)
    api.add_node("n2")
    api.compact()  # its version is now too old: 410, then a list
    until(lambda: matches(cache, api) and cache.relists == 2)
    assert set(cache.snapshot()) == {"n1", "n2"}


def test_failures_back_off_exponentially_with_jitter_and_keep_the_cache(api):
    delays: list[float] = []

    def sleep(seconds: float) -> bool:
        delays.append(seconds)
        return False

    cache = informer(api, backoff_s=(1.0, 3.0), jitter=0.5, sleep=sleep, backoff_reset_s=0.3)
    until(lambda: cache.synced and api.open_watches == 1)
    time.sleep(1.1)  # the watch is no longer one that the server ended at once
    api.fail("WATCH", "/nodes", 500, times=3)
    api.drop_watches()
    until(lambda: len(delays) == 3)
    assert set(cache.snapshot()) == {"n1"}  # the last good state stays
    # 1, 2, then capped at 3; each with half of the 0.5 jitter added
    assert delays == [1.25, 2.5, 3.75]
    api.add_node("n2")
    until(lambda: matches(cache, api))
    assert cache.relists == 1  # resumed, not listed again
    until(lambda: cache.failures == 0)  # once the watch has delivered events for 0.3 s


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


# -- a scripted API, a clock the streams advance, and the back-offs asked for ----------------


class Stream:
    """A watch response: ``items`` are events (sent as JSON lines), raw ``bytes``, or
    numbers of seconds the stream stays open before its next line (on the test's clock)."""

    def __init__(self, items, clock: list[float]) -> None:
        self.items, self.clock = items, clock

    def stream(self, amt=None, decode_content=False):
        for item in self.items:
            if isinstance(item, int | float):
                self.clock[0] += item
            elif isinstance(item, bytes):
                yield item
            else:
                yield (json.dumps(item) + "\n").encode()

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class Listed:
    def __init__(self, body) -> None:
        self.data = json.dumps(body).encode()


class Gone(Exception):
    status = 410


def node_object(name: str, version: int) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


def scripted(watch, *, rounds: int = 100, items=None, list_version: str = "10"):
    """An informer on a scripted API whose thread ends after ``rounds`` back-offs or when
    ``watch(n)``, which answers the ``n``-th watch (a list of Stream items, or raises), returns
    None. Returns the informer once its thread has ended, the delays it asked for and the
    versions each watch started from."""
    clock, delays, started = [0.0], [], []
    lists = [0]

    def list_func(watch_=False, **kwargs):
        if kwargs.pop("watch", watch_):
            started.append(kwargs["resource_version"])
            answer = watch(len(started))
            if answer is None:
                cache._stop.set()
            return Stream(answer or [], clock)
        lists[0] += 1
        items_now = [node_object("n1", 5)] if items is None else items
        return Listed({"metadata": {"resourceVersion": list_version}, "items": items_now})

    def sleep(seconds: float) -> bool:
        delays.append(seconds)
        return len(delays) >= rounds

    cache = Informer(
        list_func, name="nodes", rng=Half(), sleep=sleep, clock=lambda: clock[0], watch_timeout_s=60
    )
    cache.start()
    cache._thread.join(timeout=10)
    assert not cache._thread.is_alive()
    cache.lists = lists[0]
    return cache, delays, started


#: client-go's reflector back-off: 0.8 s doubling up to 30 s; here with half the jitter (x1.5).
GROWING = [1.2, 2.4, 4.8, 9.6, 19.2, 38.4, 45.0]


def error_event(code: int) -> dict:
    return {"type": "ERROR", "object": {"kind": "Status", "code": code, "message": "no"}}


def bookmark(version: int) -> dict:
    return {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(version)}}}


def raise_gone(n):
    raise Gone("Expired")


@pytest.mark.parametrize(
    ("watch", "lists"),
    [
        (raise_gone, 7),
        (lambda n: [error_event(410)], 7),
        (lambda n: [], 1),
        (lambda n: [{"type": "ADDED", "object": node_object("n2", 11)}], 1),
        (lambda n: [bookmark(11), error_event(500)], 1),
        (lambda n: [30.0, error_event(500)], 1),
    ],
    ids=[
        "410-status",
        "410-error-event",
        "closed-at-once",
        "closed-at-once-after-an-event",
        "open-then-error-500",
        "open-quiet-then-error-500",
    ],
)
def test_repeated_failures_back_off_and_never_reset_on_their_own(watch, lists):
    cache, delays, _ = scripted(watch, rounds=len(GROWING))
    assert delays == pytest.approx(GROWING)
    assert cache.lists == lists  # 410s list again after each back-off; the others resume


def test_a_watch_open_and_delivering_for_a_while_resets_the_back_off():
    def watch(n):
        if n == 3:  # 12 s open with events, then failed: a fresh start, not the third failure
            return [bookmark(20), 6.0, bookmark(21), 6.0, bookmark(22), error_event(500)]
        return [error_event(500)]

    _, delays, started = scripted(watch, rounds=5)
    assert delays == pytest.approx([1.2, 2.4, 1.2, 2.4, 4.8])
    assert started[3:] == ["22", "22"]  # resumed from the last bookmark


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "ADDED", "object": {"kind": "Node"}},
        {"type": "ADDED", "object": {"metadata": {"resourceVersion": "11"}}},
        {"type": "DELETED", "object": {}},
        {"type": "MODIFIED", "object": None},
        {"type": "WHATEVER", "object": node_object("n9", 11)},
        [1, 2],
        b"42\n",
        b"{not json\n",
    ],
    ids=[
        "no-metadata",
        "no-name",
        "deleted-empty",
        "object-null",
        "unknown-type",
        "a-list",
        "a-number",
        "not-json",
    ],
)
def test_a_malformed_event_is_skipped_and_the_stream_goes_on(bad):
    def watch(n):
        if n == 1:
            return [bad, {"type": "ADDED", "object": node_object("n2", 12)}, 60.0]
        return None

    cache, _, started = scripted(watch)
    assert set(cache.snapshot()) == {"n1", "n2"}  # the good event after it was applied
    assert (cache.resource_version, cache.skipped, cache.lists) == ("12", 1, 1)
    assert started[1] == "12"  # resumed past both


def test_malformed_events_in_a_row_make_the_informer_list_again():
    def watch(n):
        if n == 1:
            return [{"type": "ADDED", "object": {"kind": "Node"}}] * 3 + [60.0]
        return None

    cache, delays, _ = scripted(watch)
    assert cache.lists == 2 and cache.skipped == 3
    assert delays == pytest.approx([1.2])  # after a back-off, as any failure
    assert cache.synced and set(cache.snapshot()) == {"n1"}


def test_a_list_leaves_out_objects_without_a_name_and_needs_a_version():
    good = node_object("n1", 5)
    cache, delays, _ = scripted(lambda n: None, items=[good, {"metadata": {}}, {"kind": "Node"}])
    assert set(cache.snapshot()) == {"n1"} and cache.skipped == 2 and delays == []
    cache, delays, _ = scripted(lambda n: None, rounds=3, list_version="")
    assert not cache.synced and delays == pytest.approx(GROWING[:3])


def test_an_event_older_than_the_object_held_changes_nothing():
    """The list holds n1 at version 30; a DELETED of n1 at 11 (an object of that name deleted
    before this one was made) keeps it, and the watch's version never goes back."""

    def watch(n):
        if n == 1:
            return [
                {"type": "DELETED", "object": node_object("n1", 11)},
                {"type": "MODIFIED", "object": node_object("n1", 12)},
                60.0,
            ]
        return None

    cache, _, started = scripted(watch, items=[node_object("n1", 30)], list_version="30")
    assert cache.snapshot()["n1"]["metadata"]["resourceVersion"] == "30"
    assert cache.resource_version == "30"
    assert started[1] == "30"


def test_a_deleted_event_as_new_as_the_object_removes_it():
    def watch(n):
        if n == 1:
            return [{"type": "DELETED", "object": node_object("n1", 31)}, 60.0]
        return None

    cache, _, _ = scripted(watch, items=[node_object("n1", 30)], list_version="30")
    assert cache.snapshot() == {} and cache.resource_version == "31"
