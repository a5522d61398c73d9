"""qosched's kernel-level priority admission (after FgGR, CSCWD 2025).

- Kernels of the most important level (among the applications seen) start at once, without
  any check: a high-priority kernel never waits for a low-priority admission decision.
- A less important kernel starts only when (1) its interference score against the more
  important kernels running (``gpushare.interference``) is at most ``threshold``, (2) at least
  ``min_sm_fraction`` of the SMs it wants are free, and (3) the budget holds: the hand-over
  delay it could impose on a more important kernel that arrives later (its share of the SMs
  times its wave time, added over the less important kernels in flight) stays within
  ``budget_fraction`` of the more important applications' request time alone (learned online).
  With nothing more important active, only (3) applies.
- No starvation: a kernel that has waited ``max_wait_s`` starts regardless.

Any number of applications and priority levels: each level is protected from every lower one,
and levels are admitted most important first.
"""

from __future__ import annotations

import math

from qosched.core.errors import InputError
from qosched.gpushare.interference import CALIBRATED, InterferenceModel, wave_time_s
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.policies.base import RequestTimes, register
from qosched.gpushare.policy import Admission, GpuView, Launch
from qosched.hardware import Processor


@register("fggr")
class FgGR:
    """Priority admission by interference score, free SMs and a hand-over budget."""

    stream_priorities = True

    def __init__(
        self,
        threshold: float = 0.05,
        min_sm_fraction: float = 0.5,
        budget_fraction: float = 0.05,
        max_wait_s: float = 0.02,
        model: InterferenceModel = CALIBRATED,
    ) -> None:
        for name, value in (("threshold", threshold), ("budget_fraction", budget_fraction)):
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"must be finite and >= 0, got {value!r}", field=name)
        if not 0 <= min_sm_fraction <= 1:
            raise InputError("must be in [0, 1]", field="min_sm_fraction")
        if not max_wait_s > 0:
            raise InputError(f"must be > 0, got {max_wait_s!r}", field="max_wait_s")
        self.threshold = threshold
        self.min_sm_fraction = min_sm_fraction
        self.budget_fraction = budget_fraction
        self.max_wait_s = max_wait_s
        self.model = model
        self.requests = RequestTimes()
        self.priorities: dict[str, int] = {}

    def decide(self, view: GpuView) -> Admission:
        if not view.waiting:
            return Admission()
        self.requests.observe(view)
        for launch in view.waiting:
            self.priorities[launch.app] = launch.priority
        # The most important level of any application seen, not just of those busy now: a
        # less important kernel stays under the budget while the important app is between
        # requests, since its next request may arrive at any moment.
        top = max(self.priorities.values())
        active = [(r.launch, r.remaining) for r in view.running]
        start: list[Launch] = []
        wake: float | None = None
        for launch in view.waiting:  # most important first
            if (
                launch.priority == top
                or view.now_s >= launch.ready_s + self.max_wait_s
                or self._admit(launch, active, view)
            ):
                start.append(launch)
                active.append((launch, 1.0))
            else:
                due = launch.ready_s + self.max_wait_s
                wake = due if wake is None else min(wake, due)
        return Admission(start=tuple(start), wake_at_s=wake)

    def _admit(self, launch: Launch, active: list[tuple[Launch, float]], view: GpuView) -> bool:
        gpu = view.gpu
        sm_count = gpu.sm_count or 1
        kernel = launch.kernel
        protected = [a.kernel for a, _ in active if a.priority > launch.priority]
        if protected:
            others = [a.kernel for a, _ in active if a.priority <= launch.priority]
            if self.model.score(kernel, protected, gpu, others=others) > self.threshold:
                return False
            free = sm_count - sum(min(a.kernel.sms, sm_count) for a, _ in active)
            if free < self.min_sm_fraction * min(kernel.sms, sm_count):
                return False
        # The hand-over budget, against the more important applications seen so far.
        reference = max(
            (
                t
                for app, t in self.requests.longest.items()
                if self.priorities.get(app, -1) > launch.priority
            ),
            default=None,
        )
        if reference is None:
            return True
        debt = sum(
            _handover_s(a.kernel, left, gpu) for a, left in active if a.priority <= launch.priority
        )
        return debt + _handover_s(kernel, 1.0, gpu) <= self.budget_fraction * reference


def _handover_s(kernel: Kernel, remaining: float, gpu: Processor) -> float:
    """The delay a whole-GPU kernel arriving now could wait for ``kernel``'s SMs: its share of
    the SMs times one wave (or what is left of it, if less)."""
    share = min(1.0, kernel.sms / (gpu.sm_count or 1))
    return share * min(wave_time_s(kernel, gpu), remaining * kernel.time_s)
