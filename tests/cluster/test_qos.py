"""Tests for qosched.cluster.policies.qos: hand-computed runs of the qos policy.

Model ``m`` runs ``g`` iterations/s on ``g`` GPUs (measured at 1, 2, 4, 8). Its speed table is
exactly linear, so the predictor's prior ``T(n) = compute/n + comm*(n - 1) + overhead`` fits it
exactly (compute 1 s, no communication, no overhead): predicted speeds equal the table.

The safety margin is the lower edge of the prediction band. Before a job has any progress the band
is ``rate * exp(±z * 0.3)`` with ``z`` the normal quantile of the default confidence 0.5
(z = 0.6745), so the pessimistic speed is the table's divided by ``exp(0.2023) = 1.2243``:
0.8168, 1.6336, 3.2672 iterations/s on 1, 2, 4 GPUs. Once a job has run, the band at its count
narrows (its speed is then known better), so a job guaranteed on no data stays guaranteed.
Scenarios are chosen so that the outcome does not hinge on the exact width of the band.

Restart pauses are 0 unless a test is about them; the cluster is one 4-GPU node unless stated.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random

import pytest
from cluster_helpers import job

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.planning import Demand, Ladder, Plan, kept_delivers, plan_demands
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.policies import qos as qos_module
from qosched.cluster.policies.qos import (
    QualityOfService,
    Urgency,
    _FreshPrefix,
    _Hand,
    allowed_counts,
)
from qosched.cluster.predict import OnlinePredictor
from qosched.cluster.simulator import JobOutcome, SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}}})
ONE_NODE = ClusterSpec.from_flags(1, 4)


def run(
    policy: str | Policy,
    jobs: list[JobSpec],
    *,
    pause: float = 0.0,
) -> dict[str, JobOutcome]:
    if isinstance(policy, str):
        policy = create_policy(policy)
    result = simulate(
        ONE_NODE, TABLES, policy, jobs, SimConfig(restart_pause_s=pause, cross_node_factor=1.0)
    )
    return {outcome.job_id: outcome for outcome in result.outcomes}


def state(spec: JobSpec) -> JobState:
    return JobState(spec, TABLES.curve(spec.model, spec.batch_size))


# --- options and counts -------------------------------------------------------------------------


@pytest.mark.parametrize("tick_s", [0.0, -600.0], ids=["zero", "negative"])
def test_qos_rejects_a_tick_that_is_not_positive(tick_s):
    with pytest.raises(ValueError, match="tick_s"):
        create_policy("qos", tick_s=tick_s)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("refresh_s", -1.0),
        ("refresh_s", math.inf),
        ("min_spare_gain", -0.1),
        ("min_spare_gain", 1.5),
    ],
)
def test_qos_rejects_options_out_of_range(option, value):
    with pytest.raises(ValueError, match=option):
        create_policy("qos", **{option: value})


def test_qos_rejects_an_unknown_spare_order():
    with pytest.raises(ValueError, match="unknown spare order 'fastest'; use best_effort_first, "):
        create_policy("qos", spare_order="fastest")


@pytest.mark.parametrize(
    ("max_workers", "workers_per_node", "counts"),
    [
        # 1, 2, 4, 8 within a node, then every whole number of 8-GPU nodes up to 64.
        (64, 8, (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)),
        # A job that tops out at 6 GPUs: the powers of two below it, never 6 itself.
        (6, 8, (1, 2, 4)),
        # 4-GPU nodes: 8 is two whole nodes.
        (8, 4, (1, 2, 4, 8)),
        (1, 8, (1,)),
    ],
    ids=["64-on-8-gpu-nodes", "6-on-8-gpu-nodes", "8-on-4-gpu-nodes", "single-gpu-job"],
)
def test_allowed_counts_are_powers_of_two_within_a_node_then_whole_nodes(
    max_workers, workers_per_node, counts
):
    assert allowed_counts(max_workers, workers_per_node) == counts


# --- admission ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "guaranteed"),
    [
        # 100 iterations; all 4 GPUs do 4/s: 25 s at best, 5 s past a deadline at 20.
        (job("a", 0, 100, deadline=20), False),
        # Only 1 s short at full speed.
        (job("a", 0, 100, deadline=24), False),
        # Submitted at 10 with 20 s to go: 80 iterations at best, not 100.
        (job("a", 10, 100, deadline=30), False),
        # 8 GPUs (a measured count) would do it in 125 s, but the cluster has only 4: 250 s.
        (job("a", 0, 1000, deadline=200), False),
        # Contrast: 100 iterations by 100 needs 2 GPUs even at the pessimistic 1.63/s (61 s).
        (job("a", 0, 100, deadline=100), True),
    ],
    ids=[
        "needs-5-workers-worth",
        "one-second-short",
        "late-submission",
        "needs-more-workers-than-the-cluster",
        "reachable-with-margin",
    ],
)
def test_qos_guarantees_a_lone_job_only_if_every_worker_can_meet_its_deadline(spec, guaranteed):
    policy = QualityOfService()
    view = ClusterView(spec.submit_s, ONE_NODE, ())
    policy.admit(state(spec), view)
    assert policy._jobs["a"].guaranteed is guaranteed


def test_qos_drops_a_guarantee_it_can_no_longer_keep_and_does_not_renew_it():
    # At 0, "a" (100 iterations by 100) fits on 2 GPUs at the pessimistic 1.63/s. At 90, with
    # nothing done, even 4 GPUs (3.27/s) do 33 of 100 in the 10 s left: the guarantee is
    # dropped, and retrying it must not restore it because the plan in force failed it too.
    policy = QualityOfService()
    a = state(job("a", 0, 100, deadline=100))
    assert policy.admit(a, ClusterView(0.0, ONE_NODE, ()))
    assert policy.is_guaranteed("a")
    policy.allocate(ClusterView(90.0, ONE_NODE, (a,)))
    assert not policy.is_guaranteed("a")


@pytest.mark.parametrize(
    ("decline_to_best_effort", "admitted"), [(True, True), (False, False)], ids=["default", "off"]
)
def test_qos_admits_an_unreachable_job_only_when_declining_to_best_effort(
    decline_to_best_effort, admitted
):
    policy = QualityOfService(decline_to_best_effort=decline_to_best_effort)
    spec = job("a", 0, 100, deadline=20)
    assert policy.admit(state(spec), ClusterView(0.0, ONE_NODE, ())) is admitted


def test_qos_declined_unreachable_job_never_runs():
    policy = create_policy("qos", decline_to_best_effort=False)
    outcome = run(policy, [job("a", 0, 100, deadline=20)])["a"]
    assert (outcome.declined, outcome.start_s, outcome.finish_s) == (True, None, None)


def test_qos_runs_an_unreachable_job_best_effort_on_every_worker_by_default():
    # Not guaranteed, but not turned away: alone, it gets all 4 GPUs and ends at 100 / 4 = 25,
    # after its deadline at 20.
    outcome = run("qos", [job("a", 0, 100, deadline=20)])["a"]
    assert (outcome.declined, outcome.start_s, outcome.finish_s, outcome.met_deadline) == (
        False,
        0.0,
        25.0,
        False,
    )


# --- guarantees ---------------------------------------------------------------------------------

GUARANTEE_SCENARIOS = {
    # "a" (80 by 30) is guaranteed on 4 GPUs (pessimistic 80 / 3.27 = 24.5 s) and runs 0..20.
    # At 5, "b" (48 by 17) would need all 4 GPUs for 5..17, which would push "a" to 17 + 60 / 4
    # = 32 (EDF would); qos leaves "a" its GPUs. "b" runs best effort after it: 20..32.
    "newcomer-cannot-fit": (
        [job("a", 0, 80, deadline=30), job("b", 5, 48, deadline=17)],
        {"a": (True, 20.0), "b": (False, 32.0)},
    ),
    # "a" (40 by 40) holds all 4 GPUs from 0 and has 20 left at 5. "b" (20 by 15) fits only if
    # "a" makes way, which it can afford: "b" runs 5..10 on 4 GPUs, and "a" resumes after it
    # with 20 / 4 = 5 s to go, well before 40.
    "newcomer-fits-by-replanning": (
        [job("a", 0, 40, deadline=40), job("b", 5, 20, deadline=15)],
        {"a": (True, 15.0), "b": (True, 10.0)},
    ),
}


@pytest.mark.parametrize("name", GUARANTEE_SCENARIOS)
def test_qos_guaranteed_job_meets_its_deadline_despite_a_later_arrival(name):
    jobs, _ = GUARANTEE_SCENARIOS[name]
    assert run("qos", jobs)["a"].met_deadline


@pytest.mark.parametrize("name", GUARANTEE_SCENARIOS)
def test_qos_guaranteed_job_and_later_arrival_finish_when_computed(name):
    jobs, expected = GUARANTEE_SCENARIOS[name]
    outcomes = run("qos", jobs)
    assert {k: (o.met_deadline, o.finish_s) for k, o in outcomes.items()} == {
        k: (met, pytest.approx(finish)) for k, (met, finish) in expected.items()
    }


class _RecordsGuarantees(QualityOfService):
    def __init__(self) -> None:
        super().__init__()
        self.ever: set[str] = set()

    def _try_to_guarantee(self, job, guaranteed, view, *, in_force=False):
        given = super()._try_to_guarantee(job, guaranteed, view, in_force=in_force)
        if given:
            self.ever.add(job.job_id)
        return given


def test_jobs_no_plan_can_guarantee_take_no_retry_from_one_that_fits():
    # "big" (400 by 110) is guaranteed at 0 on 4 GPUs and ends at 100. h1-h3 (1000 by 120) can
    # never make it: 1000 / 4 = 250 s. "c" (150 by 145) arrives at 3 and fits no plan while
    # "big" holds the node (the pessimistic plan ends "big" at 108, then "c" needs 40.5 s). At
    # 100 "c" fits alone on 4 GPUs (37.5 s, 40.5 pessimistic) and is guaranteed; the three
    # hopeless jobs, with earlier deadlines, must not use up the retries of that decision.
    jobs = [
        job("big", 0, 400, deadline=110),
        *(job(f"h{i}", 1, 1000, deadline=120) for i in range(1, 4)),
        job("c", 3, 150, deadline=145),
    ]
    policy = _RecordsGuarantees()
    outcomes = run(policy, jobs)
    assert policy.ever == {"big", "c"}
    assert outcomes["c"].met_deadline


@pytest.mark.parametrize(("deadline", "guaranteed"), [(295.0, False), (315.0, True)])
def test_a_guarantee_is_planned_without_the_pauses_of_its_later_re_sizes(deadline, guaranteed):
    # "a" arrives first and is guaranteed 2 of the node's 4 GPUs for 200 s (its pessimistic
    # speed, the band's lower edge, for exactly 200 s: no count finishes sooner with fewer). "b"
    # arrives at once with 800 s of work at that speed per GPU: 2 GPUs until "a" ends, then 4,
    # done at 300 with the change at 200 unpaid (330 with its 30 s pause, which only a check of
    # the kept reservation at a later instant charges). By 295 it is no guarantee; by 315 it is.
    # A band this narrow leaves the expected speed where the pessimistic one is, so a new job's
    # thin first guarantee (on its expected speed) cannot meet it either.
    confidence = 1e-6
    low = (
        OnlinePredictor.from_curve(TABLES.curve("m", 64), confidence=confidence).predict(1).rate_low
    )
    a = state(job("a", 0, int(2 * low * 200.0), deadline=210.0))
    b = state(job("b", 0, int(low * 800.0), deadline=deadline))
    policy = QualityOfService(confidence=confidence)
    view = ClusterView(0.0, ONE_NODE, (a,), restart_pause_s=30.0)
    assert policy.admit(a, view) and policy.is_guaranteed("a")
    policy.admit(b, ClusterView(0.0, ONE_NODE, (a, b), restart_pause_s=30.0))
    assert policy.is_guaranteed("b") is guaranteed


@pytest.mark.parametrize(("halfway", "guaranteed"), [(True, True), (False, False)])
def test_a_job_with_no_progress_yet_is_guaranteed_on_its_expected_speed(halfway, guaranteed):
    # Alone on the node, on 4 GPUs at the table's 4 iterations/s, "c" is expected to take 100 s,
    # and 100 * 4 / (its pessimistic rate on 4) by the prior's band (about 108 s). With its
    # deadline half way between the two it is guaranteed on the expected speed; with it at
    # 95 s, on neither, and its pessimistic speed stays in force.
    rate = OnlinePredictor.from_curve(TABLES.curve("m", 64), confidence=0.2).predict(4)
    expected_s, pessimistic_s = 100.0, 100.0 * rate.rate / rate.rate_low
    assert rate.rate == pytest.approx(4.0) and pessimistic_s > expected_s + 5.0
    deadline = (expected_s + pessimistic_s) / 2 if halfway else 95.0
    c = state(job("c", 0, 400, deadline=deadline))
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,), restart_pause_s=30.0))
    assert policy.is_guaranteed("c") is guaranteed
    expected, pessimistic = policy._jobs["c"].ladders
    assert (pessimistic.rates == expected.rates) is guaranteed


@pytest.mark.parametrize(
    ("deadline", "spread", "guaranteed"),
    [(115.0, None, True), (115.0, 0.1, False), (121.0, 0.1, True), (115.0, 0.01, True)],
)
def test_speeds_the_job_measured_itself_are_promised_on_their_low_quantile(
    deadline, spread, guaranteed
):
    # On 4 GPUs at 4 iterations/s, 400 iterations take 100 s. Speeds the job measured itself
    # with a spread of 0.1 (log-sd) are promised on their 5% quantile, 4 * exp(-1.645 * 0.1) =
    # 3.39 it/s: 118 s, so 115 s is refused and 121 s guaranteed, whatever the policy's own
    # band; with a spread of 0.01, 101.7 s. A table's speeds (no spread) get the thin
    # guarantee on the expected speed (above), so 115 s is guaranteed.
    curve = dataclasses.replace(TABLES.curve("m", 64), spread=spread)
    c = JobState(job("c", 0, 400, deadline=deadline), curve)
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,), restart_pause_s=30.0))
    assert policy.is_guaranteed("c") is guaranteed
    if spread is not None:
        pessimistic = policy._jobs["c"].ladders[1]
        assert pessimistic.rate(4) == pytest.approx(4.0 * math.exp(-1.6449 * spread), rel=1e-3)


@pytest.mark.parametrize(
    ("spread_at_4", "guaranteed"), [(0.1, False), (0.01, True)], ids=["seconds", "minutes"]
)
def test_a_promise_rests_on_the_spread_of_the_count_it_is_made_on(spread_at_4, guaranteed):
    # As above, 400 iterations on 4 GPUs at 4 it/s with a deadline of 115 s, the job's spread
    # 0.01 but its own for the count of 4 ``spread_at_4``: a count measured for seconds
    # (0.1: 118 s at its 5% quantile) is refused, one measured for minutes (0.01: 101.7 s)
    # guaranteed. The other counts keep 0.3, which no promise here rests on.
    table = TABLES.curve("m", 64)
    spreads = tuple(
        0.0 if g == 0 else spread_at_4 if g == 4 else 0.3 for g in range(len(table.speeds))
    )
    curve = dataclasses.replace(table, spread=0.01, spreads=spreads)
    c = JobState(job("c", 0, 400, deadline=115.0), curve)
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,), restart_pause_s=30.0))
    assert policy.is_guaranteed("c") is guaranteed
    pessimistic = policy._jobs["c"].ladders[1]
    assert pessimistic.rate(4) == pytest.approx(4.0 * math.exp(-1.6449 * spread_at_4), rel=1e-3)
    assert pessimistic.rate(2) == pytest.approx(table.rate(2) * math.exp(-1.6449 * 0.3), rel=1e-3)


def test_a_thin_guarantee_ends_with_the_first_refresh_after_the_job_runs():
    # Guaranteed at 0 on its expected speed (above), "c" runs on 4 GPUs at the table's speed.
    # After 60 s of it (`_observe_jobs` refreshes a minute in), its band comes from its own
    # progress: the pessimistic speed is under the expected one again, and no thinner.
    rate = OnlinePredictor.from_curve(TABLES.curve("m", 64), confidence=0.2).predict(4)
    deadline = 50.0 + 50.0 * rate.rate / rate.rate_low  # half way, as above
    c = state(job("c", 0, 400, deadline=deadline))
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,), restart_pause_s=30.0))
    assert policy.is_guaranteed("c")
    for now in (0.0, 30.0, 61.0):
        c.workers, c.started_s, c.active_s, c.iterations_done = 4, 0.0, now, 4.0 * now
        policy.allocate(ClusterView(now, ONE_NODE, (c,), restart_pause_s=30.0))
    expected, pessimistic = policy._jobs["c"].ladders
    assert 0.0 < pessimistic.rate(4) < expected.rate(4)
    assert expected.rate(4) == pytest.approx(4.0, rel=0.05)


class _ChecksGuarantees(QualityOfService):
    """`qos` that checks, after each decision renews its guarantees, what every guarantee in
    force must hold, and that thin guarantees go only to jobs with no progress."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = collections.Counter()

    def _guarantee_on_ladders(self, job, guaranteed, view, in_force):
        given = super()._guarantee_on_ladders(job, guaranteed, view, in_force)
        expected, pessimistic = self._jobs[job.job_id].ladders
        if given and pessimistic is expected:
            assert self._jobs[job.job_id].predictor.observed_seconds == 0
            self.seen["thin"] += 1
        return given

    def _renew_guarantees(self, view):
        before, adopted_at = self._kept, self._adopted_at
        guaranteed, plan = super()._renew_guarantees(view)
        for held in guaranteed:
            reservation = plan.reservations[held.job_id]
            pessimistic = self._jobs[held.job_id].ladders[1]
            # Met on the ladder in force, with the pause of a change now, if not the later ones.
            assert kept_delivers(held, pessimistic, reservation, view)
            if adopted_at < view.now and before.get(held.job_id) is reservation:
                # Kept from an earlier instant: only while it delivers with them paid.
                assert kept_delivers(held, pessimistic, reservation, view, pay_kept_changes=True)
                self.seen["kept"] += 1
            self.seen["guaranteed"] += 1
        return guaranteed, plan


@pytest.mark.parametrize(("load", "seed"), [(1.5, 41), (3.0, 42), (6.0, 43)])
def test_every_guarantee_in_force_delivers_and_kept_ones_pay_their_re_sizes(load, seed):
    tables = ThroughputModel.bundled("A100")
    jobs = generate_trace(
        GeneratorConfig(jobs=80, load=load, cluster_workers=32, seed=seed), tables
    )
    config = SimConfig(speed_sigma=0.3, scaling_sigma=0.1, noise=0.05, seed=seed)
    policy = _ChecksGuarantees()
    simulate(ClusterSpec.from_flags(4, 8), tables, policy, jobs, config)
    # the checks saw guarantees of each kind, so passing means something
    assert policy.seen["thin"] and policy.seen["kept"] > 100 and policy.seen["guaranteed"] > 100


# --- autoscaling --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deadline",
    [
        # Guaranteed: 4 GPUs meet it even at the pessimistic 3.27/s (12.2 s).
        20,
        # Not guaranteed (12.2 s pessimistic), but 4 GPUs at the expected 4/s take 10 s.
        12,
    ],
    ids=["guaranteed", "best-effort"],
)
@pytest.mark.parametrize("pause", [0.0, 30.0], ids=["no-pause", "30s-pause"])
def test_qos_sizes_a_job_to_meet_the_deadline_its_request_would_miss(deadline, pause):
    # 40 iterations, 1 GPU requested: fifo runs it on 1 GPU for 40 s; qos gives it 4 from the
    # start (a first start costs no pause): 10 s.
    jobs = [job("a", 0, 40, workers=1, deadline=deadline)]
    fifo, qos = run("fifo", jobs, pause=pause)["a"], run("qos", jobs, pause=pause)["a"]
    assert (fifo.finish_s, fifo.met_deadline, qos.finish_s, qos.met_deadline) == (
        40.0,
        False,
        10.0,
        True,
    )


# --- hysteresis ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        job("a", 0, 40_000),
        # Planned on 1 GPU (pessimistic 0.82/s: 49 000 s), given the spare 3, keeps them.
        job("a", 0, 40_000, deadline=100_000),
        # Planned on 4 GPUs (pessimistic 3.27/s: 12 245 s).
        job("a", 0, 40_000, deadline=13_000),
    ],
    ids=["best-effort", "loose-deadline", "tight-deadline"],
)
def test_qos_never_resizes_a_lone_job_on_an_empty_cluster(spec):
    # 10 000 s on 4 GPUs: 16 ticks of 600 s re-plan with fresh progress, and none re-sizes it.
    outcome = run("qos", [spec], pause=30.0)["a"]
    assert (outcome.finish_s, outcome.reallocations) == (10_000.0, 0)


def test_qos_resizes_a_job_exactly_once_when_its_neighbour_leaves():
    # Best effort, both at 0: each gets 1 GPU, the spare 2 go one step each, "b" (more to save)
    # first: 2 + 2. "a" (4000) ends at 2000; "b" (8000) has 4000 left, grows to 4 (saves 1000 s
    # for a 30 s pause) and ends at 2000 + 30 + 1000. The ticks at 600, 1200, 1800 change nothing.
    outcomes = run("qos", [job("a", 0, 4000), job("b", 0, 8000)], pause=30.0)
    assert {k: (o.finish_s, o.reallocations) for k, o in outcomes.items()} == {
        "a": (2000.0, 0),
        "b": (3030.0, 1),
    }


# --- best effort yields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pause", "e_finish"),
    # "e" does 40 by 10, waits 10..20, and needs 3960 / 4 = 990 s after its restart pause.
    [(0.0, 1010.0), (30.0, 1040.0)],
    ids=["no-pause", "30s-pause"],
)
def test_qos_preempts_best_effort_for_a_deadline_job_that_needs_every_worker(pause, e_finish):
    # "e" holds all 4 GPUs. At 10, "d" (40 by 30) needs all 4 (2 GPUs at 1.63/s do 32.7 by 30)
    # and takes them: 10..20 (its first start is free).
    outcomes = run(
        "qos", [job("e", 0, 4000, workers=4), job("d", 10, 40, deadline=30)], pause=pause
    )
    assert {k: (o.start_s, o.finish_s, o.reallocations) for k, o in outcomes.items()} == {
        "e": (0.0, e_finish, 2),
        "d": (10.0, 20.0, 0),
    }


def test_qos_does_not_preempt_a_running_job_for_a_deadline_it_cannot_make():
    # "e" holds all 4 GPUs. At 10, "x" asks for 1000 iterations by 210: 250 s on the cluster's
    # 4 GPUs, so it cannot make it (8 GPUs would, in 125 s, but the cluster has only 4). It is
    # not guaranteed and counts as best effort, behind the running "e", which keeps its GPUs
    # and ends at 4000 / 4 = 1000; "x" then runs 1000..1250.
    outcomes = run("qos", [job("e", 0, 4000, workers=4), job("x", 10, 1000, deadline=210)])
    assert {k: (o.start_s, o.finish_s, o.reallocations) for k, o in outcomes.items()} == {
        "e": (0.0, 1000.0, 0),
        "x": (1000.0, 1250.0, 0),
    }


def test_qos_shares_an_old_best_effort_jobs_workers_with_a_new_one():
    # "a" has all 4 GPUs when "b" (200 iterations) arrives at 100. Both drop to their smallest
    # count and share the spare by speed-up per worker: 1 -> 2 doubles either (gain 1 per
    # worker), 2 -> 4 gains 0.5 per worker, so each ends on 2. "b" ends at 100 + 200 / 2 = 200
    # instead of waiting for "a"; "a" has done 400 + 200 by then and does 3400 / 4 = 850 more.
    outcomes = run("qos", [job("a", 0, 4000), job("b", 100, 200)])
    assert {k: (o.start_s, o.finish_s) for k, o in outcomes.items()} == {
        "a": (0.0, 1050.0),
        "b": (100.0, 200.0),
    }


@pytest.mark.parametrize(
    ("min_spare_gain", "finish_s"),
    # The table doubles the speed from 1 to 2 GPUs (gain 1.0 per added GPU) and from 2 to 4
    # (gain 0.5 per added GPU): 4000 iterations take 1000 s on 4, 2000 s on 2.
    [(0.0, 1000.0), (0.5, 1000.0), (0.6, 2000.0), (1.0, 2000.0)],
)
def test_qos_hands_a_spare_worker_only_where_it_adds_enough_speed(min_spare_gain, finish_s):
    policy = create_policy("qos", min_spare_gain=min_spare_gain)
    outcome = run(policy, [job("a", 0, 4000)])["a"]
    assert (outcome.finish_s, outcome.reallocations) == (finish_s, 0)


def _flat_state(spec: JobSpec) -> JobState:
    """1, 1.5 and 2 it/s on 1, 2 and 4 GPUs: 0.5 more per GPU from 1 to 2, 1/3 from 1 to 4."""
    flat = ThroughputModel({"m": {64: {1: 1.0, 2: 1.5, 4: 2.0}}})
    return JobState(spec, flat.curve(spec.model, spec.batch_size))


@pytest.mark.parametrize(
    ("min_spare_gain", "held", "kept"),
    [(0.0, 4, 4), (0.3, 4, 4), (0.4, 4, 1), (0.4, 2, 2), (0.6, 2, 1)],
)
def test_guaranteed_jobs_give_back_workers_beyond_their_plan_that_gain_too_little(
    min_spare_gain, held, kept
):
    running = _flat_state(job("a", 0.0, 400, deadline=1000.0))
    running.workers = held
    policy = QualityOfService(min_spare_gain=min_spare_gain)
    _waiting(policy, ClusterView(0.0, ONE_NODE, (running,), 0.0))
    hand = _Hand(4)
    hand.give("a", 1)  # its plan needs 1
    policy._keep_beyond_plan([running], Plan({"a": [(0.0, 1000.0, 1)]}), hand)
    assert hand.workers == {"a": kept}


@pytest.mark.parametrize(("refresh_s", "rate_read"), [(60.0, 2.0), (5.0, 1.0)])
def test_qos_re_reads_a_jobs_speeds_after_refresh_s_of_running(refresh_s, rate_read):
    # On 2 GPUs the table says 2 it/s; the job does 1 it/s. After 10 s of running, a policy
    # re-reading after 10% + 5 s plans on what it measured; one waiting for a minute still
    # plans on the table.
    running = state(job("a", 0.0, 10_000))
    running.workers = 2
    policy = QualityOfService(refresh_s=refresh_s)
    for now in (0.0, 10.0):
        running.active_s, running.iterations_done = now, now
        policy.allocate(ClusterView(now, ONE_NODE, (running,), 0.0))
    expected = policy._ladders(running, policy._jobs["a"])[0]
    assert expected.rate(2) == pytest.approx(rate_read)


def test_qos_feeds_a_jobs_progress_only_where_its_count_changes_or_its_speeds_are_re_read():
    # "a" runs alone on the node's 4 GPUs at the table's 4 it/s. Decisions every 10 s leave it
    # there, and its speeds are due for a re-read 60 s in (refresh_s): its progress reaches its
    # predictor at 70 s, as one interval, not as one per call. When "b" arrives at 100 s, the
    # decision that takes workers from "a" ends its interval on 4 GPUs there.
    a = state(job("a", 0.0, 100_000))
    a.workers, a.started_s = 4, 0.0
    policy = QualityOfService()
    assert policy.predictor_of("a") is None  # not tracked yet
    for now in (0.0, 10.0, 20.0, 30.0, 40.0, 50.0):
        a.active_s, a.iterations_done = now, 4.0 * now
        assert policy.allocate(ClusterView(now, ONE_NODE, (a,), 0.0)).workers == {"a": 4}
    predictor = policy._jobs["a"].predictor
    assert predictor.observed_seconds == 0.0  # not fed: its count did not change
    a.active_s, a.iterations_done = 70.0, 280.0
    policy.allocate(ClusterView(70.0, ONE_NODE, (a,), 0.0))
    assert (predictor._stats[4].intervals, predictor._stats[4].seconds) == (1, 70.0)
    b = state(job("b", 100.0, 100_000))
    a.active_s, a.iterations_done = 100.0, 400.0
    policy.admit(b, ClusterView(100.0, ONE_NODE, (a,), 0.0))
    decision = policy.allocate(ClusterView(100.0, ONE_NODE, (a, b), 0.0))
    assert decision.workers.get("a", 0) != 4  # "b" takes some of them
    assert (predictor._stats[4].intervals, predictor._stats[4].seconds) == (2, 100.0)
    assert policy._ladders(a, policy._jobs["a"])[0].rate(4) == pytest.approx(4.0)


def test_qos_checks_a_kept_reservation_again_only_where_its_job_falls_behind_it(monkeypatch):
    # "a" (40,000 iterations by 30,000 s: 1 GPU's pessimistic 0.82 it/s is too slow) is
    # guaranteed at 0 and runs on what each decision gives it at the table's speed, ahead of
    # what its reservation needs on pessimistic speeds. Its reservation is checked at 10 s (the
    # first instant after the plan was adopted, changes paid) and then not at 20-50 s, yet
    # delivers at each; when it stalls from 50 s to 200 s it has fallen behind, and is checked
    # again.
    checked = []

    def counting(job, *args, **kwargs):
        checked.append(job.job_id)
        return kept_delivers(job, *args, **kwargs)

    monkeypatch.setattr(qos_module, "kept_delivers", counting)
    a = state(job("a", 0.0, 40_000, deadline=30_000.0))
    policy = QualityOfService(refresh_s=1e6)  # no re-read of its speeds in between
    policy.admit(a, ClusterView(0.0, ONE_NODE, (a,), 0.0))
    assert policy.is_guaranteed("a")
    done = 0.0
    for now in (0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 200.0):
        if now == 200.0:
            assert checked == ["a"]
        a.active_s, a.iterations_done = now, done
        view = ClusterView(now, ONE_NODE, (a,), 0.0)
        a.workers = policy.allocate(view).workers["a"]
        a.started_s = 0.0
        done += 10.0 * TABLES.curve("m", 64).rate(a.workers) if now < 50.0 else 0.0
        if now < 200.0:  # every guarantee in force delivers, checked or not
            reservation, pessimistic = policy._kept["a"], policy._jobs["a"].ladders[1]
            assert kept_delivers(a, pessimistic, reservation, view, pay_kept_changes=now > 0)
    assert checked == ["a", "a"]


def test_qos_lets_a_best_effort_job_close_to_done_finish_on_its_workers():
    # "a" (400 iterations) runs alone on 4 GPUs from 0. When "b" arrives at 50, "a" has 200
    # left, 50 s on its 4 GPUs, less than ten 30 s pauses: a re-size would cost it more than
    # the workers could give "b". It keeps them, ends at 100; "b" then starts (its first start
    # is free) and does 400 on 4 GPUs by 200.
    outcomes = run("qos", [job("a", 0, 400), job("b", 50, 400)], pause=30.0)
    assert {k: (o.start_s, o.finish_s, o.reallocations) for k, o in outcomes.items()} == {
        "a": (0.0, 100.0, 0),
        "b": (100.0, 200.0, 0),
    }


# --- prediction ---------------------------------------------------------------------------------


class RecordingQos(QualityOfService):
    """qos that notes, at each decision, each long-running job's table, predicted and true speed
    on the GPUs it held since the last decision (not registered)."""

    def __init__(self, min_active_s: float) -> None:
        super().__init__()
        self.min_active_s = min_active_s
        self.speeds: dict[str, tuple[float, float, float]] = {}

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)
        for state in view.jobs:
            if state.workers and state.active_s >= self.min_active_s:
                predicted = self._jobs[state.job_id].predictor.predict(state.workers).rate
                # Without noise or a split penalty, the job's rate is its hidden true speed.
                self.speeds[state.job_id] = (state.curve.rate(state.workers), predicted, state.rate)
        return decision


def mean_log_error(pairs) -> float:
    return sum(abs(math.log(estimate / truth)) for estimate, truth in pairs) / len(pairs)


def test_qos_predictions_learn_hidden_speeds_the_table_does_not_know():
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=60, load=1.0, cluster_workers=16, seed=5), tables)
    policy = RecordingQos(min_active_s=600.0)
    config = SimConfig(speed_sigma=0.3, cross_node_factor=1.0, seed=11)
    simulate(ClusterSpec.from_flags(2, 8), tables, policy, jobs, config)
    speeds = list(policy.speeds.values())
    table_error = mean_log_error([(table, truth) for table, _, truth in speeds])
    predicted_error = mean_log_error([(predicted, truth) for _, predicted, truth in speeds])
    # Hidden factors are lognormal(0, 0.3): the table is off by about 0.24 in log on average.
    assert len(speeds) >= 20
    assert predicted_error < table_error / 4, (predicted_error, table_error)


# --- determinism --------------------------------------------------------------------------------


def test_qos_same_trace_config_and_seed_give_identical_runs():
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=40, load=1.5, cluster_workers=16, seed=2), tables)
    config = SimConfig(speed_sigma=0.3, scaling_sigma=0.1, noise=0.05, seed=7)
    first, second = (
        simulate(ClusterSpec.from_flags(2, 8), tables, create_policy("qos"), jobs, config)
        for _ in range(2)
    )
    assert (first.outcomes, first.allocation_timeline, first.decisions) == (
        second.outcomes,
        second.allocation_timeline,
        second.decisions,
    )


# --- planning shortcuts: the same decisions, cheaper ---------------------------------------------


class _PlansEverything(QualityOfService):
    """qos without its planning shortcuts: every guarantee re-plans all guaranteed jobs, the
    fresh plan is always made when the kept one fails a job, and every decision checks every
    kept reservation."""

    def _best_plan_with(self, job, guaranteed, view):
        return self._best_plan([*guaranteed, job], view)

    def _overfull(self, job, before, view):
        return False

    def _kept_plan(self, guaranteed, view):
        return self._best_plan(guaranteed, view)


class _CountsShortcuts(QualityOfService):
    def __init__(self) -> None:
        super().__init__()
        self.pruned = 0
        self.prefixes = 0
        self.unchecked = 0

    def _overfull(self, job, before, view):
        overfull = super()._overfull(job, before, view)
        self.pruned += overfull
        return overfull

    def _fresh_prefix(self, guaranteed, view):
        self.prefixes += 1
        return super()._fresh_prefix(guaranteed, view)

    def _kept_plan(self, guaranteed, view):
        self.unchecked += self._adopted_for == (view.now, frozenset(j.job_id for j in guaranteed))
        return super()._kept_plan(guaranteed, view)


def _same_outcomes(outcomes: tuple[JobOutcome, ...], reference: tuple[JobOutcome, ...]) -> None:
    assert [(o.job_id, o.declined, o.met_deadline, o.reallocations) for o in outcomes] == [
        (o.job_id, o.declined, o.met_deadline, o.reallocations) for o in reference
    ]
    for mine, theirs in zip(outcomes, reference, strict=True):
        assert mine.finish_s == pytest.approx(theirs.finish_s, rel=1e-9)


# Overloaded enough that guarantees are retried on what a fresh plan's prefix leaves.
@pytest.mark.parametrize(
    ("load", "seed"), [(4.0, 5), (4.0, 1), (8.0, 1)], ids=["load-4", "load-4-b", "load-8"]
)
def test_planning_shortcuts_change_no_decision(load, seed):
    tables = ThroughputModel.bundled("A100")
    cluster = ClusterSpec.from_flags(4, 8)
    jobs = generate_trace(
        GeneratorConfig(jobs=80, load=load, cluster_workers=32, seed=seed), tables
    )
    fast = _CountsShortcuts()
    outcomes = simulate(cluster, tables, fast, jobs).outcomes
    reference = simulate(cluster, tables, _PlansEverything(), jobs).outcomes
    # the shortcuts were taken, so the comparison means something
    assert fast.prefixes > 0 and fast.unchecked > 0
    _same_outcomes(outcomes, reference)


def test_the_worker_seconds_bound_changes_no_decision():
    # "a" (100 by 30) is guaranteed at 0 on 4 GPUs. "b" (40 by 31) arrives at 1: the plan
    # keeping "a" fails it, and so must any plan: with 96 of "a" left, both need at least
    # 96 + 40 GPU-seconds at the table's speed, 4 x 30 = 120 are left before 31, so the fresh
    # plan is not made.
    jobs = [job("a", 0, 100, deadline=30), job("b", 1, 40, deadline=31)]
    fast = _CountsShortcuts()
    outcomes = simulate(ONE_NODE, TABLES, fast, jobs).outcomes
    reference = simulate(ONE_NODE, TABLES, _PlansEverything(), jobs).outcomes
    assert fast.pruned > 0
    _same_outcomes(outcomes, reference)


@pytest.mark.parametrize(
    ("overhead", "wake"), [(0.0, 600.0), (2.0, None)], ids=["free-decisions", "costly-decisions"]
)
def test_qos_ticks_only_where_deciding_costs_running_jobs_nothing(overhead, wake):
    """One best-effort job alone on the node: no plan changes, so the only wake is the tick, and
    where every decision costs every running job progress there is none."""
    best_effort = state(job("be", 0.0, 10_000))
    view = ClusterView(0.0, ONE_NODE, (best_effort,), 30.0, decision_overhead_s=overhead)
    policy = create_policy("qos")
    policy.admit(best_effort, view)
    assert policy.allocate(view).wake_at == wake


@pytest.mark.parametrize("seed", range(5))
def test_a_fresh_prefix_and_the_rest_planned_after_it_make_the_whole_fresh_plan(seed):
    """Planning a deadline-ordered prefix, then one more job and the rest on what it leaves,
    reserves what one plan of them all does: the same reservations, the same free profile."""
    rng = random.Random(seed)
    ladder = Ladder([0.0, *(float(g) for g in range(1, 9))], (1, 2, 4, 8))
    demands = [
        Demand(f"j{i}", ladder, rng.uniform(100, 3000), 0.0, deadline, order=(deadline, float(i)))
        for i, deadline in enumerate(rng.uniform(200, 1500) for _ in range(12))
    ]
    newcomer, guaranteed = demands[0], demands[1:]
    whole = plan_demands(demands, 0.0, 8)
    prefix = _FreshPrefix((0.0, frozenset()), sorted(guaranteed, key=lambda d: d.order))
    earlier = [d for d in guaranteed if d.order <= newcomer.order]
    assert prefix.failures_up_to(newcomer.order, 0.0, 8) == sum(
        d.job_id in whole.failed for d in earlier
    )
    profile = prefix.profile_copy(0.0, 8)
    own = plan_demands([newcomer], 0.0, 8, profile=profile)
    rest = plan_demands(prefix.after(newcomer.order), 0.0, 8, profile=profile)
    assert {**prefix.reservations, **own.reservations, **rest.reservations} == whole.reservations
    assert (profile.starts, profile.free) == (whole.free.starts, whole.free.free)


# --- the named steps of a decision ---------------------------------------------------------------


def test_a_hand_gives_counts_and_counts_what_is_left():
    hand = _Hand(8)
    hand.give("a", 2)
    hand.give("b", 4)
    hand.give("a", 4, had=2)  # a step up from what "a" was given costs only the difference
    assert (hand.workers, hand.free) == ({"a": 4, "b": 4}, 0)


def _waiting(policy: QualityOfService, view: ClusterView) -> None:
    for waiting in view.jobs:
        policy._track(waiting, view)


def test_jobs_no_plan_holds_get_workers_by_urgency():
    """On 4 GPUs at t=0: "soon" (400 iterations by t=200) makes it on 2 GPUs (2 it/s) and only if
    it starts now, "late" (400 by t=10) cannot make it on any count, "be" has no deadline."""
    soon = state(job("soon", 0.0, 400, deadline=200.0))
    late = state(job("late", 0.0, 400, deadline=10.0))
    best_effort = state(job("be", 0.0, 4000))
    view = ClusterView(0.0, ONE_NODE, (late, best_effort, soon), 0.0)
    policy = QualityOfService()
    _waiting(policy, view)
    urgency = {j.job_id: policy._other_priority(j, 0.0)[0] for j in view.jobs}
    assert urgency == {
        "soon": Urgency.MUST_RUN_SOON,
        "be": Urgency.BEST_EFFORT,
        "late": Urgency.HOPELESS,
    }
    hand = _Hand(4)
    policy._give_the_rest(view, hand)
    # "soon" its fewest meeting workers (2), "be" one, then the spare step before the hopeless
    # job is reached: "be" to 2, and nothing is left for "late".
    assert (hand.workers, hand.free) == ({"soon": 2, "be": 2}, 0)


@pytest.mark.parametrize(
    ("spare_order", "best_effort_iterations", "given"),
    [
        # Claims: speed-up per added worker (1 -> 2 doubles either: 1.0) over the square root of
        # the remaining seconds on 1 GPU. "d": 1 / sqrt(100) = 0.1. "b" (x3, best effort):
        # 3 / sqrt(10000) = 0.03, the one spare GPU goes to "d"; 3 / sqrt(400) = 0.15, to "b"
        # (unweighted, 0.05, it would have gone to "d").
        ("completion", 10_000, {"d": 2, "b": 1}),
        ("completion", 400, {"d": 1, "b": 2}),
        # best-effort jobs first, whatever their length
        ("best_effort_first", 10_000, {"d": 1, "b": 2}),
    ],
    ids=["completion-short-deadline-job", "completion-weighted-best-effort", "best-effort-first"],
)
def test_spare_workers_go_by_speed_up_over_remaining_time(
    spare_order, best_effort_iterations, given
):
    deadline_job = state(job("d", 0.0, 100, deadline=1000.0))
    best_effort = state(job("b", 0.0, best_effort_iterations))
    view = ClusterView(0.0, ONE_NODE, (best_effort, deadline_job), 0.0)
    policy = QualityOfService(spare_order=spare_order)
    _waiting(policy, view)
    hand = _Hand(3)
    hand.give("d", 1)
    hand.give("b", 1)
    policy._hand_out_spare(view, hand)
    assert (hand.workers, hand.free) == (given, 0)


@pytest.mark.parametrize(
    ("spare_order", "held", "urgency"),
    [
        # 440 iterations at 4 it/s on its fastest count (4 GPUs) take 110 s, 10 s past its
        # deadline at 100: a miss of 9% of its remaining time, under NEAR_MISS_SHARE (15%).
        ("completion", 4, Urgency.MUST_RUN_SOON),
        ("completion", 0, Urgency.HOPELESS),  # waiting: nothing to keep
        ("best_effort_first", 4, Urgency.HOPELESS),
    ],
)
def test_a_running_job_that_nearly_makes_its_deadline_keeps_its_workers(spare_order, held, urgency):
    near = state(job("near", 0.0, 440, deadline=100.0))
    near.workers = held
    policy = QualityOfService(spare_order=spare_order)
    _waiting(policy, ClusterView(0.0, ONE_NODE, (near,), 0.0))
    assert policy._other_priority(near, 0.0)[0] is urgency


@pytest.mark.parametrize(
    ("spare_order", "given"),
    [
        # "g" (400 iterations) takes the spare first, 1 -> 2 -> 4 GPUs: nothing left for "late"
        ("completion", {"g": 4}),
        # "late" keeps the 2 GPUs it runs on; only best-effort jobs would have shared first
        ("best_effort_first", {"g": 1, "late": 2}),
    ],
)
def test_a_deadline_already_lost_gets_workers_only_after_the_spare(spare_order, given):
    """On 4 GPUs at t=0: "g" was given 1 GPU (its plan), "late" (400 iterations by t=10) runs on 2
    and cannot make it on any count."""
    planned = state(job("g", 0.0, 400, deadline=1000.0))
    late = state(job("late", 0.0, 400, deadline=10.0))
    late.workers = 2
    view = ClusterView(0.0, ONE_NODE, (late, planned), 0.0)
    policy = QualityOfService(spare_order=spare_order)
    _waiting(policy, view)
    assert policy._other_priority(late, 0.0)[0] is Urgency.HOPELESS
    hand = _Hand(4)
    hand.give("g", 1)
    policy._give_the_rest(view, hand)
    assert hand.workers == given


def test_guaranteed_jobs_keep_workers_beyond_their_plan_only_while_they_fit():
    first = state(job("first", 0.0, 400, deadline=1000.0))
    second = state(job("second", 0.0, 400, deadline=2000.0))
    first.workers, second.workers = 4, 3
    plan = Plan({"first": [(0.0, 1000.0, 1)], "second": [(0.0, 1000.0, 1)]})
    hand = _Hand(6)
    hand.give("first", 1)
    hand.give("second", 1)
    QualityOfService()._keep_beyond_plan([first, second], plan, hand)
    # "first" (earlier deadline) takes 3 more and keeps its 4; "second" would need 2 of the 1 left.
    assert (hand.workers, hand.free) == ({"first": 4, "second": 1}, 1)


def test_qos_measures_again_after_a_job_loses_progress():
    """A backend may report fewer iterations than before (the job restarted from an older
    checkpoint, or its command from scratch): the policy keeps deciding, and learns the job's
    speed from the intervals after the loss only."""
    running = state(job("a", 0.0, 10_000, deadline=20_000.0))
    policy = QualityOfService()
    policy.admit(running, ClusterView(0.0, ONE_NODE, (running,), 0.0))
    running.workers = 2
    for now, done in ((0.0, 0.0), (100.0, 100.0), (200.0, 20.0), (400.0, 220.0)):
        running.active_s, running.iterations_done = now, done
        decision = policy.allocate(ClusterView(now, ONE_NODE, (running,), 0.0))
        assert sum(decision.workers.values()) <= 4  # the backend keeps it on 2 regardless
    # 100 iterations in 100 s, then 200 in 200 s on 2 workers: 1 it/s, not the table's 2.
    assert policy.predictor_of("a").predict(2).rate == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("speed_recent_s", "expected_rate"),
    [
        # 80 iterations in 20 s, then 20 in 10 s: 100 in 30 s when every second counts alike.
        (None, 100.0 / 30.0),
        # With a memory of 3 s at 30 s of age, the first 20 s keep exp(-10 / 3) = 4 % of their
        # weight: about 0.96 x 2 + 0.04 x 4 = 2.07 iterations/s.
        (2.0, 2.07),
    ],
    ids=["steady-backend", "drifting-backend"],
)
def test_qos_predicts_from_recent_speed_where_the_backend_says_speeds_drift(
    speed_recent_s, expected_rate
):
    c = state(job("c", 0, 400, deadline=1000.0))
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,), speed_recent_s=speed_recent_s))
    c.workers, c.started_s = 4, 0.0
    for now in range(1, 31):
        c.active_s, c.iterations_done = float(now), 4.0 * min(now, 20) + 2.0 * max(now - 20, 0)
        policy.allocate(ClusterView(float(now), ONE_NODE, (c,), speed_recent_s=speed_recent_s))
    assert policy.predictor_of("c").predict(4).rate == pytest.approx(expected_rate, rel=0.02)


@pytest.mark.parametrize(
    ("mark", "expected_rate"),
    [
        # Every interval counts: 1 iteration in the last second of the start-up (2 s to 3 s; the
        # seconds before it made no progress and are skipped), then 50 at 10 it/s: 51 in 6 s.
        (None, 51.0 / 6.0),
        # Measured from the end of the start-up: 50 iterations in 5 s.
        ((3.0, 1.0), 10.0),
    ],
    ids=["no-mark", "start-up-marked"],
)
def test_qos_measures_a_jobs_speed_from_the_end_of_its_start_up(mark, expected_rate):
    c = state(job("c", 0, 400, deadline=1000.0))
    policy = QualityOfService()
    policy.admit(c, ClusterView(0.0, ONE_NODE, (c,)))
    c.workers, c.started_s = 4, 0.0
    for now in range(1, 9):  # a start-up of 3 s that ends with iteration 1, then 10 it/s
        c.active_s, c.iterations_done = float(now), 0.0 if now < 3 else 1.0 + 10.0 * (now - 3)
        if now >= 3:
            c.speed_mark = mark
        policy.allocate(ClusterView(float(now), ONE_NODE, (c,)))
    assert policy.predictor_of("c").predict(4).rate == pytest.approx(expected_rate, rel=1e-9)
