"""A user's own training script, the first time and every time after: measured, remembered,
answered (docs/results/local.md, "A user's own script").

Each repeat starts a real service (`qosched up --detach`, `qos`, every core of this machine) in a
fresh home, so the script is never seen at its first submission, and a PyTorch script written as
a user would (`bench/command_train.py`: reports with `qosched.job.report`, checkpoints, stops
when asked), given as many iterations as take about ``--target-s`` (120) alone on one core here
(timed on 50 and 200 iterations first). Then:

1. the script alone on one core, outside qosched: its real run time ``T``;
2. submitted with a deadline of ``3 T``: measured first (`profiling`), then judged; met?
3. the same spec with ``1.5 T``: judged at once on the remembered speed; met?
4. the same with ``T / 4``: declined at once, with the earliest deadline it would get, ``E``;
5. the same with ``E``: met?
6. `examples/local/command-job.yaml` as written: accepted, met?

    python bench/local_first_time.py --repeats 3        # about 12 min a repeat on 2 cores

``--keep DIR`` keeps each repeat's service home (its store, the jobs' logs) as ``DIR/repeat-N``,
to read afterwards what each job was promised, when its cores changed and how fast it ran.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qosched.backends.local.client import Client
from qosched.backends.local.jobview import JobView

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "command_train.py"
EXAMPLE = ROOT / "examples" / "local" / "command-job.yaml"
QOSCHED = [sys.executable, "-m", "qosched"]
EARLIEST = re.compile(r"earliest deadline that can be guaranteed now is (\d+)s from now")

SPEC = """apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: {name}
spec:
  command: ["{python}", "{script}"]
  work:
    iterations: {iterations}
  deadline: {deadline}s
  resources: {{minCpus: 1}}
"""


def run_alone(iterations: int) -> float:
    """Seconds the script takes alone on one core, outside qosched."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(SCRIPT)],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "QOSCHED_ITERATIONS": str(iterations)},
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    return time.monotonic() - started


def iterations_for(target_s: float) -> int:
    """Iterations that take about ``target_s`` alone on one core, from the time 150 more
    iterations add (the start-up cancels out)."""
    per_iteration = max(1e-3, (run_alone(200) - run_alone(50)) / 150)
    return max(100, round(target_s / per_iteration))


def wait_done(client: Client, job: JobView, timeout_s: float) -> JobView:
    """Poll until the job is final; says each state it passes through on stderr."""
    seen = job.state
    stop_at = time.monotonic() + timeout_s
    while not job.finished:
        if time.monotonic() > stop_at:
            raise TimeoutError(f"{job.id} not done in {timeout_s:.0f} s: {job.state}")
        time.sleep(1.0)
        job = client.job(job.id)
        if job.state != seen:
            print(f"  {job.id} {job.name}: {seen} -> {job.state}", file=sys.stderr, flush=True)
            seen = job.state
    return job


def states(client: Client, job_id: str) -> str:
    """The states the job went through, and what it was promised when admitted."""
    events = client.job_detail(job_id).events
    path = [str(e.detail["to"]) for e in events if e.kind == "state"]
    promised = [
        "guaranteed" if e.detail.get("guaranteed") else "best effort"
        for e in events
        if e.kind == "admitted"
    ]
    return " > ".join(["queued", *path]) + (f" ({promised[0]})" if promised else "")


def row(step: str, deadline_s: float, job: JobView, path: str) -> str:
    took = (job.finished_at or job.submitted_at) - job.submitted_at
    met = job.state == "succeeded" and job.finished_at <= job.deadline_at
    verdict = "met" if met else ("declined" if job.state == "declined" else f"MISSED ({job.state})")
    return f"| {step} | {deadline_s:.0f} | {path} | {took:.0f} | {verdict} |"


def repeat(target_s: float, keep: Path | None = None) -> list[str]:
    iterations = iterations_for(target_s)
    alone_s = run_alone(iterations)
    rows = [f"| alone on 1 core, outside qosched ({iterations} it) | - | - | {alone_s:.0f} | T |"]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "QOSCHED_HOME": home}
        subprocess.run([*QOSCHED, "up", "--detach"], check=True, env=env, capture_output=True)
        try:
            client = Client.from_home(Path(home))

            def submit_file(path: Path) -> JobView:
                """`qosched submit PATH`, as a user types it; the job it printed."""
                done = subprocess.run(
                    [*QOSCHED, "submit", str(path)], env=env, capture_output=True, text=True
                )
                if done.returncode not in (0, 4):  # 4: declined
                    raise RuntimeError(f"qosched submit {path}: {done.stderr.strip()}")
                return client.job(done.stdout.split()[0])

            def submit(name: str, deadline_s: int) -> JobView:
                path = Path(home) / f"{name}.yaml"
                path.write_text(
                    SPEC.format(
                        name=name,
                        python=sys.executable,
                        script=SCRIPT,
                        iterations=iterations,
                        deadline=deadline_s,
                    )
                )
                return submit_file(path)

            for name, step, factor in (
                ("first", "never seen, 3 T", 3.0),
                ("again", "again, 1.5 T", 1.5),
            ):
                deadline = math.ceil(factor * alone_s)
                job = wait_done(client, submit(name, deadline), 10 * alone_s)
                rows.append(row(step, deadline, job, states(client, job.id)))
            tight = max(1, math.floor(alone_s / 4))
            declined = submit("tight", tight)
            match = EARLIEST.search(declined.error or "")
            rows.append(row("again, T / 4", tight, declined, states(client, declined.id)))
            if match is None:
                rows.append(f"| earliest deadline | - | not given: {declined.error} | - | - |")
            else:
                earliest = int(match.group(1))
                job = wait_done(client, submit("earliest", earliest), 10 * alone_s)
                rows.append(row("again, the earliest given", earliest, job, states(client, job.id)))
            example = wait_done(client, submit_file(EXAMPLE.relative_to(ROOT)), 600)
            deadline = example.deadline_at - example.submitted_at
            rows.append(row("command-job.yaml", deadline, example, states(client, example.id)))
        finally:
            subprocess.run([*QOSCHED, "down"], env=env, capture_output=True, check=False)
            if keep is not None:
                shutil.copytree(home, keep, symlinks=True, ignore_dangling_symlinks=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--target-s", type=float, default=120.0, help="T to aim for")
    parser.add_argument("--keep", type=Path, help="keep each repeat's home as KEEP/repeat-N")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep = args.keep.resolve()
    os.chdir(ROOT)  # command-job.yaml runs where it is submitted: the repository root
    cores = len(os.sched_getaffinity(0))
    print(f"# A user's own script under qos: {cores} cores, {args.repeats} repeat(s)\n")
    for number in range(1, args.repeats + 1):
        print(f"\nRepeat {number}:\n")
        print("| step | deadline s | states (promise when admitted) | done in s | deadline |")
        print("|---|---|---|---|---|")
        keep = None if args.keep is None else args.keep / f"repeat-{number}"
        for line in repeat(args.target_s, keep):
            print(line, flush=True)


if __name__ == "__main__":
    main()
