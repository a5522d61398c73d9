"""What a qosched training job is on Kubernetes: a StatefulSet with annotations.

A job is a ``StatefulSet`` (``podManagementPolicy: Parallel``, ``updateStrategy: OnDelete``)
whose pod template names ``schedulerName: qosched``. Its annotations describe the work; the
scheduler writes its own state next to them, on the same object, so that a restarted scheduler
rebuilds everything from the API:

======================================  =================================================
``qosched.io/iterations``               the whole work, in iterations (required)
``qosched.io/deadline``                 a duration after the StatefulSet's creation
                                        (``"2h30m"``) or an RFC 3339 time; absent = best
                                        effort (no deadline)
``qosched.io/best-effort``              ``"true"``: run even when the deadline cannot be
                                        guaranteed (default ``"false"``: decline instead)
``qosched.io/model``, ``/batch-size``   the speed table row the predictor starts from
``qosched.io/requested-workers``        what request-honouring baselines (fifo) give it
``qosched.io/max-workers``              an upper bound on the workers the policy may give
``qosched.io/admission``  (scheduler)   ``guaranteed``, ``best-effort`` or ``declined``
``qosched.io/admission-seal``           the scheduler's signature of that decision
                          (scheduler)   (:mod:`qosched.backends.kubernetes.seal`): an
                                        admission without a valid one is not trusted
``qosched.io/state``      (scheduler)   ``succeeded`` once the work is done
``qosched.io/progress``   (both)        ``{"iteration": n, "active_s": s}``, see below
======================================  =================================================

Progress is reported by the job's first pod (:func:`reporting_pod`, ordinal 0): it patches its
own ``qosched.io/progress`` annotation (:mod:`qosched.backends.kubernetes.progress`), with the
iterations done and its compute seconds (training time across restarts, restart pauses
excluded, carried in its checkpoint). Only that pod's report is read, and the job's Role lets
its pods patch that pod alone: no job can write another's progress. The scheduler copies the
latest value onto the StatefulSet when the job's pods go away (pre-emption, completion), so
progress survives pods and scheduler alike.

Workers: on a GPU scheduler every pod is ``gpus-per-pod`` workers (its ``nvidia.com/gpu``
request) and the worker count changes by ``spec.replicas`` (elastic replicas, checkpoint
restart); on a CPU scheduler a job is one pod whose CPU request (whole cores) is its worker
count, re-sized in place.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from qosched.backends.kubernetes.kube import key_of, parse_time, quantity
from qosched.cluster.admission import Admission
from qosched.core.bounds import (
    COUNT_LIMIT,
    LATEST_TIME_S,
    MAX_BATCH,
    check_count,
    check_number,
    check_time,
)
from qosched.core.errors import InputError

PREFIX = "qosched.io/"
ITERATIONS = PREFIX + "iterations"
DEADLINE = PREFIX + "deadline"
BEST_EFFORT = PREFIX + "best-effort"
MODEL = PREFIX + "model"
BATCH_SIZE = PREFIX + "batch-size"
# Annotation keys stored on users' objects: they keep their names. Worker is the allocation
# sense here, a count of GPUs or cores.
REQUESTED_WORKERS = PREFIX + "requested-workers"
MAX_WORKERS = PREFIX + "max-workers"
ADMISSION = PREFIX + "admission"
ADMISSION_SEAL = PREFIX + "admission-seal"
STATE = PREFIX + "state"
PROGRESS = PREFIX + "progress"
#: Label on the StatefulSet and its pods naming the job, so kubectl can select them.
JOB_LABEL = PREFIX + "job"

#: A pod of job NAME is named NAME-ORDINAL (the StatefulSet's naming; a pod's name never
#: changes, unlike its labels and owner references, which its own patches could rewrite).
_ORDINAL = re.compile(r"-(0|[1-9][0-9]{0,8})")

SUCCEEDED = "succeeded"
GPU_RESOURCE = "nvidia.com/gpu"

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
#: Longer annotation values are refused before any parsing: no valid one comes near.
MAX_TEXT = 256
#: The most workers a job may request or be bounded by: a million GPUs or cores, past any
#: cluster's.
WORKERS_LIMIT = 2**20


@dataclass(frozen=True, slots=True)
class Progress:
    """What a training pod reports: iterations done and its compute seconds."""

    iteration: int
    active_s: float

    def to_text(self) -> str:
        """The annotation's text; ValueError for what `parse_progress` would refuse (a report
        the scheduler cannot read is not sent)."""
        check_count(self.iteration, field="iteration")
        check_number(self.active_s, field="active_s", minimum=0.0)
        return json.dumps(
            {"iteration": self.iteration, "active_s": round(self.active_s, 3)}, allow_nan=False
        )


def reporting_pod(job: str) -> str:
    """The one pod of a job that reports its progress: the StatefulSet's ordinal 0, which runs
    whenever the job does (replicas are numbered from 0 and scaling down drops the last)."""
    return f"{job}-0"


def is_pod_of(pod_name: str, job: str) -> bool:
    """Whether a pod's name is that of a pod of StatefulSet ``job``."""
    return pod_name.startswith(job) and _ORDINAL.fullmatch(pod_name, len(job)) is not None


def parse_progress(text: str | None, *, source: str) -> Progress | None:
    """The ``qosched.io/progress`` annotation; None when absent. A malformed or out-of-bounds
    value (``Infinity``, ``1e400``, a count past 2**53) is an ``InputError`` naming the object
    (the scheduler reports it and ignores that report)."""
    if not text:
        return None
    expected = '{"iteration": int, "active_s": float}'
    _short(text, source=source, field=PROGRESS)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or set(data) != {"iteration", "active_s"}:
        raise InputError(f"expected {expected}, got {text!r}", source=source, field=PROGRESS)
    iteration = check_count(data["iteration"], field=PROGRESS, source=source)
    # Compute seconds can never exceed the span of representable times.
    active_s = check_number(
        data["active_s"],
        field=PROGRESS,
        minimum=0.0,
        maximum=LATEST_TIME_S,
        source=source,
    )
    return Progress(iteration, active_s)


def _short(text: str, *, source: str, field: str) -> None:
    if len(text) > MAX_TEXT:
        raise InputError(
            f"expected at most {MAX_TEXT} characters, got {len(text)}", source=source, field=field
        )


@dataclass(frozen=True, slots=True)
class K8sJob:
    """One job as its StatefulSet describes it (validated when read)."""

    namespace: str
    name: str
    created_at: float
    iterations: int
    deadline_at: float | None
    best_effort: bool
    model: str
    batch_size: int
    requested_workers: int
    max_workers: int | None
    replicas: int
    #: GPU jobs: workers per pod (its GPU request). CPU jobs: the template's CPU request.
    per_pod: int
    admission: Admission | None  # None: not decided yet (or its seal not checked, see seal)
    succeeded: bool
    progress: Progress | None
    uid: str = ""  # the StatefulSet's: an admission is sealed for this very object
    seal: str | None = None  # the admission's seal, as written

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_deadline(text: str, created_at: float, *, source: str) -> float:
    """A duration after ``created_at`` (``"90m"``, ``"1h30m"``, ``"2d"``) or an RFC 3339 time,
    as Unix seconds no later than the end of year 9999 UTC."""
    _short(text, source=source, field=DEADLINE)
    match = _DURATION.fullmatch(text.strip())
    if match and any(match.groups()):
        units = (86_400, 3_600, 60, 1)
        seconds = sum(int(g or 0) * u for g, u in zip(match.groups(), units, strict=True))
        # Integer arithmetic first: a float sum of 400 nines would overflow, not fail cleanly.
        if seconds > LATEST_TIME_S:
            raise InputError(
                f"the duration {text!r} ends after year 9999", source=source, field=DEADLINE
            )
        return check_time(created_at + seconds, field=DEADLINE, source=source)
    try:
        at = parse_time(text.strip())
    except ValueError:
        at = None
    if at is None or "T" not in text:
        raise InputError(
            f"expected a duration like '90m' or '1h30m', or an RFC 3339 time like "
            f"'2026-11-30T12:00:00Z', got {text!r}",
            source=source,
            field=DEADLINE,
        )
    return check_time(at, field=DEADLINE, source=source)


def _int(
    annotations: dict[str, str],
    name: str,
    default: int | None,
    source: str,
    *,
    maximum: int = COUNT_LIMIT - 1,
) -> int | None:
    """A whole number in [1, ``maximum``] from an annotation; ``default`` when absent."""
    value = annotations.get(name)
    if value is None:
        return default
    _short(value, source=source, field=name)
    try:
        number = int(value)
    except ValueError:
        raise InputError(
            f"expected a whole number, got {value!r}", source=source, field=name
        ) from None
    return check_count(number, field=name, minimum=1, maximum=maximum, source=source)


def _model(annotations: dict[str, str], source: str) -> str:
    """The speed table row: any name up to ``MAX_TEXT`` characters (an unknown one gets the
    placeholder speeds), never an empty one; ``unknown`` when absent."""
    value = annotations.get(MODEL)
    if value is None:
        return "unknown"
    _short(value, source=source, field=MODEL)
    if not value.strip():
        raise InputError("expected a model name, got an empty one", source=source, field=MODEL)
    return value


def pod_template_request(template: dict[str, Any], resource: str) -> float:
    """Sum over the template's containers of the request for ``resource`` (limits when a
    container states no request, as the API server defaults it)."""
    total = 0.0
    for container in template.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource)
        if value is None:
            value = (resources.get("limits") or {}).get(resource)
        total += quantity(value)
    return total


def read_job(sts: dict[str, Any], resource: str) -> K8sJob:
    """The job a StatefulSet describes; ``InputError`` naming the object and annotation."""
    source = f"statefulset/{key_of(sts)}"
    meta = sts["metadata"]
    annotations = meta.get("annotations") or {}
    try:
        created_at = check_time(
            parse_time(meta.get("creationTimestamp")) or 0.0,
            field="metadata.creationTimestamp",
            source=source,
        )
    except ValueError as exc:
        raise InputError(str(exc), source=source, field="metadata.creationTimestamp") from exc
    iterations = _int(annotations, ITERATIONS, None, source)
    if iterations is None:
        raise InputError("required annotation is missing", source=source, field=ITERATIONS)
    deadline_text = annotations.get(DEADLINE)
    deadline_at = (
        parse_deadline(deadline_text, created_at, source=source) if deadline_text else None
    )
    best_effort = annotations.get(BEST_EFFORT, "false").strip().lower()
    if best_effort not in ("true", "false"):
        raise InputError(
            f"expected 'true' or 'false', got {best_effort!r}", source=source, field=BEST_EFFORT
        )
    admission = _admission(annotations.get(ADMISSION))
    template = sts["spec"]["template"]
    if resource == "gpu":
        per_pod = pod_template_request(template, GPU_RESOURCE)
        if not math.isfinite(per_pod) or per_pod < 1 or per_pod != int(per_pod):
            raise InputError(
                f"each pod must request a whole number >= 1 of {GPU_RESOURCE}, got {per_pod:g}",
                source=source,
                field="spec.template.spec.containers[].resources",
            )
    else:
        cores = pod_template_request(template, "cpu")
        if not math.isfinite(cores):
            raise InputError(
                f"expected a finite CPU request, got {cores}",
                source=source,
                field="spec.template.spec.containers[].resources",
            )
        per_pod = max(1, math.ceil(cores))
    per_pod = check_count(
        int(per_pod), field="spec.template.spec.containers[].resources", minimum=1, source=source
    )
    replicas = check_count(
        sts["spec"].get("replicas", 1), field="spec.replicas", maximum=2**31 - 1, source=source
    )
    return K8sJob(
        namespace=meta.get("namespace", "default"),
        name=meta["name"],
        created_at=created_at,
        iterations=iterations,
        deadline_at=deadline_at,
        best_effort=best_effort == "true",
        model=_model(annotations, source),
        batch_size=_int(annotations, BATCH_SIZE, 1, source, maximum=MAX_BATCH) or 1,
        requested_workers=_int(annotations, REQUESTED_WORKERS, 1, source, maximum=WORKERS_LIMIT)
        or 1,
        max_workers=_int(annotations, MAX_WORKERS, None, source, maximum=WORKERS_LIMIT),
        replicas=replicas,
        per_pod=per_pod,
        admission=admission,
        succeeded=annotations.get(STATE) == SUCCEEDED,
        progress=parse_progress(annotations.get(PROGRESS), source=source),
        uid=str(meta.get("uid") or ""),
        seal=annotations.get(ADMISSION_SEAL),
    )


def _admission(text: str | None) -> Admission | None:
    """The scheduler's recorded admission; anything else was written by someone else, and the
    job is decided again."""
    try:
        return None if text is None else Admission(text)
    except ValueError:
        return None
