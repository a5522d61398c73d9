"""examples/local/ddp-job.yaml submitted to a real service on this machine: torchrun runs as
many processes as the job has cores, and a change of its core count is a checkpoint-restart
that resumes where the job stopped.

The core count is forced by a scripted policy (2 cores, then 1 once the job has done
``SHRINK_AT`` iterations), so the re-size happens at a known point whatever the machine's
speed. Each rank's view is recorded by a ``sitecustomize`` module put on the ranks' path
through the spec's ``env``: an independent witness of how many processes ran, on which cores,
in which folder and environment."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from scripted_policy import NAME, WANT

from qosched.backends.local.service import LocalService, wait_until_idle
from qosched.trainingjob.jobspec import load_job_spec

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).parents[2] / "examples" / "local"
SHRINK_AT = 150

SITE = textwrap.dedent(
    """
    import json, os, time
    if "RANK" in os.environ and "QOSCHED_JOB_DIR" in os.environ:
        record = {
            "rank": int(os.environ["RANK"]),
            "world": int(os.environ["WORLD_SIZE"]),
            "pid": os.getpid(),
            "cwd": os.getcwd(),
            "cpus": sorted(os.sched_getaffinity(0)),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "omp": os.environ.get("OMP_NUM_THREADS"),
            "t": time.time(),
        }
        with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "ranks.jsonl"), "a") as out:
            out.write(json.dumps(record) + "\\n")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_the_ddp_example_runs_two_processes_and_resumes_after_a_restart_with_one(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    spec = load_job_spec(EXAMPLES / "ddp-job.yaml", base_dir=EXAMPLES.parents[1])  # as submitted
    assert spec.launcher == "torchrun" and spec.working_dir == str(EXAMPLES)
    scratch = tmp_path / "tmp"  # the ranks' temporary folder
    scratch.mkdir()
    spec = replace(spec, env={**spec.env, "PYTHONPATH": str(site), "TMPDIR": str(scratch)})
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    service = LocalService.open(tmp_path / "home", cpus=cores, policy=NAME, tick_s=0.2)
    try:
        job_id = service.submit_spec(spec).id
        WANT[job_id] = [(0, 2), (SHRINK_AT, 1)]
        assert wait_until_idle(service, timeout_s=150, poll_s=0.2)
        job = service.job(job_id)
        events = service.store.events(job_id)
    finally:
        WANT.pop(job_id, None)
        service.stop_runners(grace_s=5)
        service.close()
    assert job.state == "succeeded", job.error
    job_dir = tmp_path / "home" / "jobs" / job_id

    # torchrun's per-run folders are the job's, not new ones in the temporary folder (torch's
    # own caches, such as torchinductor_USER, are shared by every run and may be there).
    assert not list(scratch.glob("torchelastic_*"))
    assert list((job_dir / "torchrun").iterdir())

    ranks = [json.loads(line) for line in (job_dir / "ranks.jsonl").read_text().splitlines()]
    first, second = [r for r in ranks if r["world"] == 2], [r for r in ranks if r["world"] == 1]
    assert sorted(r["rank"] for r in first) == [0, 1]  # two processes, then
    assert [r["rank"] for r in second] == [0]  # one, after the restart
    assert len(ranks) == 3
    assert all(r["t"] < s["t"] for r in first for s in second)
    assert all(r["cwd"] == str(EXAMPLES) for r in ranks)  # spec.workingDir
    assert all(r["cuda"] == "" for r in ranks)  # a CPU job sees no GPU
    assert all(set(r["cpus"]) == set(cores) for r in first)
    assert all(len(r["cpus"]) == 1 and r["omp"] == "1" for r in second)

    # Every step reported once, in order, across both runs: resumed from the checkpoint.
    progress = (job_dir / "command_progress.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in progress] == list(range(1, 601))
    assert job.iterations_done == 600
    stops = [e for e in events if e.kind == "stopped"]
    assert len(stops) == 1
    # The scripted policy gives no reason: the service words one from what changed.
    assert (
        stops[0]
        .detail["why"]
        .startswith("stopped to restart on 1 core (from 2): its policy gives it fewer")
    )
    launches = [e.detail["cpus"] for e in events if e.kind == "launched"]
    assert [len(c) for c in launches] == [2, 1]
