"""Themis (finish-time fairness): the minimax fractions by hand, and the policy in the simulator."""

from __future__ import annotations

import sys

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.policies.themis import (
    FairnessTerms,
    Themis,
    ecos_fractions,
    minimax_fractions,
)
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})


def test_minimax_equalises_ratios_when_the_cluster_is_short():
    # One worker for two one-worker jobs. Ratios 1/x and 0.5/x are equal at x = (2/3, 1/3).
    first = FairnessTerms(waited_s=0.0, work=100.0, speed=1.0, alone=100.0, workers=1)
    second = FairnessTerms(waited_s=0.0, work=100.0, speed=1.0, alone=200.0, workers=1)
    fractions = minimax_fractions([first, second], capacity=1)
    assert fractions == pytest.approx([2 / 3, 1 / 3], rel=1e-9)


def test_minimax_with_room_to_spare_gives_the_fraction_that_meets_the_worst_ratio():
    # The waiting job's ratio at x = 1 is (100 + 100) / 100 = 2, the bound; the fresh job meets
    # a ratio of 2 at x = 100 / 200.
    waiting = FairnessTerms(waited_s=100.0, work=100.0, speed=1.0, alone=100.0, workers=1)
    fresh = FairnessTerms(waited_s=0.0, work=100.0, speed=1.0, alone=100.0, workers=1)
    assert minimax_fractions([waiting, fresh], capacity=8) == pytest.approx([1.0, 0.5])


def test_minimax_respects_the_cluster():
    terms = [
        FairnessTerms(waited_s=10.0 * i, work=50.0 + i, speed=1.0 + i, alone=80.0, workers=w)
        for i, w in enumerate((1, 2, 4, 8, 2))
    ]
    fractions = minimax_fractions(terms, capacity=6)
    assert all(0 < x <= 1 for x in fractions)
    assert sum(t.workers * x for t, x in zip(terms, fractions, strict=True)) <= 6 + 1e-9


def test_a_waiting_job_takes_the_cluster_from_one_that_has_run():
    # Both want all 4 workers for 600 s. At t = 60 the one that ran has banked 240 iterations at
    # its isolated 2 it/s: ratios (60 + 540/x)/1200 against (60 + 600/x)/1200, so the waiting one
    # gets the larger fraction and runs. The two share the cluster: neither ends before the 19th
    # round, where one running alone would end at 600 s.
    jobs = [job("a", 0.0, 2400, workers=4), job("b", 0.0, 2400, workers=4)]
    result = simulate(
        ClusterSpec.from_flags(1, 4), TABLES, Themis(), jobs, SimConfig(restart_pause_s=0.0)
    )
    outcomes = {o.job_id: o for o in result.outcomes}
    assert sorted(o.start_s for o in outcomes.values()) == [0.0, 60.0]
    assert all(1140.0 <= o.finish_s <= 1200.0 for o in outcomes.values())


@pytest.mark.parametrize(
    ("slot_end", "finishes", "met"),
    [
        (False, {"a": 100.0, "b": 130.0}, {"a": True, "b": True}),
        (True, {"a": 120.0, "b": 180.0}, {"a": False, "b": True}),
    ],
    ids=["exact-second", "slot-end"],
)
def test_a_job_ends_and_is_judged_at_the_end_of_the_slot_its_work_runs_out_in(
    slot_end, finishes, met
):
    # Both fit the 4 workers and run from t = 0 at 1 it/s; decisions every 60 s (0, 60, 120,
    # 180). a's 100 iterations run out at 100 s, in the slot [60, 120); b's 130 in [120, 180).
    # At the slot end a misses its 110 s deadline, b meets its 180 s one exactly.
    jobs = [job("a", 0.0, 100, deadline=110.0), job("b", 0.0, 130, deadline=180.0)]
    config = SimConfig(
        artifact=ArtifactConfig(
            restart_model="none", decision_slot_s=60.0, finish_at_slot_end=slot_end
        )
    )
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, Themis(ratio="artifact"), jobs, config)
    assert {o.job_id: o.finish_s for o in result.outcomes} == finishes
    assert {o.job_id: o.met_deadline for o in result.outcomes} == met


def test_finish_at_slot_end_needs_a_slot():
    with pytest.raises(InputError):
        SimConfig(artifact=ArtifactConfig(finish_at_slot_end=True))


# Round 4 (t = 180 s) of the ElasticFlow artifact's Themis on the generated g400 trace (8x8 A100
# GPUs, docs/results/fidelity.md), dumped from its loop: per job (waited s, iterations left,
# iterations/s on its GPUs, banked isolated time + left / isolated fraction, GPUs), and the x
# cvxpy 1.9.3 + ECOS 2.0.14 returned for it.
_ARTIFACT_ROUND = [
    FairnessTerms(
        88.0, 5238.262010771245, 2.5622998204792498, 153.7379892287554 + 5238.262010771245, 1
    ),
    FairnessTerms(
        180.0, 64681.34502591021, 13.3925276338322, 2410.65497408979 + 64681.34502591021, 8
    ),
    FairnessTerms(59.0, 22233.0, 3.5749256045333064, 22233.0, 1),
]
_ARTIFACT_X = [0.9999999999576553, 0.716923223719278, 0.882762326331934]


def test_ecos_returns_the_artifacts_point_where_the_minimax_has_many():
    # The worst ratio is job 0's at x = 1; the cluster (64 GPUs) has room for the others to
    # meet it with less, so any larger x is optimal too: both points reach the same worst
    # ratio, and the 8-GPU job's x is 0.18 at the least sufficient fraction, 0.72 at ECOS's.
    x = ecos_fractions(_ARTIFACT_ROUND, 64)
    assert x == pytest.approx(_ARTIFACT_X, rel=1e-9)
    closed = minimax_fractions(_ARTIFACT_ROUND, 64)
    worst = max(t.ratio(f) for t, f in zip(_ARTIFACT_ROUND, x, strict=True))
    assert max(t.ratio(f) for t, f in zip(_ARTIFACT_ROUND, closed, strict=True)) == (
        pytest.approx(worst, rel=1e-6)
    )
    assert closed[1] < 0.2 < 0.7 < x[1]


def test_ecos_solver_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "ecos", None)
    with pytest.raises(InputError, match="pip install 'qosched\\[fidelity\\]'"):
        ecos_fractions(_ARTIFACT_ROUND, 64)
    # Before a run starts, not at its first decision.
    with pytest.raises(InputError, match="ecos"):
        Themis(solver="ecos")


class _Recording(Themis):
    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.decisions: list[tuple[float, Decision]] = []

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)
        self.decisions.append((view.now, decision))
        return decision


@pytest.mark.parametrize("ratio", ["sound", "artifact"])
def test_never_more_workers_than_the_cluster_and_deterministic(ratio):
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=40, load=2.0, cluster_workers=16, seed=3), tables)
    runs = []
    for _ in range(2):
        policy = _Recording(ratio=ratio)
        result = simulate(ClusterSpec.from_flags(2, 8), tables, policy, jobs)
        assert all(sum(d.workers.values()) <= 16 for _, d in policy.decisions)
        runs.append([(o.job_id, o.start_s, o.finish_s) for o in result.outcomes])
    assert runs[0] == runs[1]
    assert all(finish is not None for _, _, finish in runs[0])


def test_registered_and_set_to_the_artifact_by_fidelity():
    assert "themis" in policy_names()
    assert create_policy("themis").ratio == "sound"
    policy, config = configure("themis", "artifact", SimConfig())
    assert policy.ratio == "artifact" and policy.solver == "ecos"
    assert create_policy("themis").solver == "closed-form"
    assert config.artifact.restart_model == "none" and config.artifact.decision_slot_s == 60.0
    assert config.artifact.finish_at_slot_end and not SimConfig().artifact.finish_at_slot_end


@pytest.mark.parametrize("options", [{"ratio": "fair"}, {"round_s": 0.0}, {"solver": "cvx"}])
def test_rejects_bad_options(options):
    with pytest.raises(ValueError):
        Themis(**options)
