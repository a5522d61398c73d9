"""GPUs in the local service, on this CPU-only machine: a declared inventory (as ``qosched up
--gpus 0,1``), real runner processes and command jobs that write down what they see. No CUDA is
involved: what is checked is what qosched controls, the GPUs each process is shown
(``CUDA_VISIBLE_DEVICES``, ``QOSCHED_GPUS``) and who holds which GPU when."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from scripted_policy import NAME, WANT

from qosched.backends.local.service import LocalService, wait_until_idle
from qosched.backends.local.store import JobEvent
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

pytestmark = pytest.mark.process

GPUS = (0, 1)
SEEN_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "QOSCHED_GPUS",
    "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS",
    "MY_SETTING",
)

#: Appends {"kind": "start"|"end", "pid", "t", "cwd", "env": {SEEN_KEYS}} to seen.jsonl in its
#: job folder; reports one iteration every ``sleep_s`` (argv[1]), saving the step reached in
#: ``step`` so that a restarted run resumes after it; on SIGTERM it stops after the step.
SEEING = textwrap.dedent(
    """
    import json, os, signal, sys, time
    folder = os.environ["QOSCHED_JOB_DIR"]
    total, sleep_s = int(os.environ["QOSCHED_ITERATIONS"]), float(sys.argv[1])
    keys = json.loads(sys.argv[2])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    def parent_env():  # the runner's, read while it waits for this process
        with open(f"/proc/{os.getppid()}/environ", "rb") as environ:
            items = [item.split(b"=", 1) for item in environ.read().split(b"\\0") if b"=" in item]
        return {k.decode(): v.decode() for k, v in items if k.decode() in keys}
    def note(kind, **extra):
        record = {"kind": kind, "pid": os.getpid(), "t": time.time(), "cwd": os.getcwd(),
                  "env": {k: os.environ.get(k) for k in keys}, "runner_env": parent_env(),
                  **extra}
        with open(os.path.join(folder, "seen.jsonl"), "a") as out:
            out.write(json.dumps(record) + "\\n")
    saved = os.path.join(folder, "step")
    start = int(open(saved).read()) if os.path.exists(saved) else 0
    note("start", resumed_from=start)
    for i in range(start + 1, total + 1):
        time.sleep(sleep_s)
        with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
            progress.write(json.dumps({"iteration": i}) + "\\n")
        with open(saved + ".tmp", "w") as out:
            out.write(str(i))
        os.replace(saved + ".tmp", saved)
        if stop and i < total:
            note("end", at=i)
            sys.exit(0)
    note("end", at=total)
    """
)


def seeing_spec(
    name: str,
    *,
    iterations: int = 6,
    sleep_s: float = 0.05,
    gpus: tuple[int, int | None] | None = (1, 1),
    **extra: Any,
) -> TrainingJobSpec:
    resources = Resources(min_gpus=gpus[0], max_gpus=gpus[1]) if gpus else Resources(max_cpus=1)
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=600),
        command=(sys.executable, "-c", SEEING, str(sleep_s), json.dumps(SEEN_KEYS)),
        resources=resources,
        best_effort=True,
        **extra,
    )


def seen(home: Path, job_id: str) -> list[dict[str, Any]]:
    path = home / "jobs" / job_id / "seen.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def open_service(home: Path, policy: str = "fifo", gpus: Sequence[int] = GPUS) -> LocalService:
    return LocalService.open(home, policy=policy, tick_s=0.2, gpus=tuple(gpus))


def gpu_holders_over_time(events: Sequence[JobEvent]) -> list[tuple[str, str, tuple[int, ...]]]:
    """Replays every ``gpus`` event of the whole log in order; raises AssertionError at the first
    GPU held by two jobs at once, or given back by a job that did not hold it. Returns the
    (job, held|released, gpus) steps."""
    holder: dict[int, str] = {}
    steps = []
    for event in events:
        if event.kind != "gpus":
            continue
        if "held" in event.detail:
            gpus = tuple(event.detail["held"])
            for gpu in gpus:
                assert gpu not in holder, f"GPU {gpu} given to {event.job_id}, {holder[gpu]} has it"
                holder[gpu] = event.job_id
            steps.append((event.job_id, "held", gpus))
        else:
            gpus = tuple(event.detail["released"])
            for gpu in gpus:
                assert holder.pop(gpu, None) == event.job_id, f"{event.job_id} never held {gpu}"
            steps.append((event.job_id, "released", gpus))
    assert not holder, f"GPUs never given back: {holder}"
    return steps


def test_each_process_sees_only_its_gpus_its_working_dir_and_its_env(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    service = open_service(tmp_path / "home")
    try:
        gpu_job = service.submit_spec(
            seeing_spec(
                "on-gpu",
                iterations=40,
                working_dir=str(work),
                env={"MY_SETTING": "a b=c", "OMP_NUM_THREADS": "3"},
            )
        ).id
        cpu_job = service.submit_spec(seeing_spec("on-cpu", gpus=None)).id
        for _ in range(100):  # the GPU job's allocation, seen while it runs
            service.step()
            if service.job(gpu_job).state == "running":
                break
        running = service.job(gpu_job)
        status = service.status().to_json()
        assert wait_until_idle(service, timeout_s=60, poll_s=0.1)
    finally:
        service.close()
    assert len(running.gpus) == 1 and running.cpus == ()
    assert status["capacity"]["gpus"] == [0, 1]
    assert status["allocated"][gpu_job] == {"cpus": [], "gpus": list(running.gpus)}

    [start, _] = seen(tmp_path / "home", gpu_job)
    given = str(running.gpus[0])
    assert start["env"] == {
        "CUDA_VISIBLE_DEVICES": given,
        "QOSCHED_GPUS": given,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": "3",  # the spec's env wins over qosched's default
        "MY_SETTING": "a b=c",
    }
    assert start["cwd"] == str(work)
    assert start["runner_env"]["CUDA_VISIBLE_DEVICES"] == given  # the runner's own, too
    [start, _] = seen(tmp_path / "home", cpu_job)
    assert start["env"]["CUDA_VISIBLE_DEVICES"] == "" and start["env"]["QOSCHED_GPUS"] == ""
    assert start["runner_env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert start["env"]["MY_SETTING"] is None and start["env"]["OMP_NUM_THREADS"] == "1"
    assert start["cwd"] == os.getcwd()  # no workingDir: the service's folder


def test_no_gpu_is_ever_held_by_two_jobs_while_five_jobs_compete_for_two(tmp_path):
    service = open_service(tmp_path / "home", policy="qos")
    # (minGpus, maxGpus), iterations: the first holds GPU 0 while the second ends, so later
    # jobs start beside a job that holds the lowest index.
    plan = [((1, 1), 14), ((1, 1), 3), ((1, 2), 6), ((2, 2), 4), ((1, 2), 5)]
    bounds = [gpus for gpus, _ in plan]
    try:
        jobs = [
            service.submit_spec(seeing_spec(f"job-{i}", iterations=n, gpus=gpus)).id
            for i, (gpus, n) in enumerate(plan)
        ]
        assert wait_until_idle(service, timeout_s=90, poll_s=0.1)
        states = {job: service.job(job).state for job in jobs}
        events = service.store.events()
    finally:
        service.close()
    assert set(states.values()) == {"succeeded"}
    steps = gpu_holders_over_time(events)
    assert {job for job, _, _ in steps} == set(jobs)
    # The processes' own view agrees: no two of them ran on one GPU at overlapping times.
    runs = []
    for job in jobs:
        records = seen(tmp_path / "home", job)
        for begin, end in zip(records[::2], records[1::2], strict=True):
            assert begin["pid"] == end["pid"]
            gpus = [int(g) for g in begin["env"]["CUDA_VISIBLE_DEVICES"].split(",")]
            low, high = bounds[jobs.index(job)]
            assert low <= len(gpus) <= high
            runs.append((gpus, begin["t"], end["t"]))
    for i, (gpus, begin, end) in enumerate(runs):
        for other, other_begin, other_end in runs[i + 1 :]:
            if set(gpus) & set(other):
                assert end <= other_begin or other_end <= begin


def test_a_gpu_job_is_resized_by_a_restart_that_resumes_where_it_stopped(tmp_path):
    service = open_service(tmp_path / "home", policy=NAME)
    try:
        job = service.submit_spec(seeing_spec("shrinks", iterations=60, gpus=(1, 2))).id
        WANT[job] = [(0, 2), (8, 1)]
        assert wait_until_idle(service, timeout_s=60, poll_s=0.1)
        state = service.job(job).state
        events = service.store.events()
        detail = service.job_detail(job)
    finally:
        WANT.pop(job, None)
        service.close()
    assert state == "succeeded"
    first_start, first_end, second_start, second_end = seen(tmp_path / "home", job)
    assert first_start["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert second_start["env"]["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    assert second_start["env"]["QOSCHED_GPUS"] == second_start["env"]["CUDA_VISIBLE_DEVICES"]
    assert first_end["at"] >= 8 and second_start["resumed_from"] == first_end["at"]
    assert second_end["at"] == 60
    assert second_start["t"] > first_end["t"]  # never two processes of the job at once
    steps = gpu_holders_over_time(events)
    assert [(kind, len(gpus)) for _, kind, gpus in steps] == [
        ("held", 2),
        ("released", 2),
        ("held", 1),
        ("released", 1),
    ]
    assert [len(held.gpus) for held in detail.allocations] == [2, 1]
    progress = (tmp_path / "home" / "jobs" / job / "command_progress.jsonl").read_text()
    assert [json.loads(line)["iteration"] for line in progress.splitlines()] == list(range(1, 61))


def test_a_restarted_service_adopts_a_running_gpu_job_with_its_gpus(tmp_path):
    service = open_service(tmp_path / "home")
    job = service.submit_spec(seeing_spec("adopted", iterations=40)).id
    for _ in range(100):
        service.step()
        if service.job(job).state == "running":
            break
    held = service.job(job).gpus
    service.close()  # the runner keeps running
    service = open_service(tmp_path / "home")
    try:
        assert service.job(job).gpus == held
        other = service.submit_spec(seeing_spec("other", iterations=2, gpus=(2, 2))).id
        assert wait_until_idle(service, timeout_s=60, poll_s=0.1)
        states = (service.job(job).state, service.job(other).state)
        events = service.store.events()
    finally:
        service.close()
    assert states == ("succeeded", "succeeded")
    gpu_holders_over_time(events)  # "other" (both GPUs) waited until the adopted one was gone
    assert len(seen(tmp_path / "home", job)) == 2  # one run, never started twice


def test_a_gpu_job_on_a_service_without_gpus_fails_with_the_reason(tmp_path):
    service = open_service(tmp_path / "home", gpus=())
    try:
        job = service.submit_spec(seeing_spec("no-gpu"))
    finally:
        service.close()
    assert job.state == "failed"
    assert "asks for at least 1 GPUs; this service has 0" in job.error
