"""The shortcuts behind the artifact planner's speed, each against the computation it saves, on
seeded random cases: a weighing taken over from the last one when its plan would read the same,
plans made without the profile they leave, waiting jobs weighed without a plan, and the profile a
weighed job sees built in one pass. An invalidation bug makes one of these differ."""

from __future__ import annotations

import random

import pytest

from qosched.cluster.artifact_plan import (
    _TOP,
    ArtifactPlanner,
    PlannedJob,
    _read,
    _reads_again,
    given_back,
    gpu_time,
    merged,
    with_allocation,
)
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel.bundled("A100")


def _random_jobs(rng: random.Random, now: float, count: int) -> list[PlannedJob]:
    jobs = []
    for k in range(count):
        model = rng.choice(sorted(TABLES.models))
        curve = TABLES.curve(model, rng.choice(TABLES.batch_sizes(model)))
        job = PlannedJob.of(f"j{k}", curve, 0.0, 0.0)
        # Work for 2 minutes to 3 hours on one GPU, due in 0.2 to 3 times that; a few past due.
        alone = rng.uniform(120.0, 10_800.0)
        job.left = curve.rate(job.levels[0]) * alone
        job.deadline = now + (rng.uniform(0.2, 3.0) * alone if rng.random() > 0.05 else -30.0)
        jobs.append(job)
    return sorted(jobs, key=lambda j: j.deadline)


def _reference_hand_out(planner: ArtifactPlanner, jobs: list[PlannedJob]) -> list[PlannedJob]:
    """The hand-out as defined: every job with room re-planned whole after every raise."""
    plans = {}

    def weigh(job: PlannedJob, spare: int) -> None:
        if job.next_level - job.gpus > spare or job.next_level == job.gpus:
            job.marginal = -_TOP
            return
        profile = merged(with_allocation(planner.free, job.allocation, job.end))
        allocation, after, end, real, _ = planner._plan(job, profile, assigned=job.next_level)
        plans[job.job_id] = (merged(allocation), merged(after), end, real)
        added = job.next_level - job.gpus
        job.marginal = (gpu_time(allocation, end) - gpu_time(job.allocation, job.end)) / added
        if job.gpus == 0:
            job.marginal = _TOP

    for job in jobs:
        job.next_level = job.up(job.gpus)
    spare = planner.capacity - sum(job.gpus for job in jobs)
    if spare <= 0:
        return jobs
    for job in jobs:
        weigh(job, spare)
    order = sorted(jobs, key=lambda j: -j.marginal)
    grew = True
    while spare > 0 and grew:
        grew = False
        for job in order:
            if job.next_level - job.gpus > spare or job.next_level == job.gpus:
                continue
            allocation, after, end, real = plans[job.job_id]
            planner.free = after
            spare -= job.next_level - job.gpus
            job.allocation, job.gpus = allocation, job.next_level
            job.end, job.real_end = end, real
            job.next_level = job.up(job.gpus)
            grew = True
            break
        for job in order:
            if job.next_level - job.gpus > 0:
                weigh(job, spare)
        order.sort(key=lambda j: -j.marginal)
    return order


def _state(planner: ArtifactPlanner, order: list[PlannedJob]):
    jobs = [(j.job_id, j.gpus, list(j.allocation.items()), j.end, j.real_end) for j in order]
    return jobs, [j.marginal for j in order], list(planner.free.items())


@pytest.mark.parametrize("seed", range(200))
def test_hand_out_gives_the_defined_hand_outs_result_on_random_decisions(seed):
    """Same jobs raised in the same order, same plans, same free profile, same growths, to the
    last bit."""
    rng = random.Random(seed)
    now = rng.uniform(0.0, 100_000.0)
    capacity = rng.choice((8, 16, 32, 64, 128))
    jobs = _random_jobs(rng, now, rng.randint(1, 24))
    states = []
    for hand_out in (ArtifactPlanner.hand_out, _reference_hand_out):
        planner = ArtifactPlanner(now, capacity, 60.0)
        copies = [PlannedJob(j.job_id, j.curve, j.left, j.deadline, j.levels) for j in jobs]
        planner.plan_all(copies)
        states.append(_state(planner, hand_out(planner, copies)))
    assert states[0] == states[1]


def test_random_decisions_take_weighings_over_and_make_plans_again():
    """The cases above exercise both sides of the shortcut: weighings taken over and weighings
    whose plan would read a changed profile."""
    taken, made = 0, 0

    class Counting(ArtifactPlanner):
        def _plan(self, job, profile, assigned=0, dry=False):
            nonlocal made
            made += dry
            return super()._plan(job, profile, assigned, dry)

        def _weigh(self, job, spare):
            nonlocal taken
            before = made
            super()._weigh(job, spare)
            grows = job.gpus and job.gpus < job.next_level and job.next_level - job.gpus <= spare
            taken += bool(grows) and made == before

    for seed in range(40):
        rng = random.Random(seed)
        now = rng.uniform(0.0, 100_000.0)
        planner = Counting(now, rng.choice((8, 16, 32, 64, 128)), 60.0)
        jobs = _random_jobs(rng, now, rng.randint(1, 24))
        planner.plan_all(jobs)
        planner.hand_out(jobs)
    assert taken > 100 and made > 100


@pytest.mark.parametrize("seed", range(20))
def test_a_dry_plan_is_the_whole_plan_but_for_the_profile_it_leaves(seed):
    rng = random.Random(seed)
    now = rng.uniform(0.0, 10_000.0)
    capacity = rng.choice((8, 32, 128))
    planner = ArtifactPlanner(now, capacity, 60.0)
    jobs = _random_jobs(rng, now, 12)
    planner.plan_all(jobs)
    for job in jobs:
        profile = given_back(planner.free, job.allocation, job.end)
        level = job.up(job.gpus)
        whole = planner._plan(job, profile, assigned=level)
        dry = planner._plan(job, profile, assigned=level, dry=True)
        assert (list(dry[0].items()), dry[2:]) == (list(whole[0].items()), whole[2:])


@pytest.mark.parametrize("seed", range(30))
def test_given_back_is_merged_with_allocation_on_random_profiles(seed):
    """Both walks: times of the allocation and its end drawn anywhere, or (every other seed, as
    a planner's own profiles mostly are) among the free profile's times."""
    rng = random.Random(seed)
    times = sorted({60.0 * rng.randrange(0, 40) + 7.5 for _ in range(rng.randint(1, 12))})
    free = merged({t: rng.randrange(0, 9) for t in times})
    held_times = sorted({60.0 * rng.randrange(0, 40) + 7.5 for _ in range(rng.randint(1, 4))})
    end = 60.0 * rng.randrange(0, 45) + 7.5
    if seed % 2:
        held_times = sorted(rng.sample(list(free), rng.randint(1, len(free))))
        end = rng.choice(list(free))
    allocation = {t: rng.randrange(0, 5) for t in held_times}
    expected = merged(with_allocation(free, allocation, end))
    assert list(given_back(free, allocation, end).items()) == list(expected.items())


def _perturbed(rng, profile, now, job, reads, until, capacity):
    """``profile`` changed everywhere a plan that read it so does not look."""
    out = {}
    for time, count in profile.items():
        if time > until:
            if rng.random() < 0.3:
                continue  # an entry dropped
            count = rng.randrange(0, capacity + 1)
        elif (time <= now and reads != "counts") or reads == "times":
            count = rng.randrange(0, capacity + 1)
        elif reads == "levels":
            count = rng.choice([c for c in range(capacity + 1) if job.fits[c] == job.fits[count]])
        out[time] = count
    if until < float("inf"):
        for _ in range(rng.randint(0, 3)):  # entries added
            out[until + 60.0 * rng.randint(1, 200) + rng.random()] = rng.randrange(0, capacity + 1)
    return dict(sorted(out.items()))


@pytest.mark.parametrize("seed", range(300))
def test_a_plan_is_the_same_on_any_profile_that_reads_the_same(seed):
    """What ``_plan`` says it read (``_reads``, ``_reads_until``) is all its plan depends on: the
    profile changed anywhere else (counts after the horizon or at now, entries after it dropped
    or added, counts with the same level where only levels are read) gives the same plan."""
    rng = random.Random(seed)
    now = rng.uniform(0.0, 10_000.0)
    capacity = rng.choice((4, 8, 16, 64))
    planner = ArtifactPlanner(now, capacity, 60.0)
    (job,) = _random_jobs(rng, now, 1)
    later = rng.choice((0, 1, 3, 8))  # none: the plan's first change is its aligned deadline
    times = {now, *(now + 60.0 * rng.randint(1, 300) + rng.random() for _ in range(later))}
    profile = dict(sorted((t, rng.randrange(0, capacity + 1)) for t in times))
    if rng.random() < 0.5:
        profile = merged(profile)
    assigned = job.levels[min(rng.randrange(len(job.levels)) for _ in range(2))]  # low levels
    allocation, _, end, real, _ = planner._plan(job, profile, assigned, dry=True)
    reads, until = planner._reads, planner._reads_until
    for _ in range(5):
        other = _perturbed(rng, profile, now, job, reads, until, capacity)
        again, _, end_again, real_again, _ = planner._plan(job, other, assigned, dry=True)
        assert (list(again.items()), end_again, real_again) == (list(allocation.items()), end, real)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("reads", ["times", "levels", "counts"])
def test_reads_again_is_read_of_given_back_compared(seed, reads):
    """The walk that checks a weighing's reads says what building the profile and reading it
    says, for the read it was taken on and for reads of other profiles."""
    rng = random.Random(seed)
    now = 7.5 + 60.0 * rng.randrange(0, 5)
    (job,) = _random_jobs(rng, now, 1)

    def case():
        times = sorted(
            {now, *(60.0 * rng.randrange(0, 40) + 7.5 for _ in range(rng.randint(0, 9)))}
        )
        free = merged({t: rng.randrange(0, 9) for t in times})
        held = sorted({now, *(60.0 * rng.randrange(0, 40) + 7.5 for _ in range(rng.randint(0, 3)))})
        end = 60.0 * rng.randrange(0, 45) + 7.5
        if rng.random() < 0.5:  # every time one of the free profile's, as a planner's mostly are
            held = sorted({now, *rng.sample(list(free), rng.randint(0, len(free)))})
            end = rng.choice(list(free))
        return free, {t: rng.randrange(0, 5) for t in held}, end

    until = rng.choice((now, now + 600.0, now + 1800.0 + rng.random(), float("inf")))
    cases = [case() for _ in range(4)]
    for free, allocation, end in cases:
        for other in cases:
            read = _read(given_back(*other), now, job, reads, until)
            expected = _read(given_back(free, allocation, end), now, job, reads, until) == read
            assert _reads_again(free, allocation, end, now, job, reads, until, read) == expected


def test_a_hand_out_takes_the_gpu_time_of_each_plan_held_once(monkeypatch):
    """The GPU-time of the plan a job holds changes only when it is raised: every weighing at
    one level takes the same, computed once (the growth itself stays checked against the defined
    hand-out above)."""
    import qosched.cluster.artifact_plan as artifact_plan

    measured: list[dict] = []  # every allocation measured, kept alive so identities stay unique

    def counting(allocation, end):
        measured.append(allocation)
        return gpu_time(allocation, end)

    monkeypatch.setattr(artifact_plan, "gpu_time", counting)
    held_measured = 0
    for seed in range(40):
        rng = random.Random(seed)
        now = rng.uniform(0.0, 100_000.0)
        planner = ArtifactPlanner(now, rng.choice((8, 16, 32, 64, 128)), 60.0)
        jobs = _random_jobs(rng, now, rng.randint(1, 24))
        planner.plan_all(jobs)
        held = {id(job.allocation): job.allocation for job in jobs}
        del measured[:]
        planner.hand_out(jobs)
        held.update({id(job.allocation): job.allocation for job in jobs})
        for allocation in held.values():
            times = sum(1 for other in measured if other is allocation)
            assert times <= 1
            held_measured += times
    assert held_measured > 100


def test_a_hand_out_builds_each_profile_a_job_gives_back_once(monkeypatch):
    """A raised job's plan is made on the profile its last weighing built, when that weighing
    made a plan on the free profile in force: no profile is built twice from the same free
    profile, allocation and end (the plans stay checked against the defined hand-out above)."""
    import qosched.cluster.artifact_plan as artifact_plan

    built: list[tuple[dict, dict, float]] = []  # kept alive so identities stay unique

    def counting(free, allocation, end):
        built.append((free, allocation, end))
        return given_back(free, allocation, end)

    monkeypatch.setattr(artifact_plan, "given_back", counting)
    raised = 0
    for seed in range(40):
        rng = random.Random(seed)
        now = rng.uniform(0.0, 100_000.0)
        planner = ArtifactPlanner(now, rng.choice((8, 16, 32, 64, 128)), 60.0)
        jobs = _random_jobs(rng, now, rng.randint(1, 24))
        planner.plan_all(jobs)
        before = sum(job.gpus for job in jobs)
        del built[:]
        planner.hand_out(jobs)
        raised += sum(job.gpus for job in jobs) > before
        keys = [(id(free), id(allocation), end) for free, allocation, end in built]
        assert len(keys) == len(set(keys))
    assert raised > 10
