"""Built-in real training workloads (PyTorch models on seeded synthetic data), by name.

A job names one of these (``cnn``, ``transformer``) and the local runner trains it for real on the
CPU cores the scheduler gives it; see ``qosched.backends.local.runner``.
"""

from __future__ import annotations

from qosched.core.errors import InputError
from qosched.workloads.base import DataStream, TrainingState, WorkloadFactory
from qosched.workloads.cnn import CnnWorkload
from qosched.workloads.transformer import TransformerWorkload

WORKLOADS: dict[str, WorkloadFactory] = {}


def register_workload(workload: WorkloadFactory) -> WorkloadFactory:
    """Make ``workload`` available by its ``name``. A duplicate name raises."""
    if workload.name in WORKLOADS:
        raise ValueError(f"workload {workload.name!r} is already registered")
    WORKLOADS[workload.name] = workload
    return workload


def get_workload(name: str) -> WorkloadFactory:
    """The registered workload called ``name``; an unknown name lists the known ones."""
    try:
        return WORKLOADS[name]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown workload {name!r}; expected one of: {', '.join(sorted(WORKLOADS))}",
            field="workload",
        ) from None


register_workload(CnnWorkload())
register_workload(TransformerWorkload())

__all__ = [
    "WORKLOADS",
    "DataStream",
    "TrainingState",
    "WorkloadFactory",
    "get_workload",
    "register_workload",
]
