"""The writes the scheduler builds itself (:func:`~qosched.backends.kubernetes.kube.send_json`)
leave as the generated client's methods send them: the same method, URL, headers and body, and
the same answer, an ``ApiException`` carrying the status for one outside 2xx (an Event's is
the Recorder's to log: :mod:`.events`)."""

from __future__ import annotations

import json

import pytest
import urllib3

from qosched.backends.kubernetes.apply import STATEFULSET_PATH
from qosched.backends.kubernetes.binding import BINDING_PATH
from qosched.backends.kubernetes.events import NORMAL, STRATEGIC_PATCH, Recorder
from qosched.backends.kubernetes.kube import require, send_json

kubernetes = require()


class Recording(kubernetes.client.ApiClient):
    """A real client whose ``call_api`` records the request and answers ``status`` instead of
    sending it: what reaches ``call_api`` is what the REST layer puts on the wire."""

    def __init__(self, status: int = 201) -> None:
        configuration = kubernetes.client.Configuration(host="https://k8s.example:6443")
        configuration.api_key = {"authorization": "secret-token"}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        super().__init__(configuration)
        self.user_agent = "qosched/test"
        self.status = status
        self.calls: list[tuple[str, str, dict, str | None]] = []

    def call_api(self, method, url, header_params=None, body=None, post_params=None, **kw):
        # The REST layer sends a body as json.dumps of what it is given.
        wire = None if body is None else json.dumps(body, sort_keys=True)
        self.calls.append((method, url, dict(header_params or {}), wire))
        answer = b'{"kind": "Status", "code": %d}' % self.status
        raw = urllib3.HTTPResponse(
            body=answer,
            status=self.status,
            reason="Conflict" if self.status == 409 else "Created",
            headers={"Content-Type": "application/json"},
            preload_content=False,
        )
        return kubernetes.client.rest.RESTResponse(raw)


POD = {"name": "j-0", "namespace": "ml team", "uid": "u-1"}  # a space: quoted in the path


def generated_binding(client: Recording) -> None:
    m = kubernetes.client
    body = m.V1Binding(
        metadata=m.V1ObjectMeta(name="j-0", namespace="ml team", uid="u-1"),
        target=m.V1ObjectReference(api_version="v1", kind="Node", name="n1"),
    )
    m.CoreV1Api(client).create_namespaced_pod_binding(
        "j-0", "ml team", body, _preload_content=False
    )


def own_binding(client: Recording) -> None:
    body = {"metadata": POD, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    send_json(client, "POST", BINDING_PATH, body, name="j-0", namespace="ml team")


PATCH = {"metadata": {"annotations": {"a": "b"}, "resourceVersion": "7"}, "spec": {"replicas": 2}}


def generated_patch(client: Recording) -> None:
    kubernetes.client.AppsV1Api(client).patch_namespaced_stateful_set(
        "j", "ml team", PATCH, _content_type=STRATEGIC_PATCH, _preload_content=False
    )


def own_patch(client: Recording) -> None:
    send_json(
        client,
        "PATCH",
        STATEFULSET_PATH,
        PATCH,
        content_type=STRATEGIC_PATCH,
        name="j",
        namespace="ml team",
    )


#: A pod as the cache holds it: no apiVersion or kind (a list's items carry neither).
CACHED_POD = {"metadata": {**POD, "resourceVersion": "12"}, "spec": {"nodeName": "n1"}}


def own_event(client: Recording) -> None:
    recorder = Recorder(kubernetes.client.CoreV1Api(client), instance="test")
    recorder.event(CACHED_POD, NORMAL, "Scheduled", "Successfully assigned ml team/j-0")


def generated_event(client: Recording) -> None:
    """The body the Recorder builds (its time taken from a recorder's own request, so that
    both carry the same second), sent through the generated method."""
    probe = Recording()
    own_event(probe)
    body = json.loads(probe.calls[0][3])
    kubernetes.client.CoreV1Api(client).create_namespaced_event(
        "ml team", body, _preload_content=False
    )


WRITES = {
    "binding": (generated_binding, own_binding),
    "statefulset-patch": (generated_patch, own_patch),
    "event": (generated_event, own_event),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_leaves_as_the_generated_client_sends_it(write):
    generated, own = write
    theirs, ours = Recording(), Recording()
    generated(theirs)
    own(ours)
    assert len(ours.calls) == 1
    assert ours.calls == theirs.calls
    _, url, headers, _ = ours.calls[0]
    assert "/namespaces/ml%20team/" in url  # the names quoted as path parts
    assert headers["authorization"] == "Bearer secret-token"  # the bearer token carried


@pytest.mark.parametrize(
    "write", [WRITES["binding"], WRITES["statefulset-patch"]], ids=["binding", "statefulset-patch"]
)
def test_a_refused_write_raises_as_the_generated_client_does(write):
    raised = []
    for send in write:
        with pytest.raises(kubernetes.client.ApiException) as caught:
            send(Recording(status=409))
        raised.append((caught.value.status, caught.value.reason, caught.value.body))
    assert raised[0] == raised[1]
    assert raised[0][0] == 409
