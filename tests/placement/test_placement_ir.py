import math

import pytest

from qosched.core.errors import InputError
from qosched.placement.ir import Problem, TenantGraph, evaluate, latency_s, loads, switches


def tenant(name="a", **kw):
    base = dict(cpu_s=[1.0, 2.0, 3.0], gpu_s=[0.5, 0.5, 0.5], transfer_s=[0.1, 0.2])
    base.update(kw)
    return TenantGraph.from_costs(
        name, base.pop("cpu_s"), base.pop("gpu_s"), base.pop("transfer_s"), **base
    )


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"cpu_s": [1.0, 2.0]}, "gpu_s"),  # unit count comes from cpu_s
        ({"transfer_s": [0.1]}, "transfer_s"),
        ({"gpu_s": [0.5, -1.0, 0.5]}, "gpu_s"),
        ({"cpu_s": [1.0, math.nan, 3.0]}, "cpu_s"),
        ({"cpu_s": [1.0, math.inf, 3.0], "gpu_s": [0.5, math.inf, 0.5]}, "cpu_s"),
        ({"input_to_gpu_s": -0.1}, "input_to_gpu_s"),
        ({"latency_goal_s": 0.0}, "latency_goal_s"),
        ({"layer_boundaries": (2,)}, "layer_boundaries"),
    ],
    ids=[
        "short-cpu",
        "short-transfer",
        "negative",
        "nan",
        "unsupported-everywhere",
        "neg-input",
        "zero-goal",
        "bad-boundary",
    ],
)
def test_tenant_validation(kw, field):
    with pytest.raises(InputError) as err:
        tenant(**kw)
    assert err.value.field == field


def test_empty_tenant_and_problem_errors():
    with pytest.raises(InputError):
        TenantGraph.from_costs("a", [], [], [])
    with pytest.raises(InputError):
        Problem(())
    with pytest.raises(InputError, match="duplicate"):
        Problem((tenant("a"), tenant("a")))


def test_loads_latency_switches_by_hand():
    t = tenant(input_to_gpu_s=0.7, output_from_gpu_s=0.9)
    a = ("gpu", "cpu", "gpu")
    # gpu units 0 and 2; cuts at both boundaries; input and output cross the link.
    assert loads(t, a) == pytest.approx((2.0, 1.0, 0.1 + 0.2 + 0.7 + 0.9))
    assert latency_s(t, a) == pytest.approx(2.0 + 1.0 + 1.9)
    assert switches(a) == 2
    assert loads(t, ("cpu",) * 3) == (6.0, 0.0, 0.0)
    with pytest.raises(InputError):
        loads(t, ("cpu", "tpu", "cpu"))


def test_evaluate_bottleneck_and_throughput():
    p = Problem((tenant("a"), tenant("b")))
    plan = evaluate(p, [("cpu",) * 3, ("gpu",) * 3], method="x")
    assert (plan.cpu_s, plan.gpu_s, plan.link_s) == pytest.approx((6.0, 1.5, 0.0))
    assert plan.bottleneck_s == 6.0
    assert plan.throughput_rps == pytest.approx(1 / 6)
    assert plan.latency_s == {"a": 6.0, "b": 1.5}
