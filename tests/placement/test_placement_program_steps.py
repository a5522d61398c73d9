"""The named steps that cut a program into units, on small hand-built graphs."""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn

from qosched.core.errors import InputError
from qosched.placement.program import (
    assign_units,
    check_chain,
    check_units_present,
    live_across_cuts,
    unit_steps,
)


def graph():
    """x (input), w (a weight); a = relu(x); b = neg(a); wt = t(w); c = mm(b, wt);
    d = add(c, a); z = zeros() reads nothing and is read by nothing."""
    g = fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    a = g.create_node("call_function", torch.relu, (x,), name="a")
    b = g.create_node("call_function", torch.neg, (a,), name="b")
    wt = g.create_node("call_function", torch.t, (w,), name="wt")
    c = g.create_node("call_function", torch.mm, (b, wt), name="c")
    d = g.create_node("call_function", torch.add, (c, a), name="d")
    g.create_node("call_function", torch.zeros, (1,), name="z")
    g.output(d)
    return [n for n in g.nodes if n.op == "call_function"]


def test_nodes_follow_their_inputs_and_reader_less_reads_follow_their_readers():
    # units: [a] and [c]; b reads a (unit 0), wt reads only the weight so it goes with its
    # reader c (unit 1), d reads c and a (the later: 1), z reads and feeds nothing (unit 0).
    got = assign_units(graph(), {"a": 0, "c": 1}, ("x", "w"))
    assert got == {"x": -1, "w": -1, "a": 0, "b": 0, "wt": 1, "c": 1, "d": 1, "z": 0}


def test_a_chain_of_reads_of_weights_alone_goes_with_its_first_reader():
    # A scale kept as a log (CLIP's logit scale): e = exp(w), f = mul(e, e), both reading weights
    # only, then g = mul(a, f) of unit 1. e and f go with g; before, f's read of e (not yet
    # placed) raised KeyError: 'e'.
    g = fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    a = g.create_node("call_function", torch.relu, (x,), name="a")
    e = g.create_node("call_function", torch.exp, (w,), name="e")
    f = g.create_node("call_function", torch.mul, (e, e), name="f")
    out = g.create_node("call_function", torch.mul, (a, f), name="g")
    g.output(out)
    nodes = [n for n in g.nodes if n.op == "call_function"]
    got = assign_units(nodes, {"a": 1}, ("x", "w"))
    assert got == {"x": -1, "w": -1, "a": 1, "e": 1, "f": 1, "g": 1}
    check_chain(nodes, got, "t")


def test_an_anchor_wins_over_the_inputs_a_node_reads():
    # b is named by unit 1 although it only reads a of unit 0
    got = assign_units(graph(), {"a": 0, "b": 1, "c": 1}, ("x", "w"))
    assert got["b"] == 1
    assert got["d"] == 1


def test_a_node_reading_a_later_unit_breaks_the_chain():
    nodes = graph()
    unit_of = assign_units(nodes, {"a": 1, "c": 0}, ("x", "w"))  # c (unit 0) reads b (unit 1)
    with pytest.raises(InputError, match="do not form a chain"):
        check_chain(nodes, unit_of, "t")


def test_a_read_of_a_value_of_no_unit_is_reported():
    nodes = graph()
    with pytest.raises(InputError, match="reads unknown"):
        check_chain(nodes, {"a": 0, "b": 0, "wt": 0, "c": 0, "d": 0, "z": 0}, "t")


def test_every_named_operator_must_be_a_node():
    check_units_present(graph(), {"a": 0, "c": 1}, "t")
    with pytest.raises(InputError, match="no node 'q'"):
        check_units_present(graph(), {"a": 0, "q": 1}, "t")


def test_live_values_are_those_made_by_a_cut_and_read_after_it():
    nodes = graph()
    unit_of = assign_units(nodes, {"a": 0, "c": 1}, ("x", "w"))
    # After unit 0: a (read by d in unit 1) and b (read by c); the weight w is a constant and
    # never crosses. After unit 1, the last: the output d.
    got = live_across_cuts(nodes, unit_of, {"w"}, ["d"], 2)
    assert [set(k) for k in got] == [{"a", "b"}, {"d"}]


def test_the_input_crosses_every_cut_until_its_last_reader():
    nodes = graph()
    unit_of = assign_units(nodes, {"a": 2, "c": 2}, ("x", "w"))  # everything but z in unit 2
    got = live_across_cuts(nodes, unit_of, {"w"}, ["d"], 3)
    assert [set(k) for k in got] == [{"x"}, {"x"}, {"d"}]


def test_steps_are_each_units_nodes_in_graph_order():
    nodes = graph()
    unit_of = assign_units(nodes, {"a": 0, "c": 1}, ("x", "w"))
    steps = unit_steps(nn.Module(), nodes, unit_of, 2)
    assert [[s.name for s in unit] for unit in steps] == [["a", "b", "z"], ["wt", "c", "d"]]
    assert steps[1][1].target is torch.mm
