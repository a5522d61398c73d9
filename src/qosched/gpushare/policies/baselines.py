"""Baselines in the same harness as qosched's policy: what a GPU does without kernel-level
admission (exclusive use, time slicing, naive concurrency, priority streams), and Orion's rule."""

from __future__ import annotations

from qosched.core.errors import InputError
from qosched.gpushare.policies.base import RequestTimes, register, top_priority
from qosched.gpushare.policy import GpuView, KernelDecision, SharingPolicy


@register("exclusive")
class Exclusive(SharingPolicy):
    """One application at a time, for a whole request: the GPU goes to the most important
    waiting application (then the one ready first) and stays with it until its request ends."""

    def __init__(self) -> None:
        self.owner: str | None = None

    def decide(self, view: GpuView) -> KernelDecision:
        if self.owner is not None:
            busy = any(r.launch.app == self.owner for r in view.running) or any(
                w.app == self.owner and w.index > 0 for w in view.waiting
            )
            if not busy:
                self.owner = None
        if self.owner is None and view.waiting:
            self.owner = view.waiting[0].app
        return KernelDecision(start=tuple(w for w in view.waiting if w.app == self.owner))


@register("time-slicing")
class TimeSlicing(SharingPolicy):
    """Round-robin time slices, as the driver shares a GPU between processes: the owner's
    kernels run until its slice ends (a running kernel is not cut), then the next application
    with work gets a slice; an owner with nothing to run gives its slice up at once."""

    def __init__(self, slice_s: float = 2e-3) -> None:
        if not slice_s > 0:
            raise InputError(f"slice_s must be > 0, got {slice_s!r}", field="slice_s")
        self.slice_s = slice_s
        self.owner: str | None = None
        self.slice_end = 0.0
        self.order: list[str] = []

    def decide(self, view: GpuView) -> KernelDecision:
        for launch in view.waiting:
            if launch.app not in self.order:
                self.order.append(launch.app)
        owner_waiting = [w for w in view.waiting if w.app == self.owner]
        expired = view.now_s >= self.slice_end
        if owner_waiting and not expired:
            return KernelDecision(start=tuple(owner_waiting), wake_at_s=self.slice_end)
        if view.running:  # wait for the owner's kernel to end before switching
            return KernelDecision(wake_at_s=None if expired else self.slice_end)
        ready = {w.app for w in view.waiting}
        if not ready:
            self.owner = None
            return KernelDecision()
        start = self.order.index(self.owner) + 1 if self.owner in self.order else 0
        turn = self.order[start:] + self.order[:start]
        self.owner = next(app for app in turn if app in ready)
        self.slice_end = view.now_s + self.slice_s
        return KernelDecision(
            start=tuple(w for w in view.waiting if w.app == self.owner), wake_at_s=self.slice_end
        )


@register("naive")
class Naive(SharingPolicy):
    """Every kernel starts at once on equal-priority streams, as under MPS: SMs and bandwidth
    are shared with no regard to priority."""

    stream_priorities = False

    def decide(self, view: GpuView) -> KernelDecision:
        return KernelDecision(start=view.waiting)


@register("priority-streams")
class PriorityStreams(SharingPolicy):
    """Every kernel starts at once, each application on a stream of its priority: the block
    scheduler hands free SMs to important kernels first, but never pre-empts running blocks."""

    def decide(self, view: GpuView) -> KernelDecision:
        return KernelDecision(start=view.waiting)


@register("orion")
class Orion(SharingPolicy):
    """Orion's rule (EuroSys'24): high-priority kernels start at once; a best-effort kernel
    starts when no high-priority kernel is running or waiting, or else only if it needs fewer
    SMs than ``sm_threshold`` (a fraction of the GPU), its profile (compute/memory-bound)
    differs from every running high-priority kernel's, and the best-effort work in flight stays
    under ``dur_fraction`` of a high-priority request's duration alone (learned from the
    kernels the high-priority application issues)."""

    def __init__(self, sm_threshold: float = 0.5, dur_fraction: float = 0.025) -> None:
        if not 0 < sm_threshold <= 1:
            raise InputError("sm_threshold must be in (0, 1]", field="sm_threshold")
        if not dur_fraction > 0:
            raise InputError("dur_fraction must be > 0", field="dur_fraction")
        self.sm_threshold = sm_threshold
        self.dur_fraction = dur_fraction
        self.requests = RequestTimes()

    def decide(self, view: GpuView) -> KernelDecision:
        top = top_priority(view)
        if top is None:
            return KernelDecision()
        self.requests.observe(view)
        high = [w for w in view.waiting if w.priority == top]
        running_high = [r.launch.kernel for r in view.running if r.launch.priority == top]
        start = list(high)
        if not high and not running_high:
            return KernelDecision(start=view.waiting)
        high_apps = {w.app for w in high} | {
            r.launch.app for r in view.running if r.launch.priority == top
        }
        budget = self.dur_fraction * max(
            (t for app, t in self.requests.longest.items() if app in high_apps), default=0.0
        )
        in_flight = sum(
            r.remaining * r.launch.kernel.time_s for r in view.running if r.launch.priority < top
        )
        sm_limit = self.sm_threshold * view.gpu.sm_count
        profiles = {k.bound for k in running_high} | {w.kernel.bound for w in high}
        for launch in view.waiting:
            if launch.priority == top:
                continue
            kernel = launch.kernel
            if (
                kernel.sms < sm_limit
                and kernel.bound not in profiles
                and in_flight + kernel.time_s <= budget
            ):
                start.append(launch)
                in_flight += kernel.time_s
        return KernelDecision(start=tuple(start))
