"""This machine's GPUs for the local service: which exist (the inventory) and which job holds
which (the assignment).

The inventory is either declared (``qosched up --gpus 0,1,2,3``, which wins, or ``--gpus none``)
or found through NVML (``nvidia-ml-py``, the optional extra ``qosched[gpu]``), imported only when
the service starts. No NVML library, no driver or an NVML error all mean no GPUs: the service
then schedules cores only, and a job that asks for GPUs fails with the reason.

GPU indices are NVML's (PCI bus order). A job's processes get ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
with its ``CUDA_VISIBLE_DEVICES``, so CUDA numbers the devices the same way (its default order,
fastest first, may differ). When the service itself was started with ``CUDA_VISIBLE_DEVICES``
listing indices, NVML's GPUs are narrowed to those.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence

from qosched.core.errors import InputError
from qosched.trainingjob.protocol import ENV_CUDA_DEVICES, MAX_GPU_INDEX

log = logging.getLogger(__name__)

#: ``--gpus none``: declare that this machine has no GPU for the service (NVML not asked).
NO_GPUS = "none"


def parse_gpu_list(text: str, *, field: str = "gpus", source: str | None = None) -> tuple[int, ...]:
    """``"0,1,3"`` -> ``(0, 1, 3)``; ``"none"`` -> ``()``. Indices are whole numbers in
    [0, ``MAX_GPU_INDEX``], each at most once; anything else is an ``InputError``."""
    text = text.strip()
    if text.lower() == NO_GPUS:
        return ()
    if not text or len(text) > 8 * (MAX_GPU_INDEX + 1):
        raise InputError(
            f"expected GPU indices like 0,1,3 or {NO_GPUS!r}, got {text[:40]!r}",
            field=field,
            source=source,
        )
    indices: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or len(part) > 4:
            raise InputError(
                f"expected a GPU index (a whole number in [0, {MAX_GPU_INDEX}]), got {part!r}",
                field=field,
                source=source,
            )
        index = int(part)
        if index > MAX_GPU_INDEX:
            raise InputError(
                f"GPU index {index} is over {MAX_GPU_INDEX}", field=field, source=source
            )
        if index in indices:
            raise InputError(f"GPU {index} is listed twice", field=field, source=source)
        indices.append(index)
    return tuple(sorted(indices))


def detect_gpus(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """The GPUs NVML reports, narrowed to ``CUDA_VISIBLE_DEVICES`` when that lists indices;
    ``()`` when NVML is missing or fails (said in the log, never raised)."""
    environ = os.environ if environ is None else environ
    try:
        import pynvml  # the optional extra qosched[gpu]
    except ImportError:
        log.info("nvidia-ml-py is not installed: no GPUs (install qosched[gpu] or use --gpus)")
        return ()
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its many subclasses: no driver, no GPU
        log.info("NVML is not available (%s): no GPUs", exc)
        return ()
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except Exception as exc:
        log.warning("NVML could not count the GPUs (%s): no GPUs", exc)
        return ()
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # nothing to do about it; the count is already known or not
            log.debug("nvmlShutdown failed", exc_info=True)
    found = tuple(range(min(count, MAX_GPU_INDEX + 1)))
    visible = environ.get(ENV_CUDA_DEVICES)
    if visible is None:
        return found
    try:
        allowed = parse_gpu_list(visible or NO_GPUS, field=ENV_CUDA_DEVICES, source="environment")
    except InputError:
        # UUIDs or MIG names: their NVML indices are not known without more NVML calls.
        log.warning(
            "%s=%r does not list indices; using all %d GPUs", ENV_CUDA_DEVICES, visible, count
        )
        return found
    return tuple(index for index in found if index in allowed)


def gpu_inventory(declared: Sequence[int] | None) -> tuple[int, ...]:
    """The service's GPUs: ``declared`` when given (already parsed), else what NVML finds."""
    if declared is not None:
        return tuple(sorted(declared))
    return detect_gpus()


def assign_gpus(
    counts: Mapping[str, int],
    current: Mapping[str, Sequence[int]],
    gpus: Sequence[int],
) -> dict[str, tuple[int, ...]]:
    """Concrete GPUs for the jobs of ``counts`` (in priority order), from ``gpus``, the ones
    free of any stopping job. ``current`` is what running jobs hold now.

    - A running job whose count is unchanged keeps its GPUs.
    - A running job whose count changes gets nothing here, and its GPUs go to no one: a GPU job
      is re-sized by a restart, so the caller stops it, and it is placed again once its process
      is gone.
    - Every other job gets its count of free GPUs in index order, or, when too few are left,
      nothing this time (it waits; later jobs may still fit).

    So no GPU is ever in two jobs' hands, and each job placed has exactly its count.
    """
    if any(count < 0 for count in counts.values()):
        raise ValueError(f"negative GPU count in {dict(counts)}")
    result: dict[str, tuple[int, ...]] = {}
    busy: set[int] = set()
    for job_id, held in current.items():
        busy.update(held)
        if held and counts.get(job_id, 0) == len(held):
            result[job_id] = tuple(held)
    free = [g for g in gpus if g not in busy]
    for job_id, count in counts.items():
        if job_id in result or not count or current.get(job_id):
            continue
        if count <= len(free):
            result[job_id], free = tuple(free[:count]), free[count:]
    return result


__all__ = ["NO_GPUS", "assign_gpus", "detect_gpus", "gpu_inventory", "parse_gpu_list"]
