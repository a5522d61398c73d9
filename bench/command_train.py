"""A user's own PyTorch training script, as a command job runs it (``local_evidence.py commands``).

A small MLP on seeded synthetic data. It reports every iteration with ``qosched.job.report``,
uses as many threads as it has cores (re-read each iteration: an in-place re-size changes its
cores under it), and on a stop request saves its step and exits, resuming from it next start.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn

import qosched.job

BATCH, WIDTH = 1024, 1024


def main() -> None:
    total = qosched.job.total_iterations() or 200
    folder = qosched.job.checkpoint_dir()
    checkpoint = folder / "step.json" if folder else None
    step = json.loads(checkpoint.read_text())["step"] if checkpoint and checkpoint.exists() else 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    threads = 0
    while step < total:
        cores = len(os.sched_getaffinity(0))
        if cores != threads:
            torch.set_num_threads(threads := cores)
        generator = torch.Generator().manual_seed(step)
        x = torch.randn(BATCH, WIDTH, generator=generator)
        y = torch.randint(0, 10, (BATCH,), generator=generator)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        qosched.job.report(step, loss=loss.item())
        if qosched.job.stop_requested():
            if checkpoint is not None:
                checkpoint.write_text(json.dumps({"step": step}))
            raise SystemExit(0)


if __name__ == "__main__":
    main()
