"""A burst of arrivals judged at once (`admit_arrivals`) against the same burst judged one by one
as a backend did it (`admit_job` per arrival, each with a view of the jobs before it that were
not declined): the same admissions, the same guarantees, and the same decisions after, on seeded
generated bursts onto a cluster already running guaranteed jobs."""

from __future__ import annotations

import dataclasses
import random

import pytest

from qosched.cluster.admission import Admission, AdmissionFailed, admit_arrivals, admit_job
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.policies.base import Policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, JobState, Phase
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel.bundled("A100")
CLUSTER = ClusterSpec.from_flags(4, 8)
PAUSE_S = 30.0
#: When the burst arrives: the running jobs started at 0 and ran until then.
BURST_AT = 900.0


@dataclasses.dataclass
class Scenario:
    """Jobs running since 0 (admitted then) and a burst arriving at ``BURST_AT``."""

    running: list[JobState]
    burst: list[JobState]
    best_effort: dict[str, bool]
    # each job's true speed over its table's: slower ones break the reservations planned on it
    speed: dict[str, float]


def scenario(seed: int, arrivals: int) -> Scenario:
    """The same jobs, as new objects, for each call with the same arguments."""
    rng = random.Random(seed)
    models = sorted(TABLES.models)

    def make(job_id: str, submit: float, deadline_in: float | None) -> JobState:
        model = rng.choice(models)
        curve = TABLES.curve(model, rng.choice(TABLES.batch_sizes(model)))
        iterations = int(curve.rate(curve.max_workers) * rng.uniform(300.0, 5_000.0)) + 1
        deadline = None if deadline_in is None else submit + deadline_in
        spec = JobSpec(job_id, submit, model, curve.batch_size, iterations, deadline, 1)
        return JobState(spec, curve)

    def deadline_in() -> float | None:
        kind = rng.random()
        if kind < 0.15:
            return None  # best effort by nature
        if kind < 0.25:
            return rng.uniform(5.0, 60.0)  # hopeless
        return rng.uniform(600.0, 20_000.0)

    running = [make(f"run{i:02d}", 0.0, deadline_in()) for i in range(rng.randint(4, 10))]
    # Many arrivals share a deadline, as jobs created in the same second with the same terms do.
    burst = []
    for i in range(arrivals):
        shared = burst and rng.random() < 0.2
        job = make(f"new{i:03d}", BURST_AT, deadline_in())
        if shared:
            spec = dataclasses.replace(job.spec, deadline_s=burst[-1].spec.deadline_s)
            job = JobState(spec, job.curve)
        burst.append(job)
    best_effort = {j.job_id: rng.random() < 0.5 for j in running + burst}
    speed = {j.job_id: rng.uniform(0.4, 1.1) for j in running + burst}
    return Scenario(running, burst, best_effort, speed)


def one_by_one(policy: Policy, jobs, view: ClusterView, best_effort) -> dict[str, Admission]:
    """How the Kubernetes scheduler admitted a burst: each job with a view of its own."""
    known, answers = list(view.jobs), {}
    for job in jobs:
        others = dataclasses.replace(view, jobs=list(known))
        answers[job.job_id] = admit_job(policy, job, others, best_effort=best_effort[job.job_id])
        if answers[job.job_id] is not Admission.DECLINED:
            known.append(job)
    return answers


def at_once(policy: Policy, jobs, view: ClusterView, best_effort) -> dict[str, Admission]:
    return admit_arrivals(policy, jobs, view, best_effort=lambda job: best_effort[job.job_id])


def apply(
    decision: Decision, jobs: list[JobState], now: float, until: float, speed: dict[str, float]
) -> None:
    """The backend's part: each job runs on its count from ``now`` to ``until``."""
    for job in jobs:
        count = decision.workers.get(job.job_id, 0)
        if count != job.workers:
            job.resume_s = now + PAUSE_S
        job.workers = count
        job.phase = Phase.RUNNING if count else Phase.PENDING
        if count:
            job.started_s = now if job.started_s is None else job.started_s
            ran = max(0.0, until - max(now, job.resume_s))
            job.active_s += ran
            job.iterations_done = min(
                job.spec.iterations - 1.0,
                job.iterations_done + ran * job.curve.rate(count) * speed[job.job_id],
            )
        job.last_update_s = until


def run(seed: int, arrivals: int, *, together: bool, decide_first: bool) -> list:
    """Everything the policy answers: at 0 the running jobs' admissions and a decision, then
    the burst's admissions at ``BURST_AT`` (after a decision at that instant with
    ``decide_first``), then the decisions at the burst and 600 s after."""
    case = scenario(seed, arrivals)
    policy = create_policy("qos")
    seen: list = []
    view = ClusterView(0.0, CLUSTER, [], PAUSE_S)
    seen.append(one_by_one(policy, case.running, view, case.best_effort))
    running = [j for j in case.running if seen[-1][j.job_id] is not Admission.DECLINED]
    decision = policy.allocate(ClusterView(0.0, CLUSTER, running, PAUSE_S))
    apply(decision, running, 0.0, BURST_AT, case.speed)
    view = ClusterView(BURST_AT, CLUSTER, running, PAUSE_S)
    if decide_first:
        seen.append(policy.allocate(view))
        apply(seen[-1], running, BURST_AT, BURST_AT, case.speed)
    if together:
        answers = at_once(policy, case.burst, view, case.best_effort)
    else:
        answers = one_by_one(policy, case.burst, view, case.best_effort)
    seen.append(list(answers.items()))  # in arrival order
    seen.append({j.job_id: policy.is_guaranteed(j.job_id) for j in running + case.burst})
    jobs = running + [j for j in case.burst if answers[j.job_id] is not Admission.DECLINED]
    for now in (BURST_AT, BURST_AT + 600.0):
        decision = policy.allocate(ClusterView(now, CLUSTER, jobs, PAUSE_S))
        seen.append((list(decision.workers.items()), decision.wake_at, decision.pinned))
        seen.append({j.job_id: policy.is_guaranteed(j.job_id) for j in jobs})
        apply(decision, jobs, now, now + 600.0, case.speed)
    return seen


@pytest.mark.parametrize("decide_first", [False, True], ids=["new-instant", "after-decision"])
@pytest.mark.parametrize("seed", range(6))
def test_qos_admits_a_burst_at_once_as_one_by_one(seed, decide_first):
    reference = run(seed, 80, together=False, decide_first=decide_first)
    assert run(seed, 80, together=True, decide_first=decide_first) == reference
    # The burst is a real test: some arrivals guaranteed, some not, some declined.
    kinds = {admission for _, admission in reference[-6]}  # the burst's answers
    assert kinds == set(Admission), kinds


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_admits_a_burst_at_once_as_one_by_one(name):
    """Policies without their own ``admit_arrivals`` are asked ``admit`` job by job."""
    answers = []
    for together in (False, True):
        case = scenario(7, 12)
        policy = create_policy(name)
        view = ClusterView(BURST_AT, CLUSTER, [], PAUSE_S)
        if together:
            got = at_once(policy, case.burst, view, case.best_effort)
        else:
            got = one_by_one(policy, case.burst, view, case.best_effort)
        guaranteed = {j.job_id: policy.is_guaranteed(j.job_id) for j in case.burst}
        answers.append((list(got.items()), guaranteed))
    assert answers[1] == answers[0]


class FailsOnSecond(Policy):
    name = "fails-on-second"

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    def admit(self, job: JobState, view: ClusterView) -> bool:
        self.asked.append((job.job_id, [j.job_id for j in view.jobs]))
        if len(self.asked) == 2:
            raise RuntimeError("broken")
        return True

    def allocate(self, view: ClusterView) -> Decision:
        return Decision()


def test_a_policy_error_names_the_job_and_keeps_the_answers_before_it():
    case = scenario(3, 3)
    policy = FailsOnSecond()
    view = ClusterView(BURST_AT, CLUSTER, [], PAUSE_S)
    with pytest.raises(AdmissionFailed) as failed:
        admit_arrivals(policy, case.burst, view, best_effort=lambda j: True)
    first, second, _ = (j.job_id for j in case.burst)
    assert failed.value.job_id == second
    assert failed.value.answers == {first: Admission.BEST_EFFORT}
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert policy.asked == [(first, []), (second, [first])]
