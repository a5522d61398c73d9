"""Tests for qosched.cluster.placement: best fit, whole nodes, sticky placements, re-pack."""

from __future__ import annotations

import random

import pytest

from qosched.cluster.placement import is_split, min_nodes, place
from qosched.cluster.spec import ClusterSpec


def used_per_node(placements, cluster: ClusterSpec) -> list[int]:
    used = [0] * cluster.num_nodes
    for placement in placements.values():
        for node, workers in placement:
            used[node] += workers
    return used


# --- min_nodes and is_split -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "workers_per_node", "expected"),
    [
        (0, 8, 0),
        (1, 8, 1),
        (8, 8, 1),
        (9, 8, 2),
        (16, 8, 2),
        (17, 8, 3),
        (3, 1, 3),
    ],
    ids=["zero", "one", "exactly-a-node", "one-over", "two-nodes", "just-over-two", "1-gpu-nodes"],
)
def test_min_nodes_rounds_up(workers, workers_per_node, expected):
    assert min_nodes(workers, workers_per_node) == expected


@pytest.mark.parametrize(
    ("placement", "workers_per_node", "expected"),
    [
        ((), 8, False),
        (((0, 4),), 8, False),
        (((0, 2), (1, 2)), 8, True),
        (((0, 8), (1, 8)), 8, False),
        (((0, 8), (1, 4), (2, 4)), 8, True),
        (((0, 4), (1, 4)), 4, False),
        (((0, 1), (1, 1)), 1, False),
    ],
    ids=[
        "empty",
        "one-node",
        "4-workers-over-two-nodes",
        "16-workers-on-two-whole-nodes",
        "16-workers-over-three-nodes",
        "8-workers-on-two-4-gpu-nodes",
        "2-workers-on-two-1-gpu-nodes",
    ],
)
def test_is_split_when_more_nodes_than_needed(placement, workers_per_node, expected):
    assert is_split(placement, workers_per_node) is expected


# --- one node, best fit -----------------------------------------------------------------------

# Three 8-GPU nodes: "x" holds 6 on node 0 (2 free), "y" 3 on node 1 (5 free), node 2 is empty.
BUSY_CURRENT = {"x": ((0, 6),), "y": ((1, 3),)}


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (1, ((0, 1),)),
        (2, ((0, 2),)),
        (3, ((1, 3),)),
        (5, ((1, 5),)),
        (6, ((2, 6),)),
        (8, ((2, 8),)),
    ],
    ids=[
        "1-on-fullest-node",
        "2-fills-node-0",
        "3-skips-too-full-node-0",
        "5-fills-node-1",
        "6-only-empty-node-fits",
        "8-whole-empty-node",
    ],
)
def test_job_that_fits_on_one_node_goes_on_the_fullest_node_that_fits(workers, expected):
    cluster = ClusterSpec.from_flags(3, 8)
    wanted = [("x", 6), ("y", 3), ("new", workers)]
    assert place(wanted, BUSY_CURRENT, cluster)["new"] == expected


def test_equally_free_nodes_tie_to_the_lowest_index():
    cluster = ClusterSpec.from_flags(3, 8)
    assert place([("new", 3)], {}, cluster) == {"new": ((0, 3),)}


# --- larger than a node -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "workers", "expected"),
    [
        ({}, 8, ((0, 4), (1, 4))),
        ({"x": ((1, 1),)}, 6, ((0, 4), (2, 2))),
        ({"x": ((0, 2),)}, 10, ((0, 2), (1, 4), (2, 4))),
    ],
    ids=["8-on-two-empty-nodes", "6-whole-node-0-then-node-2", "10-both-whole-nodes-then-rest"],
)
def test_job_larger_than_a_node_takes_the_freest_nodes_first(current, workers, expected):
    cluster = ClusterSpec.from_flags(3, 4)
    wanted = [*((job_id, sum(n for _, n in p)) for job_id, p in current.items()), ("new", workers)]
    assert place(wanted, current, cluster)["new"] == expected


def test_job_that_no_single_node_can_hold_spreads_when_a_repack_cannot_help():
    cluster = ClusterSpec.from_flags(2, 4)
    current = {"x": ((0, 3),), "y": ((1, 3),)}
    placements = place([("x", 3), ("y", 3), ("new", 2)], current, cluster)
    # One GPU is free on each node, however "x" and "y" are arranged.
    assert placements == {"x": ((0, 3),), "y": ((1, 3),), "new": ((0, 1), (1, 1))}


# --- sticky placements ------------------------------------------------------------------------


def test_unchanged_count_keeps_its_placement_even_before_a_higher_priority_job():
    cluster = ClusterSpec.from_flags(2, 8)
    # Placed afresh in this order, "big" would take node 0 and "x" node 1.
    placements = place([("big", 8), ("x", 2)], {"x": ((0, 2),)}, cluster)
    assert placements == {"big": ((1, 8),), "x": ((0, 2),)}


def test_resized_job_is_placed_afresh_by_best_fit():
    cluster = ClusterSpec.from_flags(2, 8)
    current = {"y": ((0, 4),), "x": ((1, 2),)}
    placements = place([("y", 4), ("x", 4)], current, cluster)
    # Without its old 2 GPUs, node 1 has 8 free and node 0 has 4: node 0 is the fullest fit.
    assert placements == {"y": ((0, 4),), "x": ((0, 4),)}


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ([("a", 4), ("b", 2)], {"a": ((0, 4),)}),
        ([("a", 0), ("b", 2)], {"b": ((0, 2),)}),
    ],
    ids=["does-not-fit", "zero-workers"],
)
def test_job_that_does_not_fit_or_wants_no_workers_is_left_out(wanted, expected):
    assert place(wanted, {}, ClusterSpec.from_flags(1, 4)) == expected


# --- re-pack ----------------------------------------------------------------------------------

# Two 8-GPU nodes, "a" and "b" each hold half of one; keeping both leaves no whole node for "c".
REPACK_CURRENT = {"a": ((0, 4),), "b": ((1, 4),)}
REPACK_WANTED = [("a", 4), ("b", 4), ("c", 8)]


@pytest.mark.parametrize("largest_first", [False, True], ids=["priority-order", "largest-first"])
def test_repack_moves_a_kept_job_so_the_new_job_is_not_split(largest_first):
    cluster = ClusterSpec.from_flags(2, 8)
    placements = place(REPACK_WANTED, REPACK_CURRENT, cluster, largest_first=largest_first)
    # Largest first: "c" takes node 0 whole; "a"'s old spot is gone, so it joins "b" on node 1,
    # and "b" stays where it was.
    assert placements == {"c": ((0, 8),), "a": ((1, 4),), "b": ((1, 4),)}


def test_repack_splits_fewer_jobs_than_keeping_every_placement():
    cluster = ClusterSpec.from_flags(2, 8)
    placements = place(REPACK_WANTED, REPACK_CURRENT, cluster)
    # Keeping "a" and "b" where they are would split "c" four and four: one split job.
    assert sum(is_split(p, cluster.workers_per_node) for p in placements.values()) == 0


def test_repack_is_taken_even_for_a_job_that_fits_a_node_size():
    cluster = ClusterSpec.from_flags(2, 4)
    current = {"x": ((0, 2),), "y": ((1, 2),)}
    placements = place([("x", 2), ("y", 2), ("new", 3)], current, cluster)
    # Kept, "x" and "y" leave 2 + 2 free and split "new"; re-packed largest first, "new" takes
    # node 0, "x" moves next to "y".
    assert placements == {"new": ((0, 3),), "x": ((1, 2),), "y": ((1, 2),)}


def test_a_pinned_job_split_across_nodes_moves_where_that_splits_fewer_jobs():
    """Pinned jobs stay where they are, except a pinned job that is itself split: a re-pack that
    may move it is tried too, and taken where it splits fewer jobs."""
    cluster = ClusterSpec.from_flags(3, 4)
    current = {"s": ((0, 1), (2, 3))}
    placements = place([("s", 4), ("n", 8)], current, cluster, largest_first=True, pinned={"s"})
    # Kept, "s" leaves 3 + 4 + 1 for "n", which then spans three nodes. Moved, "s" takes node
    # 2 whole and "n" nodes 0 and 1: nothing is split.
    assert placements == {"n": ((0, 4), (1, 4)), "s": ((2, 4),)}


def test_a_pinned_job_on_whole_nodes_stays_where_it_is():
    cluster = ClusterSpec.from_flags(2, 8)
    # The re-pack would move "a" to give "c" a whole node (the tests above); pinned, it stays.
    placements = place(REPACK_WANTED, REPACK_CURRENT, cluster, largest_first=True, pinned={"a"})
    assert placements["a"] == REPACK_CURRENT["a"]


def scattered(rng: random.Random, cluster: ClusterSpec) -> dict:
    """Placements left behind by jobs that came and went: pieces on random nodes, some split."""
    free = [cluster.workers_per_node] * cluster.num_nodes
    current = {}
    for index in range(rng.randint(2, 6)):
        left, pieces = rng.choice([1, 2, 2, 4, 8]), []
        for node in rng.sample(range(cluster.num_nodes), cluster.num_nodes):
            take = min(left, free[node], rng.randint(1, left)) if left else 0
            if take:
                pieces.append((node, take))
                free[node] -= take
                left -= take
        if left:
            for node, n in pieces:
                free[node] += n
        else:
            current[f"j{index}"] = tuple(sorted(pieces))
    return current


@pytest.mark.parametrize("seed", range(40))
def test_pinned_whole_jobs_stay_and_every_job_gets_its_count_on_generated_states(seed):
    rng = random.Random(seed)
    cluster = ClusterSpec.from_flags(rng.choice([3, 4]), rng.choice([4, 8]))
    current = scattered(rng, cluster)
    wanted = [(job_id, sum(n for _, n in spot)) for job_id, spot in current.items()]
    wanted += [(f"new{i}", rng.choice([1, 2, 4, 8])) for i in range(rng.randint(1, 3))]
    pinned = {job_id for job_id in current if rng.random() < 0.7}
    placements = place(wanted, current, cluster, largest_first=True, pinned=pinned)
    per_node = cluster.workers_per_node
    assert max(used_per_node(placements, cluster)) <= per_node
    for job_id, workers in wanted:
        assert job_id not in placements or sum(n for _, n in placements[job_id]) == workers
        if job_id in pinned and not is_split(current[job_id], per_node):
            assert placements[job_id] == current[job_id]


# --- buddy allocation -------------------------------------------------------------------------


def random_round(rng: random.Random, previous: dict[str, int], capacity: int):
    counts = {}
    for index in range(10):
        job_id = f"j{index}"
        if job_id in previous and rng.random() < 0.5:
            counts[job_id] = previous[job_id]
        else:
            counts[job_id] = rng.choice([0, 1, 1, 2, 2, 4, 4, 8, 16])
    wanted = list(counts.items())
    rng.shuffle(wanted)
    while sum(g for _, g in wanted) > capacity:
        wanted.pop()
    return wanted


@pytest.mark.parametrize("seed", range(8))
def test_largest_first_with_power_of_two_counts_never_splits_a_job(seed):
    cluster = ClusterSpec.from_flags(4, 8)
    rng = random.Random(seed)
    current: dict = {}
    for _ in range(12):
        wanted = random_round(rng, {j: sum(n for _, n in p) for j, p in current.items()}, 32)
        placements = place(wanted, current, cluster, largest_first=True)
        assert {j: sum(n for _, n in p) for j, p in placements.items()} == {
            j: g for j, g in wanted if g
        }
        assert max(used_per_node(placements, cluster)) <= cluster.workers_per_node
        split = [j for j, p in placements.items() if is_split(p, cluster.workers_per_node)]
        assert split == [], (wanted, current, placements)
        current = placements
