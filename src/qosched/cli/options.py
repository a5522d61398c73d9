"""What several ``qosched`` commands share when their parsers are built: argument types (each
turns one command-line value into a checked Python value or raises
``argparse.ArgumentTypeError``, a usage error naming the flag), and ``deferred`` run functions.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable


def deferred(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A command's run function that imports ``module`` only when the command runs, so that
    building the parser (``--help`` included) never pays for what the command needs."""

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), function)(args)

    run.__qualname__ = f"deferred({module}:{function})"
    return run


def cpu_list(text: str) -> tuple[int, ...]:
    """``0,1`` or ``0-3,6`` -> sorted core ids; duplicates and reversed ranges are errors."""
    cores: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if not _digits(low) or (dash and not _digits(high)):
            raise argparse.ArgumentTypeError(f"expected core ids like 0,1 or 0-3,6, got {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
        cores.extend(range(first, last + 1))
    duplicates = sorted({core for core in cores if cores.count(core) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(f"cores listed twice: {duplicates}")
    return tuple(sorted(cores))


def port(text: str) -> int:
    if not _digits(text) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, got {text!r}")
    return int(text)


def count(text: str) -> int:
    if not _digits(text):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """A finite duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def _digits(text: str) -> bool:
    # ASCII only: str.isdecimal() also accepts other scripts' digits ("٣"), which int() reads.
    return text.isascii() and text.isdecimal()
