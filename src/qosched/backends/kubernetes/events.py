"""What the scheduler tells people about their jobs: Kubernetes Events and pod conditions.

:meth:`Recorder.event` is called by the scheduler whenever it decides something about an
object (a job scheduled, declined, re-sized, invalid; a pod waiting for its gang); it posts a
``v1`` Event on that object, as ``kubectl describe`` shows them. The same event (object, reason
and message) is posted once per ``repeat_s``, so a job waiting for many rounds does not flood
the API. :meth:`Recorder.pod_condition` sets ``PodScheduled=False`` with a reason on a pending
pod, as the default scheduler does, only when it changes.

Posting is best effort: a failure is logged and returned, never raised, except the scheduler's
loss of leadership (:class:`~qosched.backends.kubernetes.lease.NotLeading`), which must end the
round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from qosched.backends.kubernetes.kube import drain, key_of, send_json
from qosched.core.bounds import LATEST_TIME_S

log = logging.getLogger(__name__)

COMPONENT = "qosched"
NORMAL, WARNING = "Normal", "Warning"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
#: The API server refuses Event messages over 1 KiB; longer ones are cut.
MAX_MESSAGE = 1024
#: Where Events are posted, as ``CoreV1Api.create_namespaced_event`` addresses it.
EVENTS_PATH = "/api/v1/namespaces/{namespace}/events"
#: Events remembered for de-duplication before the expired ones are dropped.
PRUNE_AT = 10_000


class Recorder:
    """Posts Events and pod conditions through ``core`` (a ``CoreV1Api``); see the module."""

    def __init__(
        self,
        core: Any,
        *,
        instance: str,
        repeat_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        passthrough: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.core = core
        self.instance = instance
        self.repeat_s = repeat_s
        self.clock = clock
        self.passthrough = passthrough
        self._posted: dict[tuple[str, str, str], float] = {}
        self._lock = threading.Lock()  # events are posted from the round's sender threads too
        self.posted = 0  # events accepted by the API

    def event(
        self,
        obj: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        dedupe: str | None = None,
    ) -> bool:
        """Post an Event on ``obj`` unless the same one was posted under ``repeat_s`` ago: the
        same reason and message, or the same ``dedupe`` key for messages that change every
        round (a predicted finish time)."""
        meta = obj["metadata"]
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        seen = (meta.get("uid") or key_of(obj), reason, dedupe or message)
        now = self.clock()
        with self._lock:
            if now - self._posted.get(seen, -float("inf")) < self.repeat_s:
                return False
        # As the generated client wrote the time it parsed: whole seconds, an explicit offset.
        stamp = datetime.now(tz=UTC).replace(microsecond=0).isoformat()
        namespace = meta.get("namespace") or "default"
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": namespace,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
            # A field the object lacks is left out (the generated client dropped it).
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            drain(send_json(self.core.api_client, "POST", EVENTS_PATH, body, namespace=namespace))
        except self.passthrough:
            raise
        except Exception as exc:
            log.warning("cannot post event %s on %s: %s", reason, key_of(obj), exc)
            return False
        with self._lock:
            self._posted[seen] = now
            self.posted += 1
            if (
                len(self._posted) > PRUNE_AT
            ):  # a long-lived scheduler forgets what no longer dedupes
                self._posted = {k: t for k, t in self._posted.items() if now - t < self.repeat_s}
        return True

    def pod_condition(self, pod: dict[str, Any], reason: str, message: str) -> bool:
        """Set ``PodScheduled=False`` with ``reason`` on a pending pod, if it is not so already."""
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == reason
                and condition.get("message") == message
            ):
                return False
        meta = pod["metadata"]
        stamp = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch: dict[str, Any] = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message[:MAX_MESSAGE],
                        "lastTransitionTime": stamp,
                    }
                ]
            }
        }
        if meta.get("resourceVersion"):
            # Only on the pod as it was seen: a late patch must not mark a pod bound since.
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            response = self.core.patch_namespaced_pod_status(
                meta["name"],
                meta["namespace"],
                patch,
                _content_type=STRATEGIC_PATCH,
                _preload_content=False,
            )
            drain(response)
        except self.passthrough:
            raise
        except Exception as exc:
            log.warning("cannot set PodScheduled on pod %s: %s", key_of(pod), exc)
            return False
        return True


def iso_time(seconds: float) -> str:
    """A time as Events show it, within 1970..9999 (the times a ``datetime`` can be)."""
    seconds = min(max(0.0, seconds), LATEST_TIME_S)
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at_time(seconds: float) -> str:
    """``at <time>``; a time past year 9999 (a predicted finish at a crawl) cannot be shown,
    only said to lie after it."""
    if not seconds <= LATEST_TIME_S:  # NaN too
        return f"after {iso_time(LATEST_TIME_S)}"
    return f"at {iso_time(seconds)}"
