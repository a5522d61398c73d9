"""What a user submits: a training job with a deadline (or none, for best effort)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from qosched.core.errors import InputError

#: The longest run a job of a trace may take on its requested workers (and the longest
#: ``duration_s``). The longest job of the ITP trace release runs 18 days; a job of years would
#: only keep the policies that decide on a clock ticking through simulated years.
MAX_RUN_S = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One training job, validated at construction.

    ``deadline_s`` is absolute (same clock as ``submit_s``); ``None`` means best effort.
    ``requested_workers`` is what the user asked for: request-honouring policies use it,
    deadline-aware ones may ignore it. ``duration_s`` is informational (a trace's own estimate).
    """

    job_id: str
    submit_s: float
    model: str
    batch_size: int
    iterations: int
    deadline_s: float | None
    requested_workers: int
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if not self.job_id:
            raise InputError("must not be empty", field="job_id")
        if not math.isfinite(self.submit_s) or self.submit_s < 0:
            raise InputError(f"job {self.job_id}: must be finite and >= 0", field="submit_time")
        if not self.model:
            raise InputError(f"job {self.job_id}: must not be empty", field="model_name")
        if self.batch_size < 1:
            raise InputError(f"job {self.job_id}: must be >= 1", field="batch_size")
        if self.iterations < 1:
            raise InputError(f"job {self.job_id}: must be >= 1", field="iterations")
        if self.requested_workers < 1:
            raise InputError(f"job {self.job_id}: must be >= 1", field="num_gpu")
        if self.deadline_s is not None and (
            not math.isfinite(self.deadline_s) or self.deadline_s <= self.submit_s
        ):
            raise InputError(
                f"job {self.job_id}: deadline {self.deadline_s} is not after its "
                f"submission at {self.submit_s}",
                field="deadline",
            )

    @property
    def best_effort(self) -> bool:
        return self.deadline_s is None
