import torch
from torch import nn

from qosched.graph import capture, coarsen, linearize
from qosched.graph.zoo import BasicBlock


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
