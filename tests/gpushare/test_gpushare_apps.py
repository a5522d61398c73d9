import json
from contextlib import contextmanager
from pathlib import Path

import pytest
from gpushare_sim_helpers import A100, kernel

from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.gpushare.apps import load_apps_spec, parse_apps_spec, workloads
from qosched.gpushare.policies.fggr import CANDIDATES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu_apps_kernels.yaml"

GOOD = """\
gpu: A100
duration_s: 0.5
seed: 3
apps:
  - name: serving
    model: resnet50
    priority: 2
    arrivals: {poisson_rps: 200}
  - name: batch
    model: bert_base
    batch: 32
    dtype: float16
    priority: 0
    closed_loop: true
"""


def test_a_good_spec_reads_as_written():
    spec = parse_apps_spec(GOOD, source="apps.yaml")
    assert (spec.gpu, spec.duration_s, spec.seed) == ("A100", 0.5, 3)
    serving, batch = spec.apps
    assert (serving.model, serving.batch, serving.priority, serving.poisson_rps) == (
        "resnet50", 1, 2, 200.0,
    )  # fmt: skip
    assert (batch.batch, batch.dtype, batch.poisson_rps) == (32, "float16", None)


def test_models_are_estimated_through_the_given_estimator_with_batch_and_dtype():
    calls = []

    class Estimate:
        def __init__(self, kernels):
            self.kernels = kernels

    def estimate(model, gpu, *, batch, dtype):
        calls.append((model, gpu.name, batch, dtype))
        return Estimate((kernel(model),))

    apps = workloads(parse_apps_spec(GOOD), A100, estimate=estimate)
    assert calls == [
        ("resnet50", A100.name, 1, "float32"),
        ("bert_base", A100.name, 32, "float16"),
    ]
    assert [a.kernels[0].name for a in apps] == ["resnet50", "bert_base"]


@pytest.mark.parametrize(
    ("change", "line", "field", "message"),
    [
        (("priority: 2", "priority: -1"), 7, "apps[0].priority", "whole number >= 0"),
        (("batch: 32", "batch: 0"), 11, "apps[1].batch", r"in \[1, 65536\]"),
        (("batch: 32", "batch: 4503599627370495"), 11, "apps[1].batch", "<= 65536"),
        (("poisson_rps: 200", "poisson_rps: fast"), 8, "apps[0].arrivals.poisson_rps",
         "positive number"),
        (("    closed_loop: true\n", ""), 9, "apps[1]", "exactly one of arrivals"),
        (("model: bert_base", "modle: bert_base"), 10, "apps[1].modle", "did you mean 'model'"),
        (("dtype: float16", "dtype: int8"), 12, "apps[1].dtype", "float32, float16"),
        (("name: batch", "name: serving"), 9, "apps[1].name", "duplicate app name"),
        (("duration_s: 0.5", "duration_s: 0"), 2, "duration_s", "positive number"),
        (("gpu: A100\n", ""), None, "gpu", "required"),
        (("name: batch", 'name: "bat\\nch"'), 9, "apps[1].name", "printable characters only"),
        (("name: batch", 'name: "\\u202ehctab"'), 9, "apps[1].name", "printable characters only"),
    ],
    ids=["priority", "batch", "huge-batch", "rps", "no-arrivals", "typo", "dtype", "duplicate",
         "duration", "no-gpu", "newline-in-name", "direction-override-in-name"],
)  # fmt: skip
def test_bad_specs_name_the_line_and_field(change, line, field, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(InputError, match=message) as error:
        parse_apps_spec(GOOD.replace(old, new, 1), source="apps.yaml")
    assert error.value.field == field
    assert error.value.source == "apps.yaml"
    if line is not None:
        assert error.value.line == line


def test_a_duplicate_key_is_refused_with_its_line():
    with pytest.raises(InputError, match="duplicate key") as error:
        parse_apps_spec(GOOD.replace("seed: 3\n", "seed: 3\nseed: 4\n"))
    assert error.value.line == 4


def test_explicit_kernels_are_checked_field_by_field():
    text = EXAMPLE.read_text().replace("sms: 64", "sms: lots", 1)
    with pytest.raises(InputError, match="whole number") as error:
        parse_apps_spec(text, source="k.yaml")
    assert error.value.field == "apps[0].kernels[0].sms"
    assert error.value.line is not None


def test_the_example_with_explicit_kernels_loads():
    spec = load_apps_spec(EXAMPLE)
    assert [len(a.kernels) for a in spec.apps] == [3, 1, 2]
    assert spec.apps[0].kernels[0].flops == 2.0e9  # written 2.0e9, which YAML reads as text


def test_cli_json_has_the_design_fields_and_the_trace_has_a_track_per_app(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code = main(["gpu", "sim", str(EXAMPLE), "--policy", "fggr", "--json", "--trace", str(trace)])
    assert code == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert {"policy", "gpu_utilization", "wall_s", "apps"} <= set(result)
    assert result["policy"] == "fggr"
    # fggr calibrates by default, says so in one line (no terminal: no line per what-if run),
    # and reports what it adopted.
    assert captured.err.splitlines() == ["fggr: choosing its setting on a what-if of the mix..."]
    assert result["calibrated"] in dict(CANDIDATES) and result["setup_s"] > 0
    for app in result["apps"]:
        assert {"name", "priority", "p50_latency_ratio", "p99_latency_ratio",
                "throughput_ratio"} <= set(app)  # fmt: skip
    assert [a["name"] for a in result["apps"]] == ["serving", "analytics", "batch"]
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"serving (priority 2)", "analytics (priority 1)", "batch (priority 0)"}


def test_cli_json_of_a_policy_that_does_not_calibrate(capsys):
    assert main(["gpu", "sim", str(EXAMPLE), "--policy", "naive", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["calibrated"] is None and result["setup_s"] == 0.0
    assert "what-if" not in captured.err


def test_cli_without_a_terminal_a_long_calibrated_run_prints_one_progress_line(tmp_path, capsys):
    # Progress is a display redrawn in place on a terminal; a pipe or a log gets at most the
    # line that says a self-calibrating policy is choosing its setting, however long the run.
    spec = tmp_path / "long.yaml"
    spec.write_text(EXAMPLE.read_text().replace("duration_s: 0.5", "duration_s: 2"))
    assert main(["gpu", "sim", str(spec), "--policy", "fggr"]) == 0
    assert len(capsys.readouterr().err.splitlines()) <= 1


def test_cli_a_quick_run_prints_no_progress(capsys):
    assert main(["gpu", "sim", str(EXAMPLE), "--policy", "naive"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_on_a_terminal_shows_one_display_of_every_run(monkeypatch, capsys):
    # The display on a terminal: one task whose description follows the runs, its amount the
    # runs done (the shared one, then each application alone) of all of them.
    from qosched.cli import gpu_sim

    calls = []

    class Recording(gpu_sim.Silent):
        def add_task(self, description, total=None, **fields):
            calls.append(("add", description))
            return 7

        def update(self, task_id, **changes):
            assert task_id == 7
            calls.append(("update", changes))

    @contextmanager
    def display():
        yield Recording()

    monkeypatch.setattr(gpu_sim, "progress_display", display)
    monkeypatch.setattr("qosched.gpushare.simulator.PROGRESS_STEPS", 16)  # reports, however quick
    monkeypatch.setattr(gpu_sim, "Silent", type("Never", (), {}))  # shown as on a terminal
    assert main(["gpu", "sim", str(EXAMPLE), "--policy", "fggr", "--json"]) == 0
    assert capsys.readouterr().err == ""
    assert [c for c in calls if c[0] == "add"] == [("add", "fggr: setting up")]
    updates = [c[1] for c in calls if c[0] == "update"]
    whatif = [u for u in updates if u.get("unit") == "what-if runs"]
    assert whatif and whatif[0]["completed"] == 1
    runs = [u for u in updates if "unit" in u and u["unit"] is None and u["total"] == 4]
    described = [u["description"] for u in runs]
    assert described[0] == "shared under fggr" and described[-1] == "batch alone"
    assert {"serving alone", "analytics alone"} <= set(described)
    done = [u["completed"] for u in runs]
    assert done == sorted(done) and done[0] >= 0 and done[-1] <= 4


def test_cli_prints_a_name_as_it_is_never_as_markup(tmp_path, capsys):
    spec = tmp_path / "apps.yaml"
    text = EXAMPLE.read_text()
    first = next(line for line in text.splitlines() if line.strip().startswith("- name:"))
    name = first.split(":", 1)[1].strip()
    spec.write_text(text.replace(f"name: {name}", 'name: "[/bold][red]x"', 1))
    assert main(["gpu", "sim", str(spec), "--policy", "naive"]) == 0
    assert "[/bold][red]x" in capsys.readouterr().out


def test_cli_unknown_policy_is_a_clear_error(capsys):
    assert main(["gpu", "sim", str(EXAMPLE), "--policy", "nope"]) == 2
    assert "known policies" in capsys.readouterr().err


MLP = """\
gpu: A100
duration_s: 0.01
apps:
  - name: serving
    model: mlp
    priority: 1
    arrivals: {poisson_rps: 2000}
  - name: batch
    model: mlp
    batch: 64
    priority: 0
    closed_loop: true
"""


@pytest.mark.slow
def test_cli_runs_models_estimated_without_running_them(tmp_path, capsys):
    spec = tmp_path / "apps.yaml"
    spec.write_text(MLP)
    assert main(["gpu", "sim", str(spec), "--policy", "priority-streams", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    serving, batch = result["apps"]
    assert serving["p99_latency_ratio"] >= 1.0 - 1e-9  # sharing never makes a request faster
    assert 0.0 < batch["throughput_ratio"] <= 1.0 + 1e-9


def test_an_unknown_model_names_the_spec_line(tmp_path):
    spec = tmp_path / "apps.yaml"
    spec.write_text(MLP.replace("model: mlp\n    batch: 64", "model: nosuchmodel\n    batch: 64"))
    with pytest.raises(InputError, match="unknown model") as error:
        workloads(load_apps_spec(spec), A100)
    assert (error.value.field, error.value.line) == ("apps[1].model", 9)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (("priority: 2", "priority: " + "9" * 401), "apps[0].priority", "below 2**53"),
        (("batch: 32", "batch: 9007199254740992"), "apps[1].batch", "<= 65536"),
        (("seed: 3", "seed: 9007199254740992"), "seed", "below 2**53"),
        (("duration_s: 0.5", "duration_s: .inf"), "duration_s", "positive number"),
        (("poisson_rps: 200", "poisson_rps: .nan"), "apps[0].arrivals.poisson_rps",
         "positive number"),
    ],
    ids=["priority-401-digits", "batch-2^53", "seed-2^53", "duration-inf", "rps-nan"],
)  # fmt: skip
def test_numbers_out_of_bounds_are_refused(change, field, message):
    old, new = change
    with pytest.raises(InputError, match=message.replace("*", r"\*")) as error:
        parse_apps_spec(GOOD.replace(old, new, 1), source="apps.yaml")
    assert error.value.field == field


def test_a_kernel_dimension_out_of_bounds_names_its_index():
    text = EXAMPLE.read_text()
    assert "grid: [" in text
    start = text.index("grid: [") + len("grid: [")
    text = text[:start] + "9" * 401 + text[text.index(",", start) :]
    with pytest.raises(InputError, match=r"below 2\*\*53") as error:
        parse_apps_spec(text, source="k.yaml")
    assert error.value.field == "apps[0].kernels[0].grid[0]"


def test_an_alias_is_refused_with_its_line():
    text = GOOD.replace("priority: 2", "priority: &p 2").replace("priority: 0", "priority: *p")
    with pytest.raises(InputError, match="anchors and aliases") as error:
        parse_apps_spec(text, source="apps.yaml")
    assert error.value.line == 7


# An A100 (compute capability 8.0): 108 SMs, 255 registers per thread, 1,024 threads and 163 KB of
# opt-in shared memory per block (CUDA C++ Programming Guide, compute capability table).
@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (("sms: 64", "sms: 109"), "sms", "109 is more than the 108 SMs"),
        (("registers_per_thread: 128", "registers_per_thread: 256"), "registers_per_thread",
         "256 is more than the 255 registers per thread"),
        (("shared_bytes_per_block: 32768", "shared_bytes_per_block: 200000"),
         "shared_bytes_per_block", "shared memory per block"),
        (("block: [256, 1, 1]", "block: [512, 4, 1]"), "block", "2048 is more than the 1024"),
        (("block: [256, 1, 1]", "block: [1, 1, 65]"), "block[2]", "65 is more than the 64"),
        (("grid: [256, 1, 1]", "grid: [256, 65536, 1]"), "grid[1]", "65536 is more than"),
        (("grid: [256, 1, 1]", "grid: [2147483648, 1, 1]"), "grid[0]", "2147483648 is more"),
        (("block: [256, 1, 1], registers_per_thread: 128", "block: [1024, 1, 1], "
          "registers_per_thread: 128"), "registers_per_thread",
         "131072 is more than the 65536 registers per block"),
    ],
    ids=["sms", "registers", "shared", "threads", "block-z", "grid-y", "grid-x",
         "registers-per-block"],
)  # fmt: skip
def test_an_explicit_kernel_the_gpu_cannot_launch_is_refused_with_its_line(change, field, message):
    old, new = change
    text = EXAMPLE.read_text()
    assert old in text
    with pytest.raises(InputError, match=message) as error:
        parse_apps_spec(text.replace(old, new, 1), source="k.yaml")
    assert error.value.field == f"apps[0].kernels[0].{field}"
    assert error.value.line == text[: text.index(old)].count("\n") + 1  # the field's own line


@pytest.mark.parametrize(("time_s", "ok"), [("1.0e-6", True), ("9.9e-7", False),
                                             ("3600", True), ("3601", False)])  # fmt: skip
def test_an_explicit_kernel_lasts_a_microsecond_to_an_hour(time_s, ok):
    text = EXAMPLE.read_text().replace("time_s: 2.0e-4", f"time_s: {time_s}", 1)
    if ok:
        assert parse_apps_spec(text).apps[0].kernels[0].time_s == float(time_s)
        return
    with pytest.raises(InputError, match=r"number in \[1e-06, 3600\]") as error:
        parse_apps_spec(text, source="k.yaml")
    assert error.value.field == "apps[0].kernels[0].time_s"


def test_the_limits_are_the_spec_gpus_own():
    # 100 SMs fit an A100 (108) but not a T4 (40).
    text = EXAMPLE.read_text().replace("sms: 64", "sms: 100", 1)
    parse_apps_spec(text)
    with pytest.raises(InputError, match="100 is more than the 40 SMs of the T4"):
        parse_apps_spec(text.replace("gpu: A100", "gpu: T4"))


def test_an_unknown_gpu_names_the_spec_line():
    with pytest.raises(InputError, match="unknown GPU 'B300'") as error:
        parse_apps_spec(GOOD.replace("gpu: A100", "gpu: B300"), source="apps.yaml")
    assert (error.value.source, error.value.line, error.value.field) == ("apps.yaml", 1, "gpu")


def test_more_than_a_day_of_simulated_time_is_refused():
    assert parse_apps_spec(GOOD.replace("duration_s: 0.5", "duration_s: 86400")).duration_s
    with pytest.raises(InputError, match="<= 86400") as error:
        parse_apps_spec(GOOD.replace("duration_s: 0.5", "duration_s: 86401"))
    assert (error.value.field, error.value.line) == ("duration_s", 2)


def test_at_most_48_apps_share_a_gpu():
    app = "  - {name: a%d, priority: 0, closed_loop: true, kernels: [%s]}\n"
    kernel = ("{name: k, op: o, grid: [64, 1, 1], block: [256, 1, 1], registers_per_thread: 32, "
              "shared_bytes_per_block: 0, sms: 8, occupancy: 0.5, flops: 1.0e9, bytes: 1.0e7, "
              "bound: compute, time_s: 1.0e-4}")  # fmt: skip
    head = "gpu: A100\nduration_s: 0.01\napps:\n"
    assert len(parse_apps_spec(head + "".join(app % (i, kernel) for i in range(48))).apps) == 48
    with pytest.raises(InputError, match="at most 48 apps share one GPU, got 49") as error:
        parse_apps_spec(head + "".join(app % (i, kernel) for i in range(49)), source="a.yaml")
    assert (error.value.field, error.value.line) == ("apps", 3)
