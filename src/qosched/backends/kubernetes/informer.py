"""A list-then-watch cache of one kind of object, resumed from its ``resourceVersion``.

:meth:`Informer.sync` is called once per scheduling round. The first call lists; later calls
watch from the last ``resourceVersion`` seen until the server ends the stream (its
``timeoutSeconds``). A watch that expired (HTTP 410 ``Expired``, as an ``ERROR`` event or as the
response status) is answered by listing again; any other failure (a network error, a 5xx, a
429) leaves the cache as it was and backs off exponentially before the next try.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from qosched.backends.kubernetes.kube import key_of, read_json, require, status_of

log = logging.getLogger(__name__)

HTTP_GONE = 410


class Informer:
    """Objects of one kind by ``namespace/name``; see the module docstring.

    ``list_func`` is a client list method (``CoreV1Api.list_pod_for_all_namespaces``, ...);
    ``kwargs`` go to every list and watch call (a namespace, a label selector).
    """

    def __init__(
        self,
        list_func: Callable[..., Any],
        *,
        watch_timeout_s: int = 30,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        self.list_func = list_func
        self.kwargs = kwargs
        self.watch_timeout_s = watch_timeout_s
        self.backoff_min_s, self.backoff_max_s = backoff_s
        self.clock = clock
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version: str | None = None
        self.relists = 0  # how many times the cache was rebuilt by a list
        self.failures = 0  # consecutive failed syncs
        self._retry_at = -float("inf")

    @property
    def synced(self) -> bool:
        return self.resource_version is not None

    def sync(self) -> bool:
        """Bring the cache up to date; False when the API could not be reached this time (the
        cache keeps its last state) or a back-off is still running."""
        if self.clock() < self._retry_at:
            return False
        try:
            if self.resource_version is None:
                self._list()
            else:
                self._watch()
        except Exception as exc:
            if status_of(exc) == HTTP_GONE:
                log.info(
                    "watch expired (410) at resourceVersion %s; listing again",
                    self.resource_version,
                )
                self.resource_version = None
                try:
                    self._list()
                except Exception as again:
                    return self._failed(again)
            else:
                return self._failed(exc)
        self.failures = 0
        return True

    def _failed(self, exc: BaseException) -> bool:
        self.failures += 1
        delay = min(self.backoff_max_s, self.backoff_min_s * 2 ** (self.failures - 1))
        self._retry_at = self.clock() + delay
        log.warning("sync failed (%s); retrying in %.1f s", exc, delay)
        return False

    def _list(self) -> None:
        response = self.list_func(_preload_content=False, **self.kwargs)
        body = read_json(response)
        self.objects = {key_of(item): item for item in body.get("items", [])}
        self.resource_version = body["metadata"]["resourceVersion"]
        self.relists += 1

    def _watch(self) -> None:
        watch = require().watch.Watch()
        for event in watch.stream(
            self.list_func,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_s,
            allow_watch_bookmarks=True,
            _request_timeout=self.watch_timeout_s + 10,
            **self.kwargs,
        ):
            obj = event["raw_object"]
            kind = event["type"]
            self.resource_version = obj["metadata"]["resourceVersion"]
            if kind == "DELETED":
                self.objects.pop(key_of(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[key_of(obj)] = obj

    def put(self, obj: dict[str, Any]) -> None:
        """Record an object the caller just wrote (a bind, a patch): the watch confirms it
        later, and until then the cache must not show the older state."""
        self.objects[key_of(obj)] = obj

    def forget(self, key: str) -> None:
        self.objects.pop(key, None)
