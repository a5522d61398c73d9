"""A user's own training script, as `bench/local_first_time.py` submits it: a small PyTorch MLP
on seeded synthetic data that reports with `qosched.job.report`, checkpoints in the job's
folder and stops when asked. Outside qosched it trains ``--iterations`` iterations."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

import qosched.job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    total = qosched.job.total_iterations() or args.iterations
    torch.manual_seed(0)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, 1),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    folder = qosched.job.checkpoint_dir()
    checkpoint = Path(folder) / "mlp.pt" if folder else None
    start = 0
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["iteration"]
    inputs = torch.randn(256, args.width)
    targets = inputs.sum(dim=1, keepdim=True)
    for step in range(start, total):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        qosched.job.report(step + 1, loss=loss.item())
        if step % 200 == 0:
            print(f"iteration {step + 1}: loss {loss.item():.4f}", flush=True)
        if checkpoint is not None and (qosched.job.stop_requested() or (step + 1) % 200 == 0):
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "iteration": step + 1},
                checkpoint,
            )  # fmt: skip
            if qosched.job.stop_requested():
                raise SystemExit(0)


if __name__ == "__main__":
    main()
