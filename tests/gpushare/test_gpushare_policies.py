import dataclasses
import itertools

import pytest
from gpushare_sim_helpers import TOY, kernel

from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, Goal
from qosched.gpushare.interference import InterferenceModel
from qosched.gpushare.policies import create_policy, policy_names, register
from qosched.gpushare.policies.fggr import FgGR
from qosched.gpushare.policy import AppInfo, GpuView, KernelDecision, Launch, Running, SharingPolicy
from qosched.gpushare.simulator import AppWorkload, simulate

MIX = [
    AppWorkload("hp", 2, (kernel("h1", sms=40, time_s=2e-4, bandwidth=0.6),
                          kernel("h2", sms=100, time_s=1e-4, bandwidth=0.1)), poisson_rps=500.0),
    AppWorkload("mid", 1, (kernel("m", sms=60, time_s=3e-4, bandwidth=0.3),), poisson_rps=300.0),
    AppWorkload("lp", 0, (kernel("l1", sms=100, time_s=1e-3, bandwidth=0.7, blocks=4000),
                          kernel("l2", sms=30, time_s=2e-4, bandwidth=0.1))),
]  # fmt: skip


class Checked(SharingPolicy):
    """Wraps a policy and checks the interface's rules on every answer."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.views = []

    def setup(self, apps):
        self.inner.setup(apps)
        self.stream_priorities = self.inner.stream_priorities

    def decide(self, view):
        admission = self.inner.decide(view)
        assert isinstance(admission, KernelDecision)
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


def test_a_policy_written_against_the_earlier_name_admission_still_runs():
    with pytest.warns(DeprecationWarning, match="policy.Admission is now .*KernelDecision"):
        from qosched.gpushare.policy import Admission  # qosched 0.1's name, as plugins.md said

    class EarlierPlugin(SharingPolicy):
        name = "earlier-plugin"

        def decide(self, view: GpuView) -> Admission:
            return Admission(start=view.waiting)

    result = simulate(TOY, MIX, EarlierPlugin(), duration_s=0.02, seed=1, drain_factor=100.0)
    assert all(app.unfinished == 0 and app.completed > 0 for app in result.apps)
    assert Admission is KernelDecision


def test_fggr_starts_every_high_priority_kernel_the_moment_it_is_ready():
    policy = Checked(create_policy("fggr"))
    result = simulate(TOY, MIX, policy, duration_s=0.05, seed=2, record=True)
    top = [s for s in result.spans if s.track.startswith("hp ")]
    assert top
    assert all(s.args["waited_s"] == 0.0 for s in top)
    for view, admission in policy.views:
        started = {id(launch) for launch in admission.start}
        assert all(id(w) in started for w in view.waiting if w.priority == 2)


# hp is closed loop and wants the whole GPU's bandwidth: every lp kernel would interfere.
HP_LOAD = AppWorkload("hp", 1, (kernel("h", sms=100, time_s=1e-4, bandwidth=0.9),))
LP_LOAD = AppWorkload("lp", 0, (kernel("l", sms=50, time_s=1e-4, bandwidth=0.9),))


def test_fggr_bounds_the_wait_of_low_priority_below_a_throughput_goal():
    hp = dataclasses.replace(HP_LOAD, goal=Goal("throughput_share", 0.5))
    # The rule's own wait bound, not a calibrated setting: calibration off.
    policy = FgGR(max_wait_s=1e-3, calibrate=False)
    result = simulate(TOY, [hp, LP_LOAD], policy, duration_s=0.05, record=True)
    lp_spans = [s for s in result.spans if s.track.startswith("lp ")]
    assert result.app("lp").completed >= 10  # ~one per max_wait_s over 50 ms
    assert max(s.args["waited_s"] for s in lp_spans) <= 1e-3 + 1e-9


def test_fggr_bounds_a_wait_below_a_p99_goal_only_within_its_tail():
    # Under hp's default p99 <= 1.10x, a kernel that waited max_wait_s starts only while the
    # requests it puts at risk stay within half of hp's 1 %: hp's p99 holds (calibration off:
    # the default setting is the one under test).
    policy = FgGR(max_wait_s=1e-3, calibrate=False)
    result = simulate(TOY, [HP_LOAD, LP_LOAD], policy, duration_s=0.05)
    hp = result.app("hp")
    assert 1 <= policy.forced <= 0.005 * hp.completed + 1
    assert hp.latency_quantile(0.99) <= 1.10 * 1e-4


def view_with(running, waiting, now=0.0, backlog=None):
    return GpuView(
        now_s=now,
        gpu=TOY,
        running=tuple(Running(launch, 0.0, 1.0) for launch in running),
        waiting=tuple(waiting),
        backlog=backlog or {},
    )


def launch(app, priority, k, request=0, index=0, ready_s=0.0):
    return Launch(app, priority, request, index, k, ready_s, arrived_s=ready_s)


# Fixed weights, so that these cases do not move with the calibration.
MODEL = InterferenceModel(bandwidth=1.0, same_bound=0.0, sm_overflow=0.0, drain=1.0)
P99 = Goal("p99_slowdown", 1.10)
# hp: closed loop, one 1 ms kernel per request: alone p99 = 1 ms, so p99 <= 1.10x allows a
# lag of 0.1 ms, half of it (0.05 ms) taken freely.
HP = kernel("h", sms=40, time_s=1e-3, bandwidth=0.8, bound="memory")


def fggr_beside_hp(hp_kernel=HP, goal=P99):
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("hp", 1, goal), AppInfo("lp", 0, BEST_EFFORT)))
    hp = launch("hp", 1, hp_kernel)
    assert policy.decide(view_with([], [hp])).start == (hp,)
    return policy, hp


@pytest.mark.parametrize(
    ("lp_kernel", "admitted"),
    [
        # 40 + 40 SMs fit in 100 and 0.8 + 0.1 of the bandwidth fits: no delay at all.
        (kernel("c", sms=40, time_s=1e-3, bandwidth=0.1), True),
        # 0.8 + 0.7 > 1: max-min fair gives hp 0.5, a slowdown of 0.6 for 1 ms: 0.6 ms > 0.1 ms.
        (kernel("m", sms=40, time_s=1e-3, bandwidth=0.7), False),
        # 40 + 70 SMs > 100: hp's next kernel runs on the 30 SMs left, at 3/4 of its speed,
        # until lp's one 1 ms wave ends: 0.25 ms lost > 0.1 ms.
        (kernel("wide", sms=70, time_s=1e-3, bandwidth=0.1), False),
        # As wide, in 40 waves of 25 us: one wave (25 us) is under half of 0.1 ms.
        (kernel("waves", sms=70, time_s=1e-3, bandwidth=0.1, blocks=8 * 70 * 40), True),
    ],
    ids=["disjoint-sms-and-bandwidth", "bandwidth-overflow", "long-wave", "short-waves"],
)
def test_fggr_admits_a_lower_kernel_when_the_goal_above_keeps_its_lag(lp_kernel, admitted):
    policy, hp = fggr_beside_hp()
    lp = launch("lp", 0, lp_kernel)
    admission = policy.decide(view_with([hp], [lp]))
    assert (admission.start == (lp,)) is admitted
    if not admitted:
        assert admission.wake_at_s == pytest.approx(policy.max_wait_s)  # asked again in time


def test_fggr_admits_anything_below_a_best_effort_app():
    # Nothing above lp asks for anything: even the long wave starts at once.
    policy, hp = fggr_beside_hp(goal=BEST_EFFORT)
    lp = launch("lp", 0, kernel("wide", sms=70, time_s=1e-3, bandwidth=0.7))
    assert policy.decide(view_with([hp], [lp])).start == (lp,)


def test_fggr_gives_a_looser_goal_more_room():
    # p99 <= 2x of a 1 ms request allows a lag of 1 ms: the 1 ms wave fits (exposing one
    # request, the one in progress, which the allowance's first exposure covers).
    policy, hp = fggr_beside_hp(goal=Goal("p99_slowdown", 2.0))
    lp = launch("lp", 0, kernel("wide", sms=70, time_s=1e-3, bandwidth=0.1))
    assert policy.decide(view_with([hp], [lp])).start == (lp,)


def test_fggr_protects_every_level_from_the_ones_below():
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("top", 2, P99), AppInfo("mid", 1, P99), AppInfo("low", 0, BEST_EFFORT)))
    top = launch("top", 2, kernel("t", sms=10, time_s=1e-3, bandwidth=0.05))
    mid = launch("mid", 1, kernel("m", sms=40, time_s=1e-3, bandwidth=0.6))
    low = launch("low", 0, kernel("l", sms=40, time_s=1e-3, bandwidth=0.6))
    assert policy.decide(view_with([], [top])).start == (top,)
    # mid beside top: 50 SMs of 100, 0.65 of the bandwidth: no delay to top -> admitted. low
    # beside both: 90 SMs, and top's 0.05 of the bandwidth is under the fair share, so top
    # would allow it; but max-min fair sharing leaves mid 0.475 of the 0.6 it asks, 0.26 ms
    # late on its 1 ms kernel, beyond mid's 0.1 ms -> held.
    admission = policy.decide(view_with([top], [mid, low], now=1e-6))
    assert admission.start == (mid,)


# One wave of 83 us (12 waves in 1 ms) on 90 SMs: hp's kernel runs on the 10 SMs left, at
# 1/4 of its speed, for the wave: 62 us lost, over half of hp's 0.1 ms allowance, under all of it.
WAVES_83US = kernel("waves", sms=90, time_s=1e-3, bandwidth=0.1, blocks=8 * 90 * 12)


def test_fggr_spends_its_exposure_on_a_lag_beyond_the_free_half():
    policy, hp = fggr_beside_hp()
    lp = launch("lp", 0, WAVES_83US)
    assert policy.decide(view_with([hp], [lp])).start == (lp,)
    assert policy.apps["hp"].exposure == {"lp": 1.0}  # the request in progress, exposed


def test_fggr_gives_the_allowance_to_a_lower_app_missing_its_own_goal():
    # lp asks for half its throughput alone (500 requests/s of 1 ms) and has done 11 in 105 ms.
    # Its 83 us wave beside hp is beyond the free half of hp's allowance: instead of spending
    # hp's exposure (as for a best-effort lp), it takes the allowance.
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("hp", 1, P99), AppInfo("lp", 0, Goal("throughput_share", 0.5))))
    for r in range(11):
        lp = launch("lp", 0, WAVES_83US, request=r, ready_s=r * 1e-2)
        policy.decide(view_with([], [lp], now=r * 1e-2))
        policy.decide(view_with([], [], now=r * 1e-2 + 1e-3))  # asked at its end, 1 ms later
    hp = launch("hp", 1, HP, ready_s=0.105)
    assert policy.decide(view_with([], [hp], now=0.105)).start == (hp,)
    lp = launch("lp", 0, WAVES_83US, request=11, ready_s=0.105)
    assert policy.decide(view_with([hp], [lp], now=0.105)).start == (lp,)
    assert policy.apps["hp"].exposure == {}


@pytest.mark.parametrize(("queued", "admitted"), [(0, True), (2, False)], ids=["none", "two"])
def test_fggr_counts_the_delay_to_the_requests_queued_behind(queued, admitted):
    # hp (100 requests/s of 1 ms, p99 <= 1.10x of ~1.9 ms alone: 0.19 ms of lag) has 0.1 ms
    # left of its request. lp's 1 ms kernel leaves it 0.7 of the 0.8 of the bandwidth it asks:
    # 14 us more for the request in progress, but 0.14 ms more for each request queued behind,
    # which inherit the lag: two queued take it to 0.3 ms.
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("hp", 1, P99, poisson_rps=100.0), AppInfo("lp", 0, BEST_EFFORT)))
    first = launch("hp", 1, HP)
    assert policy.decide(view_with([], [first])).start == (first,)
    hp = launch("hp", 1, HP, request=1, ready_s=1e-3)
    assert policy.decide(view_with([], [hp], now=1e-3)).start == (hp,)
    lp = launch("lp", 0, kernel("bw", sms=40, time_s=1e-3, bandwidth=0.3), ready_s=1.9e-3)
    view = GpuView(now_s=1.9e-3, gpu=TOY, running=(Running(hp, 1e-3, 0.1),), waiting=(lp,),
                   backlog={"hp": queued} if queued else {})  # fmt: skip
    assert (policy.decide(view).start == (lp,)) is admitted


def room_after_requests(goal):
    """An fggr with hp (priority 1, ``goal``) after 11 closed-loop requests of 1 ms each, the
    12th in progress, beside a best-effort app of its priority and one below it."""
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("hp", 1, goal), AppInfo("same", 1, BEST_EFFORT),
                  AppInfo("low", 0, BEST_EFFORT)))  # fmt: skip
    for r in range(12):
        hp = launch("hp", 1, HP, request=r, ready_s=r * 1e-3)
        assert policy.decide(view_with([], [hp], now=r * 1e-3)).start == (hp,)
    return policy, hp


# 0.8 + 0.7 of the bandwidth: 0.6 ms of delay to hp's 1 ms kernel, beyond a 0.5 ms allowance.
HEAVY = kernel("m", sms=40, time_s=1e-3, bandwidth=0.7)


@pytest.mark.parametrize(
    ("goal", "app", "admitted"),
    [
        # p99 <= 1.5x: the requests so far took 1 ms, within 0.9 of the 1.5 ms target.
        (Goal("p99_slowdown", 1.5), "same", True),
        (Goal("p99_slowdown", 1.5), "low", False),  # room is for hp's own level only
        # p99 <= 1.10x: 1 ms is over 0.9 of 1.1 ms, no measured room.
        (Goal("p99_slowdown", 1.10), "same", False),
    ],
    ids=["room-same-level", "room-lower-level", "no-room"],
)
def test_fggr_runs_a_same_level_best_effort_app_while_the_goal_has_measured_room(
    goal, app, admitted
):
    policy, hp = room_after_requests(goal)
    candidate = launch(app, 1 if app == "same" else 0, HEAVY, ready_s=11e-3)
    admission = policy.decide(view_with([hp], [candidate], now=11e-3))
    assert (admission.start == (candidate,)) is admitted


@pytest.mark.parametrize(("priority", "admitted"), [(1, True), (0, False)], ids=["same", "below"])
def test_fggr_protects_a_best_effort_open_loop_only_from_the_priorities_below(priority, admitted):
    # "open" (best effort, 500 requests/s of 1 ms) is protected for its offered load: it may
    # stay at most half busy, so a 0.6 ms delay to its kernel is too much, for the level below.
    policy = FgGR(model=MODEL)
    policy.setup((AppInfo("open", 1, BEST_EFFORT, poisson_rps=500.0),
                  AppInfo("other", priority, BEST_EFFORT)))  # fmt: skip
    open_loop = launch("open", 1, HP)
    assert policy.decide(view_with([], [open_loop])).start == (open_loop,)
    other = launch("other", priority, HEAVY)
    admission = policy.decide(view_with([open_loop], [other], now=1e-6))
    assert (admission.start == (other,)) is admitted


def test_fggr_halves_its_allowance_after_a_late_request():
    policy, hp = fggr_beside_hp()
    # hp's request 0 (1 ms alone, target 1.1 ms), slowed beside another kernel (so its 2 ms are
    # not its time alone), ends at 2 ms: late.
    policy.decide(view_with([hp, launch("other", 0, HEAVY)], [], now=1e-3))
    later = launch("hp", 1, HP, request=1, ready_s=2e-3)
    policy.decide(view_with([], [later], now=2e-3))
    assert policy.violations() == {"hp": 1}
    # Now the allowance is 0.05 ms: the 83 us wave no longer fits.
    lp = launch("lp", 0, WAVES_83US, ready_s=2e-3)
    assert policy.decide(view_with([later], [lp], now=2e-3)).start == ()


def test_fggr_refuses_bad_options():
    for options in ({"slack_fraction": -1.0}, {"exposure": 2.0}, {"max_wait_s": 0.0},
                    {"safe_fraction": float("nan")}, {"trust_step": 2.0}):  # fmt: skip
        with pytest.raises(InputError):
            FgGR(**options)


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
