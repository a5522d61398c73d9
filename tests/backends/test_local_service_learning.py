"""The predictor learns a command job's speed from the progress it reports.

A command's runner writes its ``start`` line before the command has reported any iteration;
the speed must still be learned from the lines that follow (it once stayed at the 1 it/s
placeholder for the whole run).
"""

from __future__ import annotations

import time

from command_jobs import counting_spec

from qosched.backends.local.service import LocalService


def test_a_command_jobs_speed_is_learned_from_its_progress(tmp_path):
    # 0.05 s a step: at most 20 iterations/s, whatever the machine; never near the placeholder.
    service = LocalService.open(tmp_path, policy="qos", tick_s=0.2, grace_s=2.0)
    try:
        job_id = service.submit_spec(counting_spec("steady", iterations=400, sleep_s=0.05)).id
        deadline = time.monotonic() + 90
        while service.job(job_id).iterations_done < 100:
            assert time.monotonic() < deadline, "the job made no progress"
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
