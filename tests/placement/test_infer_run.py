"""``qosched infer plan --out`` and ``qosched infer run``: core-set platforms, plan files, runs."""

from __future__ import annotations

import json
import os
import platform

import pytest
import torch
import yaml

from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.placement.calibrate import read_calibration
from qosched.placement.planfile import read_plan
from qosched.placement.platform import (
    CoreSetsPlatform,
    PinnedProcessor,
    keep_freed_memory,
    parse_platform,
)
from qosched.placement.program import build_model, export_program, model_units, save_program
from qosched.placement.runtime import TenantRun, run
from qosched.placement.spec import parse_inference_spec

pytestmark = pytest.mark.process

TWO_CORES = len(os.sched_getaffinity(0)) >= 2
needs_two_cores = pytest.mark.skipif(not TWO_CORES, reason="a run needs two usable cores")
CORE_SETS = {"platform": "cpu-sets", "cpu": [0], "gpu": [1]}


def _spec(tmp_path, tenants=({"name": "a", "model": "mlp"},), machine=CORE_SETS):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"machine": machine, "tenants": list(tenants)}))
    return path


@pytest.mark.parametrize(
    ("machine", "field", "message"),
    [
        ({"platform": "tpu"}, "machine.platform", "known platforms: roofline, cpu-sets, cuda"),
        ({"platform": 3}, "machine.platform", "unknown platform 3: expected a name"),
        ({"platform": "cpu-sets", "cpu": [0]}, "machine.gpu", "missing"),
        ({"platform": "cpu-sets", "cpu": [0, 1], "gpu": [1]}, "machine.gpu", "disjoint"),
        ({"platform": "cpu-sets", "cpu": [], "gpu": [1]}, "machine.cpu", "non-empty list"),
        ({"platform": "cpu-sets", "cpu": [0, 0], "gpu": [1]}, "machine.cpu", "twice"),
        ({"platform": "cpu-sets", "cpu": ["0"], "gpu": [1]}, "machine.cpu", "core numbers"),
        ({"platform": "cpu-sets", "cpu": [0], "gpu": [1], "link": "x"}, "machine.link", "valid"),
        ({"platform": "cuda", "gpu": -1}, "machine.gpu", "index"),
        ({"gpu": "T4"}, "machine.link", "expected a name"),
        ({"gpu": "T4", "link": "PCIe3-x16", "cpu_costs": "guess"}, "machine.cpu_costs", "measured"),
    ],
)
def test_bad_machines_name_the_field(machine, field, message):
    with pytest.raises(InputError, match=message) as caught:
        parse_platform(machine, "spec.yaml")
    assert caught.value.field == field


def test_core_sets_of_any_size_are_accepted_and_checked_against_this_machine():
    platform = parse_inference_spec(
        {
            "machine": {"platform": "cpu-sets", "cpu": [0], "gpu": [1, 2, 3]},
            "tenants": [{"name": "a", "model": "mlp"}],
        }
    ).platform
    assert platform == CoreSetsPlatform((0,), (1, 2, 3))
    far = CoreSetsPlatform((0,), (100_000,))
    with pytest.raises(InputError, match="not usable here") as caught:
        far.pinned_processors()
    assert caught.value.field == "machine.gpu"


def test_the_roofline_platform_cannot_run_plans():
    platform = parse_platform({"gpu": "T4", "link": "PCIe3-x16"})
    with pytest.raises(InputError, match="nothing to run on"):
        platform.pinned_processors()


@pytest.mark.slow
@needs_two_cores
def test_a_plan_runs_on_two_core_sets_with_outputs_checked_against_the_model(tmp_path):
    tenants, expected = [], []
    for name, seed in (("a", 1), ("b", 2)):
        model, inputs = build_model("mlp", seed=seed)
        units = model_units(model, inputs, name)
        with torch.no_grad():
            # b is told to expect zeros: a wrong output must be reported, not hidden
            expected.append([model(*inputs) if name == "a" else torch.zeros(1, 10)])
        # every kind of plan: starts on the gpu, switches twice, ends on the gpu
        assignment = ("gpu", "cpu", "gpu") if name == "a" else ("cpu", "cpu", "cpu")
        program = save_program(export_program(model, inputs))
        tenants.append(TenantRun(name, program, tuple(map(tuple, units)), inputs, assignment))
    result = run(
        tenants,
        (PinnedProcessor("cpu", (0,)), PinnedProcessor("gpu", (1,))),
        rounds=3,
        warmup=1,
        depth=2,
        expected=expected,
    )
    assert [t.outputs_equal for t in result.tenants] == [True, False]
    assert all(len(t.latency_s) == 3 and t.throughput_rps > 0 for t in result.tenants)
    # tenant a's units alternate processors: 4 rounds x 2 gpu segments, b never uses the gpu
    on_gpu = [s for s in result.spans if s.track == "gpu" and "units" in s.name]
    assert len(on_gpu) == 4 * 2 and all(s.args["tenant"] == "a" for s in on_gpu)
    # One message span around everything a pinned process does per message, one message at a time:
    # a takes 3 segments plus its result's way back through the cpu process, b one segment.
    messages = [s for s in result.spans if s.name.startswith("message")]
    per_tenant = {n: sum(s.args["tenant"] == n for s in messages) for n in "ab"}
    assert per_tenant == {"a": 4 * 4, "b": 4 * 1}
    for track in ("cpu", "gpu"):
        mine = sorted((s for s in messages if s.track == track), key=lambda s: s.start_s)
        ends = [s.start_s + s.duration_s for s in mine]
        assert all(b.start_s >= end for end, b in zip(ends, mine[1:], strict=False))
        for inner in (s for s in result.spans if s.track == track and s not in mine):
            assert any(
                m.start_s <= inner.start_s and inner.start_s + inner.duration_s <= e + 1e-9
                for m, e in zip(mine, ends, strict=True)
            ), inner.name


@pytest.mark.slow
@needs_two_cores
def test_plan_out_then_run_end_to_end_with_a_valid_trace(tmp_path, capsys):
    spec = _spec(tmp_path)
    plan_path, trace_path = tmp_path / "plan.json", tmp_path / "run.json"
    cache = tmp_path / "profile.json"
    assert (
        main(
            [
                "infer",
                "plan",
                str(spec),
                "--json",
                "--out",
                str(plan_path),
                "--picture",
                str(tmp_path / "plan.png"),
                "--profile-cache",
                str(cache),
            ]
        )
        == 0
    )
    planned = json.loads(capsys.readouterr().out)
    assert set(planned) == {"throughput_rps", "bound_rps", "search_s", "baselines", "tenants"}
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = read_plan(plan_path)
    assert stored.plan.throughput_rps == pytest.approx(planned["throughput_rps"])
    assert (
        main(
            [
                "infer",
                "run",
                str(spec),
                "--plan",
                str(plan_path),
                "--requests",
                "3",
                "--warmup",
                "1",
                "--json",
                "--trace",
                str(trace_path),
                "--calibration-out",
                str(tmp_path / "cal.json"),
                "--profile-cache",
                str(cache),
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    (tenant,) = report["tenants"]
    assert tenant["outputs_equal"] is True and tenant["measured_rps"] > 0
    # one tenant: the total is that tenant's
    assert report["measured_rps"] == pytest.approx(tenant["measured_rps"])
    assert report["mean_latency_s"] == pytest.approx(tenant["mean_latency_s"])
    assert tenant["predicted_rps"] == pytest.approx(planned["throughput_rps"])
    # the run's own runtime model, fitted to its messages, and the plan replayed with it
    explained = report["explained"]
    assert explained["compute_scale"] > 0 and explained["contention"] >= 1
    assert explained["message_overhead_s"] >= 0 and explained["replayed_rps"] > 0
    trace = json.loads(trace_path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    named = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"cpu", "gpu"} & named and spans
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and {"pid", "tid"} <= set(e) for e in spans)
    units_run = sum(1 for e in spans if "units" in e["name"])
    assert units_run >= 4  # 4 requests, at least one segment each
    # The run's calibration plans again: every unit the run timed costs what it took there, the
    # others of that tenant and processor scale alike (copies do not), which the
    # all-on-one-processor baselines show by hand.
    calibration = read_calibration(tmp_path / "cal.json")
    assert set(calibration.unit_s) == {"a"} and calibration.machine == CORE_SETS
    replan = ["infer", "plan", str(spec), "--json", "--profile-cache", str(cache)]
    assert main([*replan, "--calibration", str(tmp_path / "cal.json")]) == 0
    again = json.loads(capsys.readouterr().out)
    (costs,) = stored.problem.tenants  # the costs the first plan was made with

    def total(isolated, measured):
        done = [(i, m) for i, m in zip(isolated, measured, strict=True) if m is not None]
        ratio = sum(m for _, m in done) / sum(i for i, _ in done)
        return sum(i * ratio if m is None else m for i, m in zip(isolated, measured, strict=True))

    measured = calibration.unit_s["a"]
    if "cpu" in measured:
        want = 1 / total(costs.cpu_s, measured["cpu"])
        assert again["baselines"]["all_cpu"] == pytest.approx(want)
    if "gpu" in measured:
        copies = costs.input_to_gpu_s + costs.output_from_gpu_s
        gpu_load = total(costs.gpu_s, measured["gpu"]) + costs.copy_share * copies
        assert again["baselines"]["all_gpu"] == pytest.approx(1 / max(gpu_load, copies))


def _plan_file(tmp_path, change):
    data = {
        "format": "qosched-placement-plan",
        "version": 1,
        "machine": CORE_SETS,
        "seed": 0,
        "max_switches": 4,
        "method": "cos",
        "tenants": [
            {
                "name": "a",
                "model": "mlp",
                "batch": 1,
                "unit_ids": ["u0", "u1"],
                "assignment": ["cpu", "gpu"],
                "cpu_s": [1e-3, 1e-3],
                "gpu_s": [1e-3, 2e-3],
                "transfer_s": [1e-4],
                "input_to_gpu_s": 0,
                "output_from_gpu_s": 0,
                "copy_share": 0.5,
            }
        ],
    }
    change(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return path


def test_a_good_plan_file_reads_back_and_is_rescored(tmp_path):
    stored = read_plan(_plan_file(tmp_path, lambda d: None))
    # cpu 1 ms + gpu 2 ms + one copy 0.1 ms, half of which each end also spends;
    # the gpu is the bottleneck at 2.05 ms
    assert stored.plan.tenants[0].latency_s == pytest.approx(3.1e-3)
    assert stored.plan.throughput_rps == pytest.approx(1 / 2.05e-3)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d.update(format="other"), None, "not a plan file"),
        (lambda d: d.update(version=2), "version", "expected version 1"),
        (lambda d: d.pop("machine"), "machine", "missing"),
        (lambda d: d["tenants"][0].update(assignment=["cpu"]), "tenants[0].assignment", "per unit"),
        (
            lambda d: d["tenants"][0].update(assignment=["cpu", "tpu"]),
            "tenants[0].assignment",
            "'tpu'",
        ),
        (lambda d: d["tenants"][0].update(cpu_s=[1, -1]), "tenants[0].cpu_s", ">= 0"),
        (lambda d: d["tenants"][0].update(gpu_s=[1, "x"]), "tenants[0].gpu_s", "seconds"),
        (lambda d: d["tenants"][0].pop("batch"), "tenants[0].batch", "missing"),
        (lambda d: d["tenants"][0].update(copy_share=0.9), "tenants[0].copy_share", "copy share"),
        (lambda d: d.update(tenants=[]), "tenants", "at least one"),
        (lambda d: d.update(max_switches=-1), "max_switches", ">= 0"),
        (
            lambda d: d["tenants"][0].update(latency_goal_s="soon"),
            "tenants[0].latency_goal_s",
            "positive finite latency goal",
        ),
        (
            lambda d: d["tenants"][0].update(cpu_s=["inf", 1e-3]),
            "tenants[0].assignment",
            "cannot run there",
        ),
    ],
)
def test_bad_plan_files_name_the_file_and_field(tmp_path, change, field, message):
    path = _plan_file(tmp_path, change)
    with pytest.raises(InputError, match=message) as caught:
        read_plan(path)
    assert caught.value.field == field and caught.value.source == str(path)


def test_a_plan_file_that_is_not_json_names_the_line(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{\n "format":\n')
    with pytest.raises(InputError, match="not valid JSON") as caught:
        read_plan(path)
    assert caught.value.line is not None


@pytest.mark.parametrize(
    ("machine", "tenants", "message"),
    [
        (
            {"platform": "cpu-sets", "cpu": [1], "gpu": [0]},
            [{"name": "a", "model": "mlp"}],
            "made for machine",
        ),
        (CORE_SETS, [{"name": "b", "model": "mlp"}], "not the spec's"),
    ],
    ids=["other-machine", "other-tenants"],
)
def test_a_plan_for_another_spec_is_refused(tmp_path, capsys, machine, tenants, message):
    plan = _plan_file(tmp_path, lambda d: None)
    spec = _spec(tmp_path, tenants, machine)
    assert main(["infer", "run", str(spec), "--plan", str(plan)]) == 2
    assert message in capsys.readouterr().err


def test_a_plan_whose_units_are_not_the_models_is_refused(tmp_path, capsys):
    plan = _plan_file(tmp_path, lambda d: None)  # units u0, u1: not mlp's three
    assert main(["infer", "run", str(_spec(tmp_path)), "--plan", str(plan)]) == 2
    assert "units are not the model's" in capsys.readouterr().err


def test_a_model_that_fails_to_build_for_the_run_names_its_line(tmp_path, capsys):
    # The plan was made when the factory built; now it raises: the error is about the tenant's
    # model, at its line of the spec, in one line.
    def to_factory(data):
        data["tenants"][0]["model"] = "math:sqrt"

    plan = _plan_file(tmp_path, to_factory)
    spec = _spec(tmp_path, [{"name": "a", "model": "math:sqrt"}])
    assert main(["infer", "run", str(spec), "--plan", str(plan)]) == 2
    err = capsys.readouterr().err
    assert "field 'tenants[0].model': model 'math:sqrt': its factory raised TypeError" in err
    assert err.startswith(f"qosched: error: {spec}:") and err.count("\n") == 1


def test_the_roofline_platform_takes_a_gpu_calibration_factor():
    machine = {"gpu": "T4", "link": "PCIe3-x16", "gpu_calibration": 1.7}
    assert parse_platform(machine).gpu_calibration == 1.7
    for bad in (0, 1e-4, 1e308, float("inf")):
        with pytest.raises(InputError, match=r"in \[0.001, 1000\]") as caught:
            parse_platform({**machine, "gpu_calibration": bad})
        assert caught.value.field == "machine.gpu_calibration"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_pinned_processes_can_keep_freed_memory_on_glibc():
    # Profiles and runs both start with it (pin); a False here would leave runs paying fresh
    # pages for every request's activations while the isolated profile does not.
    assert keep_freed_memory() is True


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--requests", "100000000000000000000"), ("--warmup", "100001"), ("--depth", "0")],
)
def test_run_counts_out_of_range_are_refused_before_anything_loads(tmp_path, capsys, flag, value):
    # Neither the spec nor the plan exists: the counts are checked first.
    missing = str(tmp_path / "missing.yaml")
    code = main(["infer", "run", missing, "--plan", str(tmp_path / "none.json"), flag, value])
    assert code == 2
    assert f"field '{flag}': expected a whole number in [" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "name", "message"),
    [("--picture", "plan.txt", "expected an image file"), ("--out", "", "is a folder")],
)
def test_plan_outputs_are_checked_before_the_search(tmp_path, capsys, flag, name, message):
    # The spec does not exist: an output found wrong after the search would never be reached.
    target = tmp_path / name if name else tmp_path
    code = main(["infer", "plan", str(tmp_path / "missing.yaml"), flag, str(target)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"field '{flag}'" in err and message in err


@pytest.mark.slow
@needs_two_cores
def test_a_run_equals_the_unsplit_program_bit_for_bit_on_the_threads_it_runs_on(tmp_path, capsys):
    # The machine has two cores, each set one: each process computes on one thread. A ResNet's
    # convolutions split their sums by thread count, so the reference must be computed on one
    # thread too; computed on the parent's threads, it differed in the last bits ("NO").
    spec = _spec(tmp_path, tenants=({"name": "vision", "model": "resnet"},))
    plan_path, cache = tmp_path / "plan.json", tmp_path / "profile.json"
    args = ["--profile-cache", str(cache), "--json"]
    assert main(["infer", "plan", str(spec), "--out", str(plan_path), *args]) == 0
    capsys.readouterr()
    run_args = ["--plan", str(plan_path), "--requests", "2", "--warmup", "0", *args]
    assert main(["infer", "run", str(spec), *run_args]) == 0
    (tenant,) = json.loads(capsys.readouterr().out)["tenants"]
    assert tenant["outputs_equal"] is True
