"""qosched.trainingjob.jobspec: reading, rejecting and round-tripping TrainingJob specs."""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from qosched.core.bounds import LATEST_TIME_S
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import (
    BUILTIN_WORKLOADS,
    ITERATIONS_PER_EPOCH,
    Deadline,
    Resources,
    TrainingJobSpec,
    format_duration,
    load_job_spec,
    parse_job_spec,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
SOURCE = "job.yaml"

VALID = """\
apiVersion: qosched/v1
kind: TrainingJob
metadata:
  name: cnn-small
spec:
  workload: cnn
  work:
    iterations: 400
  deadline: 10m
  resources:
    minCpus: 1
    maxCpus: 2
    memory: 2Gi
  bestEffort: true
  seed: 7
  requestedCpus: 2
"""

BASE: dict[str, Any] = yaml.safe_load(VALID)
DELETE = object()  # marks a key that edited() removes


def parse(text: str, **kwargs: Any) -> TrainingJobSpec:
    return parse_job_spec(text, SOURCE, now=NOW, **kwargs)


def edited(*changes: tuple[str, Any]) -> str:
    """VALID with each ``(dotted.path, value)`` set, or deleted where the value is DELETE."""
    document = copy.deepcopy(BASE)
    for path, value in changes:
        *parents, last = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return yaml.safe_dump(document, sort_keys=False)


# --- valid specs ------------------------------------------------------------------------------


def test_valid_spec_parses_to_expected_values():
    assert parse(VALID) == TrainingJobSpec(
        name="cnn-small",
        iterations=400,
        deadline=Deadline(relative_s=600),
        workload="cnn",
        command=None,
        resources=Resources(min_cpus=1, max_cpus=2, memory_bytes=2 * 1024**3),
        best_effort=True,
        seed=7,
        requested_cpus=2,
    )


def test_minimal_spec_takes_defaults():
    text = edited(
        ("spec.resources", DELETE),
        ("spec.bestEffort", DELETE),
        ("spec.seed", DELETE),
        ("spec.requestedCpus", DELETE),
    )
    spec = parse(text)
    assert spec.resources == Resources(min_cpus=1, max_cpus=None, memory_bytes=None)
    assert (spec.best_effort, spec.seed, spec.requested_cpus) == (False, 0, 1)


def test_requested_cpus_defaults_to_min_cpus():
    spec = parse(edited(("spec.resources.minCpus", 2), ("spec.requestedCpus", DELETE)))
    assert spec.requested_cpus == 2


def test_command_spec():
    text = edited(
        ("spec.workload", DELETE), ("spec.command", ["python", "train.py", "--lr", "0.1"])
    )
    spec = parse(text)
    assert (spec.workload, spec.command) == (None, ("python", "train.py", "--lr", "0.1"))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("1h30m", 5400), ("2h", 7200), ("1d2h3m4s", 93784)],
    ids=["seconds", "minutes", "hours-and-minutes", "hours", "all-units"],
)
def test_relative_deadline(text, seconds):
    spec = parse(edited(("spec.deadline", text)))
    assert spec.deadline == Deadline(relative_s=seconds)
    assert spec.deadline_at(1000.0) == 1000.0 + seconds


# 2026-11-30T12:00:00Z is 1_796_040_000 Unix seconds; +02:00 is two hours earlier in UTC.
@pytest.mark.parametrize(
    ("line", "epoch"),
    [
        ("deadline: 2026-11-30T12:00:00Z", 1_796_040_000.0),
        ("deadline: '2026-11-30T12:00:00Z'", 1_796_040_000.0),
        ("deadline: '2026-11-30T12:00:00+02:00'", 1_796_032_800.0),
        ("deadline: 2026-11-30 12:00:00.5Z", 1_796_040_000.5),
    ],
    ids=["unquoted-yaml-timestamp", "quoted-utc", "quoted-offset", "fractional-seconds"],
)
def test_absolute_deadline(line, epoch):
    spec = parse(VALID.replace("deadline: 10m", line))
    assert spec.deadline == Deadline(absolute_at=epoch)
    assert spec.deadline_at(0.0) == spec.deadline_at(NOW) == epoch


@pytest.mark.parametrize(
    ("workload", "epochs", "table", "iterations"),
    [
        ("cnn", 3, None, 3 * ITERATIONS_PER_EPOCH["cnn"]),
        ("transformer", 2, None, 2 * ITERATIONS_PER_EPOCH["transformer"]),
        ("cnn", 3, {"cnn": 7}, 21),
    ],
    ids=["cnn-default-table", "transformer-default-table", "custom-table"],
)
def test_epochs_are_converted_to_iterations(workload, epochs, table, iterations):
    text = edited(("spec.workload", workload), ("spec.work", {"epochs": epochs}))
    kwargs = {} if table is None else {"iterations_per_epoch": table}
    assert parse(text, **kwargs).iterations == iterations


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        ("2Gi", 2 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1.5Ki", 1536),
        ("1Ti", 2**40),
        ("1024", 1024),
        (1_048_576, 1_048_576),
    ],
    ids=["gi", "mi", "fractional-ki", "ti", "bytes-as-text", "bytes-as-number"],
)
def test_memory_sizes(memory, expected):
    spec = parse(edited(("spec.resources.memory", memory)))
    assert spec.resources.memory_bytes == expected


def test_builtin_workloads_each_have_an_epoch_size():
    assert set(ITERATIONS_PER_EPOCH) == set(BUILTIN_WORKLOADS)


def test_load_job_spec_reads_a_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(VALID)
    assert load_job_spec(path, now=NOW) == parse(VALID)


# --- rejections -------------------------------------------------------------------------------

# Each case: id, the document's text, the dotted field the error must name (None: the whole
# document) and a phrase the message must contain.
REJECTIONS = [
    ("not-a-mapping", "- a\n- b\n", None, "expected a mapping"),
    ("empty", "", None, "empty spec"),
    ("invalid-yaml", "spec: [1\n", None, "not valid YAML"),
    ("api-version", edited(("apiVersion", "v1")), "apiVersion", "qosched/v1"),
    ("kind", edited(("kind", "Job")), "kind", "TrainingJob"),
    ("no-metadata", edited(("metadata", DELETE)), "metadata", "required"),
    ("no-name", edited(("metadata.name", DELETE)), "metadata.name", "required"),
    (
        "name-not-string",
        edited(("metadata.name", 12)),
        "metadata.name",
        "expected a non-empty string",
    ),
    ("name-uppercase", edited(("metadata.name", "CNN")), "metadata.name", "lowercase"),
    ("name-underscore", edited(("metadata.name", "cnn_small")), "metadata.name", "lowercase"),
    ("name-leading-dash", edited(("metadata.name", "-cnn")), "metadata.name", "lowercase"),
    ("name-too-long", edited(("metadata.name", "a" * 64)), "metadata.name", "at most 63"),
    ("no-spec", edited(("spec", DELETE)), "spec", "required"),
    (
        "workload-and-command",
        edited(("spec.command", ["python", "train.py"])),
        "spec.command",
        "got both",
    ),
    ("no-workload-or-command", edited(("spec.workload", DELETE)), "spec.workload", "neither"),
    ("unknown-workload", edited(("spec.workload", "resnet")), "spec.workload", "cnn, transformer"),
    (
        "command-empty",
        edited(("spec.workload", DELETE), ("spec.command", [])),
        "spec.command",
        "non-empty list",
    ),
    (
        "command-string",
        edited(("spec.workload", DELETE), ("spec.command", "python train.py")),
        "spec.command",
        "non-empty list",
    ),
    (
        "command-number-item",
        edited(("spec.workload", DELETE), ("spec.command", ["python", 0.1])),
        "spec.command[1]",
        "expected a string",
    ),
    (
        "command-empty-program",
        edited(("spec.workload", DELETE), ("spec.command", ["", "x"])),
        "spec.command[0]",
        "program",
    ),
    ("no-work", edited(("spec.work", DELETE)), "spec.work", "required"),
    ("work-empty", edited(("spec.work", {})), "spec.work.iterations", "neither"),
    ("iterations-zero", edited(("spec.work.iterations", 0)), "spec.work.iterations", ">= 1"),
    ("iterations-text", edited(("spec.work.iterations", "400")), "spec.work.iterations", "'400'"),
    ("iterations-bool", edited(("spec.work.iterations", True)), "spec.work.iterations", "true"),
    ("iterations-float", edited(("spec.work.iterations", 4.5)), "spec.work.iterations", "4.5"),
    (
        "iterations-and-epochs",
        edited(("spec.work.epochs", 2)),
        "spec.work.iterations",
        "got both",
    ),
    ("epochs-zero", edited(("spec.work", {"epochs": 0})), "spec.work.epochs", ">= 1"),
    (
        "epochs-with-command",
        edited(("spec.workload", DELETE), ("spec.command", ["x"]), ("spec.work", {"epochs": 2})),
        "spec.work.epochs",
        "built-in workload",
    ),
    ("no-deadline", edited(("spec.deadline", DELETE)), "spec.deadline", "required"),
    ("deadline-bare-number", edited(("spec.deadline", 600)), "spec.deadline", "'600s'"),
    ("deadline-no-unit", edited(("spec.deadline", "10")), "spec.deadline", "duration"),
    ("deadline-words", edited(("spec.deadline", "10 minutes")), "spec.deadline", "duration"),
    ("deadline-months-unit", edited(("spec.deadline", "10M")), "spec.deadline", "duration"),
    ("deadline-zero", edited(("spec.deadline", "0s")), "spec.deadline", "at least 1s"),
    (
        "deadline-past",
        edited(("spec.deadline", "2025-12-31T23:59:59Z")),
        "spec.deadline",
        "not in the future",
    ),
    (
        "deadline-now",
        edited(("spec.deadline", "2026-01-01T00:00:00Z")),
        "spec.deadline",
        "not in the future",
    ),
    (
        "deadline-no-timezone",
        edited(("spec.deadline", "2026-11-30T12:00:00")),
        "spec.deadline",
        "no timezone",
    ),
    (
        "deadline-unquoted-no-timezone",
        VALID.replace("deadline: 10m", "deadline: 2026-11-30T12:00:00"),
        "spec.deadline",
        "no timezone",
    ),
    (
        "deadline-unquoted-date",
        VALID.replace("deadline: 10m", "deadline: 2026-11-30"),
        "spec.deadline",
        "ISO-8601",
    ),
    (
        "min-above-max",
        edited(("spec.resources.minCpus", 3), ("spec.requestedCpus", 3)),
        "spec.resources.minCpus",
        "maxCpus (2)",
    ),
    ("min-cpus-zero", edited(("spec.resources.minCpus", 0)), "spec.resources.minCpus", ">= 1"),
    ("max-cpus-negative", edited(("spec.resources.maxCpus", -1)), "spec.resources.maxCpus", ">= 1"),
    ("min-cpus-bool", edited(("spec.resources.minCpus", True)), "spec.resources.minCpus", "true"),
    ("resources-list", edited(("spec.resources", [1, 2])), "spec.resources", "a mapping"),
    (
        "memory-decimal-unit",
        edited(("spec.resources.memory", "2GB")),
        "spec.resources.memory",
        "Gi",
    ),
    ("memory-zero", edited(("spec.resources.memory", 0)), "spec.resources.memory", "Gi"),
    ("memory-negative", edited(("spec.resources.memory", -5)), "spec.resources.memory", "Gi"),
    (
        "memory-half-byte",
        edited(("spec.resources.memory", "1.5")),
        "spec.resources.memory",
        "whole",
    ),
    ("memory-bool", edited(("spec.resources.memory", True)), "spec.resources.memory", "true"),
    ("requested-zero", edited(("spec.requestedCpus", 0)), "spec.requestedCpus", ">= 1"),
    ("requested-above-max", edited(("spec.requestedCpus", 5)), "spec.requestedCpus", "1..2"),
    ("best-effort-text", edited(("spec.bestEffort", "yes")), "spec.bestEffort", "true or false"),
    ("seed-negative", edited(("spec.seed", -1)), "spec.seed", ">= 0"),
    ("seed-text", edited(("spec.seed", "0")), "spec.seed", "'0'"),
    (
        "typo-top-level",
        edited(("metdata", {"name": "x"})),
        "metdata",
        "did you mean 'metadata'?",
    ),
    ("typo-spec", edited(("spec.deadlin", "5m")), "spec.deadlin", "did you mean 'deadline'?"),
    (
        "typo-resources-case",
        edited(("spec.resources.mincpus", 1)),
        "spec.resources.mincpus",
        "did you mean 'minCpus'?",
    ),
    (
        "typo-work",
        edited(("spec.work", {"iteration": 4})),
        "spec.work.iteration",
        "did you mean 'iterations'?",
    ),
    ("unknown-metadata-key", edited(("metadata.labels", {})), "metadata.labels", "unknown key"),
    ("non-string-key", VALID.replace("  seed: 7", "  7: seed"), "spec", "keys must be strings"),
    (
        "duplicate-key",
        VALID.replace("  seed: 7", "  seed: 7\n  seed: 8"),
        "spec.seed",
        "duplicate key",
    ),
]


@pytest.mark.parametrize(
    ("text", "field", "phrase"),
    [case[1:] for case in REJECTIONS],
    ids=[case[0] for case in REJECTIONS],
)
def test_rejections_name_the_field(text, field, phrase):
    with pytest.raises(InputError) as caught:
        parse(text)
    error = caught.value
    assert error.source == SOURCE
    assert error.field == field
    message = str(error)
    assert message.startswith(SOURCE)
    if field is not None:
        assert f"field {field!r}" in message
    assert phrase in message


DAYS_LEFT = int(LATEST_TIME_S - NOW) // 86_400  # whole days from NOW to the end of year 9999

# Each case: id, the document's text, the field named, a phrase of the message. Before the shared
# reader, each of these passed parsing (and broke the service later) or raised another exception.
OUT_OF_BOUNDS = [
    ("iterations-401-digits", edited(("spec.work.iterations", 10**400)), "spec.work.iterations",
     "below 2**53"),
    ("iterations-2^53", edited(("spec.work.iterations", 2**53)), "spec.work.iterations",
     "below 2**53"),
    ("epochs-times-size", edited(("spec.work", {"epochs": 2**50})), "spec.work.epochs",
     "fewer than 2**53"),
    ("seed-2^53", edited(("spec.seed", 2**53)), "spec.seed", "below 2**53"),
    ("max-cpus-2^53", edited(("spec.resources.maxCpus", 2**53)), "spec.resources.maxCpus",
     "below 2**53"),
    ("memory-2^53", edited(("spec.resources.memory", 2**53)), "spec.resources.memory",
     "below 2**53"),
    ("memory-huge-ti", edited(("spec.resources.memory", "99999999Ti")), "spec.resources.memory",
     "below 2**53"),
    ("deadline-400-digits", edited(("spec.deadline", "9" * 400 + "s")), "spec.deadline",
     "end of year 9999 UTC"),
    ("deadline-past-9999-from-now", edited(("spec.deadline", f"{DAYS_LEFT + 1}d")),
     "spec.deadline", "end of year 9999 UTC"),
    ("deadline-offset-past-9999",
     VALID.replace("deadline: 10m", "deadline: 9999-12-31T23:00:00-12:00"), "spec.deadline",
     "outside 1970..9999 UTC"),
    ("deadline-offset-past-9999-quoted",
     VALID.replace("deadline: 10m", "deadline: '9999-12-31T23:00:00-12:00'"), "spec.deadline",
     "outside 1970..9999 UTC"),
    ("command-nul", edited(("spec.workload", DELETE), ("spec.command", ["python", "a\x00b"])),
     "spec.command[1]", "NUL"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "field", "phrase"),
    [case[1:] for case in OUT_OF_BOUNDS],
    ids=[case[0] for case in OUT_OF_BOUNDS],
)
def test_values_out_of_bounds_are_refused_naming_the_field(text, field, phrase):
    with pytest.raises(InputError) as caught:
        parse(text)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{SOURCE}:")
    assert phrase in str(caught.value)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        (VALID.replace("seed: 7", "seed: &s 7\n  requestedCpus: *s").replace(
            "  requestedCpus: 2\n", ""), "anchors and aliases"),
        (VALID + "extra: &x [*x]\n", "anchors and aliases"),
        (VALID.replace("seed: 7", "seed: " + "[" * 5000 + "]" * 5000), "nest"),
        ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
         "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
         "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
         "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
         "anchors and aliases"),
    ],
    ids=["alias", "recursive-alias", "5000-deep", "laughs"],
)  # fmt: skip
def test_yaml_that_could_blow_up_is_refused_naming_the_file(text, phrase):
    with pytest.raises(InputError, match=phrase) as caught:
        parse(text)
    assert caught.value.source == SOURCE


def test_the_largest_counts_are_accepted():
    spec = parse(
        edited(
            ("spec.work.iterations", 2**53 - 1),
            ("spec.seed", 2**53 - 1),
            ("spec.resources.maxCpus", 2**53 - 1),
            ("spec.resources.memory", "8191Ti"),
        )
    )
    assert (spec.iterations, spec.seed, spec.resources.max_cpus) == (2**53 - 1,) * 3


def test_a_relative_deadline_may_end_in_the_last_second_of_9999():
    latest = int(LATEST_TIME_S - NOW)
    spec = parse(edited(("spec.deadline", f"{latest}s")))
    assert spec.deadline_at(NOW) == LATEST_TIME_S
    with pytest.raises(InputError, match="year 9999"):
        parse(edited(("spec.deadline", f"{latest + 1}s")))


@pytest.mark.parametrize(
    ("old", "new", "field", "line"),
    [
        ("  deadline: 10m", "  deadlin: 10m", "spec.deadlin", 9),
        ("    maxCpus: 2", "    maxCpus: 0", "spec.resources.maxCpus", 12),
        ("  name: cnn-small", "  nme: cnn-small", "metadata.nme", 4),
        ("  work:\n    iterations: 400\n", "  work: {}\n", "spec.work.iterations", 7),
    ],
    ids=["unknown-key", "bad-value", "typo-in-metadata", "missing-key-points-at-parent"],
)
def test_rejections_give_the_yaml_line(old, new, field, line):
    with pytest.raises(InputError) as caught:
        parse(VALID.replace(old, new))
    assert (caught.value.field, caught.value.line) == (field, line)
    assert str(caught.value).startswith(f"{SOURCE}:{line}: field {field!r}")


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(InputError, match=r"valid keys: minCpus, maxCpus, memory"):
        parse(edited(("spec.resources.gpus", 1)))


def test_load_job_spec_missing_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(InputError, match="cannot read job spec") as caught:
        load_job_spec(path)
    assert caught.value.source == str(path)


def test_load_job_spec_uses_the_clock_when_now_is_not_given(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(edited(("spec.deadline", "2000-01-01T00:00:00Z")))
    with pytest.raises(InputError, match="not in the future"):
        load_job_spec(path)


@pytest.mark.parametrize(
    "build",
    [
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1)),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), workload="cnn", command=("x",)),
        lambda: TrainingJobSpec("a", 0, Deadline(relative_s=1), workload="cnn"),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), workload="resnet"),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), workload="cnn", requested_cpus=0),
        lambda: Deadline(),
        lambda: Deadline(relative_s=5, absolute_at=5.0),
        lambda: Resources(min_cpus=2, max_cpus=1),
        lambda: TrainingJobSpec("a", 2**53, Deadline(relative_s=1), workload="cnn"),
        lambda: TrainingJobSpec("a", 10**400, Deadline(relative_s=1), workload="cnn"),
        lambda: TrainingJobSpec("a", True, Deadline(relative_s=1), workload="cnn"),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), workload="cnn", seed=2**53),
        lambda: TrainingJobSpec("a", 1, Deadline(relative_s=1), command=("x", "a\x00")),
        lambda: Deadline(relative_s=10**400),
        lambda: Deadline(absolute_at=math.inf),
        lambda: Deadline(absolute_at=LATEST_TIME_S + 1),
        lambda: Deadline(absolute_at=-1.0),
        lambda: Deadline(relative_s=int(LATEST_TIME_S)).at(NOW),
        lambda: Resources(memory_bytes=2**53),
        lambda: Resources(min_cpus=2**53),
    ],
    ids=[
        "no-program",
        "two-programs",
        "no-iterations",
        "unknown-workload",
        "requested-below-min",
        "no-deadline",
        "two-deadlines",
        "min-above-max",
        "iterations-2^53",
        "iterations-401-digits",
        "iterations-bool",
        "seed-2^53",
        "command-nul",
        "relative-401-digits",
        "absolute-inf",
        "absolute-past-9999",
        "absolute-before-1970",
        "relative-ends-past-9999",
        "memory-2^53",
        "min-cpus-2^53",
    ],
)
def test_constructors_check_their_invariants(build):
    with pytest.raises(InputError):
        build()


def test_whole_floats_built_in_code_are_stored_as_ints():
    spec = TrainingJobSpec(
        "a",
        12.0,
        Deadline(relative_s=60.0),
        workload="cnn",
        resources=Resources(min_cpus=2.0, max_cpus=4.0, memory_bytes=1024.0),
        seed=3.0,
        requested_cpus=2.0,
    )
    numbers = (spec.iterations, spec.deadline.relative_s, spec.seed, spec.requested_cpus)
    assert numbers == (12, 60, 3, 2) and all(type(n) is int for n in numbers)
    assert spec.to_dict()["spec"]["deadline"] == "1m"
    assert spec.resources == Resources(min_cpus=2, max_cpus=4, memory_bytes=1024)


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1, "1s"), (90, "1m30s"), (3600, "1h"), (5400, "1h30m"), (86_401, "1d1s")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_to_dict_is_the_spec_file_shape():
    assert parse(VALID).to_dict() == {
        "apiVersion": "qosched/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "cnn-small"},
        "spec": {
            "workload": "cnn",
            "work": {"iterations": 400},
            "deadline": "10m",
            "resources": {"minCpus": 1, "maxCpus": 2, "memory": 2 * 1024**3},
            "bestEffort": True,
            "seed": 7,
            "requestedCpus": 2,
        },
    }


def test_from_dict_accepts_a_deadline_that_has_passed():
    spec = parse(edited(("spec.deadline", "2026-06-01T00:00:00Z")))
    stored = spec.to_dict()
    assert TrainingJobSpec.from_dict(stored) == spec  # from_dict has no notion of "now"


def test_from_dict_errors_name_the_source():
    stored = parse(VALID).to_dict()
    stored["spec"]["seed"] = -1
    with pytest.raises(InputError, match=r"^jobs\.db: job j-1: field 'spec\.seed'"):
        TrainingJobSpec.from_dict(stored, source="jobs.db: job j-1")


_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
# Text a command line can carry: no NUL, no lone surrogate (the spec refuses both).
_arg_chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
_args = st.lists(st.text(_arg_chars, min_size=1, max_size=8), min_size=0, max_size=3)
_programs = st.one_of(
    st.tuples(st.sampled_from(BUILTIN_WORKLOADS), st.none()),
    st.tuples(st.none(), st.builds(lambda head, rest: (head, *rest), st.just("python"), _args)),
)
_deadlines = st.one_of(
    st.builds(Deadline, relative_s=st.integers(1, 10**7)),
    st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ).map(lambda moment: Deadline(absolute_at=moment.timestamp())),
)


@st.composite
def _specs(draw: st.DrawFn) -> TrainingJobSpec:
    workload, command = draw(_programs)
    min_cpus = draw(st.integers(1, 8))
    max_cpus = draw(st.one_of(st.none(), st.integers(min_cpus, 16)))
    requested = draw(st.integers(min_cpus, max_cpus if max_cpus is not None else 32))
    return TrainingJobSpec(
        name=draw(_names),
        iterations=draw(st.integers(1, 10**9)),
        deadline=draw(_deadlines),
        workload=workload,
        command=command,
        resources=Resources(
            min_cpus=min_cpus,
            max_cpus=max_cpus,
            memory_bytes=draw(st.one_of(st.none(), st.integers(1, 2**45))),
        ),
        best_effort=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32)),
        requested_cpus=requested,
    )


@given(_specs())
def test_round_trip_through_json(spec):
    assert TrainingJobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.slow
@given(_specs())
def test_round_trip_through_a_yaml_file(spec):
    text = yaml.safe_dump(spec.to_dict())
    assert parse_job_spec(text, Path("stored.yaml"), now=0.0) == spec


def test_absolute_deadline_is_written_in_utc():
    spec = parse(VALID.replace("deadline: 10m", "deadline: '2026-11-30T14:00:00+02:00'"))
    assert spec.to_dict()["spec"]["deadline"] == "2026-11-30T12:00:00+00:00"
    assert datetime.fromisoformat(spec.deadline.to_text()) - datetime(
        2026, 11, 30, 12, tzinfo=UTC
    ) == timedelta(0)
