import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from qosched.graph import capture, coarsen, linearize
from qosched.graph.ir import Graph, Operator, TensorMeta, Value
from qosched.graph.zoo import BasicBlock

T = TensorMeta((2, 2), "float32", 16)


def _op(name: str, deps: tuple[str, ...]) -> Operator:
    return Operator(
        name, "aten.mul.Tensor", "elementwise", deps, deps, (T,) * len(deps), (T,), 4,
        16 * len(deps), 16, 0,
    )  # fmt: skip


def _crossing(graph: Graph, segments: list[list[str]], cut: int) -> set[str]:
    """The tensors made in segments ``0..cut`` (or graph inputs) read after it or returned,
    counted by brute force from the segments themselves."""
    before = {name for segment in segments[: cut + 1] for name in segment}
    after = [graph[name] for segment in segments[cut + 1 :] for name in segment]
    read_after = {d for op in after for d in op.inputs} | set(graph.outputs)
    made = before | {v.name for v in graph.inputs}
    return {t for t in made & read_after if t in before or any(t in op.inputs for op in after)}


def test_coarsen_reduces_resnet_and_preserves_flops(zoo_graphs):
    g = zoo_graphs["resnet"]
    c = coarsen(g)
    assert len(c) < len(g)
    assert c.total_flops == g.total_flops
    assert c.total_param_bytes == g.total_param_bytes
    assert {op.name for op in c.operators} <= {op.name for op in g.operators}
    assert coarsen(c) == c  # a fixed point


def test_coarsen_fuses_conv_bn_relu_into_the_conv():
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv2d(3, 4, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU())
        x = torch.empty(1, 3, 2, 2)
    (conv,) = coarsen(capture(model, (x,))).operators
    assert conv.target == "aten.convolution.default"
    assert conv.fused == ("aten._native_batch_norm_legit_no_training.default", "aten.relu.default")
    # conv 2*1*4*2*2*3 = 96, batch norm 16, relu 16: one per output element each
    assert conv.flops == 96 + 16 + 16
    assert conv.bytes_written == 1 * 4 * 2 * 2 * 4  # the relu output


@pytest.mark.slow
def test_coarsen_folds_weight_permute_into_linear_and_keeps_bytes_exact():
    with torch.device("meta"):
        model, x = nn.Sequential(nn.Linear(64, 32), nn.ReLU()), torch.empty(8, 64)
    (addmm,) = coarsen(capture(model, (x,))).operators
    assert addmm.target == "aten.addmm.default"
    assert addmm.flops == 2 * 8 * 64 * 32 + 8 * 32
    assert addmm.bytes_read == (8 * 64 + 64 * 32 + 32) * 4  # input, weight, bias
    assert addmm.param_bytes == (64 * 32 + 32) * 4
    assert addmm.bytes_written == 8 * 32 * 4


def test_linearize_mlp_gives_one_segment_per_layer(zoo_graphs):
    segments = linearize(coarsen(zoo_graphs["mlp"]))
    assert [len(s) for s in segments] == [1, 1, 1]
    assert sum(len(s) for s in linearize(zoo_graphs["mlp"])) == len(zoo_graphs["mlp"])


def test_linearize_does_not_cut_inside_a_residual_block():
    with torch.device("meta"):
        model, x = nn.Sequential(BasicBlock(8, 8)), torch.empty(1, 8, 4, 4)
    g = capture(model, (x,))
    segments = linearize(g)
    # the input stays live until the shortcut add: everything up to it is one segment
    assert segments[0][-1] == "add"
    assert linearize(coarsen(g)) == [["convolution", "convolution_1", "add"]]


def test_linearize_resnet_cuts_between_blocks(zoo_graphs):
    c = coarsen(zoo_graphs["resnet"])
    segments = linearize(c)
    blocks = {}
    for i, seg in enumerate(segments):
        for name in seg:
            module = c[name].module
            if module.startswith("layers."):
                blocks.setdefault(module.split(".")[1], set()).add(i)
    assert len(blocks) == 6
    assert all(len(s) == 1 for s in blocks.values())  # each block within one segment
    assert [n for seg in segments for n in seg] == [op.name for op in c.operators]


def _encoder_decoder(layers: int) -> Graph:
    """``layers`` encoder operators on input ``src``, then ``layers`` decoder operators on input
    ``tgt``, each also reading the encoder's last output (cross-attention)."""
    ops = []
    previous = "src"
    for i in range(layers):
        ops.append(_op(f"enc{i}", (previous,)))
        previous = f"enc{i}"
    target = "tgt"
    for i in range(layers):
        ops.append(_op(f"dec{i}", (target, f"enc{layers - 1}")))
        target = f"dec{i}"
    inputs = (Value("src", "input", T), Value("tgt", "input", T))
    return Graph("encdec", tuple(ops), inputs, (target,))


def test_an_encoder_decoder_with_no_one_tensor_cut_is_cut_where_two_cross():
    graph = _encoder_decoder(40)  # 80 operators: at least two units wanted
    assert linearize(graph, max_live=1) == [[op.name for op in graph.operators]]
    segments = linearize(graph)
    # In the encoder its chain and the waiting ``tgt`` are live, in the decoder its chain and
    # the encoder's output: two everywhere, so every position is a cut.
    assert segments == [[op.name] for op in graph.operators]
    assert _crossing(graph, segments, 0) == {"enc0", "tgt"}
    assert _crossing(graph, segments, 45) == {"dec5", "enc39"}


def test_a_small_encoder_decoder_stays_one_unit():
    # 20 operators want no more than one unit: nothing is relaxed, as before.
    graph = _encoder_decoder(10)
    assert len(linearize(graph)) == 1


@st.composite
def _graphs(draw: st.DrawFn) -> Graph:
    """Random DAGs in topological order: 1-3 inputs, each operator reading 1-3 earlier values
    (recent ones more often), 1-2 outputs."""
    inputs = [f"x{i}" for i in range(draw(st.integers(1, 3)))]
    ops: list[Operator] = []
    for i in range(draw(st.integers(1, 60))):
        names = inputs + [op.name for op in ops]
        reads = draw(st.lists(st.integers(0, min(len(names) - 1, 6)), min_size=1, max_size=3))
        deps = tuple(dict.fromkeys(names[-1 - k] for k in reads))
        ops.append(_op(f"op{i}", deps))
    outputs = tuple(dict.fromkeys([ops[-1].name, draw(st.sampled_from(ops)).name]))
    return Graph("random", tuple(ops), tuple(Value(x, "input", T) for x in inputs), outputs)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_graphs(), st.integers(1, 20), st.integers(1, 4))
def test_linearize_cuts_where_the_fewest_tensors_cross_that_give_enough_units(
    graph: Graph, per_unit: int, max_live: int
) -> None:
    names = [op.name for op in graph.operators]
    alone = [[name] for name in names]
    live = [len(_crossing(graph, alone, i)) for i in range(len(names) - 1)]  # brute force
    wanted = len(names) // per_unit
    limit = next(
        (k for k in range(1, max_live) if 1 + sum(1 <= c <= k for c in live) >= wanted), max_live
    )
    expected = [i for i, c in enumerate(live) if 1 <= c <= limit]
    segments = linearize(graph, operators_per_unit=per_unit, max_live=max_live)
    assert [name for segment in segments for name in segment] == names
    cuts = list(itertools.accumulate(len(segment) for segment in segments[:-1]))
    assert [c - 1 for c in cuts] == expected
