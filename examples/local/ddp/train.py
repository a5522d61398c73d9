"""A data-parallel training job as qosched runs it: ``torchrun`` starts one process per worker.

    torchrun --standalone --nproc-per-node N train.py

Works with any N: the global batch stays 64, split evenly across the processes, so a job
re-sized by restart (qosched stops it, then starts it again with another N) trains the same
model as before. gloo on CPUs, NCCL when each process has a GPU. Progress goes to qosched through
``qosched.job`` from rank 0; a stop request from qosched (SIGTERM, forwarded by torchrun) is
agreed on by all ranks at the same step, rank 0 saves a checkpoint in the job's folder, and the
next start resumes from it. Outside qosched it trains to ``--iterations`` and saves in ``./``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import qosched.job

GLOBAL_BATCH = 64
FEATURES = 32


def batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the global batch of ``step``: the same global batch whatever the
    number of processes, so a restart with another count changes nothing but the speed."""
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=generator)
    y = x[:, :4].sum(dim=1, keepdim=True) - x[:, 4:8].prod(dim=1, keepdim=True)
    share = GLOBAL_BATCH // world
    return x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    total = qosched.job.total_iterations() or args.iterations
    folder = qosched.job.checkpoint_dir() or Path(".")
    checkpoint = folder / "ddp-checkpoint.pt"

    use_cuda = torch.cuda.is_available() and bool(qosched.job.gpus() or not qosched.job.active())
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if use_cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    qosched.job.stop_requested()  # install the SIGTERM handler before training starts

    for step in range(start, total):
        x, y = batch(step, rank, world)
        if device is not None:
            x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        qosched.job.report(step + 1, loss=loss.item())  # rank 0 only; a no-op elsewhere
        # Every rank stops at the same step: a stop seen by any of them is seen by all.
        stop = torch.tensor([float(qosched.job.stop_requested())], device=device)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() and step + 1 < total:
            if rank == 0:
                save(checkpoint, model, optimizer, step + 1)
            dist.barrier()
            break
    else:
        if rank == 0:
            save(checkpoint, model, optimizer, total)
    dist.destroy_process_group()


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    # Write then rename: a kill in the middle leaves the previous checkpoint whole.
    temporary = path.with_suffix(".tmp")
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, temporary
    )
    os.replace(temporary, path)


if __name__ == "__main__":
    main()
