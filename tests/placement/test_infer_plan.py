"""``qosched infer plan``: the spec file and the --json contract of docs/contracts.md."""

from __future__ import annotations

import json
import math

import pytest

from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.placement.spec import TenantSpec, load_inference_spec, parse_inference_spec

VALID = {
    "machine": {"gpu": "T4", "link": "PCIe3-x16"},
    "max_switches": 2,
    "tenants": [
        {"name": "a", "model": "mlp", "batch": 4, "latency_goal_ms": 5},
        {"name": "b", "model": "mlp"},
    ],
}


def test_the_most_tenants_allowed_read_back():
    tenants = [{"name": f"t{i}", "model": "mlp"} for i in range(64)]
    assert len(parse_inference_spec({**VALID, "tenants": tenants}).tenants) == 64


def test_a_valid_spec_reads_back_with_defaults_and_units():
    spec = parse_inference_spec(VALID)
    assert (spec.platform.gpu, spec.platform.link, spec.max_switches) == ("T4", "PCIe3-x16", 2)
    assert spec.platform.name == "roofline" and spec.seed == 0
    assert spec.tenants == (TenantSpec("a", "mlp", 4, 0.005), TenantSpec("b", "mlp", 1, None))


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d.pop("machine"), "machine", "missing"),
        (lambda d: d["machine"].pop("gpu"), "machine.gpu", "expected a name"),
        (lambda d: d.update(tenant=[]), "tenant", "did you mean 'tenants'"),
        (lambda d: d.update(tenants=[]), "tenants", "non-empty list"),
        (lambda d: d["tenants"][0].update(batch=0), "tenants[0].batch", r"in \[1, 65536\]"),
        (lambda d: d["tenants"][0].update(batch=True), "tenants[0].batch", "whole number"),
        (
            lambda d: d["tenants"][1].update(latency_goal_ms=-1),
            "tenants[1].latency_goal_ms",
            "positive",
        ),
        (lambda d: d["tenants"][1].update(name="a"), "tenants", "duplicate tenant names: a"),
        (lambda d: d.update(max_switches=-1), "max_switches", ">= 0"),
        (lambda d: d["tenants"][0].update(name="a\tb"), "tenants[0].name", "printable"),
        (lambda d: d["machine"].update(platform=["roofline"]), "machine.platform", "unknown"),
        (lambda d: d["machine"].update(gpu_calibration=1e308), "machine.gpu_calibration", "1000"),
        (lambda d: d["tenants"][0].update(batch=65_537), "tenants[0].batch", "<= 65536"),
        (
            lambda d: d.update(tenants=[{"name": f"t{i}", "model": "mlp"} for i in range(65)]),
            "tenants",
            "at most 64 tenants share one machine, got 65",
        ),
    ],
)
def test_bad_specs_name_the_field(change, field, message):
    data = json.loads(json.dumps(VALID))
    change(data)
    with pytest.raises(InputError, match=message) as caught:
        parse_inference_spec(data, source="spec.yaml")
    assert caught.value.field == field


def test_a_file_that_is_not_yaml_names_the_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("machine:\n  gpu: [T4\n")
    with pytest.raises(InputError, match="not valid YAML") as caught:
        load_inference_spec(path)
    assert caught.value.line is not None


@pytest.mark.process
@pytest.mark.slow
def test_json_output_has_exactly_the_contract_keys_and_cos_beats_no_baseline(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "machine: {gpu: T4, link: PCIe3-x16}\n"
        "tenants:\n  - {name: a, model: mlp}\n  - {name: b, model: mlp, batch: 8}\n"
    )
    cache = tmp_path / "profile.json"
    assert main(["infer", "plan", str(path), "--json", "--profile-cache", str(cache)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert cache.exists()  # the CPU was measured, the T4 estimated
    assert set(out) == {"throughput_rps", "bound_rps", "search_s", "baselines", "tenants"}
    assert set(out["baselines"]) == {"all_cpu", "all_gpu", "model_level", "layer_level"}
    assert [t["name"] for t in out["tenants"]] == ["a", "b"]
    assert all(set(t) == {"name", "throughput_rps", "latency_s"} for t in out["tenants"])
    # COS searches a superset of every baseline's assignments and the LP bounds it from above.
    for rps in out["baselines"].values():
        assert out["throughput_rps"] >= rps * (1 - 1e-9)
    assert out["bound_rps"] >= out["throughput_rps"] * (1 - 1e-9)


@pytest.mark.slow
def test_cpu_costs_roofline_measures_nothing(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "machine: {gpu: T4, link: PCIe3-x16, cpu_costs: roofline}\n"
        "tenants:\n  - {name: a, model: mlp}\n"
    )
    cache = tmp_path / "profile.json"
    assert main(["infer", "plan", str(path), "--json", "--profile-cache", str(cache)]) == 0
    assert json.loads(capsys.readouterr().out)["throughput_rps"] > 0
    assert not cache.exists()


def test_plan_shows_its_phases_on_a_terminal_and_nothing_without_one(tmp_path, capsys, monkeypatch):
    from contextlib import contextmanager

    from qosched.cli import infer_commands, progress

    path = tmp_path / "spec.yaml"
    path.write_text(
        "machine: {gpu: T4, link: PCIe3-x16, cpu_costs: roofline}\n"
        "tenants:\n  - {name: a, model: mlp}\n  - {name: b, model: mlp}\n"
    )
    argv = ["infer", "plan", str(path), "--profile-cache", str(tmp_path / "p.json")]
    assert main(argv) == 0  # stderr is no terminal here
    assert capsys.readouterr().err == ""

    shown: list[str] = []

    class Recording(progress.Silent):
        def add_task(self, description, total=None, **fields):
            assert total is None  # a phase of unknown length: a spinner
            shown.append(description)
            return 0

        def update(self, task_id, **changes):
            shown.append(changes["description"])

    @contextmanager
    def on_terminal():
        yield Recording()

    monkeypatch.setattr(infer_commands, "progress_display", on_terminal)
    assert main(argv) == 0
    assert shown == [
        "costing every operator of 2 models",
        "searching: COS, the baselines and the LP bound",
    ]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["tenants"][0].update(batch=10**400), "tenants[0].batch"),
        (lambda d: d.update(seed=2**53), "seed"),
        (lambda d: d.update(max_switches=2**53), "max_switches"),
        (lambda d: d["tenants"][0].update(latency_goal_ms=math.inf), "tenants[0].latency_goal_ms"),
        (lambda d: d["tenants"][0].update(latency_goal_ms=math.nan), "tenants[0].latency_goal_ms"),
    ],
    ids=["batch-401-digits", "seed-2^53", "switches-2^53", "goal-inf", "goal-nan"],
)
def test_numbers_out_of_bounds_are_refused(change, field):
    data = json.loads(json.dumps(VALID))
    change(data)
    with pytest.raises(InputError) as caught:
        parse_inference_spec(data, source="spec.yaml")
    assert caught.value.field == field


def test_a_spec_file_error_names_its_line(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("machine: {gpu: T4, link: PCIe3-x16}\ntenants:\n  - {name: a, model: mlp}\n"
                    "  - {name: b, model: mlp, batch: 0}\n")  # fmt: skip
    with pytest.raises(InputError, match=r"in \[1, 65536\]") as caught:
        load_inference_spec(path)
    assert (caught.value.field, caught.value.line) == ("tenants[1].batch", 4)


def test_a_spec_file_with_an_alias_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("machine: &m {gpu: T4, link: PCIe3-x16}\ntenants: [*m]\n")
    with pytest.raises(InputError, match="anchors and aliases") as caught:
        load_inference_spec(path)
    assert caught.value.line == 1


@pytest.mark.parametrize(
    ("machine", "field", "message"),
    [
        ({"gpu": "Z9", "link": "PCIe3-x16"}, "machine.gpu", "unknown GPU 'Z9'; known GPUs: "),
        ({"gpu": "T4", "link": "pcie9"}, "machine.link", "unknown link 'pcie9'; known links: "),
        ({"gpu": "T4", "link": "PCIe3-x16", "cpu_costs": "x"}, "machine.cpu_costs", "'measured'"),
    ],
    ids=["unknown-gpu", "unknown-link", "unknown-cpu-costs"],
)
def test_a_machine_not_in_the_catalog_is_refused_at_its_line(tmp_path, machine, field, message):
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"max_switches: 2\nmachine: {json.dumps(machine)}\ntenants: [{{name: a, model: mlp}}]\n"
    )
    with pytest.raises(InputError, match=message) as caught:
        load_inference_spec(path)
    assert (caught.value.source, caught.value.line, caught.value.field) == (str(path), 2, field)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("resnet ", "unknown model 'resnet '"),
        ("ResNet", "unknown model 'ResNet'"),
        ("m" * 100_000, r"unknown model 'm+\.\.\.: expected one of"),
        ("a:", "expected 'package.module:factory'"),
        ("hf:", "expected 'hf:<model_type>'"),
    ],
    ids=["trailing-space", "capitals", "100000-characters", "no-factory", "hf-no-type"],
)
def test_a_model_no_factory_could_build_is_refused_at_its_line(tmp_path, model, message):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "machine: {gpu: T4, link: PCIe3-x16}\ntenants:\n  - {name: a, model: mlp}\n"
        f"  - name: b\n    model: {json.dumps(model)}\n"
    )
    with pytest.raises(InputError, match=message) as caught:
        load_inference_spec(path)
    assert (caught.value.line, caught.value.field) == (5, "tenants[1].model")
    assert len(str(caught.value)) < 400


# A spec whose models load only when the plan is made: what fails then still names the
# spec's file, the tenant's line and its field, in one line, exit 2.
ROOFLINE = (
    "machine: {gpu: T4, link: PCIe3-x16, cpu_costs: roofline}\n"
    "tenants:\n  - {name: a, model: mlp}\n"
)
LATE = [
    (
        "  - {name: b, model: 'math:sqrt'}\n",
        "spec.yaml:4: field 'tenants[1].model': model 'math:sqrt': its factory raised TypeError: ",
    ),
    (
        "  - {name: b, model: 'builtins:dict'}\n",
        "spec.yaml:4: field 'tenants[1].model': model 'builtins:dict': factory must return",
    ),
    (
        "  - {name: b, model: 'qosched_no_such_module:f'}\n",
        "spec.yaml:4: field 'tenants[1].model': model 'qosched_no_such_module:f': cannot import",
    ),
    (
        "  - {name: b, model: mlp, latency_goal_ms: 0.00001}\n",
        "spec.yaml:4: field 'tenants[1].latency_goal_ms': tenant 'b': no assignment allowed by "
        "'cos' meets its latency goal (1e-05 ms)",  # in the spec's unit, not seconds
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tenant", "message"), LATE, ids=["factory-raises", "not-a-factory", "no-module", "goal"]
)
def test_what_fails_after_the_spec_is_read_names_its_line(tmp_path, capsys, tenant, message):
    path = tmp_path / "spec.yaml"
    path.write_text(ROOFLINE + tenant)
    assert main(["infer", "plan", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qosched: error: {tmp_path}/{message}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("command", "machine", "message"),
    [
        (
            ["infer", "plan"],
            "{platform: cpu-sets, cpu: [0], gpu: [100000]}",
            "spec.yaml:2: field 'machine.gpu': cores [100000] are not usable here",
        ),
        (
            ["infer", "run", "--plan", "plan.json"],
            "{gpu: T4, link: PCIe3-x16}",
            "spec.yaml:2: field 'machine.platform': platform roofline models a T4",
        ),
    ],
    ids=["plan-cores-not-here", "run-on-roofline"],
)
def test_a_machine_this_one_cannot_be_names_its_line(tmp_path, capsys, command, machine, message):
    # Known only once the command runs here, after the spec was read.
    path = tmp_path / "spec.yaml"
    path.write_text(f"seed: 1\nmachine: {machine}\ntenants: [{{name: a, model: mlp}}]\n")
    assert main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qosched: error: {tmp_path}/{message}")
    assert err.count("\n") == 1


MLP_ON_THIS_CPU = "machine: {gpu: T4, link: PCIe3-x16}\ntenants: [{name: a, model: mlp}]\n"


def _poisoned_cache(path, data_format):
    """A profile cache of every operator of the spec's mlp on this machine's cores, each timed
    at 0.12 s (what a busy machine once gave a 1x1 convolution), written as ``data_format``."""
    from torch import fx

    from qosched.placement.platform import PinnedProcessor, usable_cores
    from qosched.placement.profile import signature
    from qosched.placement.program import UnitProgram, build_model, export_program, model_units

    model, inputs = build_model("mlp", batch=1, seed=0)
    program = UnitProgram(export_program(model, inputs), model_units(model, inputs, "a"), "a")
    scope = {**program.constants, **program.start_env(list(inputs))}
    signatures = []
    for unit in range(program.n_units):
        for step in program.steps(unit):
            args = fx.node.map_arg(step.args, lambda n: scope[n.name])
            kwargs = fx.node.map_arg(step.kwargs, lambda n: scope[n.name])
            signatures.append(signature(step.target, args, kwargs))
            scope[step.name] = step.target(*args, **kwargs)
    if data_format == 1:
        poisoned = dict.fromkeys(signatures, 0.12)
    else:  # as if the checks had passed
        timing = {"seconds": 0.12, "repeats": 5, "spread": 0.0, "wait_share": 0.0}
        poisoned = dict.fromkeys(signatures, timing)
    key = PinnedProcessor("cpu", usable_cores()).cost_key()
    path.write_text(json.dumps({"format": data_format, "devices": {key: poisoned}}))
    return len(poisoned)


def _plan(tmp_path, capsys, cache, *options):
    spec = tmp_path / "spec.yaml"
    spec.write_text(MLP_ON_THIS_CPU)
    assert (
        main(["infer", "plan", str(spec), "--json", "--profile-cache", str(cache), *options]) == 0
    )
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def _cached_seconds(cache):
    data = json.loads(cache.read_text())
    assert data["format"] == 2
    return [e["seconds"] for ops in data["devices"].values() for e in ops.values()]


# At 0.12 s an operator, the mlp's operators take over a second a request all on the CPU;
# measured afresh, well under a millisecond on a quiet machine, and under 0.1 s even where a
# busy one spoils an operator's every measurement for this plan (tens of milliseconds).
FAST_RPS = 10


@pytest.mark.process
@pytest.mark.slow
def test_a_cache_of_seconds_without_spreads_is_measured_again(tmp_path, capsys):
    cache = tmp_path / "profile.json"
    count = _poisoned_cache(cache, data_format=1)
    out, err = _plan(tmp_path, capsys, cache)
    assert out["baselines"]["all_cpu"] > FAST_RPS
    assert f"held {count} operator times of an older format" in err
    assert 0.12 not in _cached_seconds(cache)


@pytest.mark.slow
@pytest.mark.process
def test_remeasure_refreshes_a_poisoned_cache(tmp_path, capsys):
    cache = tmp_path / "profile.json"
    _poisoned_cache(cache, data_format=2)
    reused, _ = _plan(tmp_path, capsys, cache)
    assert reused["baselines"]["all_cpu"] < 1 / 0.12  # every later plan reuses the cache
    out, _ = _plan(tmp_path, capsys, cache, "--remeasure")
    assert out["baselines"]["all_cpu"] > FAST_RPS
    assert set(out) == {"throughput_rps", "bound_rps", "search_s", "baselines", "tenants"}
    # replaced, or dropped where this machine was too busy to measure them again
    assert 0.12 not in _cached_seconds(cache)


def test_a_plan_says_how_many_operator_times_were_too_noisy_to_cache(capsys):
    from qosched.cli.infer_commands import _warn_about_cache
    from qosched.placement.measured import CacheUse

    _warn_about_cache(CacheUse(hits=4, misses=9, refused=3))
    err = capsys.readouterr().err
    assert "3 operator times were too noisy to cache" in err and "--remeasure" in err
    _warn_about_cache(CacheUse(hits=4, misses=9, refused=1))
    assert "1 operator time was too noisy" in capsys.readouterr().err
    _warn_about_cache(CacheUse(hits=4, misses=9))
    assert capsys.readouterr().err == ""
