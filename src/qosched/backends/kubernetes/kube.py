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


def send_json(
    api_client: Any,
    method: str,
    path: str,
    body: dict[str, Any],
    *,
    content_type: str | None = None,
    **names: str,
) -> Any:
    """Send ``body`` (JSON data: dicts, lists, strings, numbers) as the generated API method for
    ``path`` would, with ``_preload_content=False``: the same headers (``Accept``, the
    ``Content-Type`` given, the client's default headers and its bearer token), the same body
    on the wire, through the client's own ``call_api`` (so a fenced client's check still comes
    last), and the same answer (the raw response, or ``ApiException`` for a status outside
    2xx). ``names`` fill the ``{name}`` parts of ``path``.

    The generated methods validate every argument with pydantic and walk the body to serialise
    it, which cost more CPU than sending the request: a burst's first round writes thousands
    of bindings, Events and patches whose bodies the scheduler built itself."""
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    request = api_client.param_serialize(
        method=method,
        resource_path=path,
        path_params=names,
        header_params=headers,
        auth_settings=["BearerToken"],
    )
    method, url, headers, _, post_params = request
    response = api_client.call_api(method, url, headers, body, post_params)
    if not 200 <= response.status <= 299:
        response.read()
        raise require().client.ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def key_of(obj: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for cluster-scoped objects such as nodes)."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else meta["name"]
