"""A tiny training script run as a qosched command job (see command-job.yaml).

It fits y = 3x - 2 by stochastic gradient descent in plain Python (no dependencies), and does
what any training script does to run well under qosched's local service:

- it trains for ``$QOSCHED_ITERATIONS`` iterations (the spec's ``work.iterations``);
- after every iteration it appends ``{"iteration": n, "loss": x}`` to the file named by
  ``$QOSCHED_PROGRESS_FILE`` and flushes it: the scheduler predicts the job's finish from these
  lines and sizes its cores to meet the deadline;
- it keeps a checkpoint in ``$QOSCHED_JOB_DIR`` and resumes from it, because the scheduler
  stops a job (SIGTERM) to give its cores to another and starts it again later: on SIGTERM it
  finishes the current iteration, saves, and exits with 143 (128 + SIGTERM).

Outside qosched (no ``QOSCHED_*`` variables) it trains 200 iterations, reports nothing and
keeps no checkpoint. Usage: ``python train_tiny.py [--batch N]`` (samples per iteration; more
is slower: the default takes about 10 ms an iteration on one core).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import TextIO

CHECKPOINT = "tiny_checkpoint.json"
CHECKPOINT_EVERY = 50
PRINT_EVERY = 20


def main() -> int:
    parser = argparse.ArgumentParser(description="fit y = 3x - 2 by SGD, as a qosched job")
    parser.add_argument("--batch", type=int, default=20_000, help="samples per iteration")
    args = parser.parse_args()
    iterations = int(os.environ.get("QOSCHED_ITERATIONS", "200"))
    job_dir = os.environ.get("QOSCHED_JOB_DIR")
    with open(os.environ.get("QOSCHED_PROGRESS_FILE", os.devnull), "a") as progress:
        checkpoint = Path(job_dir) / CHECKPOINT if job_dir else None
        return train(iterations, args.batch, checkpoint, progress)


def train(iterations: int, batch: int, checkpoint: Path | None, progress: TextIO) -> int:

    stop = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True  # finish this iteration, save, exit

    signal.signal(signal.SIGTERM, on_sigterm)

    state = {"iteration": 0, "w": 0.0, "b": 0.0}
    if checkpoint is not None and checkpoint.exists():
        state = json.loads(checkpoint.read_text())
        print(f"resumed from iteration {state['iteration']}", flush=True)
    rng = random.Random(state["iteration"])
    w, b = state["w"], state["b"]
    for iteration in range(state["iteration"] + 1, iterations + 1):
        grad_w = grad_b = loss = 0.0
        for _ in range(batch):
            x = rng.uniform(-1.0, 1.0)
            error = w * x + b - (3.0 * x - 2.0 + rng.gauss(0.0, 0.1))
            grad_w += error * x
            grad_b += error
            loss += error * error
        w -= 0.5 * grad_w / batch
        b -= 0.5 * grad_b / batch
        loss /= batch
        progress.write(json.dumps({"iteration": iteration, "loss": loss}) + "\n")
        progress.flush()
        if iteration % PRINT_EVERY == 0 or iteration == iterations:
            print(f"iteration {iteration}/{iterations} loss {loss:.5f} w {w:.3f} b {b:.3f}",
                  flush=True)  # fmt: skip
        due = stop or iteration % CHECKPOINT_EVERY == 0 or iteration == iterations
        if checkpoint is not None and due:
            save(checkpoint, {"iteration": iteration, "w": w, "b": b})
        if stop:
            print(f"stopped at iteration {iteration}; checkpoint saved", flush=True)
            return 128 + signal.SIGTERM
    return 0


def save(path: Path, state: dict) -> None:
    """Write the checkpoint atomically: a kill at any moment leaves the old or the new one."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state))
    os.replace(temporary, path)


if __name__ == "__main__":
    sys.exit(main())
