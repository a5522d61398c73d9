"""The sentences of qosched.backends.local.reasons, checked against hand-written ones."""

from __future__ import annotations

import pytest

from qosched.backends.local import reasons
from qosched.backends.local.reasons import Finish

NOW = 1000.0


@pytest.mark.parametrize(
    ("guaranteed", "best_effort", "words"),
    [
        (True, True, "guaranteed"),
        (True, False, "guaranteed"),
        (False, True, "best effort"),
        (False, False, "no promise"),
    ],
)
def test_a_promise_is_one_of_three_from_the_rows_two_facts(guaranteed, best_effort, words):
    assert reasons.promise(guaranteed, best_effort) == words


@pytest.mark.parametrize(
    ("predicted", "words"),
    [
        (
            Finish(1040.0, 1036.4, 1045.2),
            "predicted to finish in 40 s (36-45 s), 80 s before its deadline (in 120 s)",
        ),
        (Finish(1130.0, 1130.0, 1130.0), "predicted to finish in 130 s, 10 s after its deadline"),
        (None, "its deadline is in 120 s"),
    ],
    ids=["in-time", "late-no-band", "unknown"],
)
def test_a_finish_is_said_against_the_deadline(predicted, words):
    assert reasons.finish(predicted, 1120.0, NOW).startswith(words)


def test_a_resize_says_both_counts_why_and_both_predicted_finishes():
    text = reasons.resized(
        2,
        1,
        "core",
        "its guaranteed plan needs 1 now; after j-000002 arrived",
        before=Finish(1040.0, 1040.0, 1040.0),
        after=Finish(1075.0, 1075.0, 1075.0),
        deadline_at=1120.0,
        now=NOW,
    )
    assert text == (
        "from 2 cores to 1: its guaranteed plan needs 1 now; after j-000002 arrived; "
        "predicted finish in 40 s -> in 75 s, deadline in 120 s"
    )


@pytest.mark.parametrize(
    ("policy_reason", "old", "new", "happened", "words"),
    [
        ("the plan", 2, 1, "after j-2 arrived", "the plan; after j-2 arrived"),
        (None, 2, 1, "after j-2 arrived", "its policy gives it fewer; after j-2 arrived"),
        (None, 1, 2, "", "its policy gives it more"),
        (None, 0, 2, "", "its policy starts it"),
        (None, 2, 0, "", "its policy gives it none"),
    ],
)
def test_a_missing_policy_reason_is_worded_from_what_changed(
    policy_reason, old, new, happened, words
):
    assert reasons.cause(policy_reason, old, new, happened) == words


@pytest.mark.parametrize(
    ("arrived", "ended", "periodic", "words"),
    [
        (["j-2"], [], False, "after j-2 arrived"),
        (["j-3", "j-2"], ["j-1"], True, "after j-2, j-3 arrived and j-1 ended"),
        (["j-1", "j-2", "j-3", "j-4"], [], False, "after j-1, j-2, j-3 and 1 more arrived"),
        ([], [], True, "at a periodic re-plan, nothing having arrived or ended"),
        ([], [], False, ""),
    ],
)
def test_what_changed_since_the_last_decision(arrived, ended, periodic, words):
    assert reasons.context(arrived, ended, periodic) == words


def test_a_stop_says_whether_it_is_a_preemption_or_a_restart_to_another_size():
    assert reasons.preempted(2, "GPU", "why") == "pre-empted, giving up its 2 GPUs: why"
    assert reasons.preempted(2, "GPU", "why", restart_to=1) == (
        "stopped to restart on 1 GPU (from 2): why"
    )


def test_an_admission_of_a_job_that_waits_says_so_and_its_deadline():
    text = reasons.admitted(
        "best effort",
        policy="qos",
        reason="2 guaranteed jobs hold the cores it would need before its deadline (in 60 s)",
        count=0,
        kind="core",
        predicted=None,
        deadline_at=1060.0,
        now=NOW,
        speed="table",
    )
    assert text == (
        "qos runs it best effort: 2 guaranteed jobs hold the cores it would need before its "
        "deadline (in 60 s); it waits, no core is free for it now; its deadline is in 60 s; "
        "speed: table"
    )


def test_a_measurement_says_its_next_size_and_the_sizes_it_measures():
    assert reasons.measuring(1, "core", (2, 1)) == (
        "measuring its speed on 1 core next (sizes to measure: 2, 1)"
    )
