"""Binding a round's pending pods to nodes, a whole job's pods together or none (Binding API,
with the pod's ``uid``), placed job by job in the decision's order; a gang that binds only in
part is released, and tried again next round.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.api_view import RoundJob, training_cores
from qosched.backends.kubernetes.apply import Applier
from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.backends.kubernetes.events import NORMAL, WARNING, Recorder
from qosched.backends.kubernetes.fit import Placer, Room, pod_requests
from qosched.backends.kubernetes.kube import drain, key_of, send_json, status_of
from qosched.backends.kubernetes.lease import NotLeading
from qosched.backends.kubernetes.round_report import StepReport
from qosched.backends.kubernetes.send import CallOutcome, Sender

#: A pod's binding subresource, as ``CoreV1Api.create_namespaced_pod_binding`` addresses it.
BINDING_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/binding"
#: Tries of one binding on a transient error (5xx, 429, network) before the gang is released.
BIND_TRIES = 3

#: One job's step in a round: an error there skips and reports that job, never the round.
Isolated = Callable[[RoundJob, StepReport], AbstractContextManager[None]]


@dataclass(frozen=True, slots=True)
class _Binding:
    """One binding's answer: the pod as bound, or why not (``conflict``: a 409, the pod bound
    already or recreated since it was read)."""

    pod: dict[str, Any] | None = None
    error: str | None = None
    conflict: bool = False


class Binder:
    """Places and binds gangs through the fenced ``core`` client, ``sender``'s writes in flight
    at a time; the round's view and the pods it releases are ``applier``'s."""

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        core: Any,
        applier: Applier,
        recorder: Recorder,
        sender: Sender,
        isolated: Isolated,
    ) -> None:
        self.config = config
        self.core = core
        self.applier = applier
        self.recorder = recorder
        self.sender = sender
        self.isolated = isolated

    def bind_jobs(
        self, jobs: list[tuple[RoundJob, int]], rooms: dict[str, Room], report: StepReport
    ) -> None:
        """Bind the pending pods of ``jobs`` (each with its count), all of a gang or none.

        Gangs are placed in turn, in the decision's order, each taking its room; then every
        binding is sent, ``in_flight`` at a time; then each gang is settled: all bound, or what
        was bound released (its room stays free until the next round, whose placement sees the
        pods gone); then the ``Scheduled`` Events are sent the same way."""
        gangs: list[tuple[RoundJob, int, list[tuple[dict[str, Any], str]]]] = []
        resource = "cpu" if self.config.resource == "cpu" else J.GPU_RESOURCE
        placer = Placer(rooms, resource)
        for job, workers in jobs:
            with self.isolated(job, report):
                gang = self._place(job, workers, placer, report)
                if gang:
                    gangs.append((job, workers, gang))
        calls = [
            functools.partial(self._bind, pod, node) for _, _, gang in gangs for pod, node in gang
        ]
        outcomes = iter(self.sender.each(calls))
        events = []
        for job, workers, gang in gangs:
            answers = [next(outcomes) for _ in gang]
            with self.isolated(job, report):
                events += self._settle(job, workers, gang, answers, placer, report)
        for outcome in self.sender.each(events):
            outcome.result()  # an Event that failed is logged; losing the Lease ends the round

    def _place(
        self, job: RoundJob, workers: int, placer: Placer, report: StepReport
    ) -> list[tuple[dict[str, Any], str]]:
        """Where the job's pending pods go, their room taken; none when they are not all to be
        bound this round (said on the pods)."""
        spec = job.spec
        expected = workers // spec.per_pod if self.config.resource == "gpu" else 1
        present = self.applier.view.pods_of(spec)
        pods = [p for p in present if p["spec"].get("nodeName") is None]
        if not pods:
            return []
        if len(present) != expected:  # the controller has not caught up with the replicas yet
            if spec.key in report.scaled:
                return []  # this very round changed them: nothing to report yet
            for pod in pods:
                self.recorder.pod_condition(
                    pod,
                    "WaitingForGang",
                    f"job {spec.key} is given {expected} pods and {len(present)} exist; its "
                    "pods are bound together once all of them do",
                )
            return []
        if self.config.resource == "cpu" and any(training_cores(p) != workers for p in pods):
            return []  # still at its old size: it is being restarted
        prefer = [p["spec"]["nodeName"] for p in present if p["spec"].get("nodeName")]
        placement = placer.place(pods, prefer)
        if placement is None:
            why = (
                f"the {len(pods)} pending pods of job {spec.key} do not all fit on the nodes' "
                "free resources this round (all of a gang or none); tried again next round"
            )
            sts = self.applier.view.sets.get(spec.key)
            if sts is not None:
                self.recorder.event(sts, WARNING, "FailedScheduling", why)
            for pod in pods:
                self.recorder.pod_condition(pod, "Unschedulable", why)
            return []
        gang = [(pod, placement[key_of(pod)]) for pod in pods]
        for pod, node in gang:
            placer.take(node, pod_requests(pod))
        return gang

    def _settle(
        self,
        job: RoundJob,
        workers: int,
        gang: list[tuple[dict[str, Any], str]],
        answers: list[CallOutcome[_Binding]],
        placer: Placer,
        report: StepReport,
    ) -> list[Callable[[], bool]]:
        """Record the gang's bindings; when one failed, release those that went through (a
        half-bound gang would hold workers it cannot use; the controller recreates the pods
        pending) and try again next round. The ``Scheduled`` Events to send."""
        results = [answer.result() for answer in answers]  # losing the Lease ends the round
        for (pod, _), result in zip(gang, results, strict=True):
            if result.conflict:
                self.applier.refresh(pod)
            if result.error is not None:
                report.errors.append(result.error)
        bound = [r.pod for r in results if r.pod is not None]
        for pod in bound:
            self.applier.put_pod(pod)  # until the watch shows it, the cache must not offer it again
            report.bound[key_of(pod)] = pod["spec"]["nodeName"]
        if len(bound) < len(gang):
            for done in bound:
                self.applier.delete_pod(done, report.released, report, as_seen=False)
            for pod, node in gang:
                placer.take(node, pod_requests(pod), sign=-1.0)
            return []
        return [
            functools.partial(
                self.recorder.event,
                pod,
                NORMAL,
                "Scheduled",
                f"Successfully assigned {key_of(pod)} to {pod['spec']['nodeName']} "
                f"(job {job.spec.key}, {workers} workers)",
            )
            for pod in bound
        ]

    def _bind(self, pod: dict[str, Any], node: str) -> _Binding:
        """Bind one pod, retrying a transient error (5xx, 429, network) up to ``BIND_TRIES``
        times. Called in a sender thread: it only sends, and the round's thread records."""
        meta = pod["metadata"]
        # The uid makes the API server refuse the binding if the pod was recreated under the
        # same name since the cache saw it. The body is a ``V1Binding`` as the client
        # serialises one (built as JSON data: see send_json).
        body = {
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        for attempt in range(1, BIND_TRIES + 1):
            try:
                drain(
                    send_json(
                        self.core.api_client,
                        "POST",
                        BINDING_PATH,
                        body,
                        name=meta["name"],
                        namespace=meta["namespace"],
                    )
                )
            except NotLeading:
                raise
            except Exception as exc:
                status = status_of(exc)
                if status == 409:  # bound already, or recreated (another uid) since we saw it
                    why = f"pod {key_of(pod)} was already bound: {exc.reason}"
                    return _Binding(error=why, conflict=True)
                if (status is not None and status < 500 and status != 429) or attempt == BIND_TRIES:
                    return _Binding(error=f"binding pod {key_of(pod)} to {node} failed: {exc}")
                time.sleep(0.05 * 2**attempt)
                continue
            return _Binding(pod={**pod, "spec": {**pod["spec"], "nodeName": node}})
        raise AssertionError("unreachable: the last try returns")
