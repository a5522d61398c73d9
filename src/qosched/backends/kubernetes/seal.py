"""The scheduler's signature on its own admission decisions.

A job's StatefulSet is its user's object: any annotation the scheduler writes there, the user
can write too. So ``qosched.io/admission`` is trusted only with ``qosched.io/admission-seal``
next to it: an HMAC-SHA256, under a key that only the scheduler can read, of the job's
namespace, name and ``uid``, the decision, and the terms it was made on (iterations, deadline,
best effort, model, batch size, requested and maximum workers). A decision a user wrote, copied
from another job (another ``uid``), or kept while changing the job's terms does not verify: the
scheduler ignores it, says so in an Event, and decides itself.

The key is 32 random bytes in a Secret of the scheduler's namespace (:data:`KEY_SECRET`), which
the first leader creates. The scheduler's RBAC lets it get that one Secret and create Secrets in
its own namespace; a user who can read it could sign anything, as one who can patch the
scheduler's Deployment could run anything.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any

from qosched.backends.kubernetes.jobs import K8sJob
from qosched.backends.kubernetes.kube import drain, read_json, status_of
from qosched.backends.kubernetes.lease import NotLeading
from qosched.cluster.admission import Admission
from qosched.core.errors import QoschedError

#: The Secret, in the scheduler's namespace, that holds the key.
KEY_SECRET = "qosched-admission-key"
#: Its data key.
KEY_FIELD = "key"
KEY_BYTES = 32


class KeyUnavailable(QoschedError):
    """The key cannot be read or created: no admission can be checked or signed."""


@dataclass(frozen=True, slots=True)
class Seal:
    """Signs and checks admissions with ``key``."""

    key: bytes

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise KeyUnavailable(f"an admission key needs 16 bytes or more, got {len(self.key)}")

    def of(self, job: K8sJob, admission: Admission) -> str:
        """The seal of ``admission`` for ``job`` as it is now."""
        terms = [
            job.namespace,
            job.name,
            job.uid,
            admission.value,
            job.iterations,
            job.deadline_at,
            job.best_effort,
            job.model,
            job.batch_size,
            job.requested_workers,
            job.max_workers,
        ]
        text = json.dumps(terms, separators=(",", ":"), allow_nan=False)
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def trusts(self, job: K8sJob) -> bool:
        """Whether the job's recorded admission carries this scheduler's seal for it."""
        if job.admission is None or job.seal is None or not job.uid:
            return False
        return hmac.compare_digest(self.of(job, job.admission), job.seal)


def load_key(core: Any, namespace: str) -> Seal:
    """The key from :data:`KEY_SECRET` in ``namespace``, created there when absent (of two
    replicas creating it, the API server keeps the first: the other reads it back)."""
    for _ in range(2):
        try:
            secret = read_json(
                core.read_namespaced_secret(KEY_SECRET, namespace, _preload_content=False)
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) != 404:
                raise KeyUnavailable(f"cannot read secret {namespace}/{KEY_SECRET}: {exc}") from exc
        else:
            text = (secret.get("data") or {}).get(KEY_FIELD)
            try:
                key = base64.b64decode(text or "", validate=True)
            except ValueError as exc:
                raise KeyUnavailable(
                    f"secret {namespace}/{KEY_SECRET}: {KEY_FIELD} is not base64: {exc}"
                ) from exc
            return Seal(key)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": KEY_SECRET, "namespace": namespace},
            "type": "Opaque",
            "data": {KEY_FIELD: base64.b64encode(os.urandom(KEY_BYTES)).decode()},
        }
        try:
            drain(core.create_namespaced_secret(namespace, body, _preload_content=False))
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) != 409:  # 409: another replica created it first
                raise KeyUnavailable(
                    f"cannot create secret {namespace}/{KEY_SECRET}: {exc}"
                ) from exc
    raise KeyUnavailable(f"secret {namespace}/{KEY_SECRET} vanished while it was created")
