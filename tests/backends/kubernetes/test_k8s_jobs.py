"""Job annotations read at the boundary, and the pure node accounting and gang placement."""

from __future__ import annotations

import copy
import random

import pytest
from k8s_helpers import job_set

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.fit import (
    Placer,
    fits,
    node_rooms,
    place_gang,
    pod_requests,
    take,
)
from qosched.cluster.admission import Admission
from qosched.core.errors import InputError

CREATED = "2026-11-29T20:00:00Z"
CREATED_S = 1_795_982_400.0  # the same instant in Unix seconds


def stateful_set(annotations: dict, **options) -> dict:
    sts = job_set("j", annotations=annotations, **options)
    sts["metadata"]["creationTimestamp"] = CREATED
    return sts


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [
        ("90m", CREATED_S + 5400),
        ("1h30m", CREATED_S + 5400),
        ("2d", CREATED_S + 172_800),
        ("2026-11-30T12:00:00Z", CREATED_S + 16 * 3600),
    ],
    ids=["minutes", "hours-minutes", "days", "absolute"],
)
def test_deadline_is_a_duration_after_creation_or_a_time(deadline, expected):
    job = J.read_job(stateful_set({J.DEADLINE: deadline}), "gpu")
    assert job.deadline_at == expected


def test_no_deadline_is_best_effort_and_defaults_apply():
    job = J.read_job(stateful_set({}), "gpu")
    assert job.deadline_at is None
    assert (job.iterations, job.per_pod, job.requested_workers, job.replicas) == (1000, 1, 1, 1)
    assert job.key == "ml/j"


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("guaranteed", Admission.GUARANTEED),
        ("best-effort", Admission.BEST_EFFORT),
        ("declined", Admission.DECLINED),
        ("Guaranteed", None),  # written by someone else: decided again
        ("maybe", None),
    ],
)
def test_the_admission_annotation_reads_as_the_scheduler_wrote_it(written, read):
    assert J.read_job(stateful_set({J.ADMISSION: written}), "gpu").admission is read


def test_a_job_without_an_admission_is_yet_to_be_decided():
    assert J.read_job(stateful_set({}), "gpu").admission is None


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({J.ITERATIONS: "many"}, J.ITERATIONS),
        ({J.ITERATIONS: "0"}, J.ITERATIONS),
        ({J.DEADLINE: "soon"}, J.DEADLINE),
        ({J.BEST_EFFORT: "yes"}, J.BEST_EFFORT),
        ({J.PROGRESS: '{"iteration": -1, "active_s": 3}'}, J.PROGRESS),
        ({J.PROGRESS: "12"}, J.PROGRESS),
    ],
    ids=[
        "iterations-text",
        "iterations-zero",
        "deadline",
        "best-effort",
        "progress-neg",
        "progress-shape",
    ],
)
def test_bad_annotations_name_the_object_and_field(annotations, field):
    with pytest.raises(InputError) as error:
        J.read_job(stateful_set(annotations), "gpu")
    assert error.value.field == field
    assert error.value.source == "statefulset/ml/j"


def test_missing_iterations_is_an_error():
    sts = stateful_set({})
    del sts["metadata"]["annotations"][J.ITERATIONS]
    with pytest.raises(InputError, match="required"):
        J.read_job(sts, "gpu")


def test_a_gpu_job_pod_must_request_whole_gpus():
    with pytest.raises(InputError, match=r"nvidia\.com/gpu"):
        J.read_job(stateful_set({}, resource="cpu"), "gpu")  # a pod without GPUs


def node(name: str, cpu: str, gpus: int = 0, memory: str = "16Gi") -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, node_name: str | None, cpu: str, gpus: int = 0, phase: str = "Running") -> dict:
    requests = {"cpu": cpu}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": requests}}],
        },
        "status": {"phase": phase},
    }


def test_rooms_subtract_running_pods_only():
    nodes = [node("a", "8", 4), node("b", "4", 0)]
    cordoned = node("c", "64", 8)
    cordoned["spec"]["unschedulable"] = True
    pods = [pod("p1", "a", "1500m", 1), pod("p2", "a", "2"), pod("done", "a", "4", 3, "Succeeded")]
    rooms = node_rooms([*nodes, cordoned], pods)
    assert set(rooms) == {"a", "b"}  # a cordoned node has no room
    assert rooms["a"]["cpu"] == pytest.approx(4.5)
    assert rooms["a"]["nvidia.com/gpu"] == 3
    assert rooms["a"]["pods"] == 108


def test_pod_requests_fall_back_to_limits():
    p = pod("p", None, "1")
    p["spec"]["containers"].append({"name": "side", "resources": {"limits": {"cpu": "500m"}}})
    assert pod_requests(p) == {"pods": 1.0, "cpu": 1.5}


def test_gang_goes_where_the_job_is_then_on_the_roomiest_node():
    rooms = {
        "a": {"cpu": 8, "nvidia.com/gpu": 1, "pods": 10},
        "b": {"cpu": 8, "nvidia.com/gpu": 3, "pods": 10},
        "c": {"cpu": 8, "nvidia.com/gpu": 2, "pods": 10},
    }
    gang = [pod(f"w{i}", None, "1", 1) for i in range(4)]
    # One pod of the job already runs on c: c first (2), then the roomiest, b (2 of its 3).
    assert place_gang(gang, rooms, "nvidia.com/gpu", prefer=["c"]) == {
        "ml/w0": "c",
        "ml/w1": "c",
        "ml/w2": "b",
        "ml/w3": "b",
    }
    assert rooms["c"]["nvidia.com/gpu"] == 2  # the caller's rooms are untouched
    assert place_gang([*gang, *gang[:3]], rooms, "nvidia.com/gpu") is None  # 7 > 6 GPUs


def sorted_placement(pods, rooms, resource, prefer=()):
    """The placement rule spelt out: every node's room copied, the fitting nodes sorted."""
    scratch = {name: dict(room) for name, room in rooms.items()}
    preferred, result = set(prefer), {}
    for p in pods:
        request = pod_requests(p)
        candidates = sorted(
            (name for name, room in scratch.items() if fits(room, request)),
            key=lambda n: (n not in preferred, -scratch[n].get(resource, 0.0), n),
        )
        if not candidates:
            return None
        take(scratch[candidates[0]], request)
        preferred.add(candidates[0])
        result[f"ml/{p['metadata']['name']}"] = candidates[0]
    return result


@pytest.mark.parametrize("seed", range(20))
def test_a_gang_is_placed_as_the_rule_says_on_random_rooms(seed):
    rng = random.Random(seed)
    rooms = {
        f"n{i:02d}": {
            "cpu": float(rng.randint(0, 16)),
            "memory": float(rng.choice((0, 4, 16))) * 2**30,
            "nvidia.com/gpu": float(rng.randint(0, 8)),
            "pods": float(rng.randint(0, 3)),
        }
        for i in range(rng.randint(1, 30))
    }
    before = copy.deepcopy(rooms)
    gang = [
        pod(f"w{i}", None, str(rng.randint(1, 4)), rng.randint(0, 3))
        for i in range(rng.randint(1, 12))
    ]
    prefer = rng.sample(sorted(rooms), rng.randint(0, min(3, len(rooms))))
    expected = sorted_placement(gang, rooms, "nvidia.com/gpu", prefer)
    assert place_gang(gang, rooms, "nvidia.com/gpu", prefer) == expected
    assert rooms == before  # the caller's rooms are untouched


NINES = "9" * 400


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({J.PROGRESS: '{"iteration": Infinity, "active_s": 3}'}, J.PROGRESS),
        ({J.PROGRESS: '{"iteration": 1e400, "active_s": 3}'}, J.PROGRESS),
        ({J.PROGRESS: '{"iteration": NaN, "active_s": 3}'}, J.PROGRESS),
        ({J.PROGRESS: f'{{"iteration": {2**53}, "active_s": 3}}'}, J.PROGRESS),
        ({J.PROGRESS: '{"iteration": 5, "active_s": 1e400}'}, J.PROGRESS),
        ({J.PROGRESS: '{"iteration": true, "active_s": 3}'}, J.PROGRESS),
        ({J.ITERATIONS: "1" + "0" * 400}, J.ITERATIONS),
        ({J.ITERATIONS: str(2**53)}, J.ITERATIONS),
        ({J.REQUESTED_WORKERS: NINES}, J.REQUESTED_WORKERS),
        ({J.DEADLINE: NINES}, J.DEADLINE),
        ({J.DEADLINE: NINES + "h"}, J.DEADLINE),
        ({J.DEADLINE: "99999999999d"}, J.DEADLINE),
        ({J.DEADLINE: "9999-12-31T23:00:00-12:00"}, J.DEADLINE),
        ({J.BATCH_SIZE: "65537"}, J.BATCH_SIZE),
        ({J.REQUESTED_WORKERS: str(2**20 + 1)}, J.REQUESTED_WORKERS),
        ({J.MAX_WORKERS: "999999999999"}, J.MAX_WORKERS),
        ({J.MODEL: ""}, J.MODEL),
        ({J.MODEL: "  "}, J.MODEL),
        ({J.MODEL: "m" * 257}, J.MODEL),
    ],
    ids=[
        "progress-infinity",
        "progress-1e400",
        "progress-nan",
        "progress-2**53",
        "active-1e400",
        "progress-bool",
        "iterations-401-digits",
        "iterations-2**53",
        "workers-400-nines",
        "deadline-400-nines",
        "deadline-400-nines-hours",
        "deadline-after-9999",
        "deadline-offset-past-9999",
        "batch-past-max-batch",
        "requested-workers-past-2**20",
        "max-workers-12-digits",
        "model-empty",
        "model-blank",
        "model-257-chars",
    ],
)
def test_out_of_bounds_annotations_are_input_errors(annotations, field):
    with pytest.raises(InputError) as error:
        J.read_job(stateful_set(annotations), "gpu")
    assert error.value.field == field
    assert error.value.source == "statefulset/ml/j"


@pytest.mark.parametrize(
    ("annotations", "attribute", "expected"),
    [
        ({J.ITERATIONS: str(2**53 - 1)}, "iterations", 2**53 - 1),
        ({J.DEADLINE: "9999-12-31T23:59:59Z"}, "deadline_at", 253_402_300_799.0),
        ({J.PROGRESS: '{"iteration": 12.0, "active_s": 3}'}, "progress", J.Progress(12, 3.0)),
        ({J.BATCH_SIZE: "65536"}, "batch_size", 65_536),
        ({J.REQUESTED_WORKERS: str(2**20)}, "requested_workers", 2**20),
        ({J.MAX_WORKERS: str(2**20)}, "max_workers", 2**20),
        ({J.MODEL: "m" * 256}, "model", "m" * 256),
    ],
    ids=[
        "iterations-largest",
        "deadline-last-second",
        "progress-whole-float",
        "batch-largest",
        "requested-workers-largest",
        "max-workers-largest",
        "model-256-chars",
    ],
)
def test_values_at_the_bounds_are_accepted(annotations, attribute, expected):
    assert getattr(J.read_job(stateful_set(annotations), "gpu"), attribute) == expected


@pytest.mark.parametrize("seed", range(10))
def test_a_round_of_gangs_is_placed_as_the_rule_says_on_the_rooms_left(seed):
    """Gang after gang on one placer, each taking its room (and one in three released again,
    as a gang whose binding failed is): every placement is the rule's on the rooms as they
    are by then."""
    rng = random.Random(seed)
    rooms = {
        f"n{i:02d}": {
            "cpu": float(rng.randint(0, 16)),
            "memory": float(rng.choice((0, 4, 16))) * 2**30,
            "nvidia.com/gpu": float(rng.randint(0, 8)),
            "pods": float(rng.randint(0, 6)),
        }
        for i in range(rng.randint(1, 40))
    }
    placer = Placer(rooms, "nvidia.com/gpu")
    for g in range(25):
        gang = [
            pod(f"g{g}w{i}", None, str(rng.randint(1, 4)), rng.randint(0, 3))
            for i in range(rng.randint(1, 6))
        ]
        prefer = rng.sample(sorted(rooms), rng.randint(0, min(2, len(rooms))))
        expected = sorted_placement(gang, rooms, "nvidia.com/gpu", prefer)
        assert placer.place(gang, prefer) == expected
        for p in gang if expected else []:
            placer.take(expected[f"ml/{p['metadata']['name']}"], pod_requests(p))
        if expected and rng.random() < 1 / 3:
            for p in gang:
                placer.take(expected[f"ml/{p['metadata']['name']}"], pod_requests(p), -1.0)


def test_a_room_changed_behind_the_placers_back_still_places_by_the_rule():
    rooms = {
        "a": {"cpu": 8.0, "nvidia.com/gpu": 2.0, "pods": 10.0},
        "b": {"cpu": 8.0, "nvidia.com/gpu": 4.0, "pods": 10.0},
        "c": {"cpu": 8.0, "nvidia.com/gpu": 3.0, "pods": 10.0},
    }
    placer = Placer(rooms, "nvidia.com/gpu")
    take(rooms["b"], {"nvidia.com/gpu": 3.0})  # b: 1 left, unknown to the placer
    placer.take("b", {"nvidia.com/gpu": 1.0}, sign=-1.0)  # b: 2, not where the order had it
    gang = [pod("w0", None, "1", 2)]
    # c has the most free GPUs; an order left stale (b first, at 4) would give b.
    assert placer.place(gang) == sorted_placement(gang, rooms, "nvidia.com/gpu") == {"ml/w0": "c"}
