"""Progress reporting from inside a training pod: the job's first pod patches its annotation.

The training loop calls :meth:`ProgressReporter.report` after its iterations; the reporter
patches ``qosched.io/progress`` on its own pod (a JSON merge patch, at most every
``min_interval_s``) with the iterations done and the compute seconds. The pod learns its name
and namespace from the downward API (``POD_NAME``, ``POD_NAMESPACE``) and its job from
``QOSCHED_JOB`` (``qosched k8s job`` sets all three). Only the job's reporting pod (``NAME-0``)
reports: the ranks of a data-parallel job step together, and the job's Role lets its pods
patch that pod alone, so that no pod can write another job's progress.

``active_s`` must be the job's compute clock: seconds of training across all its restarts,
without the time spent stopped or restarting. Keep it in the checkpoint with the model and
resume it from there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from qosched.backends.kubernetes.jobs import PROGRESS, Progress, reporting_pod
from qosched.backends.kubernetes.kube import api_client as make_client
from qosched.backends.kubernetes.kube import require
from qosched.core.errors import InputError

log = logging.getLogger(__name__)


class ProgressReporter:
    """Reports one pod's progress; see the module docstring."""

    def __init__(
        self,
        api_client: Any = None,
        *,
        pod_name: str | None = None,
        namespace: str | None = None,
        job: str | None = None,
        min_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pod_name = pod_name or os.environ.get("POD_NAME")
        self.namespace = namespace or os.environ.get("POD_NAMESPACE")
        if not self.pod_name or not self.namespace:
            raise InputError(
                "set POD_NAME and POD_NAMESPACE from the downward API (or pass them)",
                field="pod_name",
            )
        job = job or os.environ.get("QOSCHED_JOB")
        #: False on the job's other pods: they train and leave the reports to the first.
        self.reports = job is None or self.pod_name == reporting_pod(job)
        if not self.reports:
            log.info(
                "pod %s does not report: pod %s reports job %s",
                self.pod_name,
                reporting_pod(job),
                job,
            )
        client = require().client
        self.core = client.CoreV1Api(api_client if api_client is not None else make_client())
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._last = -float("inf")

    def report(self, iteration: int, active_s: float, *, force: bool = False) -> bool:
        """Patch the annotation unless the last report was under ``min_interval_s`` ago (``force``
        reports anyway: at a checkpoint, at the end). True when it was sent; a failure is logged
        and never stops training."""
        if not self.reports:
            return False
        now = self.clock()
        if not force and now - self._last < self.min_interval_s:
            return False
        try:
            text = Progress(iteration, active_s).to_text()
        except ValueError as exc:  # NaN, a negative count: the scheduler would refuse it
            log.warning("progress not reported: %s", exc)
            return False
        body = {"metadata": {"annotations": {PROGRESS: text}}}
        try:
            self.core.patch_namespaced_pod(
                self.pod_name,
                self.namespace,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        except Exception as exc:
            log.warning("cannot report progress: %s", exc)
            return False
        self._last = now
        return True
