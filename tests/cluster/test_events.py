"""The event-driven policy interface (qosched.cluster.policies.events) as the simulator drives it:
what each call is told, what an answer may name, the full-view adapter, and the native fifo and
edf against themselves through the adapter."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.baselines import Fifo
from qosched.cluster.policies.events import (
    AdmitsAll,
    Changes,
    Delta,
    FullView,
    as_event_policy,
)
from qosched.cluster.policies.qos import QualityOfService
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import SimulationError

# Model m runs g iterations/s on g workers.
TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}}})
BUNDLED = ThroughputModel.bundled()


class Native(AdmitsAll):
    """A test-only native policy: its answers come from a function of the changes, and it
    records every call's changes."""

    name = "test-native"
    largest_first = False
    honours_requests = True
    admits_together = False

    def __init__(self, answer: Callable[[Changes], Delta], reads_progress: bool = False) -> None:
        self.answer = answer
        self.reads_progress = reads_progress
        self.calls: list[Changes] = []
        self.seen: list[dict[str, float]] = []  # each call: iterations done per arrived job so far

    def decide(self, changes: Changes) -> Delta:
        self.calls.append(changes)
        jobs = [j for c in self.calls for j in c.arrived]
        self.seen.append({j.job_id: j.iterations_done for j in jobs})
        return self.answer(changes)

    def allocations(self) -> Sequence[tuple[str, int]]:
        raise AssertionError("no re-pack is needed on one node")


ONE_NODE = ClusterSpec.from_flags(1, 8)


def run(policy, jobs, config: SimConfig | None = None, cluster: ClusterSpec = ONE_NODE):
    result = simulate(cluster, TABLES, policy, jobs, config or SimConfig(restart_pause_s=0.0))
    return {o.job_id: o for o in result.outcomes}


# --- what each call is told ----------------------------------------------------------------------


def test_each_call_is_told_what_changed_since_the_last_and_only_that():
    """a (100 iterations on 1 worker) from 0, b (50 on 2) from 10, and a wake-up asked for at 30.
    Calls: t=0 a arrives (and the capacity); t=10 b arrives; t=30 the wake-up; t=35 b ends
    (10 + 50/2); t=100 a ends."""

    def answer(changes: Changes) -> Delta:
        wake = 30.0 if changes.now == 10.0 else None
        return Delta({j.job_id: j.spec.requested_workers for j in changes.arrived}, wake)

    policy = Native(answer)
    out = run(policy, [job("a", 0.0, 100), job("b", 10.0, 50, workers=2)])
    told = [
        (
            c.now,
            [j.job_id for j in c.arrived],
            [j.job_id for j in c.ended],
            c.woke,
            c.capacity is not None,
        )
        for c in policy.calls
    ]
    assert told == [
        (0.0, ["a"], [], False, True),
        (10.0, ["b"], [], False, False),
        (30.0, [], [], True, False),
        (35.0, [], ["b"], False, False),
        (100.0, [], ["a"], False, False),
    ]
    assert (out["a"].finish_s, out["b"].finish_s) == (100.0, 35.0)


def test_a_job_an_answer_does_not_name_keeps_its_workers():
    """a gets 1 worker at 0 and is never named again; b's count changes at 10 and 20: a still
    ends at 100 on its one worker, with no reallocation."""

    def answer(changes: Changes) -> Delta:
        counts = {0.0: {"a": 1}, 10.0: {"b": 4}, 20.0: {"b": 2}}
        return Delta(counts.get(changes.now, {}), 20.0 if changes.now == 10.0 else None)

    out = run(Native(answer), [job("a", 0.0, 100), job("b", 10.0, 200, workers=4)])
    assert (out["a"].finish_s, out["a"].reallocations) == (100.0, 0)
    # b: 40 iterations from 10 to 20 on 4, then 160 on 2: ends at 100.
    assert (out["b"].finish_s, out["b"].reallocations) == (100.0, 1)


@pytest.mark.parametrize(("reads_progress", "a_done_at_10"), [(False, 0.0), (True, 10.0)])
def test_progress_is_brought_up_to_date_at_every_call_only_for_a_policy_that_reads_it(
    reads_progress, a_done_at_10
):
    """a runs on 1 worker from 0; at b's arrival (t=10) a has run 10 iterations. A policy that
    does not read progress is not handed it: a's record still says 0 there. Either way a's
    outcome is the same."""

    def answer(changes: Changes) -> Delta:
        return Delta({j.job_id: 1 for j in changes.arrived})

    policy = Native(answer, reads_progress=reads_progress)
    out = run(policy, [job("a", 0.0, 100), job("b", 10.0, 50)])
    assert policy.seen[1]["a"] == a_done_at_10
    assert (out["a"].finish_s, out["b"].finish_s) == (100.0, 60.0)


# (id, answer at t=0 naming a on 8 workers and b, message)
BAD_ANSWERS = {
    "over-the-cluster-with-what-is-held": (
        lambda c: Delta({"a": 8} if c.now == 0.0 else {"b": 1}),
        "allocated 9 GPUs",
    ),
    "unknown-job": (lambda c: Delta({"ghost": 0}), "ghost"),
    "negative-count": (lambda c: Delta({"a": -1}), "-1"),
    "count-without-speed": (lambda c: Delta({"a": 16}), "no measured speed"),
    "wake-now": (lambda c: Delta({}, c.now), "not in the future"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_a_bad_answer_is_an_error_naming_the_policy(case):
    answer, message = BAD_ANSWERS[case]
    with pytest.raises(SimulationError, match=message) as error:
        run(Native(answer), [job("a", 0.0, 100), job("b", 10.0, 50)])
    assert "test-native" in str(error.value)


# --- which way a policy is driven ----------------------------------------------------------------


class _Overrides(Fifo):
    name = "test-overrides"

    def allocate(self, view: ClusterView) -> Decision:
        return Decision({j.job_id: 1 for j in view.jobs})


def test_a_native_policy_is_driven_natively_and_a_full_view_one_through_the_adapter():
    fifo, srtf = create_policy("fifo"), create_policy("srtf")
    assert as_event_policy(fifo) is fifo
    assert isinstance(as_event_policy(srtf), FullView)
    # A subclass that overrides allocate below decide meant its allocate.
    overrides = as_event_policy(_Overrides())
    assert isinstance(overrides, FullView)
    out = run(overrides, [job("a", 0.0, 100, workers=4)])
    assert out["a"].finish_s == 100.0  # on 1 worker, not the 4 fifo would give it


def test_the_adapter_answers_with_the_difference_from_what_jobs_hold():
    """A full-view decision that repeats a held count, changes one and drops one: the answer
    names the changed and the dropped (0) only, in the decision's order."""
    jobs = [job("a", 0.0, 100), job("b", 0.0, 100), job("c", 0.0, 100)]
    states = simulate_states(jobs)
    states["a"].workers, states["b"].workers, states["c"].workers = 1, 2, 1
    view = ClusterView(0.0, ONE_NODE, tuple(states.values()))

    class Full:
        name, largest_first, honours_requests, admits_together = "full", False, True, False

        def allocate(self, view: ClusterView) -> Decision:
            return Decision({"b": 4, "a": 1, "ghost": 0}, wake_at=9.0)

    delta = FullView(Full()).decide(Changes(0.0, view=lambda: view))
    assert list(delta.workers.items()) == [("b", 4), ("ghost", 0), ("c", 0)]
    assert delta.wake_at == 9.0


def simulate_states(jobs):
    from qosched.cluster.state import JobState

    return {j.job_id: JobState(j, TABLES.curve(j.model, j.batch_size)) for j in jobs}


# --- the native fifo and edf against themselves through the adapter ------------------------------


class _Eager:
    """A native policy with its progress brought up to date at every call, as the adapter's is:
    the same arithmetic as the full view, so the outcomes are equal to the last bit."""

    reads_progress = True

    def __init__(self, policy) -> None:
        self._policy = policy

    def __getattr__(self, name: str):
        return getattr(self._policy, name)

    def on_arrival(self, job, view):
        return self._policy.on_arrival(job, view)

    def on_arrivals(self, jobs, view):
        return self._policy.on_arrivals(jobs, view)

    def decide(self, changes: Changes) -> Delta:
        return self._policy.decide(changes)

    def allocations(self):
        return self._policy.allocations()


TRACES = {
    "load-1": (1.0, 11),
    "load-2": (2.0, 12),
    "load-3-small-cluster": (3.0, 13),
}


def _generated(case: str):
    load, seed = TRACES[case]
    config = GeneratorConfig(jobs=200, load=load, cluster_workers=32, seed=seed)
    return generate_trace(config, BUNDLED)


@pytest.mark.parametrize("fidelity", ["sound", "artifact"])
@pytest.mark.parametrize("case", list(TRACES))
@pytest.mark.parametrize("name", ["fifo", "edf"])
def test_native_fifo_and_edf_decide_as_their_full_view(name, case, fidelity):
    """Native with eager progress: every outcome equal to the adapter's, to the last bit (the
    answers, the placement of the changed jobs alone, re-packs and all). With lazy progress the
    same jobs meet the same deadlines with the same reallocations and decisions; times differ
    at most by float rounding (one product for a job's progress instead of a sum over every
    event in between)."""
    trace = _generated(case)
    cluster = ClusterSpec.from_flags(4, 8)

    def outcomes(wrap):
        policy, config = configure(name, fidelity, SimConfig())
        result = simulate(cluster, BUNDLED, wrap(policy), trace, config)
        return result, {o.job_id: o for o in result.outcomes}

    full, full_out = outcomes(FullView)
    eager, eager_out = outcomes(_Eager)
    lazy, lazy_out = outcomes(lambda p: p)
    assert eager_out == full_out
    assert eager.decisions == full.decisions == lazy.decisions
    for job_id, want in full_out.items():
        got = lazy_out[job_id]
        assert (got.met_deadline, got.declined, got.reallocations) == (
            want.met_deadline,
            want.declined,
            want.reallocations,
        ), job_id
        assert got.finish_s == pytest.approx(want.finish_s, rel=1e-12), job_id
        assert got.start_s == pytest.approx(want.start_s, rel=1e-12), job_id
        assert got.worker_seconds == pytest.approx(want.worker_seconds, rel=1e-9), job_id


def test_native_fifo_reports_the_order_its_full_view_places_in():
    """allocations(), asked for a re-pack, is the order allocate() would give: the jobs running
    before the call in arrival order, then those started."""
    fifo = Fifo()
    jobs = simulate_states([job("a", 0.0, 10, workers=4), job("b", 1.0, 10), job("c", 2.0, 10)])
    fifo.decide(Changes(0.0, [jobs["a"]], capacity=ONE_NODE))
    fifo.decide(Changes(2.0, [jobs["b"], jobs["c"]]))
    assert list(fifo.allocations()) == [("a", 4), ("b", 1), ("c", 1)]
    jobs["a"].workers = 4
    view = ClusterView(2.0, ONE_NODE, tuple(jobs.values()))
    assert list(fifo.allocations()) == list(Fifo().allocate(view).workers.items())


def test_the_artifact_edf_runs_natively_with_its_quota():
    policy, config = configure("edf", "artifact", SimConfig())
    assert as_event_policy(policy) is policy
    assert config.artifact == ArtifactConfig(restart_model="none", decision_slot_s=60.0)
    out = run(policy, [job("a", 0.0, 800, deadline=1000.0)], config)
    assert out["a"].finish_s == 100.0  # its quota is 8 workers, though it asked for 1


# --- the native qos against itself through the adapter -------------------------------------------


@pytest.mark.parametrize("fidelity", ["sound", "artifact", "hidden"])
@pytest.mark.parametrize("case", list(TRACES))
def test_native_qos_decides_as_its_full_view(case, fidelity):
    """qos is driven natively, and every outcome is the adapter's to the last bit: it reads
    progress, so the backend keeps progress current for it as for the adapter, and its answer
    names what its full decision changes, in the order the adapter names it. "hidden": speeds
    off the tables with noise, so its predictors learn and its guarantees move."""
    trace = _generated(case)
    cluster = ClusterSpec.from_flags(4, 8)
    base = SimConfig()
    if fidelity == "hidden":
        base = SimConfig(speed_sigma=0.3, scaling_sigma=0.1, noise=0.05, seed=3)

    def outcomes(wrap):
        policy, config = configure("qos", "artifact" if fidelity == "artifact" else "sound", base)
        driven = wrap(policy)
        result = simulate(cluster, BUNDLED, driven, trace, config)
        return driven, result, {o.job_id: o for o in result.outcomes}

    _, full, full_out = outcomes(FullView)
    native_policy, native, native_out = outcomes(lambda p: p)
    assert as_event_policy(native_policy) is native_policy
    assert native.decisions == full.decisions
    assert native.allocation_timeline == full.allocation_timeline
    assert native_out == full_out


def _qos_states(*specs):
    from qosched.cluster.state import JobState

    return [JobState(spec, TABLES.curve(spec.model, spec.batch_size)) for spec in specs]


def test_native_qos_names_only_the_counts_that_change():
    """Two best-effort jobs of 100,000 iterations on one node of 8 (model m: g iterations/s on
    g workers). The first answer starts both (the spare is shared: 4 each); asked again later
    with nothing changed and the counts held, it names nothing; once a job ends, it names the
    other's new count alone, and a job the backend displaced is named again."""
    policy = QualityOfService(tick_s=1e9)
    a, b = _qos_states(job("a", 0.0, 100_000), job("b", 0.0, 100_000))
    view_jobs = [a, b]

    def changes(now, **kwargs):
        return Changes(
            now, view=lambda: ClusterView(now, ONE_NODE, tuple(view_jobs), 0.0), **kwargs
        )

    for state in (a, b):
        assert policy.on_arrival(state, lambda: ClusterView(0.0, ONE_NODE, (), 0.0))
    first = policy.decide(changes(0.0, arrived=[a, b], capacity=ONE_NODE))
    assert dict(first.workers) == {"a": 4, "b": 4}
    for state in (a, b):
        state.workers, state.started_s, state.phase = 4, 0.0, state.phase.RUNNING
    assert dict(policy.decide(changes(10.0)).workers) == {}
    assert sorted(policy.allocations()) == [("a", 4), ("b", 4)]
    # b is displaced: it holds nothing now, and the next answer gives it its count again.
    b.workers = 0
    assert dict(policy.decide(changes(20.0, displaced=[b])).workers) == {"b": 4}
    b.workers = 4
    # a ends: b alone is re-sized (to the whole node), a is not named.
    view_jobs.remove(a)
    after = policy.decide(changes(30.0, ended=[a]))
    assert dict(after.workers) == {"b": 8}
    assert list(policy.allocations()) == [("b", 8)]
