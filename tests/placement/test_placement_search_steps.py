"""Phase one's named steps on tenants small enough to follow by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qosched.core.errors import InputError
from qosched.placement.ir import TenantGraph
from qosched.placement.search import (
    Front,
    Tags,
    allowed_cuts,
    check_switch_budget,
    close,
    first_layer,
    next_layer,
    trace_back,
)


def two_units(**kw):
    # cpu 1 + 4, gpu 2 + 1, a 0.5 s cut; input 0.25 s to the gpu, 0.125 s back
    return TenantGraph.from_costs(
        "a", [1.0, 4.0], [2.0, 1.0], [0.5], input_to_gpu_s=0.25, output_from_gpu_s=0.125, **kw
    )


def points(group):
    return sorted(map(tuple, group[0].tolist()))


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_switch_budget_is_a_non_negative_integer(bad):
    with pytest.raises(InputError):
        check_switch_budget(bad)


def test_allowed_cuts_mark_only_the_given_boundaries():
    t = TenantGraph.from_costs("a", [1.0] * 4, [1.0] * 4, [0.1] * 3)
    assert allowed_cuts(t, None) == [True, True, True]
    assert allowed_cuts(t, [0, 2]) == [True, False, True]
    with pytest.raises(InputError, match="outside"):
        allowed_cuts(t, [3])


def test_a_copy_adds_its_share_to_both_processors_and_all_of_it_to_the_link():
    front = Front(share=0.25, cell=0.0)
    assert front.copy(2.0).tolist() == [0.5, 0.5, 2.0]


def test_the_goal_keeps_states_whose_latency_fits():
    # latency = cpu + gpu + link * (1 - 2 * share) = 1 + 1 + 2 * 0.5 = 3 for the first row
    front = Front(share=0.25, cell=0.0, limit=3.0)
    pts = np.array([[1.0, 1.0, 2.0], [1.0, 1.5, 2.0]])
    kept, tag = front.within(pts, np.array([[0, 0], [0, 1]]))
    assert kept.tolist() == [[1.0, 1.0, 2.0]]
    assert tag.tolist() == [[0, 0]]


def test_a_union_drops_dominated_states_and_on_a_grid_near_equal_ones():
    a = (np.array([[1.0, 2.0, 0.0]]), np.array([[0, 0]]))
    b = (np.array([[1.0, 3.0, 0.0], [0.5, 4.0, 0.0]]), np.array([[1, 0], [1, 1]]))
    exact = Front(share=0.0, cell=0.0).union(a, b)
    assert points(exact) == [(0.5, 4.0, 0.0), (1.0, 2.0, 0.0)]
    # cells of 2 s: (0.5, 4) keys (0, 2), (1, 2) keys (0, 1) and dominates it
    grid = Front(share=0.0, cell=2.0).union(a, b)
    assert points(grid) == [(1.0, 2.0, 0.0)]


def test_the_first_unit_is_on_the_cpu_or_on_the_gpu_after_the_input_copy():
    layer = first_layer(two_units(), 1, Front(share=0.0, cell=0.0))
    assert points(layer[0][0]) == [(1.0, 0.0, 0.0)]
    assert points(layer[1][0]) == [(0.0, 2.0, 0.25)]
    assert len(layer[0][1][0]) == len(layer[1][1][0]) == 0  # no switch before unit 0


def test_the_next_unit_stays_or_switches_paying_the_cut():
    t = two_units()
    front, tags = Front(share=0.0, cell=0.0), Tags()
    layer = next_layer(t, 1, first_layer(t, 1, front), 1, True, front, tags)
    assert points(layer[0][0]) == [(5.0, 0.0, 0.0)]  # cpu, cpu
    assert points(layer[1][0]) == [(0.0, 3.0, 0.25)]  # gpu, gpu
    assert points(layer[0][1]) == [(4.0, 2.0, 0.75)]  # gpu then cpu: 0.25 in + 0.5 cut
    assert points(layer[1][1]) == [(1.0, 1.0, 0.5)]  # cpu then gpu
    no_cut = next_layer(t, 1, first_layer(t, 1, front), 1, False, front, tags)
    assert len(no_cut[0][1][0]) == len(no_cut[1][1][0]) == 0


def test_closing_and_tracing_back_give_the_pareto_assignments():
    t = two_units()
    front, tags = Front(share=0.0, cell=0.0), Tags()
    history = [first_layer(t, 1, front)]
    history.append(next_layer(t, 1, history[0], 1, True, front, tags))
    loads, ends = close(t, history[-1], front, tags)
    # ends on the gpu pay 0.125 back: (0, 3, 0.375) and (1, 1, 0.625); (4, 2, 0.75) is
    # dominated by (1, 1, 0.625); (5, 0, 0) stays
    assert sorted(map(tuple, loads.tolist())) == [
        (0.0, 3.0, 0.375),
        (1.0, 1.0, 0.625),
        (5.0, 0.0, 0.0),
    ]
    got = dict(zip(map(tuple, loads.tolist()), trace_back(history, ends), strict=True))
    assert got == {
        (5.0, 0.0, 0.0): ("cpu", "cpu"),
        (0.0, 3.0, 0.375): ("gpu", "gpu"),
        (1.0, 1.0, 0.625): ("cpu", "gpu"),
    }


def test_a_unit_the_processor_cannot_run_leaves_its_groups_empty():
    t = TenantGraph.from_costs("a", [1.0, math.inf], [1.0, 1.0], [0.5])
    front = Front(share=0.0, cell=0.0)
    layer = next_layer(t, 1, first_layer(t, 1, front), 1, True, front, Tags())
    assert all(len(group[0]) == 0 for group in layer[0])
