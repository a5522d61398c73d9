"""The one extension point of GPU sharing: which ready kernels start now.

Both the GPU simulator and the PyTorch runtime are mechanism: whenever a kernel becomes ready,
finishes, or a requested wake-up time arrives, they build a :class:`GpuView` and ask the policy.
Policies never see which of the two is asking.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from qosched.core.errors import InputError
from qosched.core.goals import Goal
from qosched.core.renamed import earlier_names
from qosched.gpushare.kernel import Kernel
from qosched.hardware import Processor


@dataclass(frozen=True)
class Launch:
    """One kernel of one application. ``priority``: larger is more important (0 = best effort);
    ``index`` is the kernel's position in the application's current request, so that a launch is
    identified by ``(app, request, index)``; ``ready_s`` is when its predecessor finished;
    ``arrived_s`` is when its request arrived (open loop: it may have queued behind the app's
    earlier requests; closed loop: when the request started), None when the backend does not
    know."""

    app: str
    priority: int
    request: int
    index: int
    kernel: Kernel
    ready_s: float
    arrived_s: float | None = None

    def __post_init__(self) -> None:
        if self.priority < 0 or self.request < 0 or self.index < 0:
            raise InputError(
                f"launch of {self.kernel.name!r} for app {self.app!r}: priority, request and "
                "index must be >= 0"
            )


@dataclass(frozen=True)
class AppInfo:
    """What a backend tells a policy about one application before the run: its priority, its
    goal (``core.goals``, defaults resolved), its arrivals (``poisson_rps``: requests per
    second, open loop; None: back to back) and, where the backend knows them, one request as
    the kernel sequence it launches (``kernels``, estimated, never measured) on ``gpu``, the
    GPU those estimates are for. A backend that does not know them leaves both None.
    ``horizon_s``: until when the run starts requests (a simulated run's ``duration_s``), where
    the backend knows it. Nothing here says when the run's requests will arrive: only their
    rate."""

    name: str
    priority: int
    goal: Goal
    poisson_rps: float | None = None
    kernels: tuple[Kernel, ...] | None = None
    gpu: Processor | None = None
    horizon_s: float | None = None


@dataclass(frozen=True)
class Running:
    """A kernel on the GPU: when it started and the fraction of its work still to do."""

    launch: Launch
    started_s: float
    remaining: float


@dataclass(frozen=True)
class GpuView:
    """What a policy sees: the time, the GPU, the kernels running, and each application's next
    ready kernel (at most one per application: kernels of one application run in order on its
    stream), sorted by priority, most important first, then by ``ready_s``; and each
    open-loop application's ``backlog``."""

    now_s: float
    gpu: Processor
    running: tuple[Running, ...]
    waiting: tuple[Launch, ...]
    #: Requests of each open-loop app that have arrived but not started (behind the one in
    #: progress); apps without a backlog may be absent.
    backlog: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelDecision:
    """The policy's answer: launches to start now (each one of ``view.waiting``), and optionally
    a time at which to be asked again even if nothing else happens (time slices, budgets)."""

    start: tuple[Launch, ...] = ()
    wake_at_s: float | None = None


#: qosched 0.1's name, still importable (with a DeprecationWarning) by code written against it.
__getattr__ = earlier_names(__name__, globals(), {"Admission": "KernelDecision"})


class SharingPolicy(ABC):
    """Base class of GPU-sharing policies: decides kernel admission on one shared GPU. A policy
    implements ``decide`` and overrides the hooks it needs; the backends call every hook.

    A backend calls :meth:`setup` once before the run, reads :attr:`stream_priorities` once
    after it, then calls :meth:`decide` after every kernel arrival or completion and at
    requested wake-ups.
    """

    name: ClassVar[str]

    #: Read once, after ``setup``. True: the backend runs each application on a CUDA stream of
    #: its priority, so the block scheduler hands free SMs to important kernels first. False:
    #: equal-priority streams (as under MPS). A policy may set it per instance in ``setup``.
    stream_priorities: bool = True

    def setup(self, apps: Sequence[AppInfo]) -> None:
        """Called once by the backend before the first ``decide``, with every application of the
        run (its goal among them, and its request's kernels where the backend knows them).

        The default does nothing: the policy learns what it needs from the launches it is
        offered."""
        return None

    @abstractmethod
    def decide(self, view: GpuView) -> KernelDecision:
        """Which of ``view.waiting`` start now. It must not mutate the view, may keep its own
        state between calls (budgets, slices, counters), and must only return launches from
        ``view.waiting``."""


def check_policy(policy: object) -> SharingPolicy:
    """``policy`` itself, or TypeError: a backend's check of what it is handed."""
    if not isinstance(policy, SharingPolicy):
        raise TypeError(
            f"a GPU-sharing policy must subclass qosched.gpushare.policy.SharingPolicy, "
            f"got {type(policy).__name__}"
        )
    return policy
