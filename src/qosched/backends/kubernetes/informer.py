"""A reflector and its cache, as client-go's: one kind of object, kept up to date by a thread.

:meth:`Informer.start` starts a thread that lists the objects, then watches from the list's
``resourceVersion`` for as long as the server keeps the stream open (``timeoutSeconds``, a
random share above ``watch_timeout_s`` so that replicas do not all re-watch at once), asking
for bookmarks so that a quiet stream still advances its version. When a stream ends it
watches again from the last version seen; a watch that expired (HTTP 410 ``Expired``, as an
``ERROR`` event or as the response status) lists again; any other failure (a network error, a
5xx, a 429) keeps the cache and watches again.

Between failures the informer backs off as client-go's reflector does: exponentially from
0.8 s to 30 s, with jitter. A failure is a list or watch that fails, a watch that expired, an
``ERROR`` event, and a watch that the server ended within ``SHORT_WATCH_S`` of opening it (a
server or proxy that ends every watch at once, with or without events, would otherwise be
asked thousands of times a second; a healthy one keeps it open until its timeout).
The back-off starts again from its minimum only once a watch has stayed open and delivered
events for ``backoff_reset_s`` (at most its own timeout): a server that accepts each watch and
fails it at once never resets it.

A malformed event (not JSON, of no known type, an object without ``metadata.name``) is logged
and skipped, its ``resourceVersion`` taken where it has one, so that one bad event cannot stall
the stream at its version; ``MAX_GARBLED`` of them in a row end the stream, and the informer
lists again (after a back-off). A list is read the same way: objects without a name are left
out, and a list without a ``resourceVersion`` is a failure.

The scheduler's rounds only read the cache (:meth:`snapshot`), never the API, so a round
lasts as long as its decisions and writes, not as long as a watch. :meth:`put` and
:meth:`forget` record the scheduler's own writes until the watch confirms them; an event
older than what the cache holds never replaces it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from qosched.backends.kubernetes.kube import key_of, read_json, status_of

log = logging.getLogger(__name__)

HTTP_GONE = 410
#: A watch that ends this soon after it opened counts as a failure.
SHORT_WATCH_S = 1.0
#: Malformed events in a row (across watches) after which the informer lists again.
MAX_GARBLED = 3
EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


class Expired(Exception):
    """The watch's version is older than the server's history: list again."""


class Garbled(Exception):
    """The stream keeps sending malformed events: list again."""


class Informer:
    """Objects of one kind by ``namespace/name``; see the module docstring.

    ``list_func`` is a client list method (``CoreV1Api.list_pod_for_all_namespaces``, ...);
    ``kwargs`` go to every list and watch call (a namespace, a label selector). ``sleep`` waits
    out a back-off (tests pass one that records it); it returns True when the informer is
    stopping. ``clock`` times the watches (monotonic seconds).
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        *,
        name: str = "objects",
        watch_timeout_s: float = 300.0,
        backoff_s: tuple[float, float] = (0.8, 30.0),
        backoff_reset_s: float = 10.0,
        jitter: float = 1.0,
        rng: random.Random | None = None,
        sleep: Callable[[float], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        self.list_func = list_func
        self.name = name
        self.kwargs = kwargs
        self.watch_timeout_s = watch_timeout_s
        self.backoff_min_s, self.backoff_max_s = backoff_s
        # A watch cannot stay open past its timeout: a shorter one must be able to reset too.
        self.backoff_reset_s = min(backoff_reset_s, watch_timeout_s)
        self.jitter = jitter
        self.clock = clock
        self.rng = rng or random.Random()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[str, Any]] = {}
        self.resource_version: str | None = None
        self.relists = 0  # how many times the cache was rebuilt by a list
        self.watches = 0  # watch streams opened
        self.failures = 0  # consecutive failures
        self.skipped = 0  # malformed events and listed objects skipped
        self._garbled = 0  # malformed events in a row
        self._relist_wanted = 0  # generation of the list asked for by resync()
        self._listed = 0  # generation of the last list
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # -- the reflector thread -----------------------------------------------------------------

    def start(self) -> None:
        """Start the reflector thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.name}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its watch; returns once it has ended."""
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed
                response.shutdown()  # wakes the read blocked on the stream
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            expired = False
            try:
                if self.resource_version is None or self._listed < self._relist_wanted:
                    self._list()
                if self._watch():
                    continue  # ended as a watch ends (its timeout): resume at once
                problem = f"the server ended the watch within {SHORT_WATCH_S:g} s"
            except Expired as exc:
                expired, problem = True, f"watch expired (410: {exc})"
            except Garbled as exc:
                expired, problem = True, f"{MAX_GARBLED} malformed watch events in a row ({exc})"
            except Exception as exc:
                expired, problem = status_of(exc) == HTTP_GONE, _short(exc)
            if self._stop.is_set():
                return
            if self._listed < self._relist_wanted:
                continue  # resync() cut the stream: list now, no back-off
            if expired:
                self.resource_version = None
            self.failures += 1
            delay = self.backoff(self.failures)
            log.log(
                logging.INFO if expired and self.failures == 1 else logging.WARNING,
                "%s: %s; %s in %.1f s",
                self.name,
                problem,
                "listing again" if expired else "retrying",
                delay,
            )
            if self._sleep(delay):
                return

    def backoff(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures: exponential, capped, with
        up to ``jitter`` times more at random (replicas that failed together retry apart)."""
        base = min(self.backoff_max_s, self.backoff_min_s * 2 ** (failures - 1))
        return base * (1.0 + self.jitter * self.rng.random())

    def _list(self) -> None:
        wanted = self._relist_wanted
        body = read_json(self.list_func(_preload_content=False, **self.kwargs))
        meta = body.get("metadata") if isinstance(body, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        items = body.get("items") or [] if isinstance(body, dict) else None
        if not isinstance(version, str) or not version or not isinstance(items, list):
            raise ValueError("the list has no metadata.resourceVersion or no items list")
        objects = {key_of(item): item for item in items if _unnamed(item) is None}
        if len(objects) < len(items):
            self.skipped += len(items) - len(objects)
            log.warning(
                "%s: %d listed objects without a metadata.name left out",
                self.name,
                len(items) - len(objects),
            )
        with self._changed:
            self._objects = objects
            self.resource_version = version
            self._garbled = 0
            self.relists += 1
            self._listed = max(self._listed + 1, wanted)
            self._changed.notify_all()

    def _watch(self) -> bool:
        """One watch stream, until it ends; False when the server ended it within
        ``SHORT_WATCH_S`` (a failure). An ``ERROR`` event raises."""
        timeout = int(self.watch_timeout_s * (1.0 + self.rng.random()))
        response = self.list_func(
            watch=True,
            resource_version=self.resource_version,
            timeout_seconds=max(1, timeout),
            allow_watch_bookmarks=True,
            _preload_content=False,
            # Bookmarks and events arrive well within this; a silent stream is a dead one.
            _request_timeout=(10, timeout + 60),
            **self.kwargs,
        )
        self._response = response
        self.watches += 1
        opened, delivered = self.clock(), 0
        try:
            for event in _lines(response):
                if self._stop.is_set() or self._listed < self._relist_wanted:
                    return True
                delivered += self._apply(event)
                self._healthy(opened, delivered)
        finally:
            self._response = None
            response.release_conn()
        self._healthy(opened, delivered)
        return self.clock() - opened >= SHORT_WATCH_S

    def _healthy(self, opened: float, delivered: int) -> None:
        """A watch open for ``backoff_reset_s`` that delivers events: the back-off starts again
        from its minimum. Merely opening one proves nothing (it may fail at once)."""
        if self.failures and delivered and self.clock() - opened >= self.backoff_reset_s:
            self.failures = 0

    def _apply(self, event: Any) -> bool:
        """One watch event into the cache; False for a malformed one, which is skipped."""
        why = _malformed(event)
        if why is not None:
            self._skip(event, why)
            return False
        self._garbled = 0
        kind, obj = event["type"], event.get("object")
        if kind == "ERROR":
            obj = obj if isinstance(obj, dict) else {}
            if str(obj.get("code")) == str(HTTP_GONE):
                raise Expired(obj.get("message"))
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        version = obj["metadata"].get("resourceVersion")
        with self._changed:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                key = key_of(obj)
                held = self._objects.get(key)
                # An event older than the object held (one of that name deleted before this
                # one was made, events replayed after a relist) changes nothing.
                if held is None or not _older(version, held["metadata"].get("resourceVersion")):
                    if kind != "DELETED":
                        self._objects[key] = obj
                    elif held is not None:
                        del self._objects[key]
            if version is not None and not _older(version, self.resource_version):
                self.resource_version = version
            self._changed.notify_all()
        return True

    def _skip(self, event: Any, why: str) -> None:
        """Log and skip a malformed event, past its version where it has one (the same event
        would otherwise come back on every watch from the version before it)."""
        self.skipped += 1
        self._garbled += 1
        log.warning("%s: malformed watch event skipped: %s", self.name, why)
        obj = event.get("object") if isinstance(event, dict) else None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(version, str) and version:
            with self._changed:
                self.resource_version = version
        if self._garbled >= MAX_GARBLED:
            raise Garbled(why)

    # -- what the scheduler reads -------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """The cache was listed at least once (before that it is not a view of the cluster)."""
        return self._listed > 0

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The cache as it is now (a copy of the mapping; the objects are shared, read-only)."""
        with self._lock:
            return dict(self._objects)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(key)

    def resync(self) -> int:
        """Ask for a fresh list (a new leader starts from the API, not from what its watches
        may have missed); returns the generation :meth:`listed` reaches once it is done."""
        with self._changed:
            self._relist_wanted = self._listed + 1
            wanted = self._relist_wanted
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        return wanted

    def listed(self, generation: int) -> bool:
        with self._lock:
            return self._listed >= generation

    def wait_listed(self, generation: int, timeout_s: float) -> bool:
        """Wait until the list of ``generation`` (from :meth:`resync`) is in the cache."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._listed < generation:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._changed.wait(left)
        return True

    def put(self, obj: dict[str, Any]) -> None:
        """Record an object the caller just wrote (a bind, a patch): the watch confirms it
        later, and until then the cache must not show the older state. When the watch was
        quicker and the cache already holds a newer version, that one stays."""
        key = key_of(obj)
        with self._lock:
            held = self._objects.get(key)
            version = obj["metadata"].get("resourceVersion")
            if held is None or not _older(version, held["metadata"].get("resourceVersion")):
                self._objects[key] = obj

    def forget(self, key: str, uid: str | None = None) -> None:
        """Drop an object the caller just deleted; with ``uid``, only that object (the watch may
        already show its successor under the same name)."""
        with self._lock:
            held = self._objects.get(key)
            if held is not None and (uid is None or held["metadata"].get("uid") == uid):
                del self._objects[key]


def _older(version: str | None, than: str | None) -> bool:
    """Whether ``version`` is older than ``than``. Versions are opaque strings to clients, but
    they are etcd revisions in every API server; anything else is never called older."""
    try:
        return int(version) < int(than)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _malformed(event: Any) -> str | None:
    """Why a watch event cannot be applied; None when it can."""
    if isinstance(event, bytes):
        return f"not JSON: {event[:80]!r}"
    if not isinstance(event, dict):
        return f"expected a JSON object, got {type(event).__name__}"
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        return f"unknown type {str(kind)[:40]!r}"
    if kind == "ERROR":
        return None
    obj = event.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return f"{kind} without object.metadata"
    if kind == "BOOKMARK":
        version = meta.get("resourceVersion")
        return None if isinstance(version, str) and version else "BOOKMARK without a version"
    return _unnamed(obj)


def _unnamed(obj: Any) -> str | None:
    """Why ``obj`` cannot be cached by ``namespace/name``; None when it can."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "an object without metadata"
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return "an object without metadata.name"
    if namespace is not None and not isinstance(namespace, str):
        return f"object {name[:60]!r} with a metadata.namespace that is not a string"
    return None


def _lines(response: Any) -> Iterator[Any]:
    """The JSON events of a watch stream, one per line, as they arrive; a line that is not JSON
    comes as its bytes (the caller skips it)."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield _decode(line)
    if pending.strip():
        yield _decode(pending)


def _decode(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return line


def _short(exc: BaseException) -> str:
    status = status_of(exc)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    text = str(exc).replace("\n", " ")
    return text if len(text) <= 200 else text[:197] + "..."
