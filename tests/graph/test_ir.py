import pytest

from qosched.core.errors import InputError
from qosched.graph.ir import Graph, Operator, TensorMeta, Value

T = TensorMeta((2, 2), "float32", 16)


def op(name, *deps, flops=1):
    return Operator(
        name,
        "aten.relu.default",
        "elementwise",
        tuple(deps),
        tuple(deps),
        (T,) * len(deps),
        (T,),
        flops,
        16 * len(deps),
        16,
        0,
    )


def diamond(order=("a", "b", "c", "d")):
    ops = {"a": op("a", "x"), "b": op("b", "a"), "c": op("c", "a"), "d": op("d", "b", "c")}
    return Graph(
        "g",
        tuple(ops[n] for n in order),
        (Value("x", "input", T),),
        ("d",),
        (Value("w", "parameter", T),),
    )


def test_graph_helpers():
    g = diamond()
    assert g.total_flops == 4
    assert g.total_param_bytes == 16
    assert g.successors("a") == ("b", "c")
    assert g.successors("x") == ("a",)
    assert g.predecessors("d") == ("b", "c")
    assert g["c"].inputs == ("a",)
    assert "d" in g and "x" not in g


@pytest.mark.parametrize(
    ("graph", "message"),
    [
        (lambda: diamond(("a", "d", "b", "c")), "depends on 'b', which is a later operator"),
        (lambda: Graph("g", (op("a", "zz"),), (), ("a",)), "neither a graph input"),
        (lambda: Graph("g", (op("a"), op("a")), (), ("a",)), "duplicate name 'a'"),
        (lambda: Graph("g", (op("a"),), (), ("q",)), "output 'q'"),
        (lambda: op("a", flops=-1), "flops must be >= 0"),
    ],
    ids=["not-topological", "unknown-dependency", "duplicate", "bad-output", "negative-flops"],
)
def test_invalid_graphs_raise_with_context(graph, message):
    with pytest.raises(InputError, match=message):
        graph()
