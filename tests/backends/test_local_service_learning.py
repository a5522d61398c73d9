"""The predictor learns a command job's speed from the progress it reports.

A command's runner writes its ``start`` line before the command has reported any iteration;
the speed must still be learned from the lines that follow (it once stayed at the 1 it/s
placeholder for the whole run).
"""

from __future__ import annotations

import time

import pytest
from command_jobs import counting_spec, python_spec

from qosched.backends.local.service import LocalService
from qosched.backends.local.speed_memory import speed_key

pytestmark = pytest.mark.process


@pytest.mark.slow
def test_a_command_jobs_speed_is_learned_from_its_progress(tmp_path):
    # 0.05 s a step: at most 20 iterations/s, whatever the machine; never near the placeholder.
    service = LocalService.open(tmp_path, policy="qos", tick_s=0.2, grace_s=2.0)
    try:
        job_id = service.submit_spec(counting_spec("steady", iterations=400, sleep_s=0.05)).id
        deadline = time.monotonic() + 90
        # Never seen, it is measured first: its policy learns it once it is admitted (running).
        while (job := service.job(job_id)).iterations_done < 100 or job.state != "running":
            assert time.monotonic() < deadline, f"the job made no progress: {job}"
            service.step()
            time.sleep(0.05)
        service.step()
        rate = service.policy.predictor_of(job_id).predict(1).rate
        assert 5.0 < rate <= 21.0, rate
        job = service.job(job_id)
        left = job.iterations - job.iterations_done
        assert job.predicted_finish_at - time.time() < left / 5.0
    finally:
        service.stop_runners(grace_s=2.0)
        service.close()


#: 0.1 s an iteration for the first 40, then 0.02 s: a job whose speed changes half-way, as one
#: does when the machine's other work stops.
SPEEDS_UP = """
    import json, os, time
    for i in range(1, int(os.environ["QOSCHED_ITERATIONS"]) + 1):
        time.sleep(0.1 if i <= 40 else 0.02)
        with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
            progress.write(json.dumps({"iteration": i}) + "\\n")
"""


@pytest.mark.slow
def test_the_predicted_speed_follows_a_jobs_recent_speed(tmp_path):
    service = LocalService.open(tmp_path, policy="qos", tick_s=0.2, grace_s=2.0)
    try:
        spec = python_spec("speeds-up", SPEEDS_UP, iterations=2000)
        # Run before at some speed, so it runs at once instead of being measured first.
        service.store.remember_speeds(speed_key(spec), {1: 10.0}, "j-000000", 0.0)
        job_id = service.submit_spec(spec).id
        deadline = time.monotonic() + 120
        while service.job(job_id).iterations_done < 340:  # 300 at the new speed, 6 s or more
            assert time.monotonic() < deadline, "the job made too little progress"
            service.step()
            time.sleep(0.05)
        service.step()
        predicted = service.policy.predictor_of(job_id).predict(1).rate
        # The speed it ran at over its last 2 s, from the samples the service stored.
        samples = service.store.progress(job_id)
        last = samples[-1]
        first = next(s for s in samples if s.t >= last.t - 2.0)
        recent = (last.iteration - first.iteration) / (last.t - first.t)
        # Over the whole run it averaged well under that (340 iterations in 4 s + 6 s or more):
        # a prediction from every second alike would be 30 % or more too low.
        assert first.iteration > 40
        assert abs(predicted - recent) / recent < 0.15, (predicted, recent)
    finally:
        service.stop_runners(grace_s=2.0)
        service.close()


#: 3 s of start-up (a script importing its framework), then 0.05 s an iteration.
SLOW_START = """
    import json, os, time
    time.sleep(3.0)
    for i in range(1, int(os.environ["QOSCHED_ITERATIONS"]) + 1):
        time.sleep(0.05)
        with open(os.environ["QOSCHED_PROGRESS_FILE"], "a") as progress:
            progress.write(json.dumps({"iteration": i}) + "\\n")
"""


@pytest.mark.slow
def test_a_commands_start_up_is_no_measure_of_its_speed(tmp_path):
    # Decisions 5 s apart: the first after the launch comes about 2 s into the progress. Were
    # the start-up counted, the speed then would be some 40 iterations over 5 s, well under
    # half of what the job runs at.
    service = LocalService.open(tmp_path, policy="qos", tick_s=5.0, grace_s=2.0)
    try:
        job_id = service.submit_spec(python_spec("slow-start", SLOW_START, iterations=2000)).id
        predictor = None
        deadline = time.monotonic() + 120
        while predictor is None or not predictor.observed_seconds:
            assert time.monotonic() < deadline, "the job made no progress"
            service.step()
            predictor = service.policy.predictor_of(job_id)
            time.sleep(0.05)
        predicted = predictor.predict(1).rate
        samples = service.store.progress(job_id)
        running = (samples[-1].iteration - samples[0].iteration) / (samples[-1].t - samples[0].t)
        assert abs(predicted - running) / running < 0.25, (predicted, running)
    finally:
        service.stop_runners(grace_s=2.0)
        service.close()
