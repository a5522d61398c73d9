"""Tests for the gandiva policy: hand-computed time slicing and shares, and invariants.

Model ``m`` runs ``g`` iterations/s on ``g`` GPUs, so finish times are easy on paper.
"""

from __future__ import annotations

import pytest
from cluster_helpers import job

from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.gandiva import Gandiva
from qosched.cluster.policies.gandiva_nodesets import NodeSets
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}}})


def test_two_jobs_too_many_for_the_cluster_take_turns_every_quantum():
    # One 4-GPU node; a needs 120 s on its 4 GPUs, b 60 s; the group has one slot.
    jobs = [job("a", 0, 480, workers=4), job("b", 0, 240, workers=4)]
    result = simulate(
        ClusterSpec.from_flags(1, 4),
        TABLES,
        Gandiva(quantum_s=60.0),
        jobs,
        SimConfig(restart_pause_s=0.0, cross_node_factor=1.0),
    )
    finish = {o.job_id: o.finish_s for o in result.outcomes}
    # a: [0, 60) 240 it; b: [60, 120) 240 it, done; a: [120, 180) the other 240 it.
    assert finish == pytest.approx({"a": 180.0, "b": 120.0})


def _states(specs) -> list[JobState]:
    return [JobState(spec, TABLES.curve(spec.model, 64)) for spec in specs]


@pytest.mark.parametrize(("work_conserving", "used"), [(False, 7), (True, 8)])
def test_groups_share_the_cluster_in_proportion_to_their_demand(work_conserving, used):
    # 8 GPUs; five 1-GPU jobs (demand 5) and two 4-GPU jobs (demand 8) of 13 in all:
    # floor(5/13 x 8) = 3 one-GPU slots, floor(8/13 x 8) = 4 GPUs = one 4-GPU slot.
    specs = [job(f"s{i}", 0, 100) for i in range(5)] + [
        job("b0", 0, 100, workers=4),
        job("b1", 0, 100, workers=4),
    ]
    policy = Gandiva(work_conserving=work_conserving)
    decision = policy.allocate(ClusterView(0.0, ClusterSpec.from_flags(2, 4), _states(specs)))
    small = sorted(j for j, g in decision.workers.items() if g == 1)
    assert [decision.workers.get(b) for b in ("b0", "b1")] == [4, None]
    # The spare GPU goes to the next 1-GPU job in arrival order, or stays idle.
    assert small == ["s0", "s1", "s2", "s3"][: used - 4]
    assert decision.wake_at == 600.0  # both groups hold more jobs than slots: next turn


def test_a_group_whose_share_rounds_to_nothing_still_gets_one_slot():
    # 8 GPUs; one 4-GPU job (demand 4) and five 1-GPU jobs (demand 5): floor(4/9 x 8) = 3 GPUs,
    # no 4-GPU slot by share; floor(5/9 x 8) = 4 one-GPU slots leave the 4 GPUs it needs.
    specs = [job("big", 0, 100, workers=4)] + [job(f"s{i}", 0, 100) for i in range(5)]
    decision = Gandiva(work_conserving=False).allocate(
        ClusterView(0.0, ClusterSpec.from_flags(2, 4), _states(specs))
    )
    assert dict(decision.workers) == {"big": 4, "s0": 1, "s1": 1, "s2": 1, "s3": 1}


@pytest.mark.parametrize(("work_conserving", "d_finish"), [(False, 200.0), (True, 100.0)])
def test_node_sets_bind_jobs_to_a_set_and_can_leave_a_gpu_idle(work_conserving, d_finish):
    # Two 2-GPU nodes, four 100 s 1-GPU jobs; a set is one node running 2 jobs at once.
    # a opens S1; b finds S1 at load 1 (1 + 1 is not below 2) and opens S2; c and d find S1
    # refusing again and no free node, so they join S2 behind b: S1 runs a, S2 runs b and c,
    # and d waits for b or c although S1 has an idle GPU.
    jobs = [job(name, 0, 100) for name in "abcd"]
    result = simulate(
        ClusterSpec.from_flags(2, 2),
        TABLES,
        Gandiva(node_sets=True, work_conserving=work_conserving),
        jobs,
        SimConfig(restart_pause_s=0.0, cross_node_factor=1.0),
    )
    finish = {o.job_id: o.finish_s for o in result.outcomes}
    assert finish == pytest.approx({"a": 100.0, "b": 100.0, "c": 100.0, "d": d_finish})


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"quantum_s": None, "work_conserving": False},
        {"node_sets": True},
        {"node_sets": True, "work_conserving": False},
    ],
)
def test_never_exceeds_the_cluster_and_is_deterministic(options):
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=60, load=2.0, cluster_workers=16, seed=3), tables)

    class Checked(Gandiva):
        def allocate(self, view: ClusterView) -> Decision:
            decision = super().allocate(view)
            assert sum(decision.workers.values()) <= view.cluster.total_workers
            return decision

    def outcomes():
        result = simulate(ClusterSpec.from_flags(2, 8), tables, Checked(**options), jobs)
        return [(o.job_id, o.start_s, o.finish_s) for o in result.outcomes]

    first = outcomes()
    assert first == outcomes()
    assert all(finish is not None for _, _, finish in first)


def test_registered_and_rejects_a_bad_quantum():
    assert isinstance(create_policy("gandiva"), Gandiva)
    with pytest.raises(ValueError, match="quantum_s"):
        Gandiva(quantum_s=0.0)


def test_node_sets_slice_time_only_in_a_round_on_the_minute():
    # One 1-GPU node: a opens the set (capacity 1), b queues behind it. A round whose clock is a
    # whole minute moves the job the set ran to its back; any other round leaves the order.
    specs = [job("a", 0, 10_000), job("b", 0, 10_000)]
    cluster = ClusterSpec.from_flags(1, 1)
    policy = Gandiva(node_sets=True, work_conserving=False)
    ran = [
        sorted(policy.allocate(ClusterView(now, cluster, _states(specs))).workers)
        for now in (0.0, 60.0, 90.0, 120.0, 150.0)
    ]
    assert ran == [["a"], ["b"], ["b"], ["a"], ["a"]]


def test_node_sets_resize_groups_smallest_size_first():
    # Three 2-GPU nodes. The 2-GPU jobs come first and open two sets; the four 1-GPU jobs
    # share the third node. Demand 4 and 4 of 6 GPUs: the 2-GPU group's target, 3 GPUs, sheds
    # one set; the 1-GPU group's, 3 GPUs, wants one more node. Resized smallest first, as the
    # artifact's ``node_g`` is ordered, the 1-GPU group finds no free node, and the node the
    # 2-GPU group then frees (its head set's, big0 joining big1) stays free.
    sets = NodeSets(3, 2)
    for job_id, size in [("big0", 2), ("big1", 2), ("s0", 1), ("s1", 1), ("s2", 1), ("s3", 1)]:
        sets.size_of[job_id] = size
        assert sets.place(job_id)
    assert sets.free_nodes == 0
    sets.adjust()
    assert sets.free_nodes == 1
    assert [len(s.jobs) for s in sets.groups[1]] == [4]
    assert [s.jobs for s in sets.groups[2]] == [["big1", "big0"]]


@pytest.mark.parametrize(
    ("ahead", "running"), [(False, ["big0", "big1", "s0", "s1"]), (True, ["big1", "s0", "s1"])]
)
def test_node_sets_adjust_ahead_runs_the_sets_as_resized_at_the_end_of_the_round(ahead, running):
    # The cluster of the test above. The round at 0 places the jobs; resized at its end
    # (``adjust_ahead``, as the artifact credits the interval to the jobs its resized sets
    # run), the 2-GPU group holds one set, big1's, with big0 queued behind it; otherwise both
    # run until the next round.
    specs = [job("big0", 0, 100, workers=2), job("big1", 0, 100, workers=2)] + [
        job(f"s{i}", 0, 100) for i in range(4)
    ]
    policy = Gandiva(node_sets=True, work_conserving=False, adjust_ahead=ahead)
    decision = policy.allocate(ClusterView(1.0, ClusterSpec.from_flags(3, 2), _states(specs)))
    assert sorted(decision.workers) == running


def _timed(job_id: str, submit: float, workers: int, duration: float) -> JobSpec:
    """A job of ``m`` that runs ``duration`` seconds on its ``workers`` GPUs."""
    return JobSpec(job_id, submit, "m", 64, int(workers * duration), None, workers, duration)


def test_artifact_a_job_from_the_waiting_list_owes_no_overhead_after_the_last_arrival():
    # One 2-GPU node, ``--fidelity artifact``: rounds at arrivals, the full overhead (2 + 2
    # (log2 g + 1) s) set at each round that has an arrival still to come. a (2 GPUs, 50 s)
    # opens the node's set at 0 and pays 6 s: ends at 56. b (1 GPU, 100 s) finds no 1-GPU set
    # and no free node: it waits in the waiting list, which the artifact's loop sets no
    # overhead for (only ``running_jobs``) and resets every round (``runnable_jobs``). c (1 GPU,
    # 30 s) is the last arrival: its round, 120, finds a done, places c in a new 1-GPU set
    # and then b (retried as a's set emptied) beside it, and no round after sets an overhead:
    # c ends at 150, b at 120 + 100 = 220 (224 were the 4 s of the round at 0 owed by b).
    jobs = [_timed("a", 0.0, 2, 50.0), _timed("b", 0.0, 1, 100.0), _timed("c", 120.0, 1, 30.0)]
    policy, config = configure("gandiva", "artifact", SimConfig())
    result = simulate(ClusterSpec.from_flags(1, 2), TABLES, policy, jobs, config)
    finish = {o.job_id: o.finish_s for o in result.outcomes}
    assert finish == pytest.approx({"a": 56.0, "b": 220.0, "c": 150.0})


def test_artifact_a_job_started_from_the_waiting_list_never_owes_a_rounds_overhead():
    # Two 1-GPU nodes, ``--fidelity artifact``: 6 s a round for a 2-GPU job, 4 s for a 1-GPU
    # one. a (2 GPUs, 50 s) holds both nodes from 0 and ends at 56; b (1 GPU, 200 s) waits in
    # the waiting list. At 120 d (1 GPU, 1000 s) opens a set on a's freed node and b, retried,
    # the other. At 180 e (1 GPU, 100 s) joins b's set behind it. The round at 240 is on the
    # minute: b's set, having run b, moves it behind e; f (2 GPUs, 10 s) waits in the list.
    # That is the last round with an arrival to come (g, 2 GPUs, 10 s, at 300), and b and f
    # wait across it; a job placed from its arrival would pay the overhead that round set
    # when it next runs, but these, in or from the waiting list (``runnable_jobs``, whose
    # overhead the loop resets every round), never do. b runs 120-240 (2 x 56 s), 300-360 and
    # 420-448 (the set rotates every minute); e 240-300 (56 s) and 360-404; d 3 x 56 s to 300,
    # then the 832 s left: 1132. f gets both nodes at the round after (1140) and ends at 1150;
    # g, skipped by the retry that started f, waits for f's set to empty: 1200-1210.
    # (b at 452 and f at 1156 were the 4 and 6 s of the round at 240 owed.)
    jobs = [
        _timed("a", 0.0, 2, 50.0),
        _timed("b", 0.0, 1, 200.0),
        _timed("d", 120.0, 1, 1000.0),
        _timed("e", 180.0, 1, 100.0),
        _timed("f", 240.0, 2, 10.0),
        _timed("g", 300.0, 2, 10.0),
    ]
    policy, config = configure("gandiva", "artifact", SimConfig())
    result = simulate(ClusterSpec.from_flags(2, 1), TABLES, policy, jobs, config)
    finish = {o.job_id: o.finish_s for o in result.outcomes}
    expected = {"a": 56.0, "b": 448.0, "d": 1132.0, "e": 404.0, "f": 1150.0, "g": 1210.0}
    assert finish == pytest.approx(expected)
