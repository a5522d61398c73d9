"""Reading the cluster's state for one round: the informers' caches into an :class:`ApiView`,
the job StatefulSets and their pods into :class:`RoundJob`\\ s, the nodes' room into the
``ClusterSpec`` the policy plans on, and the jobs' progress reports.

Reading writes nothing but what it must say about what it read: an Event on a job it cannot
read or whose admission it does not trust, a pod condition on a pod that belongs to no job, an
Event on a progress report that is invalid or went back.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.api_view import (
    ApiView,
    RoundJob,
    owner_of,
    restarts,
    training_cores,
)
from qosched.backends.kubernetes.config import SchedulerConfig
from qosched.backends.kubernetes.events import WARNING, Recorder
from qosched.backends.kubernetes.fit import (
    Room,
    is_ended,
    node_rooms,
    unreadable_nodes,
    worker_capacity,
)
from qosched.backends.kubernetes.informer import Informer
from qosched.backends.kubernetes.kube import key_of
from qosched.backends.kubernetes.round_report import StepReport
from qosched.backends.kubernetes.seal import Seal
from qosched.cluster.spec import MAX_NODES, ClusterSpec
from qosched.core.errors import InputError

log = logging.getLogger(__name__)

#: Why a pod that names this scheduler but belongs to none of its jobs stays pending.
NOT_A_JOB = (
    "qosched binds only the pods of StatefulSets labelled " + J.JOB_LABEL + " (see qosched k8s "
    "job); this pod belongs to none, so it stays pending"
)


class ClusterReader:
    """Reads one round's state from the informers' caches; remembers across rounds only what
    it logs once (nodes left out) and each pod's last progress report (to see it go back)."""

    def __init__(
        self,
        config: SchedulerConfig,
        recorder: Recorder,
        *,
        nodes: Informer,
        pods: Informer,
        sets: Informer,
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.nodes, self.pods, self.sets = nodes, pods, sets
        self._left_out: dict[str, str] = {}  # nodes already logged as left out, and why
        # pod uid -> (its start: restarts so far, the last iteration it reported, and whether
        # that start's going back was already told); for the ProgressWentBack Event only
        self._reports: dict[str, tuple[int, int, bool]] = {}

    def view(self, report: StepReport) -> ApiView:
        """Snapshots of the caches; nodes whose room cannot be read are left out (said in
        ``report.left_out``, logged once)."""
        nodes = self.nodes.snapshot()
        report.left_out = unreadable_nodes(nodes)
        self._note_left_out(report.left_out)
        for key in report.left_out:
            del nodes[key]
        return ApiView(nodes, self.pods.snapshot(), self.sets.snapshot())

    def jobs(
        self, view: ApiView, seal: Seal, report: StepReport, untrusted: set[str]
    ) -> dict[str, RoundJob]:
        """This round's jobs with their live pods; ``untrusted`` gets those whose admission was
        ignored. A job that cannot be read is skipped and reported (:func:`skip_job`)."""
        jobs, invalid = self._read_sets(view, seal, untrusted)
        waiting = self._gather_pods(view, jobs, invalid)
        for key, (sts, why) in invalid.items():
            skip_job(self.recorder, sts, waiting[key], why, report, key=key)
        for job in jobs.values():
            job.pods.sort(key=lambda p: p["metadata"]["name"])
        present = {p["metadata"].get("uid") for p in view.pods.values()}
        for uid in self._reports.keys() - present:  # pods gone: their reports with them
            del self._reports[uid]
        return jobs

    def _read_sets(
        self, view: ApiView, seal: Seal, untrusted: set[str]
    ) -> tuple[dict[str, RoundJob], dict[str, tuple[dict[str, Any], str]]]:
        """The jobs this scheduler runs, and those it cannot read (by cache key: the StatefulSet
        and why)."""
        jobs: dict[str, RoundJob] = {}
        invalid: dict[str, tuple[dict[str, Any], str]] = {}
        for key, sts in view.sets.items():
            try:
                template = sts["spec"]["template"]["spec"]
                if template.get("schedulerName") != self.config.scheduler_name:
                    continue
                spec = J.read_job(sts, self.config.resource)
            except Exception as exc:  # one bad job is skipped, never the round
                # Keyed by the cache's key: the object itself may lack the name key_of needs.
                why = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
                invalid[key] = (sts, why if key in why else f"statefulset/{key}: {why}")
                continue
            trusted = self._trusted(sts, spec, seal)
            if trusted is not spec:
                untrusted.add(spec.key)
            jobs[spec.key] = RoundJob(trusted, [])
        return jobs, invalid

    def _gather_pods(
        self,
        view: ApiView,
        jobs: dict[str, RoundJob],
        invalid: dict[str, tuple[dict[str, Any], str]],
    ) -> dict[str, list[dict[str, Any]]]:
        """Give each job its live pods; returns the pending pods of the invalid jobs. A pending
        pod that names this scheduler but belongs to no job is told so."""
        waiting: dict[str, list[dict[str, Any]]] = {key: [] for key in invalid}
        for pod in view.pods.values():
            owner = owner_of(pod)
            if pod["metadata"].get("deletionTimestamp") or is_ended(pod):
                continue
            if owner in jobs:
                jobs[owner].pods.append(pod)
            elif owner in waiting and not pod["spec"].get("nodeName"):
                waiting[owner].append(pod)
            elif (
                owner not in waiting
                and pod["spec"].get("schedulerName") == self.config.scheduler_name
                and not pod["spec"].get("nodeName")
            ):
                # It names this scheduler, which binds only the pods of its jobs: said on the
                # pod, or it would wait for ever without a word.
                self.recorder.pod_condition(pod, "NotAJob", NOT_A_JOB)
        return waiting

    def _trusted(self, sts: dict[str, Any], spec: J.K8sJob, seal: Seal) -> J.K8sJob:
        """The job with its recorded admission only if this scheduler sealed it for this
        StatefulSet and these terms (:mod:`.seal`); any other is ignored, said in an Event,
        and the job admitted again by the policy."""
        if spec.admission is None or seal.trusts(spec):
            return spec
        self.recorder.event(
            sts,
            WARNING,
            "AdmissionNotTrusted",
            f"{J.ADMISSION}: {spec.admission.value} carries no valid {J.ADMISSION_SEAL} of this "
            "scheduler (written by someone else, copied from another job, or the job's terms "
            "changed since it was admitted): ignored; the job is admitted again",
        )
        return dataclasses.replace(spec, admission=None)

    def _note_left_out(self, left_out: dict[str, str]) -> None:
        """Log each node left out of the cluster once (again if the reason changes), and each
        that comes back."""
        for key, why in left_out.items():
            if self._left_out.get(key) != why:
                log.warning("node %s left out of the cluster: %s", key, why)
        for key in self._left_out.keys() - left_out.keys():
            log.info("node %s is back in the cluster (or gone)", key)
        self._left_out = dict(left_out)

    def cluster(
        self, view: ApiView, rooms: dict[str, Room], jobs: dict[str, RoundJob]
    ) -> ClusterSpec | None:
        """The homogeneous cluster the policy plans on (see :mod:`.scheduler`): workers the
        nodes can give to qosched jobs, i.e. their room with qosched's own pods counted free.
        None when no node can give a worker."""
        ours = {key_of(p) for job in jobs.values() for p in job.pods}
        others = node_rooms(
            view.nodes.values(),
            view.pods.values(),
            count=lambda pod: key_of(pod) not in ours,
        )
        resource = "cpu" if self.config.resource == "cpu" else J.GPU_RESOURCE
        capacity = [c for c in worker_capacity(others, resource).values() if c > 0]
        if not capacity:
            return None
        per_node = max(capacity)
        nodes = min(MAX_NODES, max(1, sum(capacity) // per_node))
        return ClusterSpec(
            1,
            nodes,
            per_node,
            resource=self.config.resource,
            cpus_per_node=per_node if self.config.resource == "cpu" else 0,
        )

    def progress(self, job: RoundJob, report: StepReport) -> J.Progress | None:
        """The job's progress: the highest of its StatefulSet's and its reporting pod's."""
        best = job.spec.progress
        reporter = J.reporting_pod(job.spec.name)
        for pod in job.pods:
            if pod["metadata"]["name"] != reporter:
                continue  # only the job's first pod may report (its Role), so only it is read
            text = (pod["metadata"].get("annotations") or {}).get(J.PROGRESS)
            try:
                progress = J.parse_progress(text, source=f"pod/{key_of(pod)}")
            except InputError as exc:  # that report is ignored; the job goes on
                report.errors.append(str(exc))
                self.recorder.event(pod, WARNING, "InvalidProgress", str(exc))
                continue
            if progress is not None:
                self._note_went_back(pod, progress.iteration)
                if best is None or progress.iteration > best.iteration:
                    best = progress
        return best

    def _note_went_back(self, pod: dict[str, Any], iteration: int) -> None:
        """One Warning Event per pod start (the pod, or a restart of its containers) whose
        report goes below an earlier report of the same pod: it resumed from an older
        checkpoint, or from none, and the work since was lost (or it reports wrongly). The
        report is taken as it is (the policy measures anew), as the local service does."""
        uid = pod["metadata"].get("uid")
        if not uid:
            return
        start, (last_start, last, told) = restarts(pod), self._reports.get(uid, (-1, 0, False))
        told = told and last_start == start
        if iteration < last and not told:
            told = self.recorder.event(
                pod,
                WARNING,
                "ProgressWentBack",
                f"progress went back from iteration {last} to {iteration}: the pod resumed "
                "from an older checkpoint or none (or reports wrongly); the job's progress is "
                "the highest report of its pods and its StatefulSet",
            )
        self._reports[uid] = (start, iteration, told)

    def held(self, job: RoundJob) -> int:
        """The workers the job's bound pods hold."""
        if self.config.resource == "gpu":
            return job.spec.per_pod * len(job.bound)
        return sum(training_cores(p) for p in job.bound)


def skip_job(
    recorder: Recorder,
    sts: dict[str, Any],
    pending: list[dict[str, Any]],
    why: str,
    report: StepReport,
    *,
    key: str | None = None,
) -> None:
    """A job that cannot be read or handled: reported on its StatefulSet (an Event) and on its
    pending pods (``PodScheduled=False``, reason ``InvalidJob``); the other jobs go on."""
    report.invalid[key or key_of(sts)] = why
    report.errors.append(why)
    if isinstance((sts.get("metadata") or {}).get("name"), str):  # an Event names its object
        recorder.event(sts, WARNING, "InvalidJob", f"not scheduled: {why}")
    else:
        log.warning("job %s skipped this round: %s", key, why)
    for pod in pending:
        recorder.pod_condition(pod, "InvalidJob", why)
