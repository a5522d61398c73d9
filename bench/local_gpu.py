"""Real GPU jobs on the local service: data-parallel jobs under torchrun with NCCL, competing
for this machine's GPUs under a policy (``qos`` by default). Needs a CUDA machine; refuses on
any other.

    python bench/local_gpu.py                      # 2 jobs, every GPU NVML (or torch) reports
    python bench/local_gpu.py --jobs 3 --gpus 0,1 --iterations 4000 --deadline-s 240

Each job runs ``examples/local/ddp/train.py`` with ``launcher: torchrun`` and ``minGpus: 1``,
``maxGpus`` all the GPUs, so the policy decides how many processes each gets and re-sizes them
by checkpoint-restart. Every rank writes down what it saw (rank, world size,
``CUDA_VISIBLE_DEVICES``, the device torch picked) through a ``sitecustomize`` on its path.
Prints one JSON object on stdout::

    {"policy", "gpus", "wall_s", "deadlines_met", "jobs": [{"id", "state", "met",
     "finished_s", "deadline_s", "allocations": [[gpus...], ...], "ranks_seen": [...]}],
     "gpu_held_twice": bool}

``gpu_held_twice`` replays the store's audit log (every ``gpus`` held/released event) and is
true if any GPU was ever in two jobs' hands at once. Timings depend on the machine and its load;
compare runs on one machine only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "local" / "ddp"

SITE = textwrap.dedent(
    """
    import json, os, time
    if "RANK" in os.environ and "QOSCHED_JOB_DIR" in os.environ:
        record = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
                  "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "t": time.time()}
        with open(os.path.join(os.environ["QOSCHED_JOB_DIR"], "ranks.jsonl"), "a") as out:
            out.write(json.dumps(record) + "\\n")
    """
)


def refuse_without_cuda() -> int:
    """The number of CUDA devices; exits with a message when there is none."""
    try:
        import torch
    except ImportError:
        sys.exit("bench/local_gpu.py: needs PyTorch with CUDA; torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        sys.exit(
            "bench/local_gpu.py: needs a machine with CUDA GPUs; torch sees none here "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). "
            "The CPU-only checks of GPU scheduling are tests/backends/test_local_service_gpu.py."
        )
    if not torch.distributed.is_nccl_available():
        sys.exit("bench/local_gpu.py: this PyTorch build has no NCCL")
    return torch.cuda.device_count()


def held_twice(events: list) -> bool:
    holder: dict[int, str] = {}
    for event in events:
        if event.kind != "gpus":
            continue
        if "held" in event.detail:
            for gpu in event.detail["held"]:
                if gpu in holder:
                    return True
                holder[gpu] = event.job_id
        else:
            for gpu in event.detail["released"]:
                if holder.pop(gpu, None) != event.job_id:
                    return True
    return bool(holder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--deadline-s", type=int, default=300)
    parser.add_argument("--policy", default="qos")
    parser.add_argument("--gpus", help="declared GPUs like 0,1 (default: NVML, else torch's)")
    parser.add_argument("--timeout-s", type=float, default=900)
    args = parser.parse_args()
    devices = refuse_without_cuda()

    from qosched.backends.local.gpus import detect_gpus, parse_gpu_list
    from qosched.backends.local.service import LocalService, wait_until_idle
    from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec

    gpus = parse_gpu_list(args.gpus) if args.gpus else detect_gpus() or tuple(range(devices))
    with tempfile.TemporaryDirectory(prefix="qosched-gpu-bench-") as folder:
        site = Path(folder) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITE)
        service = LocalService.open(
            Path(folder) / "home", policy=args.policy, gpus=gpus, tick_s=1.0
        )
        started = time.time()
        try:
            ids = []
            for index in range(args.jobs):
                spec = TrainingJobSpec(
                    name=f"ddp-gpu-{index}",
                    iterations=args.iterations,
                    deadline=Deadline(relative_s=args.deadline_s),
                    command=("train.py",),
                    resources=Resources(min_gpus=1, max_gpus=len(gpus)),
                    best_effort=True,
                    working_dir=str(EXAMPLE),
                    env={"PYTHONPATH": str(site)},
                    launcher="torchrun",
                )
                ids.append(service.submit_spec(spec).id)
            idle = wait_until_idle(service, timeout_s=args.timeout_s, poll_s=0.5)
            jobs = []
            for job_id in ids:
                detail = service.job_detail(job_id).to_json()
                ranks_file = Path(folder) / "home" / "jobs" / job_id / "ranks.jsonl"
                ranks = (
                    [json.loads(line) for line in ranks_file.read_text().splitlines()]
                    if ranks_file.exists()
                    else []
                )
                finished = detail["finished_at"]
                jobs.append(
                    {
                        "id": job_id,
                        "state": detail["state"],
                        "met": finished is not None and finished <= detail["deadline_at"],
                        "finished_s": None if finished is None else finished - started,
                        "deadline_s": detail["deadline_at"] - started,
                        "allocations": [held["gpus"] for held in detail["allocations"]],
                        "ranks_seen": ranks,
                        "error": detail["error"],
                    }
                )
            events = list(service.store.events())
        finally:
            service.stop_runners(grace_s=30)
            service.close()
    print(
        json.dumps(
            {
                "policy": args.policy,
                "gpus": list(gpus),
                "wall_s": time.time() - started,
                "finished_in_time": idle,
                "deadlines_met": sum(job["met"] for job in jobs),
                "jobs": jobs,
                "gpu_held_twice": held_twice(events),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
