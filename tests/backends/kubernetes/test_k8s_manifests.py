"""The printed manifests: valid against the Kubernetes schemas, RBAC that covers every call
the scheduler makes, example files in step with the generator."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from fake_apiserver import FakeApiServer
from k8s_helpers import SCRIPT, job_set, scheduler

from qosched.backends.kubernetes import manifests
from qosched.cli.main import main
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import load_job_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "k8s"
#: The release where the pod resize subresource is on by default, and the newest schemas.
VERSIONS = ("1.33", kubernetes_validate.utils.latest_version())


def objects_of_examples() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.k8s.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            found.append((f"{path.name}:{obj['kind']}/{obj['metadata']['name']}", obj))
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("resource", ["gpu", "cpu"])
def test_deployment_validates_strictly(resource, version):
    for obj in manifests.deployment(resource=resource):
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("name", "obj"), objects_of_examples(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_example_objects_validate_strictly(name, obj, version):
    kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_rejects_a_broken_object():
    # The check above can fail: a misspelt field is refused in strict mode.
    sts = manifests.job(load_job_spec(EXAMPLES / "cnn-cpu.yaml"), image="x", resource="cpu")[-1]
    sts["spec"]["podManagmentPolicy"] = "Parallel"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, VERSIONS[0], strict=True)


def test_examples_are_what_the_generator_prints(capsys):
    script = (EXAMPLES / "regenerate.sh").read_text()
    commands = re.findall(
        r"^qosched (.*?) > (examples/k8s/\S+)$", script.replace("\\\n", " "), flags=re.M
    )
    assert len(commands) == 3
    for command, target in commands:
        assert main(command.split()) == 0
        printed = capsys.readouterr().out
        assert printed == (EXAMPLES.parents[1] / target).read_text(), target


def granted(rules: list[dict]) -> set[tuple[str, str]]:
    return {(res, verb) for rule in rules for res in rule["resources"] for verb in rule["verbs"]}


def call(method: str, path: str) -> tuple[str, str]:
    """The RBAC (resource, verb) an API request needs."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts:
        at = parts.index("namespaces")
        parts = parts[:at] + parts[at + 2 :]
    kind_at = next(
        i
        for i, p in enumerate(parts)
        if p in ("pods", "nodes", "statefulsets", "leases", "events", "secrets")
    )
    rest = parts[kind_at + 1 :]
    resource = parts[kind_at] + (f"/{rest[1]}" if len(rest) == 2 else "")
    verb = {
        ("GET", 0): "list",
        ("GET", 1): "get",
        ("WATCH", 0): "watch",
        ("POST", 0): "create",
        ("POST", 2): "create",
        ("PATCH", 1): "patch",
        ("PATCH", 2): "patch",
        ("PUT", 1): "update",
        ("DELETE", 1): "delete",
    }[(method, len(rest))]
    return resource, verb


@pytest.mark.network
def test_rbac_grants_every_call_the_scheduler_makes():
    SCRIPT.clear()
    with FakeApiServer() as api:
        api.add_node("c1", cpu="8")
        api.create("statefulsets", job_set("c", resource="cpu"))
        # A job it cannot read: an Event and a PodScheduled condition report it.
        api.create(
            "statefulsets",
            job_set("bad", resource="cpu", annotations={"qosched.io/iterations": "x"}),
        )
        before = len(api.requests)
        sched = scheduler(api.url, resource="cpu")
        for workers in (2, 6, 0):  # start, re-size in place, pre-empt
            SCRIPT["ml/c"] = workers
            for _ in range(3):
                sched.step()
        api.resize_supported = False
        for workers in (2, 4):  # restart at a new size
            SCRIPT["ml/c"] = workers
            for _ in range(3):
                sched.step()
        sched.pods.put(
            {
                **api.get("pods", "ml/c-0"),
                "spec": {**api.get("pods", "ml/c-0")["spec"], "nodeName": None},
            }
        )
        sched.step()  # the conflict makes it read the pod
        used = {call(m, p) for m, p in api.requests[before:]}
    rules = granted(manifests.SCHEDULER_RULES) | granted(manifests.LEASE_RULES)
    assert used <= rules, used - rules
    # and nothing granted that no call needs
    assert rules - used == set(), rules - used


ROOT = EXAMPLES.parents[1]


def test_the_dockerfile_builds_the_image_the_manifests_name():
    import tomllib

    makefile = (ROOT / "Makefile").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    (image,) = re.findall(r"^IMAGE \?= (\S+)$", makefile, flags=re.M)
    assert image == manifests.DEFAULT_IMAGE
    assert "docker build -t $(IMAGE) ." in makefile
    # the torch pin is pyproject's, and the wheel is the CPU one
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [p for p in pins if p.startswith("torch")]
    assert (
        f"pip install --no-cache-dir {torch} --index-url https://download.pytorch.org/whl/cpu"
        in (dockerfile)
    )
    # non-root, as the Deployment runs it; the port its probes use
    pod = next(o for o in manifests.deployment() if o["kind"] == "Deployment")["spec"]["template"]
    uid = pod["spec"]["securityContext"]["runAsUser"]
    assert re.findall(r"^USER (\S+)$", dockerfile, flags=re.M) == [f"{uid}:{uid}"]
    assert f"EXPOSE {manifests.HTTP_PORT}" in dockerfile


def test_manifests_take_the_image(capsys):
    assert main(["k8s", "manifests", "--image", "registry.example.com/qosched:dev"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/qosched:dev"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


GPU_SPEC = (
    "apiVersion: qosched/v1\nkind: TrainingJob\nmetadata: {name: g}\nspec:\n"
    "  command: [python, train.py]\n  work: {iterations: 1000}\n  deadline: 2h\n"
    "  resources: {minGpus: 4, maxGpus: 8}\n"
)


def gpu_spec(tmp_path: Path):
    path = tmp_path / "g.yaml"
    path.write_text(GPU_SPEC)
    return load_job_spec(path)


def test_a_spec_stating_gpus_requests_them_and_starts_on_enough_pods(tmp_path):
    sts = manifests.job(gpu_spec(tmp_path), image="x", gpus_per_pod=2)[-1]
    notes = sts["metadata"]["annotations"]
    assert notes["qosched.io/requested-workers"] == "4"
    assert notes["qosched.io/max-workers"] == "8"
    assert sts["spec"]["replicas"] == 2  # 4 GPUs on pods of 2
    limits = sts["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    assert manifests.job(gpu_spec(tmp_path), image="x", replicas=3)[-1]["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"resource": "cpu"}, "resource"),
        ({"replicas": 10**11}, "replicas"),
        ({"batch_size": -5}, "batch_size"),
        ({"namespace": "Bad_NS!"}, "namespace"),
        ({"gpus_per_pod": 0}, "gpus_per_pod"),
    ],
    ids=["gpu-spec-as-cpu-job", "replicas-1e11", "negative-batch", "bad-namespace", "no-gpus"],
)
def test_a_job_the_cluster_would_refuse_or_misread_is_refused(tmp_path, options, field):
    with pytest.raises(InputError) as caught:
        manifests.job(gpu_spec(tmp_path), image="x", **options)
    assert caught.value.field == field
