"""The one place the official ``kubernetes`` client is imported, lazily, and small helpers for
the API's wire format (quantities, times, error codes)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from qosched.core.errors import QoschedError

EXTRA_HINT = "install the Kubernetes extra: pip install 'qosched[kubernetes]'"


class KubernetesMissing(QoschedError, ImportError):
    """The ``kubernetes`` package is not installed."""


class Stale(QoschedError):
    """A write was refused 409 Conflict: its precondition (the ``resourceVersion`` or ``uid``
    it was decided on) no longer holds, because someone wrote the object since. The write is
    never sent again as it was: the job is decided again, next round, from the fresh state."""


def require() -> ModuleType:
    """The ``kubernetes`` package; called by every Kubernetes entry point before it needs it."""
    try:
        import kubernetes
    except ImportError as exc:
        raise KubernetesMissing(f"the official Kubernetes client is missing; {EXTRA_HINT}") from exc
    return kubernetes


def api_client(host: str | None = None, *, kubeconfig: str | None = None) -> Any:
    """An ``ApiClient``: at ``host`` without credentials (tests, ``kubectl proxy``), else from the
    in-cluster service account, else from ``kubeconfig`` (default ``~/.kube/config``)."""
    kubernetes = require()
    if host is not None:
        configuration = kubernetes.client.Configuration(host=host)
        return kubernetes.client.ApiClient(configuration)
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(config_file=kubeconfig)
    return kubernetes.client.ApiClient()


def quantity(value: Any) -> float:
    """A Kubernetes quantity (``"500m"``, ``"2"``, ``"1Gi"``) as a number; absent is 0."""
    if value is None:
        return 0.0
    return float(require().utils.parse_quantity(str(value)))


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 time as the API writes it (``2026-11-29T21:00:00Z``, micro-times too);
    ``ValueError`` for one that is malformed or cannot be shown (past year 9999 UTC)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except OverflowError as exc:
        raise ValueError(f"{text!r} lies outside the times datetime can show") from exc


def format_micro_time(seconds: float) -> str:
    """A ``MicroTime`` (Lease renew times): UTC with microseconds."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a client ``ApiException``; None for anything else (network errors)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def read_json(response: Any) -> Any:
    """The body of a response fetched with ``_preload_content=False``."""
    return json.loads(response.data)


def drain(response: Any) -> None:
    """Read an answer fetched with ``_preload_content=False`` to its end, its body unused: an
    unread answer holds its connection until it is collected, so the next request opens another
    (a new TLS handshake on a cluster, a new thread on the test server)."""
    response.data  # noqa: B018 -- reading it releases the connection to the pool


def key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects such as nodes)."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else meta["name"]
