import math

import pytest
from gpushare_sim_helpers import TOY, kernel
from hypothesis import given
from hypothesis import strategies as st

from qosched.core.errors import InputError, SimulationError
from qosched.gpushare.interference import FairShare, max_min_fair
from qosched.gpushare.policies import create_policy, policy_names
from qosched.gpushare.policy import KernelDecision, SharingPolicy
from qosched.gpushare.simulator import (
    MAX_LAUNCHES,
    AppWorkload,
    alone_results,
    expected_launches,
    simulate,
    sm_targets,
)


class StartAll(SharingPolicy):
    name = "start-all"

    def __init__(self, stream_priorities=True):
        self.stream_priorities = stream_priorities

    def decide(self, view):
        return KernelDecision(start=view.waiting)


def one_request(*apps, duration_s=0.001, policy=None, record=True):
    """Each app's single request starts at t=0 (closed loop, window closes at once)."""
    return simulate(
        TOY, list(apps), policy or StartAll(), duration_s=duration_s, record=record,
        drain_factor=1e6,
    )  # fmt: skip


def test_a_kernel_alone_takes_its_own_time():
    result = one_request(AppWorkload("a", 0, (kernel(sms=100, time_s=2.0, bandwidth=0.9),)))
    assert result.app("a").latencies_s == pytest.approx((2.0,))


def test_two_memory_bound_kernels_wanting_70_percent_each_both_slow_by_1_4():
    # Bandwidth 1.4x oversubscribed, split 50/50: each runs at 0.5/0.7 of its speed alone.
    a = AppWorkload("a", 0, (kernel(sms=50, time_s=1.0, bandwidth=0.7),))
    b = AppWorkload("b", 0, (kernel(sms=50, time_s=1.0, bandwidth=0.7),))
    result = one_request(a, b)
    assert result.app("a").latencies_s[0] == pytest.approx(1.4)
    assert result.app("b").latencies_s[0] == pytest.approx(1.4)


def test_compute_and_memory_kernels_on_disjoint_sms_do_not_slow_each_other():
    a = AppWorkload("a", 1, (kernel(sms=60, time_s=1.0, bandwidth=0.1, bound="compute"),))
    b = AppWorkload("b", 0, (kernel(sms=40, time_s=2.0, bandwidth=0.8, bound="memory"),))
    result = one_request(a, b)
    assert result.app("a").latencies_s[0] == pytest.approx(1.0)
    assert result.app("b").latencies_s[0] == pytest.approx(2.0)


def test_unequal_bandwidth_demands_are_split_max_min_fairly():
    # 0.2 + 0.9 > 1: the small demand is met, the large one gets 0.8 -> speed 0.8/0.9.
    a = AppWorkload("a", 0, (kernel(sms=50, time_s=1.0, bandwidth=0.2),))
    b = AppWorkload("b", 0, (kernel(sms=50, time_s=1.0, bandwidth=0.9),))
    result = one_request(a, b)
    assert result.app("a").latencies_s[0] == pytest.approx(1.0)
    # After a ends at t=1, b has done 0.8/0.9 of its work and finishes the rest alone.
    assert result.app("b").latencies_s[0] == pytest.approx(1.0 + (1 - 0.8 / 0.9))


def test_equal_priority_kernels_started_together_split_the_sms():
    # Both want all 100 SMs: 50 each, so each runs at half speed and ends at t=2.
    a = AppWorkload("a", 0, (kernel(sms=100, time_s=1.0),))
    b = AppWorkload("b", 0, (kernel(sms=100, time_s=1.0),))
    result = one_request(a, b, policy=StartAll(stream_priorities=False))
    assert result.app("a").latencies_s[0] == pytest.approx(2.0)
    assert result.app("b").latencies_s[0] == pytest.approx(2.0)


class DecidesOnly(SharingPolicy):
    """Implements only the abstract ``decide``: both hooks keep their defaults."""

    name = "decides-only"

    def decide(self, view):
        return KernelDecision(start=view.waiting)


class NotASharingPolicy:
    """Has a ``decide`` but does not subclass SharingPolicy."""

    name = "not-a-sharing-policy"

    def decide(self, view):
        return KernelDecision(start=view.waiting)


def test_a_policy_that_only_decides_runs_on_the_hooks_defaults():
    policy = DecidesOnly()
    assert policy.setup(()) is None and policy.stream_priorities is True
    # Streams of each app's priority (the default): the important kernel takes all 100 SMs and
    # ends at 1; the other gets them then and ends at 2 (on equal streams both would end at 2).
    a = AppWorkload("a", 1, (kernel(sms=100, time_s=1.0),))
    b = AppWorkload("b", 0, (kernel(sms=100, time_s=1.0),))
    result = one_request(a, b, policy=policy)
    assert result.app("a").latencies_s[0] == pytest.approx(1.0)
    assert result.app("b").latencies_s[0] == pytest.approx(2.0)


def test_the_simulator_refuses_a_policy_that_is_not_a_sharing_policy():
    app = AppWorkload("a", 0, (kernel(),))
    with pytest.raises(TypeError, match=r"must subclass .*SharingPolicy, got NotASharingPolicy"):
        one_request(app, policy=NotASharingPolicy())


def test_a_sharing_policy_must_implement_decide():
    class NoDecide(SharingPolicy):
        name = "no-decide"

    with pytest.raises(TypeError, match=r"abstract method '?decide"):
        NoDecide()


class HoldUntil(StartAll):
    """Starts the app ``late`` only from ``at`` on, everything else at once."""

    def __init__(self, late, at, stream_priorities=True):
        super().__init__(stream_priorities)
        self.late, self.at = late, at

    def decide(self, view):
        ready = view.now_s >= self.at
        start = tuple(w for w in view.waiting if w.app != self.late or ready)
        return KernelDecision(start=start, wake_at_s=None if ready else self.at)


def test_a_later_equal_priority_kernel_gets_sms_only_when_a_wave_ends():
    # a: all 100 SMs, 4 waves of 0.25 s. b (same level) arrives at 0.1: targets 50/50, and a
    # hands 50 SMs over at its wave boundary t=0.25. From then both run at half speed.
    a = AppWorkload("a", 0, (kernel(sms=100, time_s=1.0, blocks=3200),))
    b = AppWorkload("b", 0, (kernel(sms=100, time_s=1.0, blocks=3200),))
    result = one_request(a, b, policy=HoldUntil("b", 0.1, stream_priorities=False))
    # a: 0.25 done alone, 0.75 left at half speed -> ends at 1.75. b: nothing until 0.25, then
    # 1.5 s at half speed (0.75 done), then 0.25 alone -> ends at 2.0 (its request arrived at 0).
    assert result.app("a").latencies_s[0] == pytest.approx(1.75)
    assert result.app("b").latencies_s[0] == pytest.approx(2.0)


def test_a_higher_priority_kernel_waits_one_wave_of_the_kernel_holding_its_sms():
    # lp holds all SMs with 4 waves of 0.25 s; hp arrives at t=0.1 and gets them at t=0.35.
    lp = AppWorkload("lp", 0, (kernel(sms=100, time_s=1.0, blocks=3200),))
    hp = AppWorkload("hp", 1, (kernel("h", sms=100, time_s=0.5),))
    result = one_request(lp, hp, policy=HoldUntil("hp", 0.1))
    spans = {s.track.split(" ")[0]: s for s in result.spans}
    assert spans["hp"].start_s == pytest.approx(0.1)
    assert spans["hp"].start_s + spans["hp"].duration_s == pytest.approx(0.25 + 0.5)
    # lp: 0.25 of its work by the hand-over, none during hp's 0.5 s, then 0.75 s more.
    assert spans["lp"].start_s + spans["lp"].duration_s == pytest.approx(0.75 + 0.75)


def test_work_is_conserved_and_capacity_never_exceeded():
    apps = [
        AppWorkload("hp", 2, (kernel(sms=40, time_s=2e-3, bandwidth=0.6),
                              kernel(sms=100, time_s=1e-3, bandwidth=0.2)), poisson_rps=200.0),
        AppWorkload("mid", 1, (kernel(sms=80, time_s=3e-3, bandwidth=0.5, blocks=2000),),
                    poisson_rps=100.0),
        AppWorkload("lp", 0, (kernel(sms=100, time_s=5e-3, bandwidth=0.7, blocks=4000),
                              kernel(sms=30, time_s=1e-3, bandwidth=0.1))),
    ]  # fmt: skip
    for name in policy_names():
        result = simulate(TOY, apps, create_policy(name), duration_s=0.2, seed=3, record=True)
        done: dict[tuple, float] = {}
        for segment in result.segments:
            dt = segment.end_s - segment.start_s
            assert sum(s.sms for s in segment.shares) <= TOY.sm_count + 1e-9, name
            assert sum(s.bandwidth for s in segment.shares) <= 1.0 + 1e-9, name
            for share in segment.shares:
                assert 0.0 <= share.rate <= 1.0 + 1e-12
                key = (share.app, share.request, share.index)
                done[key] = done.get(key, 0.0) + share.rate * dt
        finished = {
            (s.track.split(" ")[0], s.args["request"], s.args["index"]): s.args["alone_s"]
            for s in result.spans
        }
        assert finished, name
        for key, alone_s in finished.items():
            assert done[key] == pytest.approx(alone_s, rel=1e-6), (name, key)


def test_the_same_inputs_and_seed_give_the_same_run():
    apps = [
        AppWorkload("hp", 1, (kernel(sms=40, time_s=1e-3, bandwidth=0.6),), poisson_rps=300.0),
        AppWorkload("lp", 0, (kernel(sms=100, time_s=2e-3, bandwidth=0.7, blocks=4000),)),
    ]
    runs = [
        simulate(TOY, apps, create_policy("fggr"), duration_s=0.1, seed=7, record=True)
        for _ in range(2)
    ]
    assert runs[0].spans == runs[1].spans
    assert runs[0].apps == runs[1].apps
    other = simulate(TOY, apps, create_policy("fggr"), duration_s=0.1, seed=8)
    assert other.apps != runs[0].apps


def test_max_min_fair_meets_small_demands_and_splits_the_rest():
    assert max_min_fair([0.2, 0.9, 0.9], 1.0) == pytest.approx([0.2, 0.4, 0.4])
    assert max_min_fair([0.3, 0.3], 1.0) == pytest.approx([0.3, 0.3])


@given(
    st.lists(st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.25, 0.5, 1.0]), max_size=8),
    st.lists(st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=8),
    st.floats(0.1, 2.0),
)
def test_fair_share_grants_a_new_demand_exactly_what_max_min_fair_would(others, new, capacity):
    split = FairShare(others, capacity)
    for demand in new:  # bit for bit: the admission rule's decisions must not move
        assert split.grant(demand) == max_min_fair([demand, *others], capacity)[0]


def test_fair_share_by_hand():
    split = FairShare([0.2, 0.9], 1.0)
    assert split.grant(0.9) == pytest.approx(0.4)  # 0.2 met, the rest halved
    assert split.grant(0.1) == pytest.approx(0.1)  # below the equal share: met in full
    assert FairShare([], 1.0).grant(3.0) == 1.0


def test_sm_targets_serve_the_important_level_first_then_share_proportionally():
    assert sm_targets([60, 60, 40], [2, 1, 1], 100) == pytest.approx([60, 24, 16])


class Rogue(SharingPolicy):
    name = "rogue"

    def decide(self, view):
        return KernelDecision(start=view.waiting + view.waiting)


def test_a_policy_starting_a_kernel_twice_is_an_error():
    app = AppWorkload("a", 0, (kernel(),))
    with pytest.raises(SimulationError, match="not waiting"):
        simulate(TOY, [app], Rogue(), duration_s=0.01)


@pytest.mark.parametrize(
    "make",
    [
        lambda: AppWorkload("a", -1, (kernel(),)),
        lambda: AppWorkload("a", 0, ()),
        lambda: AppWorkload("a", 0, (kernel(),), poisson_rps=0.0),
        lambda: simulate(TOY, [AppWorkload("a", 0, (kernel(),))] * 2, StartAll(), duration_s=1),
        lambda: simulate(TOY, [AppWorkload("a", 0, (kernel(),))], StartAll(), duration_s=-1),
    ],
    ids=["negative-priority", "no-kernels", "zero-rate", "duplicate-names", "bad-duration"],
)
def test_bad_workloads_are_refused(make):
    with pytest.raises(InputError):
        make()


def test_utilization_counts_sms_held_over_the_window():
    # One kernel on 50 of 100 SMs for the whole 1 s window (closed loop, 0.5 s kernels).
    app = AppWorkload("a", 0, (kernel(sms=50, time_s=0.5),))
    result = simulate(TOY, [app], StartAll(), duration_s=1.0)
    assert result.gpu_utilization == pytest.approx(0.5)
    assert result.app("a").work_s == pytest.approx(1.0)
    assert not math.isnan(result.app("a").latency_quantile(0.99))


def test_expected_launches_by_hand():
    # Open loop: 100 requests/s x 2 s x 3 kernels; closed loop: 2 s / 0.5 s + 1 requests x 2.
    open_loop = AppWorkload("o", 1, (kernel(time_s=0.1),) * 3, poisson_rps=100.0)
    closed = AppWorkload("c", 0, (kernel(time_s=0.25),) * 2)
    assert expected_launches([open_loop, closed], 2.0) == {"o": 600.0, "c": 10.0}


def test_a_mix_over_the_launch_bound_is_refused_before_it_runs():
    # A closed loop of one-microsecond kernels: a million requests a second. Refused at
    # once, before the policy is set up or an arrival drawn, naming the app and the count.
    tiny = AppWorkload("tiny", 0, (kernel(time_s=1e-6),))
    seconds = MAX_LAUNCHES * 1e-6
    simulate(TOY, [tiny], create_policy("naive"), duration_s=seconds / 100)
    with pytest.raises(InputError, match=r"about 2,00\d,\d{3} kernels.*'tiny'") as error:
        simulate(TOY, [tiny], create_policy("naive"), duration_s=seconds * 1.001)
    assert error.value.field == "duration_s"
    flood = AppWorkload("flood", 0, (kernel(),), poisson_rps=1e15)
    with pytest.raises(InputError, match="lower poisson_rps"):
        simulate(TOY, [flood], create_policy("naive"), duration_s=1.0)


@pytest.mark.slow
def test_a_long_run_reports_its_progress():
    app = AppWorkload("a", 0, (kernel(time_s=1e-3),))
    seen: list[float] = []
    simulate(TOY, [app], create_policy("naive"), duration_s=20.0, progress=seen.append)
    assert len(seen) >= 2  # 20,000 requests: several thousand engine steps each report
    assert seen == sorted(seen) and seen[0] > 0 and seen[-1] <= 1.0
    named: list[tuple[str, float]] = []
    alone_results(TOY, [app], duration_s=20.0, progress=lambda n, d: named.append((n, d)))
    assert [name for name, _ in named] == ["a"] * len(seen)


class Watcher(SharingPolicy):
    """Starts every waiting kernel and keeps what it was told: at setup, and in each launch."""

    name = "watcher"

    def setup(self, apps):
        self.told = {a.name: [k.time_s for k in a.kernels] for a in apps}
        self.seen = []

    def decide(self, view):
        self.seen += [w.kernel.time_s for w in view.waiting]
        return KernelDecision(start=view.waiting)


def test_a_policy_told_estimates_sees_only_them_while_the_true_kernels_run():
    # One closed loop of a 1 s kernel on every SM that the policy is told takes 0.5 s: in a
    # 10 s window ten requests end (at 1, 2, ..., 10 s; the tenth at the window's close), not
    # twenty, and the policy never sees the true time.
    truth = AppWorkload("a", 0, (kernel(sms=100, time_s=1.0),))
    estimate = AppWorkload("a", 0, (kernel(sms=100, time_s=0.5),))
    watcher = Watcher()
    run = simulate(TOY, [truth], watcher, duration_s=10.0, told=[estimate])
    assert run.app("a").latencies_s[:10] == pytest.approx([1.0] * 10)
    assert run.app("a").work_s == pytest.approx(10.0)
    assert watcher.told == {"a": [0.5]} and set(watcher.seen) == {0.5}
    untold = simulate(TOY, [truth], Watcher(), duration_s=10.0)
    assert untold.app("a").latencies_s == run.app("a").latencies_s


@pytest.mark.parametrize(
    "told",
    [
        [AppWorkload("b", 0, (kernel(time_s=0.5),))],
        [AppWorkload("a", 1, (kernel(time_s=0.5),))],
        [AppWorkload("a", 0, (kernel(time_s=0.5),), poisson_rps=5.0)],
        [AppWorkload("a", 0, (kernel(time_s=0.5), kernel(time_s=0.5)))],
        [],
    ],
    ids=["other-name", "other-priority", "other-rate", "other-kernel-count", "no-apps"],
)
def test_what_a_policy_is_told_must_be_the_same_apps(told):
    truth = AppWorkload("a", 0, (kernel(time_s=1.0),))
    with pytest.raises(InputError, match="told"):
        simulate(TOY, [truth], StartAll(), duration_s=1.0, told=told)
