"""Where a job's workers are: pure functions from worker counts to per-node placements.

Rules, in order: a job keeps its current placement when its count is unchanged (no restart);
every other job goes on as few nodes as possible, best-fit on one node when it fits there. Jobs
are placed in the policy's priority order, or largest first (``largest_first=True``): with
power-of-two counts and power-of-two nodes that is buddy allocation, which never fragments.
When keeping placements forces a job across more nodes than it needs, a re-pack (largest first,
each unchanged job back at its old spot when that is still free) is tried and taken if it splits
fewer jobs: a split job is slower for the rest of its run, a moved one pays one restart. Jobs the
policy pins stay where they are in the re-pack; where a pinned job is itself split, a second
re-pack that may move it is tried as well, since keeping it there keeps it slow.

On a cluster of several GPU types, ``spans_of(job_id, workers)`` gives the node ranges (one per
type) a job's gang may take, in the order it prefers them: the gang is placed inside the first
with room, never across two (no mixed gangs). None: every node is one range.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from operator import itemgetter

from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import Placement

#: Per (job id, workers), the node ranges its gang may take, most preferred first.
SpansOf = Callable[[str, int], Sequence[range]]
#: A (job id, workers) pair's count. Sorting on it with ``reverse=True`` keeps equal counts in
#: their order (Python's sort stays stable reversed): largest first without a call per job.
_COUNT = itemgetter(1)


def min_nodes(workers: int, workers_per_node: int) -> int:
    return -(-workers // workers_per_node)


def size(placement: Placement) -> int:
    """Workers in a placement."""
    # NOTE: most placements are on one node; asked of every placed job at every decision.
    if len(placement) == 1:
        return placement[0][1]
    return sum(n for _, n in placement)


def is_split(placement: Placement, workers_per_node: int) -> bool:
    """True when the job spans more nodes than its worker count needs."""
    return len(placement) > min_nodes(size(placement), workers_per_node)


def _fit(
    workers: int, free: list[int], workers_per_node: int, spans: Sequence[range] | None = None
) -> Placement | None:
    if spans is not None:
        return _fit_within(workers, free, workers_per_node, spans)
    if workers <= workers_per_node:
        best = -1
        for node, available in enumerate(free):
            if available >= workers and (best < 0 or available < free[best]):
                best = node
                if available == workers:
                    break
        if best >= 0:
            free[best] -= workers
            return ((best, workers),)
    if sum(free) < workers:
        return None
    taken = []
    remaining = workers
    # Most free first, ties by node: a stable sort keeps equal nodes in order, reversed too.
    for node in sorted(range(len(free)), key=free.__getitem__, reverse=True):
        if remaining == 0:
            break
        share = min(free[node], remaining)
        if share:
            taken.append((node, share))
            free[node] -= share
            remaining -= share
    return tuple(sorted(taken))


def _fit_within(
    workers: int, free: list[int], workers_per_node: int, spans: Sequence[range]
) -> Placement | None:
    """``_fit`` inside the first of ``spans`` with room for all ``workers``."""
    for span in spans:
        part = free[span.start : span.stop]
        placement = _fit(workers, part, workers_per_node)
        if placement is not None:
            free[span.start : span.stop] = part
            return tuple((node + span.start, n) for node, n in placement)
    return None


def _fit_around(
    workers: int,
    free: list[int],
    reserved: Sequence[int] | None,
    workers_per_node: int,
    spans: Sequence[range] | None = None,
) -> Placement | None:
    """``_fit`` on workers nobody else prefers, unless that splits the job and taking a reserved
    spot does not: a split slows the job for the rest of its run, a move costs one restart.
    ``reserved`` None: nobody prefers any worker, so this is ``_fit`` itself."""
    if reserved is None:
        return _fit(workers, free, workers_per_node, spans)
    # NOTE: ``max(f - r, 0)`` without the call (the same ints): one list per job placed.
    unreserved = [f - r if f > r else 0 for f, r in zip(free, reserved, strict=True)]
    placement = _fit(workers, unreserved, workers_per_node, spans)
    if placement is None or is_split(placement, workers_per_node):
        trial = list(free)
        anywhere = _fit(workers, trial, workers_per_node, spans)
        if anywhere is not None and (placement is None or not is_split(anywhere, workers_per_node)):
            placement = anywhere
    if placement is not None:
        for node, n in placement:
            free[node] -= n
    return placement


def _pack(
    order: Sequence[tuple[str, int]],
    cluster: ClusterSpec,
    keep: Mapping[str, Placement],
    prefer: Mapping[str, Placement],
    spans_of: SpansOf | None = None,
) -> tuple[dict[str, Placement], int]:
    """Place ``keep`` as it is, then ``order``, each at its ``prefer`` spot when that is free."""
    per_node = cluster.workers_per_node
    free = [per_node] * cluster.num_nodes
    result: dict[str, Placement] = {}
    for job_id, placement in keep.items():
        for node, n in placement:
            free[node] -= n
        result[job_id] = placement
    # workers at the preferred spots of jobs not placed yet: a job that has to move looks
    # elsewhere first, so one move does not displace another job in turn.
    reserved = [0] * cluster.num_nodes
    for placement in prefer.values():
        for node, n in placement:
            reserved[node] += n
    around = reserved if prefer else None  # nothing preferred: plain best fit
    splits = 0
    # NOTE: a one-node spot is checked and taken without the loops and `is_split` (a job on
    # one node is never split): a re-pack runs over every placed job, most on one node.
    for job_id, workers in order:
        if job_id in result or workers == 0:
            continue
        placement = prefer.get(job_id)
        if placement is not None:
            if len(placement) == 1:
                node, n = placement[0]
                reserved[node] -= n
                if free[node] >= n:
                    free[node] -= n
                    result[job_id] = placement
                    continue
            else:
                for node, n in placement:
                    reserved[node] -= n
                if all(free[node] >= n for node, n in placement):
                    for node, n in placement:
                        free[node] -= n
                    result[job_id] = placement
                    splits += is_split(placement, per_node)
                    continue
        spans = None if spans_of is None else spans_of(job_id, workers)
        placement = _fit_around(workers, free, around, per_node, spans)
        if placement is not None:
            result[job_id] = placement
            if len(placement) > 1:
                splits += is_split(placement, per_node)
    return result, splits


def place(
    wanted: Sequence[tuple[str, int]],
    current: Mapping[str, Placement],
    cluster: ClusterSpec,
    *,
    largest_first: bool = False,
    pinned: Collection[str] = frozenset(),
    spans_of: SpansOf | None = None,
) -> dict[str, Placement]:
    """Placements for ``wanted`` (job id, workers) pairs; a job that does not fit is left out.

    ``pinned`` jobs with an unchanged count stay where they are even in a re-pack, unless they
    are split and a re-pack that moves them splits fewer jobs."""
    order = sorted(wanted, key=_COUNT, reverse=True) if largest_first else list(wanted)
    # NOTE: one look-up per job and `size` inlined for a one-node placement (the same test):
    # this runs over every placed job at every decision.
    unchanged = {}
    for job_id, workers in wanted:
        spot = current.get(job_id)
        if (
            workers
            and spot is not None
            and (spot[0][1] if len(spot) == 1 else size(spot)) == workers
        ):
            unchanged[job_id] = spot
    sticky, sticky_splits = _pack(order, cluster, unchanged, {}, spans_of)
    if sticky_splits == 0 or not unchanged:
        return sticky
    # Re-pack largest first, leaving each unchanged job where it was whenever its spot is free.
    by_size = sorted(wanted, key=_COUNT, reverse=True)
    best, best_splits = sticky, sticky_splits
    kept = {job_id: spot for job_id, spot in unchanged.items() if job_id in pinned}
    per_node = cluster.workers_per_node
    unsplit = {job_id: spot for job_id, spot in kept.items() if not is_split(spot, per_node)}
    for keep in (kept, unsplit) if len(unsplit) < len(kept) else (kept,):
        movable = {job_id: spot for job_id, spot in unchanged.items() if job_id not in keep}
        repacked, repacked_splits = _pack(by_size, cluster, keep, movable, spans_of)
        if repacked_splits < best_splits and len(repacked) >= len(sticky):
            best, best_splits = repacked, repacked_splits
    return best


class Placements:
    """The placements a backend holds, with each node's free workers, so that changing some
    jobs' counts places those jobs alone: `changed` gives what `place` gives whenever none of
    them ends up split (every other job keeps its spot), and says so when one would."""

    def __init__(self, cluster: ClusterSpec, spans_of: SpansOf | None = None) -> None:
        self.cluster = cluster
        self.spans_of = spans_of
        self.free = [cluster.workers_per_node] * cluster.num_nodes
        self.of: dict[str, Placement] = {}

    def changed(
        self, counts: Sequence[tuple[str, int]], *, largest_first: bool = False
    ) -> dict[str, Placement] | None:
        """New placements for the jobs in ``counts`` whose count changes, in ``counts``' order
        (largest first with ``largest_first``): () for a job given 0 or that does not fit.
        None when one would be split: `place` then tries a re-pack of every job."""
        per_node, of, spans_of = self.cluster.workers_per_node, self.of, self.spans_of
        free = list(self.free)
        moving = []
        for job_id, workers in counts:
            spot = of.get(job_id, ())
            if workers and spot and size(spot) == workers:
                continue  # unchanged: it stays
            for node, n in spot:
                free[node] += n
            moving.append((job_id, workers))
        if largest_first:
            moving.sort(key=_COUNT, reverse=True)
        result: dict[str, Placement] = {}
        for job_id, workers in moving:
            spans = None if spans_of is None or not workers else spans_of(job_id, workers)
            placement = _fit(workers, free, per_node, spans) if workers else None
            if placement is not None and is_split(placement, per_node):
                return None
            result[job_id] = placement or ()
        return result

    def set(self, job_id: str, placement: Placement) -> None:
        """Record the job's new placement (() when it holds none)."""
        free = self.free
        for node, n in self.of.pop(job_id, ()):
            free[node] += n
        if placement:
            for node, n in placement:
                free[node] -= n
            self.of[job_id] = placement
