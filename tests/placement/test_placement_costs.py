"""Tenants from operator graphs: roofline unit costs and copy costs, checked by hand."""

from __future__ import annotations

import math

import pytest

from qosched.core.errors import InputError
from qosched.graph.capture import capture
from qosched.graph.ir import Graph, Operator, TensorMeta, Value
from qosched.graph.zoo import ZOO
from qosched.hardware.catalog import Link, Processor
from qosched.placement.costs import CostModel, crossing_bytes, tenant_from_graph
from qosched.placement.ir import Problem
from qosched.placement.search import plan

CPU = Processor(
    name="toy-cpu",
    kind="cpu",
    peak_flops={"float32": 1e11},
    memory_bandwidth=1e10,
    memory_bytes=2**34,
    cores=8,
    source="constructed for tests",
)
GPU = Processor(
    name="toy-gpu",
    kind="gpu",
    peak_flops={"float32": 1e13},
    memory_bandwidth=1e12,
    memory_bytes=2**34,
    sm_count=10,
    source="constructed for tests",
)
LINK = Link(name="toy-link", bandwidth=1e10, latency_s=1e-6, source="constructed for tests")
# Efficiency 1 and no overheads: every cost below is max(flops / peak, bytes / bandwidth).
EXACT = CostModel(CPU, GPU, LINK, cpu_efficiency=1.0, gpu_efficiency=1.0,
                  cpu_overhead_s=0.0, gpu_overhead_s=0.0)  # fmt: skip


def meta(nbytes: int) -> TensorMeta:
    return TensorMeta((nbytes // 4,), "float32", nbytes)


def op(name: str, source: str, flops: int, in_bytes: int, out_bytes: int, module: str) -> Operator:
    return Operator(
        name,
        "aten.mm.default",
        "compute",
        (source,),
        (source,),
        (meta(in_bytes),),
        (meta(out_bytes),),
        flops,
        in_bytes,
        out_bytes,
        0,
        module=module,
    )


def chain() -> Graph:
    """x (4 kB) -> a (compute-bound) -> b (memory-bound) -> c; modules l1, l1, l2."""
    ops = (
        op("a", "x", flops=10**9, in_bytes=4_000, out_bytes=40_000, module="l1.0"),
        op("b", "a", flops=10**3, in_bytes=40_000, out_bytes=8_000_000, module="l1.1"),
        op("c", "b", flops=10**6, in_bytes=8_000_000, out_bytes=400, module="l2"),
    )
    return Graph("toy", ops, (Value("x", "input", meta(4_000)),), ("c",))


def test_unit_costs_are_rooflines_summed_by_hand():
    tenant = tenant_from_graph(chain(), EXACT, coarsened=True)
    assert tenant.unit_ids == ("a", "b", "c")
    # a: cpu max(1e9/1e11, 44e3/1e10) = 10 ms; gpu max(1e9/1e13, 44e3/1e12) = 0.1 ms.
    # b: cpu 8.04e6/1e10 = 0.804 ms; gpu 8.04e6/1e12 = 8.04 us (memory-bound on both).
    # c: cpu max(1e-5, 8.0004e6/1e10) = 0.80004 ms; gpu max(1e-7, 8.0004e-6) = 8.0004 us.
    assert tenant.cpu_s == pytest.approx((10e-3, 0.804e-3, 0.80004e-3))
    assert tenant.gpu_s == pytest.approx((0.1e-3, 8.04e-6, 8.0004e-6))


def test_cuts_cost_one_copy_of_the_tensor_crossing_them():
    graph = chain()
    assert crossing_bytes(graph, [["a"], ["b"], ["c"]]) == [40_000, 8_000_000]
    tenant = tenant_from_graph(graph, EXACT, coarsened=True)
    sync = 5e-6  # hardware.roofline.DEFAULT_SYNC_OVERHEAD_S
    assert tenant.transfer_s == pytest.approx(
        (1e-6 + 40_000 / 1e10 + sync, 1e-6 + 8_000_000 / 1e10 + sync)
    )
    assert tenant.input_to_gpu_s == pytest.approx(1e-6 + 4_000 / 1e10 + sync)
    assert tenant.output_from_gpu_s == pytest.approx(1e-6 + 400 / 1e10 + sync)


def test_module_changes_become_layer_boundaries():
    assert tenant_from_graph(chain(), EXACT, coarsened=True).layer_boundaries == (1,)


def test_overheads_and_efficiency_are_added_per_operator():
    slow = CostModel(CPU, GPU, LINK, cpu_efficiency=0.5, gpu_efficiency=1.0,
                     cpu_overhead_s=1e-3, gpu_overhead_s=0.0)  # fmt: skip
    tenant = tenant_from_graph(chain(), slow, coarsened=True)
    assert tenant.cpu_s[0] == pytest.approx(20e-3 + 1e-3)  # half the peak, plus one dispatch


def test_a_gpu_in_the_cpu_slot_is_refused():
    with pytest.raises(InputError, match="expected a CPU and a GPU"):
        CostModel(GPU, GPU, LINK)


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(ZOO))
def test_zoo_models_become_tenants_that_keep_their_flops_and_can_be_planned(zoo_graphs, model):
    graph = zoo_graphs[model]
    tenant = tenant_from_graph(graph, EXACT)
    # With efficiency 1 and no overheads, every unit takes at least its FLOPs at peak.
    assert sum(tenant.gpu_s) >= graph.total_flops / 1e13 * (1 - 1e-9)
    assert sum(tenant.cpu_s) >= graph.total_flops / 1e11 * (1 - 1e-9)
    assert all(math.isfinite(c) and c > 0 for c in (*tenant.cpu_s, *tenant.gpu_s))
    result = plan(Problem((tenant,)), max_switches=2)
    # One tenant alone: COS is at least as fast as the better single processor.
    single = min(sum(tenant.cpu_s), sum(tenant.gpu_s) + tenant.input_to_gpu_s
                 + tenant.output_from_gpu_s)  # fmt: skip
    assert result.bottleneck_s <= single * (1 + 1e-9)


def test_a_calibration_factor_scales_one_processor_and_nothing_else():
    from dataclasses import replace

    graph = capture(*ZOO["mlp"](), name="mlp")
    plain = tenant_from_graph(graph, EXACT)
    scaled = tenant_from_graph(graph, replace(EXACT, gpu_calibration=2.5))
    assert scaled.gpu_s == pytest.approx([2.5 * g for g in plain.gpu_s])
    assert scaled.cpu_s == plain.cpu_s and scaled.transfer_s == plain.transfer_s


@pytest.mark.parametrize("factor", [0, -1.0, True, "2", 1e-4, 1001.0, float("inf")])
def test_a_calibration_factor_is_within_a_thousandfold(factor):
    with pytest.raises(InputError, match=r"expected a factor in \[0.001, 1000\]"):
        CostModel(CPU, GPU, LINK, gpu_calibration=factor)
