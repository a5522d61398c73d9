import itertools

import pytest
from gpushare_sim_helpers import TOY, kernel

from qosched.core.errors import InputError
from qosched.gpushare.interference import InterferenceModel
from qosched.gpushare.policies import create_policy, policy_names, register
from qosched.gpushare.policies.fggr import FgGR
from qosched.gpushare.policy import Admission, GpuView, Launch, Running
from qosched.gpushare.simulator import AppWorkload, simulate

MIX = [
    AppWorkload("hp", 2, (kernel("h1", sms=40, time_s=2e-4, bandwidth=0.6),
                          kernel("h2", sms=100, time_s=1e-4, bandwidth=0.1)), poisson_rps=500.0),
    AppWorkload("mid", 1, (kernel("m", sms=60, time_s=3e-4, bandwidth=0.3),), poisson_rps=300.0),
    AppWorkload("lp", 0, (kernel("l1", sms=100, time_s=1e-3, bandwidth=0.7, blocks=4000),
                          kernel("l2", sms=30, time_s=2e-4, bandwidth=0.1))),
]  # fmt: skip


class Checked:
    """Wraps a policy and checks the interface's rules on every answer."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.stream_priorities = getattr(inner, "stream_priorities", True)
        self.views = []

    def decide(self, view):
        admission = self.inner.decide(view)
        assert isinstance(admission, Admission)
        ids = [id(launch) for launch in admission.start]
        assert len(ids) == len(set(ids)), "a launch started twice"
        offered = {id(w) for w in view.waiting}
        assert all(i in offered for i in ids), "started a launch that was not waiting"
        assert admission.wake_at_s is None or admission.wake_at_s > view.now_s
        self.views.append((view, admission))
        return admission


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_keeps_the_interface_rules_and_finishes_all_requests(name):
    policy = Checked(create_policy(name))
    result = simulate(TOY, MIX, policy, duration_s=0.05, seed=1, drain_factor=100.0)
    assert policy.views, name
    for app in result.apps:
        assert app.unfinished == 0, (name, app.name)
        assert app.completed > 0, (name, app.name)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_is_deterministic(name):
    runs = [
        simulate(TOY, MIX, create_policy(name), duration_s=0.02, seed=4, record=True)
        for _ in range(2)
    ]
    assert runs[0].apps == runs[1].apps
    assert runs[0].spans == runs[1].spans


def test_an_unknown_policy_lists_the_known_ones():
    with pytest.raises(InputError, match="fggr") as error:
        create_policy("nope")
    assert "exclusive" in str(error.value)


def test_a_duplicate_policy_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register("fggr")(type("Again", (), {}))


def test_fggr_starts_every_high_priority_kernel_the_moment_it_is_ready():
    policy = Checked(create_policy("fggr"))
    result = simulate(TOY, MIX, policy, duration_s=0.05, seed=2, record=True)
    top = [s for s in result.spans if s.track.startswith("hp ")]
    assert top
    assert all(s.args["waited_s"] == 0.0 for s in top)
    for view, admission in policy.views:
        started = {id(launch) for launch in admission.start}
        assert all(id(w) in started for w in view.waiting if w.priority == 2)


def test_fggr_does_not_starve_low_priority_under_continuous_high_priority_load():
    # hp is closed loop and wants the whole GPU's bandwidth: every lp kernel would interfere.
    hp = AppWorkload("hp", 1, (kernel("h", sms=100, time_s=1e-4, bandwidth=0.9),))
    lp = AppWorkload("lp", 0, (kernel("l", sms=50, time_s=1e-4, bandwidth=0.9),))
    policy = FgGR(max_wait_s=1e-3)
    result = simulate(TOY, [hp, lp], policy, duration_s=0.05, record=True)
    lp_spans = [s for s in result.spans if s.track.startswith("lp ")]
    assert result.app("lp").completed >= 10  # ~one per max_wait_s over 50 ms
    assert max(s.args["waited_s"] for s in lp_spans) <= 1e-3 + 1e-9


def view_with(running, waiting, now=0.0):
    return GpuView(
        now_s=now,
        gpu=TOY,
        running=tuple(Running(launch, 0.0, 1.0) for launch in running),
        waiting=tuple(waiting),
    )


def launch(app, priority, k, request=0, index=0, ready_s=0.0):
    return Launch(app, priority, request, index, k, ready_s)


# Fixed weights, so that these cases do not move with the calibration.
MODEL = InterferenceModel(bandwidth=1.0, same_bound=0.5, sm_overflow=1.0, drain=1.0)


def test_fggr_pairs_a_compute_kernel_with_a_memory_kernel_but_not_two_memory_kernels():
    policy = FgGR(threshold=0.05, budget_fraction=10.0, model=MODEL)
    hp = launch("hp", 1, kernel("h", sms=50, time_s=1e-3, bandwidth=0.8, bound="memory"))
    policy.decide(view_with([], [hp]))  # the policy learns the app's priority
    compute = launch("lp", 0, kernel("c", sms=40, time_s=1e-4, bandwidth=0.1, bound="compute"))
    memory = launch("lp", 0, kernel("m", sms=40, time_s=1e-4, bandwidth=0.7, bound="memory"))
    assert policy.decide(view_with([hp], [compute])).start == (compute,)
    held = policy.decide(view_with([hp], [memory]))
    assert held.start == ()
    assert held.wake_at_s == pytest.approx(policy.max_wait_s)  # asks again when it would starve


def test_fggr_protects_every_level_from_the_ones_below():
    policy = FgGR(threshold=0.05, budget_fraction=10.0, model=MODEL)
    top = launch("top", 2, kernel("t", sms=10, time_s=1e-3, bandwidth=0.05))
    # Ten short waves: a hand-over costs top 0.4 * 1e-4 / 1e-3 = 0.04 <= 0.05.
    mid = launch("mid", 1, kernel("m", sms=40, time_s=1e-3, bandwidth=0.7, blocks=3200))
    low = launch("low", 0, kernel("l", sms=40, time_s=1e-4, bandwidth=0.7, blocks=3200))
    policy.decide(view_with([], [top]))
    policy.decide(view_with([], [mid, low]))  # the policy learns every app's priority
    # mid beside top: 0.75 of the bandwidth, different bound -> admitted; low beside top and
    # mid: 1.45 of the bandwidth, memory-bound like mid -> held.
    admission = policy.decide(view_with([top], [mid, low], now=1e-6))
    assert mid in admission.start and low not in admission.start


def test_fggr_refuses_bad_options():
    with pytest.raises(InputError):
        FgGR(threshold=-1.0)
    with pytest.raises(InputError):
        FgGR(max_wait_s=0.0)


def test_exclusive_keeps_the_gpu_for_a_whole_request():
    lp = AppWorkload("lp", 0, (kernel("l1", sms=10), kernel("l2", sms=10)))
    hp = AppWorkload("hp", 1, (kernel("h", sms=10),), poisson_rps=5.0)
    result = simulate(TOY, [lp, hp], create_policy("exclusive"), duration_s=3.0, record=True)
    spans = sorted(result.spans, key=lambda s: s.start_s)
    for a, b in itertools.pairwise(spans):
        assert b.start_s >= a.start_s + a.duration_s - 1e-12  # never two apps at once
    order = [s.name for s in spans]
    for i, name in enumerate(order):
        if name == "l1":
            assert order[i + 1] == "l2"  # hp never cuts into an lp request


def test_time_slicing_switches_apps_only_between_kernels_and_at_slice_ends():
    a = AppWorkload("a", 0, (kernel("a", sms=10, time_s=1e-3),))
    b = AppWorkload("b", 0, (kernel("b", sms=10, time_s=1e-3),))
    policy = create_policy("time-slicing", slice_s=3e-3)
    result = simulate(TOY, [a, b], policy, duration_s=0.03, record=True)
    spans = sorted(result.spans, key=lambda s: s.start_s)
    names = "".join(s.name for s in spans)
    assert names.startswith("aaabbbaaabbb")  # three 1 ms kernels per 3 ms slice
