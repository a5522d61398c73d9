"""The JSON contracts of docs/contracts.md: its schemas, and the check of a real output against
one (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schemas"


@cache
def schema(name: str) -> dict[str, Any]:
    """``docs/schemas/NAME.schema.json``."""
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def violations(name: str, payload: object) -> list[str]:
    """Where ``payload`` breaks schema ``name``, one line per error (empty when it holds)."""
    validator = Draft202012Validator(schema(name))
    return sorted(f"{e.json_path}: {e.message}" for e in validator.iter_errors(payload))


def assert_contract(name: str, payload: object) -> None:
    assert violations(name, payload) == []
