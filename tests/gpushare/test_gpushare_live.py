"""``qosched gpu run`` and gpushare.live: the spec's models really run through the runtime."""

from __future__ import annotations

import json

import pytest
import torch

from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.core.goals import DEFAULT_TOP_GOAL, Goal
from qosched.gpushare.apps import parse_apps_spec
from qosched.gpushare.live import MAX_REQUESTS, build_apps, compare_run, request_finishes
from qosched.gpushare.policies import create_policy
from qosched.gpushare.policy import KernelDecision, SharingPolicy
from qosched.gpushare.runtime import CallEstimator, CpuDevice, run_apps
from qosched.hardware import gpu

SPEC = """
gpu: A100
duration_s: 0.1
apps:
  - name: serving
    model: mlp
    batch: 2
    priority: 1
    closed_loop: true
  - name: batch
    model: mlp
    batch: 4
    priority: 0
    closed_loop: true
"""


@pytest.mark.slow
def test_every_request_is_served_with_the_models_own_outputs():
    spec = parse_apps_spec(SPEC)
    apps = build_apps(spec, device="cpu", requests=3)
    rows, shared = compare_run(
        apps, create_policy("fggr"), device=CpuDevice(), estimator=CallEstimator(gpu("a100"))
    )
    assert [r.name for r in rows] == ["serving", "batch"]
    for app in apps:
        expected = app.model(*app.inputs[0])
        assert all(torch.equal(out, expected) for out in shared.app(app.name).outputs)
        finishes = request_finishes(shared, app.name)
        assert len(finishes) == 3 and finishes == sorted(finishes)
    serving = rows[0]
    # The top-priority application defines the window, so all its requests fall inside it.
    assert (serving.completed, serving.unfinished) == (3, 0)
    assert serving.p99_latency_ratio > 0 and serving.throughput_ratio > 0


def test_apps_written_as_kernels_cannot_run():
    spec = parse_apps_spec(
        """
gpu: A100
duration_s: 0.1
apps:
  - name: k
    priority: 0
    closed_loop: true
    kernels:
      - {name: gemv, op: mv, grid: [216, 1, 1], block: [256, 1, 1], registers_per_thread: 64,
         shared_bytes_per_block: 0, sms: 108, occupancy: 0.5, flops: 1.0e8, bytes: 6.0e8,
         bound: memory, time_s: 4.0e-4}
""",
        source="apps.yaml",
    )
    with pytest.raises(InputError, match="only models can run"):
        build_apps(spec, device="cpu", requests=1)


@pytest.mark.parametrize("requests", [0, MAX_REQUESTS + 1])
def test_requests_out_of_bounds_are_refused(requests):
    spec = parse_apps_spec(
        "gpu: A100\nduration_s: 1\napps:\n  - {name: m, model: mlp, priority: 0, closed_loop: true}"
    )
    with pytest.raises(InputError, match=r"requests must be in \[1, 100,000\]"):
        build_apps(spec, device="cpu", requests=requests)


def test_cli_json_on_the_cpu_device(tmp_path, capsys):
    path = tmp_path / "apps.yaml"
    path.write_text(SPEC)
    trace = tmp_path / "run.json"
    argv = ["gpu", "run", str(path), "--policy", "naive", "--device", "cpu", "--requests", "2"]
    assert main([*argv, "--json", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == "naive" and out["device"] == "cpu"
    assert [a["name"] for a in out["apps"]] == ["serving", "batch"]
    assert {"p50_latency_ratio", "p99_latency_ratio", "throughput_ratio", "goal",
            "met"} <= set(out["apps"][0])  # fmt: skip
    # The defaults: p99 within 1.10x for the top app, best effort (always met) below it.
    assert out["apps"][0]["goal"] == {"kind": "p99_slowdown", "value": 1.1}
    assert out["apps"][1]["goal"] == {"kind": "best_effort", "value": None}
    assert out["apps"][1]["met"] is True
    assert json.loads(trace.read_text())["traceEvents"]


class Recording(SharingPolicy):
    """Admits everything, and keeps what ``setup`` and the launches told it."""

    name = "recording"

    def __init__(self):
        self.infos = None
        self.launches = []

    def setup(self, apps):
        self.infos = apps

    def decide(self, view):
        self.launches.extend(view.waiting)
        return KernelDecision(start=view.waiting)


def test_the_runtime_hands_the_goals_to_the_policy_and_stamps_request_arrivals():
    spec = parse_apps_spec(SPEC.replace("    priority: 0\n", "    priority: 0\n    goal: "
                                        "{throughput_share: 0.5}\n"))  # fmt: skip
    apps = build_apps(spec, device="cpu", requests=2)
    policy = Recording()
    run_apps(apps, policy, device=CpuDevice(), estimator=CallEstimator(gpu("a100")))
    goals = {info.name: info.goal for info in policy.infos}
    assert goals == {"serving": DEFAULT_TOP_GOAL, "batch": Goal("throughput_share", 0.5)}
    arrivals = {}
    for launch in policy.launches:  # one arrival per request, before any of its launches
        arrived = arrivals.setdefault((launch.app, launch.request), launch.arrived_s)
        assert launch.arrived_s == arrived is not None
        assert arrived <= launch.ready_s
    assert len(arrivals) == 4  # two requests of each app


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA"
)
def test_cli_refuses_cuda_without_a_gpu(tmp_path, capsys):
    path = tmp_path / "apps.yaml"
    path.write_text(SPEC)
    assert main(["gpu", "run", str(path), "--policy", "fggr"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


class RecordingDevice(CpuDevice):
    """The CPU device, noting which applications were given a high-priority stream."""

    def __init__(self) -> None:
        self.high: dict[str, bool] = {}

    def stream(self, app, high_priority):
        self.high[app.name] = high_priority
        return super().stream(app, high_priority)


@pytest.mark.parametrize(
    ("policy", "serving_high"), [("fggr", True), ("naive", False)], ids=["fggr", "naive"]
)
def test_streams_follow_the_policys_stream_priorities(policy, serving_high):
    apps = build_apps(parse_apps_spec(SPEC), device="cpu", requests=1)
    device = RecordingDevice()
    run_apps(apps, create_policy(policy), device=device)
    # naive is MPS-like: equal-priority streams; the best-effort app never gets a high one.
    assert device.high == {"serving": serving_high, "batch": False}
