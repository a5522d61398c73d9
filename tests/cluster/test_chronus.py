"""Tests for the chronus policy: its lease packing by hand, two small runs worked out on paper,
and invariants on a generated trace.

Model ``m`` runs ``g`` iterations/s on ``g`` GPUs. With 10 s leases a 4-GPU job of 40 iterations
runs 10 s; padded for resumes (1 + 3 x 0.5 / 10 = 1.15) and by a tenth it is planned 12.65 s, so
two leases.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.policies.chronus import Chronus, LeaseFree, _Ask, pack, packing_size
from qosched.cluster.simulator import JobOutcome, SimConfig, SimResult, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, DecisionClock, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})


def run(policy: Chronus, jobs: list[JobSpec]) -> dict[str, tuple[float | None, float | None]]:
    result = simulate(
        ClusterSpec.from_flags(1, 4),
        TABLES,
        policy,
        jobs,
        SimConfig(restart_pause_s=0.0, cross_node_factor=1.0),
    )
    return {o.job_id: (o.start_s, o.finish_s) for o in result.outcomes}


@pytest.mark.parametrize(
    ("workers", "size"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (7, 8), (8, 8), (16, 16)]
)
def test_packing_size_rounds_odd_counts_up_to_a_power_of_two(workers, size):
    assert packing_size(workers) == size


def test_pack_puts_the_largest_job_in_its_latest_lease_and_the_next_below_it():
    # "a" (4 GPUs, 1 lease within 3) goes first and takes lease 2; "b" (2 GPUs, 2 leases within
    # 2) takes leases 1 and 0; leases past the list are whole.
    free = LeaseFree(4)
    plans = pack([_Ask("b", 2, 2, 2), _Ask("a", 4, 1, 3)], free)
    assert plans == {"a": [2], "b": [0, 1]}
    assert [free[lease] for lease in range(5)] == [2, 2, 0, 4, 4]


def test_pack_counts_the_leases_the_plans_in_force_hold():
    # Plans hold 3 of 4 workers in leases 11 and 12 (numbered from base 10: leases 1 and 2 from
    # now), so a 2-worker job fits only lease 0: needing 2 leases within 3 it fails, needing
    # one it takes lease 0. Packing leaves the held counts as they were.
    held = {11: 3, 12: 3}
    assert pack([_Ask("a", 2, 2, 3)], LeaseFree(4, held, base=10)) is None
    free = LeaseFree(4, held, base=10)
    assert pack([_Ask("a", 2, 1, 3)], free) == {"a": [0]}
    assert held == {11: 3, 12: 3} and [free[lease] for lease in range(3)] == [2, 1, 1]
    far = pack([_Ask("b", 4, 1, 10**7)], LeaseFree(4, held, base=10))
    assert far == {"b": [10**7 - 1]}  # a deadline ten million leases ahead, packed at once


@pytest.mark.parametrize(
    "asks",
    [
        pytest.param([_Ask("a", 1, 3, 2)], id="more-leases-than-before-the-deadline"),
        pytest.param([_Ask("a", 4, 2, 2), _Ask("b", 1, 1, 2)], id="second-job-finds-no-room"),
    ],
)
def test_pack_fails_when_a_job_cannot_fit(asks):
    assert pack(asks, LeaseFree(4)) is None


def test_artifact_spare_rule_leaves_a_guaranteed_job_waiting_for_its_latest_leases():
    # "a" is judged at 0 against leases 1..3 (deadline 40) and guaranteed; at 10 it is planned
    # into leases 2 and 3 and, under the artifact's rule, waits: it runs 20..30.
    policy = Chronus(lease_s=10.0, spare="artifact")
    assert run(policy, [job("a", 0, 40, workers=4, deadline=40)]) == {"a": (20.0, 30.0)}


def test_default_spare_rule_lends_idle_workers_to_a_guaranteed_job():
    policy = Chronus(lease_s=10.0)
    assert run(policy, [job("a", 0, 40, workers=4, deadline=40)]) == {"a": (0.0, 10.0)}


def test_an_arrival_that_would_break_a_guarantee_runs_only_on_spare_workers():
    # "b" (deadline 30: leases 1..2) packs first, having no slack, and leaves "a" one lease:
    # "b" is not guaranteed. Artifact rule: "a" waits for its leases, so "b" gets the idle GPUs
    # at 0 and "a" runs 20..30. Default rule: the guaranteed "a" takes them first, "b" follows.
    jobs = [job("a", 0, 40, workers=4, deadline=40), job("b", 0, 40, workers=4, deadline=30)]
    artifact = Chronus(lease_s=10.0, spare="artifact")
    assert run(artifact, jobs) == {"a": (20.0, 30.0), "b": (0.0, 10.0)}
    sound = Chronus(lease_s=10.0)
    assert run(sound, jobs) == {"a": (0.0, 10.0), "b": (10.0, 20.0)}


@pytest.mark.parametrize(("credit", "finish"), [(True, 70.0), (False, 80.0)])
def test_a_guaranteed_job_starting_after_a_wait_is_credited_the_lease_it_waited(credit, finish):
    # "a" (4 GPUs, 40 s, planned 40 x 1.15 x 1.1 = 50.6 s: six leases) is planned at 10 into
    # the latest six before its deadline, leases 4..9, and waits. The artifact's clock counts
    # its progress from its last look at the waiting job, a lease before it starts: at 40 it is
    # credited 10 s, so at 50 it has 20 s done, needs ceil(30.6 / 10) = 4 leases of its 5 left
    # and drops lease 5. It waits again, is credited again at 60 (30 s done) and ends at 70,
    # having run 20 s. Without the credit it runs its 40 s from 40.
    policy = Chronus(lease_s=10.0, spare="artifact", credit_waited_lease=credit)
    assert run(policy, [job("a", 0, 160, workers=4, deadline=100)]) == {"a": (40.0, finish)}


@pytest.mark.parametrize(("spare", "order"), [("artifact", ("q", "p")), ("all", ("p", "q"))])
def test_jobs_past_hope_are_served_latest_first_under_the_artifact_spare_rule(spare, order):
    # Both are due at 5 and need the whole GPU set, so neither can meet its deadline. Planned
    # lateness x workers: p (10 s, planned 12.65 s) 4 x 7.65, q (20 s, planned 25.3 s) 4 x
    # 20.3. The artifact serves the latest first (its `emergence`, `best_func`) and its
    # running job's lateness stays put while the other's grows, so q runs 0..20, then p. The
    # default serves the least remaining work first.
    jobs = [job("p", 0, 40, workers=4, deadline=5), job("q", 0, 80, workers=4, deadline=5)]
    first, second = order
    runs = run(Chronus(lease_s=10.0, spare=spare), jobs)
    assert runs[first][0] == 0.0 and runs[second][0] == runs[first][1]


def test_jobs_on_spare_workers_pay_the_artifact_resume_cost_at_every_lease():
    # p and q as above; each lease a job runs on spare workers costs it 0.5 x (1 + log2 4) =
    # 1.5 s, which the artifact adds to its run time (its own progress runs ahead of it).
    # q runs 0..10 and 10..20, 8.5 s of work each; at 20 its lateness is still 20.3 while
    # p's is 20 + 12.65 - 5 = 27.65, so p runs 20..30 (8.5 s). At 30 q (30.3) goes before p
    # (27.65) and ends at 30 + 1.5 + 3 = 34.5; p resumes at the next boundary, 40, and ends
    # at 40 + 1.5 + 1.5 = 43.
    jobs = [job("p", 0, 40, workers=4, deadline=5), job("q", 0, 80, workers=4, deadline=5)]
    policy = Chronus(lease_s=10.0, spare="artifact", charge_resumes=True)
    assert run(policy, jobs) == {"p": (20.0, 43.0), "q": (0.0, 34.5)}


@pytest.mark.parametrize(("whole", "start"), [(True, 30.0), (False, 20.0)])
def test_an_estimate_just_past_a_lease_multiple_is_cut_to_whole_seconds(whole, start):
    # "a" (4 GPUs, 32 iterations: 8 s) is planned 8 x 1.15 x 1.1 = 10.12 s. The artifact keeps
    # int(10.12) = 10 s (its ``estimate_duration``), one lease, and plans it into the latest
    # lease before the deadline, 30..40. Uncut, 10.12 s needs two leases, 20..40.
    policy = Chronus(lease_s=10.0, spare="artifact", whole_second_estimates=whole)
    assert run(policy, [job("a", 0, 32, workers=4, deadline=40)]) == {"a": (start, start + 8.0)}


def test_guarantee_is_reported_after_admission():
    policy = Chronus(lease_s=10.0)
    view = ClusterView(0.0, ClusterSpec.from_flags(1, 4), ())
    jobs = [job("a", 0, 40, workers=4, deadline=40), job("b", 0, 40, workers=4, deadline=30)]
    states = [JobState(spec, TABLES.curve("m", 64)) for spec in jobs]
    for state in states:
        assert policy.admit(state, view)
    policy.allocate(ClusterView(0.0, ClusterSpec.from_flags(1, 4), states))
    assert (policy.is_guaranteed("a"), policy.is_guaranteed("b")) == (True, False)


class _Recording(Chronus):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.totals: list[int] = []

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)
        self.totals.append(sum(decision.workers.values()))
        return decision


@pytest.mark.parametrize("spare", ["all", "artifact"])
def test_never_more_workers_than_the_cluster_and_deterministic(spare):
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=60, load=2.0, cluster_workers=16, seed=3), tables)

    def once() -> tuple[list[int], list[JobOutcome]]:
        policy = _Recording(spare=spare)
        result = simulate(ClusterSpec.from_flags(2, 8), tables, policy, jobs)
        return policy.totals, list(result.outcomes)

    totals, outcomes = once()
    assert totals and max(totals) <= 16
    assert all(o.finish_s is not None for o in outcomes)  # nothing is declined or starved
    assert once() == (totals, outcomes)


class _Ledger(Chronus):
    """Chronus recording the work each decision credits and the time it charges."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.credited: dict[str, float] = {}
        self.charged: dict[str, float] = {}

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)
        for book, entries in (
            (self.credited, decision.credit_s),
            (self.charged, decision.charge_s),
        ):
            for job_id, seconds in entries.items():
                book[job_id] = book.get(job_id, 0.0) + seconds
        return decision


@pytest.mark.parametrize("seed", range(4))
def test_artifact_accounting_conserves_work_on_generated_traces(seed):
    # Each job runs on its requested workers only, so the time it holds them is its run time
    # plus the time charged to it, less the work credited to it, of which a credit past its
    # end counts only the part it needed.
    tables = ThroughputModel.bundled()
    config = GeneratorConfig(jobs=80, load=2.0, cluster_workers=16, seed=seed)
    jobs = {j.job_id: j for j in generate_trace(config, tables)}
    policy = _Ledger(spare="artifact", credit_waited_lease=True, charge_resumes=True)
    result = simulate(ClusterSpec.from_flags(2, 8), tables, policy, list(jobs.values()),
                      SimConfig(cross_node_factor=1.0,
                                artifact=ArtifactConfig(restart_model="none")))  # fmt: skip
    exact = 0
    for outcome in result.outcomes:
        spec = jobs[outcome.job_id]
        assert outcome.finish_s is not None
        curve = tables.curve(spec.model, spec.batch_size)
        run_s = spec.iterations / curve.rate(spec.requested_workers)
        held_s = outcome.worker_seconds / spec.requested_workers
        credit = policy.credited.get(spec.job_id, 0.0)
        charge = policy.charged.get(spec.job_id, 0.0)
        if credit:
            assert run_s - credit + charge - 1e-6 <= held_s <= run_s + charge + 1e-6
        else:
            assert held_s == pytest.approx(run_s + charge, rel=1e-9, abs=1e-6)
            exact += charge > 0
    assert policy.credited and exact > 10  # both kinds of job are exercised


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"lease_s": 0.0}, "lease_s"), ({"spare": "eager"}, "spare rule")],
)
def test_rejects_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Chronus(**kwargs)


@pytest.mark.parametrize(("fidelity", "b_start"), [("artifact", 480.0), ("sound", 250.0)])
def test_artifact_decides_each_lease_boundary_on_time_before_later_arrivals(fidelity, b_start):
    # 240 s leases. a (best effort, 200 s) ends at 200; b (best effort) arrives at 250. The
    # artifact's clock steps 60 s from 0: the boundary at 240 is decided then, without b, which
    # waits for the next, 480. Off that grid, the decision a's end asks for (200) pushes the
    # boundary's to the slot's end, 260, where b would be judged with it (sound: at once).
    policy, config = configure("chronus", fidelity, SimConfig(cross_node_factor=1.0))
    jobs = [job("a", 0, 200), job("b", 250, 10)]
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, policy, jobs, config)
    assert {o.job_id: o.start_s for o in result.outcomes}["b"] == b_start


@pytest.mark.parametrize(("clock", "a_start"), [(True, 480.0), (False, 300.0)])
def test_boundary_clock_keeps_an_arrival_after_an_idle_boundary_for_the_next(clock, a_start):
    # The only job arrives at 250 on an empty cluster; no decision came at the boundary at 240.
    # The artifact's clock passed it anyway, so the job waits for 480; without the clock the
    # boundary is decided late, at the next grid point (300), with the job.
    policy, config = configure("chronus", "artifact", SimConfig(cross_node_factor=1.0))
    policy.boundary_clock = clock
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, policy, [job("a", 250, 10)], config)
    assert result.outcomes[0].start_s == a_start


def test_a_deadline_a_million_leases_ahead_is_planned_in_the_leases_it_takes():
    # Found by a random trace: plans were lists of one flag per lease up to the deadline, walked
    # at every boundary, so a job due in years (8.7 of them here: 1.1 million leases) made every
    # decision cost millions of steps and a 9-job run took hours. A plan now holds only the
    # leases it takes, and the promised leases are counted once, not rebuilt per decision.
    jobs = [job("far", 0.0, 20_000, 4, deadline=273_000_000.0), job("near", 100.0, 2_000, 4,
            deadline=20_000.0)]  # fmt: skip
    policy = Chronus()
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, policy, jobs,
                      SimConfig(restart_pause_s=0.0, cross_node_factor=1.0))  # fmt: skip
    finished = {o.job_id: o.finish_s for o in result.outcomes}
    assert None not in finished.values()
    assert result.decisions < 100  # a boundary a lease while jobs run, not until the deadline
    assert policy._held == {}  # every promised lease released as its job ended


class _Stepped(Chronus):
    """Chronus on a backend that counts its decisions, so it skips no boundary."""

    def allocate(self, view: ClusterView) -> Decision:
        return super().allocate(replace(view, clock=DecisionClock(counted=True)))


def _simulate(cls: type[Chronus], setting: str, jobs: list[JobSpec]) -> SimResult:
    """Run a ``cls`` on 4 GPUs in the artifact's simulator (its options, a 60 s grid from 0),
    or in one that decides when asked, with the artifact's spare rule alone."""
    if setting == "artifact":
        policy, config = configure("chronus", "artifact", SimConfig(cross_node_factor=1.0))
        options = ("spare", "boundary_clock", "credit_waited_lease", "charge_resumes")
        chronus = cls(**{name: getattr(policy, name) for name in options})
    else:
        chronus, config = cls(spare="artifact"), SimConfig(restart_pause_s=0.0)
    return simulate(ClusterSpec.from_flags(1, 4), TABLES, chronus, jobs, config)


@pytest.mark.parametrize(
    ("setting", "decisions", "outcomes"),
    [
        # "near" arrives at 1000 and waits for the grid, 1020 (lease 4); at 1200 it is judged
        # and lent a GPU, pays the 0.5 s resume cost, ends at 1210.5 and leaves at 1260. "far"
        # is credited the lease it waited, all its work, and pays the resume cost.
        pytest.param(
            "artifact",
            [0, 240, 1020, 1200, 1260, 1440, 239_760, 239_820],
            {"far": (239_760.0, 239_760.5), "near": (1200.0, 1210.5)},
            id="artifact",
        ),
        # Decided when asked, with no credit and no resume cost: far runs its 100 s.
        pytest.param(
            "slotless",
            [0, 240, 1000, 1200, 1210, 1440, 239_760, 239_860],
            {"far": (239_760.0, 239_860.0), "near": (1200.0, 1210.0)},
            id="slotless",
        ),
    ],
)
def test_idle_boundaries_before_a_deferred_lease_are_skipped_with_the_same_outcomes(
    setting, decisions, outcomes
):
    # 240 s leases. "far" (1 GPU, 100 s: one lease) is due at 240,000 s, lease 1000: judged at
    # 0, planned at 240 into its latest lease, 999 (239,760 s), and left waiting by the
    # artifact's spare rule. Until then only "near" (best effort, 10 s) runs. A decision at
    # every boundary makes 1,003; skipping the idle ones, 8: at 0, at 240 (planned), near's
    # arrival and end, the boundaries that judge it and see it gone, far's lease and its end.
    jobs = [job("far", 0, 100, deadline=240_000.0), job("near", 1000, 10)]
    times: list[float] = []

    class Timed(Chronus):
        def allocate(self, view: ClusterView) -> Decision:
            times.append(view.now)
            return super().allocate(view)

    skipping = _simulate(Timed, setting, jobs)
    stepped = _simulate(_Stepped, setting, jobs)
    assert times == decisions and skipping.decisions == len(decisions)
    assert stepped.decisions == 1003
    assert skipping.outcomes == stepped.outcomes
    assert {o.job_id: (o.start_s, o.finish_s) for o in skipping.outcomes} == outcomes


@pytest.mark.parametrize("setting", ["artifact", "slotless"])
@pytest.mark.parametrize("seed", range(3))
def test_skipping_idle_boundaries_changes_no_outcome_on_generated_traces(setting, seed):
    # Deadlines up to 100 run times on a 4-GPU cluster under twice its load: guaranteed jobs
    # wait for leases far ahead while others come, run on spare workers and go.
    config = GeneratorConfig(jobs=30, load=2.0, cluster_workers=4, tightness=(1.5, 100.0),
                             best_effort_fraction=0.2, seed=seed)  # fmt: skip
    jobs = generate_trace(config, TABLES)
    skipping = _simulate(Chronus, setting, jobs)
    stepped = _simulate(_Stepped, setting, jobs)
    assert skipping.outcomes == stepped.outcomes
    assert skipping.allocation_timeline == stepped.allocation_timeline
    assert skipping.decisions < stepped.decisions
