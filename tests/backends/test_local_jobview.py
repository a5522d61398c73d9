"""The API's job contract: ``JobView`` and ``JobDetail`` read back what they write, and a body
that is not one is an ``InputError`` naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from service_fakes import make_job

from qosched.backends.local.client import Client
from qosched.backends.local.jobview import (
    EventView,
    HeldAllocation,
    JobDetail,
    JobView,
    Outcome,
)
from qosched.core.errors import InputError, QoschedError

# A job's JSON as the API has always sent it, written out by hand.
WIRE: dict[str, Any] = {
    "id": "j-000007",
    "name": "resnet",
    "state": "running",
    "submitted_at": 100.0,
    "deadline_at": 700,
    "started_at": 105.5,
    "finished_at": None,
    "iterations": 400,
    "iterations_done": 120,
    "cpus": [2, 3],
    "gpus": [],
    "predicted_finish_at": 650.0,
    "predicted_finish_band": [600.0, 690.0],
    "best_effort": False,
    "guaranteed": True,
    "attempts": 1,
    "error": None,
    "speed_source": "measured now",
}


def test_a_job_reads_and_writes_the_wire_json_unchanged() -> None:
    job = JobView.from_json(json.loads(json.dumps(WIRE)))
    assert (job.id, job.state, job.cpus, job.predicted_finish_band) == (
        "j-000007",
        "running",
        (2, 3),
        (600.0, 690.0),
    )
    assert json.dumps(job.to_json()) == json.dumps(WIRE)  # same keys, order and numbers


def test_a_job_from_a_service_without_speed_source_reads_as_none() -> None:
    older = {k: v for k, v in WIRE.items() if k != "speed_source"}
    assert JobView.from_json(older).speed_source is None
    with pytest.raises(InputError, match="speed_source"):
        JobView.from_json({**WIRE, "speed_source": "x" * 201})


def test_a_detail_is_the_job_with_its_history_events_and_slack() -> None:
    wire = {
        **WIRE,
        "allocations": [{"from": 105.5, "until": None, "cpus": [2, 3], "gpus": []}],
        "events": [{"t": 100.0, "kind": "submitted", "detail": {"name": "resnet"}}],
        "slack_s": 50.0,
    }
    detail = JobDetail.from_json(wire)
    assert detail.allocations == (HeldAllocation(105.5, None, (2, 3), ()),)
    assert detail.events == (EventView(100.0, "submitted", {"name": "resnet"}),)
    assert detail.job.id == "j-000007" and detail.slack_s == 50.0
    assert detail.to_json() == wire


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"state": None}, "state"),
        ({"id": 7}, "id"),
        ({"id": ""}, "id"),
        ({"iterations_done": -1}, "iterations_done"),
        ({"iterations_done": True}, "iterations_done"),
        ({"iterations": 2**53}, "iterations"),
        ({"cpus": "0-1"}, "cpus"),
        ({"cpus": [0, "1"]}, "cpus"),
        ({"submitted_at": "yesterday"}, "submitted_at"),
        ({"deadline_at": None}, "deadline_at"),
        ({"started_at": -5.0}, "started_at"),
        ({"predicted_finish_band": [1.0]}, "predicted_finish_band"),
        ({"predicted_finish_band": [1.0, "x"]}, "predicted_finish_band"),
        ({"guaranteed": 1}, "guaranteed"),
        ({"error": ["no"]}, "error"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_bad_field_is_an_input_error_naming_it(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as caught:
        JobView.from_json({**WIRE, **change}, "GET /jobs/j-000007")
    assert caught.value.field == field
    assert caught.value.source == "GET /jobs/j-000007"


#: Fields added after the first services, read as unknown when absent.
ADDED_LATER = {"speed_source"}


@pytest.mark.parametrize("missing", sorted(set(WIRE) - ADDED_LATER))
def test_a_missing_field_is_an_input_error_naming_it(missing: str) -> None:
    body = {key: value for key, value in WIRE.items() if key != missing}
    with pytest.raises(InputError, match="missing") as caught:
        JobView.from_json(body)
    assert caught.value.field == missing


@pytest.mark.parametrize("body", [None, [], "j-1", 3])
def test_a_body_that_is_not_an_object_is_an_input_error(body: Any) -> None:
    with pytest.raises(InputError, match="expected a JSON object"):
        JobView.from_json(body)


def test_a_bad_allocation_in_a_detail_is_named_by_its_index() -> None:
    wire = {
        **WIRE,
        "allocations": [{"from": 1.0, "until": None, "cpus": [0], "gpus": []}, {"from": 2.0}],
        "events": [],
        "slack_s": None,
    }
    with pytest.raises(InputError) as caught:
        JobDetail.from_json(wire)
    assert caught.value.field == "allocations[1].until"


@pytest.mark.parametrize(
    ("state", "finished_at", "outcome"),
    [
        ("succeeded", 600.0, Outcome.MET),  # on the deadline is in time
        ("succeeded", 600.5, Outcome.MISSED),
        ("failed", 10.0, Outcome.FAILED),
        ("cancelled", 10.0, Outcome.CANCELLED),
        ("declined", 0.0, Outcome.DECLINED),
        ("queued", None, None),
        ("running", None, None),
        ("preempted", None, None),
    ],
)
def test_outcome_of_a_job(state: str, finished_at: float | None, outcome: Outcome | None) -> None:
    job = make_job(state=state, deadline_at=600.0, finished_at=finished_at)
    assert job.outcome is outcome
    assert job.finished is (outcome is not None)


def test_a_client_reports_a_bad_answer_as_the_services_fault_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = Client("http://127.0.0.1:9", "token")
    body = {key: value for key, value in WIRE.items() if key != "state"}
    monkeypatch.setattr(client, "_json", lambda method, path, **kwargs: body)
    with pytest.raises(QoschedError, match=r"cannot be read: .*state") as caught:
        client.job("j-000007")
    assert not isinstance(caught.value, InputError)  # not the user's input
    monkeypatch.setattr(client, "_json", lambda method, path, **kwargs: [WIRE, {"id": 1}])
    with pytest.raises(QoschedError, match="job 1"):
        client.jobs()
