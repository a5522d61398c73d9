"""Whole-model estimates: every zoo model on every catalog GPU, captured on meta tensors."""

from __future__ import annotations

import dataclasses

import pytest
from gpushare_estimate_helpers import meta, operator

from qosched.core.errors import InputError
from qosched.gpushare.estimate import estimate_graph, estimate_model
from qosched.graph import ZOO
from qosched.graph.capture import load_model
from qosched.graph.ir import COMPUTE, Graph, Value
from qosched.hardware import GPUS, gpu

# The zoo's capture (tests/conftest.py's zoo_graphs, at a batch of 2), shared with the graph
# tests, takes tens of seconds.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_models_are_built_on_meta_and_never_run(name):
    model, inputs = load_model(name)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert all(t.device.type == "meta" for t in inputs)


@pytest.mark.parametrize("device", sorted(GPUS))
@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_model_estimates_within_the_gpu(zoo_graphs, name, device):
    processor = GPUS[device]
    est = estimate_graph(zoo_graphs[name], processor, dtype="float32")
    assert est.kernels, "a model launches kernels"
    assert all(1 <= k.sms <= processor.sm_count for k in est.kernels)
    assert est.total_time_s == pytest.approx(sum(k.time_s for k in est.kernels))
    assert est.memory_bytes == (
        est.param_bytes + sum(v.meta.bytes for v in zoo_graphs[name].inputs) + est.activation_bytes
    )
    ops = [op.name for op in zoo_graphs[name].operators]
    positions = [ops.index(k.op) for k in est.kernels]
    assert positions == sorted(positions), "kernels follow the topological order"
    assert len(est.kernel_classes) == len(est.kernels)


def test_resnet50_matches_the_published_architecture(zoo_models, zoo_graphs):
    model, (images,) = zoo_models["resnet50"]
    # torchvision's resnet50 has 25,557,032 parameters; 4.1 GMACs an image at 224x224 (2 FLOPs
    # each), and the fixtures' batch holds two images.
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    assert images.shape == (2, 3, 224, 224)
    compute = sum(op.flops for op in zoo_graphs["resnet50"].operators if op.kind == COMPUTE)
    assert compute == pytest.approx(2 * 8.2e9, rel=0.01)


def test_bert_base_linear_and_attention_flops(zoo_graphs):
    batch, s, h, f, heads = 2, 128, 768, 3072, 12
    per_layer = 4 * 2 * s * h * h + 2 * 2 * s * h * f + 2 * 2 * heads * s * s * (h // heads)
    compute = sum(op.flops for op in zoo_graphs["bert_base"].operators if op.kind == COMPUTE)
    assert compute == batch * 12 * per_layer


def test_float16_is_faster_and_smaller_than_float32(zoo_graphs):
    a100 = gpu("a100")
    fp32 = estimate_graph(zoo_graphs["resnet50"], a100, dtype="float32")
    fp16 = estimate_graph(zoo_graphs["resnet50"], a100, dtype="float16")
    assert fp16.total_time_s < fp32.total_time_s
    assert fp16.memory_bytes < fp32.memory_bytes


def test_a_bigger_batch_takes_longer():
    one = estimate_model("mlp", "a100", batch=1)
    many = estimate_model("mlp", "a100", batch=4096)
    assert (one.batch, many.batch) == (1, 4096)
    assert many.total_time_s > one.total_time_s
    assert many.memory_bytes > one.memory_bytes


def test_estimate_model_accepts_an_import_path():
    est = estimate_model("qosched.graph.zoo:mlp", "t4")
    assert est.model == "qosched.graph.zoo:mlp" and est.gpu == "T4"


@pytest.mark.parametrize(
    ("model", "device", "message"),
    [
        ("nope", "a100", "expected one of"),
        ("mlp", "k80", "known GPUs"),
        ("mlp", "t4", "no peak for dtype 'bfloat16'"),
    ],
)
def test_bad_names_raise_with_the_known_ones(model, device, message):
    dtype = "bfloat16" if "bfloat16" in message else "float32"
    with pytest.raises(InputError, match=message):
        estimate_model(model, device, dtype=dtype)


def _chain_graph() -> Graph:
    """x -> a = relu(x) [400 B] -> b = view(a) -> c = add(b, x) [800 B] -> d = add(c, b)
    [1600 B]. The view keeps a's storage alive until d reads it."""
    x = meta(100)

    def op(name, target, kind, sources, out_floats):
        base = operator(target, kind, [x] * len(sources), [meta(out_floats)], name=name)
        return dataclasses.replace(
            base, inputs=tuple(dict.fromkeys(sources)), input_sources=tuple(sources)
        )

    return Graph(
        "chain",
        (
            op("a", "aten.relu.default", "elementwise", ["x"], 100),
            op("b", "aten.view.default", "view", ["a"], 100),
            op("c", "aten.add.Tensor", "elementwise", ["b", "x"], 200),
            op("d", "aten.add.Tensor", "elementwise", ["c", "b"], 400),
        ),
        (Value("x", "input", x),),
        ("d",),
    )


def test_activation_peak_counts_views_as_keeping_their_storage():
    est = estimate_graph(_chain_graph(), gpu("a100"))
    # Step d: a (400, alive through the view b) + c (800) + d (1600).
    assert est.activation_bytes == 2800
    assert est.memory_bytes == 2800 + 400  # plus the 400-byte input; no parameters
    assert [k.op for k in est.kernels] == ["a", "c", "d"]
