"""The JSON contracts (docs/contracts.md, docs/schemas/): what each command really prints holds
to its schema, a schema refuses what breaks it, and the page lists exactly each schema's keys."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from json_contracts import SCHEMAS, assert_contract, schema, violations
from qosched.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PAGE = SCHEMAS.parent / "contracts.md"
NAMES = sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one object on one line, nothing else
    return json.loads(out)


# --- the real outputs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    argv = ["trace", "generate", "--out", str(path), "--jobs", "30", "--cluster-gpus", "16",
            "--best-effort-fraction", "0.3", "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    return path


def test_sim_cluster_one_policy(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "cluster", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "8",
            "--policy", "qos", "--json"]  # fmt: skip
    payload = run_json(argv, capsys)
    assert_contract("sim-cluster", payload)
    # The page promises the order of the keys too: the schema lists them in it.
    assert list(payload) == list(schema("sim-cluster")["$defs"]["run"]["properties"])


def test_sim_cluster_several_policies(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "cluster", "--trace", str(trace), "--nodes", "2", "--gpus-per-node", "8",
            "--policy", "fifo,edf", "--json"]  # fmt: skip
    payload = run_json(argv, capsys)
    assert_contract("sim-cluster", payload)
    assert [run["policy"] for run in payload["runs"]] == ["fifo", "edf"]


@pytest.mark.slow
def test_infer_plan_output_and_plan_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "machine: {gpu: T4, link: PCIe3-x16, cpu_costs: roofline}\n"
        "tenants:\n  - {name: a, model: mlp, latency_goal_ms: 50}\n  - {name: b, model: mlp}\n"
    )
    plan = tmp_path / "plan.json"
    payload = run_json(["infer", "plan", str(spec), "--json", "--out", str(plan)], capsys)
    assert_contract("infer-plan", payload)
    written = json.loads(plan.read_text())
    assert_contract("infer-plan-file", written)
    assert [t["latency_goal_s"] for t in written["tenants"]] == [0.05, None]


@pytest.mark.slow
def test_gpu_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(["gpu", "estimate", "mlp", "--gpu", "t4", "--json"], capsys)
    assert_contract("gpu-estimate", payload)


@pytest.mark.slow
def test_gpu_sim(capsys: pytest.CaptureFixture[str]) -> None:
    spec = EXAMPLES / "gpu_apps_kernels.yaml"
    payload = run_json(["gpu", "sim", str(spec), "--policy", "fggr", "--json"], capsys)
    assert_contract("gpu-sim", payload)
    kinds = {app["goal"]["kind"] for app in payload["apps"]}
    assert kinds == {"p99_slowdown", "best_effort"}  # both branches of the goal's value


# --- the schemas refuse what breaks them ----------------------------------------------------------

#: A small output that holds to its schema, written out by hand from the page's tables.
GOOD_GPU_SIM = {
    "policy": "fggr", "gpu_utilization": 0.5, "wall_s": 0.1, "gpu": "A100-SXM4-80GB",
    "duration_s": 0.5, "bandwidth_utilization": 0.2, "goals_met": True, "calibrated": "goals",
    "setup_s": 2.5,
    "apps": [{
        "name": "serving", "priority": 1, "p50_latency_ratio": 1.0, "p99_latency_ratio": 1.05,
        "throughput_ratio": 1.0, "p50_latency_s": 0.001, "p99_latency_s": 0.002,
        "alone_p99_latency_s": 0.0019, "completed": 10, "unfinished": 0,
        "throughput_rps": 20.0, "p99_lower_bound": False,
        "goal": {"kind": "p99_slowdown", "value": 1.1}, "met": True,
    }],
}  # fmt: skip


def _extra_key(d: dict) -> None:
    d["apps"][0]["speedup"] = 2.0


def _missing_key(d: dict) -> None:
    del d["apps"][0]["met"]


def _nan_as_string(d: dict) -> None:
    d["apps"][0]["p99_latency_ratio"] = "NaN"


def _best_effort_with_value(d: dict) -> None:
    d["apps"][0]["goal"] = {"kind": "best_effort", "value": 1.0}


def _goal_without_value(d: dict) -> None:
    d["apps"][0]["goal"] = {"kind": "p99_latency", "value": None}


def _negative_count(d: dict) -> None:
    d["apps"][0]["completed"] = -1


@pytest.mark.parametrize(
    ("breaks", "where"),
    [
        (_extra_key, "$.apps[0]"),
        (_missing_key, "$.apps[0]"),
        (_nan_as_string, "$.apps[0].p99_latency_ratio"),
        (_best_effort_with_value, "$.apps[0].goal.value"),
        (_goal_without_value, "$.apps[0].goal.value"),
        (_negative_count, "$.apps[0].completed"),
    ],
    ids=lambda x: x.__name__.strip("_") if callable(x) else "",
)
def test_a_broken_output_is_refused_where_it_breaks(breaks, where: str) -> None:
    assert violations("gpu-sim", GOOD_GPU_SIM) == []
    broken = copy.deepcopy(GOOD_GPU_SIM)
    breaks(broken)
    found = violations("gpu-sim", broken)
    assert found and all(line.startswith(f"{where}:") for line in found), found


def test_one_run_and_several_are_the_two_shapes_of_sim_cluster() -> None:
    run = {key: 0 for key in schema("sim-cluster")["$defs"]["run"]["properties"]}
    jct = {"count": 0, "mean_s": None, "median_s": None, "p95_s": None}
    run.update(policy="qos", jct_deadline=jct, jct_best_effort=jct)
    assert violations("sim-cluster", run) == []
    assert violations("sim-cluster", {"runs": [run, run]}) == []
    assert violations("sim-cluster", {"runs": [run, run], "policy": "qos"}) != []


@pytest.mark.parametrize("name", NAMES)
def test_every_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    Draft202012Validator.check_schema(schema(name))


# --- the page lists what the schemas say ----------------------------------------------------------

MARKER = re.compile(r"<!-- schema: (?P<name>[\w-]+)\.schema\.json(?:#(?P<pointer>[/\w$]+))? -->")


def page_tables() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Each table of the page under a schema marker: (schema, JSON pointer) -> (key, type) rows."""
    tables: dict[tuple[str, str], list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        found = MARKER.fullmatch(line.strip())
        if found:
            current = tables.setdefault((found["name"], found["pointer"] or ""), [])
        elif current is not None and line.startswith("| `"):
            key, kind = (cell.strip() for cell in line.strip("|").split("|")[:2])
            current.append((key.strip("`"), kind))
        elif current is not None and current and not line.startswith("|"):
            current = None
    return tables


def resolve(document: dict[str, Any], pointer: str) -> dict[str, Any]:
    node: Any = document
    for part in filter(None, pointer.split("/")):
        node = node[part]
    return node


def render(document: dict[str, Any], node: dict[str, Any]) -> str:
    """A schema node's type as the page's type column writes it."""
    if "$ref" in node:
        target = resolve(document, node["$ref"].removeprefix("#"))
        return (
            f"object ({target['title']})"
            if target["type"] == "object"
            else render(document, target)
        )
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " or ".join(json.dumps(v) for v in node["enum"])
    if "anyOf" in node and "type" not in node:
        return " or ".join(render(document, n) for n in node["anyOf"])
    kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
    if kinds == ["array"]:
        size = node.get("minItems")
        count = f"{size} " if size is not None and size == node.get("maxItems") else ""
        return f"array of {count}{render(document, node['items'])}"
    return " or ".join(kinds)


def schema_objects(name: str) -> dict[str, dict[str, Any]]:
    """The pointers of the schema's objects with keys: the root and every ``$defs`` object."""
    document = schema(name)
    found = {"": document} if "properties" in document else {}
    for key, node in document.get("$defs", {}).items():
        if node.get("type") == "object":
            found[f"/$defs/{key}"] = node
    return found


def test_the_page_has_a_table_for_every_object_of_every_schema() -> None:
    expected = {(name, pointer) for name in NAMES for pointer in schema_objects(name)}
    assert set(page_tables()) == expected


@pytest.mark.parametrize(("name", "pointer"), sorted(page_tables()), ids=lambda x: x or "root")
def test_a_table_lists_the_schema_keys_in_order_with_their_types(name: str, pointer: str) -> None:
    document = schema(name)
    node = resolve(document, pointer)
    expected = [(key, render(document, sub)) for key, sub in node["properties"].items()]
    assert page_tables()[(name, pointer)] == expected


def test_the_page_links_every_schema() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert [n for n in NAMES if f"(schemas/{n}.schema.json)" not in text] == []
