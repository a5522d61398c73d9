"""The registry of GPU-sharing policies, and small helpers they share.

Every policy subclasses ``qosched.gpushare.policy.SharingPolicy``; the GPU simulator and the
runtime construct one by name through :func:`create_policy`, call its ``setup`` once, read its
``stream_priorities`` once, then call ``decide``.
"""

from __future__ import annotations

import inspect

from qosched.core.registry import PluginGroup, Registry
from qosched.gpushare.policy import GpuView, SharingPolicy

#: Other packages add sharing policies under this entry-point group (docs/plugins.md).
PLUGINS = PluginGroup(
    "qosched.sharing_policies",
    lambda cls: issubclass(cls, SharingPolicy) and not inspect.isabstract(cls),
    "a subclass of qosched.gpushare.policy.SharingPolicy that implements decide",
)
_POLICIES: Registry[SharingPolicy] = Registry("GPU-sharing policy", PLUGINS)
#: Class decorator: make a policy constructible by name. A duplicate name raises.
register = _POLICIES.register
policy_names = _POLICIES.names


def create_policy(name: str, **options: object) -> SharingPolicy:
    """A new policy by registered name; an unknown name lists the known ones. A module-level
    function (not the registry's bound method), so that ``partial(create_policy, name)`` can be
    sent to another process, as the what-if's factories are."""
    return _POLICIES.create(name, **options)


def top_priority(view: GpuView) -> int | None:
    """The highest priority among running and waiting kernels (None when the GPU is idle)."""
    priorities = [r.launch.priority for r in view.running] + [w.priority for w in view.waiting]
    return max(priorities, default=None)


class RequestTimes:
    """Learns each application's request duration alone (the sum of its kernels' ``time_s``)
    from the launches a policy is offered; policies that budget relative to a request use it."""

    def __init__(self) -> None:
        self.longest: dict[str, float] = {}
        self._last: dict[str, tuple[int, int]] = {}
        self._sum: dict[str, float] = {}

    def observe(self, view: GpuView) -> None:
        """Called at the start of ``decide``: every launch is offered before it starts."""
        for launch in view.waiting:
            key = (launch.request, launch.index)
            if self._last.get(launch.app) == key:
                continue
            self._last[launch.app] = key
            before = 0.0 if launch.index == 0 else self._sum.get(launch.app, 0.0)
            self._sum[launch.app] = before + launch.kernel.time_s
            self.longest[launch.app] = max(self.longest.get(launch.app, 0.0), self._sum[launch.app])
