"""``qosched k8s job`` on the specs ``qosched submit`` takes: every field of every local example
reaches the job's objects, which the Kubernetes schemas accept strictly, or is refused by name."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from qosched.cli.main import main
from qosched.trainingjob import jobspec
from qosched.trainingjob.jobspec import TrainingJobSpec, parse_container_job_spec

LOCAL_EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "local"
VERSIONS = ("1.33", kubernetes_validate.utils.latest_version())
GPUS_PER_POD = 2  # not 1: the rank count must come from it, not from a default
CD = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "qosched-cd"]


def k8s_job(path: Path, capsys, *options: str) -> tuple[int, list[dict[str, Any]], str]:
    """``qosched k8s job PATH --image img OPTIONS``: its exit code, objects and errors."""
    code = main(["k8s", "job", str(path), "--image", "img:1", *options])
    out, err = capsys.readouterr()
    return code, [o for o in yaml.safe_load_all(out) if o is not None], err


def kubelet(text: str, variables: dict[str, str]) -> str:
    """``text`` as the kubelet passes a command word or env value on: ``$(NAME)`` of a variable
    set is its value, ``$$`` is ``$``, anything else stays (Kubernetes' expansion rules)."""
    out, at = [], 0
    while at < len(text):
        if text.startswith("$$", at):
            out.append("$")
            at += 2
        elif text.startswith("$(", at) and ")" in text[at:]:
            end = text.index(")", at)
            name = text[at + 2 : end]
            out.append(variables.get(name, text[at : end + 1]))
            at = end + 1
        else:
            out.append(text[at])
            at += 1
    return "".join(out)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod's container, its command and env values as the process sees them."""
    raw = statefulset(objects)["spec"]["template"]["spec"]["containers"][0]
    variables: dict[str, str] = {"POD_NAME": "j-0", "POD_NAMESPACE": "default"}
    env = []
    for item in raw["env"]:
        if "value" in item:  # a value may name the variables before it
            item = {**item, "value": kubelet(item["value"], variables)}
            variables[item["name"]] = item["value"]
        env.append(item)
    return {**raw, "env": env, "command": [kubelet(w, variables) for w in raw["command"]]}


def statefulset(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    return sts


def note(objects: list[dict[str, Any]], key: str) -> str | None:
    return statefulset(objects)["metadata"]["annotations"].get(f"qosched.io/{key}")


def argv(objects: list[dict[str, Any]]) -> list[str]:
    """The pod's command, past the shell that enters a relative working folder."""
    command = container(objects)["command"]
    return command[len(CD) + 1 :] if command[: len(CD)] == CD else command


def env(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(objects)["env"] if "value" in e}


# How each field of a spec shows in the job's objects, given the spec as read and the
# --resource the job was made with. Hand-written from docs/kubernetes.md, one per field.
Check = Callable[[TrainingJobSpec, str, list[dict[str, Any]]], bool]


def _workload(spec, resource, objects):
    word = argv(objects)
    at = word.index("--workload")
    return word[:3] == ["qosched", "k8s", "train"] and word[at + 1] == spec.workload


def _command(spec, resource, objects):
    return argv(objects)[-len(spec.command) :] == list(spec.command)


def _launcher(spec, resource, objects):
    word = argv(objects)
    ranks = word[word.index("--nproc-per-node") + 1]
    return word[:3] == ["python", "-m", "torch.distributed.run"] and ranks == str(GPUS_PER_POD)


def _working_dir(spec, resource, objects, written: str) -> bool:
    if written.startswith("/"):
        return container(objects)["workingDir"] == written
    return container(objects)["command"][: len(CD) + 1] == [*CD, written]


def _min_workers(spec, resource, objects):
    if resource == "cpu":
        return container(objects)["resources"]["limits"]["cpu"] == str(spec.resources.min_cpus)
    least = spec.resources.bounds()[0]
    return statefulset(objects)["spec"]["replicas"] == math.ceil(least / GPUS_PER_POD)


CHECKS: dict[str, Check] = {
    "workload": _workload,
    "command": _command,
    "work": lambda spec, resource, objects: note(objects, "iterations") == str(spec.iterations),
    "deadline": lambda spec, resource, objects: (
        note(objects, "deadline") == spec.deadline.to_text()
    ),
    "resources.minCpus": _min_workers,
    "resources.maxCpus": lambda spec, resource, objects: (
        note(objects, "max-workers") == str(spec.resources.max_cpus)
    ),
    "resources.minGpus": lambda spec, resource, objects: (
        _min_workers(spec, resource, objects)
        and note(objects, "requested-workers") == str(spec.resources.min_gpus)
    ),
    "resources.maxGpus": lambda spec, resource, objects: (
        note(objects, "max-workers") == str(spec.resources.max_gpus)
    ),
    "resources.memory": lambda spec, resource, objects: (
        container(objects)["resources"]["limits"]["memory"] == str(spec.resources.memory_bytes)
    ),
    "bestEffort": lambda spec, resource, objects: (
        note(objects, "best-effort") == str(spec.best_effort).lower()
    ),
    "seed": lambda spec, resource, objects: (
        spec.seed == 0 or argv(objects)[argv(objects).index("--seed") + 1] == str(spec.seed)
    ),
    "requestedCpus": lambda spec, resource, objects: (
        note(objects, "requested-workers") == str(spec.requested_cpus)
    ),
    "env": lambda spec, resource, objects: env(objects).items() >= dict(spec.env).items(),
    "launcher": _launcher,
    # workingDir: checked from the text written (the spec as read keeps no image folder).
}


def stated(path: Path) -> dict[str, Any]:
    """The fields a spec file states, ``resources`` spread out: ``{"resources.memory": ...}``."""
    body = yaml.safe_load(path.read_text())["spec"]
    fields = {k: v for k, v in body.items() if k != "resources"}
    fields.update({f"resources.{k}": v for k, v in (body.get("resources") or {}).items()})
    return fields


def test_every_field_a_spec_may_state_has_a_check():
    # A field added to the spec without a check here would be a field nobody sees dropped.
    every = {k for k in jobspec._SPEC_KEYS if k != "resources"}
    every |= {f"resources.{k}" for k in jobspec._RESOURCE_KEYS}
    # checked and refused apart
    assert every - set(CHECKS) == {"workingDir", "logLimit", "speedKey"}


#: The examples that --resource cpu (one pod, re-sized in place) cannot run, and the field or
#: option named: one states GPUs, the other torchrun, whose process count is fixed at start.
REFUSALS = {("gpu-ddp-job", "cpu"): "resource", ("ddp-job", "cpu"): "spec.launcher"}


@pytest.mark.parametrize("resource", ["gpu", "cpu"])
@pytest.mark.parametrize("path", sorted(LOCAL_EXAMPLES.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_field_of_every_local_example_survives_or_is_refused_by_name(path, resource, capsys):
    code, objects, err = k8s_job(
        path, capsys, "--resource", resource, "--gpus-per-pod", str(GPUS_PER_POD)
    )
    fields = stated(path)
    refusal = REFUSALS.get((path.stem, resource))
    if refusal is not None:
        assert (code, objects) == (2, []) and f"field '{refusal}'" in err, err
        return
    assert code == 0, err
    for obj in objects:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    spec = parse_container_job_spec(path.read_text(), path).spec
    for name, written in fields.items():
        if name == "workingDir":
            assert _working_dir(spec, resource, objects, written), name
        else:
            assert CHECKS[name](spec, resource, objects), name


SPEC = """\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: j
spec:
  work: {iterations: 10}
  deadline: 1h
"""


def write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC + "".join(f"  {line}\n" for line in extra.splitlines()))
    return path


@pytest.mark.parametrize(
    ("extra", "memory"),
    [
        ("workload: cnn\nresources: {memory: 2G}", "2000000000"),
        ("workload: cnn\nresources: {memory: 2Gi}", str(2 * 2**30)),
        ("workload: cnn\nresources: {memory: 500M}", "500000000"),
        ("command: [x]\nresources: {minGpus: 1, memory: 1.5e6}", "1500000"),
    ],
    ids=["2G", "2Gi", "500M", "exponent"],
)
def test_memory_is_a_kubernetes_quantity(tmp_path, capsys, extra, memory):
    code, objects, err = k8s_job(write(tmp_path, extra), capsys)
    assert code == 0, err
    limits = container(objects)["resources"]["limits"]
    assert limits["memory"] == memory
    kubernetes_validate.validate(statefulset(objects), VERSIONS[0], strict=True)


@pytest.mark.parametrize(
    ("extra", "options", "field"),
    [
        ("workload: cnn\nlogLimit: 64Mi", (), "spec.logLimit"),  # the default size, stated
        ("workload: cnn\nlogLimit: 1Gi", (), "spec.logLimit"),
        ("workload: cnn\nspeedKey: resnet", (), "spec.speedKey"),
        ("command: [x]\nenv: {POD_NAME: me}", (), "spec.env.POD_NAME"),
        ("command: [x]\nenv: {QOSCHED_JOB: me}", (), "spec.env.QOSCHED_JOB"),
        ("command: [x]\nseed: 3", (), "spec.seed"),
        ("command: [t.py]\nlauncher: torchrun", ("--resource", "cpu"), "spec.launcher"),
        ("command: [x]\nresources: {memory: 1500m}", (), "spec.resources.memory"),
    ],
    ids=[
        "log-limit-default",
        "log-limit",
        "speed-key",
        "pod-name",
        "qosched-variable",
        "command-seed",
        "torchrun-on-a-resized-pod",
        "fraction-of-a-byte",
    ],
)
def test_what_the_pods_cannot_honour_is_refused_by_name(tmp_path, capsys, extra, options, field):
    code, objects, err = k8s_job(write(tmp_path, extra), capsys, *options)
    assert (code, objects) == (2, [])
    assert f"field '{field}'" in err and str(tmp_path / "job.yaml") in err


@pytest.mark.parametrize(
    ("written", "command", "working_dir"),
    [
        ("/work/runs/../app", ["x"], "/work/app"),
        ("sub/./dir", [*CD, "sub/dir", "x"], None),
    ],
    ids=["absolute", "relative"],
)
def test_a_working_dir_is_the_images(tmp_path, capsys, written, command, working_dir):
    # Neither folder exists here: it is the image's, not this machine's.
    code, objects, err = k8s_job(write(tmp_path, f"command: [x]\nworkingDir: {written}"), capsys)
    assert code == 0, err
    assert container(objects)["command"] == command
    assert container(objects).get("workingDir") == working_dir
    kubernetes_validate.validate(statefulset(objects), VERSIONS[0], strict=True)


@pytest.mark.parametrize(
    ("resources", "options", "rendezvous"),
    [
        ("{minGpus: 2, maxGpus: 2}", ("--gpus-per-pod", "2"), ["--standalone"]),
        (
            "{minGpus: 1, maxGpus: 4}",
            ("--gpus-per-pod", "2"),
            [
                *("--nnodes", "1:2", "--rdzv-backend", "c10d"),
                *("--rdzv-endpoint", "j-0.j:29500", "--rdzv-id", "j"),
            ],
        ),
    ],
    ids=["one-pod", "up-to-two-pods"],
)
def test_torchrun_runs_a_rank_per_gpu_of_the_pod(tmp_path, capsys, resources, options, rendezvous):
    spec = write(
        tmp_path, f"command: [t.py, --lr, '1']\nlauncher: torchrun\nresources: {resources}"
    )
    code, objects, err = k8s_job(spec, capsys, *options)
    assert code == 0, err
    assert container(objects)["command"] == [
        *["python", "-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", "2"],
        *["t.py", "--lr", "1"],
    ]


def test_a_program_under_torchrun_runs_as_it_is(tmp_path, capsys):
    spec = write(tmp_path, "command: [./run.sh]\nlauncher: torchrun\nresources: {minGpus: 1}")
    code, objects, err = k8s_job(spec, capsys, "--gpus-per-pod", "1", "--replicas", "1")
    assert code == 0, err
    assert container(objects)["command"][-2:] == ["--no-python", "./run.sh"]


def test_command_and_env_reach_the_process_as_written(tmp_path, capsys):
    # The kubelet expands $(VAR) and reduces $$ in both: what a shell or a local job would
    # take literally must come out literally.
    words = ["sh", "-c", "echo $(POD_NAME) $$ $HOME", "$(A)$$(A)"]
    spec = write(tmp_path, f"command: {words}\nenv: {{A: '$(POD_NAME)', B: '$(A)$$'}}")
    code, objects, err = k8s_job(spec, capsys)
    assert code == 0, err
    assert container(objects)["command"] == words
    assert env(objects)["A"] == "$(POD_NAME)" and env(objects)["B"] == "$(A)$$"


def test_env_and_seed_reach_the_pod(tmp_path, capsys):
    code, objects, err = k8s_job(write(tmp_path, "command: [x]\nenv: {B: '2', A: '1'}"), capsys)
    assert code == 0, err
    assert container(objects)["env"][-2:] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    code, objects, err = k8s_job(write(tmp_path, "workload: cnn\nseed: 7"), capsys)
    assert code == 0, err
    assert container(objects)["command"][-2:] == ["--seed", "7"]
