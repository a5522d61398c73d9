"""The argument types shared by qosched commands: hand-picked good and bad values."""

from __future__ import annotations

import argparse

import pytest

from qosched.cli import options


@pytest.mark.parametrize(("text", "port"), [("0", 0), ("8080", 8080), ("65535", 65535)])
def test_port(text: str, port: int) -> None:
    assert options.port(text) == port


@pytest.mark.parametrize("text", ["65536", "-1", "http", "", "٣"])
def test_a_bad_port_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="port number"):
        options.port(text)


@pytest.mark.parametrize(("text", "count"), [("0", 0), ("12", 12)])
def test_count(text: str, count: int) -> None:
    assert options.count(text) == count


@pytest.mark.parametrize("text", ["-1", "1.5", "x", "", "٣"])
def test_a_bad_count_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
        options.count(text)


@pytest.mark.parametrize(("text", "value"), [("30", 30.0), ("0.5", 0.5), ("1e3", 1000.0)])
def test_seconds(text: str, value: float) -> None:
    assert options.seconds(text) == value


@pytest.mark.parametrize("text", ["0", "-5", "nan", "inf", "soon", ""])
def test_bad_seconds_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="seconds > 0"):
        options.seconds(text)


def test_deferred_imports_the_module_only_when_run() -> None:
    run = options.deferred("json", "dumps")
    assert run([1]) == "[1]"
    with pytest.raises(ModuleNotFoundError):
        options.deferred("qosched.no_such_module", "run")(argparse.Namespace())
