"""Applying a decision to the API: the writes to a job's StatefulSet (admission, replicas,
pod template) and to its pods (in-place re-size, delete to restart), each carrying what it was
decided on (see :mod:`.scheduler`), and each reflected in the round's :class:`ApiView` and the
informers' caches so that the rest of the round sees it. Bindings are :mod:`.binding`'s.
"""

from __future__ import annotations

import logging
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.api_view import (
    ApiView,
    RoundJob,
    containers,
    resize_infeasible,
    training_cores,
)
from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.backends.kubernetes.events import (
    NORMAL,
    STRATEGIC_PATCH,
    WARNING,
    Recorder,
    iso_time,
)
from qosched.backends.kubernetes.fit import Room, take
from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import (
    Stale,
    drain,
    key_of,
    read_json,
    send_json,
    status_of,
)
from qosched.backends.kubernetes.lease import NotLeading
from qosched.backends.kubernetes.round_report import StepReport
from qosched.backends.kubernetes.seal import Seal
from qosched.cluster.admission import Admission

log = logging.getLogger(__name__)

#: A StatefulSet, as ``AppsV1Api.patch_namespaced_stateful_set`` addresses it.
STATEFULSET_PATH = "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"


class Applier:
    """Writes one round's decisions through the fenced ``core`` and ``apps`` clients.

    ``view`` is the round's view (set by the scheduler when the round has read it) and
    ``seal`` the admission key (set once it is loaded, before any job is read)."""

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        core: Any,
        apps: Any,
        pods: Informer,
        sets: Informer,
        recorder: Recorder,
        delete_options: tuple[type, type],
    ) -> None:
        self.config = config
        self.core, self.apps = core, apps
        self.pods, self.sets = pods, sets
        self.recorder = recorder
        self.delete_options = delete_options  # (V1DeleteOptions, V1Preconditions)
        self.view = ApiView({}, {}, {})
        self.seal: Seal | None = None
        self.resize_supported: bool | None = None  # learnt from the first resize answer

    # -- admissions ---------------------------------------------------------------------------

    def admission_patch(self, spec: J.K8sJob, admission: Admission) -> dict[str, Any]:
        """The annotations that record the job's admission, sealed (:mod:`.seal`)."""
        assert self.seal is not None  # loaded before any job is read
        seal = self.seal.of(spec, admission)
        return {"metadata": {"annotations": {J.ADMISSION: admission.value, J.ADMISSION_SEAL: seal}}}

    def write_admission(self, job: RoundJob, admission: Admission, report: StepReport) -> bool:
        """Write the job's admission, sealed, on its StatefulSet (with a ``Declined`` Event when
        declined); False when the write failed (said in ``report``). Called in a sender thread."""
        patch = self.admission_patch(job.spec, admission)
        if admission is Admission.DECLINED:
            patch["spec"] = {"replicas": 0}
        if not self.patch_set(job.spec, patch, report):
            return False
        sts = self.view.sets.get(job.spec.key)
        if admission is Admission.DECLINED and sts is not None:
            deadline = iso_time(job.spec.deadline_at) if job.spec.deadline_at else "-"
            self.recorder.event(
                sts,
                WARNING,
                "Declined",
                f"the {self.config.policy} policy cannot guarantee its deadline "
                f"{deadline} with the workers the cluster has; set "
                f'{J.BEST_EFFORT}: "true" to run it anyway',
            )
        return True

    # -- workers ------------------------------------------------------------------------------

    def apply(
        self,
        job: RoundJob,
        workers: int,
        rooms: dict[str, Room],
        report: StepReport,
        admission: Admission | None = None,
    ) -> bool:
        """Give the job ``workers``; with ``admission`` (judged this round), write it first, in
        the same patch as the new replicas of a GPU job. False when the admission could not be
        written (nothing else is then changed)."""
        if self.config.resource == "gpu":
            return self._apply_replicas(job, workers, report, admission)
        if admission is not None and not self.write_admission(job, admission, report):
            return False
        if workers == 0:
            self._scale_to_zero(job, report)
            return True
        self._size_template(job, workers, report)
        for pod in job.pods:
            self._resize_pod(job, pod, workers, rooms, report)
        return True

    def _apply_replicas(
        self, job: RoundJob, workers: int, report: StepReport, admission: Admission | None
    ) -> bool:
        """A GPU job: its pods' count, with its admission, in one patch of its StatefulSet."""
        spec = job.spec
        replicas = workers // spec.per_pod
        patch: dict[str, Any] = {}
        if admission is not None:
            patch = self.admission_patch(spec, admission)
        if replicas != spec.replicas:
            patch["spec"] = {"replicas": replicas}
            if replicas == 0:
                _keep_progress(patch, job)
        if not patch:
            return True
        if not self.patch_set(spec, patch, report):
            return admission is None
        if replicas != spec.replicas:
            report.scaled[spec.key] = replicas
        return True

    def _scale_to_zero(self, job: RoundJob, report: StepReport) -> None:
        spec = job.spec
        if spec.replicas:
            patch = {"spec": {"replicas": 0}}
            _keep_progress(patch, job)
            if self.patch_set(spec, patch, report):
                report.scaled[spec.key] = 0

    def _size_template(self, job: RoundJob, workers: int, report: StepReport) -> None:
        """A CPU job: one pod, its template at ``workers`` cores."""
        spec = job.spec
        patch: dict[str, Any] = {}
        if spec.per_pod != workers:  # OnDelete: running pods keep their size until re-sized
            patch["spec"] = {
                "template": {
                    "spec": {
                        "containers": [
                            _cpu_container(c["name"], workers)
                            for c in containers(self.set_of(spec))[:1]
                        ]
                    }
                }
            }
        if spec.replicas != 1:
            patch.setdefault("spec", {})["replicas"] = 1
        if patch and self.patch_set(spec, patch, report) and spec.replicas != 1:
            report.scaled[spec.key] = 1

    def _resize_pod(
        self,
        job: RoundJob,
        pod: dict[str, Any],
        workers: int,
        rooms: dict[str, Room],
        report: StepReport,
    ) -> None:
        """One pod of a CPU job to ``workers`` cores: in place where it can, else restarted
        from its checkpoint at the new size."""
        cores = training_cores(pod)
        if cores == workers:
            if resize_infeasible(pod):
                # The kubelet refused the size the pod already asks for (its node cannot
                # give it): restart it at that size where it fits.
                self.delete_pod(pod, report.restarted, report)
            return
        node = pod["spec"].get("nodeName")
        if node is None:  # not running yet: the controller recreates it at the new size
            self.delete_pod(pod, report.restarted, report)
        elif self._resize(pod, workers, cores, rooms.get(node), report):
            report.resized[key_of(pod)] = workers
            self.recorder.event(
                pod, NORMAL, "Resized", f"resized in place from {cores} to {workers} cores"
            )
        else:  # checkpoint-restart at the new size, wherever it fits
            self.delete_pod(pod, report.restarted, report)
            self.recorder.event(
                self.set_of(job.spec),
                NORMAL,
                "Resized",
                f"restarting pod {key_of(pod)} from its checkpoint at {workers} cores "
                f"(was {cores}): it cannot be re-sized in place",
            )

    def _resize(
        self, pod: dict[str, Any], workers: int, cores: int, room: Room | None, report: StepReport
    ) -> bool:
        """Re-size a running pod in place; False when the cluster cannot (no ``resize``
        subresource: before 1.33, or the feature gate off) or its node has no room."""
        if self.resize_supported is False or room is None:
            return False
        if workers > cores and room.get("cpu", 0.0) + 1e-9 < workers - cores:
            return False
        first = containers(pod)[0]
        meta = pod["metadata"]
        body = {
            # Only the pod this round saw: see patch_set.
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "spec": {"containers": [_cpu_container(first["name"], workers)]},
        }
        try:
            response = self.core.patch_namespaced_pod_resize(
                meta["name"],
                meta["namespace"],
                body,
                _content_type=STRATEGIC_PATCH,
                _preload_content=False,
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409:
                raise Stale(f"pod {key_of(pod)} changed since it was read: {exc.reason}") from exc
            if status_of(exc) in (404, 405, 415):
                log.warning(
                    "the cluster has no pod resize subresource (%s); CPU jobs are "
                    "re-sized by checkpoint-restart",
                    status_of(exc),
                )
                self.resize_supported = False
            else:
                report.errors.append(f"resize of pod {key_of(pod)} failed: {exc}")
            return False
        self.resize_supported = True
        updated = read_json(response)
        self.put_pod(updated)
        take(room, {"cpu": workers - cores})
        return True

    # -- the writes, each as decided --------------------------------------------------------

    def put_pod(self, pod: dict[str, Any]) -> None:
        """A pod as this replica just wrote it: in this round's view and in the cache."""
        self.pods.put(pod)
        self.view.put_pod(pod)

    def set_of(self, spec: J.K8sJob) -> dict[str, Any]:
        """The job's StatefulSet as this round sees it."""
        return self.view.sets[spec.key]

    def patch_set(self, spec: J.K8sJob, patch: dict[str, Any], report: StepReport) -> bool:
        """Patch the job's StatefulSet as this round saw it, and only that version: a patch
        carries the ``resourceVersion`` it was decided on, so a patch that arrives late (a
        deposed leader's, stalled after its fence check) never overwrites what was written
        since. A 409 raises :class:`Stale`."""
        version = self.set_of(spec)["metadata"]["resourceVersion"]
        body = {**patch, "metadata": {**patch.get("metadata", {}), "resourceVersion": version}}
        try:
            response = send_json(
                self.apps.api_client,
                "PATCH",
                STATEFULSET_PATH,
                body,
                content_type=STRATEGIC_PATCH,
                name=spec.name,
                namespace=spec.namespace,
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409:
                raise Stale(f"statefulset {spec.key} changed since it was read") from exc
            report.errors.append(f"patching statefulset {spec.key} failed: {exc}")
            return False
        updated = read_json(response)
        self.sets.put(updated)
        self.view.sets[spec.key] = updated
        return True

    def delete_pod(
        self, pod: dict[str, Any], into: list[str], report: StepReport, *, as_seen: bool = True
    ) -> None:
        """Delete the pod the cache saw, never one recreated since under the same name (its
        ``uid``); with ``as_seen``, only at the version seen (its ``resourceVersion``: a pod
        re-sized or bound since is not restarted on a stale decision; a 409 raises
        :class:`Stale`). A pod this round bound itself is released by ``uid`` alone: the
        binding's answer does not give its new version."""
        meta = pod["metadata"]
        V1DeleteOptions, V1Preconditions = self.delete_options
        version = meta["resourceVersion"] if as_seen else None
        options = V1DeleteOptions(
            preconditions=V1Preconditions(uid=meta["uid"], resource_version=version)
        )
        try:
            drain(
                self.core.delete_namespaced_pod(
                    meta["name"], meta["namespace"], body=options, _preload_content=False
                )
            )
        except NotLeading:
            raise
        except Exception as exc:
            if status_of(exc) == 409 and as_seen:
                raise Stale(f"pod {key_of(pod)} changed since it was read") from exc
            if status_of(exc) != 404:
                report.errors.append(f"deleting pod {key_of(pod)} failed: {exc}")
                return
        self.pods.forget(key_of(pod), meta["uid"])
        self.view.forget_pod(key_of(pod))
        into.append(key_of(pod))

    def refresh(self, pod: dict[str, Any]) -> None:
        """Read the pod afresh into the view and the cache (after a 409: it changed since)."""
        meta = pod["metadata"]
        try:
            fresh = read_json(
                self.core.read_namespaced_pod(
                    meta["name"], meta["namespace"], _preload_content=False
                )
            )
        except Exception:
            return
        self.put_pod(fresh)


def _cpu_container(name: str, cores: int) -> dict[str, Any]:
    """The first container's CPU at ``cores``, request and limit equal (whole cores, so the
    kubelet's static CPU manager can pin them)."""
    return {
        "name": name,
        "resources": {"requests": {"cpu": str(cores)}, "limits": {"cpu": str(cores)}},
    }


def _keep_progress(patch: dict[str, Any], job: RoundJob) -> None:
    """Add the job's last progress to a patch that scales it to zero: with no pods left, the
    StatefulSet's annotation is where its progress survives."""
    if job.state is not None and job.state.iterations_done:
        progress = J.Progress(int(job.state.iterations_done), job.state.active_s)
        notes = patch.setdefault("metadata", {}).setdefault("annotations", {})
        notes[J.PROGRESS] = progress.to_text()
