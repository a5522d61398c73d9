"""The runner as a real process: completion, live re-size, preemption and resume, crashes,
bad input and command jobs."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from runner_helpers import (
    ESCAPE,
    Runners,
    events,
    is_event,
    log_of,
    make_job_dir,
    set_allocation,
    terminate,
    wait_for,
)

from qosched.backends.local.affinity import thread_ids
from qosched.backends.local.process import RunnerProcess, stragglers
from qosched.backends.local.progress import RunnerEvent
from qosched.trainingjob.protocol import (
    CHECKPOINT_FILE,
    ENV_CRASH_AT,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_INPUT_ERROR,
    EXIT_PREEMPTED,
    RESULT_FILE,
    read_result,
)
from qosched.workloads import get_workload

pytestmark = pytest.mark.process


def needs_two_cores() -> None:
    if (os.cpu_count() or 1) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("re-sizing needs cores 0 and 1 available to this process")


def affinities(pid: int) -> set[frozenset[int]]:
    """The distinct CPU masks of all threads of ``pid``."""
    return {frozenset(os.sched_getaffinity(tid)) for tid in thread_ids(pid)}


def test_job_runs_to_completion(tmp_path: Path, runners: Runners) -> None:
    job_dir = make_job_dir(tmp_path, workload="transformer", iterations=30, checkpoint_every=10)
    assert runners.run(job_dir) == EXIT_DONE, log_of(job_dir)
    # Its log says what runs (and, every few seconds of a longer run, where it is).
    assert log_of(job_dir).startswith("qosched: transformer (seed 0): 30 iterations\n")

    result = read_result(job_dir / RESULT_FILE)
    assert (result.job_id, result.iterations, result.iterations_run) == ("job-1", 30, 30)
    assert result.resumed_from == 0
    assert result.final_loss is not None and result.mean_iteration_s is not None
    assert 0 < result.mean_iteration_s < result.wall_s

    seen = events(job_dir)
    assert seen[0].event is RunnerEvent.START and seen[0].cpu_ids == (0,) and seen[0].threads == 1
    assert seen[-1].event is RunnerEvent.DONE and seen[-1].iteration == 30
    iterations = [e.iteration for e in seen]
    assert iterations == sorted(iterations)
    assert [e.iteration for e in seen if e.event is RunnerEvent.CHECKPOINT] == [10, 20, 30]
    assert (job_dir / CHECKPOINT_FILE).exists()


def test_resize_changes_the_runner_while_it_runs(tmp_path: Path, runners: Runners) -> None:
    needs_two_cores()
    job_dir = make_job_dir(tmp_path, iterations=100_000, checkpoint_every=100_000, cpus=(0,))
    runner = runners.start(job_dir)
    wait_for(job_dir, runner, is_event(RunnerEvent.START), "start")
    assert os.sched_getaffinity(runner.pid) == {0}

    set_allocation(job_dir, (0, 1), version=2)
    grown = wait_for(job_dir, runner, is_event(RunnerEvent.RESIZE, version=2), "resize to [0, 1]")
    assert (grown.cpu_ids, grown.threads, grown.cpus) == ((0, 1), 2, 2)
    assert os.sched_getaffinity(runner.pid) == {0, 1}
    # Let a few iterations run on two threads, so PyTorch's pool has its second thread.
    wait_for(
        job_dir,
        runner,
        lambda e: e.event is RunnerEvent.PROGRESS and e.iteration > grown.iteration and e.cpus == 2,
        "progress on two cores",
    )
    assert affinities(runner.pid) == {frozenset({0, 1})}

    # Shrinking must reach every thread, not just the main one.
    set_allocation(job_dir, (1,), version=3)
    shrunk = wait_for(job_dir, runner, is_event(RunnerEvent.RESIZE, version=3), "resize to [1]")
    assert (shrunk.cpu_ids, shrunk.threads) == ((1,), 1)
    assert affinities(runner.pid) == {frozenset({1})}

    # An impossible allocation is reported, not applied, and the job goes on.
    set_allocation(job_dir, (1, 4096), version=4)
    refused = wait_for(job_dir, runner, is_event(RunnerEvent.ERROR), "error for an unknown core")
    assert refused.fatal is False and "unknown core(s) [4096]" in (refused.message or "")
    assert affinities(runner.pid) == {frozenset({1})}
    assert runner.poll() is None

    assert terminate(runner) == EXIT_PREEMPTED


@pytest.mark.slow
def test_sigterm_checkpoints_and_restart_resumes(tmp_path: Path, runners: Runners) -> None:
    iterations, seed, batch_size = 80, 4, 16
    job_dir = make_job_dir(
        tmp_path,
        workload="transformer",
        iterations=iterations,
        seed=seed,
        checkpoint_every=1000,
        batch_size=batch_size,
    )
    runner = runners.start(job_dir)
    wait_for(job_dir, runner, is_event(RunnerEvent.PROGRESS), "progress")
    assert terminate(runner) == EXIT_PREEMPTED, log_of(job_dir)

    preempted = events(job_dir)[-1]
    assert preempted.event is RunnerEvent.PREEMPTED and "SIGTERM" in (preempted.message or "")
    stopped_at = preempted.iteration
    assert stopped_at is not None and 0 < stopped_at < iterations
    assert (job_dir / CHECKPOINT_FILE).exists()
    assert not (job_dir / RESULT_FILE).exists()

    assert runners.run(job_dir) == EXIT_DONE, log_of(job_dir)
    starts = [e for e in events(job_dir) if e.event is RunnerEvent.START]
    assert [s.resumed_from for s in starts] == [0, stopped_at]
    result = read_result(job_dir / RESULT_FILE)
    assert (result.iterations, result.iterations_run) == (iterations, iterations - stopped_at)

    # The interrupted job ends exactly where an uninterrupted one-thread run ends.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        workload = get_workload("transformer")
        state = workload.build(seed, batch_size)
        reference = [workload.step(state) for _ in range(iterations)][-1]
    finally:
        torch.set_num_threads(before)
    assert result.final_loss == reference


def test_crash_hook_fails_with_an_error_event(tmp_path: Path, runners: Runners) -> None:
    job_dir = make_job_dir(tmp_path, iterations=10, batch_size=4, checkpoint_every=2)
    assert runners.run(job_dir, env={ENV_CRASH_AT: "5"}) == EXIT_FAILED

    error = events(job_dir)[-1]
    assert error.event is RunnerEvent.ERROR and error.fatal is True
    assert error.message == f"RuntimeError: {ENV_CRASH_AT}=5: simulated crash in iteration 5"
    assert error.iteration == 4
    assert not (job_dir / RESULT_FILE).exists()
    # The hook fires before iteration 5 is checkpointed, so the latest checkpoint is at 4.
    assert [e.iteration for e in events(job_dir) if e.event is RunnerEvent.CHECKPOINT] == [2, 4]


def test_bad_job_file_exits_with_input_error(tmp_path: Path, runners: Runners) -> None:
    job_dir = tmp_path / "bad"
    job_dir.mkdir()
    (job_dir / "job.json").write_text(
        '{"job_id": "x", "workload": "resnet", "iterations": 5, "seed": 0, "checkpoint_every": 5}'
    )
    assert runners.run(job_dir) == EXIT_INPUT_ERROR

    (error,) = events(job_dir)
    assert error.event is RunnerEvent.ERROR and error.fatal is True
    assert "field 'workload': unknown workload 'resnet'" in (error.message or "")
    assert "field 'workload'" in log_of(job_dir)


COMMAND = textwrap.dedent(
    """
    import json, os
    progress = os.environ["QOSCHED_PROGRESS_FILE"]
    with open(os.environ["QOSCHED_JOB_DIR"] + "/seen.json", "w") as out:
        json.dump({
            "affinity": sorted(os.sched_getaffinity(0)),
            "cpus": os.environ["QOSCHED_CPUS"],
            "omp": os.environ["OMP_NUM_THREADS"],
            "iterations": os.environ["QOSCHED_ITERATIONS"],
        }, out)
    with open(progress, "a") as log:
        log.write("not json\\n")
        for i in range(1, int(os.environ["QOSCHED_ITERATIONS"]) + 1):
            log.write(json.dumps({"iteration": i, "loss": 1.0 / i}) + "\\n")
            log.flush()
    """
)


def test_command_job_is_pinned_and_its_progress_relayed(tmp_path: Path, runners: Runners) -> None:
    core = max(os.sched_getaffinity(0))
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", COMMAND], iterations=5, cpus=(core,)
    )
    assert runners.run(job_dir) == EXIT_DONE, log_of(job_dir)

    seen = json.loads((job_dir / "seen.json").read_text())
    assert seen == {"affinity": [core], "cpus": str(core), "omp": "1", "iterations": "5"}
    relayed = events(job_dir)
    assert relayed[0].event is RunnerEvent.START and relayed[0].cpu_ids == (core,)
    warning = next(e for e in relayed if e.event is RunnerEvent.WARNING)
    assert "command_progress.jsonl:1: not valid JSON" in (warning.message or "")
    last_progress = [e for e in relayed if e.event is RunnerEvent.PROGRESS][-1]
    assert (last_progress.iteration, last_progress.loss) == (5, 0.2)
    assert relayed[-1].event is RunnerEvent.DONE and relayed[-1].exit_code == 0
    assert read_result(job_dir / RESULT_FILE).iterations == 5


LOOPING_COMMAND = textwrap.dedent(
    """
    import json, os, time
    with open(os.environ["QOSCHED_JOB_DIR"] + "/child.pid", "w") as out:
        out.write(str(os.getpid()))
    with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as log:
        for i in range(1, 100_000):
            log.write(json.dumps({"iteration": i}) + "\\n")
            log.flush()
            time.sleep(0.02)
    """
)


def test_command_job_resizes_and_forwards_sigterm(tmp_path: Path, runners: Runners) -> None:
    needs_two_cores()
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", LOOPING_COMMAND], cpus=(0,)
    )
    runner = runners.start(job_dir)
    wait_for(job_dir, runner, is_event(RunnerEvent.PROGRESS), "relayed progress")
    child = int((job_dir / "child.pid").read_text())
    assert os.sched_getaffinity(child) == {0}

    set_allocation(job_dir, (1,), version=2)
    resized = wait_for(job_dir, runner, is_event(RunnerEvent.RESIZE, version=2), "resize")
    assert resized.cpu_ids == (1,) and resized.threads is None
    assert affinities(child) == {frozenset({1})}

    assert terminate(runner) == EXIT_PREEMPTED, log_of(job_dir)
    preempted = events(job_dir)[-1]
    assert preempted.event is RunnerEvent.PREEMPTED and preempted.exit_code == -signal.SIGTERM
    assert not Path(f"/proc/{child}").exists()


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # exited, waiting to be reaped


def test_command_dies_with_a_killed_runner(tmp_path: Path, runners: Runners) -> None:
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", LOOPING_COMMAND], cpus=None
    )
    runner = runners.start(job_dir)
    wait_for(job_dir, runner, is_event(RunnerEvent.PROGRESS), "relayed progress")
    child = int((job_dir / "child.pid").read_text())
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 10
    try:
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), "the command outlived its runner"
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


ESCAPE_THEN_LOOP = ESCAPE + textwrap.dedent(
    """
    i = 0
    while True:
        i += 1
        with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as out:
            out.write(json.dumps({"iteration": i}) + "\\n")
        time.sleep(0.05)
    """
)


def test_a_process_that_escaped_a_killed_runner_still_holds_the_job(tmp_path: Path) -> None:
    # The runner stops what its command left when the command ends; killed itself, it cannot.
    # The service then finds the escaped process by the job folder in its environment: the
    # job is not gone (its cores are not handed on) until that process is stopped too.
    job_dir = make_job_dir(
        tmp_path, workload=None, command=[sys.executable, "-c", ESCAPE_THEN_LOOP], cpus=None
    )
    with open(job_dir / "runner.log", "ab") as log:
        runner = RunnerProcess.start(sys.executable, job_dir, log=log, env=os.environ)
    escaped_file = job_dir / "escaped.pid"
    escaped = None
    try:
        deadline = time.monotonic() + 30
        while not escaped_file.exists() or not escaped_file.read_text():
            assert time.monotonic() < deadline, log_of(job_dir)
            time.sleep(0.05)
        escaped = int(escaped_file.read_text())
        runner.send(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while runner.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the command itself goes on the runner's death (SIGTERM)
        assert not runner.running() and not gone(escaped)
        assert stragglers(job_dir) == [escaped]
        assert not runner.gone(), "the escaped process still runs on the job's cores"
        runner.kill_group(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not runner.gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner.gone() and gone(escaped)
    finally:
        runner.close()
        if escaped is not None and not gone(escaped):
            os.kill(escaped, signal.SIGKILL)


@pytest.mark.slow
def test_a_workload_runner_reports_what_it_cost(tmp_path: Path, runners: Runners) -> None:
    job_dir = make_job_dir(tmp_path, workload="transformer", iterations=30, checkpoint_every=10)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert runners.run(job_dir) == EXIT_DONE, log_of(job_dir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    seen = events(job_dir)
    clock = [e.cpu_s for e in seen]
    assert None not in clock and clock == sorted(clock), clock
    if Path(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat").exists():
        assert all(e.wait_s is not None and e.wait_s >= 0 for e in seen)
    # Its start-up (PyTorch, the model) costs CPU before the first event, and the last event
    # accounts for nearly all the process used: it ends without the interpreter's teardown.
    assert seen[0].event is RunnerEvent.START and seen[0].cpu_s > 0
    assert seen[-1].event is RunnerEvent.DONE
    assert 0.5 * spent <= seen[-1].cpu_s <= spent + 0.01, (seen[-1].cpu_s, spent)
    saves = [e for e in seen if e.event is RunnerEvent.CHECKPOINT]
    assert len(saves) == 3
    for save in saves:
        assert save.save_s is not None and save.save_cpu_s is not None
        assert save.save_s > 0 and 0 <= save.save_cpu_s <= save.cpu_s


def test_a_runner_ends_without_the_interpreters_teardown(tmp_path: Path) -> None:
    # Exit hooks are the interpreter's teardown: a runner whose work is written skips them.
    job_dir = make_job_dir(tmp_path, workload="cnn", iterations=3, checkpoint_every=10)
    marker = tmp_path / "teardown-ran"
    script = (
        "import atexit, pathlib, runpy, sys\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).touch)\n"
        f"sys.argv = ['runner', {str(job_dir)!r}]\n"
        "runpy.run_module('qosched.backends.local.runner', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == EXIT_DONE, done.stderr.decode()
    assert read_result(job_dir / RESULT_FILE).iterations == 3
    assert events(job_dir)[-1].event is RunnerEvent.DONE
    assert not marker.exists()
