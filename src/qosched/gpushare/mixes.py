"""A mix of apps run under every registered GPU-sharing policy, each app judged by its goal.

Above the policies: it builds them from the registry, and ``judge`` (the rules) stays below them,
so a policy may judge its own what-ifs with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from qosched.gpushare.judge import AppOutcome, outcomes
from qosched.gpushare.policies import create_policy, policy_names
from qosched.gpushare.policy import SharingPolicy
from qosched.gpushare.simulator import AppWorkload, alone_results, app_infos, compare, simulate
from qosched.hardware import Processor


def judge_mix(
    gpu: Processor,
    apps: Sequence[AppWorkload],
    *,
    duration_s: float,
    seed: int = 0,
    policies: Sequence[str] | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
    more: Mapping[str, Callable[[], SharingPolicy]] | None = None,
    told: Sequence[AppWorkload] | None = None,
) -> dict[str, tuple[AppOutcome, ...]]:
    """Simulate the mix under each policy (default: every registered one) and judge every app
    against its goal (stated, or the default for its priority). ``options``: constructor
    options by policy name (e.g. ``{"fggr": {"calibrate": True}}``); ``more``: policies made
    by the caller, by the label they are reported under, judged after those (against the same
    runs alone). ``told``: what every policy is told of the apps, where that is not what runs
    (`simulator.simulate`)."""
    goals = {info.name: info.goal for info in app_infos(apps)}
    times = {app.name: app.request_time_s for app in apps}
    alone = alone_results(gpu, apps, duration_s=duration_s, seed=seed)
    makers = {
        name: lambda name=name: create_policy(name, **(options or {}).get(name, {}))
        for name in policies or policy_names()
    }
    result = {}
    for label, make in {**makers, **(more or {})}.items():
        shared = simulate(gpu, apps, make(), duration_s=duration_s, seed=seed, told=told)
        result[label] = outcomes(compare(shared, alone, times), goals)
    return result
