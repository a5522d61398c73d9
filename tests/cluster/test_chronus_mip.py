"""Tests for chronus's MIP lease selection (``Chronus(selection="mip")``, `select_leases`): packings
the greedy selection gets wrong, worked out by hand, the artifact's ``adaptive`` objective in two
small runs, its fallback to the greedy selection, and the plans' invariants on generated cases.

The small runs use the tables of test_chronus.py: model ``m`` runs ``g`` iterations/s on ``g``
GPUs, so with 10 s leases a 4-GPU job of 40 iterations runs 10 s and is planned two leases.
"""

from __future__ import annotations

import math
import random

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import chronus
from qosched.cluster.policies.chronus import Chronus, LeaseFree, _Ask, pack, select_leases
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})


def test_mip_packs_what_greedy_latest_fit_cannot():
    # 4 workers a lease. a and b (2 workers, one lease within 2) go first, being larger than c,
    # and the greedy puts each in its latest-fitting lease: both in lease 1, which leaves c (1
    # worker, both leases) no room there. The MIP splits them: a in 1, b in 0, c in both.
    asks = [_Ask("a", 2, 1, 2), _Ask("b", 2, 1, 2), _Ask("c", 1, 2, 2)]
    assert pack(asks, LeaseFree(4)) is None
    plans = select_leases(asks, 4, "maximize")
    assert plans is not None
    assert sorted([plans["a"], plans["b"]]) == [[0], [1]] and plans["c"] == [0, 1]


@pytest.mark.parametrize(("objective", "now"), [("maximize", "a"), ("minimize", "b")])
def test_mip_objective_puts_the_most_or_the_fewest_guaranteed_workers_in_the_current_lease(
    objective, now
):
    # a (4 workers, one lease within 3) and b (2 workers, two leases within 3) on 4 workers
    # cannot share a lease, so b takes two of the three and a the third: lease 0 holds a (4
    # workers: "maximize") or b (2: "minimize"), never neither.
    plans = select_leases([_Ask("a", 4, 1, 3), _Ask("b", 2, 2, 3)], 4, objective)
    assert plans is not None
    assert [job_id for job_id, plan in plans.items() if plan[0] == 0] == [now]
    assert len(plans["a"]) == 1 and len(plans["b"]) == 2 and plans["a"][0] not in plans["b"]


@pytest.mark.parametrize(
    "asks",
    [
        pytest.param([_Ask("a", 4, 1, 1), _Ask("b", 4, 1, 1)], id="two-whole-leases-in-one"),
        pytest.param([_Ask("a", 1, 3, 2)], id="more-leases-than-before-the-deadline"),
        pytest.param([_Ask("a", 8, 1, 5)], id="larger-than-the-cluster"),
    ],
)
def test_mip_finds_no_plan_where_there_is_none(asks):
    assert select_leases(asks, 4, "minimize") is None


def test_a_far_deadline_makes_a_small_mip():
    # The horizon of the furthest job is cut to the leases it can need past the others' (10**7
    # leases would be 10**7 variables): still one lease each, within the deadlines.
    asks = [_Ask("far", 4, 1, 10**7), _Ask("near", 4, 2, 3)]
    plans = select_leases(asks, 4, "minimize")
    assert plans is not None
    assert plans["near"] == [1, 2] and len(plans["far"]) == 1 and plans["far"][0] >= 3


def test_mip_with_nothing_else_to_serve_runs_a_guaranteed_job_at_once():
    # a (deadline 40) is judged at 0 against leases 1..3 and guaranteed. At 10 no other job
    # waits, so the artifact's adaptive objective is "maximize": the MIP puts a lease in the
    # current one and a runs 10..20. The greedy selection plans its latest leases, 2 and 3,
    # and under the artifact's spare rule a waits for them: 20..30.
    jobs = [job("a", 0, 40, workers=4, deadline=40)]
    assert run(Chronus(lease_s=10.0, spare="artifact", selection="mip"), jobs) == {
        "a": (10.0, 20.0)
    }
    assert run(Chronus(lease_s=10.0, spare="artifact"), jobs) == {"a": (20.0, 30.0)}


def test_mip_keeps_the_current_lease_spare_while_another_deadline_job_can_use_it():
    # b (deadline 30) arrives with a and is not guaranteed (test_chronus.py), but can still meet
    # its deadline: at 10 the objective is "minimize", and a's leases go to the latest two.
    jobs = [job("a", 0, 40, workers=4, deadline=40), job("b", 0, 40, workers=4, deadline=30)]
    policy = Chronus(lease_s=10.0, spare="artifact", selection="mip")
    assert run(policy, jobs) == {"a": (20.0, 30.0), "b": (0.0, 10.0)}


def run(policy: Chronus, jobs: list[JobSpec]) -> dict[str, tuple[float | None, float | None]]:
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, policy, jobs,
                      SimConfig(restart_pause_s=0.0, cross_node_factor=1.0))  # fmt: skip
    return {o.job_id: (o.start_s, o.finish_s) for o in result.outcomes}


def _generated(seed: int, jobs: int = 60):
    tables = ThroughputModel.bundled()
    config = GeneratorConfig(jobs=jobs, load=2.0, cluster_workers=16, seed=seed)
    return tables, generate_trace(config, tables)


def _outcomes(policy: Chronus, seed: int) -> list:
    tables, jobs = _generated(seed)
    config = SimConfig(cross_node_factor=1.0, artifact=ArtifactConfig(restart_model="none"))
    return list(simulate(ClusterSpec.from_flags(2, 8), tables, policy, jobs, config).outcomes)


def test_where_the_mip_finds_no_plan_the_greedy_selection_decides(monkeypatch):
    # The artifact's MIP yields None values when it finds no plan; its use of them raises and
    # its bare `except` takes the greedy path. A MIP that never finds one is the greedy policy.
    options = {"spare": "artifact", "credit_waited_lease": True, "charge_resumes": True}
    mip = Chronus(selection="mip", **options)
    monkeypatch.setattr(chronus, "select_leases", lambda *args: None)
    assert _outcomes(mip, 5) == _outcomes(Chronus(**options), 5)


class _Checked(Chronus):
    """Chronus checking, after every decision, that the plans in force fit every lease and end
    before their jobs' deadlines."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.deadlines: dict[str, float | None] = {}
        self.boundaries = 0

    def allocate(self, view: ClusterView) -> Decision:
        self.deadlines.update((j.job_id, j.spec.deadline_s) for j in view.jobs)
        decision = super().allocate(view)
        total = view.cluster.total_workers
        assert sum(decision.workers.values()) <= total
        assert all(0 < held <= total for held in self._held.values())
        for job_id, state in self._jobs.items():
            if state.plan:
                deadline = self.deadlines[job_id]
                assert deadline is not None and state.guaranteed
                assert state.plan == sorted(set(state.plan)) and state.plan[0] >= self._base
                # The plan's leases (numbered by boundary) end by the deadline's lease.
                assert state.plan[-1] < math.floor(deadline / self.lease_s + 1e-6)
                assert len(state.plan) == state.leases_left
        self.boundaries = self._lease_index
        return decision


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_mip_plans_fit_every_lease_and_every_deadline_on_generated_traces(seed):
    policy = _Checked(selection="mip", spare="artifact")
    outcomes = _outcomes(policy, seed)
    assert policy.boundaries > 10 and all(o.finish_s is not None for o in outcomes)
    assert _outcomes(_Checked(selection="mip", spare="artifact"), seed) == outcomes


def test_mip_selection_changes_outcomes_on_a_generated_trace():
    # Not a copy of the greedy selection: on an overloaded trace they differ.
    greedy = _outcomes(Chronus(spare="artifact"), 1)
    assert _outcomes(Chronus(spare="artifact", selection="mip"), 1) != greedy


@pytest.mark.parametrize("seed", range(40))
def test_random_mip_plans_respect_capacity_and_horizons_and_fit_where_greedy_does(seed):
    rng = random.Random(seed)
    capacity = rng.choice([4, 8])
    asks = []
    for i in range(rng.randint(1, 6)):
        horizon = rng.randint(1, 6)
        asks.append(_Ask(str(i), rng.choice([1, 2, 4, 8]), rng.randint(1, horizon), horizon))
    objective = rng.choice(["minimize", "maximize"])
    plans = select_leases(asks, capacity, objective)
    if pack(asks, LeaseFree(capacity)) is not None:
        assert plans is not None  # the MIP is exact: whatever the greedy packs, it packs
    if plans is None:
        return
    load = [0] * max(ask.horizon for ask in asks)
    for ask in asks:
        plan = plans[ask.job_id]
        assert len(plan) == ask.leases == len(set(plan))
        assert all(0 <= lease < ask.horizon for lease in plan)
        for lease in plan:
            load[lease] += ask.size
    assert max(load) <= capacity


def test_the_fidelity_keeps_the_selection_it_is_given():
    policy, _ = configure("chronus", "artifact", SimConfig(), {"selection": "mip"})
    assert isinstance(policy, Chronus)
    chosen = (policy.selection, policy.spare, policy.charge_resumes, policy.whole_second_estimates)
    assert chosen == ("mip", "artifact", True, True)
    assert configure("chronus", "sound", SimConfig())[0].selection == "greedy"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"selection": "exact"}, "selection"), ({"mip_time_limit_s": 0.0}, "mip_time_limit_s")],
)
def test_rejects_bad_mip_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Chronus(**kwargs)


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="objective"):
        select_leases([_Ask("a", 1, 1, 1)], 4, "random")
