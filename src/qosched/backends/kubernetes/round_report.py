"""What one scheduling round did (:class:`StepReport`): built by the scheduler's round, read by
its log, its metrics (:mod:`.observe`) and the tests. Apart from the scheduler so that the metrics
need not import it."""

from __future__ import annotations

from dataclasses import dataclass, field

from qosched.cluster.admission import Admission


@dataclass(slots=True)
class StepReport:
    """What one round did: for logs, metrics and tests."""

    leading: bool = False
    synced: bool = False
    abandoned: bool = False  # the Lease was lost during the round: its remaining writes unsent
    decision: dict[str, int] = field(default_factory=dict)
    admitted: dict[str, Admission] = field(default_factory=dict)  # job -> this round's
    succeeded: list[str] = field(default_factory=list)
    scaled: dict[str, int] = field(default_factory=dict)  # job -> replicas
    resized: dict[str, int] = field(default_factory=dict)  # pod -> cores, in place
    restarted: list[str] = field(default_factory=list)  # pods deleted to restart at a new size
    bound: dict[str, str] = field(default_factory=dict)  # pod -> node
    released: list[str] = field(default_factory=list)  # pods deleted after a failed gang
    invalid: dict[str, str] = field(default_factory=dict)  # job -> why it was skipped
    # job -> the write refused 409 because its object changed since it was read: the job is
    # decided again next round
    stale: dict[str, str] = field(default_factory=dict)
    slack: dict[str, float] = field(default_factory=dict)  # job -> deadline - predicted finish
    left_out: dict[str, str] = field(default_factory=dict)  # node -> why its room is unreadable
    errors: list[str] = field(default_factory=list)
    failed: bool = False  # the round ended on an unexpected error (in ``errors``)
