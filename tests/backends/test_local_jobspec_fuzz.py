"""Property-based fuzz of the TrainingJob spec parser: every input is a spec or an InputError."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_fuzz import documents, dump, spec_texts

from qosched.core.bounds import COUNT_LIMIT, LATEST_TIME_S
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import TrainingJobSpec, parse_job_spec

NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_refuse(text: str) -> TrainingJobSpec | None:
    """The spec, or None for an InputError; any other exception fails the test."""
    try:
        return parse_job_spec(text, "fuzz.yaml", now=NOW)
    except InputError as error:
        assert error.source == "fuzz.yaml"
        assert str(error).startswith("fuzz.yaml")
        return None


def check_accepted(spec: TrainingJobSpec) -> None:
    assert 1 <= spec.iterations < COUNT_LIMIT
    assert 0 <= spec.seed < COUNT_LIMIT
    assert NOW < spec.deadline_at(NOW) <= LATEST_TIME_S
    # What the parser accepts, the store can keep and read back.
    assert TrainingJobSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.slow
@given(documents(), st.booleans())
@FUZZ
def test_documents_parse_to_a_spec_or_an_input_error(document, as_json):
    spec = parse_or_refuse(dump(document, as_json))
    if spec is not None:
        check_accepted(spec)


@pytest.mark.slow
@given(spec_texts())
@FUZZ
def test_mutated_text_parses_to_a_spec_or_an_input_error(text):
    spec = parse_or_refuse(text)
    if spec is not None:
        check_accepted(spec)
