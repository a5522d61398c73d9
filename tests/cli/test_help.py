"""Every ``qosched`` command's help: plain text (no reST markup from docstrings), a help line for
every argument, and the top-level list (built without importing the commands) saying what each
command says of itself."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from qosched.cli.main import COMMANDS, HELP, build_parser, command_of
from qosched.core.errors import QoschedError

#: reST that docstrings carry and a terminal shows raw: inline literals, roles (``:func:`x```,
#: ``:py:meth:`y```), hyperlink references and directives. A command quoted in single backticks
#: (`qosched up`) reads as plain text and is allowed.
MARKUP = re.compile(r"``|:[a-z][\w+-]*(?::[a-z][\w+-]*)?:`|`_\b|`__|^\s*\.\. [\w-]+::", re.M)


def command_parser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``parser`` and every sub-command parser under it, with their command paths."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


def every_parser() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return [found for name in COMMANDS for found in walk(command_parser(name), (name,))]


def texts(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield from (t for t in (parser.description, parser.epilog) if t)
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            yield action.help
        if isinstance(action, argparse._SubParsersAction):
            yield from (choice.help for choice in action._choices_actions if choice.help)


PARSERS = every_parser()
IDS = [" ".join(path) for path, _ in PARSERS]


@pytest.mark.parametrize(
    ("text", "markup"),
    [
        ("see :func:`add_gpu_group`", True),
        ("see :py:meth:`Registry.create`", True),
        ("the ``--json`` object", True),
        ("see `the docs`_ for more", True),
        ("intro\n.. note:: careful", True),
        ("apply them with `qosched k8s manifests`", False),
        ("speed x workers**normal(0, SIGMA)", False),
        ("default: ~/.cache/qosched/op_profile.json", False),
        ("seconds (default: 5); 0 = none", False),
    ],
)
def test_markup_is_told_from_plain_text(text: str, markup: bool) -> None:
    assert bool(MARKUP.search(text)) is markup


def test_the_walk_reaches_every_level_of_commands() -> None:
    assert {"sim cluster", "trace import", "infer run", "gpu estimate", "k8s manifests"} <= set(IDS)


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=IDS)
def test_help_is_plain_text(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
    assert [text for text in texts(parser) if MARKUP.search(text)] == []
    parser.format_help()  # and it renders (a bad %-format in a help line raises here)


@pytest.mark.parametrize(("path", "parser"), PARSERS, ids=IDS)
def test_every_argument_has_a_help_line(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    missing = {
        (*path, action.option_strings[0] if action.option_strings else action.dest)
        for action in parser._actions
        if not action.help and not isinstance(action, argparse._SubParsersAction)
    }
    assert missing == set()


@pytest.mark.parametrize("name", COMMANDS)
def test_the_top_level_list_says_what_the_command_says(name: str) -> None:
    parser = build_parser(name)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    assert helps[name] == HELP[name]


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        ([], None),
        (["--help"], None),
        (["status"], "status"),
        (["--version", "status"], "status"),
        (["gpu", "sim", "spec.yaml"], "gpu"),
        (["-h", "logs", "j-1"], "logs"),
    ],
)
def test_command_of_finds_the_first_argument_that_is_not_an_option(
    argv: list[str], command: str | None
) -> None:
    assert command_of(argv) == command


def test_an_unbuilt_command_is_listed_but_cannot_run() -> None:
    args = build_parser(None).parse_args(["status"])
    with pytest.raises(QoschedError, match="without being built"):
        args.run(args)


# --- demo --cpus ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cores"), [("0-1", (0, 1)), ("0,1", (0, 1)), ("1", (1,)), ("0-2,5", (0, 1, 2, 5))]
)
def test_demo_cpus_takes_lists_and_ranges(text: str, cores: tuple[int, ...]) -> None:
    assert command_parser("demo").parse_args(["--cpus", text]).cpus == cores


def test_a_bad_demo_cpus_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from qosched.cli.main import main

    with pytest.raises(SystemExit) as caught:
        main(["demo", "--cpus", "0-x"])
    assert caught.value.code == 2
    assert "--cpus: expected core ids like 0,1 or 0-3,6" in capsys.readouterr().err


def test_demo_on_cores_this_process_may_not_use_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from qosched.cli.main import main

    assert main(["demo", "--cpus", "4096-4097"]) == 2
    err = capsys.readouterr().err
    assert "field 'cpus': cores [4096, 4097] are not available here" in err
    assert "Traceback" not in err
