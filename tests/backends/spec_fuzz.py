"""Hypothesis strategies for spec fuzzing: documents shaped mostly like a TrainingJob, with any
field replaced, deleted or added, written as YAML or JSON, then optionally mutated as raw text."""

from __future__ import annotations

import copy
import json
from datetime import UTC, date, timedelta, timezone
from typing import Any

import yaml
from hypothesis import strategies as st

VALID: dict[str, Any] = {
    "apiVersion": "qosched/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "fuzz"},
    "spec": {
        "workload": "cnn",
        "work": {"iterations": 40},
        "deadline": "10m",
        "resources": {"minCpus": 1, "maxCpus": 2, "memory": "1Gi"},
        "bestEffort": True,
        "seed": 1,
        "requestedCpus": 1,
    },
}
# Where edits go: every field of the shape, plus places it does not have.
PATHS = [
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("spec",),
    ("spec", "workload"),
    ("spec", "command"),
    ("spec", "work"),
    ("spec", "work", "iterations"),
    ("spec", "work", "epochs"),
    ("spec", "deadline"),
    ("spec", "resources"),
    ("spec", "resources", "minCpus"),
    ("spec", "resources", "maxCpus"),
    ("spec", "resources", "memory"),
    ("spec", "bestEffort"),
    ("spec", "seed"),
    ("spec", "requestedCpus"),
    ("spec", "gpus"),
    ("spec", "resources", "minGpus"),
    ("spec", "resources", "maxGpus"),
    ("spec", "workingDir"),
    ("spec", "env"),
    ("spec", "env", "MY_VAR"),
    ("spec", "env", "QOSCHED_GPUS"),
    ("spec", "launcher"),
    ("spec", "logLimit"),
    ("spec", "speedKey"),
    ("extra",),
]
# Values near the edges of what the fields accept.
EDGES = [
    0, 1, -1, 2**53 - 1, 2**53, 10**400, 1e20, 12.0, 0.5, float("inf"), float("nan"),
    "10m", "0s", "1s", "9" * 400 + "s", "292277026596d", "1h30m", "10", "2026-11-30T12:00:00Z",
    "9999-12-31T23:00:00-12:00", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00+14:00",
    "2026-11-30T12:00:00", "1.5Gi", "8191Ti", "8192Ti", "1.5", "cnn", "transformer", "resnet",
    "qosched/v1", "TrainingJob", "", " ", "a\x00b", "\ud800", "<<", "true", "null",
    ["python", "-c", "pass"], [""], [], {}, ["true"],
    "torchrun", "/tmp", "relative/dir", "/no/such/dir", {"A": "1"}, {"1A": "x"}, 1024, 1025,
]  # fmt: skip
_offsets = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60 - 59, 23 * 60 + 59)
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(10**500), 10**500),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(EDGES),
    st.datetimes(timezones=st.none() | st.just(UTC) | _offsets),
    st.dates(min_value=date(1, 1, 1)),
)
_keys = st.sampled_from(["name", "iterations", "spec", "<<", "1", ""]) | st.text(max_size=6)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """VALID with a few fields set to any value, deleted, or the whole document replaced."""
    if draw(st.integers(0, 19)) == 0:
        return draw(VALUES)
    document = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(0, 4))):
        *parents, last = draw(st.sampled_from(PATHS))
        node = document
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if draw(st.booleans()) and last in node:
            del node[last]
        else:
            node[last] = draw(VALUES)
    return document


def dump(document: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(document, default=str)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


# What a raw mutation inserts: YAML syntax, and text that YAML reads as something special.
SNIPPETS = [
    "&a ", "*a", "<<: ", "!!python/object:os.system ", "!!binary ", "!!set ", "!!timestamp ",
    "[", "]", "{", "}", ": ", "- ", "? ", "|\n", ">\n", "#", "'", '"', "\\", "\t", "\n", "  ",
    "%YAML 1.1\n", "---\n", "...\n", "\x00", "\ufeff", "9" * 4400, "0x" + "f" * 20, "1:2:3",
    "2026-13-45", "2026-01-01 10:00:00+99:00", ".inf", ".nan", "~", "\ud800", "é",
]  # fmt: skip


@st.composite
def spec_texts(draw: st.DrawFn) -> str:
    """A fuzz document as YAML or JSON text, sometimes with raw edits at random places."""
    text = dump(draw(documents()), draw(st.booleans()))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        insert = draw(st.sampled_from(SNIPPETS) | st.text(max_size=3))
        cut = draw(st.integers(0, 8)) if kind != "insert" else 0
        text = text[:at] + ("" if kind == "delete" else insert) + text[at + cut :]
    return text
