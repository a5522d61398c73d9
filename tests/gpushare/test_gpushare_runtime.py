"""The GPU-sharing runtime on the CPU device: same outputs as alone, policy admission, trace."""

from __future__ import annotations

import json
import time

import pytest
import torch

from qosched.core.errors import InputError, SimulationError
from qosched.gpushare.policy import GpuView, KernelDecision, SharingPolicy
from qosched.gpushare.runtime import (
    App,
    CallEstimator,
    CudaDevice,
    catalog_gpu_for,
    run_apps,
)
from qosched.graph.zoo import bert, mlp, resnet
from qosched.hardware import gpu


class AdmitAll(SharingPolicy):
    """Starts every waiting launch at once."""

    name = "admit-all"

    def decide(self, view: GpuView) -> KernelDecision:
        return KernelDecision(start=view.waiting)


class HoldLowWhileHighRuns(SharingPolicy):
    """High-priority launches start at once; a priority-0 launch starts only while no
    higher-priority launch runs or waits."""

    name = "hold-low"

    def decide(self, view: GpuView) -> KernelDecision:
        high = [w for w in view.waiting if w.priority > 0]
        busy = any(r.launch.priority > 0 for r in view.running) or bool(high)
        low = [w for w in view.waiting if w.priority == 0]
        return KernelDecision(start=tuple(high) + (() if busy else tuple(low)))


class NeverStart(SharingPolicy):
    name = "never"

    def decide(self, view: GpuView) -> KernelDecision:
        return KernelDecision()


class StartsAStranger(SharingPolicy):
    name = "stranger"

    def decide(self, view: GpuView) -> KernelDecision:
        if not view.waiting:
            return KernelDecision()
        w = view.waiting[0]
        return KernelDecision(
            start=(type(w)(w.app, w.priority, w.request, w.index + 7, w.kernel, 0.0),)
        )


class WaitThenAdmit(SharingPolicy):
    """Holds every launch until 20 ms after it first sees one, by asking to be woken."""

    name = "wait-then-admit"

    def __init__(self) -> None:
        self.open_at: float | None = None

    def decide(self, view: GpuView) -> KernelDecision:
        if self.open_at is None and view.waiting:
            self.open_at = view.now_s + 0.02
        if self.open_at is not None and view.now_s >= self.open_at:
            return KernelDecision(start=view.waiting)
        return KernelDecision(wake_at_s=self.open_at)


def _apps(requests: int = 2):
    torch.manual_seed(0)
    hi_model, (x,) = mlp(batch=4, device="cpu")
    torch.manual_seed(1)
    lo_model, (ids,) = bert(batch=2, device="cpu")
    gen = torch.Generator().manual_seed(2)
    hi_inputs = tuple((torch.randn(x.shape, generator=gen),) for _ in range(requests))
    lo_inputs = tuple((torch.randint(0, 8192, ids.shape, generator=gen),) for _ in range(requests))
    return [App("infer", 1, hi_model, hi_inputs), App("batch", 0, lo_model, lo_inputs)]


def _alone(app: App) -> list[torch.Tensor]:
    with torch.no_grad():
        return [app.model(*inputs) for inputs in app.inputs]


@pytest.mark.parametrize("policy", [AdmitAll(), HoldLowWhileHighRuns()], ids=lambda p: p.name)
def test_outputs_are_bit_for_bit_those_of_each_model_alone(policy):
    apps = _apps()
    expected = {a.name: _alone(a) for a in apps}
    result = run_apps(apps, policy)
    for a in apps:
        got = result.app(a.name).outputs
        assert len(got) == len(expected[a.name])
        for g, e in zip(got, expected[a.name], strict=True):
            assert torch.equal(g, e)
        assert len(result.app(a.name).latencies_s) == len(a.inputs)


def test_every_kernel_launching_operator_goes_through_the_policy():
    seen: list[str] = []

    class Recording(AdmitAll):
        def decide(self, view):
            seen.extend(w.app for w in view.waiting)
            return super().decide(view)

    apps = _apps(requests=1)
    result = run_apps(apps, Recording())
    # mlp: three addmm and two relu per request; views (permute/t) launch nothing.
    infer = [r for r in result.records if r.app == "infer"]
    assert sorted(r.target for r in infer) == sorted(
        ["aten.addmm.default"] * 3 + ["aten.relu.default"] * 2
    )
    assert [r.index for r in sorted(infer, key=lambda r: r.started_s)] == list(range(5))
    assert {"infer", "batch"} <= set(seen)
    assert all(r.kernel.time_s > 0 and r.started_s >= r.ready_s for r in result.records)


def test_a_low_priority_operator_never_starts_while_a_high_one_runs():
    result = run_apps(_apps(requests=3), HoldLowWhileHighRuns())
    high = [r for r in result.records if r.priority > 0]
    low = [r for r in result.records if r.priority == 0]
    assert high and low
    for lo in low:
        assert not any(h.started_s < lo.started_s < h.finished_s for h in high), lo


def test_estimates_are_cached_by_signature():
    torch.manual_seed(0)
    x = torch.randn(4, 512)
    estimator = CallEstimator(gpu("a100"))
    with torch.no_grad():
        for _ in range(3):
            estimator.kernels(torch.ops.aten.relu.default, (x,), {})
    assert estimator.misses == 1
    (k,) = estimator.kernels(torch.ops.aten.relu.default, (x,), {})
    assert k.bound == "memory"


@pytest.mark.slow
def test_real_shapes_give_the_same_kernels_as_the_captured_graph():
    from qosched.gpushare.estimate import estimate_graph
    from qosched.graph.capture import capture

    torch.manual_seed(0)
    model, (x,) = resnet(batch=2, device="cpu")
    graph_kernels = estimate_graph(capture(model, (x,)), gpu("a100")).kernels
    per_op: dict[str, list[str]] = {}
    for k in graph_kernels:
        per_op.setdefault(k.op, []).append(k.name)
    result = run_apps([App("r", 1, model, ((x,),))], AdmitAll())
    runtime_names = [r.kernel.name for r in sorted(result.records, key=lambda r: r.index)]
    # Eager batch norm is native_batch_norm, export's is _native_batch_norm_legit_no_training;
    # both are the inference scale-and-shift. An operator's kernels merge into one launch.
    assert runtime_names == ["+".join(names) for names in per_op.values()]
    for field in ("time_s", "flops", "bytes"):
        assert sum(getattr(r.kernel, field) for r in result.records) == pytest.approx(
            sum(getattr(k, field) for k in graph_kernels)
        )


def test_trace_has_one_track_per_application(tmp_path):
    result = run_apps(_apps(requests=1), AdmitAll())
    path = result.write_trace(tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"infer stream (priority 1)", "batch stream (priority 0)"}
    assert sum(e["ph"] == "X" for e in events) == len(result.records)


def test_wake_up_requests_are_honoured():
    policy = WaitThenAdmit()
    began = time.perf_counter()
    result = run_apps(_apps(requests=1)[:1], policy)
    assert time.perf_counter() - began >= 0.02
    assert result.records and min(r.started_s for r in result.records) >= policy.open_at


def test_a_policy_that_starts_nothing_is_reported_not_hung():
    with pytest.raises(SimulationError, match="policy 'never' left"):
        run_apps(_apps(requests=1), NeverStart())


def test_a_policy_that_starts_a_launch_not_waiting_is_reported():
    with pytest.raises(SimulationError, match="not waiting"):
        run_apps(_apps(requests=1), StartsAStranger())


def test_a_wake_up_that_is_not_in_the_future_is_reported():
    class WakeNow(AdmitAll):
        name = "wake-now"

        def decide(self, view):
            return KernelDecision(start=view.waiting, wake_at_s=view.now_s)

    with pytest.raises(SimulationError, match="not after now"):
        run_apps(_apps(requests=1), WakeNow())


def test_bad_applications_are_refused():
    model, _ = mlp(device="cpu")
    with pytest.raises(InputError, match="priority must be >= 0"):
        App("a", -1, model, ())
    with pytest.raises(InputError, match="unique"):
        run_apps([App("a", 0, model, ()), App("a", 1, model, ())], AdmitAll())


def test_a_policy_that_is_not_a_sharing_policy_is_refused_before_anything_runs():
    class DecidesOnly:  # has a decide, but the runtime calls every hook of SharingPolicy
        def decide(self, view: GpuView) -> KernelDecision:
            return KernelDecision(start=view.waiting)

    model, (x,) = mlp(batch=2, device="cpu")
    with pytest.raises(TypeError, match=r"must subclass .*SharingPolicy, got DecidesOnly"):
        run_apps([App("a", 0, model, ((x,),))], DecidesOnly())  # type: ignore[arg-type]


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_cuda_device_refuses_clearly_without_a_gpu():
    with pytest.raises(InputError, match="needs an NVIDIA GPU"):
        CudaDevice()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA H200", "H200-SXM-141GB"),
        ("Tesla V100-PCIE-16GB", "V100-SXM2-32GB"),
        ("NVIDIA A100 80GB PCIe", "A100-SXM4-80GB"),
    ],
)
def test_cuda_names_map_to_the_catalog(name, expected):
    assert catalog_gpu_for(name).name == expected
